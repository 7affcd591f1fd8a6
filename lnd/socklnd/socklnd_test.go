package socklnd

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// pair starts two NIs, on 127.0.0.1 and 127.0.0.2.
func pair(t *testing.T, extra map[string]string) (a, b *node) {
	t.Helper()
	port := testPort(t, "127.0.0.1", "127.0.0.2")
	a = startNode(t, "127.0.0.1", port, extra)
	b = startNode(t, "127.0.0.2", port, extra)
	return a, b
}

func TestRegistered(t *testing.T) {
	d, ok := lnet.LookupDriver(wire.TCP)
	if !ok || d.Type() != wire.TCP {
		t.Fatalf("LookupDriver(tcp) = %v, %v", d, ok)
	}
	if _, ok := d.(*Driver); !ok {
		t.Fatalf("tcp driver is %T", d)
	}
}

func TestSizes(t *testing.T) {
	a, b := pair(t, nil)
	sizes := []int{0, 1, 4095, 64<<10 - 1, 64 << 10, 1 << 20}
	for i, n := range sizes {
		want := pattern(uint64(i), n)
		msg := put(a.nid, b.nid, uint64(i), want)
		a.h.send(t, a.ni, msg)
		r := b.h.nextRx(t)
		if r.err != nil || r.from != a.nid || r.hdr != msg.Hdr {
			t.Fatalf("size %d: got hdr %+v from %v err %v", n, r.hdr, r.from, r.err)
		}
		if got := joined(r.dst, r.mlen); !bytes.Equal(got, want) {
			t.Fatalf("size %d: payload differs", n)
		}
		if f := a.h.nextFin(t); f.msg != msg || f.err != nil {
			t.Fatalf("size %d: finalized %p with %v, want %p with nil", n, f.msg, f.err, msg)
		}
	}
	// And back the other way, on connections b makes.
	want := pattern(99, 1<<20)
	b.h.send(t, b.ni, put(b.nid, a.nid, 99, want))
	if r := a.h.nextRx(t); !bytes.Equal(joined(r.dst, r.mlen), want) || r.from != b.nid {
		t.Fatalf("b->a: payload differs or from %v", r.from)
	}
	if f := b.h.nextFin(t); f.err != nil {
		t.Fatal(f.err)
	}
	st := a.ni.Stats()
	if st.TxMsgs != uint64(len(sizes)) || st.RxMsgs != 1 || st.BadHeaders != 0 {
		t.Errorf("a stats %+v", st)
	}
}

// split cuts b into views of the given lengths, cycling, the last taking
// what is left.
func split(b []byte, lens ...int) [][]byte {
	var out [][]byte
	for i := 0; len(b) > 0; i++ {
		k := min(lens[i%len(lens)], len(b))
		out = append(out, b[:k])
		b = b[k:]
	}
	return out
}

func TestFragments(t *testing.T) {
	a, b := pair(t, nil)
	const n = 300_007 // bulk, odd
	want := pattern(7, n)
	// Destination: odd-length views in separate allocations, with spare
	// room at the end.
	b.h.setPost(func(hdr *wire.Header) ([][]byte, int) {
		var dst [][]byte
		left := int(hdr.PayloadLen) + 5
		for i := 0; left > 0; i++ {
			k := min([]int{3, 4093, 1, 65537, 777}[i%5], left)
			dst = append(dst, make([]byte, k))
			left -= k
		}
		return dst, int(hdr.PayloadLen)
	})
	for i, lens := range [][]int{{1}, {7, 4093, 0, 13}, {65536, 3}, {n}} {
		msg := put(a.nid, b.nid, uint64(i), split(want, lens...)...)
		if i == 1 {
			msg.Payload = append([][]byte{{}}, msg.Payload...) // empty views are fine
		}
		a.h.send(t, a.ni, msg)
		r := b.h.nextRx(t)
		if got := joined(r.dst, r.mlen); r.err != nil || !bytes.Equal(got, want) {
			t.Fatalf("fragments %v: err %v, payload equal %v", lens, r.err, bytes.Equal(got, want))
		}
		if f := a.h.nextFin(t); f.err != nil {
			t.Fatal(f.err)
		}
		if len(msg.Payload) < 2 && i != 0 && i != 3 {
			t.Fatalf("test split %v made %d views", lens, len(msg.Payload))
		}
	}
}

func TestTruncateAndDrain(t *testing.T) {
	a, b := pair(t, nil)
	// Take 3000 bytes of each message into two views (1000, 2000+).
	b.h.setPost(func(hdr *wire.Header) ([][]byte, int) {
		mlen := min(3000, int(hdr.PayloadLen))
		if hdr.MatchBits == 0 {
			return nil, 0 // drain all
		}
		return [][]byte{make([]byte, 1000), make([]byte, 2500)}, mlen
	})
	for i, n := range []int{10_000, 1 << 20, 2999, 200_000} {
		want := pattern(uint64(i), n)
		bits := uint64(i)
		a.h.send(t, a.ni, put(a.nid, b.nid, bits, want))
		r := b.h.nextRx(t)
		if r.err != nil || r.hdr.MatchBits != bits {
			t.Fatalf("msg %d: bits %d err %v", i, r.hdr.MatchBits, r.err)
		}
		if got := joined(r.dst, r.mlen); !bytes.Equal(got, want[:r.mlen]) {
			t.Fatalf("msg %d: first %d bytes differ", i, r.mlen)
		}
	}
	// A refused header is drained by the host; the stream goes on.
	b.h.refuse.Store(true)
	a.h.send(t, a.ni, put(a.nid, b.nid, 10, pattern(10, 100_000)))
	if r := b.h.nextRx(t); r.err == nil {
		t.Fatal("refused message recorded as received")
	}
	b.h.refuse.Store(false)
	b.h.setPost(nil)
	want := pattern(11, 5000)
	a.h.send(t, a.ni, put(a.nid, b.nid, 11, want))
	if r := b.h.nextRx(t); !bytes.Equal(joined(r.dst, r.mlen), want) {
		t.Fatal("message after a refused one is corrupt")
	}
	// The refusal is counted once Parse has returned, on the bulk
	// connection's reader: wait for it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st := b.ni.Stats()
		if st.RxRefused == 1 && st.RxMsgs == 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b stats %+v", st)
		}
	}
}

// TestOrdering runs with peers in this process (inline Sends yield to
// batch, conn.combine) and as if in another (they write at once).
func TestOrdering(t *testing.T) {
	t.Run("in-process", func(t *testing.T) { testOrdering(t, false) })
	t.Run("other-process", func(t *testing.T) { testOrdering(t, true) })
}

func testOrdering(t *testing.T, elsewhere bool) {
	peersElsewhere.Store(elsewhere)
	t.Cleanup(func() { peersElsewhere.Store(false) })
	a, b := pair(t, nil)
	const small, large = 1000, 40
	done := make(chan struct{})
	go func() {
		defer close(done)
		var s, l int
		for s < small || l < large {
			r, ok := b.h.tryRx(t)
			if !ok {
				return
			}
			seq := int(r.hdr.MatchBits & 0xffff)
			isLarge := r.hdr.MatchBits>>32 == 1
			want := s
			if isLarge {
				want = l
			}
			if seq != want {
				t.Errorf("large=%v: message %d arrived as number %d", isLarge, seq, want)
				return
			}
			if !bytes.Equal(joined(r.dst, r.mlen), pattern(r.hdr.MatchBits, int(r.hdr.PayloadLen))) {
				t.Errorf("message %x: payload differs", r.hdr.MatchBits)
				return
			}
			if isLarge {
				l++
			} else {
				s++
			}
		}
	}()
	go func() {
		for range small + large {
			f, ok := a.h.tryFin(t)
			if !ok {
				return
			}
			if f.err != nil {
				t.Errorf("finalize: %v", f.err)
			}
		}
	}()
	for i, l := 0, 0; i < small; i++ {
		bits := uint64(i)
		a.h.send(t, a.ni, put(a.nid, b.nid, bits, pattern(bits, 512)))
		if i%25 == 0 && l < large {
			bits := 1<<32 | uint64(l)
			a.h.send(t, a.ni, put(a.nid, b.nid, bits, pattern(bits, 100_000)))
			l++
		}
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("messages did not all arrive")
	}
}

// TestInProcessPeers: a connection knows whether its peer's NI listens in
// this process, and a shut NI's address leaves the set.
func TestInProcessPeers(t *testing.T) {
	a, b := pair(t, nil)
	a.h.send(t, a.ni, put(a.nid, b.nid, 1, pattern(1, 64)))
	b.h.nextRx(t)
	if f := a.h.nextFin(t); f.err != nil {
		t.Fatal(f.err)
	}
	p, err := a.ni.peer(b.nid)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	c := p.mu.conns[wire.ConnControl]
	p.mu.Unlock()
	if c == nil || !c.inProc {
		t.Fatalf("control connection %v to %v: not seen as in this process", c, b.nid)
	}
	addr := netip.AddrPortFrom(b.nid.Addr, uint16(b.port))
	if !listeners.has(addr) {
		t.Fatalf("%v not among this process's listeners", addr)
	}
	b.stop(t)
	if listeners.has(addr) {
		t.Fatalf("%v still among the listeners after shutdown", addr)
	}
}

func TestTypedConnections(t *testing.T) {
	a, b := pair(t, nil)
	a.h.send(t, a.ni, put(a.nid, b.nid, 1, pattern(1, 100)))
	a.h.send(t, a.ni, put(a.nid, b.nid, 2, pattern(2, 1<<20)))
	b.h.send(t, b.ni, put(b.nid, a.nid, 3, pattern(3, 64<<10)))
	b.h.nextRx(t)
	b.h.nextRx(t)
	a.h.nextRx(t)
	for _, n := range []*node{a, b} {
		n.h.nextFin(t)
	}
	a.h.nextFin(t)

	check := func(n *node, peer wire.NID, want map[wire.ConnType]bool) {
		t.Helper()
		conns := connTypes(n.ni, peer)
		if len(conns) != len(want) {
			t.Fatalf("%v: conns to %v: %+v, want types %v", n.nid, peer, conns, want)
		}
		for _, c := range conns {
			active, ok := want[c.Type]
			if !ok || c.Active != active {
				t.Fatalf("%v: unexpected conn %+v", n.nid, c)
			}
			if c.Local.Addr() != n.nid.Addr || c.Remote.Addr() != peer.Addr {
				t.Fatalf("%v: conn %v addresses %v -> %v", n.nid, c.Type, c.Local, c.Remote)
			}
			if c.Active && int(c.Remote.Port()) != n.port || !c.Active && int(c.Local.Port()) != n.port {
				t.Fatalf("%v: conn %v ports %v -> %v, acceptor on %d", n.nid, c.Type, c.Local, c.Remote, n.port)
			}
		}
	}
	// a dialed control and its bulk out; b dialed its bulk out, which is
	// a's bulk in.
	check(a, b.nid, map[wire.ConnType]bool{wire.ConnControl: true, wire.ConnBulkOut: true, wire.ConnBulkIn: false})
	check(b, a.nid, map[wire.ConnType]bool{wire.ConnControl: false, wire.ConnBulkIn: false, wire.ConnBulkOut: true})
	if p := b.ni.Peers(); len(p) != 1 || !p[0].Up || p[0].Incarnation != a.inc {
		t.Fatalf("b peers %+v", p)
	}
}

func TestUntypedConnection(t *testing.T) {
	a, b := pair(t, map[string]string{"typed_conns": "false"})
	a.h.send(t, a.ni, put(a.nid, b.nid, 1, pattern(1, 100)))
	a.h.send(t, a.ni, put(a.nid, b.nid, 2, pattern(2, 1<<20)))
	for range 2 {
		if r := b.h.nextRx(t); !bytes.Equal(joined(r.dst, r.mlen), pattern(r.hdr.MatchBits, int(r.hdr.PayloadLen))) {
			t.Fatal("payload differs")
		}
	}
	if c := connTypes(a.ni, b.nid); len(c) != 1 || c[0].Type != wire.ConnAny {
		t.Fatalf("conns %+v", c)
	}
}

// Recv may come later, from another goroutine; until it does the
// connection reads nothing more.
func TestDeferredRecv(t *testing.T) {
	a, b := pair(t, nil)
	b.h.deferRecv.Store(true)
	for i := range 2 {
		a.h.send(t, a.ni, put(a.nid, b.nid, uint64(i), pattern(uint64(i), 1000)))
	}
	first := <-b.h.pending
	select {
	case p := <-b.h.pending:
		t.Fatalf("second header (%d) parsed before the first payload was received", p.hdr.MatchBits)
	case <-time.After(200 * time.Millisecond):
	}
	dst := make([]byte, 1000)
	errc := make(chan error)
	go func() { errc <- first.rx.Recv([][]byte{dst}, 1000) }()
	if err := <-errc; err != nil || !bytes.Equal(dst, pattern(0, 1000)) {
		t.Fatalf("deferred Recv: %v", err)
	}
	if err := first.rx.Recv([][]byte{dst}, 1000); err == nil {
		t.Fatal("second Recv on one Rx succeeded")
	}
	second := <-b.h.pending
	if err := second.rx.Recv([][]byte{dst}, 1000); err != nil || !bytes.Equal(dst, pattern(1, 1000)) {
		t.Fatalf("second: %v", err)
	}
	// A Recv that asks for more than the payload drains it and says so;
	// the connection stays.
	a.h.send(t, a.ni, put(a.nid, b.nid, 2, pattern(2, 10)))
	third := <-b.h.pending
	if err := third.rx.Recv([][]byte{dst}, 11); err == nil {
		t.Fatal("Recv of 11 bytes from a 10-byte payload succeeded")
	}
	a.h.send(t, a.ni, put(a.nid, b.nid, 3, pattern(3, 10)))
	fourth := <-b.h.pending
	if err := fourth.rx.Recv([][]byte{dst}, 10); err != nil || !bytes.Equal(dst[:10], pattern(3, 10)) {
		t.Fatalf("after a misused Recv: %v", err)
	}
}

func TestPeerEvents(t *testing.T) {
	a, b := pair(t, nil)
	a.h.send(t, a.ni, put(a.nid, b.nid, 1, nil))
	a.h.waitEvent(t, b.nid, lnet.PeerUp)
	b.h.waitEvent(t, a.nid, lnet.PeerUp)
	b.stop(t)
	a.h.waitEvent(t, b.nid, lnet.PeerDown)
}

func TestBadSends(t *testing.T) {
	a, b := pair(t, nil)
	bad := []*lnet.Msg{
		put(a.nid, wire.MustParseNID("127.0.0.2@tcp1"), 1, nil), // other net
		put(a.nid, a.nid, 1, nil),                               // ourselves
		func() *lnet.Msg { m := put(a.nid, b.nid, 1, []byte("abc")); m.Hdr.PayloadLen = 4; return m }(),
		func() *lnet.Msg { m := put(a.nid, b.nid, 1, nil); m.Hdr.Type = 99; return m }(),
	}
	for i, m := range bad {
		a.ni.Send(m)
		if f := a.h.nextFin(t); f.msg != m || f.err == nil {
			t.Errorf("bad message %d: finalized with %v", i, f.err)
		}
	}
	if !errors.Is(func() error { a.ni.Send(bad[0]); return a.h.nextFin(t).err }(), lnet.ErrPeerUnreachable) {
		t.Error("message for another net does not fail as unreachable")
	}
}

func TestParseOptions(t *testing.T) {
	tests := []struct {
		opts map[string]string
		ok   bool
		want func(c Config) bool
	}{
		{nil, true, func(c Config) bool { return c == DefaultConfig() }},
		{map[string]string{"port": "20988", "min_bulk": "4096"}, true,
			func(c Config) bool { return c.Port == 20988 && c.MinBulk == 4096 }},
		{map[string]string{"connect_timeout": "3", "backoff_min": "250ms"}, true,
			func(c Config) bool { return c.ConnectTimeout == 3*time.Second && c.BackoffMin == 250*time.Millisecond }},
		{map[string]string{"typed_conns": "0"}, true, func(c Config) bool { return !c.TypedConns }},
		{map[string]string{"port": "0"}, false, nil},
		{map[string]string{"port": "x"}, false, nil},
		{map[string]string{"prot": "988"}, false, nil},
		{map[string]string{"backoff_min": "10s"}, false, nil}, // above backoff_max
		{map[string]string{"sock_timeout": "-1s"}, false, nil},
		// Seconds beyond a time.Duration: 18446744074 s wrapped to 290 ms.
		{map[string]string{"connect_timeout": "18446744074"}, false, nil},
		{map[string]string{"peer_idle_age": "9223372037"}, false, nil},
		{map[string]string{"peer_idle_age": "9223372036"}, true,
			func(c Config) bool { return c.PeerIdleAge == 9223372036*time.Second }},
	}
	for _, tt := range tests {
		c, err := ParseOptions(tt.opts)
		if (err == nil) != tt.ok || (tt.ok && !tt.want(c)) {
			t.Errorf("ParseOptions(%v) = %+v, %v", tt.opts, c, err)
		}
	}
}
