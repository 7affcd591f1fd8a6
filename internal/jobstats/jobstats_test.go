package jobstats

import (
	"strings"
	"testing"
	"time"
)

func TestStats(t *testing.T) {
	s := New(2)
	clock := time.Unix(1700000000, 0)
	s.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	s.Add("dd.0", "write_bytes", "bytes", 4096)
	s.Add("dd.0", "write_bytes", "bytes", 1<<20)
	s.Add("", "write_bytes", "bytes", 1)
	s.Add("cp.1000", "read_bytes", "bytes", 10)
	got := s.Get("dd.0")["write_bytes"]
	if got.Samples != 2 || got.Min != 4096 || got.Max != 1<<20 || got.Sum != 4096+1<<20 {
		t.Fatalf("dd.0 write_bytes %+v", got)
	}
	y := s.YAML("read_bytes", "write_bytes")
	for _, want := range []string{"job_stats:\n- job_id:          cp.1000\n", "  write_bytes:     { samples: 2, unit: bytes, min: 4096, max: 1048576, sum: 1052672 }",
		"  read_bytes:      { samples: 0, unit: bytes, min: 0, max: 0, sum: 0 }"} {
		if !strings.Contains(y, want) {
			t.Fatalf("YAML lacks %q:\n%s", want, y)
		}
	}
	// The cap: a third job pushes out the one seen least recently (dd.0).
	s.Add("tar.0", "write_bytes", "bytes", 1)
	if s.Get("dd.0") != nil || s.Get("cp.1000") == nil || s.Get("tar.0") == nil {
		t.Fatalf("after the cap: %s", s.YAML())
	}
	s.Clear()
	if s.YAML() != "job_stats:\n" {
		t.Fatalf("after clear: %q", s.YAML())
	}
}
