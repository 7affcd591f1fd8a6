package osc_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/internal/clienttest"
	"github.com/nacrefs/nacre/client/osc"
)

// vecBytes joins v's slices.
func vecBytes(v *osc.Vec) []byte {
	var b []byte
	for _, s := range v.Bufs() {
		b = append(b, s...)
	}
	return b
}

// readVec reads n bytes at off into v under a read lock it releases.
func readVec(t *testing.T, ctx context.Context, o *osc.Object, v *osc.Vec, n int, off uint64) {
	t.Helper()
	l, err := o.Lock(ctx, false, off&^(osc.PageSize-1), (off+uint64(n)+osc.PageSize-1)&^(osc.PageSize-1)-1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if got, err := l.ReadVec(ctx, v, make([]byte, n), off); err != nil || got != n {
		t.Fatalf("read vec [%d,+%d): %d %v", off, n, got, err)
	}
}

// notDone fails t if what sends on ch is done after d: it should wait.
func notDone(t *testing.T, ch <-chan error, d time.Duration, what string) {
	t.Helper()
	time.Sleep(d)
	select {
	case err := <-ch:
		t.Fatalf("%s did not wait for the pinned pages (err %v)", what, err)
	default:
	}
}

// TestReadVecPins: a read without a copy hands out the cached pages' own
// bytes, the same as ReadAt's, at an odd offset across pages and RPCs;
// while they are pinned a write into them and a truncate that cuts one
// wait, and the bytes handed out stay as they were; Release lets both go
// on.
func TestReadVecPins(t *testing.T) {
	_, a, _, _, oa, _ := twoClients(t)
	ctx := ctxT(t, time.Minute)
	data := pattern(5<<20+321, 3)
	if _, err := oa.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := oa.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	const off, n = 4095, 1<<20 + 2
	var v osc.Vec
	readVec(t, ctx, oa, &v, n, off)
	if v.Len() != n || !bytes.Equal(vecBytes(&v), data[off:off+n]) {
		t.Fatalf("vec of %d bytes (want %d), equal %v", v.Len(), n, bytes.Equal(vecBytes(&v), data[off:off+n]))
	}
	// Pages of one slab are contiguous and join: fewer slices than pages.
	if pages := (off+n)/osc.PageSize - off/osc.PageSize + 1; len(v.Bufs()) >= pages {
		t.Logf("%d slices for %d pages", len(v.Bufs()), pages)
	}
	want := bytes.Clone(data[off : off+n])

	// A write first, then a truncate (writes wait for truncates).
	write := make(chan error, 1)
	newBytes := pattern(100, 4)
	go func() { _, err := oa.WriteAt(ctx, newBytes, off+5000); write <- err }()
	notDone(t, write, 300*time.Millisecond, "a write")
	if !bytes.Equal(vecBytes(&v), want) {
		t.Fatal("the pinned bytes changed")
	}
	v.Release()
	if err := <-write; err != nil {
		t.Fatal(err)
	}
	v.Release() // again: nothing
	readVec(t, ctx, oa, &v, n, off)
	trunc := make(chan error, 1)
	go func() { trunc <- oa.Truncate(ctx, off+n-100) }()
	notDone(t, trunc, 300*time.Millisecond, "a truncate")
	if !bytes.Equal(vecBytes(&v)[5000:5100], newBytes) {
		t.Fatal("the pinned bytes changed")
	}
	v.Release()
	if err := <-trunc; err != nil {
		t.Fatal(err)
	}
	copy(data[off+5000:], newBytes)
	data = data[:off+n-100]
	got := make([]byte, len(data))
	if _, err := oa.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after release: %v (equal %v)", err, bytes.Equal(got, data))
	}
	if st := a.Cache.Stats(); st.Pages > st.MaxPages {
		t.Fatalf("cache %v", st)
	}
}

// TestReadVecDroppedPages: pages pinned when another client's write calls
// the lock back leave the object (the next read gets the new bytes) but
// keep their buffers, and the bytes handed out, until released: reads
// that fill the cache meanwhile do not get those buffers. Then they go
// back to the cache. An evictor passes pinned pages by.
func TestReadVecDroppedPages(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 1, Nodes: 2})
	cfg := osc.DefaultConfig()
	cfg.MaxPagesPerRPC, cfg.MaxCachedMB, cfg.MaxReadAheadMB, cfg.MaxDirtyMB = 64, 4, 1, 1
	a := newNode(t, c, 0, cfg)
	b := newNode(t, c, 1, osc.DefaultConfig())
	f := precreate(t, c, 0)
	oa, ob := a.OSCs[0].Open(f), b.OSCs[0].Open(f)
	t.Cleanup(func() { oa.Close(); ob.Close() })
	ctx := ctxT(t, time.Minute)
	data := pattern(16<<20, 5)
	if _, err := ob.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := ob.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	// Pinned pages survive a cache filled four times over.
	const n = 256 << 10
	var v osc.Vec
	readVec(t, ctx, oa, &v, n, 0)
	buf := make([]byte, n)
	for off := n; off < len(data); off += n {
		if _, err := oa.ReadAt(ctx, buf, uint64(off)); err != nil || !bytes.Equal(buf, data[off:off+n]) {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	if !bytes.Equal(vecBytes(&v), data[:n]) {
		t.Fatal("pinned bytes changed while the cache was filled")
	}
	misses := a.OSCs[0].Stats().CacheMisses
	if _, err := oa.ReadAt(ctx, buf, 0); err != nil || !bytes.Equal(buf, data[:n]) {
		t.Fatal(err)
	}
	if got := a.OSCs[0].Stats().CacheMisses - misses; got != 0 {
		t.Fatalf("%d of %d pinned pages read again: the evictor took pinned pages", got, n/osc.PageSize)
	}

	// b's write calls a's lock back: the pinned pages leave the object.
	newData := pattern(n, 6)
	if _, err := ob.WriteAt(ctx, newData, 0); err != nil {
		t.Fatal(err)
	}
	if err := ob.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := oa.ReadAt(ctx, buf, 0); err != nil || !bytes.Equal(buf, newData) {
		t.Fatalf("a reads the old bytes after b's write: %v", err)
	}
	for off := n; off < len(data); off += n { // new pages want buffers
		if _, err := oa.ReadAt(ctx, buf, uint64(off)); err != nil || !bytes.Equal(buf, data[off:off+n]) {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	if !bytes.Equal(vecBytes(&v), data[:n]) {
		t.Fatal("a dropped pinned page's buffer went to another page")
	}
	before := a.Cache.Stats()
	v.Release()
	after := a.Cache.Stats()
	if before.Pages-after.Pages != n/osc.PageSize {
		t.Fatalf("release gave back %d pages, want %d (%v, then %v)", before.Pages-after.Pages, n/osc.PageSize, before, after)
	}
}

// TestReadVecRelease: releasing pages still in their object leaves them
// cached, and the Vec empty.
func TestReadVecRelease(t *testing.T) {
	_, a, _, _, oa, ob := twoClients(t)
	ctx := ctxT(t, time.Minute)
	data := pattern(1<<20, 7)
	if _, err := ob.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	var v osc.Vec
	readVec(t, ctx, oa, &v, len(data), 0)
	if !bytes.Equal(vecBytes(&v), data) {
		t.Fatal("read vec: wrong bytes")
	}
	pinned := a.Cache.Stats().Pages
	v.Release()
	if got := a.Cache.Stats().Pages; got != pinned {
		t.Fatalf("cached pages %d after release, %d before: release of pages still in the object freed them", got, pinned)
	}
	if v.Len() != 0 || len(v.Bufs()) != 0 {
		t.Fatal("a released vec still holds bytes")
	}
	misses := a.OSCs[0].Stats().CacheMisses
	got := make([]byte, len(data))
	if _, err := oa.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatal(err)
	}
	if m := a.OSCs[0].Stats().CacheMisses - misses; m != 0 {
		t.Fatalf("%d cache misses reading the released pages", m)
	}
}

// TestReadVecLargerThanCache: a read without a copy of more than the
// cache holds completes (the pages past the pins' share of the cache are
// copied into the caller's buffer instead), with the right bytes, and
// several such reads at once do too; released, nothing stays pinned.
func TestReadVecLargerThanCache(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 1, Nodes: 1})
	cfg := osc.DefaultConfig()
	cfg.MaxPagesPerRPC, cfg.MaxCachedMB, cfg.MaxReadAheadMB, cfg.MaxDirtyMB = 64, 4, 1, 1
	a := newNode(t, c, 0, cfg)
	o := a.OSCs[0].Open(precreate(t, c, 0))
	t.Cleanup(o.Close)
	ctx := ctxT(t, time.Minute)
	data := pattern(8<<20, 9)
	if _, err := o.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := o.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	read := func(off, n int) error {
		var v osc.Vec
		defer v.Release()
		l, err := o.Lock(ctx, false, 0, uint64(len(data))-1)
		if err != nil {
			return err
		}
		defer l.Release()
		if got, err := l.ReadVec(ctx, &v, make([]byte, n), uint64(off)); err != nil || got != n {
			return fmt.Errorf("read vec [%d,+%d): %d %v", off, n, got, err)
		}
		if !bytes.Equal(vecBytes(&v), data[off:off+n]) {
			return fmt.Errorf("read vec [%d,+%d): wrong bytes", off, n)
		}
		return nil
	}
	if err := read(0, len(data)); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for k := range 4 {
		go func() { errs <- read(k*(1<<20)+k, 3<<20) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Nothing pinned: a write into every page goes through at once.
	if _, err := o.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
}
