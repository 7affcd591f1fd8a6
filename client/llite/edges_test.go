package llite_test

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/internal/clustertest"
)

// TestPOSIXEdges checks edges of POSIX through two mounts of one file
// system, each as ext4 has them.
func TestPOSIXEdges(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, Clients: 3})
	a := mountT(t, c, 0)
	b := mountT(t, c, 1)
	t.Run("mmap-append-open", func(t *testing.T) { testMmapAppendOpen(t, a.Dir(), b.Dir()) })
	t.Run("mmap-append-only", func(t *testing.T) { testMmapAppendOnly(t, a.Dir(), b.Dir()) })
	t.Run("seek-hole-at-eof", func(t *testing.T) { testSeekHoleAtEOF(t, a.Dir()) })
	t.Run("times-before-1970", func(t *testing.T) { testTimesBefore1970(t, a.Dir(), b.Dir()) })
	t.Run("times-out-of-range", func(t *testing.T) { testTimesOutOfRange(t, a.Dir()) })
}

// testMmapAppendOpen: the dirty pages of a shared mapping of a file open
// O_APPEND go where they are mapped, not to the end of the file (the
// kernel writes them back through the O_APPEND open, whose writes are
// appends).
func testMmapAppendOpen(t *testing.T, da, db string) {
	p := filepath.Join(da, "mmap-append")
	if err := os.WriteFile(p, bytes.Repeat([]byte("a"), 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("APPENDED")); err != nil {
		t.Fatal(err)
	}
	copy(m[100:], "MAPPED")
	got := make([]byte, 6)
	if _, err := f.ReadAt(got, 100); err != nil || string(got) != "MAPPED" {
		t.Errorf("pread of the mapped write: %q, %v", got, err)
	}
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		t.Fatal(err)
	}
	unix.Munmap(m)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Repeat([]byte("a"), 8192), "APPENDED"...)
	copy(want[100:], "MAPPED")
	for _, q := range []string{p, filepath.Join(db, "mmap-append")} {
		if got, err := os.ReadFile(q); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %q at 100, %q at 8192, %v; want %d bytes", q, len(got), got[100:106], got[8192:min(len(got), 8200)], err, len(want))
		}
	}
}

// testMmapAppendOnly: a shared mapping of an append-only file (which
// the kernel lets a FUSE mount's O_APPEND open make: it does not know the
// flag) changes nothing: its write-back fails with EPERM, and the kernel
// reads the file's data again instead of keeping the page.
func testMmapAppendOnly(t *testing.T, da, db string) {
	p := filepath.Join(da, "mmap-append-only")
	want := bytes.Repeat([]byte("a"), 4096)
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	chattr(t, "+a", p)
	defer chattr(t, "-a", p)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	copy(m, "EVIL")
	if err := unix.Msync(m, unix.MS_SYNC); err != syscall.EPERM {
		t.Errorf("msync of an append-only file's mapping: %v, want EPERM", err)
	}
	unix.Munmap(m)
	f.Close()
	for _, q := range []string{p, filepath.Join(db, "mmap-append-only")} {
		within(t, 5*time.Second, q+" unchanged", func() bool {
			got, err := os.ReadFile(q)
			return err == nil && bytes.Equal(got, want)
		})
	}
}

// testSeekHoleAtEOF: SEEK_DATA and SEEK_HOLE at or past the end of the
// file are ENXIO, as on ext4; before it the file is all data, with its
// hole at the end.
func testSeekHoleAtEOF(t *testing.T, da string) {
	p := filepath.Join(da, "seek")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("x"), 1<<20); err != nil {
		t.Fatal(err)
	}
	const size = 1<<20 + 1
	for _, c := range []struct {
		off    int64
		whence int
		want   int64
		err    error
	}{
		{0, unix.SEEK_DATA, 0, nil},
		{4096, unix.SEEK_DATA, 4096, nil},
		{0, unix.SEEK_HOLE, size, nil},
		{size - 1, unix.SEEK_HOLE, size, nil},
		{size, unix.SEEK_DATA, 0, syscall.ENXIO},
		{size, unix.SEEK_HOLE, 0, syscall.ENXIO},
		{size + 1, unix.SEEK_HOLE, 0, syscall.ENXIO},
		{-1, unix.SEEK_DATA, 0, syscall.ENXIO},
	} {
		got, err := unix.Seek(int(f.Fd()), c.off, c.whence)
		if c.err != nil {
			if err != c.err {
				t.Errorf("lseek(%d, %d) = %d, %v; want %v", c.off, c.whence, got, err, c.err)
			}
		} else if err != nil || got != c.want {
			t.Errorf("lseek(%d, %d) = %d, %v; want %d", c.off, c.whence, got, err, c.want)
		}
	}
}

// testTimesBefore1970: times before the epoch are kept, as ext4 keeps
// them, on a file with data too (whose objects have times of their own),
// and another mount sees them.
func testTimesBefore1970(t *testing.T, da, db string) {
	for _, name := range []string{"old-empty", "old-data"} {
		p := filepath.Join(da, name)
		data := []byte(nil)
		if name == "old-data" {
			data = []byte("data")
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ts := []unix.Timespec{{Sec: -5, Nsec: 250}, {Sec: -86400 * 365, Nsec: 999999999}}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{p, filepath.Join(db, name)} {
			var st unix.Stat_t
			if err := unix.Stat(q, &st); err != nil {
				t.Fatal(err)
			}
			if st.Atim != ts[0] || st.Mtim != ts[1] {
				t.Errorf("%s: atime %v mtime %v; want %v %v", q, st.Atim, st.Mtim, ts[0], ts[1])
			}
		}
	}
}

// testTimesOutOfRange: times past what the file system keeps (ns since
// the epoch in an int64: 1677 to 2262) are clamped to its range, as the
// kernel clamps them to ext4's, not wrapped round.
func testTimesOutOfRange(t *testing.T, da string) {
	p := filepath.Join(da, "far")
	if err := os.WriteFile(p, []byte("far"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ set, want int64 }{
		{10413792000, 9223372036},   // 2300 -> 2262
		{-11676096000, -9223372036}, // 1600 -> 1677
		{1 << 62, 9223372036},
		{9223372035, 9223372035},
		{-9223372036, -9223372036},
	} {
		ts := []unix.Timespec{{Sec: c.set}, {Sec: c.set}}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0); err != nil {
			t.Fatalf("utimensat %d: %v", c.set, err)
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Atim.Sec != c.want || st.Mtim.Sec != c.want {
			t.Errorf("utimensat %d: atime %v mtime %v; want %d s", c.set, st.Atim, st.Mtim, c.want)
		}
	}
}
