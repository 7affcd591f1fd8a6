package socklnd

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// A peer restarts while messages are queued behind a stalled connection to
// it: those fail with ErrPeerRestarted once the new incarnation answers,
// PeerRestarted is reported, and traffic then flows to the new one.
func TestPeerRestartQueued(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.2")
	a := startNode(t, "127.0.0.1", port, nil)
	b := startNode(t, "127.0.0.2", port, nil)
	b.h.deferRecv.Store(true) // b takes one header and stalls

	const n = 14
	// The connection first: messages queued before it is up have no
	// incarnation yet and rightly wait for the restarted peer instead of
	// failing (the count below would take them for queued behind it).
	if !a.h.send(t, a.ni, put(a.nid, b.nid, 0, pattern(0, 1<<20))) {
		t.Fatal("send")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if p := a.ni.Peers(); len(p) == 1 && len(p[0].Conns) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection from a to b (%+v)", a.ni.Peers())
		}
	}
	go func() {
		for i := 1; i < n; i++ {
			if !a.h.send(t, a.ni, put(a.nid, b.nid, uint64(i), pattern(uint64(i), 1<<20))) {
				return
			}
		}
	}()
	// Wait for a's queue to back up behind the full socket, and to stay
	// as it is (the writer stalled: what is counted stays queued).
	var queued int
	for deadline, stable := time.Now().Add(10*time.Second), 0; queued < 4 || stable < 5; {
		if time.Now().After(deadline) {
			t.Fatalf("a's queue to b never backed up (%+v)", a.ni.Peers())
		}
		time.Sleep(20 * time.Millisecond)
		if p := a.ni.Peers(); len(p) == 1 {
			if p[0].Queued == queued {
				stable++
			} else {
				queued, stable = p[0].Queued, 0
			}
		}
	}
	b.stop(t)
	a.h.waitEvent(t, b.nid, lnet.PeerDown)
	b2 := startNode(t, "127.0.0.2", port, nil)

	var restarted int
	for range n {
		f := a.h.nextFin(t)
		switch {
		case f.err == nil, errors.Is(f.err, lnet.ErrConnReset):
		case errors.Is(f.err, lnet.ErrPeerRestarted):
			restarted++
		default:
			t.Fatalf("finalized with %v", f.err)
		}
	}
	t.Logf("%d of %d messages failed with ErrPeerRestarted; %d were queued behind the old connection", restarted, n, queued)
	if restarted < queued {
		t.Fatalf("%d messages failed with ErrPeerRestarted, %d were queued behind the old connection", restarted, queued)
	}
	a.h.waitEvent(t, b.nid, lnet.PeerRestarted)
	a.log.waitLine(t, "peer restarted", "peer=127.0.0.2@tcp")
	checkFlows(t, a, b2)
}

// A message sent while the peer is down waits for a connection and goes to
// the restarted peer; the restart is noticed on the passive side when the
// new peer dials first.
func TestPeerRestartWhileDown(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.2")
	// a redials slowly, so the new b dials first.
	a := startNode(t, "127.0.0.1", port, map[string]string{"backoff_min": "2s", "backoff_max": "2s"})
	b := startNode(t, "127.0.0.2", port, nil)
	a.h.send(t, a.ni, put(a.nid, b.nid, 1, pattern(1, 100)))
	b.h.nextRx(t)
	a.h.nextFin(t)
	b.stop(t)
	a.h.waitEvent(t, b.nid, lnet.PeerDown)

	waiting := put(a.nid, b.nid, 2, pattern(2, 100))
	a.h.send(t, a.ni, waiting)
	time.Sleep(50 * time.Millisecond) // a's first dial fails; it backs off
	b2 := startNode(t, "127.0.0.2", port, nil)
	b2.h.send(t, b2.ni, put(b2.nid, a.nid, 3, pattern(3, 100)))

	a.h.waitEvent(t, b.nid, lnet.PeerRestarted)
	a.h.waitEvent(t, b.nid, lnet.PeerUp)
	if f := a.h.nextFin(t); f.msg != waiting || f.err != nil {
		t.Fatalf("message sent while the peer was down: %v", f.err)
	}
	if r := b2.h.nextRx(t); r.hdr.MatchBits != 2 || !bytes.Equal(joined(r.dst, r.mlen), pattern(2, 100)) {
		t.Fatalf("new peer got message %d", r.hdr.MatchBits)
	}
	if r := a.h.nextRx(t); r.hdr.MatchBits != 3 {
		t.Fatalf("a got %d", r.hdr.MatchBits)
	}
	checkFlows(t, a, b2)
}

// checkFlows sends a bulk and a small message each way between a and b and
// checks they arrive (after any earlier messages of the test, numbered
// below 100), and that a knows b's incarnation.
func checkFlows(t *testing.T, a, b *node) {
	t.Helper()
	for i, size := range []int{1 << 20, 10} {
		for _, dir := range [][2]*node{{a, b}, {b, a}} {
			from, to := dir[0], dir[1]
			bits := uint64(100 + i)
			want := pattern(bits, size)
			from.h.send(t, from.ni, put(from.nid, to.nid, bits, want))
			r := to.h.nextRx(t)
			for r.hdr.MatchBits < 100 { // sent earlier by the test, arriving now
				if !bytes.Equal(joined(r.dst, r.mlen), pattern(r.hdr.MatchBits, int(r.hdr.PayloadLen))) {
					t.Fatalf("%v -> %v: message %d differs", from.nid, to.nid, r.hdr.MatchBits)
				}
				r = to.h.nextRx(t)
			}
			if r.hdr.MatchBits != bits || !bytes.Equal(joined(r.dst, r.mlen), want) {
				t.Fatalf("%v -> %v: got message %d", from.nid, to.nid, r.hdr.MatchBits)
			}
			if f := from.h.nextFin(t); f.err != nil {
				t.Fatalf("%v -> %v: %v", from.nid, to.nid, f.err)
			}
		}
	}
	for _, p := range a.ni.Peers() {
		if p.NID == b.nid && p.Incarnation != b.inc {
			t.Fatalf("a knows incarnation %d, want %d", p.Incarnation, b.inc)
		}
	}
}

func TestUnreachable(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.3")
	a := startNode(t, "127.0.0.1", port, map[string]string{"connect_timeout": "300ms"})
	nobody := wire.MustParseNID("127.0.0.3@tcp")

	start := time.Now()
	withDeadline := put(a.nid, nobody, 1, pattern(1, 10))
	withDeadline.Deadline = start.Add(500 * time.Millisecond)
	a.h.send(t, a.ni, withDeadline)
	bulk := put(a.nid, nobody, 2, pattern(2, 1<<20)) // its own dialer, default deadline
	a.h.send(t, a.ni, bulk)

	got := map[*lnet.Msg]time.Duration{}
	for range 2 {
		f := a.h.nextFin(t)
		if !errors.Is(f.err, lnet.ErrPeerUnreachable) {
			t.Fatalf("finalized with %v, want ErrPeerUnreachable", f.err)
		}
		got[f.msg] = time.Since(start)
	}
	if d := got[withDeadline]; d < 500*time.Millisecond || d > 2*time.Second {
		t.Errorf("message with a 500ms deadline failed after %v", d)
	}
	if d := got[bulk]; d < 300*time.Millisecond || d > 2*time.Second {
		t.Errorf("message with connect_timeout 300ms failed after %v", d)
	}
	if st := a.ni.Stats(); st.ConnectFailures < 2 || st.TxErrors != 2 {
		t.Errorf("stats %+v", st)
	}
	a.log.waitLine(t, "peer unreachable", "peer=127.0.0.3@tcp")
}

// TestFailUnreachable: a message marked FailUnreachable fails at the first
// refused connect, and one sent while the dialer backs off fails at once,
// while a plain message beside them waits for its deadline, and is
// delivered when the peer comes up (and dials in).
func TestFailUnreachable(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.3")
	// A backoff no stall of the test outlasts.
	a := startNode(t, "127.0.0.1", port, map[string]string{"backoff_min": "1m", "backoff_max": "1m"})
	peer := wire.MustParseNID("127.0.0.3@tcp")
	deadline := time.Now().Add(time.Minute)

	waits := put(a.nid, peer, 1, pattern(1, 10))
	waits.Deadline = deadline
	fast := put(a.nid, peer, 2, pattern(2, 10))
	fast.Deadline, fast.FailUnreachable = deadline, true
	start := time.Now()
	a.h.send(t, a.ni, waits)
	a.h.send(t, a.ni, fast)
	f := a.h.nextFin(t)
	if f.msg != fast || !errors.Is(f.err, lnet.ErrPeerUnreachable) {
		t.Fatalf("first finalized: message %d, %v; want the FailUnreachable one, ErrPeerUnreachable", f.msg.Hdr.MatchBits, f.err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("failed after %v", el)
	}
	// The dialer backs off (waits is still queued): another fails at
	// once, with no attempt of its own.
	failures := a.ni.Stats().ConnectFailures
	again := put(a.nid, peer, 3, pattern(3, 10))
	again.Deadline, again.FailUnreachable = deadline, true
	a.h.send(t, a.ni, again)
	if f := a.h.nextFin(t); f.msg != again || !errors.Is(f.err, lnet.ErrPeerUnreachable) {
		t.Fatalf("finalized: message %d, %v; want the second FailUnreachable one, ErrPeerUnreachable", f.msg.Hdr.MatchBits, f.err)
	}
	if n := a.ni.Stats().ConnectFailures; n != failures {
		t.Errorf("%d connect attempts for a message sent while the dialer backed off", n-failures)
	}
	// The peer comes up and dials in: the message that waited goes out on
	// that connection, and FailUnreachable ones go too.
	b := startNode(t, "127.0.0.3", port, nil)
	b.h.send(t, b.ni, put(b.nid, a.nid, 4, pattern(4, 10)))
	if r := a.h.nextRx(t); r.hdr.MatchBits != 4 {
		t.Fatalf("a got message %d", r.hdr.MatchBits)
	}
	b.h.nextFin(t)
	if r := b.h.nextRx(t); r.hdr.MatchBits != 1 || !bytes.Equal(joined(r.dst, r.mlen), pattern(1, 10)) {
		t.Fatalf("the peer got message %d, want the one that waited", r.hdr.MatchBits)
	}
	if f := a.h.nextFin(t); f.msg != waits || f.err != nil {
		t.Fatalf("finalized: message %d, %v; want the one that waited, sent", f.msg.Hdr.MatchBits, f.err)
	}
	now := put(a.nid, peer, 5, pattern(5, 10))
	now.Deadline, now.FailUnreachable = deadline, true
	a.h.send(t, a.ni, now)
	if r := b.h.nextRx(t); r.hdr.MatchBits != 5 {
		t.Fatalf("the peer got message %d, want the FailUnreachable one sent once connected", r.hdr.MatchBits)
	}
	if f := a.h.nextFin(t); f.msg != now || f.err != nil {
		t.Fatalf("finalized: message %d, %v; want the FailUnreachable one, sent", f.msg.Hdr.MatchBits, f.err)
	}
}

// Both nodes dial each other at once, repeatedly: every message arrives in
// order and each pair ends with one control connection that both ends
// agree on.
func TestConnectRace(t *testing.T) {
	const rounds, msgs = 8, 20
	var races uint64
	for round := range rounds {
		port := testPort(t, "127.0.0.1", "127.0.0.2")
		a := startNode(t, "127.0.0.1", port, nil)
		b := startNode(t, "127.0.0.2", port, nil)
		var wg sync.WaitGroup
		go1 := make(chan struct{})
		for _, dir := range [][2]*node{{a, b}, {b, a}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				from, to := dir[0], dir[1]
				<-go1
				for i := range msgs {
					if !from.h.send(t, from.ni, put(from.nid, to.nid, uint64(i), pattern(uint64(i), 64))) {
						return
					}
				}
			}()
		}
		close(go1)
		for _, n := range []*node{a, b} {
			for i := range msgs {
				if r := n.h.nextRx(t); r.hdr.MatchBits != uint64(i) {
					t.Fatalf("round %d: %v got message %d as number %d", round, n.nid, r.hdr.MatchBits, i)
				}
			}
			for range msgs {
				if f := n.h.nextFin(t); f.err != nil {
					t.Fatalf("round %d: %v", round, f.err)
				}
			}
		}
		wg.Wait()
		ca, cb := connTypes(a.ni, b.nid), connTypes(b.ni, a.nid)
		if len(ca) != 1 || len(cb) != 1 || ca[0].Local != cb[0].Remote || ca[0].Remote != cb[0].Local ||
			ca[0].Active == cb[0].Active {
			t.Fatalf("round %d: a has %+v, b has %+v", round, ca, cb)
		}
		races += a.ni.Stats().ConnRaces + b.ni.Stats().ConnRaces
		a.stop(t)
		b.stop(t)
	}
	t.Logf("%d connections refused by race resolution in %d rounds", races, rounds)
}

func TestShutdown(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.3")
	a := startNode(t, "127.0.0.1", port, nil)
	nobody := wire.MustParseNID("127.0.0.3@tcp")
	queued := map[*lnet.Msg]bool{}
	for i := range 3 {
		m := put(a.nid, nobody, uint64(i), pattern(uint64(i), 70_000*i))
		queued[m] = true
		a.h.send(t, a.ni, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.ni.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		f := a.h.nextFin(t)
		if !queued[f.msg] || !errors.Is(f.err, lnet.ErrShutdown) {
			t.Fatalf("finalized %v with %v", f.msg, f.err)
		}
		delete(queued, f.msg)
	}
	late := put(a.nid, nobody, 9, nil)
	a.ni.Send(late)
	if f := a.h.nextFin(t); f.msg != late || !errors.Is(f.err, lnet.ErrShutdown) {
		t.Fatalf("Send after Shutdown: %v", f.err)
	}
	if err := a.ni.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	// The port is free again.
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("listener not closed: %v", err)
	}
	ln.Close()
}

func TestQueueBound(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.3")
	a := startNode(t, "127.0.0.1", port, nil)
	nobody := wire.MustParseNID("127.0.0.3@tcp")
	limit := 2 * a.ni.Tunables().PeerCredits
	for i := range limit {
		a.ni.Send(put(a.nid, nobody, uint64(i), nil))
	}
	over := put(a.nid, nobody, 99, nil)
	a.ni.Send(over)
	if f := a.h.nextFin(t); f.msg != over || !errors.Is(f.err, lnet.ErrLocalNI) {
		t.Fatalf("message over the queue bound finalized with %v", f.err)
	}
	if p := a.ni.Peers(); len(p) != 1 || p[0].Queued != limit || p[0].Up {
		t.Fatalf("peers %+v", p)
	}
}

// A peer that stops reading and resets the connection: the message being
// written fails with ErrConnReset, and nothing is left unfinalized.
func TestConnReset(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.4")
	a := startNode(t, "127.0.0.1", port, map[string]string{"connect_timeout": "1s"})
	fake := wire.MustParseNID("127.0.0.4@tcp")
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.4", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *net.TCPConn, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		ln.Close()
		in, err := wire.ReadHello(nc)
		if err != nil {
			t.Errorf("fake peer: %v", err)
			return
		}
		out := wire.Hello{Version: wire.HelloVersion, SrcNID: fake, DstNID: in.SrcNID, SrcPID: wire.PIDLustre,
			DstPID: in.SrcPID, SrcIncarnation: 7, DstIncarnation: in.SrcIncarnation, ConnType: in.ConnType.Invert()}
		b, _ := out.AppendBinary(nil)
		nc.Write(b)
		accepted <- nc.(*net.TCPConn)
	}()
	const n = 8
	for i := range n {
		a.h.send(t, a.ni, put(a.nid, fake, uint64(i), pattern(uint64(i), 1<<20)))
	}
	nc := <-accepted
	time.Sleep(200 * time.Millisecond) // let the socket buffers fill
	nc.SetLinger(0)
	nc.Close()

	var resets int
	for range n {
		f := a.h.nextFin(t)
		switch {
		case f.err == nil:
		case errors.Is(f.err, lnet.ErrConnReset):
			resets++
		case errors.Is(f.err, lnet.ErrPeerUnreachable):
		default:
			t.Fatalf("finalized with %v", f.err)
		}
	}
	if resets != 1 {
		t.Fatalf("%d messages failed with ErrConnReset, want the one being written", resets)
	}
	// The writer or the reader may see the reset first.
	a.log.waitLine(t, "connection dropped", "peer=127.0.0.4@tcp")
}
