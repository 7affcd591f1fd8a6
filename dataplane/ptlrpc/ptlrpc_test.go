package ptlrpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/lnet"
	lwire "github.com/nacrefs/nacre/lnet/wire"

	_ "github.com/nacrefs/nacre/lnd/lolnd"
	_ "github.com/nacrefs/nacre/lnd/socklnd"
)

const (
	opEcho    = wire.OSTGetattr
	opBlock   = wire.MDSGetattr
	opHeld    = wire.MDSClose
	reqPortal = 23
	rplPortal = 24
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var nextPort atomic.Int32

func init() { nextPort.Store(29100) }

func freePort(t testing.TB, addrs ...string) int {
	for range 200 {
		port := int(nextPort.Add(1))
		ok := true
		for _, a := range addrs {
			l, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

func startLNet(t testing.TB, nets string, port int) *lnet.LNet {
	cfg := lnet.DefaultConfig()
	cfg.Logger = quiet
	cfg.TransactionTimeout = 5 * time.Second
	if nets != "" {
		nc, err := lnet.ParseNetworks(nets)
		if err != nil {
			t.Fatal(err)
		}
		for i := range nc {
			nc[i].Options = map[string]string{"port": strconv.Itoa(port)}
		}
		cfg.Networks = nc
	}
	ln, err := lnet.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ln.Close(ctx)
	})
	return ln
}

// env is a client LNet and a server LNet (the same one over 0@lo).
type env struct {
	cli, srv *lnet.LNet
	target   lwire.ProcessID
}

func loEnv(t testing.TB) env {
	ln := startLNet(t, "", 0)
	return env{cli: ln, srv: ln, target: lwire.ProcessID{NID: lwire.LoNID, PID: ln.PID()}}
}

func sockEnv(t testing.TB) env {
	port := freePort(t, "127.0.0.1", "127.0.0.2")
	cli := startLNet(t, "tcp(127.0.0.1)", port)
	srv := startLNet(t, "tcp(127.0.0.2)", port)
	return env{cli: cli, srv: srv, target: lwire.ProcessID{NID: srv.NIDs()[len(srv.NIDs())-1], PID: srv.PID()}}
}

func echo(_ context.Context, req *Request) ([]byte, int32) {
	return bytes.Clone(req.Body), 0
}

func block(ctx context.Context, _ *Request) ([]byte, int32) {
	<-ctx.Done()
	return nil, 0
}

func startService(t testing.TB, ln *lnet.LNet, portal uint32) *Service {
	s, err := NewService(ln, ServiceConfig{Name: "test" + strconv.Itoa(int(portal)), RequestPortal: portal, Logger: quiet,
		Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: echo}, opBlock: {Fn: block}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + seed + i>>8)
	}
	return b
}

func TestLolnd(t *testing.T)   { runAll(t, loEnv) }
func TestSocklnd(t *testing.T) { runAll(t, sockEnv) }

func runAll(t *testing.T, mk func(testing.TB) env) {
	t.Run("echo", func(t *testing.T) { testEcho(t, mk(t)) })
	t.Run("unknown", func(t *testing.T) { testUnknown(t, mk(t)) })
	t.Run("set", func(t *testing.T) { testSet(t, mk(t)) })
	t.Run("cancel", func(t *testing.T) { testCancel(t, mk(t)) })
	t.Run("malformed", func(t *testing.T) { testMalformed(t, mk(t)) })
}

func testEcho(t *testing.T, e env) {
	s := startService(t, e.srv, reqPortal)
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, n := range []int{0, 1, 4095, 64 << 10} {
		body := pattern(n, i)
		got, err := c.Call(ctx, e.target, reqPortal, opEcho, body)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("%d bytes: reply differs (%d bytes)", n, len(got))
		}
	}
	if st := s.Stats().Ops[opEcho]; st.Count != 4 {
		t.Fatalf("stats %+v", st)
	}
}

func testUnknown(t *testing.T, e env) {
	startService(t, e.srv, reqPortal)
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Call(ctx, e.target, reqPortal, wire.Opcode(9999), []byte("x"))
	var re *RemoteError
	if !errors.As(err, &re) || re.Status != -95 || !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("err %v", err)
	}
}

func testSet(t *testing.T, e env) {
	for p := range 4 {
		startService(t, e.srv, reqPortal+10+uint32(p))
	}
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls := make([]Call, 64)
	for i := range calls {
		calls[i] = Call{Target: e.target, Portal: reqPortal + 10 + uint32(i%4), Opcode: opEcho, Body: pattern(100+i*37, i)}
	}
	for i, r := range c.CallSet(ctx, calls) {
		if r.Err != nil {
			t.Fatalf("call %d: %v", i, r.Err)
		}
		if !bytes.Equal(r.Reply, calls[i].Body) {
			t.Fatalf("call %d: wrong reply", i)
		}
	}
}

func waitMDs(t *testing.T, ln *lnet.LNet, want int) {
	deadline := time.Now().Add(5 * time.Second)
	for ln.Stats().MDs != want {
		if time.Now().After(deadline) {
			t.Fatalf("MDs %d, want %d", ln.Stats().MDs, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testCancel(t *testing.T, e env) {
	startService(t, e.srv, reqPortal)
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal})
	base := e.cli.Stats().MDs
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Call(ctx, e.target, reqPortal, opBlock, []byte("wait"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	waitMDs(t, e.cli, base)
}

func testMalformed(t *testing.T, e env) {
	s := startService(t, e.srv, reqPortal)
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, garbage := range [][]byte{[]byte("garbage"), pattern(500, 3)} {
		sent := make(chan lnet.Event, 4)
		md, err := e.cli.Bind(lnet.MD{Buffers: [][]byte{garbage}, Threshold: 1, Handler: func(ev lnet.Event) { sent <- ev }})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.cli.Put(ctx, md, lnet.NoAckReq, e.target, reqPortal, 1, 0, rplPortal); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Malformed != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("malformed %d", s.Stats().Malformed)
		}
		time.Sleep(5 * time.Millisecond)
	}
	body := pattern(1000, 9)
	got, err := c.Call(ctx, e.target, reqPortal, opEcho, body)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("after garbage: %v", err)
	}
}

func TestBusy(t *testing.T) {
	e := loEnv(t)
	release := make(chan struct{})
	s, err := NewService(e.srv, ServiceConfig{Name: "busy", RequestPortal: reqPortal, MinThreads: 1, MaxThreads: 1, MaxQueued: 8, Logger: quiet,
		Handlers: map[wire.Opcode]HandlerSpec{opBlock: {Fn: func(context.Context, *Request) ([]byte, int32) { <-release; return nil, 0 }}}})
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls := make([]Call, 20) // 8 queued, maybe 1 running; the rest EAGAIN
	for i := range calls {
		calls[i] = Call{Target: e.target, Portal: reqPortal, Opcode: opBlock}
	}
	var wg sync.WaitGroup
	var res []Result
	wg.Go(func() { res = c.CallSet(ctx, calls) })
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Busy < 11 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	busy := 0
	for _, r := range res {
		if errors.Is(r.Err, syscall.EAGAIN) {
			busy++
		} else if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if busy < 11 || busy > 12 { // 8 queued, and 1 running unless the worker was slow to take it
		t.Fatalf("busy %d, want 11 or 12", busy)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkNullRPC(b *testing.B) {
	for _, inflight := range []int{1, 8, 64} {
		b.Run(fmt.Sprint(inflight), func(b *testing.B) {
			e := loEnv(b)
			// 8 threads: a queue of 64, so 64 in flight never see -EAGAIN.
			s, err := NewService(e.srv, ServiceConfig{Name: "bench", RequestPortal: reqPortal, MinThreads: 8, Logger: quiet,
				Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: echo}}})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
			c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal})
			ctx := context.Background()
			var n atomic.Int64
			n.Store(int64(b.N))
			b.ResetTimer()
			var wg sync.WaitGroup
			for range inflight {
				wg.Go(func() {
					for n.Add(-1) >= 0 {
						if _, err := c.Call(ctx, e.target, reqPortal, opEcho, nil); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}

func TestRepostAndOversize(t *testing.T) {
	e := loEnv(t)
	s, err := NewService(e.srv, ServiceConfig{Name: "small", RequestPortal: reqPortal, Logger: quiet,
		BufferSize: 16 << 10, Buffers: 2, MaxBodySize: 4096, Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: echo}}})
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 200 {
		body := pattern(1000+i, i)
		got, err := c.Call(ctx, e.target, reqPortal, opEcho, body)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if s.Stats().Reposts == 0 {
		t.Fatal("no buffer was reposted")
	}
	_, err = c.Call(ctx, e.target, reqPortal, opEcho, pattern(5000, 1))
	if !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("oversize: %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRequestBuffersGrow: requests that take long hold their request
// buffers (a buffer is posted again only when every request in it is
// done); the service adds buffers meanwhile, up to MaxBuffers, so that
// other requests still land and are answered.
func TestRequestBuffersGrow(t *testing.T) {
	e := loEnv(t)
	release := make(chan struct{})
	var held atomic.Int32
	slow := func(ctx context.Context, req *Request) ([]byte, int32) {
		held.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return bytes.Clone(req.Body), 0
	}
	const base, most = 2, 8
	s, err := NewService(e.srv, ServiceConfig{Name: "grow", RequestPortal: reqPortal, Logger: quiet,
		BufferSize: 8 << 10, Buffers: base, MaxBuffers: most, MaxBodySize: 1024, MaxThreads: 64,
		Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: echo}, opHeld: {Fn: slow}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) }) // on failure too: Close waits for the handlers
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// 24 slow requests of 1000 bytes: about 6 fill a buffer, so they hold
	// more buffers than the service started with.
	const slowN = 24
	var wg sync.WaitGroup
	errs := make(chan error, slowN)
	for i := range slowN {
		body := pattern(1000, i)
		wg.Go(func() {
			got, err := c.Call(ctx, e.target, reqPortal, opHeld, body)
			if err == nil && !bytes.Equal(got, body) {
				err = fmt.Errorf("slow request %d: reply differs", i)
			}
			errs <- err
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for held.Load() < slowN && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // every slow request is in a handler
	}
	if st := s.Stats(); st.Buffers <= base || st.Buffers > most || st.Grown == 0 {
		t.Fatalf("with %d slow requests held: %d request buffers (grown %d); want more than %d, at most %d", slowN, st.Buffers, st.Grown, base, most)
	}
	// Other requests still land and are answered at once.
	for i := range 50 {
		qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
		body := pattern(500, 1000+i)
		got, err := c.Call(qctx, e.target, reqPortal, opEcho, body)
		qcancel()
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("echo %d while slow requests hold buffers: %v; %+v", i, err, s.Stats())
		}
	}
	releaseOnce.Do(func() { close(release) })
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The service goes on with what it has: buffers are reposted, and no
	// more are added while requests are quick.
	grown := s.Stats().Buffers
	for i := range 200 {
		if _, err := c.Call(ctx, e.target, reqPortal, opEcho, pattern(1000, i)); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Buffers != grown || st.Reposts == 0 {
		t.Fatalf("after the slow requests: %d request buffers (were %d), %d reposts", st.Buffers, grown, st.Reposts)
	}
}
