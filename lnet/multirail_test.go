package lnet_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// fast makes health recovery quick enough for a test.
func fast(c *lnet.Config) { c.RecoveryInterval = 20 * time.Millisecond }

func TestPingDiscover(t *testing.T) {
	m1, m2 := newFakeNID(), newFakeNID()
	a := startFake(t, fast)
	b := startFake(t, func(c *lnet.Config) { c.Routing = true }, m1, m2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	info, rtt, err := a.Ping(ctx, m1)
	if err != nil || rtt <= 0 {
		t.Fatalf("Ping: %v (rtt %v)", err, rtt)
	}
	want := []wire.NIDStatus{{NID: wire.LoNID, Status: wire.NIStatusUp}, {NID: m1, Status: wire.NIStatusUp}, {NID: m2, Status: wire.NIStatusUp}}
	if fmt.Sprint(info.NIDs) != fmt.Sprint(want) || info.PID != b.PID() ||
		info.Features&wire.PingFeatMultiRail == 0 || info.Features&wire.PingFeatRoutingDisabled != 0 {
		t.Fatalf("ping info %+v", info)
	}
	if info, _, err := a.Ping(ctx, wire.LoNID); err != nil || info.Features&wire.PingFeatRoutingDisabled == 0 {
		t.Fatalf("ping self: %+v %v", info, err)
	}
	// Ping learns nothing.
	if ps := a.Peers(); len(ps) != 1 || ps[0].MultiRail || len(ps[0].NIs) != 1 {
		t.Fatalf("peers after a ping: %+v", ps)
	}

	pi, err := a.Discover(ctx, m2)
	if err != nil {
		t.Fatal(err)
	}
	if pi.Primary != m2 || !pi.MultiRail || len(pi.NIs) != 2 || pi.NIs[0].NID != m2 || pi.NIs[1].NID != m1 {
		t.Fatalf("Discover: %+v", pi)
	}
	if ps := a.Peers(); len(ps) != 1 || ps[0].Primary != m2 || len(ps[0].NIs) != 2 {
		t.Fatalf("Peers after Discover: %+v", ps)
	}
	// No answer: the ping fails by its context's deadline at the latest.
	nobody := newFakeNID()
	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if _, _, err := a.Ping(short, nobody); err == nil {
		t.Fatal("ping of nobody succeeded")
	}
	if _, err := a.Discover(ctx, wire.NID{}); !errors.Is(err, lnet.ErrInvalid) {
		t.Fatalf("Discover of the zero NID: %v", err)
	}
	// Internal pings and their MDs are not the user's.
	waitFor(t, "pings done", func() bool { s := a.Stats(); return s.Pending == 0 && s.MDs == 0 })
}

// sink attaches an MD on portal 1 of ln that takes any number of 8-byte
// PUTs.
func sink(t *testing.T, ln *lnet.LNet) {
	t.Helper()
	if _, err := ln.Attach(1, lnet.AnyProcess, 0, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDManageRemote}); err != nil {
		t.Fatal(err)
	}
}

// putAcked PUTs 8 bytes to to's portal 1 and waits for the ACK.
func putAcked(t *testing.T, a *lnet.LNet, to wire.NID) error {
	t.Helper()
	r := newRecorder()
	h, err := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 1, Handler: r.handler})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Put(context.Background(), h, lnet.AckReq, wire.ProcessID{NID: to, PID: wire.PIDLustre}, 1, 0, 0, 0); err != nil {
		return err
	}
	r.next(t) // SEND
	return r.next(t).Status
}

// sendCounts returns, per NID, the send counts of ln's NIs and peer NIs.
func sendCounts(ln *lnet.LNet) map[wire.NID]uint64 {
	s := ln.Stats()
	out := map[wire.NID]uint64{}
	for _, n := range s.NIs {
		out[n.NID] = n.SendCount
	}
	for _, p := range s.Peers {
		out[p.NID] = p.SendCount
	}
	return out
}

func health(ln *lnet.LNet, nid wire.NID) int {
	s := ln.Stats()
	if n, ok := s.NI(nid); ok {
		return n.Health
	}
	p, _ := s.Peer(nid)
	return p.Health
}

// TestMultiRailHealth: automatic discovery makes a peer's two NIDs one
// multi-rail peer; sends spread over both local NIs and both peer NIs; a
// failing rail (peer side, then local side) loses its health, its sends
// are resent on the other, and traffic stays off it until recovery pings
// bring it back.
func TestMultiRailHealth(t *testing.T) {
	fabricUsers.Lock()
	defer fabricUsers.Unlock()
	n1, n2, m1, m2 := newFakeNID(), newFakeNID(), newFakeNID(), newFakeNID()
	a := startFake(t, fast, n1, n2)
	b := startFake(t, fast, m1, m2)
	sink(t, b)
	defer fab.setRail(m2, nil)
	defer fab.setRail(n2, nil)

	if err := putAcked(t, a, m1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "automatic discovery", func() bool {
		ps := a.Peers()
		return len(ps) == 1 && ps[0].MultiRail && len(ps[0].NIs) == 2
	})
	burst := func(what string) map[wire.NID]uint64 {
		t.Helper()
		before := sendCounts(a)
		for i := range 20 {
			if err := putAcked(t, a, m1); err != nil {
				t.Fatalf("%s: PUT %d: %v", what, i, err)
			}
		}
		after := sendCounts(a)
		for nid, n := range after {
			after[nid] = n - before[nid]
		}
		return after
	}
	d := burst("both rails")
	if d[n1] < 5 || d[n2] < 5 || d[m1] < 5 || d[m2] < 5 {
		t.Fatalf("sends per NI and peer NI %v: want every rail used", d)
	}

	// m2 breaks: its sends fail and are resent on m1; it is not used again.
	fab.setRail(m2, lnet.ErrConnReset)
	d = burst("m2 broken")
	if d[m2] != 0 || d[m1] < 20 {
		t.Fatalf("sends with m2 broken %v: want all on m1", d)
	}
	if h := health(a, m2); h >= 1000 {
		t.Fatalf("m2 health %d after failures", h)
	}
	if h := health(a, m1); h != 1000 {
		t.Fatalf("m1 health %d", h)
	}
	// Mended: recovery pings raise it back, and it carries traffic again.
	fab.setRail(m2, nil)
	waitFor(t, "m2 recovered", func() bool { return health(a, m2) == 1000 })
	if d = burst("m2 mended"); d[m2] < 5 {
		t.Fatalf("sends after m2 recovered %v", d)
	}

	// Now a's own n2 fails locally.
	fab.setRail(n2, lnet.ErrLocalNI)
	d = burst("n2 broken")
	if d[n2] != 0 || d[n1] < 20 {
		t.Fatalf("sends with n2 broken %v: want all from n1", d)
	}
	if h := health(a, n2); h >= 1000 {
		t.Fatalf("n2 health %d after failures", h)
	}
	fab.setRail(n2, nil)
	waitFor(t, "n2 recovered", func() bool { return health(a, n2) == 1000 })
	if d = burst("n2 mended"); d[n2] < 5 {
		t.Fatalf("sends after n2 recovered %v", d)
	}
}

// TestRemoteTimeoutHealth: a peer NI whose sends leave but are never
// answered loses health, and traffic moves to the other.
func TestRemoteTimeoutHealth(t *testing.T) {
	n1, m1, m2 := newFakeNID(), newFakeNID(), newFakeNID()
	a := startFake(t, func(c *lnet.Config) { c.RecoveryInterval = time.Hour }, n1)
	b := startFake(t, nil, m1, m2)
	sink(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := a.Discover(ctx, m1); err != nil {
		t.Fatal(err)
	}
	a.SetTransactionTimeout(200 * time.Millisecond)
	// A PUT to m2 that b does not answer (no match on portal 2).
	r := newRecorder()
	h, _ := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 2, Handler: r.handler})
	for range 2 {
		// Round robin puts one on each peer NI.
		if err := a.Put(ctx, h, lnet.AckReq, wire.ProcessID{NID: m2, PID: wire.PIDLustre}, 2, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		ev := r.next(t)
		if ev.Type == lnet.EventAck && !errors.Is(ev.Status, lnet.ErrTimeout) {
			t.Fatalf("ACK %v", ev.Status)
		}
	}
	if h1, h2 := health(a, m1), health(a, m2); h1 != 900 || h2 != 900 {
		t.Fatalf("health after unanswered sends: m1 %d m2 %d, want 900 each", h1, h2)
	}
}

// TestGlobals: the globals read back as configured and as set, and a bad
// value changes none of them. Changed at run time, each changes what LNet
// does next: with discovery off a new peer stays one NID; with health off
// and no retries, sends to a broken peer NI fail and its health stays
// full; with retries, they are resent on the other rail; with health on
// again, the broken NI loses health and is left alone; with discovery on
// again, the next send discovers the peer.
func TestGlobals(t *testing.T) {
	fabricUsers.Lock()
	defer fabricUsers.Unlock()
	n1, m1, m2 := newFakeNID(), newFakeNID(), newFakeNID()
	a := startFake(t, func(c *lnet.Config) {
		fast(c)
		c.RetryCount = 1
	}, n1)
	b := startFake(t, fast, m1, m2)
	sink(t, b)
	defer fab.setRail(m2, nil)

	g0 := a.Globals()
	want := lnet.Globals{Discovery: true, RetryCount: 1, TransactionTimeout: lnet.DefaultTransactionTimeout,
		HealthSensitivity: lnet.DefaultHealthSensitivity, RecoveryInterval: 20 * time.Millisecond}
	if g0 != want {
		t.Fatalf("globals %+v, want %+v", g0, want)
	}
	for _, bad := range []func(*lnet.Globals){
		func(g *lnet.Globals) { g.RetryCount = -1 },
		func(g *lnet.Globals) { g.RetryCount = lnet.MaxRetryCount + 1 },
		func(g *lnet.Globals) { g.TransactionTimeout = 0 },
		func(g *lnet.Globals) { g.HealthSensitivity = 1001 },
		func(g *lnet.Globals) { g.RecoveryInterval = time.Millisecond },
	} {
		g := g0
		g.Discovery = false // would change, were the rest valid
		bad(&g)
		if err := a.SetGlobals(g); !errors.Is(err, lnet.ErrInvalid) {
			t.Fatalf("SetGlobals(%+v): %v, want ErrInvalid", g, err)
		}
		if got := a.Globals(); got != g0 {
			t.Fatalf("after a refused SetGlobals: %+v, want %+v", got, g0)
		}
	}
	set := func(f func(*lnet.Globals)) {
		t.Helper()
		g := a.Globals()
		f(&g)
		if err := a.SetGlobals(g); err != nil {
			t.Fatal(err)
		}
		if got := a.Globals(); got != g {
			t.Fatalf("globals %+v after setting %+v", got, g)
		}
		if c := a.Config(); c.RetryCount != g.RetryCount || c.DisableDiscovery == g.Discovery {
			t.Fatalf("Config %+v after setting %+v", c, g)
		}
	}

	// Discovery off: m1 stays a peer of one NID.
	set(func(g *lnet.Globals) { g.Discovery = false })
	if err := putAcked(t, a, m1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if ps := a.Peers(); len(ps) != 1 || len(ps[0].NIs) != 1 {
		t.Fatalf("peers with discovery off: %+v", ps)
	}
	// On again: the next send discovers m2.
	set(func(g *lnet.Globals) { g.Discovery = true })
	if err := putAcked(t, a, m1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "discovery turned on", func() bool {
		ps := a.Peers()
		return len(ps) == 1 && ps[0].MultiRail && len(ps[0].NIs) == 2
	})

	// m2 breaks, with health off and no retries: some sends fail, and m2
	// keeps full health.
	set(func(g *lnet.Globals) { g.HealthSensitivity, g.RetryCount = 0, 0 })
	fab.setRail(m2, lnet.ErrConnReset)
	failed := 0
	for range 20 {
		if err := putAcked(t, a, m1); err != nil {
			failed++
		}
	}
	if failed == 0 || health(a, m2) != 1000 {
		t.Fatalf("health off, no retries: %d of 20 sends failed, m2 health %d; want failures and full health", failed, health(a, m2))
	}
	// Retries: every send gets through, resent on m1.
	set(func(g *lnet.Globals) { g.RetryCount = 2 })
	for i := range 20 {
		if err := putAcked(t, a, m1); err != nil {
			t.Fatalf("with retries: PUT %d: %v", i, err)
		}
	}
	// Health on: m2 loses health.
	set(func(g *lnet.Globals) { g.HealthSensitivity = 100 })
	for i := range 20 {
		if err := putAcked(t, a, m1); err != nil {
			t.Fatalf("health on: PUT %d: %v", i, err)
		}
	}
	if h := health(a, m2); h >= 1000 {
		t.Fatalf("m2 health %d with health on and m2 broken", h)
	}
}

// TestConfiguredPeers: with discovery off, a peer configured with two NIDs
// is one multi-rail peer whose sends use both; it outlives the aging that
// drops an idle peer made by traffic; a bad configuration changes nothing;
// a NID and then the peer are deleted.
func TestConfiguredPeers(t *testing.T) {
	fabricUsers.Lock()
	defer fabricUsers.Unlock()
	n1, m1, m2, o1 := newFakeNID(), newFakeNID(), newFakeNID(), newFakeNID()
	a := startFake(t, func(c *lnet.Config) {
		fast(c)
		c.DisableDiscovery = true
		c.TransactionTimeout, c.PeerAge = 300*time.Millisecond, 300*time.Millisecond
	}, n1)
	b := startFake(t, fast, m1, m2)
	o := startFake(t, fast, o1)
	sink(t, b)
	sink(t, o)

	if err := a.AddPeer(m1, []wire.NID{m2, m2}, true); err != nil {
		t.Fatal(err)
	}
	ps := a.Peers()
	if len(ps) != 1 || ps[0].Primary != m1 || !ps[0].MultiRail || !ps[0].Configured || len(ps[0].NIs) != 2 || ps[0].NIs[1].NID != m2 {
		t.Fatalf("peers after AddPeer: %+v", ps)
	}
	before := sendCounts(a)
	for i := range 20 {
		if err := putAcked(t, a, m1); err != nil {
			t.Fatalf("PUT %d: %v", i, err)
		}
	}
	after := sendCounts(a)
	if after[m1]-before[m1] < 5 || after[m2]-before[m2] < 5 {
		t.Fatalf("sends to the configured peer: m1 %d, m2 %d; want both used", after[m1]-before[m1], after[m2]-before[m2])
	}
	// o1, known by traffic, ages out; the configured peer stays.
	if err := putAcked(t, a, o1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the idle unconfigured peer to age out", func() bool {
		ps := a.Peers()
		return len(ps) == 1 && ps[0].Primary == m1
	})

	// Refused, with nothing changed.
	for _, bad := range []struct {
		what      string
		primary   wire.NID
		nids      []wire.NID
		multiRail bool
	}{
		{"a local NID", o1, []wire.NID{n1}, true},
		{"loopback", wire.LoNID, nil, true},
		{"two NIDs, not multi-rail", o1, []wire.NID{m2}, false},
		{"a NID of another configured peer", o1, []wire.NID{m2}, true},
		{"the other peer's NID as primary", m2, nil, true},
		{"not multi-rail, over a peer of two NIDs", m1, nil, false},
		{"the zero NID", wire.NID{}, nil, true},
	} {
		if err := a.AddPeer(bad.primary, bad.nids, bad.multiRail); !errors.Is(err, lnet.ErrInvalid) {
			t.Fatalf("AddPeer with %s: %v, want ErrInvalid", bad.what, err)
		}
		if ps := a.Peers(); len(ps) != 1 || len(ps[0].NIs) != 2 {
			t.Fatalf("peers after AddPeer with %s: %+v", bad.what, ps)
		}
	}
	if err := a.DelPeer(m1, []wire.NID{m1}); !errors.Is(err, lnet.ErrInvalid) {
		t.Fatalf("DelPeer of the primary as a NID: %v", err)
	}
	if err := a.DelPeer(m2, nil); !errors.Is(err, lnet.ErrNoPeer) {
		t.Fatalf("DelPeer by a NID that is not a primary: %v", err)
	}
	if err := a.DelPeer(m1, []wire.NID{o1}); !errors.Is(err, lnet.ErrInvalid) {
		t.Fatalf("DelPeer of a NID the peer lacks: %v", err)
	}

	if err := a.DelPeer(m1, []wire.NID{m2}); err != nil {
		t.Fatal(err)
	}
	before = sendCounts(a)
	for i := range 10 {
		if err := putAcked(t, a, m1); err != nil {
			t.Fatalf("PUT %d after deleting m2: %v", i, err)
		}
	}
	if ps := a.Peers(); len(ps) != 1 || len(ps[0].NIs) != 1 || sendCounts(a)[m1]-before[m1] != 10 {
		t.Fatalf("after deleting m2: peers %+v, %d sends to m1", ps, sendCounts(a)[m1]-before[m1])
	}
	if err := a.DelPeer(m1, nil); err != nil {
		t.Fatal(err)
	}
	if ps := a.Peers(); len(ps) != 0 {
		t.Fatalf("peers after DelPeer: %+v", ps)
	}
}
