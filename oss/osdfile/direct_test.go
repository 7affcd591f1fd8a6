package osdfile

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/internal/pagecache"
	"github.com/nacrefs/nacre/oss/osd"
)

// storeTakesDirect reports whether the file system under dir opens files
// with O_DIRECT.
func storeTakesDirect(t *testing.T, dir string) bool {
	t.Helper()
	fd, err := unix.Open(filepath.Join(dir, ".direct-probe"), unix.O_RDWR|unix.O_CREAT|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EINVAL) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	unix.Unlink(filepath.Join(dir, ".direct-probe"))
	return true
}

// resident returns, for each 4 KiB page of [from, to) of the file at path,
// whether the page cache holds it.
func resident(t *testing.T, path string, from, to int64) []bool {
	t.Helper()
	pages, err := pagecache.Resident(path, from, to)
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

// TestDirectWrites: large bulk writes reach the file around the page cache
// for their block-aligned middle, through it for the rest, and every byte
// reads back right, whatever the alignment of the offset, the length and
// the caller's memory.
func TestDirectWrites(t *testing.T) {
	d, dir := newTarget(t, 0)
	defer d.Close()
	if err := d.SetDirectWriteMin(64 << 10); err != nil {
		t.Fatal(err)
	}
	direct := storeTakesDirect(t, dir)
	t.Logf("store takes O_DIRECT: %v", direct)

	// mem is page-aligned (a large allocation starts a span); a view
	// starting at mem[k] is aligned exactly where k is a multiple of 4096.
	mem := make([]byte, 8<<20)
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range mem {
		mem[i] = byte(rng.Uint32())
	}
	want := make([]byte, 0, 16<<20)
	cases := []struct {
		name       string
		off        int64
		memAt, n   int
		wantDirect bool // the block-aligned middle skips the page cache
	}{
		{"aligned", 1 << 20, 0, 2 << 20, true},
		{"odd head and tail", 5<<20 + 1000, 1000, 3<<20 + 123, true},
		{"past a hole", 11<<20 + 4096*3 + 17, 17, 1<<20 + 5, true},
		{"memory out of step with the offset", 9 << 20, 1, 1 << 20, false},
		{"small", 64, 64, 60 << 10, false},
	}
	f := fidN(1)
	mustDo(t, d, func(tx osd.Tx) error { return tx.Create(f, osd.Attr{}) })
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := mem[c.memAt : c.memAt+c.n]
			mustDo(t, d, func(tx osd.Tx) error { return tx.WriteAt(f, [][]byte{b}, c.off) })
			if end := int(c.off) + c.n; end > len(want) {
				want = want[:end]
			}
			copy(want[c.off:], b)

			// The whole pages of the write's middle: evicted if it
			// went direct, cached if it went through the page cache.
			from := (c.off + 4095) &^ 4095
			to := (c.off + int64(c.n)) &^ 4095
			pages := resident(t, objPath(dir, f), from, to)
			cached := 0
			for _, r := range pages {
				if r {
					cached++
				}
			}
			switch {
			case !direct:
				if !d.noDirect.Load() || cached != len(pages) {
					t.Errorf("store refuses O_DIRECT: noDirect %v, %d of %d pages cached; want true and all", d.noDirect.Load(), cached, len(pages))
				}
			case c.wantDirect && cached != 0:
				t.Errorf("direct write: %d of %d pages of its middle in the page cache, want 0", cached, len(pages))
			case !c.wantDirect && cached != len(pages):
				t.Errorf("buffered write: %d of %d pages in the page cache, want all", cached, len(pages))
			}
			if got := readAll(t, d, f); !bytes.Equal(got, want) {
				t.Fatalf("read back %d bytes, want %d; first difference at %d", len(got), len(want), firstDiff(got, want))
			}
		})
	}
	// And after a restart, from the files alone.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = reopen(t, dir)
	if got := readAll(t, d, f); !bytes.Equal(got, want) {
		t.Fatalf("after reopen: read back %d bytes, want %d; first difference at %d", len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// evict writes the file at path back and drops its pages from the page
// cache.
func evict(t *testing.T, path string) {
	t.Helper()
	if err := pagecache.Evict(path); err != nil {
		t.Fatal(err)
	}
}

// TestDirectReads: large bulk reads of data the page cache holds none of
// read their whole blocks around it (and leave none there), while reads of
// data it holds some of, small reads, and reads at unaligned offsets or
// into unaligned memory go through it; every byte reads right, up to an
// end of the object in the middle of a block.
func TestDirectReads(t *testing.T) {
	d, dir := newTarget(t, 0)
	defer d.Close()
	if got := d.DirectReadMin(); got != 0 {
		t.Fatalf("direct read min %d by default, want 0", got)
	}
	if err := d.SetDirectReadMin(1 << 20); err != nil {
		t.Fatal(err)
	}
	direct := storeTakesDirect(t, dir)
	t.Logf("store takes O_DIRECT: %v", direct)
	rng := rand.New(rand.NewPCG(8, 8))
	data := make([]byte, 8<<20+1000)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	f := fidN(1)
	mustDo(t, d, func(tx osd.Tx) error {
		if err := tx.Create(f, osd.Attr{}); err != nil {
			return err
		}
		return tx.WriteAt(f, [][]byte{data}, 0)
	})
	path := objPath(dir, f)
	mem := make([]byte, 16<<20) // page-aligned: a large allocation starts a span
	cases := []struct {
		name       string
		off        int64
		memAt, n   int
		cold       bool  // the file's pages dropped before the read
		warm       int64 // read before, from here to the end of the read in small reads (cached), if not -1
		wantDirect bool
	}{
		{"cold", 0, 0, 4 << 20, true, -1, true},
		{"cold to a mid-block end", 4 << 20, 4096, 4<<20 + 8192, true, -1, true},
		{"cached", 1 << 20, 0, 2 << 20, true, 1 << 20, false},
		{"partly cached", 2 << 20, 0, 2 << 20, true, 4<<20 - 4096, false},
		{"small", 1 << 20, 0, 256 << 10, true, -1, false},
		{"unaligned offset", 1<<20 + 17, 0, 2 << 20, true, -1, false},
		{"unaligned memory", 1 << 20, 100, 2 << 20, true, -1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.cold {
				evict(t, path)
			}
			for at := c.warm; at >= 0 && at < c.off+int64(c.n); at += 256 << 10 {
				if _, err := d.ReadAt(bg, f, [][]byte{make([]byte, 256<<10)}, at); err != nil {
					t.Fatal(err)
				}
			}
			b := mem[c.memAt : c.memAt+c.n]
			clear(b)
			n, err := d.ReadAt(bg, f, [][]byte{b}, c.off)
			want := min(c.n, len(data)-int(c.off))
			if err != nil || n != want {
				t.Fatalf("read [%d,+%d): %d, %v; want %d", c.off, c.n, n, err, want)
			}
			if !bytes.Equal(b[:n], data[c.off:c.off+int64(n)]) {
				t.Fatalf("read [%d,+%d): first difference at %d", c.off, c.n, firstDiff(b[:n], data[c.off:]))
			}
			// The whole pages read.
			from, to := (c.off+4095)&^4095, (c.off+int64(n))&^4095
			cached, pages := 0, resident(t, path, from, to)
			for _, r := range pages {
				if r {
					cached++
				}
			}
			switch {
			case !direct || !c.wantDirect:
				if cached != len(pages) {
					t.Errorf("buffered read: %d of %d pages in the page cache, want all", cached, len(pages))
				}
			case cached != 0:
				t.Errorf("direct read: %d of %d pages in the page cache, want 0", cached, len(pages))
			}
		})
	}
	// Off: everything through the page cache.
	if err := d.SetDirectReadMin(0); err != nil {
		t.Fatal(err)
	}
	evict(t, path)
	if got := readAll(t, d, f); !bytes.Equal(got, data) {
		t.Fatal("read with direct reads off: wrong bytes")
	}
	if pages := resident(t, path, 0, 8<<20); !pages[len(pages)/2] {
		t.Fatal("read with direct reads off left no pages in the page cache")
	}
	if err := d.SetDirectReadMin(-1); !errors.Is(err, osd.ErrInvalid) {
		t.Fatalf("direct read min -1: %v", err)
	}
}
