package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/nacrefs/nacre/lnd/lolnd"
	_ "github.com/nacrefs/nacre/lnd/socklnd"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// nextPort hands out acceptor ports, counting up from 27100 so that other
// test binaries (socklnd's count from 20988 and 24000) rarely meet ours.
var nextPort atomic.Int32

func init() { nextPort.Store(27100) }

// freePort finds a port free on every given address.
func freePort(t testing.TB, addrs ...string) int {
	t.Helper()
	for range 200 {
		port := int(nextPort.Add(1))
		ok := true
		var lns []net.Listener
		for _, a := range addrs {
			l, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			lns = append(lns, l)
		}
		for _, l := range lns {
			l.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// sockOpts are socklnd's settings for tests: failures surface in seconds.
func sockOpts(port int) map[string]string {
	return map[string]string{
		"port":              strconv.Itoa(port),
		"backoff_min":       "20ms",
		"backoff_max":       "200ms",
		"handshake_timeout": "1s",
		"connect_timeout":   "2s",
		"sock_timeout":      "3s",
		"keepalive_idle":    "1s",
		"keepalive_intvl":   "1s",
		"keepalive_count":   "2",
	}
}

// testConfig is an LNet config for nets (Lustre's networks= syntax) with
// quick liveness and recovery.
func testConfig(nets string, port int) (lnet.Config, error) {
	cfg := lnet.DefaultConfig()
	nc, err := lnet.ParseNetworks(nets)
	if err != nil {
		return cfg, err
	}
	for i := range nc {
		nc[i].Options = sockOpts(port)
	}
	cfg.Networks = nc
	cfg.RouterCheckInterval = 100 * time.Millisecond
	cfg.RouterPingTimeout = time.Second
	cfg.RecoveryInterval = 100 * time.Millisecond
	cfg.TransactionTimeout = 5 * time.Second
	return cfg, nil
}

// logBuf collects a node's log, shown if the test fails.
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

// start starts an LNet node on nets, closed when the test ends.
func start(t *testing.T, name, nets string, port int, mod func(*lnet.Config)) *lnet.LNet {
	t.Helper()
	cfg, err := testConfig(nets, port)
	if err != nil {
		t.Fatal(err)
	}
	lb := &logBuf{}
	cfg.Logger = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", name)
	if mod != nil {
		mod(&cfg)
	}
	ln, err := lnet.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ln.Close(ctx); err != nil {
			t.Errorf("close %s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, tail(lb.String(), 200))
		}
	})
	return ln
}

func tail(s string, lines int) string {
	ls := strings.Split(s, "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

func nid(s string) wire.NID { return wire.MustParseNID(s) }

func proc(s string) wire.ProcessID { return wire.ProcessID{NID: nid(s), PID: wire.PIDLustre} }

// via is a route to net through gw.
func via(net, gw string) lnet.Route {
	n, err := wire.ParseNet(net)
	if err != nil {
		panic(err)
	}
	return lnet.Route{Net: n, Gateway: nid(gw), Hops: 1}
}

func routes(rs ...lnet.Route) func(*lnet.Config) {
	return func(c *lnet.Config) { c.Routes = rs }
}

// pattern returns n bytes that differ by seed and position.
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

// events collects one MD's events.
type events chan lnet.Event

func newEvents() events { return make(events, 1024) }

func (e events) handler(ev lnet.Event) { e <- ev }

func (e events) next(t testing.TB) lnet.Event {
	t.Helper()
	select {
	case ev := <-e:
		return ev
	case <-time.After(20 * time.Second):
		t.Fatal("no event within 20s")
	}
	return lnet.Event{}
}

// put PUTs data to target's portal at offset (for a MANAGE_REMOTE MD)
// with hdrData and waits for the ACK: the ACK's status, or the error Put
// returned.
func put(t testing.TB, ln *lnet.LNet, target wire.ProcessID, portal uint32, hdrData uint64, offset uint32, data []byte) error {
	t.Helper()
	return putWait(ln, target, portal, hdrData, offset, data)
}

// putWait is put for the helper processes, which have no testing.TB.
func putWait(ln *lnet.LNet, target wire.ProcessID, portal uint32, hdrData uint64, offset uint32, data []byte) error {
	ev := newEvents()
	h, err := ln.Bind(lnet.MD{Buffers: [][]byte{data}, Threshold: 1, Handler: ev.handler})
	if err != nil {
		return err
	}
	if err := ln.Put(context.Background(), h, lnet.AckReq, target, portal, 0, offset, hdrData); err != nil {
		ln.Unlink(h)
		return err
	}
	var status error
	timeout := time.After(ln.TransactionTimeout() + 10*time.Second)
	for {
		var e lnet.Event
		select {
		case e = <-ev:
		case <-timeout:
			return errors.New("no ACK event within the transaction timeout")
		}
		switch e.Type {
		case lnet.EventSend:
			if e.Status != nil {
				status = e.Status
			}
		case lnet.EventAck:
			if e.Status != nil {
				return e.Status
			}
			return status
		}
	}
}

// putRetry PUTs sequence number seq (pattern(seq, size) at offset
// seq*size of a sink) until an ACK comes back, as PtlRPC resends; it
// returns the number of failed attempts.
func putRetry(t testing.TB, ln *lnet.LNet, target wire.ProcessID, portal uint32, seq uint64, size int, deadline time.Time) int {
	t.Helper()
	data := pattern(seq, size)
	for fails := 0; ; fails++ {
		err := put(t, ln, target, portal, seq, uint32(seq)*uint32(size), data)
		if err == nil {
			return fails
		}
		if time.Now().After(deadline) {
			t.Fatalf("PUT %d still failing: %v", seq, err)
		}
		if errors.Is(err, lnet.ErrNoRoute) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// seqSink counts the distinct sequence numbers (hdr data) PUT into an MD.
type seqSink struct {
	mu     sync.Mutex
	seen   map[uint64]int
	bad    []string
	failed int
}

// attachSink attaches on portal a sink for PUTs of sequence numbers below
// n, each of size bytes at offset seq*size; with check, each PUT's payload
// must be pattern(seq, size).
func attachSink(t testing.TB, ln *lnet.LNet, portal uint32, n, size int, check bool) *seqSink {
	t.Helper()
	s := &seqSink{seen: map[uint64]int{}}
	buf := make([]byte, n*size)
	_, err := ln.Attach(portal, lnet.AnyProcess, 0, 0, lnet.InsertLast, lnet.MD{
		Buffers: [][]byte{buf}, Threshold: lnet.ThresholdInfinite,
		Options: lnet.MDOpPut | lnet.MDManageRemote | lnet.MDTruncate,
		Handler: func(ev lnet.Event) {
			if ev.Type != lnet.EventPut {
				return
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if ev.Status != nil {
				// The payload did not arrive whole (a router went away
				// mid-message): not seen; the sender retries.
				s.failed++
				return
			}
			s.seen[ev.HdrData]++
			if check && !bytes.Equal(buf[ev.Offset:ev.Offset+ev.MLength], pattern(ev.HdrData, size)) {
				s.bad = append(s.bad, fmt.Sprintf("PUT %d: payload differs", ev.HdrData))
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// missing returns the sequence numbers below n not seen, and the number
// seen.
func (s *seqSink) missing(n int) (miss []uint64, seen int, bad []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range uint64(n) {
		if s.seen[i] == 0 {
			miss = append(miss, i)
		}
	}
	return miss, len(s.seen), append([]string(nil), s.bad...)
}

func waitFor(t testing.TB, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func niSends(ln *lnet.LNet, n wire.NID) uint64 {
	s := ln.Stats()
	st, _ := s.NI(n)
	return st.SendCount
}

func peerSends(ln *lnet.LNet, n wire.NID) uint64 {
	s := ln.Stats()
	st, _ := s.Peer(n)
	return st.SendCount
}

func routeUp(ln *lnet.LNet, gw wire.NID) bool {
	for _, r := range ln.Routes() {
		if r.Gateway == gw {
			return r.Up
		}
	}
	return false
}
