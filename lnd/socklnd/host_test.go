package socklnd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/iovec"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// testHost is a stand-in for the LNet core: it implements lnet.Host,
// places payloads where the test posted buffers, and records everything
// the NI tells it.
type testHost struct {
	// post returns where a message's payload lands and how much of it to
	// take; nil means one fresh buffer of the whole payload. Set it with
	// setPost: the NI's reader goroutines read it.
	post atomic.Pointer[postFunc]
	// refuse makes Parse refuse headers (and drain them, as LNet does).
	refuse atomic.Bool
	// deferRecv makes Parse return without calling Recv, handing the Rx to
	// the test on pending instead.
	deferRecv atomic.Bool
	// parsed, if set, is called by Parse after Recv, as LNet calls an
	// MD's handler: it may leave a continuation (lnet.Continuer).
	parsed atomic.Pointer[func(hdr *wire.Header, rx lnet.Rx)]

	rxs     chan rxRec
	pending chan pendingRx
	fins    chan finRec
	events  chan evRec
	credits chan struct{} // taken by send, given back by Finalize
}

type postFunc func(hdr *wire.Header) (dst [][]byte, mlen int)

func (h *testHost) setPost(f postFunc) {
	if f == nil {
		h.post.Store(nil)
		return
	}
	h.post.Store(&f)
}

type rxRec struct {
	hdr  wire.Header
	from wire.NID
	dst  [][]byte
	mlen int
	err  error
}

type pendingRx struct {
	hdr  wire.Header
	from wire.NID
	rx   lnet.Rx
}

type finRec struct {
	msg *lnet.Msg
	err error
}

type evRec struct {
	peer wire.NID
	ev   lnet.PeerEvent
}

func newTestHost(credits int) *testHost {
	h := &testHost{
		rxs:     make(chan rxRec, 8192),
		pending: make(chan pendingRx, 64),
		fins:    make(chan finRec, 8192),
		events:  make(chan evRec, 256),
		credits: make(chan struct{}, credits),
	}
	return h
}

func (h *testHost) Parse(hdr *wire.Header, from wire.NID, rx lnet.Rx) error {
	if h.refuse.Load() {
		rx.Recv(nil, 0)
		h.rxs <- rxRec{hdr: *hdr, from: from, err: fmt.Errorf("refused")}
		return fmt.Errorf("test host refuses %v", hdr.Type)
	}
	if h.deferRecv.Load() {
		h.pending <- pendingRx{*hdr, from, rx}
		return nil
	}
	dst, mlen := h.dst(hdr)
	err := rx.Recv(dst, mlen)
	h.rxs <- rxRec{*hdr, from, dst, mlen, err}
	if f := h.parsed.Load(); f != nil {
		(*f)(hdr, rx)
	}
	return nil
}

func (h *testHost) dst(hdr *wire.Header) ([][]byte, int) {
	if f := h.post.Load(); f != nil {
		return (*f)(hdr)
	}
	return [][]byte{make([]byte, hdr.PayloadLen)}, int(hdr.PayloadLen)
}

func (h *testHost) Finalize(msg *lnet.Msg, err error) {
	select {
	case <-h.credits:
	default:
	}
	h.fins <- finRec{msg, err}
}

func (h *testHost) PeerEvent(peer wire.NID, ev lnet.PeerEvent) {
	h.events <- evRec{peer, ev}
}

// send takes a credit, as LNet would, and sends msg. It may be called from
// any goroutine: it reports a missing credit with t.Errorf and false.
func (h *testHost) send(t testing.TB, ni *NI, msg *lnet.Msg) bool {
	t.Helper()
	select {
	case h.credits <- struct{}{}:
	case <-time.After(20 * time.Second):
		t.Errorf("no credit to send within 20s")
		return false
	}
	ni.Send(msg)
	return true
}

// tryRx waits for the next received message; from any goroutine.
func (h *testHost) tryRx(t testing.TB) (rxRec, bool) {
	t.Helper()
	select {
	case r := <-h.rxs:
		return r, true
	case <-time.After(10 * time.Second):
		t.Errorf("no message received within 10s")
		return rxRec{}, false
	}
}

// tryFin waits for the next finalized message; from any goroutine.
func (h *testHost) tryFin(t testing.TB) (finRec, bool) {
	t.Helper()
	select {
	case f := <-h.fins:
		return f, true
	case <-time.After(20 * time.Second):
		t.Errorf("no message finalized within 20s")
		return finRec{}, false
	}
}

// nextRx is tryRx for the test's goroutine: it stops the test on timeout.
func (h *testHost) nextRx(t testing.TB) rxRec {
	t.Helper()
	r, ok := h.tryRx(t)
	if !ok {
		t.FailNow()
	}
	return r
}

// nextFin is tryFin for the test's goroutine.
func (h *testHost) nextFin(t testing.TB) finRec {
	t.Helper()
	f, ok := h.tryFin(t)
	if !ok {
		t.FailNow()
	}
	return f
}

// waitEvent waits for ev about peer, skipping other events.
func (h *testHost) waitEvent(t testing.TB, peer wire.NID, ev lnet.PeerEvent) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e := <-h.events:
			if e.peer == peer && e.ev == ev {
				return
			}
		case <-deadline:
			t.Fatalf("no %v event for %v within 10s", ev, peer)
		}
	}
}

// logBuf collects an NI's log lines for assertions.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitLine waits for a log line holding every one of parts.
func (l *logBuf) waitLine(t testing.TB, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, line := range strings.Split(l.String(), "\n") {
			ok := true
			for _, p := range parts {
				if !strings.Contains(line, p) {
					ok = false
					break
				}
			}
			if ok && line != "" {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q within 10s; log:\n%s", parts, l.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// node is one NI under test with its host and log.
type node struct {
	ni   *NI
	h    *testHost
	log  *logBuf
	nid  wire.NID
	port int
	inc  uint64
}

var incarnations atomic.Uint64

// testPort finds a port free on every given loopback address, counting up
// from 20988 so concurrent test binaries rarely meet.
var nextPort atomic.Int32

func init() { nextPort.Store(20988) }

func testPort(t testing.TB, addrs ...string) int {
	t.Helper()
	for range 500 {
		port := 20988 + int(nextPort.Add(1)-20988)%10000 // fuzzing starts many nodes
		ok := true
		var lns []net.Listener
		for _, a := range addrs {
			ln, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatalf("no free port")
	return 0
}

// fastOpts are the options tests run with: short timeouts so failures
// surface in seconds.
func fastOpts(port int) map[string]string {
	return map[string]string{
		"port":              strconv.Itoa(port),
		"backoff_min":       "20ms",
		"backoff_max":       "200ms",
		"handshake_timeout": "2s",
		"connect_timeout":   "5s",
		"sock_timeout":      "10s",
	}
}

// startNode starts an NI on addr@tcp with the fast options plus extra.
func startNode(t testing.TB, addr string, port int, extra map[string]string) *node {
	t.Helper()
	n, err := tryStartNode(t, addr, port, extra)
	if err != nil {
		t.Fatalf("startup %v: %v", n.nid, err)
	}
	return n
}

// startNodeAnyPort starts a node on a port testPort picks, and on another
// if someone took that one before the node could listen on it: the
// parallel workers of a fuzzer, separate processes, pick from the same
// ports.
func startNodeAnyPort(t testing.TB, addr string, extra map[string]string) *node {
	t.Helper()
	for range 20 {
		n, err := tryStartNode(t, addr, testPort(t, addr), extra)
		if err == nil {
			return n
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("startup %v: %v", n.nid, err)
		}
	}
	t.Fatalf("startup %v: every port tried was taken", addr)
	return nil
}

// tryStartNode starts a node, or returns (with n.nid set) the error of
// its startup.
func tryStartNode(t testing.TB, addr string, port int, extra map[string]string) (*node, error) {
	t.Helper()
	opts := fastOpts(port)
	for k, v := range extra {
		opts[k] = v
	}
	n := &node{
		h:    newTestHost(defaultPeerCredits),
		log:  &logBuf{},
		nid:  wire.MustParseNID(addr + "@tcp"),
		port: port,
		inc:  uint64(time.Now().UnixNano()) + incarnations.Add(1),
	}
	logger := slog.New(slog.NewTextHandler(n.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d, ok := lnet.LookupDriver(wire.TCP)
	if !ok {
		t.Fatal("socklnd is not registered for tcp")
	}
	lnd, err := d.Startup(context.Background(), lnet.NIConfig{
		NID:         n.nid,
		PID:         wire.PIDLustre,
		Incarnation: n.inc,
		Options:     opts,
		Logger:      logger,
	}, n.h)
	if err != nil {
		return n, err
	}
	n.ni = lnd.(*NI)
	t.Cleanup(func() {
		n.stop(t)
		if t.Failed() {
			t.Logf("log of %v:\n%s", n.nid, n.log.String())
		}
	})
	return n, nil
}

func (n *node) stop(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.ni.Shutdown(ctx); err != nil {
		t.Errorf("shutdown %v: %v", n.nid, err)
	}
}

// put builds a PUT from one node to another carrying payload.
func put(from, to wire.NID, bits uint64, payload ...[]byte) *lnet.Msg {
	return &lnet.Msg{
		Hdr: wire.Header{
			Type:       wire.MsgPut,
			SrcNID:     from,
			DstNID:     to,
			SrcPID:     wire.PIDLustre,
			DstPID:     wire.PIDLustre,
			PayloadLen: uint32(iovec.Len(payload)),
			WMD:        wire.WireHandleNone,
			MatchBits:  bits,
			Portal:     4,
		},
		NextHop: to,
		Payload: payload,
	}
}

// pattern returns n bytes that differ per seed and position.
func pattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

func joined(views [][]byte, n int) []byte {
	out := make([]byte, 0, n)
	for _, v := range views {
		k := min(len(v), n-len(out))
		out = append(out, v[:k]...)
	}
	return out
}

// connTypes lists a node's connection types to peer, sorted by type.
func connTypes(ni *NI, peer wire.NID) []ConnInfo {
	for _, p := range ni.Peers() {
		if p.NID == peer {
			return p.Conns
		}
	}
	return nil
}

// fakePeer is a raw TCP client that speaks as much of the protocol as a
// test wants.
type fakePeer struct {
	nc  net.Conn
	nid wire.NID
}

// dialFake connects to target's NI as NID fake, doing the hello unless raw.
func dialFake(t testing.TB, target *node, fake string, handshake bool) *fakePeer {
	t.Helper()
	nc, err := net.Dial("tcp", netip.AddrPortFrom(target.nid.Addr, uint16(target.port)).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	f := &fakePeer{nc: nc, nid: wire.MustParseNID(fake + "@tcp")}
	if !handshake {
		return f
	}
	h := wire.Hello{
		Version: wire.HelloVersion, SrcNID: f.nid, DstNID: target.nid,
		SrcPID: wire.PIDLustre, DstPID: wire.PIDLustre, SrcIncarnation: 1, ConnType: wire.ConnControl,
	}
	b, err := h.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	in, err := wire.ReadHello(nc)
	if err != nil {
		t.Fatalf("fake peer %v: no answer hello: %v", f.nid, err)
	}
	if in.ConnType != wire.ConnControl || in.SrcNID != target.nid || in.DstNID != f.nid {
		t.Fatalf("fake peer: bad answer %+v", in)
	}
	nc.SetReadDeadline(time.Time{})
	return f
}

// waitClosed waits until the NI closes the fake peer's connection.
func (f *fakePeer) waitClosed(t testing.TB) {
	t.Helper()
	f.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [4096]byte
	for {
		_, err := f.nc.Read(b[:])
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("NI did not close the connection of fake peer %v", f.nid)
		}
		return
	}
}
