package socklnd

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// fakeListener accepts one connection at addr as the peer fake, answers
// its hello, and hands it over; it listens for no more (a redial is
// refused).
func fakeListener(t *testing.T, addr string, port int) <-chan net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	fake := wire.MustParseNID(addr + "@tcp")
	out := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		t.Cleanup(func() { nc.Close() })
		in, err := wire.ReadHello(nc)
		if err != nil {
			t.Errorf("fake peer: %v", err)
			return
		}
		h := wire.Hello{Version: wire.HelloVersion, SrcNID: fake, DstNID: in.SrcNID, SrcPID: wire.PIDLustre,
			DstPID: in.SrcPID, SrcIncarnation: 7, DstIncarnation: in.SrcIncarnation, ConnType: in.ConnType.Invert()}
		b, _ := h.AppendBinary(nil)
		if _, err := nc.Write(b); err != nil {
			t.Errorf("fake peer: %v", err)
			return
		}
		out <- nc
	}()
	return out
}

// A peer that does not read for a while: small messages, which Send writes
// inline while the socket takes them, fill its buffers; the inline write
// the socket takes only part of is finished by the writer, and everything
// still arrives whole and in order.
func TestInlineWriteFinishedByWriter(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.5")
	a := startNode(t, "127.0.0.1", port, nil)
	fake := wire.MustParseNID("127.0.0.5@tcp")
	accepted := fakeListener(t, "127.0.0.5", port)

	// Just under MinBulk, so each is written inline when the connection is
	// idle; together far more than loopback socket buffers hold.
	const n, size = 300, 60 << 10
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range n {
			if !a.h.send(t, a.ni, put(a.nid, fake, uint64(i), pattern(uint64(i), size))) {
				return
			}
		}
	}()
	var nc net.Conn
	select {
	case nc = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("no connection")
	}
	time.Sleep(200 * time.Millisecond) // let the socket buffers fill
	nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	var hb [wire.HeaderSize]byte
	payload := make([]byte, size)
	for i := range n {
		var h wire.Header
		if _, err := io.ReadFull(nc, hb[:]); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if err := h.Unmarshal(hb[:]); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if h.MatchBits != uint64(i) || h.PayloadLen != size {
			t.Fatalf("message %d arrived as %d, %d bytes", i, h.MatchBits, h.PayloadLen)
		}
		if _, err := io.ReadFull(nc, payload); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !bytes.Equal(payload, pattern(uint64(i), size)) {
			t.Fatalf("message %d: payload differs", i)
		}
	}
	<-sent
	for i := range n {
		if f := a.h.nextFin(t); f.err != nil {
			t.Fatalf("finalize %d: %v", i, f.err)
		}
	}
}

// SendBatch keeps the order of each peer's messages of each type, across
// peers and sizes, and finalizes every message once.
func TestSendBatch(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.2", "127.0.0.3")
	a := startNode(t, "127.0.0.1", port, nil)
	peers := []*node{startNode(t, "127.0.0.2", port, nil), startNode(t, "127.0.0.3", port, nil)}

	// Each round's batch stays within the peers' queue bounds, as LNet's
	// credits keep it; the test host's credits are not taken.
	const rounds, per = 40, 12
	type key struct {
		to   int
		bulk bool
	}
	next := map[key]uint64{}
	want := map[key]uint64{}
	for r := range rounds {
		var msgs []*lnet.Msg
		for i := range per {
			k := key{to: (r + i) % 2, bulk: i%5 == 4}
			size := 200 + i*300
			if k.bulk {
				size = 100_000
			}
			bits := uint64(k.to)<<40 | map[bool]uint64{false: 0, true: 1}[k.bulk]<<32 | next[k]
			next[k]++
			msgs = append(msgs, put(a.nid, peers[k.to].nid, bits, pattern(bits, size)))
		}
		a.ni.SendBatch(msgs)
		for range msgs {
			if f := a.h.nextFin(t); f.err != nil {
				t.Fatalf("round %d: %v", r, f.err)
			}
		}
	}
	for to, p := range peers {
		for got := 0; got < int(next[key{to, false}]+next[key{to, true}]); got++ {
			r := p.h.nextRx(t)
			k := key{to: to, bulk: r.hdr.MatchBits>>32&1 == 1}
			if seq := r.hdr.MatchBits & 0xffffffff; seq != want[k] {
				t.Fatalf("peer %d, bulk %v: message %d arrived as number %d", to, k.bulk, seq, want[k])
			}
			want[k]++
			if r.err != nil || !bytes.Equal(joined(r.dst, r.mlen), pattern(r.hdr.MatchBits, int(r.hdr.PayloadLen))) {
				t.Fatalf("message %x: %v, or payload differs", r.hdr.MatchBits, r.err)
			}
		}
	}
}

// A connection reset while small messages are being written and queued
// behind a peer that stopped reading: the message being written fails with
// ErrConnReset, those not begun wait for a new connection (none comes:
// they fail with ErrPeerUnreachable), and nothing is finalized twice or
// left behind.
func TestConnResetSmall(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.6")
	a := startNode(t, "127.0.0.1", port, map[string]string{"connect_timeout": "1s"})
	fake := wire.MustParseNID("127.0.0.6@tcp")
	accepted := fakeListener(t, "127.0.0.6", port)

	// Small messages, each written inline while the socket takes them,
	// until the peer's buffers are full and the credits are all out.
	const size = 40 << 10
	stop := make(chan struct{})
	count := make(chan int, 1)
	go func() {
		i := 0
		defer func() { count <- i }()
		for ; ; i++ {
			select {
			case a.h.credits <- struct{}{}:
			case <-stop:
				return
			}
			a.ni.Send(put(a.nid, fake, uint64(i), pattern(uint64(i), size)))
		}
	}()
	nc := (<-accepted).(*net.TCPConn)
	// Stalled, every credit out for 100ms: the buffers are full.
	deadline := time.Now().Add(10 * time.Second)
	for stalled := 0; stalled < 10; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the peer's buffers never filled")
		}
		stalled++
		if len(a.h.credits) < cap(a.h.credits) {
			stalled = 0
		}
	}
	close(stop)
	n := <-count
	nc.SetLinger(0)
	nc.Close()

	var resets, unreachable int
	seen := map[*lnet.Msg]bool{}
	for range n {
		f := a.h.nextFin(t)
		if seen[f.msg] {
			t.Fatalf("message %d finalized twice", f.msg.Hdr.MatchBits)
		}
		seen[f.msg] = true
		switch {
		case f.err == nil:
		case errors.Is(f.err, lnet.ErrConnReset):
			resets++
		case errors.Is(f.err, lnet.ErrPeerUnreachable):
			unreachable++
		default:
			t.Fatalf("finalized with %v", f.err)
		}
	}
	if resets != 1 || unreachable == 0 {
		t.Fatalf("%d messages failed with ErrConnReset (want the one being written), %d waited for a new connection",
			resets, unreachable)
	}
	select {
	case f := <-a.h.fins:
		t.Fatalf("extra finalize: %v", f.err)
	case <-time.After(100 * time.Millisecond):
	}
	if p := a.ni.Peers(); len(p) != 1 || p[0].Queued != 0 {
		t.Fatalf("peers %+v", p)
	}
}

// Small messages sent at once by several goroutines to an idle connection
// leave together: the first Send yields before writing, the others queue
// behind it, and one writev carries them all. With one processor the
// goroutines run strictly in turn, so each round of sends is one write;
// every message still arrives whole.
func TestSendsCombined(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.2")
	a := startNode(t, "127.0.0.1", port, nil)
	b := startNode(t, "127.0.0.2", port, nil)
	// The first message makes the connection.
	if !a.h.send(t, a.ni, put(a.nid, b.nid, 1<<32, pattern(1<<32, 100))) {
		t.FailNow()
	}
	if f := a.h.nextFin(t); f.err != nil {
		t.Fatal(f.err)
	}
	b.h.nextRx(t)

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const rounds, per = 20, defaultPeerCredits
	before := a.ni.Stats()
	for r := range rounds {
		var wg sync.WaitGroup
		for i := range per {
			bits := uint64(r*per + i)
			wg.Go(func() { a.h.send(t, a.ni, put(a.nid, b.nid, bits, pattern(bits, 100+int(bits)))) })
		}
		wg.Wait()
		for range per {
			if f := a.h.nextFin(t); f.err != nil {
				t.Fatalf("round %d: %v", r, f.err)
			}
		}
	}
	after := a.ni.Stats()
	msgs, writes := after.TxMsgs-before.TxMsgs, after.TxWrites-before.TxWrites
	if msgs != rounds*per || writes > rounds*2 {
		t.Errorf("%d messages sent in %d writes; want %d in at most %d", msgs, writes, rounds*per, rounds*2)
	}
	seen := map[uint64]bool{}
	for range rounds * per {
		r := b.h.nextRx(t)
		bits := r.hdr.MatchBits
		if seen[bits] || r.err != nil || !bytes.Equal(joined(r.dst, r.mlen), pattern(bits, 100+int(bits))) {
			t.Fatalf("message %d: seen before %v, %v, or payload differs", bits, seen[bits], r.err)
		}
		seen[bits] = true
	}
}
