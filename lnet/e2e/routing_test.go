package e2e

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// The nets tcp1 and tcp2 are labels on loopback addresses: A has an NI on
// tcp1 only, B on tcp2 only, the routers on both, so A reaches B only
// through a router.

// TestRouteOneRouter: an MTU-size PUT and GET from A to B through one
// router arrive byte for byte, with the header's source and destination
// kept, and the ACK and REPLY come back the same way.
func TestRouteOneRouter(t *testing.T) {
	port := freePort(t, "127.0.1.1", "127.0.1.2", "127.0.2.1", "127.0.2.2")
	r := start(t, "R", "tcp1(127.0.1.2),tcp2(127.0.2.2)", port, func(c *lnet.Config) { c.Routing = true })
	a := start(t, "A", "tcp1(127.0.1.1)", port, routes(via("tcp2", "127.0.1.2@tcp1")))
	b := start(t, "B", "tcp2(127.0.2.1)", port, routes(via("tcp1", "127.0.2.2@tcp2")))

	in := make([]byte, wire.MTU)
	got := newEvents()
	if _, err := b.Attach(5, lnet.AnyProcess, 7, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{in[:100], in[100:]}, Threshold: 1, Options: lnet.MDOpPut, Handler: got.handler}); err != nil {
		t.Fatal(err)
	}
	out := pattern(1, wire.MTU)
	if _, err := b.Attach(6, lnet.AnyProcess, 8, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{out}, Threshold: 1, Options: lnet.MDOpGet}); err != nil {
		t.Fatal(err)
	}

	// PUT.
	data := pattern(2, wire.MTU)
	ev := newEvents()
	h, _ := a.Bind(lnet.MD{Buffers: [][]byte{data[:4096], data[4096:]}, Threshold: 1, Handler: ev.handler})
	if err := a.Put(context.Background(), h, lnet.AckReq, proc("127.0.2.1@tcp2"), 5, 7, 0, 0xfeed); err != nil {
		t.Fatal(err)
	}
	if e := ev.next(t); e.Type != lnet.EventSend || e.Status != nil {
		t.Fatalf("SEND %+v", e)
	}
	if e := ev.next(t); e.Type != lnet.EventAck || e.Status != nil || e.MLength != wire.MTU {
		t.Fatalf("ACK %+v", e)
	}
	e := got.next(t)
	if e.Type != lnet.EventPut || e.Status != nil || e.MLength != wire.MTU || e.HdrData != 0xfeed ||
		e.Initiator != proc("127.0.1.1@tcp1") || e.Target != proc("127.0.2.1@tcp2") {
		t.Fatalf("PUT at B: %+v", e)
	}
	if !bytes.Equal(in, data) {
		t.Fatal("PUT payload differs at B")
	}

	// GET.
	sinkBuf := make([]byte, wire.MTU)
	ev = newEvents()
	h, _ = a.Bind(lnet.MD{Buffers: [][]byte{sinkBuf}, Threshold: 1, Handler: ev.handler})
	if err := a.Get(context.Background(), h, proc("127.0.2.1@tcp2"), 6, 8, 0); err != nil {
		t.Fatal(err)
	}
	ev.next(t) // SEND
	if e := ev.next(t); e.Type != lnet.EventReply || e.Status != nil || e.MLength != wire.MTU {
		t.Fatalf("REPLY %+v", e)
	}
	if !bytes.Equal(sinkBuf, out) {
		t.Fatal("GET payload differs at A")
	}

	// The router counted what it forwarded (once its LND was done with
	// each, maybe after A had the answer); A counted its gateway.
	waitFor(t, "R to count 4 forwards of 2 MTUs", 5*time.Second, func() bool {
		rs := r.Stats().Router
		return rs.RouteCount >= 4 && rs.RouteLength >= 2*wire.MTU
	})
	rs := r.Stats().Router
	if !rs.Enabled || rs.RouteCount < 4 || rs.RouteLength < 2*wire.MTU || rs.DropCount != 0 || rs.MaxInUse < 1 {
		t.Fatalf("router stats %+v", rs)
	}
	gws := a.Stats().Gateways
	if len(gws) != 1 || !gws[0].Up || gws[0].SendCount < 2 || gws[0].Pings == 0 && gws[0].SendCount == 0 {
		t.Fatalf("A's gateways %+v", gws)
	}
	if !routeUp(a, nid("127.0.1.2@tcp1")) || !a.Routes()[0].Up || a.RoutingEnabled() || !r.RoutingEnabled() {
		t.Fatalf("routes %+v", a.Routes())
	}
	// Pings and discovery cross the router too.
	info, _, err := a.Ping(context.Background(), nid("127.0.2.1@tcp2"))
	if err != nil || len(info.NIDs) != 2 || info.NIDs[1].NID != nid("127.0.2.1@tcp2") {
		t.Fatalf("routed ping: %+v %v", info, err)
	}
}

// TestRouteTwoRouters: with two equal routes both routers carry traffic;
// when one goes away mid-stream, the other carries everything, and
// nothing is lost once failed PUTs are retried.
func TestRouteTwoRouters(t *testing.T) {
	port := freePort(t, "127.0.1.1", "127.0.1.2", "127.0.1.3", "127.0.2.1", "127.0.2.2", "127.0.2.3")
	routing := func(c *lnet.Config) { c.Routing = true }
	r1 := start(t, "R1", "tcp1(127.0.1.2),tcp2(127.0.2.2)", port, routing)
	r2 := start(t, "R2", "tcp1(127.0.1.3),tcp2(127.0.2.3)", port, routing)
	a := start(t, "A", "tcp1(127.0.1.1)", port, routes(via("tcp2", "127.0.1.2@tcp1"), via("tcp2", "127.0.1.3@tcp1")))
	b := start(t, "B", "tcp2(127.0.2.1)", port, routes(via("tcp1", "127.0.2.2@tcp2"), via("tcp1", "127.0.2.3@tcp2")))
	const size, n = 8192, 220
	s := attachSink(t, b, 5, n, size, true)
	target := proc("127.0.2.1@tcp2")

	deadline := time.Now().Add(40 * time.Second)
	stream := func(from, to int) (fails int) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		sem := make(chan struct{}, 8)
		for i := from; i < to; i++ {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				f := putRetry(t, a, target, 5, uint64(i), size, deadline)
				mu.Lock()
				fails += f
				mu.Unlock()
			}()
		}
		wg.Wait()
		return fails
	}
	stream(0, 100)
	c1, c2 := r1.Stats().Router.RouteCount, r2.Stats().Router.RouteCount
	if c1 < 25 || c2 < 25 {
		t.Fatalf("forwarded by R1 %d, by R2 %d: want both used", c1, c2)
	}

	// R1 goes away while PUTs are in flight.
	done := make(chan int)
	go func() { done <- stream(100, 200) }()
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	fails := <-done
	// B's PUT events may come a moment after the ACKs that ended the
	// stream (LNet promises no order between them).
	waitFor(t, "B's handler", 5*time.Second, func() bool { miss, _, _ := s.missing(200); return len(miss) == 0 })
	miss, seen, bad := s.missing(200)
	if len(miss) > 0 || len(bad) > 0 {
		t.Fatalf("B missing %v (saw %d), bad %v", miss, seen, bad)
	}
	waitFor(t, "A's route via R1 down", 5*time.Second, func() bool { return !routeUp(a, nid("127.0.1.2@tcp1")) })
	if !routeUp(a, nid("127.0.1.3@tcp1")) {
		t.Fatal("A's route via R2 down")
	}
	before := r2.Stats().Router.RouteCount
	stream(200, 220)
	// 20 PUTs and their ACKs; R2 counts a message once its LND is done
	// with it, which may be after A has the ACK.
	waitFor(t, "R2 to forward 20 PUTs and their ACKs", 5*time.Second, func() bool {
		return r2.Stats().Router.RouteCount-before >= 40
	})
	t.Logf("R1 forwarded %d, R2 %d; %d PUTs retried after R1 went", c1, c2, fails)
}

// TestRouterWithoutRouting: a node without Routing drops what is not for
// it, and counts it; pings then show the route down.
func TestRouterWithoutRouting(t *testing.T) {
	port := freePort(t, "127.0.1.1", "127.0.1.2", "127.0.1.4", "127.0.2.1", "127.0.2.2")
	r := start(t, "R", "tcp1(127.0.1.2),tcp2(127.0.2.2)", port, nil)
	// A does not ping its gateway within the test: its PUT reaches R.
	a := start(t, "A", "tcp1(127.0.1.1)", port, func(c *lnet.Config) {
		c.Routes = []lnet.Route{via("tcp2", "127.0.1.2@tcp1")}
		c.RouterCheckInterval, c.RecoveryInterval = time.Hour, time.Hour
		c.TransactionTimeout = 300 * time.Millisecond
		c.DisableDiscovery = true
	})
	b := start(t, "B", "tcp2(127.0.2.1)", port, nil)
	s := attachSink(t, b, 5, 1, 64, false)
	if err := put(t, a, proc("127.0.2.1@tcp2"), 5, 1, 0, make([]byte, 64)); !errors.Is(err, lnet.ErrTimeout) {
		t.Fatalf("PUT through a non-router: %v, want the ACK to time out", err)
	}
	rs := r.Stats()
	ni, _ := rs.NI(nid("127.0.1.2@tcp1"))
	if rs.Router.Enabled || rs.Router.DropCount != 1 || rs.Router.DropLength != 64 || ni.DropCount != 1 {
		t.Fatalf("R's stats: router %+v, NI %+v", rs.Router, ni)
	}
	if _, seen, _ := s.missing(0); seen != 0 {
		t.Fatal("B got the PUT")
	}
	// A node that pings its gateways learns it does not route.
	a2 := start(t, "A2", "tcp1(127.0.1.4)", port, routes(via("tcp2", "127.0.1.2@tcp1")))
	waitFor(t, "route down", 5*time.Second, func() bool { return !routeUp(a2, nid("127.0.1.2@tcp1")) })
	if err := put(t, a2, proc("127.0.2.1@tcp2"), 5, 2, 0, make([]byte, 64)); !errors.Is(err, lnet.ErrNoRoute) {
		t.Fatalf("PUT with the only route down: %v, want ErrNoRoute", err)
	}
	if gws := a2.Stats().Gateways; len(gws) != 1 || gws[0].Up || gws[0].Pings == 0 || gws[0].LastAlive.IsZero() {
		t.Fatalf("A2's gateway: %+v", gws)
	}
}

// TestRouterBackPressure: with two router buffers and a stalled
// destination, the router holds at most two payloads and stops reading
// from the sender instead of queueing; once the destination moves again
// everything arrives, byte for byte.
func TestRouterBackPressure(t *testing.T) {
	port := freePort(t, "127.0.1.1", "127.0.1.2", "127.0.2.1", "127.0.2.2")
	r := start(t, "R", "tcp1(127.0.1.2),tcp2(127.0.2.2)", port, func(c *lnet.Config) {
		c.Routing = true
		c.RouterBuffers = 2
	})
	a := start(t, "A", "tcp1(127.0.1.1)", port, routes(via("tcp2", "127.0.1.2@tcp1")))
	b := start(t, "B", "tcp2(127.0.2.1)", port, routes(via("tcp1", "127.0.2.2@tcp2")))
	const n, step = 64, 4096
	// The payloads are views of one base pattern, each starting further in.
	base := pattern(9, wire.MTU+n*step)
	payload := func(seq uint64) []byte { return base[seq*step : seq*step+wire.MTU] }
	release := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var got []uint64
	var bad int
	buf := make([]byte, wire.MTU)
	if _, err := b.Attach(5, lnet.AnyProcess, 0, 0, lnet.InsertLast, lnet.MD{
		Buffers: [][]byte{buf}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDManageRemote,
		Handler: func(ev lnet.Event) {
			if ev.Type != lnet.EventPut {
				return
			}
			// Every PUT comes in on R's one bulk connection to B, whose
			// reader runs this handler before it reads the next: buf holds
			// this PUT's payload.
			ok := bytes.Equal(buf, payload(ev.HdrData))
			once.Do(func() { <-release }) // B stalls on the first PUT
			mu.Lock()
			got = append(got, ev.HdrData)
			if !ok {
				bad++
			}
			mu.Unlock()
		},
	}); err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	acks := newEvents()
	for i := range n {
		h, _ := a.Bind(lnet.MD{Buffers: [][]byte{payload(uint64(i))}, Threshold: 1, Handler: acks.handler})
		if err := a.Put(context.Background(), h, lnet.AckReq, proc("127.0.2.1@tcp2"), 5, 0, 0, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the router to run out of buffers", 20*time.Second, func() bool {
		rs := r.Stats().Router
		return rs.InUse == 2 && rs.Waiting == 1
	})
	// However long B stalls, the router holds no more than its buffers
	// (a forwarded PUT may leave one early if the socket to B takes it
	// whole, and the waiting one then takes it).
	time.Sleep(100 * time.Millisecond)
	if rs := r.Stats().Router; rs.Allocated != 2 || rs.MaxInUse != 2 || rs.InUse+rs.Waiting < 1 {
		t.Fatalf("router stats while stalled: %+v", rs)
	}
	close(release)
	released = true
	for range 2 * n {
		if e := acks.next(t); e.Status != nil {
			t.Fatalf("%v: %v", e.Type, e.Status)
		}
	}
	// An ACK leaves once the data is in place, maybe before B's handler
	// has seen the event.
	waitFor(t, "B's handler", 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == n })
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n || bad != 0 {
		t.Fatalf("B got %d PUTs, %d with a wrong payload", len(got), bad)
	}
	waitFor(t, "R to count every forward", 5*time.Second, func() bool { return r.Stats().Router.RouteCount >= 2*n })
	if rs := r.Stats().Router; rs.Allocated != 2 || rs.MaxInUse != 2 {
		t.Fatalf("router stats after: %+v", rs)
	}
}

// TestRouterDropsForDeadNextHop: once a next hop has failed and been
// silent for its NI's peer timeout, the router drops what it would forward
// to it at once (Lustre's lnet_peer_alive_locked), instead of holding a
// router buffer until the message times out, and counts the drop; once the
// next hop answers the router's recovery pings again, forwarding resumes
// and the data arrives byte for byte.
func TestRouterDropsForDeadNextHop(t *testing.T) {
	port := freePort(t, "127.0.1.1", "127.0.1.2", "127.0.2.1", "127.0.2.2")
	r := start(t, "R", "tcp1(127.0.1.2),tcp2(127.0.2.2)", port, func(c *lnet.Config) {
		c.Routing = true
		c.TransactionTimeout = 500 * time.Millisecond
		for i := range c.Networks {
			c.Networks[i].Tunables.PeerTimeout = 300 * time.Millisecond
		}
	})
	a := start(t, "A", "tcp1(127.0.1.1)", port, func(c *lnet.Config) {
		c.Routes = []lnet.Route{via("tcp2", "127.0.1.2@tcp1")}
		c.TransactionTimeout = time.Second
		c.DisableDiscovery = true
	})
	bNID := nid("127.0.2.1@tcp2")
	// B is not up: R's forward of the first PUT waits for a connection
	// until its transaction timeout, fails, and lowers B's health.
	if err := put(t, a, proc("127.0.2.1@tcp2"), 5, 0, 0, pattern(0, 64)); !errors.Is(err, lnet.ErrTimeout) {
		t.Fatalf("PUT to a B that is down: %v, want the ACK to time out", err)
	}
	waitFor(t, "R to find B failing", 5*time.Second, func() bool {
		rs := r.Stats()
		st, ok := rs.Peer(bNID)
		return ok && st.Health < 1000
	})
	waitFor(t, "R's first forward to end", 5*time.Second, func() bool { return r.Stats().Router.InUse == 0 })
	// From now on a forward R queued for B would wait a minute.
	r.SetTransactionTimeout(time.Minute)
	before := r.Stats().Router
	if err := put(t, a, proc("127.0.2.1@tcp2"), 5, 1, 0, pattern(1, 64)); !errors.Is(err, lnet.ErrTimeout) {
		t.Fatalf("PUT to a dead B: %v, want the ACK to time out", err)
	}
	// A's PUT timed out after a second; R dropped it long before.
	if rs := r.Stats().Router; rs.InUse != 0 || rs.Waiting != 0 || rs.DropCount != before.DropCount+1 ||
		rs.DropLength != before.DropLength+64 || rs.RouteCount != before.RouteCount {
		t.Fatalf("R's router stats after a PUT to a dead next hop: %+v (before: %+v)", rs, before)
	}

	// B comes up: R's recovery pings reach it, and forwarding resumes.
	b := start(t, "B", "tcp2(127.0.2.1)", port, routes(via("tcp1", "127.0.2.2@tcp2")))
	s := attachSink(t, b, 5, 3, 64, true)
	waitFor(t, "R to hear from B", 10*time.Second, func() bool {
		rs := r.Stats()
		st, _ := rs.Peer(bNID)
		return st.RecvCount > 0
	})
	r.SetTransactionTimeout(5 * time.Second)
	putRetry(t, a, proc("127.0.2.1@tcp2"), 5, 2, 64, time.Now().Add(10*time.Second))
	// The ACK can reach A before B's handler has seen the PUT.
	waitFor(t, "B's handler", 5*time.Second, func() bool { _, seen, _ := s.missing(3); return seen > 0 })
	if miss, seen, bad := s.missing(3); seen != 1 || len(miss) != 2 || miss[0] != 0 || miss[1] != 1 || len(bad) != 0 {
		t.Fatalf("B's sink: missing %v, seen %d, bad %v", miss, seen, bad)
	}
}

// TestRouterDropsQueuedForDeadNextHop: a forward that queued for a credit
// of a next hop which then died is dropped when it gets the credit (Lustre
// checks in lnet_post_send_locked), not handed to the LND to wait out its
// transaction timeout holding a router buffer.
func TestRouterDropsQueuedForDeadNextHop(t *testing.T) {
	port := freePort(t, "127.0.1.1", "127.0.1.2", "127.0.2.1", "127.0.2.2")
	r := start(t, "R", "tcp1(127.0.1.2),tcp2(127.0.2.2)", port, func(c *lnet.Config) {
		c.Routing = true
		c.TransactionTimeout = 500 * time.Millisecond
		for i := range c.Networks {
			c.Networks[i].Tunables.PeerTimeout = 300 * time.Millisecond
			if c.Networks[i].Net.Num == 2 {
				c.Networks[i].Tunables.PeerCredits = 1 // B: one forward at a time
			}
		}
	})
	a := start(t, "A", "tcp1(127.0.1.1)", port, func(c *lnet.Config) {
		c.Routes = []lnet.Route{via("tcp2", "127.0.1.2@tcp1")}
		c.TransactionTimeout = 2 * time.Second
		c.DisableDiscovery = true
	})
	bNID := nid("127.0.2.1@tcp2")
	before := r.Stats().Router
	errs := make(chan error, 2)
	send := func(seq uint64) {
		go func() { errs <- putWait(a, proc("127.0.2.1@tcp2"), 5, seq, 0, pattern(seq, 64)) }()
	}
	// B is not up. The first forward takes B's only credit and waits in
	// socklnd for a connection until R's transaction timeout, 500ms.
	send(0)
	waitFor(t, "R to forward the first PUT", 5*time.Second, func() bool { return r.Stats().Router.InUse == 1 })
	// The second waits for that credit, with a minute to live; B's health
	// is still full, so R queues it.
	r.SetTransactionTimeout(time.Minute)
	send(1)
	waitFor(t, "R to queue the second PUT", 5*time.Second, func() bool { return r.Stats().Router.InUse == 2 })
	rs := r.Stats()
	if st, ok := rs.Peer(bNID); !ok || st.Health != 1000 || st.MaxCredits != 1 || st.Queued != 1 {
		t.Fatalf("B's peer NI at R while the first forward waits: %+v (known %v), want full health, 1 credit, 1 queued", st, ok)
	}
	// The first fails and lowers B's health; B was never heard from, so it
	// is dead, and the second is dropped as it gets the credit.
	t0 := time.Now()
	waitFor(t, "R to drop both forwards", 3*time.Second, func() bool { return r.Stats().Router.InUse == 0 })
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("the queued forward was dropped %v after the first failed", d)
	}
	if rt := r.Stats().Router; rt.Waiting != 0 || rt.DropCount != before.DropCount+2 ||
		rt.DropLength != before.DropLength+128 || rt.RouteCount != before.RouteCount {
		t.Fatalf("R's router stats: %+v (before: %+v), want both 64-byte forwards dropped, none routed", rt, before)
	}
	rs = r.Stats()
	if st, _ := rs.Peer(bNID); st.Health >= 1000 || st.SendCount != 0 {
		t.Fatalf("B's peer NI at R after the drops: %+v, want lowered health and no sends", st)
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, lnet.ErrTimeout) {
			t.Fatalf("A's PUT to a dead B: %v, want the ACK to time out", err)
		}
	}
}
