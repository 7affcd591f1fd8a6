package socklnd

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lnettest"
	"github.com/nacrefs/nacre/lnet/wire"
)

// putWait PUTs payload from ln to target's portal 50 with an ACK asked
// for, and returns the ACK's status (or the send's, if it failed), or
// fails the test if neither comes within 20 s.
func putWait(t *testing.T, ln *lnet.LNet, target wire.ProcessID, payload []byte) error {
	t.Helper()
	done := make(chan error, 1)
	h, err := ln.Bind(lnet.MD{Buffers: [][]byte{payload}, Threshold: 1, Handler: func(ev lnet.Event) {
		switch {
		case ev.Type == lnet.EventSend && ev.Status != nil:
			done <- ev.Status
		case ev.Type == lnet.EventAck:
			done <- ev.Status
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ln.Put(ctx, h, lnet.AckReq, target, 50, 0, 0, 0); err != nil {
		ln.Unlink(h)
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		t.Fatalf("PUT to %v: no ACK and no error in 20 s", target)
		return nil
	}
}

// sink attaches n MDs on ln's portal 50, each of its own buffer of size
// bytes for one PUT, and hands each PUT's bytes to the returned channel.
func sink(t *testing.T, ln *lnet.LNet, n, size int) <-chan []byte {
	t.Helper()
	got := make(chan []byte, n)
	for range n {
		buf := make([]byte, size)
		if _, err := ln.Attach(50, lnet.AnyProcess, 0, ^uint64(0), lnet.InsertLast, lnet.MD{
			Buffers: [][]byte{buf}, Threshold: 1, Options: lnet.MDOpPut,
			Handler: func(ev lnet.Event) {
				if ev.Type == lnet.EventPut && ev.Status == nil {
					got <- buf[:ev.MLength]
				}
			},
		}); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// dynNode starts an LNet node on nets with the transaction timeout given.
func dynNode(t *testing.T, timeout time.Duration, nets ...lnet.NetConfig) *lnet.LNet {
	t.Helper()
	cfg := lnet.DefaultConfig()
	cfg.TransactionTimeout = timeout
	cfg.Networks = nets
	return lnettest.StartConfig(t, cfg)
}

func addrs(s string) []netip.Addr { return []netip.Addr{netip.MustParseAddr(s)} }

// TestAddDelNet: a net added to a running node carries traffic both ways
// at once, is in the node's ping answer, and once deleted carries none;
// the errors of adding twice, deleting what is not there, deleting lo,
// deleting the net of a route's gateway and an address that is not this
// host's leave the node as it was.
func TestAddDelNet(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.2", "127.0.0.3")
	tcp1 := wire.Net{Type: wire.TCP, Num: 1}
	a := dynNode(t, 10*time.Second, lnet.NetConfig{Net: wire.Net{Type: wire.TCP}, Addrs: addrs("127.0.0.1"), Options: fastOpts(port)})
	// (B's PUTs to a NID that went away fail when their time is up.)
	b := dynNode(t, 2*time.Second, lnet.NetConfig{Net: tcp1, Addrs: addrs("127.0.0.3"), Options: fastOpts(port)})
	aGot, bGot := sink(t, a, 8, 64<<10), sink(t, b, 300, 64<<10)
	ctx := context.Background()
	bNID, aNID := wire.MustParseNID("127.0.0.3@tcp1"), wire.MustParseNID("127.0.0.2@tcp1")
	toB := wire.ProcessID{NID: bNID, PID: b.PID()}
	toA := wire.ProcessID{NID: aNID, PID: a.PID()}

	if err := putWait(t, a, toB, []byte("before")); !errors.Is(err, lnet.ErrNoRoute) {
		t.Fatalf("PUT to a net the node is not on: %v, want ErrNoRoute", err)
	}

	// Errors that change nothing.
	before := a.NIDs()
	if _, err := a.AddNet(ctx, lnet.NetConfig{Net: wire.Net{Type: wire.LO}}); !errors.Is(err, lnet.ErrInvalid) {
		t.Errorf("add lo: %v", err)
	}
	if _, err := a.AddNet(ctx, lnet.NetConfig{Net: wire.Net{Type: wire.TCP}, Addrs: addrs("127.0.0.1")}); !errors.Is(err, lnet.ErrExist) {
		t.Errorf("add an NI twice: %v", err)
	}
	if _, err := a.AddNet(ctx, lnet.NetConfig{Net: tcp1, Addrs: addrs("192.0.2.77")}); err == nil {
		t.Errorf("add an NI on an address not of this host: no error")
	}
	if _, err := a.DelNet(ctx, tcp1, nil); !errors.Is(err, lnet.ErrNotFound) {
		t.Errorf("delete a net not there: %v", err)
	}
	if _, err := a.DelNet(ctx, wire.Net{Type: wire.LO}, nil); !errors.Is(err, lnet.ErrInvalid) {
		t.Errorf("delete lo: %v", err)
	}
	if got := a.NIDs(); !slices.Equal(got, before) {
		t.Fatalf("NIDs after failed changes: %v, want %v", got, before)
	}
	if n := len(a.Config().Networks); n != 1 {
		t.Fatalf("networks after failed changes: %v", a.Config().Networks)
	}

	// Add: the options (the port) are the node's tcp NI's.
	nids, err := a.AddNet(ctx, lnet.NetConfig{Net: tcp1, Addrs: addrs("127.0.0.2")})
	if err != nil || len(nids) != 1 || nids[0] != aNID {
		t.Fatalf("add: %v %v", nids, err)
	}
	if got := a.NIDs(); !slices.Contains(got, aNID) {
		t.Fatalf("NIDs after add: %v", got)
	}
	if nets := a.Config().Networks; len(nets) != 2 || nets[1].Net != tcp1 {
		t.Fatalf("networks after add: %+v", nets)
	}
	for i, p := range [][]byte{pattern(1, 3000), pattern(2, 40000)} {
		if err := putWait(t, a, toB, p); err != nil {
			t.Fatalf("PUT %d over the added net: %v", i, err)
		}
		if got := <-bGot; !bytes.Equal(got, p) {
			t.Fatalf("PUT %d: %d bytes arrived, not those sent", i, len(got))
		}
	}
	back := pattern(3, 5000)
	if err := putWait(t, b, toA, back); err != nil {
		t.Fatalf("PUT to the added NID: %v", err)
	}
	if got := <-aGot; !bytes.Equal(got, back) {
		t.Fatal("PUT to the added NID: the bytes differ")
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	info, _, err := b.Ping(pctx, aNID)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(info.NIDs, func(s wire.NIDStatus) bool { return s.NID == aNID }) ||
		!slices.ContainsFunc(info.NIDs, func(s wire.NIDStatus) bool { return s.NID == wire.MustParseNID("127.0.0.1@tcp") }) {
		t.Fatalf("ping answer after add: %+v", info.NIDs)
	}

	// A route's gateway on the net keeps it.
	tcp2 := wire.Net{Type: wire.TCP, Num: 2}
	if err := a.AddRoute(lnet.Route{Net: tcp2, Gateway: bNID}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.DelNet(ctx, tcp1, nil); !errors.Is(err, lnet.ErrBusy) {
		t.Fatalf("delete the net of a gateway: %v, want ErrBusy", err)
	}
	if err := a.DelRoute(tcp2, bNID); err != nil {
		t.Fatal(err)
	}

	// Delete while PUTs are on their way (once some went through): every
	// one ends, one way or the other, and what was acknowledged arrived
	// whole.
	var wg sync.WaitGroup
	acked := make(chan struct{}, 256)
	var failed sync.Map
	for i := range 32 {
		wg.Go(func() {
			for j := range 8 {
				if err := putWait(t, a, toB, pattern(uint64(100+8*i+j), 20000)); err != nil {
					failed.Store(err.Error(), true)
					return
				}
				acked <- struct{}{}
			}
		})
	}
	for range 16 {
		select {
		case <-acked:
		case <-time.After(20 * time.Second):
			failed.Range(func(k, _ any) bool {
				t.Log(k)
				return true
			})
			t.Fatal("16 PUTs were not acknowledged")
		}
	}
	nids, err = a.DelNet(ctx, tcp1, []string{"127.0.0.2"})
	if err != nil || len(nids) != 1 || nids[0] != aNID {
		t.Fatalf("delete: %v %v", nids, err)
	}
	wg.Wait()
	close(acked)
	ok := 16 + len(acked)
	for range ok {
		select {
		case got := <-bGot:
			if len(got) != 20000 {
				t.Fatalf("a PUT acknowledged around the delete arrived with %d bytes", len(got))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an acknowledged PUT never arrived")
		}
	}
	failed.Range(func(k, _ any) bool {
		t.Logf("failed by the delete: %v", k)
		return true
	})
	t.Logf("%d of 256 PUTs acknowledged, the rest failed", ok)
	if ok == 256 {
		t.Fatal("no PUT was on its way when the net went")
	}

	if got := a.NIDs(); slices.Contains(got, aNID) {
		t.Fatalf("NIDs after delete: %v", got)
	}
	if nets := a.Config().Networks; len(nets) != 1 {
		t.Fatalf("networks after delete: %+v", nets)
	}
	if err := putWait(t, a, toB, []byte("after")); !errors.Is(err, lnet.ErrNoRoute) {
		t.Fatalf("PUT over the deleted net: %v, want ErrNoRoute", err)
	}
	if err := putWait(t, b, toA, []byte("after")); err == nil {
		t.Fatal("PUT to the deleted NID was acknowledged")
	}
	if _, err := a.DelNet(ctx, tcp1, nil); !errors.Is(err, lnet.ErrNotFound) {
		t.Fatalf("delete again: %v", err)
	}
	// And back: the same NID again.
	if _, err := a.AddNet(ctx, lnet.NetConfig{Net: tcp1, Addrs: addrs("127.0.0.2")}); err != nil {
		t.Fatalf("add after delete: %v", err)
	}
	if err := putWait(t, b, toA, back); err != nil {
		t.Fatalf("PUT to the NID added again: %v", err)
	}
	if got := <-aGot; !bytes.Equal(got, back) {
		t.Fatal("PUT to the NID added again: the bytes differ")
	}
}

// pushPair starts node a on 127.0.0.1@tcp and node b on 127.0.0.3@tcp
// and 127.0.0.4@tcp1 (the net a adds in the push tests), each taking up to
// 32 small PUTs on portal 50.
func pushPair(t *testing.T) (a, b *lnet.LNet, tcp1 wire.Net) {
	port := testPort(t, "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")
	tcp := wire.Net{Type: wire.TCP}
	tcp1 = wire.Net{Type: wire.TCP, Num: 1}
	a = dynNode(t, 5*time.Second, lnet.NetConfig{Net: tcp, Addrs: addrs("127.0.0.1"), Options: fastOpts(port)})
	b = dynNode(t, 5*time.Second, lnet.NetConfig{Net: tcp, Addrs: addrs("127.0.0.3"), Options: fastOpts(port)},
		lnet.NetConfig{Net: tcp1, Addrs: addrs("127.0.0.4"), Options: fastOpts(port)})
	sink(t, a, 32, 64)
	sink(t, b, 32, 64)
	return a, b, tcp1
}

// TestPushOnNetChange: a node that adds or deletes a net pushes its NIDs
// to the peers that discovered it, which use them at once instead of at
// their next discovery (they do not discover a peer twice).
func TestPushOnNetChange(t *testing.T) {
	a, b, tcp1 := pushPair(t)
	aNID, bNID := wire.MustParseNID("127.0.0.1@tcp"), wire.MustParseNID("127.0.0.3@tcp")
	added := wire.MustParseNID("127.0.0.2@tcp1")
	// Each discovers the other with its first PUT.
	if err := putWait(t, a, wire.ProcessID{NID: bNID, PID: b.PID()}, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := putWait(t, b, wire.ProcessID{NID: aNID, PID: a.PID()}, []byte("b")); err != nil {
		t.Fatal(err)
	}
	peerOf := func(ln *lnet.LNet, nid wire.NID) (lnet.PeerInfo, bool) {
		for _, p := range ln.Peers() {
			for _, n := range p.NIs {
				if n.NID == nid {
					return p, true
				}
			}
		}
		return lnet.PeerInfo{}, false
	}
	// waitPeer waits until ln's peer that has nid has exactly want.
	waitPeer := func(ln *lnet.LNet, nid wire.NID, what string, want ...wire.NID) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			p, ok := peerOf(ln, nid)
			var got []wire.NID
			for _, n := range p.NIs {
				got = append(got, n.NID)
			}
			slices.SortFunc(got, func(x, y wire.NID) int { return strings.Compare(x.String(), y.String()) })
			if ok && p.MultiRail && slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the peer of %v is known as %v (multi-rail %v), want NIDs %v", what, nid, got, p.MultiRail, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitNIDs := func(what string, want ...wire.NID) { t.Helper(); waitPeer(b, aNID, what, want...) }
	waitNIDs("discovered", aNID)
	// (a pushes to the peers it discovered: b must be one first.)
	waitPeer(a, bNID, "b discovered", bNID, wire.MustParseNID("127.0.0.4@tcp1"))

	if _, err := a.AddNet(context.Background(), lnet.NetConfig{Net: tcp1, Addrs: addrs("127.0.0.2")}); err != nil {
		t.Fatal(err)
	}
	waitNIDs("after net add", aNID, added)
	// A PUT to the pushed NID goes to a, as one of a's NIDs (one peer).
	if err := putWait(t, b, wire.ProcessID{NID: added, PID: a.PID()}, []byte("c")); err != nil {
		t.Fatal(err)
	}
	if p, _ := peerOf(b, aNID); !slices.ContainsFunc(p.NIs, func(n lnet.PeerNIStats) bool { return n.NID == added && n.SendCount > 0 }) {
		t.Fatalf("the PUT to the pushed NID is not counted to a: %+v", p.NIs)
	}

	if _, err := a.DelNet(context.Background(), tcp1, nil); err != nil {
		t.Fatal(err)
	}
	waitNIDs("after net del", aNID)
	for i := range 8 {
		if err := putWait(t, b, wire.ProcessID{NID: aNID, PID: a.PID()}, []byte{byte(i)}); err != nil {
			t.Fatalf("PUT %d after the delete: %v", i, err)
		}
	}
}

// TestPushPrimaryDeleted: a node that deletes the net of the NID its
// peers know it by pushes, and they drop that NID and know it by the one
// left.
func TestPushPrimaryDeleted(t *testing.T) {
	a, b, tcp1 := pushPair(t)
	tcp := wire.Net{Type: wire.TCP}
	aNID, added := wire.MustParseNID("127.0.0.1@tcp"), wire.MustParseNID("127.0.0.2@tcp1")
	// Only b sends: a is pushed to as a peer that pinged it.
	if err := putWait(t, b, wire.ProcessID{NID: aNID, PID: a.PID()}, []byte("b")); err != nil {
		t.Fatal(err)
	}
	peerOfA := func() (lnet.PeerInfo, []wire.NID) {
		for _, p := range b.Peers() {
			for _, n := range p.NIs {
				if n.NID == aNID || n.NID == added {
					var nids []wire.NID
					for _, n := range p.NIs {
						nids = append(nids, n.NID)
					}
					return p, nids
				}
			}
		}
		return lnet.PeerInfo{}, nil
	}
	wait := func(what string, ok func(lnet.PeerInfo, []wire.NID) bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			p, nids := peerOfA()
			if ok(p, nids) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: b knows a as %v (primary %v, multi-rail %v)", what, nids, p.Primary, p.MultiRail)
			}
		}
	}
	wait("discovered", func(p lnet.PeerInfo, nids []wire.NID) bool {
		return p.MultiRail && slices.Equal(nids, []wire.NID{aNID})
	})
	// a learns b's NIDs from b's discovery push (it pushes to b either way,
	// as a peer that pinged it; this makes sure the ping was seen).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if slices.ContainsFunc(a.Peers(), func(p lnet.PeerInfo) bool { return p.MultiRail && len(p.NIs) == 2 }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a never learned b's NIDs: %+v", a.Peers())
		}
	}
	if _, err := a.AddNet(context.Background(), lnet.NetConfig{Net: tcp1, Addrs: addrs("127.0.0.2")}); err != nil {
		t.Fatal(err)
	}
	wait("after net add", func(_ lnet.PeerInfo, nids []wire.NID) bool { return slices.Contains(nids, added) && len(nids) == 2 })
	if _, err := a.DelNet(context.Background(), tcp, nil); err != nil {
		t.Fatal(err)
	}
	wait("after the primary's net went", func(p lnet.PeerInfo, nids []wire.NID) bool {
		return p.Primary == added && slices.Equal(nids, []wire.NID{added})
	})
	// b reaches a by the NID left.
	if err := putWait(t, b, wire.ProcessID{NID: added, PID: a.PID()}, []byte("c")); err != nil {
		t.Fatal(err)
	}
}

// TestPushKeepsPeerIdentity: a node with two NIDs on one net discovers a
// peer that knows it by one; its discovery push, whichever NID it comes
// from, joins the other NID to that peer, which keeps its primary (the
// push does not make a second peer of the node).
func TestPushKeepsPeerIdentity(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.2", "127.0.0.3")
	tcp := wire.Net{Type: wire.TCP}
	a := dynNode(t, 5*time.Second, lnet.NetConfig{Net: tcp, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")}, Options: fastOpts(port)})
	b := dynNode(t, 5*time.Second, lnet.NetConfig{Net: tcp, Addrs: addrs("127.0.0.3"), Options: fastOpts(port)})
	sink(t, b, 16, 64)
	a1, a2 := wire.MustParseNID("127.0.0.1@tcp"), wire.MustParseNID("127.0.0.2@tcp")
	toB := wire.ProcessID{NID: wire.MustParseNID("127.0.0.3@tcp"), PID: b.PID()}
	// First without discovery: b knows a by the NID a's PUT came from.
	g := a.Globals()
	g.Discovery = false
	if err := a.SetGlobals(g); err != nil {
		t.Fatal(err)
	}
	if err := putWait(t, a, toB, []byte("first")); err != nil {
		t.Fatal(err)
	}
	var primary wire.NID
	for _, p := range b.Peers() {
		if p.Primary == a1 || p.Primary == a2 {
			primary = p.Primary
		}
	}
	if primary.IsZero() {
		t.Fatalf("b does not know a: %+v", b.Peers())
	}
	g.Discovery = true
	if err := a.SetGlobals(g); err != nil {
		t.Fatal(err)
	}
	for i := range 4 { // (a's sends alternate between its NIs; the first discovers b)
		if err := putWait(t, a, toB, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var peersOfA []lnet.PeerInfo
		for _, p := range b.Peers() {
			if slices.ContainsFunc(p.NIs, func(n lnet.PeerNIStats) bool { return n.NID == a1 || n.NID == a2 }) {
				peersOfA = append(peersOfA, p)
			}
		}
		if len(peersOfA) == 1 && len(peersOfA[0].NIs) == 2 && peersOfA[0].MultiRail {
			// The primary is the one b knew first, or a's first NID
			// (the push's order), not a NID the push came from.
			if got := peersOfA[0].Primary; got != primary && got != a1 {
				t.Fatalf("the push made %v a's primary NID on b, was %v", got, primary)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b knows a as %+v, want one multi-rail peer with both NIDs", peersOfA)
		}
	}
}

// TestUnlinkCancelsQueuedSend: a PUT waiting in the LND for a connection
// — to a NID nobody serves (refused), or to a host that accepts and never
// answers the handshake (a hung node) — ends with ErrCanceled as soon as
// its sender unlinks the MD (a client that moved on to a failover
// server), and is not sent again, instead of at its deadline a minute
// later. A PUT to the same NID that was not given up keeps waiting.
func TestUnlinkCancelsQueuedSend(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.3", "127.0.0.4")
	a := dynNode(t, time.Minute, lnet.NetConfig{Net: wire.Net{Type: wire.TCP}, Addrs: addrs("127.0.0.1"), Options: fastOpts(port)})
	hung, err := net.Listen("tcp", net.JoinHostPort("127.0.0.4", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	go func() {
		var held []net.Conn // never answered; closed with the listener
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	for _, to := range []string{"127.0.0.3@tcp", "127.0.0.4@tcp"} {
		t.Run(to, func(t *testing.T) {
			target := wire.ProcessID{NID: wire.MustParseNID(to), PID: wire.PIDLustre}
			put := func() (lnet.MDHandle, <-chan lnet.Event) {
				evs := make(chan lnet.Event, 4)
				h, err := a.Bind(lnet.MD{Buffers: [][]byte{[]byte("given up")}, Threshold: 1, Handler: func(ev lnet.Event) { evs <- ev }})
				if err != nil {
					t.Fatal(err)
				}
				if err := a.Put(context.Background(), h, lnet.NoAckReq, target, 50, 0, 0, 0); err != nil {
					t.Fatal(err)
				}
				return h, evs
			}
			h, evs := put()
			_, keptEvs := put()
			time.Sleep(100 * time.Millisecond) // queued; connection attempts going on
			start := time.Now()
			if err := a.Unlink(h); err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-evs:
				if ev.Type != lnet.EventSend || !errors.Is(ev.Status, lnet.ErrCanceled) {
					t.Fatalf("event %v %v, want SEND with ErrCanceled", ev.Type, ev.Status)
				}
				if el := time.Since(start); el > time.Second {
					t.Errorf("canceled after %v", el)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the unlinked PUT's send did not end within 10 s (its deadline is a minute away)")
			}
			select {
			case ev := <-evs:
				if ev.Type != lnet.EventUnlink {
					t.Fatalf("after the canceled SEND: %v %v, want UNLINK", ev.Type, ev.Status)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no UNLINK after the canceled SEND")
			}
			select {
			case ev := <-keptEvs:
				t.Fatalf("the PUT that was not given up ended: %v %v", ev.Type, ev.Status)
			case <-time.After(500 * time.Millisecond):
			}
		})
	}
}
