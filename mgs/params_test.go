package mgs

import "testing"

// TestNormalizeSizeSuffixes: a persistent size parameter (set_param -P
// osc.*.max_dirty_mb=1G) takes the unit suffixes the live one takes and is
// stored in its own unit; other integers take none.
func TestNormalizeSizeSuffixes(t *testing.T) {
	for _, tc := range []struct {
		name, value, want string // want "" refused
	}{
		{"nacre.OST0000.osc.max_dirty_mb", "1G", "1024"},
		{"nacre.OST0000.osc.max_dirty_mb", "512m", "512"},
		{"nacre.OST0000.osc.max_dirty_mb", "100K", ""},
		{"nacre.OST0000.osc.max_dirty_mb", "4G", ""}, // above 2048
		{"nacre.OST0000.osc.max_dirty_mb", "64", "64"},
		{"nacre.client.llite.max_cached_mb", "2g", "2048"},
		{"nacre.sys.at_max", "1K", ""},
	} {
		pn, err := ParseParamName(tc.name)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := pn.Spec.NormalizeValue(tc.value)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%s=%s: normalized to %q, want refused", tc.name, tc.value, got)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("%s=%s: %q, %v; want %q", tc.name, tc.value, got, err, tc.want)
		}
	}
}
