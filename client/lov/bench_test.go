package lov_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/internal/clienttest"
	"github.com/nacrefs/nacre/client/osc"
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

// localDisk writes (or reads) total bytes in chunk-sized calls to a file
// in dir, as the application's I/O would go to a local file system:
// writes are timed until the kernel's page cache has them (as the
// library's are until the OSTs have them, not until they are durable);
// reads come from a file whose cached pages were dropped first.
func localDisk(b *testing.B, dir string, total int64, chunk int, write bool) time.Duration {
	name := filepath.Join(dir, "baseline")
	defer os.Remove(name)
	buf := make([]byte, chunk)
	fill(buf, rand.New(rand.NewPCG(1, 1)))
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if !write {
		for off := int64(0); off < total; off += int64(chunk) {
			if _, err := f.WriteAt(buf, off); err != nil {
				b.Fatal(err)
			}
		}
		f.Sync()
		dropPageCache(f, total)
	}
	start := time.Now()
	for off := int64(0); off < total; off += int64(chunk) {
		if write {
			_, err = f.WriteAt(buf, off)
		} else {
			_, err = f.ReadAt(buf, off)
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
// bytes (4 MiB chunks, 8 in flight, in 1 MiB messages) and against the
// same I/O to a local file, in the same run. A write is timed until the
// OSTs acknowledged every byte (Flush); a read starts on a client that has
// nothing cached. Goal: x-vs-lnet at least 0.8.
func BenchmarkStriped(b *testing.B) {
	const chunk = 1 << 20
	for _, dir := range []string{"write", "read"} {
		b.Run(dir, func(b *testing.B) {
			c := startCluster(b, clienttest.Options{OSTs: 4, Nodes: 2})
			w := newNode(b, c, 0, osc.DefaultConfig())
			rd := newNode(b, c, 1, osc.DefaultConfig())
			ctx := context.Background()
			l, err := c.PlainLayout(ctx, 4, chunk)
			if err != nil {
				b.Fatal(err)
			}
			fw := openFile(b, l, w)
			buf := make([]byte, chunk)
			fill(buf, rand.New(rand.NewPCG(2, 2)))
			total := int64(b.N) * chunk
			writeAll := func() {
				for i := range b.N {
					if _, err := fw.WriteAt(ctx, buf, int64(i)*chunk); err != nil {
						b.Fatal(err)
					}
				}
				if err := fw.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(chunk)
			var el time.Duration
			if dir == "write" {
				b.ResetTimer()
				start := time.Now()
				writeAll()
				el = time.Since(start)
			} else {
				writeAll()
				fr := openFile(b, l, rd)
				b.ResetTimer()
				start := time.Now()
				for i := range b.N {
					if _, err := fr.ReadAt(ctx, buf, int64(i)*chunk); err != nil {
						b.Fatal(err)
					}
				}
				el = time.Since(start)
			}
			b.StopTimer()
			for _, n := range []*clienttest.Node{w, rd} {
				for _, o := range n.OSCs {
					b.Logf("%+v", o.Stats())
				}
			}
			raw := rawLNet(b, rd.LNet, c.ServerLNet(), c.SrvID, total, 8, 4<<20, dir == "write")
			disk := localDisk(b, c.Dirs[0], total, chunk, dir == "write")
			rate := float64(total) / el.Seconds()
			b.ReportMetric(rate/1e6, "MB/s")
			b.ReportMetric(float64(total)/raw.Seconds()/1e6, "lnet-MB/s")
			b.ReportMetric(rate/(float64(total)/raw.Seconds()), "x-vs-lnet")
			b.ReportMetric(float64(total)/disk.Seconds()/1e6, "disk-MB/s")
			b.ReportMetric(rate/(float64(total)/disk.Seconds()), "x-vs-disk")
		})
	}
}
