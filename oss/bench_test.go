package oss

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/oss/ofd"
	"github.com/nacrefs/nacre/oss/osd"
	"golang.org/x/sys/unix"
)

// pwriteBaseline writes (or reads) n chunks of size bytes at k in flight
// with pwrite/pread, each worker to its own file in dir (as each RPC goes
// to its own object), and returns the time: what the same bytes cost on
// the backing file system without Nacre. Cold reads drop the file's pages
// before each read, as the OST does for its object.
func pwriteBaseline(b *testing.B, dir string, n, k, size int, write, cold bool) time.Duration {
	files := make([]*os.File, k)
	for i := range files {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("baseline%d", i)), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		defer os.Remove(f.Name())
		defer f.Close()
		if _, err := f.WriteAt(pattern(size, 1), 0); err != nil { // something to read, or overwrite
			b.Fatal(err)
		}
		files[i] = f
	}
	if cold {
		unix.Sync() // DONTNEED drops clean pages only
	}
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	start := time.Now()
	for w := range k {
		wg.Go(func() {
			buf := pattern(size, uint64(w))
			for j := 0; left.Add(-1) >= 0; j++ {
				var err error
				if write {
					_, err = files[w].WriteAt(buf, int64(j*size))
				} else {
					if cold {
						err = unix.Fadvise(int(files[w].Fd()), 0, 0, unix.FADV_DONTNEED)
					}
					if err == nil {
						_, err = files[w].ReadAt(buf, 0)
					}
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkBRW: 4 MiB OST_WRITE and OST_READ RPCs, 8 in flight, from a
// client over socklnd to an OST on osd-file, against pwrite/pread of the
// same bytes to files on the same file system in the same run (goal:
// x-vs-pwrite at least 0.8). Writes append (new space each time) on both
// sides. "read" reads data that is not in the page cache on either side
// (each read is preceded by POSIX_FADV_DONTNEED of its file, on the OST
// through the device's ladvise), as a stream reading more than the server's
// memory does. "read-cached" rereads cached data on both sides: its
// baseline is a memory copy at memory bandwidth, which no networked path
// reaches; its ratio says what the network costs over a copy.
func BenchmarkBRW(b *testing.B) {
	const size, k = 4 << 20, 8
	for _, dir := range []string{"write", "read", "read-cached"} {
		b.Run(dir, func(b *testing.B) {
			cold := dir == "read"
			e := newOSSEnv(b, 1, 1)
			oc := e.client(0)
			ctx := context.Background()
			objs := oc.precreate(ctx, 0, k)
			bufs := make([][]byte, k)
			for i := range bufs {
				bufs[i] = pattern(size, uint64(i))
				if _, err := oc.imps[0].Do(ctx, oc.writeReq(objs[i], []wire.Niobuf{{Offset: 0, Len: size}}, [][]byte{bufs[i]}, false)); err != nil {
					b.Fatal(err)
				}
			}
			adv, _ := e.devs[0].(ofd.Advisor)
			if cold {
				if adv == nil {
					b.Fatalf("device %T takes no ladvise", e.devs[0])
				}
				unix.Sync() // DONTNEED drops clean pages only
			}
			// Writes append to their object (new space each time, as a
			// stream of writes does); reads reread the first 4 MiB.
			op := func(i, j int) *ptlrpc.Req {
				if cold {
					if err := adv.Advise(ctx, objs[i], false, 0, osd.EOF); err != nil {
						b.Fatal(err)
					}
				}
				if dir == "write" {
					return oc.writeReq(objs[i], []wire.Niobuf{{Offset: uint64(j * size), Len: size}}, [][]byte{bufs[i]}, false)
				}
				return oc.readReq(objs[i], []wire.Niobuf{{Offset: 0, Len: size}}, [][]byte{bufs[i]}, false)
			}
			var left atomic.Int64
			left.Store(int64(b.N))
			b.SetBytes(size)
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for i := range k {
				wg.Go(func() {
					for j := 1; left.Add(-1) >= 0; j++ {
						if _, err := oc.imps[0].Do(ctx, op(i, j)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			base := pwriteBaseline(b, e.dirs[0], b.N, k, size, dir == "write", cold)
			rate, baseRate := float64(b.N*size)/el.Seconds(), float64(b.N*size)/base.Seconds()
			b.ReportMetric(rate/1e6, "MB/s")
			b.ReportMetric(baseRate/1e6, "pwrite-MB/s")
			b.ReportMetric(rate/baseRate, "x-vs-pwrite")
		})
	}
}

// BenchmarkPrecreate: objects created per second by OST_CREATE batches of
// 32 (what an MDS's precreate pool asks for).
func BenchmarkPrecreate(b *testing.B) {
	e := newOSSEnv(b, 1, 1)
	oc := e.client(0)
	ctx := context.Background()
	b.ResetTimer()
	var last fid.FID
	for made := 0; made < b.N; made += 32 {
		fs := oc.precreate(ctx, 0, 32)
		last = fs[len(fs)-1]
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "objects/s")
	_ = last
}
