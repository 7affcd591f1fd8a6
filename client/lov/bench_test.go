package lov_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/internal/clienttest"
	"github.com/nacrefs/nacre/client/osc"
	"github.com/nacrefs/nacre/internal/tmpfs"
	"github.com/nacrefs/nacre/lnet"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// rawLNet moves total bytes between cli and the server's LNet srv by plain
// LNet, in chunks of size bytes with k in flight, each chunk as MTU-sized
// messages all in flight at once: PUTs with ACK into an MD on srv (put), or
// GETs from it. It returns the time taken: the network's own cost of the
// bytes the file I/O moved.
func rawLNet(b *testing.B, cli, srv *lnet.LNet, target lwire.ProcessID, total int64, k, size int, put bool) time.Duration {
	const portal, match = 41, 99
	frags := size / lwire.MTU
	region := make([]byte, k*size)
	opts := lnet.MDOpPut | lnet.MDManageRemote
	if !put {
		opts = lnet.MDOpGet | lnet.MDManageRemote
	}
	tmd, err := srv.Attach(portal, lnet.AnyProcess, match, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{region}, Threshold: lnet.ThresholdInfinite, Options: opts})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Unlink(tmd)
	done := make(chan error, k*frags)
	mds := make([]lnet.MDHandle, k*frags)
	for i := range mds {
		h, err := cli.Bind(lnet.MD{Buffers: [][]byte{make([]byte, lwire.MTU)}, Threshold: lnet.ThresholdInfinite, Handler: func(ev lnet.Event) {
			if ev.Type == lnet.EventAck || ev.Type == lnet.EventReply || (ev.Type == lnet.EventSend && ev.Status != nil) {
				done <- ev.Status
			}
		}})
		if err != nil {
			b.Fatal(err)
		}
		defer cli.Unlink(h)
		mds[i] = h
	}
	ctx := context.Background()
	var left atomic.Int64
	left.Store((total + int64(size) - 1) / int64(size))
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
				err = cli.Put(ctx, md, lnet.AckReq, target, portal, match, off, 0)
			} else {
				err = cli.Get(ctx, md, target, portal, match, off)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		wg.Go(func() {
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

// localFile is the local baseline: the same I/O to a file on a local file
// system: writes are timed until the kernel's page cache has them (as the
// library's until the OSTs have them, not until durable); reads come from
// a file whose cached pages were dropped first.
type localFile struct {
	f   *os.File
	buf []byte
}

func newLocalFile(b *testing.B, dir string, total int64, chunk int, write bool) *localFile {
	f, err := os.OpenFile(filepath.Join(dir, "baseline"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close(); os.Remove(f.Name()) })
	lf := &localFile{f: f, buf: make([]byte, chunk)}
	fill(lf.buf, rand.New(rand.NewPCG(1, 1)))
	if !write {
		for off := int64(0); off < total; off += int64(chunk) {
			if _, err := f.WriteAt(lf.buf, off); err != nil {
				b.Fatal(err)
			}
		}
		f.Sync()
		dropPageCache(f, total)
	}
	return lf
}

// io does chunks [from, to) and returns the time it took.
func (lf *localFile) io(b *testing.B, from, to int, write bool) time.Duration {
	start := time.Now()
	for i := from; i < to; i++ {
		var err error
		off := int64(i) * int64(len(lf.buf))
		if write {
			_, err = lf.f.WriteAt(lf.buf, off)
		} else {
			_, err = lf.f.ReadAt(lf.buf, off)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// BenchmarkStriped: sequential writes and reads of a file striped over 4
// OSTs (1 MiB stripes) with 1 MiB application I/O through the library,
// over socklnd to osd-file OSTs, against raw LNet PUTs/GETs of the same
// bytes (4 MiB chunks, 8 in flight, in 1 MiB messages) and the same I/O to
// a local file. A write is timed until the OSTs acknowledged every byte
// (Flush); a read starts on a client that has nothing cached. The three
// run in turns over eight rounds of the same size, so that the noise of
// a shared machine falls on all of them alike. Goal: x-vs-lnet at least
// 0.8. NACRE_BENCH_TMPFS=1 puts the OSTs in memory (root), to measure the
// data path without the disk; NACRE_BENCH_NOCKSUM=1 turns checksums off.
func BenchmarkStriped(b *testing.B) {
	const chunk = 1 << 20
	for _, dir := range []string{"write", "read"} {
		b.Run(dir, func(b *testing.B) {
			write := dir == "write"
			opts := clienttest.Options{OSTs: 4, Nodes: 2}
			if os.Getenv("NACRE_BENCH_TMPFS") != "" {
				for range 4 {
					opts.Dirs = append(opts.Dirs, tmpfs.Mount(b, "4g"))
				}
			}
			c := startCluster(b, opts)
			cfg := osc.DefaultConfig()
			cfg.Checksums = os.Getenv("NACRE_BENCH_NOCKSUM") == ""
			w := newNode(b, c, 0, cfg)
			rd := newNode(b, c, 1, cfg)
			ctx := context.Background()
			l, err := c.PlainLayout(ctx, 4, chunk)
			if err != nil {
				b.Fatal(err)
			}
			fw := openFile(b, l, w)
			buf := make([]byte, chunk)
			fill(buf, rand.New(rand.NewPCG(2, 2)))
			total := int64(b.N) * chunk
			writeRange := func(from, to int) {
				for i := from; i < to; i++ {
					if _, err := fw.WriteAt(ctx, buf, int64(i)*chunk); err != nil {
						b.Fatal(err)
					}
				}
				if err := fw.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
			fr := fw
			if !write {
				writeRange(0, b.N)
				fr = openFile(b, l, rd)
			}
			local := newLocalFile(b, b.TempDir(), total, chunk, write)
			var el, raw, disk, cpuEl, cpuRaw time.Duration
			rounds := min(b.N, 8)
			b.ResetTimer()
			b.StopTimer()
			for k := range rounds {
				from, to := k*b.N/rounds, (k+1)*b.N/rounds
				b.StartTimer()
				c0 := cpuTime()
				start := time.Now()
				if write {
					writeRange(from, to)
				} else {
					for i := from; i < to; i++ {
						if _, err := fr.ReadAt(ctx, buf, int64(i)*chunk); err != nil {
							b.Fatal(err)
						}
					}
				}
				el += time.Since(start)
				cpuEl += cpuTime() - c0
				b.StopTimer()
				c0 = cpuTime()
				raw += rawLNet(b, rd.LNet, c.ServerLNet(), c.SrvID, int64(to-from)*chunk, 8, 4<<20, write)
				cpuRaw += cpuTime() - c0
				disk += local.io(b, from, to, write)
			}
			for _, n := range []*clienttest.Node{w, rd} {
				for _, o := range n.OSCs {
					b.Logf("%+v", o.Stats())
				}
				b.Logf("rpc: %+v", n.RPC.Stats())
			}
			st := c.OSS.Service().Stats()
			b.Logf("oss: cksum errors %d reconstructed %d stale %d early %d", st.BulkChecksumErrors, st.Reconstructed, st.Stale, st.EarlyReplies)
			rate := float64(total) / el.Seconds()
			lnetRate, diskRate := float64(total)/raw.Seconds(), float64(total)/disk.Seconds()
			b.SetBytes(chunk)
			b.ReportMetric(rate/1e6, "MB/s")
			b.ReportMetric(lnetRate/1e6, "lnet-MB/s")
			b.ReportMetric(rate/lnetRate, "x-vs-lnet")
			// The processors the I/O kept busy (client and servers share
			// this process), and its processor time against LNet's for
			// the same bytes: on a machine where both are CPU-bound, as
			// two cores are here, x-vs-lnet cannot pass 1/cpu-vs-lnet.
			b.ReportMetric(cpuEl.Seconds()/el.Seconds(), "cores")
			b.ReportMetric(cpuRaw.Seconds()/raw.Seconds(), "lnet-cores")
			b.ReportMetric(cpuEl.Seconds()/cpuRaw.Seconds(), "cpu-vs-lnet")
			b.ReportMetric(diskRate/1e6, "disk-MB/s")
			b.ReportMetric(rate/diskRate, "x-vs-disk")
		})
	}
}

// cpuTime is the processor time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
