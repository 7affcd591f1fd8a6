package osc_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/internal/clienttest"
	"github.com/nacrefs/nacre/client/osc"
)

// maxInFlight returns the most write RPCs the histogram saw in flight.
func maxInFlight(s osc.RPCStats) int {
	m := 0
	for n, c := range s.ByInFlight[1] {
		if c > 0 {
			m = n
		}
	}
	return m
}

// TestTunablesAtRunTime: max_rpcs_in_flight and max_pages_per_rpc
// changed while the OSC runs change the RPCs it sends; values that do
// not fit are refused and change nothing.
func TestTunablesAtRunTime(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 1, Nodes: 1})
	n := newNode(t, c, 0, osc.DefaultConfig())
	o := n.OSCs[0]
	ctx := ctxT(t, time.Minute)
	f := precreate(t, c, 0)
	obj := o.Open(f)
	defer obj.Close()

	write := func(seed uint64) {
		t.Helper()
		if _, err := obj.WriteAt(ctx, pattern(8<<20, seed), 0); err != nil {
			t.Fatal(err)
		}
		if err := obj.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tu := o.Tunables()
	tu.MaxRPCsInFlight, tu.MaxPagesPerRPC = 1, 16
	if err := o.SetTunables(tu); err != nil {
		t.Fatal(err)
	}
	write(1)
	s := o.RPCStats()
	if m := maxInFlight(s); m != 1 || s.SlotsLimit != 1 {
		t.Fatalf("max_rpcs_in_flight=1: %d write RPCs in flight at most, slots %d", m, s.SlotsLimit)
	}
	if s.ByPages[1][4] == 0 || s.ByPages[1][5] != 0 {
		t.Fatalf("max_pages_per_rpc=16: pages per write RPC %v", s.ByPages[1])
	}
	o.ClearRPCStats()
	tu.MaxRPCsInFlight = 16
	if err := o.SetTunables(tu); err != nil {
		t.Fatal(err)
	}
	var m int
	for try := uint64(2); try < 6 && m <= 1; try++ {
		write(try)
		m = maxInFlight(o.RPCStats())
	}
	if m <= 1 || m > 16 {
		t.Fatalf("max_rpcs_in_flight=16: %d write RPCs in flight at most", m)
	}
	t.Logf("max_rpcs_in_flight=16: up to %d write RPCs in flight", m)

	for _, bad := range []osc.Tunables{
		{MaxDirtyMB: 64, MaxPagesPerRPC: 1024, MaxRPCsInFlight: 0},
		{MaxDirtyMB: 64, MaxPagesPerRPC: 1024, MaxRPCsInFlight: 257},
		{MaxDirtyMB: 2, MaxPagesPerRPC: 1024, MaxRPCsInFlight: 8}, // below one RPC
		{MaxDirtyMB: 64, MaxPagesPerRPC: 5000, MaxRPCsInFlight: 8},
	} {
		if err := o.SetTunables(bad); !errors.Is(err, osc.ErrInvalidConfig) {
			t.Errorf("SetTunables(%+v): %v; want ErrInvalidConfig", bad, err)
		}
	}
	if got := o.Tunables(); got != tu {
		t.Fatalf("refused tunables changed something: %+v, want %+v", got, tu)
	}

	// The cache: a smaller max_cached_mb evicts clean pages at once.
	cache := n.Cache
	if err := obj.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cache.SetLimits(4, 2); !errors.Is(err, osc.ErrInvalidConfig) {
		t.Fatalf("max_cached_mb 4 with 4 MiB RPCs elsewhere? %v", err)
	}
	if err := cache.SetLimits(10, 2); err != nil {
		t.Fatal(err)
	}
	if st := cache.Stats(); st.Pages > 10<<20/osc.PageSize || st.MaxPages != 10<<20/osc.PageSize {
		t.Fatalf("after max_cached_mb=10: %v", st)
	}
	if mb, ra := cache.Limits(); mb != 10 || ra != 2 {
		t.Fatalf("limits %d %d", mb, ra)
	}
}
