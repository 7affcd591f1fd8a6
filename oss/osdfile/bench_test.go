package osdfile

import (
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/oss/osd"
)

// The benchmarks move the same bytes through the OSD and, as the baseline in
// the same run, with plain pwrite/pread on a file in the same directory, and
// report the ratio of the times (x-vs-pwrite, x-vs-pread, x-vs-creat: 1.0 is
// as fast as the baseline, 2.0 twice as slow). The OSD's times include a
// final Sync, so the background group commits are counted.

const (
	benchChunk = 4 << 20
	benchSpan  = 16 // chunks cycled over: 64 MiB
)

// benchBufs is 4 MiB as a PtlRPC bulk lands: four 1 MiB LNet messages.
func benchBufs() (whole []byte, bufs [][]byte) {
	whole = make([]byte, benchChunk)
	for i := range whole {
		whole[i] = byte(i * 7)
	}
	for p := 0; p < benchChunk; p += 1 << 20 {
		bufs = append(bufs, whole[p:p+1<<20])
	}
	return whole, bufs
}

func benchDevice(b *testing.B) (*Device, string) {
	b.Helper()
	d, dir := newTarget(b, 64<<20)
	b.Cleanup(func() { d.Close() })
	return d, dir
}

func plainFile(b *testing.B, dir string) int {
	b.Helper()
	fd, err := unix.Open(filepath.Join(dir, "plain"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Close(fd) })
	return fd
}

func benchWrite(b *testing.B, syncEach bool) {
	d, dir := benchDevice(b)
	whole, bufs := benchBufs()
	f := fidN(1)
	mustDo(b, d, func(tx osd.Tx) error { return tx.Create(f, osd.Attr{}) })
	fd := plainFile(b, dir)

	start := time.Now()
	for i := range b.N {
		if err := pwriteFull(fd, whole, int64(i%benchSpan)*benchChunk); err != nil {
			b.Fatal(err)
		}
		if syncEach {
			unix.Fdatasync(fd)
		}
	}
	base := time.Since(start)

	b.SetBytes(benchChunk)
	b.ResetTimer()
	for i := range b.N {
		tx, err := d.Begin(bg)
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.WriteAt(f, bufs, int64(i%benchSpan)*benchChunk); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(bg); err != nil {
			b.Fatal(err)
		}
		if syncEach {
			if err := d.Sync(bg); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := d.Sync(bg); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed())/float64(base), "x-vs-pwrite")
}

// BenchmarkWrite4MiB: Commit of a 4 MiB WriteAt (replies before commit, as
// the OST does) against pwrite to the page cache.
func BenchmarkWrite4MiB(b *testing.B) { benchWrite(b, false) }

// BenchmarkWrite4MiBSync: Commit and Sync of a 4 MiB WriteAt (a sync write)
// against pwrite and fdatasync.
func BenchmarkWrite4MiBSync(b *testing.B) { benchWrite(b, true) }

func BenchmarkRead4MiB(b *testing.B) {
	d, dir := benchDevice(b)
	whole, bufs := benchBufs()
	f := fidN(1)
	fd := plainFile(b, dir)
	mustDo(b, d, func(tx osd.Tx) error { return tx.Create(f, osd.Attr{}) })
	for i := range benchSpan {
		mustDo(b, d, func(tx osd.Tx) error { return tx.WriteAt(f, bufs, int64(i)*benchChunk) })
		if err := pwriteFull(fd, whole, int64(i)*benchChunk); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.Sync(bg); err != nil {
		b.Fatal(err)
	}
	// Warm both into the page cache.
	for i := range benchSpan {
		unix.Pread(fd, whole, int64(i)*benchChunk)
		d.ReadAt(bg, f, bufs, int64(i)*benchChunk)
	}

	start := time.Now()
	for i := range b.N {
		if n, err := unix.Pread(fd, whole, int64(i%benchSpan)*benchChunk); err != nil || n != benchChunk {
			b.Fatal(n, err)
		}
	}
	base := time.Since(start)

	b.SetBytes(benchChunk)
	b.ResetTimer()
	for i := range b.N {
		if n, err := d.ReadAt(bg, f, bufs, int64(i%benchSpan)*benchChunk); err != nil || n != benchChunk {
			b.Fatal(n, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed())/float64(base), "x-vs-pread")
}

// BenchmarkCreate: one object per transaction, durable at the end, against
// creat(2) and close of plain files.
func BenchmarkCreate(b *testing.B) {
	d, dir := benchDevice(b)
	plain := filepath.Join(dir, "plain")
	if err := unix.Mkdir(plain, 0o755); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for i := range b.N {
		fd, err := unix.Open(filepath.Join(plain, fidN(i+1).String()), unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
	}
	base := time.Since(start)

	b.ResetTimer()
	for i := range b.N {
		tx, err := d.Begin(bg)
		if err != nil {
			b.Fatal(err)
		}
		tx.SetTransno(uint64(i + 1))
		if err := tx.Create(fidN(i+1), osd.Attr{Mode: 0o100666, Valid: osd.AttrMode}); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(bg); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.Sync(bg); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "objects/s")
	b.ReportMetric(float64(b.Elapsed())/float64(base), "x-vs-creat")
}
