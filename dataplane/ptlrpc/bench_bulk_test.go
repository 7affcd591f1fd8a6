package ptlrpc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/lnet"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// rawLNetBulk moves n chunks of size bytes with k in flight by plain LNet,
// each chunk as size/MTU messages all in flight at once: PUTs with ACK from
// cli into an MD on srv (put), or GETs by cli from it. It returns the time
// taken: the baseline a bulk RPC of the same bytes is measured against.
func rawLNetBulk(b *testing.B, e env, n, k, size int, put bool) time.Duration {
	const portal, match = 41, 99
	frags := size / lwire.MTU
	region := make([]byte, k*size)
	opts := lnet.MDOpPut | lnet.MDManageRemote
	if !put {
		opts = lnet.MDOpGet | lnet.MDManageRemote
	}
	tmd, err := e.srv.Attach(portal, lnet.AnyProcess, match, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{region}, Threshold: lnet.ThresholdInfinite, Options: opts})
	if err != nil {
		b.Fatal(err)
	}
	defer e.srv.Unlink(tmd)
	done := make(chan error, k*frags)
	mds := make([]lnet.MDHandle, k*frags)
	for i := range mds {
		h, err := e.cli.Bind(lnet.MD{Buffers: [][]byte{make([]byte, lwire.MTU)}, Threshold: lnet.ThresholdInfinite, Handler: func(ev lnet.Event) {
			if ev.Type == lnet.EventAck || ev.Type == lnet.EventReply || (ev.Type == lnet.EventSend && ev.Status != nil) {
				done <- ev.Status
			}
		}})
		if err != nil {
			b.Fatal(err)
		}
		defer e.cli.Unlink(h)
		mds[i] = h
	}
	ctx := context.Background()
	var left atomic.Int64
	left.Store(int64(n))
	slots := make(chan int, k)
	for i := range k {
		slots <- i
	}
	start := time.Now()
	var wg sync.WaitGroup
	for left.Add(-1) >= 0 {
		slot := <-slots
		for f := range frags {
			md, off := mds[slot*frags+f], uint32(slot*size+f*lwire.MTU)
			if put {
				err = e.cli.Put(ctx, md, lnet.AckReq, e.target, portal, match, off, 0)
			} else {
				err = e.cli.Get(ctx, md, e.target, portal, match, off)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		wg.Go(func() {
			// Completions of different chunks interleave; a chunk's slot is
			// free once that many completions have come.
			for range frags {
				if err := <-done; err != nil {
					b.Error(err)
				}
			}
			slots <- slot
		})
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkBulkvsLNet: 4 MiB OST_WRITE and OST_READ RPCs with server-driven
// bulk, 8 in flight over socklnd (127.0.0.1 -> 127.0.0.2), against raw LNet
// PUTs and GETs of the same bytes, in 1 MiB messages with the same number in
// flight, in the same run (goal: at least 0.90x); without checksums and
// with each algorithm (an OSC picks the fastest the OST agrees to).
func BenchmarkBulkvsLNet(b *testing.B) {
	const size, k = DefaultMaxBulk, 8
	for _, dir := range []string{"write", "read"} {
		for _, cksum := range []ChecksumType{0, ChecksumCRC32C, ChecksumCRC32} {
			name := "none"
			if cksum != 0 {
				name = cksum.String()
			}
			b.Run(fmt.Sprintf("%s/cksum=%s", dir, name), func(b *testing.B) {
				e := sockEnv(b)
				// The server moves data straight between its buffers and the
				// client's: no handler copies.
				srvBufs := make(chan []byte, k)
				for range k {
					srvBufs <- make([]byte, size)
				}
				src := pattern(size, 1)
				nbs, err := wire.AppendNiobufs(nil, []wire.Niobuf{{Offset: 0, Len: size}})
				if err != nil {
					b.Fatal(err)
				}
				s, err := NewService(e.srv, ServiceConfig{Name: "ost_io", RequestPortal: reqPortal, MinThreads: k, Logger: quiet,
					Handlers: map[wire.Opcode]HandlerSpec{
						opWrite: {Flags: HasBulk, Fn: func(ctx context.Context, r *Request) ([]byte, int32) {
							buf := <-srvBufs
							defer func() { srvBufs <- buf }()
							_, err := r.BulkGet(ctx, [][]byte{buf})
							return nil, Errno(err)
						}},
						opRead: {Flags: HasBulk, Fn: func(ctx context.Context, r *Request) ([]byte, int32) {
							_, err := r.BulkPut(ctx, [][]byte{src})
							return nil, Errno(err)
						}},
					}})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close(context.Background())
				c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
				op, bop := opWrite, BulkWrite
				if dir == "read" {
					op, bop = opRead, BulkRead
				}
				ctx := context.Background()
				bufs := make([][]byte, k)
				for i := range bufs {
					bufs[i] = pattern(size, i)
				}
				call := func(i int) {
					if _, err := c.Do(ctx, e.target, reqPortal, &Req{Opcode: op, Body: nbs,
						Bulk: &Bulk{Op: bop, Buffers: [][]byte{bufs[i]}, Checksum: cksum != 0, ChecksumType: cksum}}); err != nil {
						b.Error(err)
					}
				}
				for i := range k { // connections, first credits
					call(i)
				}
				rpcs := func(n int) time.Duration {
					var left atomic.Int64
					left.Store(int64(n))
					start := time.Now()
					var wg sync.WaitGroup
					for i := range k {
						wg.Go(func() {
							for left.Add(-1) >= 0 {
								call(i)
							}
						})
					}
					wg.Wait()
					return time.Since(start)
				}
				b.SetBytes(size)
				b.ResetTimer()
				b.StopTimer()
				// Ten rounds, each moving a tenth of the bytes by RPC and
				// then by raw LNet, so that a drift in the machine's speed
				// weighs on both alike.
				var el, raw time.Duration
				inRounds(b.N, func(n int) {
					b.StartTimer()
					el += rpcs(n)
					b.StopTimer()
					raw += rawLNetBulk(b, e, n, k, size, dir == "write")
				})
				rate, rawRate := float64(b.N*size)/el.Seconds(), float64(b.N*size)/raw.Seconds()
				b.ReportMetric(rate/1e6, "MB/s")
				b.ReportMetric(rawRate/1e6, "lnet-MB/s")
				b.ReportMetric(rate/rawRate, "x-vs-lnet")
			})
		}
	}
}
