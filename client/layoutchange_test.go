package client_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
)

// migration is a file of 4 MiB on one OST of two, written by one client
// (a), which migrates it as lfs migrate does, and open for reading in
// another (b).
type migration struct {
	t     *testing.T
	ctx   context.Context
	c     *clustertest.Cluster
	a, b  *client.FS
	f     client.FID
	data  []byte
	r     *client.File // b's
	moves int
}

func newMigration(t *testing.T) *migration {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	m := &migration{t: t, ctx: ctx, c: c, a: c.Mount(0), data: make([]byte, 4<<20)}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range m.data {
		m.data[i] = byte(rng.Uint32())
	}
	m.f = m.put("f", layout.Plain(layout.RAID0{StripeCount: 1, StripeSize: 1 << 20, StripeOffset: 0}))
	m.b = c.Mount(1)
	r, _, err := m.b.Open(ctx, client.Root(), m.f, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	m.r = r
	m.read(0, 64<<10)
	return m
}

// put makes name with layout l and the file's data.
func (m *migration) put(name string, l layout.Layout) client.FID {
	m.t.Helper()
	f, _, err := m.a.Create(m.ctx, client.Root(), m.a.Root(), name, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o644, &client.CreateOptions{Layout: &l})
	if err != nil {
		m.t.Fatal(err)
	}
	if _, _, err := f.WriteAt(m.ctx, m.data, 0); err != nil {
		m.t.Fatal(err)
	}
	if err := f.Close(m.ctx); err != nil {
		m.t.Fatal(err)
	}
	return f.FID()
}

// migrate copies the file to new objects (striped over both OSTs, then
// over one, ...), swaps the layouts, removes the copy and waits until its
// objects, the file's old ones, are destroyed.
func (m *migration) migrate() {
	m.t.Helper()
	m.swap()()
}

// swap is migrate up to the swap of the layouts: the copy, with the
// file's old objects, is removed by the function it returns.
func (m *migration) swap() (remove func()) {
	m.t.Helper()
	stored := m.c.OSTObjectBytes()
	m.moves++
	l := layout.Plain(layout.RAID0{StripeCount: int32(1 + m.moves%2), StripeSize: 1 << 20, StripeOffset: -1})
	cp := m.put("copy", l)
	if err := m.a.SwapLayouts(m.ctx, client.Root(), m.f, cp, nil); err != nil {
		m.t.Fatalf("swap: %v", err)
	}
	return func() {
		m.t.Helper()
		if err := m.a.Unlink(m.ctx, client.Root(), m.a.Root(), "copy"); err != nil {
			m.t.Fatalf("unlink of the copy: %v", err)
		}
		for m.c.OSTObjectBytes() > stored {
			if m.ctx.Err() != nil {
				m.t.Fatalf("the old objects were never destroyed: %d bytes on the OSTs, %d before the copy", m.c.OSTObjectBytes(), stored)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// read has b read n bytes at off and checks them.
func (m *migration) read(off, n int) {
	m.t.Helper()
	m.readFrom(m.r, off, n)
}

// readFrom has r read n bytes at off and checks them.
func (m *migration) readFrom(r *client.File, off, n int) {
	m.t.Helper()
	got := make([]byte, n)
	k, err := r.ReadAt(m.ctx, got, int64(off))
	if err != nil || k != n {
		m.t.Fatalf("read of %d at %d: %d bytes, %v", n, off, k, err)
	}
	if !bytes.Equal(got, m.data[off:off+n]) {
		m.t.Fatalf("read of %d at %d: wrong bytes (zeros: %v)", n, off, bytes.Equal(got, make([]byte, n)))
	}
}

// TestReadAcrossLayoutSwap: a read that took the file's objects just
// before another client migrated the file reads the old objects after
// they are gone. It must give the file's bytes: the reader learns of the
// swap (its layout lock was called back) and reads again from the new
// objects. Before, the read was granted a lock on the missing object that
// said it was empty, and gave zeros (or EOF).
func TestReadAcrossLayoutSwap(t *testing.T) {
	m := newMigration(t)
	var once sync.Once
	client.SetBeforeRead(func() {
		once.Do(m.migrate) // (in the test's goroutine: it may fail it)
	})
	defer client.SetBeforeRead(nil)
	m.read(1<<20, 256<<10)
}

// TestReadAfterTwoSwaps: a reader that read the file's layout again after
// one migration learns of the next as well: the layout was read under a
// lock of its own, whose callback says it changed. Before, it was read
// without one, and the reader went on reading the objects the second
// migration destroyed.
func TestReadAfterTwoSwaps(t *testing.T) {
	m := newMigration(t)
	for i := range 3 {
		m.migrate()
		m.read(i<<20, 256<<10)
	}
}

// beforeDataOf has fs run fn (once, in the goroutine that runs it) the
// next time it is about to take the objects of a layout of m's file it
// read, and not during fn.
func (m *migration) beforeDataOf(fs *client.FS, fn func()) {
	var armed atomic.Bool
	armed.Store(true)
	client.SetBeforeDataOf(func(on *client.FS, f client.FID) {
		if on == fs && f == m.f && armed.CompareAndSwap(true, false) {
			fn()
		}
	})
	m.t.Cleanup(func() { client.SetBeforeDataOf(nil) })
}

// TestOpenAcrossLayoutSwap: an open whose layout was swapped, and its
// objects destroyed, between the MDT's answer and the client's use of it
// must still give the file's size and bytes. The open's lock was called
// back (the swap waited for it), which marks the layout stale, but the
// open's own taking of its objects cleared the mark: the open failed
// (its size, a glimpse of the destroyed objects: ENOENT), or, once it
// did not, every read of the open file did.
func TestOpenAcrossLayoutSwap(t *testing.T) {
	m := newMigration(t)
	c := m.c.Mount(2)
	m.beforeDataOf(c, m.migrate)
	r, a, err := c.Open(m.ctx, client.Root(), m.f, syscall.O_RDONLY)
	if err != nil {
		t.Fatalf("open while the file was migrated: %v", err)
	}
	defer r.Close(m.ctx)
	if a.Size != uint64(len(m.data)) {
		t.Fatalf("open while the file was migrated: size %d, want %d", a.Size, len(m.data))
	}
	m.readFrom(r, 1<<20, 256<<10)
}

// TestConcurrentReadAcrossLayoutSwap: of two reads of an open file that
// both come after a migration, the second, which starts while the first
// reads the new layout, must not use the old one. The first cleared the
// stale mark as it began, and the second read the destroyed objects
// (ENOENT).
func TestConcurrentReadAcrossLayoutSwap(t *testing.T) {
	m := newMigration(t)
	m.migrate()
	m.beforeDataOf(m.b, func() { m.read(2<<20, 64<<10) })
	m.read(1<<20, 64<<10)
}

// TestStatAcrossLayoutSwap: a stat of an open file that read its layout
// before a migration, and finished after a read had the new one, must
// not put the old layout's objects back in the file's place: every later
// read of the open file read the destroyed objects (ENOENT).
func TestStatAcrossLayoutSwap(t *testing.T) {
	m := newMigration(t)
	m.beforeDataOf(m.b, func() {
		m.migrate()
		m.read(1<<20, 64<<10) // reads the new layout
	})
	if a, err := m.b.Getattr(m.ctx, client.Root(), m.f); err != nil || a.Size != uint64(len(m.data)) {
		t.Errorf("stat across the migration: size %d, err %v; want %d", a.Size, err, len(m.data))
	}
	m.read(2<<20, 64<<10)
}

// TestTruncateAcrossLayoutSwap: a truncate by path (no open file, which
// would keep the swap off) whose layout was swapped between the MDT's
// change and the cut of the objects must cut the file's new objects.
// Before, it cut the old ones, which the copy took away: the truncate
// said it was done, and the file kept its size and data. (Had they been
// destroyed already, it failed with ENOENT.)
func TestTruncateAcrossLayoutSwap(t *testing.T) {
	for _, destroyed := range []bool{false, true} {
		m := newMigration(t)
		c := m.c.Mount(2)
		var remove func()
		m.beforeDataOf(c, func() {
			if remove = m.swap(); destroyed {
				remove()
				remove = func() {}
			}
		})
		const size = 1<<20 + 1000
		if _, err := c.Setattr(m.ctx, client.Root(), m.f, client.SetAttr{Valid: mdc.AttrSize, Size: size}); err != nil {
			t.Fatalf("truncate across a swap (destroyed %v): %v", destroyed, err)
		}
		remove()
		if got, err := m.r.Size(m.ctx); err != nil || got != size {
			t.Fatalf("size after a truncate across a swap (destroyed %v): %d, %v; want %d", destroyed, got, err, size)
		}
		m.data = m.data[:size]
		m.read(size-4096, 4096)
	}
}

// TestStatDuringMigration: a stat (of a file no handle of the client has
// open) whose layout was swapped, and its objects destroyed, between the
// MDT's answer and the glimpse of the objects must give the file's size.
// It failed with ENOENT: the glimpse asked the destroyed objects.
func TestStatDuringMigration(t *testing.T) {
	m := newMigration(t)
	c := m.c.Mount(2)
	m.beforeDataOf(c, m.migrate)
	if a, err := c.Getattr(m.ctx, client.Root(), m.f); err != nil || a.Size != uint64(len(m.data)) {
		t.Fatalf("stat during a migration: size %d, err %v; want %d", a.Size, err, len(m.data))
	}
	m.beforeDataOf(c, m.migrate)
	if a, err := c.Lookup(m.ctx, client.Root(), c.Root(), "f"); err != nil || a.Size != uint64(len(m.data)) {
		t.Fatalf("lookup during a migration: size %d, err %v; want %d", a.Size, err, len(m.data))
	}
}
