package client_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
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
	a     *client.FS
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
	r, _, err := c.Mount(1).Open(ctx, client.Root(), m.f, syscall.O_RDONLY)
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
	stored := m.c.OSTObjectBytes()
	m.moves++
	l := layout.Plain(layout.RAID0{StripeCount: int32(1 + m.moves%2), StripeSize: 1 << 20, StripeOffset: -1})
	cp := m.put("copy", l)
	if err := m.a.SwapLayouts(m.ctx, client.Root(), m.f, cp, nil); err != nil {
		m.t.Fatalf("swap: %v", err)
	}
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

// read has b read n bytes at off and checks them.
func (m *migration) read(off, n int) {
	m.t.Helper()
	got := make([]byte, n)
	k, err := m.r.ReadAt(m.ctx, got, int64(off))
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
