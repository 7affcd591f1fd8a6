package osc_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/internal/clienttest"
	"github.com/nacrefs/nacre/client/osc"
)

// TestShrinkGrant: lowering a client's grant (cur_grant_bytes) gives the
// unused part back to the OST, whose granted total drops by as much; the
// client keeps at least one RPC's worth, and grows its grant again by
// writing, with the data right.
func TestShrinkGrant(t *testing.T) {
	c, a, _, _, oa, ob := twoClients(t)
	ctx := ctxT(t, time.Minute)
	ost := c.OSS.OSTs()[0]
	if err := a.OSCs[0].Connect(ctx); err != nil {
		t.Fatal(err)
	}
	// The grant of every other export (b's, the test MDS's): a's is
	// exact until it writes.
	others := ost.Stats().Granted - a.OSCs[0].Stats().Grant
	data := pattern(8<<20, 3)
	if _, err := oa.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := oa.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	before, granted := a.OSCs[0].Stats(), ost.Stats().Granted
	rpc := uint64(osc.DefaultMaxPagesPerRPC * osc.PageSize)
	if before.Grant <= rpc {
		t.Fatalf("grant %d after writing 8 MiB: nothing to shrink", before.Grant)
	}
	got, err := a.OSCs[0].ShrinkGrant(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	after := a.OSCs[0].Stats()
	// One request or two: the first gives back what avail, a lower bound
	// of the grant, holds beyond one RPC.
	if got != rpc || after.Grant != rpc || after.AvailGrant != int64(rpc) || after.GrantShrinks == before.GrantShrinks {
		t.Fatalf("shrink to 0 left grant %d (reported %d, avail %d, %d shrinks), want one RPC %d", after.Grant, got, after.AvailGrant, after.GrantShrinks, rpc)
	}
	if st := ost.Stats(); st.GrantShrunk != granted-st.Granted || st.Granted != others+rpc {
		t.Fatalf("OST granted %d after shrinks of %d from %d; the other exports hold %d", st.Granted, st.GrantShrunk, granted, others)
	}
	// Above the grant held: nothing to give back, no request.
	if got, err := a.OSCs[0].ShrinkGrant(ctx, 1<<40); err != nil || got != rpc || a.OSCs[0].Stats().GrantShrinks != after.GrantShrinks {
		t.Fatalf("shrink above the grant: %d, %v", got, err)
	}
	// Writing asks for grant again, and the data is right.
	copy(data[1<<20:], pattern(6<<20, 4))
	if _, err := oa.WriteAt(ctx, data[1<<20:7<<20], 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := oa.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if g := a.OSCs[0].Stats().Grant; g <= rpc {
		t.Fatalf("grant %d after writing again, want it grown", g)
	}
	checkGrant(t, a.OSCs[0].Stats(), osc.DefaultConfig())
	got8 := make([]byte, len(data))
	if _, err := ob.ReadAt(ctx, got8, 0); err != nil || !bytes.Equal(got8, data) {
		t.Fatalf("read back after the shrink: %v (bytes differ: %v)", err, !bytes.Equal(got8, data))
	}
}

// TestIdleGrantShrink: a client that does not write for
// grant_shrink_interval gives its grant back in two steps, down to a
// pipeline of RPCs and then to one RPC, while a client that writes keeps
// its own; with grant_shrink off nothing goes back.
func TestIdleGrantShrink(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 1, Nodes: 2})
	cfg := osc.DefaultConfig()
	cfg.MaxPagesPerRPC, cfg.MaxRPCsInFlight = 64, 4 // 256 KiB RPCs: a pipeline is 1.25 MiB
	// Two seconds between the steps: the loop below sees each grant.
	cfg.GrantShrinkInterval = 2 * time.Second
	idle := newNode(t, c, 0, cfg)
	busy := newNode(t, c, 1, cfg)
	ctx := ctxT(t, time.Minute)
	ost := c.OSS.OSTs()[0]
	rpc := uint64(cfg.MaxPagesPerRPC * osc.PageSize)
	for _, n := range []*clienttest.Node{idle, busy} {
		if err := n.OSCs[0].Connect(ctx); err != nil {
			t.Fatal(err)
		}
	}
	start := idle.OSCs[0].Stats().Grant
	if start <= 5*rpc {
		t.Fatalf("connect grant %d: too small to see a shrink", start)
	}
	ob := busy.OSCs[0].Open(precreate(t, c, 0))
	defer ob.Close()
	data := pattern(64<<10, 7)
	var steps []uint64
	deadline := time.Now().Add(30 * time.Second)
	for len(steps) < 2 && time.Now().Before(deadline) {
		// The busy client writes all along, more often than the interval.
		if _, err := ob.WriteAt(ctx, data, 0); err != nil {
			t.Fatal(err)
		}
		if g := idle.OSCs[0].Stats().Grant; g != start && (len(steps) == 0 || g != steps[len(steps)-1]) {
			steps = append(steps, g)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if want := []uint64{uint64(cfg.MaxRPCsInFlight+1) * rpc, rpc}; len(steps) != 2 || steps[0] != want[0] || steps[1] != want[1] {
		t.Fatalf("idle client's grant went %d -> %v, want %v", start, steps, want)
	}
	if st := busy.OSCs[0].Stats(); st.GrantShrinks != 0 || st.Grant <= rpc {
		t.Fatalf("the writing client shrank its grant: %+v", st)
	}
	if st := ost.Stats(); st.GrantShrunk != start-rpc {
		t.Fatalf("OST took back %d, want %d", st.GrantShrunk, start-rpc)
	}
	// grant_shrink off: the busy client, idle from now on, keeps its grant.
	tun := busy.OSCs[0].Tunables()
	tun.GrantShrink, tun.GrantShrinkInterval = false, time.Second
	if err := busy.OSCs[0].SetTunables(tun); err != nil {
		t.Fatal(err)
	}
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	held := busy.OSCs[0].Stats().Grant
	time.Sleep(2500 * time.Millisecond)
	if st := busy.OSCs[0].Stats(); st.GrantShrinks != 0 || st.Grant != held {
		t.Fatalf("grant_shrink=0: grant %d -> %d, %d shrinks", held, st.Grant, st.GrantShrinks)
	}
	tun.GrantShrinkInterval = 0
	if err := busy.OSCs[0].SetTunables(tun); err == nil {
		t.Fatal("grant_shrink_interval 0 taken")
	}
}
