package lnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet/wire"
)

func TestParseNetworks(t *testing.T) {
	tcp := wire.Net{Type: wire.TCP}
	tcp1 := wire.Net{Type: wire.TCP, Num: 1}
	o2ib := wire.Net{Type: wire.O2IB}
	a := netip.MustParseAddr
	for _, c := range []struct {
		in   string
		want []NetConfig
	}{
		{"", nil},
		{"tcp", []NetConfig{{Net: tcp}}},
		{" tcp0 ", []NetConfig{{Net: tcp}}},
		{"tcp(eth0,eth1), tcp1(10.0.0.1)", []NetConfig{{Net: tcp, Interfaces: []string{"eth0", "eth1"}}, {Net: tcp1, Addrs: []netip.Addr{a("10.0.0.1")}}}},
		{"tcp1(10.0.0.1,10.0.0.2)", []NetConfig{{Net: tcp1, Addrs: []netip.Addr{a("10.0.0.1"), a("10.0.0.2")}}}},
		{"o2ib(ib0)", []NetConfig{{Net: o2ib, Interfaces: []string{"ib0"}}}},
		{"tcp( eth0 , 192.168.1.5 ),o2ib", []NetConfig{{Net: tcp, Interfaces: []string{"eth0"}, Addrs: []netip.Addr{a("192.168.1.5")}}, {Net: o2ib}}},
		{"tcp(eth0), tcp(eth1)", []NetConfig{{Net: tcp, Interfaces: []string{"eth0", "eth1"}}}},
		{"lo, tcp(eth0)", []NetConfig{{Net: tcp, Interfaces: []string{"eth0"}}}},
		{"tcp(fd00::1)", []NetConfig{{Net: tcp, Addrs: []netip.Addr{a("fd00::1")}}}},
	} {
		got, err := ParseNetworks(c.in)
		if err != nil {
			t.Errorf("ParseNetworks(%q): %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseNetworks(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
	for _, in := range []string{
		"tcp(", "tcp(eth0", "tcp()", "tcp(eth0,)", "tcp(,eth0)", "tcp,", ",tcp", "tcp eth0",
		"tcp(eth0)x", "tcp((eth0))", "udp", "tcp99999", "lo(eth0)", "tcp(eth0,eth0)",
		"tcp(10.0.0.1,10.0.0.1)", "tcp(0.0.0.0)", "tcp(fe80::1%eth0)", "(eth0)", "tcp(e th0)",
	} {
		if got, err := ParseNetworks(in); err == nil {
			t.Errorf("ParseNetworks(%q) = %+v, want an error", in, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	tcp := wire.Net{Type: wire.TCP}
	for name, mod := range map[string]func(*Config){
		"negative timeout":     func(c *Config) { c.TransactionTimeout = -1 },
		"negative max waiting": func(c *Config) { c.MaxWaiting = -1 },
		"bad net":              func(c *Config) { c.Networks = []NetConfig{{}} },
		"negative credits":     func(c *Config) { c.Networks = []NetConfig{{Net: tcp, Tunables: Tunables{Credits: -1}}} },
		"peer over credits":    func(c *Config) { c.Networks = []NetConfig{{Net: tcp, Tunables: Tunables{Credits: 4, PeerCredits: 8}}} },
		"same address twice": func(c *Config) {
			c.Networks = []NetConfig{{Net: tcp, Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}, {Net: wire.Net{Type: wire.TCP, Num: 1}, Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}}
		},
		"lo with interfaces": func(c *Config) { c.Networks = []NetConfig{{Net: wire.Net{Type: wire.LO}, Interfaces: []string{"lo"}}} },
		"bad interface":      func(c *Config) { c.Networks = []NetConfig{{Net: tcp, Interfaces: []string{"a b"}}} },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalid) && !errors.Is(err, wire.ErrBadNet) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}

func TestResolveNIs(t *testing.T) {
	r := resolver{
		byName: func(name string) ([]netip.Addr, error) {
			switch name {
			case "eth0":
				return []netip.Addr{netip.MustParseAddr("fe80::1"), netip.MustParseAddr("::ffff:192.168.1.5")}, nil
			case "eth1":
				return []netip.Addr{netip.MustParseAddr("192.168.2.5")}, nil
			case "v6only":
				return []netip.Addr{netip.MustParseAddr("fd00::5")}, nil
			}
			return nil, fmt.Errorf("no such interface")
		},
		first: func() (string, []netip.Addr, error) {
			return "eth9", []netip.Addr{netip.MustParseAddr("10.9.9.9")}, nil
		},
	}
	nets, err := ParseNetworks("tcp(eth0,eth1), tcp1(10.0.0.1), o2ib, lo")
	if err != nil {
		t.Fatal(err)
	}
	nets[0].Tunables.Credits = 7
	specs, err := resolveNIs(nets, r)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range specs {
		got = append(got, fmt.Sprintf("%v/%s/%d", s.nid, s.iface, s.tun.Credits))
	}
	want := []string{"0@lo//0", "192.168.1.5@tcp/eth0/7", "192.168.2.5@tcp/eth1/7", "10.0.0.1@tcp1//0", "10.9.9.9@o2ib/eth9/0"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("NIs %v, want %v", got, want)
	}
	for _, bad := range []string{"tcp(v6only)", "tcp(nosuch)", "tcp(eth0), tcp(192.168.1.5)"} {
		nets, err := ParseNetworks(bad)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := resolveNIs(nets, r); err == nil {
			t.Errorf("resolve %q: no error", bad)
		}
	}
}

func TestMatchEntry(t *testing.T) {
	p1 := wire.ProcessID{NID: wire.MustParseNID("10.0.0.1@tcp"), PID: 12345}
	p2 := wire.ProcessID{NID: wire.MustParseNID("10.0.0.2@tcp"), PID: 12345}
	for i, c := range []struct {
		me   me
		src  wire.ProcessID
		bits uint64
		want bool
	}{
		{me{src: AnyProcess, match: 5}, p1, 5, true},
		{me{src: AnyProcess, match: 5}, p1, 4, false},
		{me{src: AnyProcess, match: 0xff00, ignore: 0xff}, p1, 0xff42, true},
		{me{src: AnyProcess, match: 0xff00, ignore: 0xff}, p1, 0xfe42, false},
		{me{src: AnyProcess, ignore: ^uint64(0)}, p2, 0xdeadbeef, true},
		{me{src: p1, match: 1}, p1, 1, true},
		{me{src: p1, match: 1}, p2, 1, false},
		{me{src: wire.ProcessID{NID: p1.NID, PID: wire.PIDAny}, match: 1}, wire.ProcessID{NID: p1.NID, PID: 7}, 1, true},
		{me{src: wire.ProcessID{PID: 7}, match: 1}, wire.ProcessID{NID: p2.NID, PID: 7}, 1, true},
		{me{src: wire.ProcessID{PID: 7}, match: 1}, p2, 1, false},
	} {
		if got := c.me.matches(c.src, c.bits); got != c.want {
			t.Errorf("case %d: matches = %v, want %v", i, got, c.want)
		}
	}
}

func TestAccept(t *testing.T) {
	for i, c := range []struct {
		opts          MDOptions
		length, local int
		threshold     int
		op            wire.MsgType
		rlen, roff    uint32
		off, mlen     int
		ok            bool
	}{
		{MDOpPut, 10, 0, 1, wire.MsgPut, 10, 99, 0, 10, true},
		{MDOpPut, 10, 4, 1, wire.MsgPut, 6, 0, 4, 6, true},
		{MDOpPut, 10, 4, 1, wire.MsgPut, 7, 0, 0, 0, false},
		{MDOpPut | MDTruncate, 10, 4, 1, wire.MsgPut, 7, 0, 4, 6, true},
		{MDOpPut | MDTruncate, 10, 10, 1, wire.MsgPut, 7, 0, 10, 0, true},
		{MDOpPut | MDManageRemote, 10, 4, 1, wire.MsgPut, 3, 7, 7, 3, true},
		{MDOpPut | MDManageRemote, 10, 0, 1, wire.MsgPut, 3, 8, 0, 0, false},
		{MDOpPut | MDManageRemote | MDTruncate, 10, 0, 1, wire.MsgPut, 3, 11, 0, 0, false},
		{MDOpGet, 10, 0, 1, wire.MsgPut, 1, 0, 0, 0, false},
		{MDOpPut, 10, 0, 1, wire.MsgGet, 1, 0, 0, 0, false},
		{MDOpGet, 10, 0, ThresholdInfinite, wire.MsgGet, 0, 0, 0, 0, true},
		{MDOpPut, 10, 0, 0, wire.MsgPut, 1, 0, 0, 0, false},
		{MDOpPut, 10, 0, 1, wire.MsgAck, 0, 0, 0, 0, false},
	} {
		m := &md{options: c.opts, length: c.length, offset: c.local, threshold: c.threshold}
		off, mlen, ok := m.acceptLocked(c.op, c.rlen, c.roff)
		if ok != c.ok || (ok && (off != c.off || mlen != c.mlen)) {
			t.Errorf("case %d: accept = %d, %d, %v; want %d, %d, %v", i, off, mlen, ok, c.off, c.mlen, c.ok)
		}
	}
}

func TestPortalOrder(t *testing.T) {
	p := &portal{}
	mk := func(n uint64) *me { return &me{match: n} }
	a, b, c, d := mk(1), mk(2), mk(3), mk(4)
	p.insert(a, InsertLast)
	p.insert(b, InsertLast)
	p.insert(c, InsertFirst)
	p.insert(d, InsertLast)
	order := func() []uint64 {
		var out []uint64
		for e := p.head; e != nil; e = e.next {
			out = append(out, e.match)
		}
		return out
	}
	if got := order(); !reflect.DeepEqual(got, []uint64{3, 1, 2, 4}) {
		t.Fatalf("order %v", got)
	}
	p.remove(c)
	p.remove(d)
	p.remove(a)
	if got := order(); !reflect.DeepEqual(got, []uint64{2}) || p.tail != b || p.n != 1 {
		t.Fatalf("after removes: %v", got)
	}
	p.remove(b)
	if p.head != nil || p.tail != nil || p.n != 0 {
		t.Fatal("not empty")
	}
}

func TestPick(t *testing.T) {
	for i, c := range []struct {
		cands []pathScore
		want  int
	}{
		{[]pathScore{{1000, 5, 3}}, 0},
		{[]pathScore{{900, 8, 0}, {1000, 1, 9}}, 1},
		{[]pathScore{{1000, 1, 0}, {1000, 3, 9}}, 1},
		{[]pathScore{{1000, 3, 5}, {1000, 3, 2}, {1000, 3, 4}}, 1},
		{[]pathScore{{1000, 3, 2}, {1000, 3, 2}}, 0},
		{[]pathScore{{500, 9, 0}, {1000, -2, 7}, {1000, -2, 3}}, 2},
	} {
		if got := pick(len(c.cands), func(i int) pathScore { return c.cands[i] }); got != c.want {
			t.Errorf("case %d: pick = %d, want %d", i, got, c.want)
		}
	}
}

// TestCreditAccounting drives the credit state machine alone: two peers
// behind one NI with 3 credits, 2 per peer.
func TestCreditAccounting(t *testing.T) {
	ln := &LNet{}
	n := &ni{maxWaiting: 100}
	n.setTunablesLocked(Tunables{Credits: 3, PeerCredits: 2}, 100)
	p1 := &peerNI{maxCredits: 2, credits: 2, minCredits: 2}
	p2 := &peerNI{maxCredits: 2, credits: 2, minCredits: 2}
	var msgs []*msg
	post := func(p *peerNI) *msg {
		m := &msg{ni: n, lpni: p}
		msgs = append(msgs, m)
		ln.postLocked(m)
		return m
	}
	check := func(step string, nCred, nWait, p1Cred, p2Cred, ready int) {
		t.Helper()
		if n.credits != nCred || n.waiting != nWait || p1.credits != p1Cred || p2.credits != p2Cred || len(n.ready) != ready {
			t.Fatalf("%s: NI credits %d waiting %d, peer credits %d %d, ready %d; want %d %d, %d %d, %d",
				step, n.credits, n.waiting, p1.credits, p2.credits, len(n.ready), nCred, nWait, p1Cred, p2Cred, ready)
		}
	}
	a1, a2, a3 := post(p1), post(p1), post(p1) // a3 waits for a peer credit
	check("three to p1", 1, 1, -1, 2, 2)
	b1, b2 := post(p2), post(p2) // b2 waits for an NI credit
	check("two to p2", -1, 2, -1, 0, 3)
	if a3.q != &p1.txq || b2.q != &n.txq || !b2.peerCredit {
		t.Fatal("wrong queues")
	}
	n.ready = nil
	var drains []*ni
	// a1 done: its NI credit goes to b2 (first on the NI queue), its peer
	// credit to a3, which then waits for an NI credit.
	ln.returnCreditsLocked(a1, &drains)
	check("a1 done", -1, 1, 0, 0, 1)
	if n.ready[0] != b2 || a3.q != &n.txq || len(drains) != 1 {
		t.Fatalf("after a1: ready %v, a3 queue %p", n.ready, a3.q)
	}
	// a3 times out while waiting for the NI credit: its reservation and
	// its peer credit come back.
	if !ln.unqueueLocked(a3, &drains) {
		t.Fatal("a3 not queued")
	}
	check("a3 expired", 0, 0, 1, 0, 1)
	for _, m := range []*msg{a2, b1, b2} {
		ln.returnCreditsLocked(m, &drains)
	}
	check("all done", 3, 0, 2, 2, 1)
	if n.minCredits != -1 || p1.minCredits != -1 || p2.minCredits != 0 {
		t.Fatalf("min credits %d %d %d", n.minCredits, p1.minCredits, p2.minCredits)
	}
	for _, m := range msgs {
		if m.txCredit || m.peerCredit || m.q != nil {
			t.Fatalf("message still holds credits: %+v", m)
		}
	}
}

func TestTimerHeap(t *testing.T) {
	h := timer{kick: make(chan struct{}, 1)}
	base := time.Unix(1000, 0)
	ms := map[int]*msg{}
	for _, d := range []int{5, 1, 4, 2, 3} {
		m := &msg{heapIdx: -1, deadline: base.Add(time.Duration(d) * time.Second)}
		ms[d] = m
		h.add(m)
	}
	h.del(ms[4])
	h.del(ms[4]) // not in the heap any more: a no-op
	var got []int
	for len(h.h) > 0 {
		m := h.h[0]
		h.del(m)
		if m.heapIdx != -1 {
			t.Fatal("heap index kept")
		}
		got = append(got, int(m.deadline.Sub(base)/time.Second))
	}
	if !reflect.DeepEqual(got, []int{1, 2, 3, 5}) {
		t.Fatalf("order %v", got)
	}
}

// drainLND records how drain hands messages over; its first Send blocks
// until release is closed, so that more become ready meanwhile.
type drainLND struct {
	started chan struct{}
	release chan struct{}
	calls   [][]uint64 // match bits, one slice per Send or SendBatch
}

func (d *drainLND) Send(m *Msg) {
	d.calls = append(d.calls, []uint64{m.Hdr.MatchBits})
	if len(d.calls) == 1 {
		close(d.started)
		<-d.release
	}
}

func (d *drainLND) Tunables() Tunables                 { return Tunables{} }
func (d *drainLND) Shutdown(ctx context.Context) error { return nil }

type drainBatchLND struct{ *drainLND }

func (d drainBatchLND) SendBatch(ms []*Msg) {
	var bits []uint64
	for _, m := range ms {
		bits = append(bits, m.Hdr.MatchBits)
	}
	d.calls = append(d.calls, bits)
}

// TestDrainBatches: the messages that become ready while drain is in the
// LND go, in order, in one SendBatch to an LND that takes batches, one
// Send each to one that does not.
func TestDrainBatches(t *testing.T) {
	for _, batch := range []bool{false, true} {
		d := &drainLND{started: make(chan struct{}), release: make(chan struct{})}
		var lnd LND = d
		if batch {
			lnd = drainBatchLND{d}
		}
		ln := &LNet{}
		n := &ni{lnd: lnd}
		ready := func(bits ...uint64) {
			ln.net.Lock()
			for _, b := range bits {
				n.ready = append(n.ready, &msg{lm: Msg{Hdr: wire.Header{MatchBits: b}}})
			}
			ln.net.Unlock()
		}
		ready(0)
		done := make(chan struct{})
		go func() {
			ln.drain(n)
			close(done)
		}()
		<-d.started
		ready(1, 2, 3)
		ln.drain(n) // another sender: drain is busy, it leaves them
		ready(4)
		close(d.release)
		<-done
		want := [][]uint64{{0}, {1}, {2}, {3}, {4}}
		if batch {
			want = [][]uint64{{0}, {1, 2, 3, 4}}
		}
		if !reflect.DeepEqual(d.calls, want) || n.sending || len(n.ready) != 0 {
			t.Fatalf("batch %v: calls %v, sending %v, ready %d", batch, d.calls, n.sending, len(n.ready))
		}
	}
}

// TestTimerKick: add wakes the timer goroutine only for a deadline before
// the one it is armed for, not for every message that tops the heap.
func TestTimerKick(t *testing.T) {
	base := time.Unix(1000, 0)
	h := timer{kick: make(chan struct{}, 1), armed: base.Add(10 * time.Second)}
	kicked := func() bool {
		select {
		case <-h.kick:
			return true
		default:
			return false
		}
	}
	late := &msg{heapIdx: -1, deadline: base.Add(20 * time.Second)}
	h.add(late) // tops the empty heap, but the timer wakes before it anyway
	if kicked() {
		t.Fatal("kicked for a deadline after the armed one")
	}
	early := &msg{heapIdx: -1, deadline: base.Add(5 * time.Second)}
	h.add(early)
	if !kicked() {
		t.Fatal("not kicked for a deadline before the armed one")
	}
	h.add(&msg{heapIdx: -1, deadline: base.Add(6 * time.Second)}) // not first
	if kicked() {
		t.Fatal("kicked for a message that is not first")
	}
}
