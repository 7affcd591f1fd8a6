package lnet_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/nacrefs/nacre/lnd/lolnd"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// The fake driver serves wire.TCP in this test binary: NIs find each other
// by NID in one process-wide fabric, and each (sender NI, destination NID)
// pair is a "connection" with its own goroutine delivering in order, as a
// socket would. The receiver's Parse runs on that goroutine, so a stalled
// receiver stalls its sender's connection and the sender's credits.
// Incarnations are tracked per connection, so a restarted peer is reported
// with PeerRestarted, as socklnd's hello does.

func init() { lnet.Register(fakeDriver{}) }

type fakeDriver struct{}

func (fakeDriver) Type() wire.NetType { return wire.TCP }

// fakeStartupHook, if set (by a test), runs first in each fake NI's
// Startup; an error it returns is the Startup's.
var fakeStartupHook func(nid wire.NID) error

func (fakeDriver) Startup(_ context.Context, cfg lnet.NIConfig, host lnet.Host) (lnet.LND, error) {
	if h := fakeStartupHook; h != nil {
		if err := h(cfg.NID); err != nil {
			return nil, err
		}
	}
	n := &fakeNI{nid: cfg.NID, host: host, inc: cfg.Incarnation, tun: cfg.Tunables, links: map[wire.NID]*fakeLink{}}
	if n.tun.Credits == 0 {
		n.tun.Credits = 16
	}
	if n.tun.PeerCredits == 0 {
		n.tun.PeerCredits = 4
	}
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if fab.nis[cfg.NID] != nil {
		return nil, fmt.Errorf("fake: %v in use", cfg.NID)
	}
	fab.nis[cfg.NID] = n
	return n, nil
}

// fabric is the fake network.
type fabric struct {
	mu     sync.Mutex
	nis    map[wire.NID]*fakeNI
	paused bool
	resume chan struct{} // closed when paused ends
	fail   []error       // errors for the next sends, in order
	late   time.Duration // delay between delivery and the sender's Finalize
	after  []error       // errors to finalize the next delivered PUTs with
	// railFail fails every send to or from a NID (a broken rail) with its
	// error, without delivering it.
	railFail map[wire.NID]error
}

var fab = &fabric{nis: map[wire.NID]*fakeNI{}}

var fabricUsers sync.Mutex // tests that change the fabric's behaviour run one at a time

func (f *fabric) lookup(nid wire.NID) *fakeNI {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nis[nid]
}

// pause stops every delivery until the returned function is called.
func (f *fabric) pause() func() {
	f.mu.Lock()
	f.paused = true
	f.resume = make(chan struct{})
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		if f.paused {
			f.paused = false
			close(f.resume)
		}
		f.mu.Unlock()
	}
}

func (f *fabric) gate() {
	f.mu.Lock()
	if !f.paused {
		f.mu.Unlock()
		return
	}
	ch := f.resume
	f.mu.Unlock()
	<-ch
}

func (f *fabric) nextFailure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.fail) == 0 {
		return nil
	}
	err := f.fail[0]
	f.fail = f.fail[1:]
	return err
}

// setRail breaks (err != nil) or mends (nil) the rail of nid.
func (f *fabric) setRail(nid wire.NID, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.railFail == nil {
		f.railFail = map[wire.NID]error{}
	}
	if err == nil {
		delete(f.railFail, nid)
	} else {
		f.railFail[nid] = err
	}
}

func (f *fabric) railError(from, to wire.NID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.railFail[from]; err != nil {
		return err
	}
	return f.railFail[to]
}

func (f *fabric) lateness() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.late
}

type fakeNI struct {
	nid  wire.NID
	host lnet.Host
	inc  uint64
	tun  lnet.Tunables

	mu     sync.Mutex
	closed bool
	links  map[wire.NID]*fakeLink
	wg     sync.WaitGroup
	peers  sync.Map // wire.NID -> uint64: incarnation last seen of a peer, either way
	sends  atomic.Int64
}

type fakeLink struct {
	from   *fakeNI
	to     wire.NID
	mu     sync.Mutex
	q      []*lnet.Msg
	closed bool
	wake   chan struct{}
}

func (n *fakeNI) Tunables() lnet.Tunables { return n.tun }

func (n *fakeNI) Send(m *lnet.Msg) {
	n.sends.Add(1)
	// LNet must only emit headers a peer accepts, and payloads that add up.
	var b [wire.HeaderSize]byte
	if err := m.Hdr.Marshal(b[:]); err != nil {
		panic(fmt.Sprintf("fake: LNet sent a bad header: %v", err))
	}
	total := 0
	for _, p := range m.Payload {
		total += len(p)
	}
	if total != int(m.Hdr.PayloadLen) || m.NextHop.Net != n.nid.Net {
		panic(fmt.Sprintf("fake: payload of %d bytes for PayloadLen %d, next hop %v", total, m.Hdr.PayloadLen, m.NextHop))
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		n.host.Finalize(m, lnet.ErrShutdown)
		return
	}
	l := n.links[m.NextHop]
	if l == nil {
		l = &fakeLink{from: n, to: m.NextHop, wake: make(chan struct{}, 1)}
		n.links[m.NextHop] = l
		n.wg.Add(1)
		go l.run()
	}
	n.mu.Unlock()
	l.mu.Lock()
	l.q = append(l.q, m)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (n *fakeNI) Shutdown(ctx context.Context) error {
	fab.mu.Lock()
	if fab.nis[n.nid] == n {
		delete(fab.nis, n.nid)
	}
	fab.mu.Unlock()
	n.mu.Lock()
	n.closed = true
	links := n.links
	n.links = nil
	n.mu.Unlock()
	for _, l := range links {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *fakeLink) run() {
	defer l.from.wg.Done()
	for range l.wake {
		for {
			l.mu.Lock()
			if l.closed {
				q := l.q
				l.q = nil
				l.mu.Unlock()
				for _, m := range q {
					l.from.host.Finalize(m, lnet.ErrShutdown)
				}
				return
			}
			if len(l.q) == 0 {
				l.mu.Unlock()
				break
			}
			m := l.q[0]
			l.q = l.q[1:]
			l.mu.Unlock()
			l.deliver(m)
		}
	}
}

func (l *fakeLink) deliver(m *lnet.Msg) {
	fab.gate()
	if err := fab.nextFailure(); err != nil {
		l.from.host.Finalize(m, err)
		return
	}
	if err := fab.railError(l.from.nid, l.to); err != nil {
		l.from.host.Finalize(m, err)
		return
	}
	dst := fab.lookup(l.to)
	if dst == nil {
		l.from.host.Finalize(m, lnet.ErrPeerUnreachable)
		return
	}
	// The "hello": report a new or restarted peer before delivering. Each
	// NI keeps one record per peer NID, whichever direction taught it, as
	// socklnd keeps one incarnation per peer.
	if old, ok := l.from.peers.Swap(dst.nid, dst.inc); !ok || old.(uint64) != dst.inc {
		ev := lnet.PeerUp
		if ok {
			ev = lnet.PeerRestarted
		}
		l.from.host.PeerEvent(dst.nid, ev)
	}
	if old, ok := dst.peers.Swap(l.from.nid, l.from.inc); ok && old.(uint64) != l.from.inc {
		dst.host.PeerEvent(l.from.nid, lnet.PeerRestarted)
	}
	hdr := m.Hdr
	r := &fakeRx{m: m, done: make(chan struct{})}
	_ = dst.host.Parse(&hdr, l.from.nid, r)
	// A router out of buffers receives later, from another goroutine
	// (lnet.forward): the link waits, as a socket's reader does.
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		panic("fake: Parse returned and Recv was never called")
	}
	if d := fab.lateness(); d > 0 {
		time.Sleep(d)
	}
	err := r.err
	fab.mu.Lock()
	if len(fab.after) > 0 && err == nil && m.Hdr.Type == wire.MsgPut {
		err, fab.after = fab.after[0], fab.after[1:]
	}
	fab.mu.Unlock()
	l.from.host.Finalize(m, err)
}

type fakeRx struct {
	m      *lnet.Msg
	called bool
	err    error
	done   chan struct{} // closed by Recv, which sets called and err first
}

func (r *fakeRx) Recv(dst [][]byte, mlen int) error {
	if r.called {
		panic("fake: Recv called twice")
	}
	r.called = true
	defer close(r.done)
	src := r.m.Payload
	var si, so int
	left := mlen
	for _, d := range dst {
		for len(d) > 0 && left > 0 {
			for si < len(src) && so == len(src[si]) {
				si, so = si+1, 0
			}
			if si == len(src) {
				r.err = fmt.Errorf("fake: receive past the payload")
				return r.err
			}
			c := copy(d[:min(len(d), left)], src[si][so:])
			d, so, left = d[c:], so+c, left-c
		}
	}
	if left > 0 {
		r.err = fmt.Errorf("fake: receive buffers short by %d", left)
	}
	return r.err
}

// fakeAddr hands out addresses for fake NIs, unique in the test binary.
var fakeAddr atomic.Uint32

func newFakeNID() wire.NID {
	n := fakeAddr.Add(1)
	return wire.NID{Net: wire.Net{Type: wire.TCP}, Addr: netip.AddrFrom4([4]byte{10, 99, byte(n >> 8), byte(n)})}
}

// startFake starts an LNet with one fake NI per NID given (new NIDs if
// none), closed at the end of the test.
func startFake(t testing.TB, mod func(*lnet.Config), nids ...wire.NID) *lnet.LNet {
	t.Helper()
	if len(nids) == 0 {
		nids = []wire.NID{newFakeNID()}
	}
	cfg := lnet.DefaultConfig()
	nc := lnet.NetConfig{Net: nids[0].Net}
	for _, nid := range nids {
		nc.Addrs = append(nc.Addrs, nid.Addr)
	}
	cfg.Networks = []lnet.NetConfig{nc}
	if mod != nil {
		mod(&cfg)
	}
	ln, err := lnet.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ln.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return ln
}

// fakeNIDOf returns the fake (non-lo) NIDs of ln.
func fakeNIDOf(ln *lnet.LNet) wire.NID { return ln.NIDs()[1] }
