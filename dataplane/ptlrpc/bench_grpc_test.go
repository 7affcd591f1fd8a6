package ptlrpc

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// echoDesc is a one-method gRPC service echoing a BytesValue: the
// baseline a general RPC layer gives for the same null call.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "nacre.bench.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Call",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return in, nil
		},
	}},
}

// grpcEcho is a grpc-go server and client of echoDesc over loopback TCP.
type grpcEcho struct {
	cc *grpc.ClientConn
}

// newGRPCEcho starts the server, connects and warms the connection up;
// both end with the benchmark.
func newGRPCEcho(b *testing.B) *grpcEcho {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := grpc.NewServer()
	s.RegisterService(&echoDesc, struct{}{})
	go s.Serve(l)
	b.Cleanup(s.Stop)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	g := &grpcEcho{cc: cc}
	g.calls(b, 100, 1) // connect and warm up
	return g
}

// calls makes n empty unary calls with k in flight and returns how long
// they took.
func (g *grpcEcho) calls(b *testing.B, n, k int) time.Duration {
	ctx := context.Background()
	return inFlight(b, n, k, func() error {
		return g.cc.Invoke(ctx, "/nacre.bench.Echo/Call", &wrapperspb.BytesValue{}, new(wrapperspb.BytesValue))
	})
}

// inRounds splits n operations into ten rounds and calls round with each
// round's share, in turn: a benchmark that runs, in each round, what it
// measures and then its baselines has a drift in the machine's speed
// weigh on all alike.
func inRounds(n int, round func(n int)) {
	const rounds = 10
	for r := range rounds {
		if k := (r+1)*n/rounds - r*n/rounds; k > 0 {
			round(k)
		}
	}
}

// inFlight runs n calls of call from k goroutines and returns how long
// they took.
func inFlight(b *testing.B, n, k int, call func() error) time.Duration {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	start := time.Now()
	for range k {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := call(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// rawEcho is one loopback TCP connection (Nagle off, Go's default) to a
// server that echoes msg-byte messages.
type rawEcho struct {
	c   net.Conn
	msg int
}

func newRawEcho(b *testing.B, msg int) *rawEcho {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, msg)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return &rawEcho{c: c, msg: msg}
}

// pingPong makes n exchanges with k outstanding and returns how long they
// took.
func (r *rawEcho) pingPong(b *testing.B, n, k int) time.Duration {
	slots := make(chan struct{}, k)
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, r.msg)
		for range n {
			if _, err := io.ReadFull(r.c, buf); err != nil {
				b.Error(err)
				return
			}
			<-slots
		}
	})
	req := make([]byte, r.msg)
	for range n {
		slots <- struct{}{}
		if _, err := r.c.Write(req); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkNullRPCvsGRPC: empty PtlRPC calls over socklnd (127.0.0.1 ->
// 127.0.0.2) against grpc-go unary calls of the same empty payload on
// loopback, the same number of calls with the same number in flight, in the
// same run, the three taking turns in ten rounds (DESIGN §4 goal: at least
// 2x gRPC). conn=import goes through a
// connected import and an export (handle check, last_xid, adaptive
// timeouts), as every server's clients do; conn=none is a bare
// connectionless call.
func BenchmarkNullRPCvsGRPC(b *testing.B) {
	for _, mode := range []string{"import", "none"} {
		for _, k := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("conn=%s/inflight=%d", mode, k), func(b *testing.B) {
				e := sockEnv(b)
				ts := NewTargetSet()
				tgt, err := ts.NewTarget(TargetConfig{Name: "bench", AutoCommit: true, Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				defer tgt.Close(context.Background())
				s, err := NewService(e.srv, ServiceConfig{Name: "bench", RequestPortal: reqPortal, MinThreads: 8, Targets: ts, Logger: quiet,
					Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: echo, Flags: NoExport}, opInc: {Fn: echo}}})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close(context.Background())
				c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
				ctx := context.Background()
				call := func() error {
					_, err := c.Call(ctx, e.target, reqPortal, opEcho, nil)
					return err
				}
				if mode == "import" {
					imp, err := c.NewImport(ImportConfig{Target: "bench", Servers: []lwire.ProcessID{e.target}, Portal: reqPortal})
					if err != nil {
						b.Fatal(err)
					}
					defer imp.Close(context.Background())
					req := &Req{Opcode: opInc}
					call = func() error {
						_, err := imp.Do(ctx, req)
						return err
					}
				}
				for range 100 { // connections, first credits
					if err := call(); err != nil {
						b.Fatal(err)
					}
				}
				// Ten rounds, each running a tenth of the calls on the three
				// in turn, so that a drift in the machine's speed weighs on
				// all alike.
				g, raw := newGRPCEcho(b), newRawEcho(b, wire.HeaderSize)
				b.ResetTimer()
				b.StopTimer()
				var el, gel, rawEl time.Duration
				inRounds(b.N, func(n int) {
					b.StartTimer()
					el += inFlight(b, n, k, call)
					b.StopTimer()
					gel += g.calls(b, n, k)
					rawEl += raw.pingPong(b, n, k)
				})
				rate, grate, rawRate := float64(b.N)/el.Seconds(), float64(b.N)/gel.Seconds(), float64(b.N)/rawEl.Seconds()
				b.ReportMetric(rate, "calls/s")
				b.ReportMetric(grate, "grpc-calls/s")
				b.ReportMetric(rate/grate, "x-vs-grpc")
				// The physical ceiling: a request and a reply of a PtlRPC
				// header's size over one loopback TCP connection.
				b.ReportMetric(rate/rawRate, "x-vs-rawtcp")
			})
		}
	}
}
