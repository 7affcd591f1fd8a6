package osc_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/internal/clienttest"
	"github.com/nacrefs/nacre/client/osc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
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

// TestChecksumTypeAtRunTime: the OSC checksums its bulk by the fastest
// algorithm the OST agreed to, or by the one checksum_type names; the OST
// verifies by the one each RPC names, and reads come back by it too.
func TestChecksumTypeAtRunTime(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 1, Nodes: 2})
	o, o2 := newNode(t, c, 0, osc.DefaultConfig()).OSCs[0], newNode(t, c, 1, osc.DefaultConfig()).OSCs[0]
	ctx := ctxT(t, time.Minute)
	f := precreate(t, c, 0)
	obj, obj2 := o.Open(f), o2.Open(f) // a writer, and a reader with nothing cached
	defer obj.Close()
	defer obj2.Close()
	if got := o.Import().ChecksumTypes(); got != ptlrpc.ChecksumTypes {
		t.Fatalf("the OST agreed to %v, want %v", got, ptlrpc.ChecksumTypes)
	}
	if got, want := o.ChecksumType(), ptlrpc.FastestChecksum(ptlrpc.ChecksumTypes); got != want {
		t.Fatalf("default checksum type %v, want the fastest, %v", got, want)
	}
	counts := func() map[ptlrpc.ChecksumType]uint64 {
		st := c.OSS.Service().Stats()
		return map[ptlrpc.ChecksumType]uint64{ptlrpc.ChecksumCRC32: st.BulkCRC32, ptlrpc.ChecksumCRC32C: st.BulkCRC32C}
	}
	for i, ct := range []ptlrpc.ChecksumType{ptlrpc.ChecksumCRC32C, ptlrpc.ChecksumCRC32, 0} {
		for _, o := range []*osc.Client{o, o2} {
			tu := o.Tunables()
			tu.ChecksumType = ct
			if err := o.SetTunables(tu); err != nil {
				t.Fatal(err)
			}
		}
		want := ct
		if ct == 0 {
			want = ptlrpc.FastestChecksum(ptlrpc.ChecksumTypes)
		}
		if got := o.ChecksumType(); got != want {
			t.Fatalf("checksum_type %v: in use %v", ct, got)
		}
		before := counts()
		data := pattern(8<<20, uint64(i+1))
		if _, err := obj.WriteAt(ctx, data, 0); err != nil {
			t.Fatal(err)
		}
		if err := obj.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data))
		if _, err := obj2.ReadAt(ctx, got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("checksum_type %v: bytes read back differ", want)
		}
		after := counts()
		for _, other := range []ptlrpc.ChecksumType{ptlrpc.ChecksumCRC32, ptlrpc.ChecksumCRC32C} {
			d := after[other] - before[other]
			if other == want && d < 4 { // two 4 MiB writes and two reads at least
				t.Errorf("checksum_type %v: the OST checksummed %d transfers by it", want, d)
			} else if other != want && d != 0 {
				t.Errorf("checksum_type %v: the OST checksummed %d transfers by %v", want, d, other)
			}
		}
	}
	for _, bad := range []ptlrpc.ChecksumType{ptlrpc.ChecksumTypes, 0x2} {
		tu := o.Tunables()
		tu.ChecksumType = bad
		if err := o.SetTunables(tu); !errors.Is(err, osc.ErrInvalidConfig) {
			t.Errorf("checksum type %v: %v, want ErrInvalidConfig", bad, err)
		}
	}
}
