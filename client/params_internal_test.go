package client

import "testing"

// TestParseMBSuffixes: max_cached_mb takes what the other size
// parameters take (params.ParseSize): unit suffixes relative to MiB, and
// its own get_param line echoed back.
func TestParseMBSuffixes(t *testing.T) {
	for v, want := range map[string]int{"4G": 4096, "512m": 512, "128": 128, "max_cached_mb: 64": 64, "100K": -1, "0": -1, "x": -1} {
		n, err := parseMB(v)
		if want < 0 && err == nil || want >= 0 && (err != nil || n != want) {
			t.Errorf("parseMB(%q) = %d, %v; want %d", v, n, err, want)
		}
	}
}
