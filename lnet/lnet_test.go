package lnet_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lndtest"
	"github.com/nacrefs/nacre/lnet/wire"
)

// TestConformanceFake runs the LND suite over the fake network: two LNets,
// with a peer that can restart.
func TestConformanceFake(t *testing.T) {
	lndtest.Run(t, lndtest.Harness{
		Name: "fake",
		Pair: func(t *testing.T) (a, b *lnet.LNet, bNID wire.NID) {
			a, b = startFake(t, nil), startFake(t, nil)
			return a, b, fakeNIDOf(b)
		},
		Restart: func(t *testing.T, b *lnet.LNet) *lnet.LNet {
			nid := fakeNIDOf(b)
			if err := b.Close(context.Background()); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return startFake(t, nil, nid)
		},
	})
}

// TestConformanceSelf runs the suite with a node talking to its own
// network NID, which LNet routes through 0@lo.
func TestConformanceSelf(t *testing.T) {
	lndtest.Run(t, lndtest.Harness{
		Name: "self",
		Pair: func(t *testing.T) (a, b *lnet.LNet, bNID wire.NID) {
			ln := startFake(t, nil)
			return ln, ln, fakeNIDOf(ln)
		},
	})
}

// recorder collects events.
type recorder struct {
	mu  sync.Mutex
	evs []lnet.Event
	ch  chan lnet.Event
}

func newRecorder() *recorder { return &recorder{ch: make(chan lnet.Event, 4096)} }

func (r *recorder) handler(ev lnet.Event) { r.ch <- ev }

func (r *recorder) next(t *testing.T) lnet.Event {
	t.Helper()
	select {
	case ev := <-r.ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event in 10s")
	}
	return lnet.Event{}
}

func (r *recorder) expect(t *testing.T, typ lnet.EventType, status error) lnet.Event {
	t.Helper()
	ev := r.next(t)
	if ev.Type != typ || !errors.Is(ev.Status, status) || (status == nil && ev.Status != nil) {
		t.Fatalf("event %v status %v, want %v status %v", ev.Type, ev.Status, typ, status)
	}
	return ev
}

func target(ln *lnet.LNet) wire.ProcessID {
	return wire.ProcessID{NID: fakeNIDOf(ln), PID: ln.PID()}
}

func stats(ln *lnet.LNet, nid wire.NID) lnet.NIStats {
	s := ln.Stats()
	n, _ := s.NI(nid)
	return n
}

// exact adds to mod what tests that count messages need: no automatic
// discovery pings and no health recovery pings.
func exact(mod func(*lnet.Config)) func(*lnet.Config) {
	return func(c *lnet.Config) {
		c.DisableDiscovery = true
		c.HealthSensitivity = -1
		if mod != nil {
			mod(c)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBackPressure fills the credit queue of an NI and checks that Put
// blocks, gives up with its context without side effects, and that
// everything flows once the network moves again.
func TestBackPressure(t *testing.T) {
	fabricUsers.Lock()
	defer fabricUsers.Unlock()
	tun := func(c *lnet.Config) {
		c.Networks[0].Tunables = lnet.Tunables{Credits: 4, PeerCredits: 2}
		c.MaxWaiting = 5
	}
	a, b := startFake(t, exact(tun)), startFake(t, exact(tun))
	got := newRecorder()
	if _, err := b.Attach(1, lnet.AnyProcess, 0, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDManageRemote, Handler: got.handler}); err != nil {
		t.Fatal(err)
	}
	src := newRecorder()
	h, err := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 8, Handler: src.handler})
	if err != nil {
		t.Fatal(err)
	}
	resume := fab.pause()
	defer resume()
	nid := fakeNIDOf(a)
	// 2 peer credits in the LND, 5 waiting: the 8th Put blocks.
	for i := range 7 {
		if err := a.Put(context.Background(), h, lnet.NoAckReq, target(b), 1, 0, 0, uint64(i)); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	s := stats(a, nid)
	if s.Queued != 5 || s.Credits != 2 {
		t.Fatalf("NI stats %+v, want 5 queued and 2 credits left", s)
	}
	p, _ := func() (lnet.PeerNIStats, bool) { st := a.Stats(); return st.Peer(fakeNIDOf(b)) }()
	if p.Credits != -5 || p.Queued != 5 || p.MinCredits != -5 {
		t.Fatalf("peer stats %+v, want credits -5, 5 queued", p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err = a.Put(ctx, h, lnet.NoAckReq, target(b), 1, 0, 0, 99)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put on a full queue: %v, want DeadlineExceeded", err)
	}
	// The refused Put took nothing: the MD still has its eighth operation.
	done := make(chan error, 1)
	go func() { done <- a.Put(context.Background(), h, lnet.NoAckReq, target(b), 1, 0, 0, 7) }()
	select {
	case err := <-done:
		t.Fatalf("Put returned %v with a full queue", err)
	case <-time.After(20 * time.Millisecond):
	}
	resume()
	if err := <-done; err != nil {
		t.Fatalf("blocked Put: %v", err)
	}
	for i := range 8 {
		if ev := got.expect(t, lnet.EventPut, nil); ev.HdrData != uint64(i) {
			t.Fatalf("PUT %d arrived as %d", ev.HdrData, i)
		}
	}
	for range 8 {
		src.expect(t, lnet.EventSend, nil)
	}
	if ev := src.expect(t, lnet.EventUnlink, nil); !ev.Unlinked {
		t.Fatal("UNLINK without Unlinked")
	}
	waitFor(t, "credits back", func() bool {
		s := stats(a, nid)
		return s.Queued == 0 && s.Credits == 4 && s.MinCredits == 2
	})
}

// TestQueuedTimeout: messages that wait for credits past the transaction
// timeout fail with ErrTimeout without ever reaching the LND.
func TestQueuedTimeout(t *testing.T) {
	fabricUsers.Lock()
	defer fabricUsers.Unlock()
	tun := func(c *lnet.Config) { c.Networks[0].Tunables = lnet.Tunables{Credits: 4, PeerCredits: 1} }
	a, b := startFake(t, exact(tun)), startFake(t, exact(tun))
	a.SetTransactionTimeout(100 * time.Millisecond)
	resume := fab.pause()
	defer resume()
	r := newRecorder()
	h, _ := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: lnet.ThresholdInfinite, Handler: r.handler})
	for range 3 {
		if err := a.Put(context.Background(), h, lnet.AckReq, target(b), 1, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Two never left LNet: SEND and ACK both time out.
	for range 2 {
		r.expect(t, lnet.EventSend, lnet.ErrTimeout)
		r.expect(t, lnet.EventAck, lnet.ErrTimeout)
	}
	if n := fab.lookup(fakeNIDOf(a)).sends.Load(); n != 1 {
		t.Fatalf("the LND got %d sends, want 1", n)
	}
	resume()
	// The one in the LND goes out; b has no match, so its ACK times out.
	r.expect(t, lnet.EventSend, nil)
	r.expect(t, lnet.EventAck, lnet.ErrTimeout)
}

// TestQueuedCanceled: messages waiting for credits whose MDs their sender
// unlinks end at once with ErrCanceled, never reaching the LND, and give
// their place back; the one the LND holds goes out.
func TestQueuedCanceled(t *testing.T) {
	fabricUsers.Lock()
	defer fabricUsers.Unlock()
	tun := func(c *lnet.Config) { c.Networks[0].Tunables = lnet.Tunables{Credits: 4, PeerCredits: 1} }
	a, b := startFake(t, exact(tun)), startFake(t, exact(tun))
	resume := fab.pause()
	defer resume()
	var hs []lnet.MDHandle
	var rs []*recorder
	for range 3 {
		r := newRecorder()
		h, err := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 1, Handler: r.handler})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Put(context.Background(), h, lnet.NoAckReq, target(b), 1, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		hs, rs = append(hs, h), append(rs, r)
	}
	for i := 1; i < 3; i++ {
		if err := a.Unlink(hs[i]); err != nil {
			t.Fatal(err)
		}
		rs[i].expect(t, lnet.EventSend, lnet.ErrCanceled)
		rs[i].expect(t, lnet.EventUnlink, nil)
	}
	if n := fab.lookup(fakeNIDOf(a)).sends.Load(); n != 1 {
		t.Fatalf("the LND got %d sends, want 1", n)
	}
	resume()
	rs[0].expect(t, lnet.EventSend, nil)
	// The credits came back: another PUT goes.
	r := newRecorder()
	h, _ := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 1, Handler: r.handler})
	if err := a.Put(context.Background(), h, lnet.NoAckReq, target(b), 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	r.expect(t, lnet.EventSend, nil)
}

// TestSendBeforeAck: an ACK that arrives before the LND finalizes the PUT
// is held back until the SEND event is out.
func TestSendBeforeAck(t *testing.T) {
	fabricUsers.Lock()
	defer fabricUsers.Unlock()
	fab.mu.Lock()
	fab.late = 30 * time.Millisecond
	fab.mu.Unlock()
	defer func() { fab.mu.Lock(); fab.late = 0; fab.mu.Unlock() }()
	a, b := startFake(t, nil), startFake(t, nil)
	if _, err := b.Attach(1, lnet.AnyProcess, 0, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDManageRemote}); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 8)
	if _, err := b.Attach(2, lnet.AnyProcess, 0, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{[]byte("getdata!")}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpGet | lnet.MDManageRemote}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r := newRecorder()
		h, _ := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 1, Handler: r.handler})
		if err := a.Put(context.Background(), h, lnet.AckReq, target(b), 1, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		r.expect(t, lnet.EventSend, nil)
		if ev := r.expect(t, lnet.EventAck, nil); !ev.Unlinked {
			t.Fatal("ACK not marked unlinked")
		}
		r.expect(t, lnet.EventUnlink, nil)

		g := newRecorder()
		h, _ = a.Bind(lnet.MD{Buffers: [][]byte{dst}, Threshold: 1, Handler: g.handler})
		if err := a.Get(context.Background(), h, target(b), 2, 0, 0); err != nil {
			t.Fatal(err)
		}
		g.expect(t, lnet.EventSend, nil)
		g.expect(t, lnet.EventReply, nil)
		g.expect(t, lnet.EventUnlink, nil)
		if string(dst) != "getdata!" {
			t.Fatalf("REPLY data %q", dst)
		}
	}
}

// TestAnswerBeforeFailedSend: the LND reports a failed send after the
// message got through and its ACK arrived; the ACK still ends the
// operation, after the failed SEND, and nothing is resent.
func TestAnswerBeforeFailedSend(t *testing.T) {
	fabricUsers.Lock()
	defer fabricUsers.Unlock()
	fab.mu.Lock()
	fab.late, fab.after = 30*time.Millisecond, []error{lnet.ErrConnReset}
	fab.mu.Unlock()
	defer func() { fab.mu.Lock(); fab.late, fab.after = 0, nil; fab.mu.Unlock() }()
	a, b := startFake(t, nil), startFake(t, nil)
	got := newRecorder()
	if _, err := b.Attach(1, lnet.AnyProcess, 0, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDManageRemote, Handler: got.handler}); err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	h, _ := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 1, Handler: r.handler})
	if err := a.Put(context.Background(), h, lnet.AckReq, target(b), 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	r.expect(t, lnet.EventSend, lnet.ErrConnReset)
	if ev := r.expect(t, lnet.EventAck, nil); !ev.Unlinked {
		t.Fatal("ACK not marked unlinked")
	}
	r.expect(t, lnet.EventUnlink, nil)
	got.expect(t, lnet.EventPut, nil)
	select {
	case ev := <-got.ch:
		t.Fatalf("PUT delivered twice: %v", ev.Type)
	case <-time.After(50 * time.Millisecond):
	}
	if s := a.Stats(); s.Pending != 0 || s.MDs != 0 {
		t.Fatalf("left behind: %d pending, %d MDs", s.Pending, s.MDs)
	}
}

// TestResend: a send failing on the connection is tried again RetryCount
// times within the transaction timeout.
func TestResend(t *testing.T) {
	fabricUsers.Lock()
	defer fabricUsers.Unlock()
	a, b := startFake(t, exact(nil)), startFake(t, exact(nil))
	got := newRecorder()
	if _, err := b.Attach(1, lnet.AnyProcess, 0, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDManageRemote, Handler: got.handler}); err != nil {
		t.Fatal(err)
	}
	put := func() *recorder {
		r := newRecorder()
		h, _ := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 1, Handler: r.handler})
		if err := a.Put(context.Background(), h, lnet.AckReq, target(b), 1, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		return r
	}
	fab.mu.Lock()
	fab.fail = []error{lnet.ErrConnReset, lnet.ErrPeerUnreachable}
	fab.mu.Unlock()
	r := put()
	r.expect(t, lnet.EventSend, nil)
	r.expect(t, lnet.EventAck, nil)
	got.expect(t, lnet.EventPut, nil)

	fab.mu.Lock()
	fab.fail = []error{lnet.ErrConnReset, lnet.ErrConnReset, lnet.ErrConnReset}
	fab.mu.Unlock()
	r = put()
	r.expect(t, lnet.EventSend, lnet.ErrConnReset)
	r.expect(t, lnet.EventAck, lnet.ErrConnReset)

	// Errors that say the message itself is done for are not retried.
	fab.mu.Lock()
	fab.fail = []error{lnet.ErrPeerRestarted}
	fab.mu.Unlock()
	r = put()
	r.expect(t, lnet.EventSend, lnet.ErrPeerRestarted)
	r.expect(t, lnet.EventAck, lnet.ErrPeerRestarted)
	if s := stats(a, fakeNIDOf(a)); s.SendErrors != 6 {
		t.Fatalf("%d send errors, want 6", s.SendErrors)
	}
}

// TestClose: Close fails what waits for credits and what awaits an answer,
// and everything after it.
func TestClose(t *testing.T) {
	fabricUsers.Lock()
	defer fabricUsers.Unlock()
	tun := func(c *lnet.Config) { c.Networks[0].Tunables = lnet.Tunables{Credits: 4, PeerCredits: 1} }
	a, b := startFake(t, exact(tun)), startFake(t, exact(tun))
	// A GET that b never answers.
	g := newRecorder()
	gh, _ := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 1, Handler: g.handler})
	if err := a.Get(context.Background(), gh, target(b), 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	g.expect(t, lnet.EventSend, nil)
	// One PUT held by the LND, one waiting for credits.
	resume := fab.pause()
	defer resume()
	r := newRecorder()
	h, _ := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: lnet.ThresholdInfinite, Handler: r.handler})
	for range 2 {
		if err := a.Put(context.Background(), h, lnet.NoAckReq, target(b), 1, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close(context.Background()) }()
	r.expect(t, lnet.EventSend, lnet.ErrShutdown)
	resume() // the fake LND's link finishes its delivery, then shuts down
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	g.expect(t, lnet.EventReply, lnet.ErrShutdown)
	g.expect(t, lnet.EventUnlink, nil)
	if err := a.Put(context.Background(), h, lnet.NoAckReq, target(b), 1, 0, 0, 0); !errors.Is(err, lnet.ErrShutdown) {
		t.Fatalf("Put after Close: %v", err)
	}
	if _, err := a.Bind(lnet.MD{Threshold: 1}); !errors.Is(err, lnet.ErrShutdown) {
		t.Fatalf("Bind after Close: %v", err)
	}
	if _, err := a.Attach(0, lnet.AnyProcess, 0, 0, lnet.InsertLast, lnet.MD{Threshold: 1, Options: lnet.MDOpPut}); !errors.Is(err, lnet.ErrShutdown) {
		t.Fatalf("Attach after Close: %v", err)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestMultiRail: two NIs on one net share the sends to a peer round robin.
func TestMultiRail(t *testing.T) {
	n1, n2 := newFakeNID(), newFakeNID()
	a := startFake(t, exact(nil), n1, n2)
	b := startFake(t, nil)
	if got := a.NIDs(); len(got) != 3 || got[0] != wire.LoNID || got[1] != n1 || got[2] != n2 {
		t.Fatalf("NIDs %v", got)
	}
	r := newRecorder()
	if _, err := b.Attach(1, lnet.AnyProcess, 0, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDManageRemote, Handler: r.handler}); err != nil {
		t.Fatal(err)
	}
	// Each PUT's SEND is awaited too: until then the PUT holds a credit of
	// its NI, and selection rightly prefers the other one.
	sent := newRecorder()
	h, _ := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: lnet.ThresholdInfinite, Handler: sent.handler})
	from := map[wire.NID]int{}
	for range 10 {
		if err := a.Put(context.Background(), h, lnet.NoAckReq, target(b), 1, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		from[r.expect(t, lnet.EventPut, nil).Initiator.NID]++
		sent.expect(t, lnet.EventSend, nil)
	}
	if from[n1] != 5 || from[n2] != 5 {
		t.Fatalf("PUTs by source NID %v, want 5 each", from)
	}
}

func TestNoDriver(t *testing.T) {
	cfg := lnet.DefaultConfig()
	nets, err := lnet.ParseNetworks("o2ib(192.168.7.1)")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Networks = nets
	if _, err := lnet.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "no LND registered for net type o2ib") {
		t.Fatalf("New without an o2ib driver: %v", err)
	}
}

func TestNoRoute(t *testing.T) {
	a := startFake(t, nil)
	h, _ := a.Bind(lnet.MD{Threshold: 1})
	to := wire.ProcessID{NID: wire.MustParseNID("10.0.0.1@tcp7"), PID: wire.PIDLustre}
	if err := a.Put(context.Background(), h, lnet.NoAckReq, to, 0, 0, 0, 0); !errors.Is(err, lnet.ErrNoRoute) {
		t.Fatalf("Put to another net: %v, want ErrNoRoute", err)
	}
	// The refused Put did not use the MD's only operation.
	if err := a.Put(context.Background(), h, lnet.NoAckReq, wire.ProcessID{NID: wire.LoNID, PID: a.PID()}, 0, 0, 0, 0); err != nil {
		t.Fatalf("Put after a refused one: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := startFake(t, exact(func(c *lnet.Config) { c.Registerer = reg }))
	b := startFake(t, nil)
	r := newRecorder()
	h, _ := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 100)}, Threshold: 1, Handler: r.handler})
	if err := a.Put(context.Background(), h, lnet.NoAckReq, target(b), 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	r.expect(t, lnet.EventSend, nil)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.GetGauge() != nil:
				vals[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				vals[key] = m.GetCounter().GetValue()
			}
		}
	}
	nid := fakeNIDOf(a).String()
	for key, want := range map[string]float64{
		"nacre_lnet_ni_messages_total,direction=send,ni=" + nid: 1,
		"nacre_lnet_ni_bytes_total,direction=send,ni=" + nid:    100,
		"nacre_lnet_ni_credits,ni=" + nid:                       16,
		"nacre_lnet_ni_queued_messages,ni=" + nid:               0,
		"nacre_lnet_ni_drops_total,ni=" + nid:                   0,
		"nacre_lnet_ni_credits,ni=0@lo":                         lnet.DefaultCredits,
	} {
		if got, ok := vals[key]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
		}
	}
	// b dropped the PUT (no match).
	waitFor(t, "drop counted", func() bool { return stats(b, fakeNIDOf(b)).DropCount == 1 })
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if mfs, _ := reg.Gather(); len(mfs) != 0 {
		t.Fatalf("metrics still registered after Close: %d families", len(mfs))
	}
}

func TestParseRefusals(t *testing.T) {
	a := startFake(t, nil)
	host := fab.lookup(fakeNIDOf(a)).host
	from := newFakeNID()
	base := wire.Header{Type: wire.MsgPut, SrcNID: from, DstNID: fakeNIDOf(a), SrcPID: 1, DstPID: a.PID(), PayloadLen: 5, WMD: wire.WireHandleNone}
	for name, mod := range map[string]func(*wire.Header){
		"not for us": func(h *wire.Header) { h.DstNID = wire.MustParseNID("10.1.1.1@tcp") },
		"other pid":  func(h *wire.Header) { h.DstPID++ },
		"no match":   func(*wire.Header) {},
		"stale ack": func(h *wire.Header) {
			*h = wire.Header{Type: wire.MsgAck, SrcNID: from, DstNID: h.DstNID, DstPID: h.DstPID, WMD: wire.WireHandle{Interface: 1, Object: 1}}
		},
		"stale reply": func(h *wire.Header) {
			h.Type, h.WMD = wire.MsgReply, wire.WireHandle{Interface: a.Incarnation(), Object: 12345}
		},
		"hello": func(h *wire.Header) {
			*h = wire.Header{Type: wire.MsgHello, SrcNID: from, DstNID: h.DstNID, DstPID: h.DstPID}
		},
		"lo source": func(h *wire.Header) { h.SrcNID = wire.LoNID },
	} {
		hdr := base
		mod(&hdr)
		rx := &fakeRx{m: &lnet.Msg{Payload: [][]byte{make([]byte, hdr.PayloadLen)}}, done: make(chan struct{})}
		err := host.Parse(&hdr, from, rx)
		if !errors.Is(err, lnet.ErrDropped) {
			t.Errorf("%s: Parse returned %v, want ErrDropped", name, err)
		}
		if !rx.called {
			t.Errorf("%s: payload not drained", name)
		}
	}
	if s := stats(a, fakeNIDOf(a)); s.DropCount != 7 || s.RecvCount != 7 {
		t.Fatalf("stats %+v, want 7 received and dropped", s)
	}
}

// TestHandlerReentry: handlers may call LNet, including on their own MD.
func TestHandlerReentry(t *testing.T) {
	a := startFake(t, nil)
	self := wire.ProcessID{NID: wire.LoNID, PID: a.PID()}
	done := make(chan lnet.Event, 10)
	var h lnet.MDHandle
	var err error
	h, err = a.Attach(3, lnet.AnyProcess, 0, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut, Handler: func(ev lnet.Event) {
		done <- ev
		if ev.Type == lnet.EventPut {
			if err := a.Unlink(h); err != nil {
				t.Errorf("Unlink from handler: %v", err)
			}
			// Answer from the handler.
			rh, _ := a.Bind(lnet.MD{Buffers: [][]byte{[]byte("pong")}, Threshold: 1})
			if err := a.Put(context.Background(), rh, lnet.NoAckReq, self, 4, 0, 0, 0); err != nil {
				t.Errorf("Put from handler: %v", err)
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	pong := newRecorder()
	if _, err := a.Attach(4, lnet.AnyProcess, 0, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 1, Options: lnet.MDOpPut, Handler: pong.handler}); err != nil {
		t.Fatal(err)
	}
	ph, _ := a.Bind(lnet.MD{Buffers: [][]byte{[]byte("ping")}, Threshold: 1})
	if err := a.Put(context.Background(), ph, lnet.NoAckReq, self, 3, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if ev := <-done; ev.Type != lnet.EventPut {
		t.Fatalf("first event %v", ev.Type)
	}
	if ev := <-done; ev.Type != lnet.EventUnlink {
		t.Fatalf("second event %v", ev.Type)
	}
	pong.expect(t, lnet.EventPut, nil)
}
