package osc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/internal/clienttest"
	"github.com/nacrefs/nacre/client/osc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/tmpfs"
	"github.com/nacrefs/nacre/ldlm"
)

const portBase = 29800

func startCluster(t testing.TB, opts clienttest.Options) *clienttest.Cluster {
	t.Helper()
	if opts.PortBase == 0 {
		opts.PortBase = portBase
	}
	c, err := clienttest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newNode(t testing.TB, c *clienttest.Cluster, i int, cfg osc.Config) *clienttest.Node {
	t.Helper()
	n, err := c.NewNode(i, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed*7+1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func precreate(t testing.TB, c *clienttest.Cluster, ost int) fid.FID {
	t.Helper()
	fs, err := c.Precreate(ctxT(t, 10*time.Second), ost, 1)
	if err != nil {
		t.Fatal(err)
	}
	return fs[0]
}

// twoClients starts a cluster of one OST and two client nodes, and opens
// a new object of it on each.
func twoClients(t *testing.T) (c *clienttest.Cluster, a, b *clienttest.Node, f fid.FID, oa, ob *osc.Object) {
	t.Helper()
	c = startCluster(t, clienttest.Options{OSTs: 1, Nodes: 2})
	a = newNode(t, c, 0, osc.DefaultConfig())
	b = newNode(t, c, 1, osc.DefaultConfig())
	f = precreate(t, c, 0)
	oa, ob = a.OSCs[0].Open(f), b.OSCs[0].Open(f)
	t.Cleanup(func() { oa.Close(); ob.Close() })
	return c, a, b, f, oa, ob
}

// TestWriteReadBack: data written through the cache reads back from the
// cache, and from the OST on another client after the lock moves.
func TestWriteReadBack(t *testing.T) {
	_, a, b, _, oa, ob := twoClients(t)
	ctx := ctxT(t, 30*time.Second)

	data := pattern(3<<20+123, 1)
	if n, err := oa.WriteAt(ctx, data, 1000); err != nil || n != len(data) {
		t.Fatalf("write: %d %v", n, err)
	}
	got := make([]byte, len(data))
	if _, err := oa.ReadAt(ctx, got, 1000); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back from the cache: %v (equal %v)", err, bytes.Equal(got, data))
	}
	if st := a.OSCs[0].Stats(); st.CacheMisses != 0 || st.WriteRPCs != 0 {
		t.Logf("stats after cached write and read: %+v", st)
	}
	clear(got)
	if _, err := ob.ReadAt(ctx, got, 1000); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read on the other client: %v (equal %v)", err, bytes.Equal(got, data))
	}
	if sz, err := ob.Size(ctx); err != nil || sz != uint64(1000+len(data)) {
		t.Fatalf("size %d %v, want %d", sz, err, 1000+len(data))
	}
	head := make([]byte, 1000)
	if _, err := ob.ReadAt(ctx, head, 0); err != nil || !bytes.Equal(head, make([]byte, 1000)) {
		t.Fatalf("hole before the data: %v", err)
	}
	if err := oa.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("a: %+v", a.OSCs[0].Stats())
	t.Logf("b: %+v", b.OSCs[0].Stats())
}

// TestGlimpseKeepsLock: the size of an object nobody writes comes with
// the glimpse's PR lock, and the next asks nothing; a writer elsewhere
// calls that lock back, and the size and bytes it wrote are seen.
func TestGlimpseKeepsLock(t *testing.T) {
	c, _, b, _, oa, ob := twoClients(t)
	ctx := ctxT(t, 30*time.Second)
	lockd := c.OSS.OSTs()[0].LockServer()

	if sz, err := ob.Size(ctx); err != nil || sz != 0 {
		t.Fatalf("size of a new object: %d %v", sz, err)
	}
	gl := b.Locks.Stats().Glimpses
	if sz, err := ob.Size(ctx); err != nil || sz != 0 || b.Locks.Stats().Glimpses != gl {
		t.Fatalf("second size: %d %v, glimpses %d -> %d (want none)", sz, err, gl, b.Locks.Stats().Glimpses)
	}
	if st := lockd.Stats(); st.GlimpseLocks != 1 {
		t.Fatalf("lock server: %+v", st)
	}

	data := pattern(5000, 3)
	if _, err := oa.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := oa.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if st := b.Locks.Stats(); st.BlockingASTs == 0 {
		t.Fatalf("the writer did not call the glimpse's lock back: %+v", st)
	}
	if sz, err := ob.Size(ctx); err != nil || sz != 5000 {
		t.Fatalf("size after the write elsewhere: %d %v", sz, err)
	}
	got := make([]byte, len(data))
	if _, err := ob.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after the write elsewhere: %v (equal %v)", err, bytes.Equal(got, data))
	}

}

// TestInterruptedReadKeepsDirtyData: a read that conflicts with the
// client's own cached write lock, whose page is dirty, and whose context
// has ended, loses none of that data: the write lock is not given back
// early under the reader's context (only read locks are), but called back
// by the server and flushed on the lock client's own goroutines.
func TestInterruptedReadKeepsDirtyData(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 1, Nodes: 2})
	a := newNode(t, c, 0, osc.DefaultConfig())
	b := newNode(t, c, 1, osc.DefaultConfig())
	ctx := ctxT(t, 30*time.Second)
	f := precreate(t, c, 0)
	oa := a.OSCs[0].Open(f)
	defer oa.Close()
	// An exact PW lock on the first page, used by a write, kept unused.
	if err := oa.LockAhead(ctx, 0, 4095); err != nil {
		t.Fatal(err)
	}
	data := pattern(4096, 9)
	if _, err := oa.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if st := a.OSCs[0].Stats(); st.UnsentBytes != 4096 {
		t.Fatalf("want one dirty page: %+v", st)
	}
	// A read of two pages with an ended ctx (an interrupted read).
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := oa.ReadAt(dead, make([]byte, 8192), 0)
	t.Logf("interrupted read: %v", err)
	st := a.OSCs[0].Stats()
	t.Logf("after the interrupted read: lost pages %d unsent %d written %d", st.LostPages, st.UnsentBytes, st.WriteBytes)
	if serr := oa.Sync(ctx); serr != nil {
		t.Logf("Sync: %v", serr)
	}
	ob := b.OSCs[0].Open(f)
	defer ob.Close()
	got := make([]byte, 4096)
	if _, err := ob.ReadAt(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("written data lost by an interrupted read (lost pages %d)", st.LostPages)
	}
}

// TestGlimpseLockSizeAfterTruncate: a client holding a read lock below the
// end of the object learns no size beyond that lock's extent from it: a
// truncate elsewhere whose lock does not overlap may cut it, and a
// glimpse's lock to EOF would then pass the old size for exact.
func TestGlimpseLockSizeAfterTruncate(t *testing.T) {
	c, a, _, f, oa, ob := twoClients(t)
	ctx := ctxT(t, 30*time.Second)
	const kib = 1024
	if _, err := oa.WriteAt(ctx, pattern(64*kib, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := oa.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	imp := a.OSCs[0].Import()
	if err := a.Locks.SetLRUMaxAge(imp, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // a's write lock goes
	if err := a.Locks.SetLRUMaxAge(imp, time.Hour); err != nil {
		t.Fatal(err)
	}
	// a holds an exact lock at 32 KiB, so that b's read lock at 0 grows
	// no further than 32 KiB.
	if err := oa.LockAhead(ctx, 32*kib, 36*kib-1); err != nil {
		t.Fatal(err)
	}
	lk, err := ob.Lock(ctx, false, 0, 4095)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("b's read lock: %v %v, known size %d", lk.Mode(), lk.Extent(), ob.KnownSize())
	lk.Release()
	// a truncates to 40 KiB: its lock [40K, EOF] misses b's.
	if err := oa.Truncate(ctx, 40*kib); err != nil {
		t.Fatal(err)
	}
	// a's locks go (as they would age out of its LRU).
	if err := a.Locks.SetLRUMaxAge(imp, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	sz, err := ob.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sz2, _ := ob.Size(ctx)
	t.Logf("b's size: %d then %d; server locks %+v", sz, sz2, c.OSS.OSTs()[0].LockServer().Locks(ldlmRes(f)))
	if sz != 40*kib || sz2 != 40*kib {
		t.Fatalf("size %d then %d, want %d", sz, sz2, 40*kib)
	}
}

func ldlmRes(f fid.FID) ldlm.Resource {
	return ldlm.Resource{ID: ldlm.ResIDOfFID(f.Seq, f.Oid, f.Ver), Type: ldlm.TypeExtent}
}

// checkGrant checks the grant invariants of an OSC's stats.
func checkGrant(t *testing.T, st osc.Stats, cfg osc.Config) {
	t.Helper()
	if st.AvailGrant < 0 || st.UnsentBytes < 0 || st.DirtyBytes < st.UnsentBytes {
		t.Fatalf("grant accounting off: %+v", st)
	}
	if st.DirtyBytes > int64(cfg.MaxDirtyMB)<<20 {
		t.Fatalf("dirty %d past max_dirty_mb %d", st.DirtyBytes, cfg.MaxDirtyMB)
	}
	if st.UnsentBytes > int64(st.Grant) {
		t.Fatalf("cached dirty data %d exceeds the grant %d", st.UnsentBytes, st.Grant)
	}
}

// TestGrantENOSPC: on a 24 MiB OST, a client writes 1 MiB at a time with
// a Sync every few writes until the OST is full. Cached dirty data never
// exceeds the grant the OST gave; as the OST fills the grant shrinks, the
// writes go synchronously, and ENOSPC comes back from a write or the Sync
// that carries it; everything written before the last successful Sync
// reads back on another client; and after a truncate frees space the
// client writes again.
func TestGrantENOSPC(t *testing.T) {
	dir := tmpfs.Mount(t, "24m")
	c := startCluster(t, clienttest.Options{OSTs: 1, Nodes: 2, Dirs: []string{dir}})
	cfg := osc.DefaultConfig()
	a := newNode(t, c, 0, cfg)
	b := newNode(t, c, 1, cfg)
	ctx := ctxT(t, 2*time.Minute)
	f := precreate(t, c, 0)
	o := a.OSCs[0].Open(f)
	defer o.Close()
	if st := a.OSCs[0].Stats(); st.Grant == 0 || st.Grant > 24<<20 {
		t.Fatalf("connect grant %d on a 24 MiB OST", st.Grant)
	}
	var off, acked int
	var failed error
	from := ""
	chunk := 1 << 20
	for i := 0; off < 64<<20; i++ {
		p := pattern(chunk, uint64(i))
		n, err := o.WriteAt(ctx, p, uint64(off))
		checkGrant(t, a.OSCs[0].Stats(), cfg)
		if err != nil {
			failed, from = err, "write"
			break
		}
		off += n
		if i%4 == 3 {
			if err := o.Sync(ctx); err != nil {
				failed, from = err, "sync"
				break
			}
			acked = off
		}
	}
	if failed == nil {
		failed, from = o.Sync(ctx), "last sync"
	}
	if !errors.Is(failed, syscall.ENOSPC) {
		t.Fatalf("filling a 24 MiB OST with %d MiB: %s: %v", off>>20, from, failed)
	}
	t.Logf("ENOSPC from %s after %d MiB written, %d MiB synced: %+v", from, off>>20, acked>>20, a.OSCs[0].Stats())
	// Out of grant and of space: writes go synchronously, and the OST's
	// ENOSPC comes back from the write itself (the space a failed write
	// left may take a write or two first).
	before := a.OSCs[0].Stats().SyncWrites
	direct := false
	for i := 0; i < 16 && !direct; i++ {
		_, err := o.WriteAt(ctx, pattern(chunk, 1000), uint64(off))
		switch {
		case errors.Is(err, syscall.ENOSPC):
			direct = true
		case err != nil:
			t.Fatalf("write to a full OST: %v", err)
		default:
			off += chunk
		}
	}
	if st := a.OSCs[0].Stats(); !direct || st.SyncWrites == before {
		t.Fatalf("writes to a full OST did not go synchronously and fail: %+v", st)
	}
	// Writes that succeeded in between may have been cached and failed
	// since: the next Sync tells.
	if err := o.Sync(ctx); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("sync on a full OST: %v", err)
	}
	ob := b.OSCs[0].Open(f)
	defer ob.Close()
	got := make([]byte, chunk)
	for k := 0; k < acked; k += chunk {
		if _, err := ob.ReadAt(ctx, got, uint64(k)); err != nil || !bytes.Equal(got, pattern(chunk, uint64(k/chunk))) {
			t.Fatalf("synced MiB %d reads back wrong (%v)", k>>20, err)
		}
	}
	// Space comes back: the client writes and syncs again.
	if err := o.Truncate(ctx, 1<<20); err != nil {
		t.Fatal(err)
	}
	// The OST looks at its free space at most every 100 ms.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := o.WriteAt(ctx, pattern(chunk, 99), 1<<20)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ENOSPC) || time.Now().After(deadline) {
			t.Fatalf("write after freeing space: %v", err)
		}
	}
	if err := o.Sync(ctx); err != nil {
		t.Fatalf("sync after freeing space: %v", err)
	}
	if _, err := ob.ReadAt(ctx, got, 1<<20); err != nil || !bytes.Equal(got, pattern(chunk, 99)) {
		t.Fatalf("write after freeing space reads back wrong (%v)", err)
	}
}

// TestFullRPCs: 1 MiB sequential writes leave the client as full 4 MiB
// RPCs (max_pages_per_rpc), and a sequential read comes back in full RPCs
// too, read ahead so that most pages are there before the reader asks.
func TestFullRPCs(t *testing.T) {
	_, a, b, _, oa, ob := twoClients(t)
	ctx := ctxT(t, time.Minute)
	const total, chunk = 64 << 20, 1 << 20
	for off := 0; off < total; off += chunk {
		if _, err := oa.WriteAt(ctx, pattern(chunk, uint64(off/chunk)), uint64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := oa.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st := a.OSCs[0].Stats()
	if st.WriteBytes != total || st.WriteRPCs != total/(4<<20) {
		t.Fatalf("64 MiB written in %d RPCs of %d bytes, want 16 of 4 MiB", st.WriteRPCs, st.WriteBytes)
	}
	got := make([]byte, chunk)
	for off := 0; off < total; off += chunk {
		if _, err := ob.ReadAt(ctx, got, uint64(off)); err != nil || !bytes.Equal(got, pattern(chunk, uint64(off/chunk))) {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	st = b.OSCs[0].Stats()
	t.Logf("reader: %+v", st)
	if st.ReadBytes < total || st.ReadBytes > total+8<<20 || st.ReadRPCs > total/(4<<20)+4 {
		t.Fatalf("64 MiB read sequentially in %d RPCs of %d bytes", st.ReadRPCs, st.ReadBytes)
	}
	if st.ReadAheadHits*2 < total/osc.PageSize {
		t.Fatalf("only %d of %d pages read ahead before the reader got there", st.ReadAheadHits, total/osc.PageSize)
	}
}

// TestCacheBound: with a small max_cached_mb, writing and reading far more
// than fits keeps the cache within its bound (clean pages are evicted
// least recently used first; dirty ones wait for writeback) and the data
// right.
func TestCacheBound(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 2, Nodes: 1})
	cfg := osc.DefaultConfig()
	cfg.MaxPagesPerRPC, cfg.MaxDirtyMB, cfg.MaxReadAheadMB, cfg.MaxCachedMB = 256, 2, 2, 6
	a := newNode(t, c, 0, cfg)
	ctx := ctxT(t, time.Minute)
	objs := []*osc.Object{a.OSCs[0].Open(precreate(t, c, 0)), a.OSCs[1].Open(precreate(t, c, 1))}
	const size, chunk = 24 << 20, 300 << 10
	check := func() {
		if st := a.Cache.Stats(); st.Pages > st.MaxPages {
			t.Fatalf("cache holds %d pages, bound %d", st.Pages, st.MaxPages)
		}
	}
	for off := 0; off < size; off += chunk {
		for i, o := range objs {
			if _, err := o.WriteAt(ctx, pattern(chunk, uint64(off+i)), uint64(off)); err != nil {
				t.Fatal(err)
			}
			check()
		}
	}
	r := rand.New(rand.NewPCG(1, 1))
	got := make([]byte, chunk)
	for range 100 {
		off := r.IntN(size/chunk) * chunk
		i := r.IntN(2)
		if _, err := objs[i].ReadAt(ctx, got, uint64(off)); err != nil || !bytes.Equal(got, pattern(chunk, uint64(off+i))) {
			t.Fatalf("read object %d at %d: %v", i, off, err)
		}
		check()
	}
	st := a.Cache.Stats()
	if st.Evictions == 0 {
		t.Fatalf("no eviction: %v", st)
	}
	t.Logf("cache: %v", st)
}

// TestBlockingHookFlushesItsExtent: a client holds two write locks on one
// object (taken ahead, exactly) with dirty pages under each; another
// client reading under one of them makes the first write back exactly the
// pages of that lock: the others stay dirty in its cache.
func TestBlockingHookFlushesItsExtent(t *testing.T) {
	_, a, _, _, oa, ob := twoClients(t)
	ctx := ctxT(t, time.Minute)
	const mib = 1 << 20
	if err := oa.LockAhead(ctx, 0, mib-1); err != nil {
		t.Fatal(err)
	}
	if err := oa.LockAhead(ctx, 4*mib, 5*mib-1); err != nil {
		t.Fatal(err)
	}
	lo, hi := pattern(64<<10, 1), pattern(64<<10, 2)
	if _, err := oa.WriteAt(ctx, lo, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := oa.WriteAt(ctx, hi, 4*mib); err != nil {
		t.Fatal(err)
	}
	if st := a.OSCs[0].Stats(); st.UnsentBytes != 128<<10 || a.Locks.Stats().Enqueues != 2 {
		t.Fatalf("after two writes under two locks taken ahead: %+v, %+v", st, a.Locks.Stats())
	}
	got := make([]byte, 64<<10)
	if _, err := ob.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, lo) {
		t.Fatalf("reading the first lock's range on the other client: %v", err)
	}
	if st := a.OSCs[0].Stats(); st.UnsentBytes != 64<<10 || st.WriteBytes != 64<<10 {
		t.Fatalf("the first lock's blocking hook wrote %d bytes, left %d dirty; want 64 KiB each", st.WriteBytes, st.UnsentBytes)
	}
	if _, err := ob.ReadAt(ctx, got, 4*mib); err != nil || !bytes.Equal(got, hi) {
		t.Fatalf("reading the second lock's range: %v", err)
	}
	if st := a.OSCs[0].Stats(); st.UnsentBytes != 0 || st.WriteBytes != 128<<10 {
		t.Fatalf("after the second lock went: %+v", st)
	}
}

// TestSyncIsDurable: once Sync returns, the OST has committed every write
// the client sent: nothing is left for replay.
func TestSyncIsDurable(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 1, Nodes: 1})
	a := newNode(t, c, 0, osc.DefaultConfig())
	ctx := ctxT(t, time.Minute)
	o := a.OSCs[0].Open(precreate(t, c, 0))
	defer o.Close()
	for i := range 10 {
		if _, err := o.WriteAt(ctx, pattern(300<<10, uint64(i)), uint64(i)*1000000); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	imp := a.OSCs[0].Import()
	if u := imp.Uncommitted(); len(u) != 0 {
		t.Fatalf("after Sync, transnos %v are not committed (last_committed %d)", u, imp.Info().LastCommitted)
	}
	if st := a.OSCs[0].Stats(); st.WriteRPCs == 0 || st.DirtyBytes != 0 {
		t.Fatalf("after Sync: %+v", st)
	}
}

// TestEvictionDropsDirtyData: an OST evicts a client holding dirty pages:
// they are lost, the next Sync says so, and the client carries on.
func TestEvictionDropsDirtyData(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 1, Nodes: 2})
	a := newNode(t, c, 0, osc.DefaultConfig())
	b := newNode(t, c, 1, osc.DefaultConfig())
	ctx := ctxT(t, time.Minute)
	f := precreate(t, c, 0)
	o := a.OSCs[0].Open(f)
	defer o.Close()
	if _, err := o.WriteAt(ctx, pattern(1<<20, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := o.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := o.WriteAt(ctx, pattern(1<<20, 2), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.OSS.OSTs()[0].Target().Evict("client-0"); err != nil {
		t.Fatal(err)
	}
	if err := o.Sync(ctx); err == nil {
		t.Fatal("Sync after an eviction with dirty data lost: no error")
	}
	if st := a.OSCs[0].Stats(); st.LostPages == 0 || st.DirtyBytes != 0 {
		t.Fatalf("after the eviction: %+v", st)
	}
	got := make([]byte, 1<<20)
	ob := b.OSCs[0].Open(f)
	defer ob.Close()
	if _, err := ob.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, pattern(1<<20, 1)) {
		t.Fatalf("the synced data after the eviction: %v", err)
	}
	if _, err := o.WriteAt(ctx, pattern(1<<20, 3), 0); err != nil {
		t.Fatal(err)
	}
	if err := o.Sync(ctx); err != nil {
		t.Fatalf("Sync after recovering from the eviction: %v", err)
	}
	if _, err := ob.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, pattern(1<<20, 3)) {
		t.Fatalf("data written after the eviction: %v", err)
	}
}

// TestGrantTwoClientsFill: two clients fill a 48 MiB OST at once, each
// its own object, syncing every few writes. The grant bounds each one's
// cached dirty data all along, both get ENOSPC (from a write or a Sync),
// and everything either synced reads back.
func TestGrantTwoClientsFill(t *testing.T) {
	dir := tmpfs.Mount(t, "48m")
	c := startCluster(t, clienttest.Options{OSTs: 1, Nodes: 3, Dirs: []string{dir}})
	cfg := osc.DefaultConfig()
	nodes := []*clienttest.Node{newNode(t, c, 0, cfg), newNode(t, c, 1, cfg)}
	ctx := ctxT(t, 2*time.Minute)
	const chunk = 512 << 10
	type result struct {
		w     int
		f     fid.FID
		acked int
		err   error
	}
	res := make(chan result, 2)
	for w, n := range nodes {
		f := precreate(t, c, 0)
		go func() {
			o := n.OSCs[0].Open(f)
			defer o.Close()
			r := result{w: w, f: f}
			off := 0
			for i := 0; ; i++ {
				k, err := o.WriteAt(ctx, pattern(chunk, uint64(w*1000+i)), uint64(off))
				st := n.OSCs[0].Stats()
				if st.UnsentBytes > int64(st.Grant) || st.DirtyBytes > int64(cfg.MaxDirtyMB)<<20 {
					r.err = fmt.Errorf("client %d: dirty past the grant: %+v", w, st)
					break
				}
				if err == nil && i%3 == 2 {
					err = o.Sync(ctx)
					if err == nil {
						r.acked = off + k
					}
				}
				if err != nil {
					if !errors.Is(err, syscall.ENOSPC) {
						r.err = fmt.Errorf("client %d: %w", w, err)
					}
					break
				}
				off += k
			}
			res <- r
		}()
	}
	b := newNode(t, c, 2, cfg)
	for range nodes {
		r := <-res
		if r.err != nil {
			t.Fatal(r.err)
		}
		o := b.OSCs[0].Open(r.f)
		got := make([]byte, chunk)
		for k := 0; k < r.acked; k += chunk {
			if _, err := o.ReadAt(ctx, got, uint64(k)); err != nil {
				t.Fatal(err)
			}
			i := k / chunk
			if !bytes.Equal(got, pattern(chunk, uint64(r.w*1000+i))) {
				t.Fatalf("%v: synced chunk %d reads back wrong", r.f, i)
			}
		}
		o.Close()
		t.Logf("client %d: %d MiB synced", r.w, r.acked>>20)
	}
}

// TestStridedReadAhead: a reader taking 64 KiB every 1 MiB (a column of
// a matrix) gets the next chunks read ahead once the stride is clear,
// several chunks to an RPC.
func TestStridedReadAhead(t *testing.T) {
	_, _, b, _, oa, ob := twoClients(t)
	ctx := ctxT(t, time.Minute)
	data := pattern(32<<20, 5)
	if _, err := oa.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64<<10)
	for i := range 32 {
		off := i << 20
		if _, err := ob.ReadAt(ctx, got, uint64(off)); err != nil || !bytes.Equal(got, data[off:off+len(got)]) {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	st := b.OSCs[0].Stats()
	t.Logf("%+v", st)
	// 32 chunks of 16 pages: all but the first three read ahead, several
	// chunks to an RPC.
	if st.ReadAheadHits < 29*16 || st.ReadBytes > 4<<20 || st.ReadRPCs > 16 {
		t.Fatalf("strided reads: %d pages hit read-ahead, %d bytes in %d RPCs", st.ReadAheadHits, st.ReadBytes, st.ReadRPCs)
	}
}

// TestStridedAfterSequential: a reader that reads the head of a file
// and then 64 KiB every 1 MiB, its steps landing in what the head's
// sequential read-ahead fetched, gets the stride read ahead and not the
// whole file: the stride ends the sequential stream from its fourth read.
func TestStridedAfterSequential(t *testing.T) {
	_, _, b, _, oa, ob := twoClients(t)
	ctx := ctxT(t, time.Minute)
	const size, head, chunk = 64 << 20, 2 << 20, 64 << 10
	data := pattern(size, 6)
	if _, err := oa.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	read := func(off, n int) {
		t.Helper()
		got := make([]byte, n)
		if _, err := ob.ReadAt(ctx, got, uint64(off)); err != nil || !bytes.Equal(got, data[off:off+n]) {
			t.Fatalf("read at %d: %v (bytes differ: %v)", off, err, !bytes.Equal(got, data[off:off+n]))
		}
	}
	for off := 0; off < head; off += 1 << 20 {
		read(off, 1<<20)
	}
	before := b.OSCs[0].Stats()
	for off := head; off < size; off += 1 << 20 {
		read(off, chunk)
	}
	st := b.OSCs[0].Stats()
	t.Logf("%+v", st)
	// The stride's 62 chunks are 4 MiB; what the head's read-ahead and
	// the first steps fetched, 16 MiB at most (the window doubles from
	// 4 MiB, out to 4 MiB RPCs). Reading the rest of the file whole would
	// be 62 MiB.
	if got := st.ReadBytes - before.ReadBytes; got > 24<<20 {
		t.Fatalf("64 KiB every 1 MiB after a sequential head: %d MiB read, want the stride read ahead, not the file", got>>20)
	}
	if hits := st.ReadAheadHits - before.ReadAheadHits; hits < 55*chunk/osc.PageSize {
		t.Fatalf("%d pages of the stride hit read-ahead, want nearly all", hits)
	}
}

// TestReadAheadPerFile: max_read_ahead_per_file_mb bounds how far one
// object is read ahead of a sequential reader, and changing it at run time
// changes that for the next reader.
func TestReadAheadPerFile(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 1, Nodes: 2})
	a := newNode(t, c, 0, osc.DefaultConfig())
	cfg := osc.DefaultConfig()
	cfg.MaxPagesPerRPC, cfg.MaxRPCsInFlight, cfg.MaxReadAheadPerFileMB = 256, 32, 2 // 1 MiB RPCs
	b := newNode(t, c, 1, cfg)
	ctx := ctxT(t, time.Minute)
	const size, reads = 48 << 20, 16
	// readAhead reads the first reads MiB of a new object sequentially on
	// b and returns how much b read ahead meanwhile.
	readAhead := func(seed uint64) int {
		t.Helper()
		f := precreate(t, c, 0)
		oa := a.OSCs[0].Open(f)
		defer oa.Close()
		data := pattern(size, seed)
		if _, err := oa.WriteAt(ctx, data, 0); err != nil {
			t.Fatal(err)
		}
		if err := oa.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		ob := b.OSCs[0].Open(f)
		defer ob.Close()
		before := b.OSCs[0].Stats().ReadAheadPages
		got := make([]byte, 1<<20)
		for i := range reads {
			off := i << 20
			if _, err := ob.ReadAt(ctx, got, uint64(off)); err != nil || !bytes.Equal(got, data[off:off+len(got)]) {
				t.Fatalf("read at %d: %v (bytes differ: %v)", off, err, !bytes.Equal(got, data[off:off+len(got)]))
			}
		}
		return int(b.OSCs[0].Stats().ReadAheadPages-before) * osc.PageSize
	}
	// A 2 MiB window: never more than the reads, the window and one RPC.
	if n := readAhead(1); n > (reads+2+1)<<20 {
		t.Fatalf("max_read_ahead_per_file_mb=2: %d MiB read ahead for %d MiB read", n>>20, reads)
	}
	if err := b.Cache.SetReadAheadPerFile(32); err != nil {
		t.Fatal(err)
	}
	if got := b.Cache.ReadAheadPerFile(); got != 32 {
		t.Fatalf("ReadAheadPerFile after setting 32: %d", got)
	}
	if n := readAhead(2); n <= (reads+2+1)<<20 {
		t.Fatalf("max_read_ahead_per_file_mb=32: only %d MiB read ahead for %d MiB read", n>>20, reads)
	} else {
		t.Logf("max_read_ahead_per_file_mb=32: %d MiB read ahead for %d MiB read", n>>20, reads)
	}
	if err := b.Cache.SetReadAheadPerFile(-1); !errors.Is(err, osc.ErrInvalidConfig) {
		t.Fatalf("SetReadAheadPerFile(-1): %v", err)
	}
	// Closing b with read-ahead in flight is quick: the OST's handlers
	// left waiting for b's bulk hold request buffers, and the service adds
	// more for b's DISCONNECT (it took 10 s, a resend, before).
	start := time.Now()
	b.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("closing the reader's OSC took %v", d)
	}
}

// TestLowSpaceSyncOneWriteAtATime: while the grant is below a full
// pipeline of RPCs (the OST filling up), write RPCs from grant go one at a
// time, so that each reply's grant is exact (grant.go): those a Sync sends
// as well as the engine's. Sent side by side, a reply computed before the
// OST shrank the grant in another could let the client cache writes the
// OST no longer holds grant for, which fail with ENOSPC after write()
// succeeded.
func TestLowSpaceSyncOneWriteAtATime(t *testing.T) {
	dir := tmpfs.Mount(t, "48m")
	c := startCluster(t, clienttest.Options{OSTs: 1, Nodes: 1, Dirs: []string{dir}})
	cfg := osc.DefaultConfig()
	a := newNode(t, c, 0, cfg)
	ctx := ctxT(t, time.Minute)
	f := precreate(t, c, 0)
	o := a.OSCs[0].Open(f)
	defer o.Close()
	pipeline := uint64(cfg.MaxRPCsInFlight*cfg.MaxPagesPerRPC) * osc.PageSize
	a.OSCs[0].ClearRPCStats()
	const chunk = 6 << 20 // more than one RPC
	for i := range 3 {
		if st := a.OSCs[0].Stats(); st.Grant >= pipeline {
			t.Fatalf("round %d: grant %d on a 48 MiB OST, not below a pipeline of %d", i, st.Grant, pipeline)
		}
		if _, err := o.WriteAt(ctx, pattern(chunk, uint64(i)), uint64(i*chunk)); err != nil {
			t.Fatal(err)
		}
		if err := o.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rs := a.OSCs[0].RPCStats()
	for n, k := range rs.ByInFlight[1] {
		if n > 1 && k > 0 {
			t.Fatalf("%d write RPCs sent with %d in flight near full: %v", k, n, rs.ByInFlight[1][:cfg.MaxRPCsInFlight+1])
		}
	}
}

// TestReadAheadSecondPass: a file of 1 MiB read sequentially in 128 KiB
// reads, its pages then dropped by another client's write, and read again
// from the start: the second pass is read ahead too (a few RPCs), not read
// one 128 KiB RPC per read because the state still counted the file as
// read ahead by the first pass.
func TestReadAheadSecondPass(t *testing.T) {
	_, _, b, _, oa, ob := twoClients(t)
	ctx := ctxT(t, time.Minute)
	const size, step = 1 << 20, 128 << 10
	data := pattern(size, 9)
	if _, err := oa.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	pass := func(what string) int {
		t.Helper()
		before := b.OSCs[0].Stats().ReadRPCs
		got := make([]byte, step)
		for off := 0; off < size; off += step {
			if _, err := ob.ReadAt(ctx, got, uint64(off)); err != nil || !bytes.Equal(got, data[off:off+step]) {
				t.Fatalf("%s: read at %d: %v (bytes differ: %v)", what, off, err, !bytes.Equal(got, data[off:off+step]))
			}
		}
		return int(b.OSCs[0].Stats().ReadRPCs - before)
	}
	if n := pass("first pass"); n > 3 {
		t.Fatalf("first pass: %d read RPCs", n)
	}
	// a's write calls b's lock back: b's pages of the file go.
	data[0] ^= 0xff
	if _, err := oa.WriteAt(ctx, data[:1], 0); err != nil {
		t.Fatal(err)
	}
	if err := oa.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := pass("second pass"); n > 3 {
		t.Fatalf("second pass: %d read RPCs for %d reads of %d KiB, want it read ahead", n, size/step, step>>10)
	}
}

// TestCanceledSyncKeepsData: an fsync that gives up (its deadline passes
// while the dirty pages are being written) leaves their write RPCs going:
// nothing is lost, a later fsync succeeds, and the other client reads
// every byte.
func TestCanceledSyncKeepsData(t *testing.T) {
	_, a, _, _, oa, ob := twoClients(t)
	ctx := ctxT(t, 60*time.Second)
	data := pattern(16<<20, 7)
	if n, err := oa.WriteAt(ctx, data, 0); err != nil || n != len(data) {
		t.Fatalf("write: %d %v", n, err)
	}
	short, cancel := context.WithTimeout(ctx, 3*time.Millisecond)
	err := oa.Sync(short)
	cancel()
	t.Logf("fsync with a 3 ms deadline: %v", err)
	if err := oa.Sync(ctx); err != nil {
		t.Fatalf("fsync after one that gave up: %v", err)
	}
	if st := a.OSCs[0].Stats(); st.LostPages != 0 {
		t.Fatalf("%d pages lost to a canceled fsync", st.LostPages)
	}
	got := make([]byte, len(data))
	if n, err := ob.ReadAt(ctx, got, 0); n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("read on the other client: %d %v, equal %v", n, err, bytes.Equal(got, data))
	}
}

// TestUnalignedTailLock: a write lock asked from a size inside a page to
// EOF, which the server cannot grow down past other clients' locks, still
// covers the page holding the size: a truncate and a write there work.
func TestUnalignedTailLock(t *testing.T) {
	_, _, _, _, oa, ob := twoClients(t)
	ctx := ctxT(t, 30*time.Second)
	for i := range uint64(5) {
		if err := ob.LockAhead(ctx, i<<20, (i+1)<<20-1); err != nil {
			t.Fatal(err)
		}
	}
	size := uint64(5<<20 + 6000)
	lk, err := oa.Lock(ctx, true, size, ldlm.EOF)
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(3000, 9)
	if n, err := lk.WriteAt(ctx, data, size); err != nil || n != len(data) {
		t.Fatalf("write at %d under the tail lock: %d %v", size, n, err)
	}
	if err := lk.Truncate(ctx, size+1000); err != nil {
		t.Fatalf("truncate to %d under the tail lock: %v", size+1000, err)
	}
	lk.Release()
	if err := oa.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1000)
	if n, err := ob.ReadAt(ctx, got, size); n != 1000 || !bytes.Equal(got, data[:1000]) {
		t.Fatalf("read back on the other client: %d %v, equal %v", n, err, bytes.Equal(got, data[:1000]))
	}
	if sz, err := ob.Size(ctx); err != nil || sz != size+1000 {
		t.Fatalf("size %d %v, want %d", sz, err, size+1000)
	}
}
