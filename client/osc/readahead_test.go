package osc

import (
	"fmt"
	"testing"
)

func TestReadAheadPatterns(t *testing.T) {
	const mib = 1 << 20
	type read struct {
		off, n uint64
		want   string // the extents read ahead, as fmt prints them
	}
	tests := []struct {
		name   string
		max    uint64
		reads  []read
		window uint64 // after the last read
	}{
		{"first read reads nothing ahead", 16 * mib, []read{{0, 4096, "[]"}}, 0},
		{"sequential from the second read, window doubling", 16 * mib, []read{
			{0, mib, "[]"},
			{mib, mib, "[{2097152 6291456}]"},       // 4 MiB ahead
			{2 * mib, mib, "[{6291456 11534336}]"},  // 3 MiB ahead, under half the 8 MiB window
			{3 * mib, mib, "[{11534336 20971520}]"}, // 7 MiB ahead, under half of 16 MiB
			{4 * mib, mib, "[]"},                    // 15 MiB ahead: enough
		}, 16 * mib},
		{"small sequential reads within a page", 16 * mib, []read{
			{0, 100, "[]"}, {100, 100, "[{4096 1052672}]"}, {200, 100, "[]"},
		}, 2 * mib},
		{"random reads reset", 16 * mib, []read{
			{0, mib, "[]"}, {mib, mib, "[{2097152 6291456}]"}, {50 * mib, 4096, "[]"}, {10 * mib, 4096, "[]"},
		}, 0},
		{"reads overtaking each other keep the pattern", 16 * mib, []read{
			{0, mib, "[]"}, {mib, mib, "[{2097152 6291456}]"},
			{3 * mib, mib, "[{6291456 12582912}]"}, // 2 MiB comes later
			{2 * mib, mib, "[]"},                   // inside what is read ahead
			{4 * mib, mib, "[{12582912 22020096}]"},
		}, 16 * mib},
		{"random reads after a sequential run reset", 16 * mib, []read{
			{0, mib, "[]"}, {mib, mib, "[{2097152 6291456}]"}, {2 * mib, mib, "[{6291456 11534336}]"},
			{9 * mib, 4096, "[]"}, // inside what is read ahead, 7 MiB on
			{mib, 4096, "[]"},
			{14 * mib, 4096, "[]"},
		}, 0},
		{"a read far behind resets", 16 * mib, []read{
			{20 * mib, mib, "[]"}, {21 * mib, mib, "[{23068672 27262976}]"}, {2 * mib, mib, "[]"},
			{3 * mib, mib, "[{4194304 8388608}]"}, // a new stream from the second read
		}, 8 * mib},
		{"the window stops at the maximum", 2 * mib, []read{
			{0, mib, "[]"}, {mib, mib, "[{2097152 4194304}]"}, {2 * mib, mib, "[]"}, {3 * mib, mib, "[{4194304 6291456}]"},
		}, 2 * mib},
		{"strided: 64 KiB every 1 MiB, from the third read", 16 * mib, []read{
			{0, 64 << 10, "[]"}, {mib, 64 << 10, "[]"},
			{2 * mib, 64 << 10, "[{3145728 3211264} {4194304 4259840} {5242880 5308416} {6291456 6356992} {7340032 7405568} {8388608 8454144} {9437184 9502720} {10485760 10551296} {11534336 11599872} {12582912 12648448} {13631488 13697024} {14680064 14745600} {15728640 15794176} {16777216 16842752} {17825792 17891328} {18874368 18939904}]"},
		}, 2 * mib},
		{"a stride beginning inside a sequential stream ends it from its fourth read", 32 * mib, []read{
			{0, mib, "[]"}, {mib, mib, "[{2097152 6291456}]"}, {2 * mib, mib, "[{6291456 11534336}]"},
			{3 * mib, mib / 4, "[{11534336 20185088}]"}, // still sequential, right after the last
			{4 * mib, mib / 4, "[{20185088 38010880}]"}, // a step inside the stream
			{5 * mib, mib / 4, "[]"},                    // the same step: not yet a stride
			{6 * mib, mib / 4, "[{7340032 7602176} {8388608 8650752} {9437184 9699328} {10485760 10747904}]"},
			{7 * mib, mib / 4, "[{8388608 8650752} {9437184 9699328} {10485760 10747904} {11534336 11796480} {12582912 12845056} {13631488 13893632} {14680064 14942208} {15728640 15990784}]"},
		}, 4 * mib},
		{"reads overtaking each other by equal steps twice stay sequential", 16 * mib, []read{
			{0, mib, "[]"}, {mib, mib, "[{2097152 6291456}]"},
			{3 * mib, mib, "[{6291456 12582912}]"}, {5 * mib, mib, "[{12582912 23068672}]"}, // 2 and 4 MiB come later
			{2 * mib, mib, "[]"}, {4 * mib, mib, "[]"}, {6 * mib, mib, "[]"},
		}, 16 * mib},
		{"no read-ahead when off", 0, []read{{0, mib, "[]"}, {mib, mib, "[]"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r raState
			for i, rd := range tt.reads {
				got := fmt.Sprint(r.access(rd.off, rd.n, tt.max, PageSize))
				if got != rd.want {
					t.Fatalf("read %d [%d,+%d): read ahead %s, want %s", i, rd.off, rd.n, got, rd.want)
				}
			}
			if r.window != tt.window {
				t.Fatalf("window %d, want %d", r.window, tt.window)
			}
		})
	}
}

func TestClipExtents(t *testing.T) {
	got := fmt.Sprint(clipExtents([]extent{{0, 10}, {20, 30}, {40, 50}}, 25))
	if got != "[{0 10} {20 25}]" {
		t.Fatal(got)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		mod  func(*Config)
	}{
		{"RPC of no pages", func(c *Config) { c.MaxPagesPerRPC = 0 }},
		{"RPC past 16 MiB", func(c *Config) { c.MaxPagesPerRPC = 4097 }},
		{"no RPC in flight", func(c *Config) { c.MaxRPCsInFlight = 0 }},
		{"no dirty data", func(c *Config) { c.MaxDirtyMB = 0 }},
		{"dirty below one RPC", func(c *Config) { c.MaxDirtyMB = 2 }},
		{"negative read-ahead", func(c *Config) { c.MaxReadAheadMB = -1 }},
		{"cache below the read-ahead", func(c *Config) { c.MaxCachedMB = 64 }},
		{"no expiry", func(c *Config) { c.DirtyExpire = 0 }},
	} {
		c := DefaultConfig()
		tt.mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
}

func TestReadAheadWindow(t *testing.T) {
	const mib = (1 << 20) / PageSize // pages in a MiB
	for _, c := range []struct {
		budget, perFile, rpc, share int // pages, and objects
		want                        uint64
	}{
		{64 * mib, 32 * mib, 4 * mib, 1, 32 << 20},
		{64 * mib, 2 * mib, 4 * mib, 1, 8 << 20},   // at least two RPCs
		{16 * mib, 32 * mib, 4 * mib, 1, 16 << 20}, // at most the client's budget
		{6 * mib, 1 * mib, 4 * mib, 1, 6 << 20},    // the budget wins over two RPCs
		{0, 32 * mib, 4 * mib, 1, 0},               // read-ahead off for the client
		{64 * mib, 0, 4 * mib, 1, 0},               // or per file
		{64 * mib, 32 * mib, 4 * mib, 0, 32 << 20}, // no share given: one object
		// A file striped over 4 objects: the per-file window is split
		// between them, so all four fit in the budget together.
		{64 * mib, 32 * mib, 4 * mib, 4, 8 << 20},
		{64 * mib, 64 * mib, 1 * mib, 4, 16 << 20},
		{64 * mib, 32 * mib, 1 * mib, 64, 1 << 20}, // a wide file: one RPC each
		{64 * mib, 32 * mib, 4 * mib, 64, 4 << 20},
		{2 * mib, 32 * mib, 4 * mib, 64, 2 << 20}, // never more than the budget
	} {
		if got := raWindowOf(c.budget, c.perFile, c.rpc, c.share); got != c.want {
			t.Errorf("budget %d, per file %d, rpc %d pages, %d objects: window %d, want %d", c.budget, c.perFile, c.rpc, c.share, got, c.want)
		}
	}
}

// TestReadAheadRewind: read-ahead that could not be sent is asked for
// again at the next access.
func TestReadAheadRewind(t *testing.T) {
	const mib = 1 << 20
	var r raState
	r.access(0, mib, 32*mib, 4*mib)
	first := r.access(mib, mib, 32*mib, 4*mib)
	if len(first) != 1 || first[0].start != 2*mib {
		t.Fatalf("second sequential read: read ahead %v", first)
	}
	// Only the first 4 MiB of it went out.
	r.rewind(first[0].start + 4*mib)
	again := r.access(2*mib, mib, 32*mib, 4*mib)
	if len(again) != 1 || again[0].start != first[0].start+4*mib {
		t.Fatalf("after the rewind: read ahead %v, want from %d", again, first[0].start+4*mib)
	}
	// Without one, the same access asks for nothing new so soon.
	var s raState
	s.access(0, mib, 32*mib, 4*mib)
	s.access(mib, mib, 32*mib, 4*mib)
	if more := s.access(2*mib, mib, 32*mib, 4*mib); len(more) != 0 {
		t.Fatalf("no rewind: read ahead %v again", more)
	}
}

// TestReadAheadShare: an object's share of its file's window counts the
// objects the window spans, not all the file's.
func TestReadAheadShare(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		objects int
		stripe  uint32
		window  uint64
		want    int
	}{
		{4, mib, 32 * mib, 4},
		{4, 64 * mib, 32 * mib, 2}, // a window crosses at most one stripe boundary
		{8, 16 * mib, 32 * mib, 3},
		{8, 16 * mib, 33 * mib, 4},
		{4, 64 * mib, 0, 1},
		{8, 0, 32 * mib, 8},
		{0, 0, 32 * mib, 1},
	} {
		var o Object
		o.SetReadAheadShare(c.objects, c.stripe)
		if got := o.raShare(c.window); got != c.want {
			t.Errorf("%d objects of %d-byte stripes, window %d: share %d, want %d", c.objects, c.stripe, c.window, got, c.want)
		}
	}
}
