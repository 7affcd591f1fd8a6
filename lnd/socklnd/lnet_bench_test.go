package socklnd_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/nacrefs/nacre/lnd/lolnd"
	_ "github.com/nacrefs/nacre/lnd/socklnd" // the driver under test
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// These benchmarks measure LNet over socklnd on loopback against a raw TCP
// socket moving the same bytes in the same run, and report the ratio as
// x-vs-rawtcp (DESIGN §9: never timed tests, always a same-run baseline).

var benchPort atomic.Int32

func init() { benchPort.Store(26000) }

func benchNode(b testing.TB, addr string, port int) *lnet.LNet {
	b.Helper()
	cfg := lnet.DefaultConfig()
	cfg.Networks = []lnet.NetConfig{{
		Net: wire.Net{Type: wire.TCP}, Addrs: []netip.Addr{netip.MustParseAddr(addr)},
		Options: map[string]string{"port": strconv.Itoa(port)},
	}}
	ln, err := lnet.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ln.Close(ctx)
	})
	return ln
}

// pair starts two nodes on 127.0.0.1 and 127.0.0.2 sharing a fresh port.
func pair(b testing.TB) (a, t *lnet.LNet, target wire.ProcessID) {
	port := int(benchPort.Add(1))
	a = benchNode(b, "127.0.0.1", port)
	t = benchNode(b, "127.0.0.2", port)
	return a, t, wire.ProcessID{NID: wire.MustParseNID("127.0.0.2@tcp"), PID: t.PID()}
}

// inflight runs n operations with k outstanding: start(i) begins operation
// i and done is called by its completion.
type window struct {
	sem  chan struct{}
	wg   sync.WaitGroup
	errs atomic.Int64
}

func newWindow(k int) *window { return &window{sem: make(chan struct{}, k)} }

func (w *window) begin() { w.sem <- struct{}{}; w.wg.Add(1) }
func (w *window) end(err error) {
	if err != nil {
		w.errs.Add(1)
	}
	<-w.sem
	w.wg.Done()
}

// rawTCPStream pumps total bytes over a loopback TCP connection in size-byte
// writes and returns the time it took the receiver to read them all.
func rawTCPStream(b *testing.B, total, size int) time.Duration {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	done := make(chan time.Duration, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- 0
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		start := time.Now()
		for got := 0; got < total; {
			n, err := io.ReadFull(c, buf[:min(size, total-got)])
			got += n
			if err != nil {
				break
			}
		}
		done <- time.Since(start)
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	src := make([]byte, size)
	for sent := 0; sent < total; sent += size {
		if _, err := c.Write(src[:min(size, total-sent)]); err != nil {
			b.Fatal(err)
		}
	}
	return <-done
}

// rawTCPRoundTrips runs n request/response exchanges of msg bytes with k
// outstanding on one loopback connection and returns the time taken.
func rawTCPRoundTrips(b *testing.B, n, k, msg int) time.Duration {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.(*net.TCPConn).SetNoDelay(true)
		req, ack := make([]byte, msg), make([]byte, 8)
		for {
			if _, err := io.ReadFull(c, req); err != nil {
				return
			}
			copy(ack, req[:min(8, msg)])
			if _, err := c.Write(ack); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetNoDelay(true)
	// At most k requests are outstanding: the writer takes a slot per
	// request, the reader gives one back per response.
	slots := make(chan struct{}, k)
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		ack := make([]byte, 8)
		for i := 0; i < n; i++ {
			if _, err := io.ReadFull(c, ack); err != nil {
				return
			}
			<-slots
		}
	})
	req := make([]byte, max(msg, 8))
	for i := 0; i < n; i++ {
		slots <- struct{}{}
		binary.LittleEndian.PutUint64(req, uint64(i))
		if _, err := c.Write(req[:msg]); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkPut1MiB: 1 MiB PUTs with ACK, 8 in flight, A -> B over socklnd.
func BenchmarkPut1MiB(b *testing.B) { benchBulk(b, true) }

// BenchmarkGet1MiB: 1 MiB GETs, 8 in flight, A pulls from B over socklnd.
func BenchmarkGet1MiB(b *testing.B) { benchBulk(b, false) }

func benchBulk(b *testing.B, put bool) {
	const size, k = wire.MTU, 8
	a, t, target := pair(b)
	region := make([]byte, k*size)
	opts := lnet.MDOpPut | lnet.MDManageRemote
	if !put {
		opts = lnet.MDOpGet | lnet.MDManageRemote
	}
	if _, err := t.Attach(40, lnet.AnyProcess, 7, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{region}, Threshold: lnet.ThresholdInfinite, Options: opts}); err != nil {
		b.Fatal(err)
	}
	w := newWindow(k)
	mds := make([]lnet.MDHandle, k)
	for i := range mds {
		h, err := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, size)}, Threshold: lnet.ThresholdInfinite, Handler: func(e lnet.Event) {
			if e.Type == lnet.EventAck || e.Type == lnet.EventReply {
				w.end(e.Status)
			}
		}})
		if err != nil {
			b.Fatal(err)
		}
		mds[i] = h
	}
	ctx := context.Background()
	op := func(i int) {
		w.begin()
		var err error
		if put {
			err = a.Put(ctx, mds[i%k], lnet.AckReq, target, 40, 7, uint32(i%k)*size, 0)
		} else {
			err = a.Get(ctx, mds[i%k], target, 40, 7, uint32(i%k)*size)
		}
		if err != nil {
			w.end(err)
		}
	}
	for i := 0; i < 2*k; i++ { // warm up: connections, first credits
		op(i)
	}
	w.wg.Wait()

	b.SetBytes(size)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		op(i)
	}
	w.wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	if n := w.errs.Load(); n > 0 {
		b.Fatalf("%d operations failed", n)
	}
	raw := rawTCPStream(b, b.N*size, size)
	lnetRate := float64(b.N*size) / el.Seconds()
	rawRate := float64(b.N*size) / raw.Seconds()
	b.ReportMetric(lnetRate/1e6, "MB/s")
	b.ReportMetric(rawRate/1e6, "rawtcp-MB/s")
	b.ReportMetric(lnetRate/rawRate, "x-vs-rawtcp")
}

// BenchmarkSmallRoundTrip: 64-byte PUTs with ACK, k in flight, against the
// same number of 64-byte request / 8-byte response exchanges over raw TCP.
func BenchmarkSmallRoundTrip(b *testing.B) {
	for _, k := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("inflight=%d", k), func(b *testing.B) {
			const msg = 64
			a, t, target := pair(b)
			if _, err := t.Attach(41, lnet.AnyProcess, 9, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{make([]byte, msg)}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDManageRemote}); err != nil {
				b.Fatal(err)
			}
			w := newWindow(k)
			mds := make([]lnet.MDHandle, k)
			for i := range mds {
				h, err := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, msg)}, Threshold: lnet.ThresholdInfinite, Handler: func(e lnet.Event) {
					if e.Type == lnet.EventAck {
						w.end(e.Status)
					}
				}})
				if err != nil {
					b.Fatal(err)
				}
				mds[i] = h
			}
			ctx := context.Background()
			op := func(i int) {
				w.begin()
				if err := a.Put(ctx, mds[i%k], lnet.AckReq, target, 41, 9, 0, 0); err != nil {
					w.end(err)
				}
			}
			for i := 0; i < 2*k; i++ {
				op(i)
			}
			w.wg.Wait()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				op(i)
			}
			w.wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			if n := w.errs.Load(); n > 0 {
				b.Fatalf("%d operations failed", n)
			}
			raw := rawTCPRoundTrips(b, b.N, k, msg)
			rate, rawRate := float64(b.N)/el.Seconds(), float64(b.N)/raw.Seconds()
			b.ReportMetric(rate, "rt/s")
			b.ReportMetric(rawRate, "rawtcp-rt/s")
			b.ReportMetric(rate/rawRate, "x-vs-rawtcp")
		})
	}
}
