package osc_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/osc"
	"github.com/nacrefs/nacre/ldlm"
)

// TestGlimpseDuringFlushSeesTheWrite: a stat on another client while the
// writer's lock is being called back (its dirty pages on their way to the
// OST, which still lists the lock) sees the size of the write, which
// returned before the stat began: the writer's glimpse answer still
// counts the lock whose pages are not on the OST yet.
func TestGlimpseDuringFlushSeesTheWrite(t *testing.T) {
	_, a, _, _, oa, ob := twoClients(t)
	ctx := ctxT(t, time.Minute)
	data := pattern(64<<10, 5)
	if _, err := oa.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	// a's flush cannot start: its blocking hook waits with the pages dirty.
	release := osc.HoldWriteSlots(a.OSCs[0])
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	bl := a.Locks.Stats().BlockingASTs
	wrote := make(chan error, 1)
	go func() {
		_, err := ob.WriteAt(ctx, pattern(4096, 6), 1<<20)
		wrote <- err
	}()
	for a.Locks.Stats().BlockingASTs == bl {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the hook is flushing
	szA, errA := oa.Size(ctx)
	szB, errB := ob.Size(ctx)
	release()
	released = true
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if errA != nil || errB != nil || szA != uint64(len(data)) || szB != uint64(len(data)) {
		t.Fatalf("size during the writer's flush: %d %v on the writer, %d %v elsewhere; want %d", szA, errA, szB, errB, len(data))
	}
	got := make([]byte, len(data))
	if _, err := ob.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after the flush: %v (equal %v)", err, bytes.Equal(got, data))
	}
}

// TestReadAheadDuringTruncate: read-ahead of a reader sharing the
// truncater's write lock, issued after the truncate dropped the pages past
// the new size and before its punch, caches nothing there: the old bytes
// it would read would come back as data once the object grows again.
func TestReadAheadDuringTruncate(t *testing.T) {
	_, _, _, _, oa, ob := twoClients(t)
	ctx := ctxT(t, time.Minute)
	const n = 256 << 10
	if _, err := ob.WriteAt(ctx, pattern(n, 7), 0); err != nil {
		t.Fatal(err)
	}
	if err := ob.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	lk, err := oa.Lock(ctx, true, 0, ldlm.EOF)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release()
	osc.OnTruncating(func(o *osc.Object, punched bool) {
		if o == oa && !punched {
			osc.ReadAheadNow(lk, 0, n)
		}
	})
	err = lk.Truncate(ctx, 0)
	osc.OnTruncating(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Truncate(ctx, n); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if _, err := lk.ReadAt(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	if i := bytes.IndexFunc(got, func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("byte %d after truncating to 0 and back to %d is not zero: the old data was cached", i, n)
	}
}

// TestIOUnderEvictedLock: a reader holding a lock that an eviction drops
// caches nothing under it afterwards: pages filled then would have no lock
// to call them back, and a later read would return them after another
// client's write.
func TestIOUnderEvictedLock(t *testing.T) {
	c, a, _, _, oa, ob := twoClients(t)
	ctx := ctxT(t, time.Minute)
	lk, err := oa.Lock(ctx, false, 0, ldlm.EOF)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release()
	if err := c.OSS.OSTs()[0].Target().Evict("client-0"); err != nil {
		t.Fatal(err)
	}
	imp := a.OSCs[0].Import()
	for {
		if _, err := a.OSCs[0].Statfs(ctx); err != nil && ctx.Err() != nil {
			t.Fatal(err)
		}
		if n, _ := a.Locks.NamespaceStats(imp); n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the hooks have run
	old, cur := pattern(4096, 11), pattern(4096, 12)
	if _, err := ob.WriteAt(ctx, old, 0); err != nil {
		t.Fatal(err)
	}
	if err := ob.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4096)
	_, err = lk.ReadAt(ctx, got, 0)
	t.Logf("read under the evicted lock: %v", err)
	if _, err := ob.WriteAt(ctx, cur, 0); err != nil {
		t.Fatal(err)
	}
	if err := ob.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	lk.Release()
	if _, err := oa.ReadAt(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, cur) {
		t.Fatalf("read after another client's write returns stale bytes (old %v)", bytes.Equal(got, old))
	}
}

// TestGlimpseDuringTruncate: a glimpse answered by a client truncating
// the object once its punch is done tells the new size, not the old: the
// lock server keeps the largest size it hears, and a stat elsewhere would
// see the old size after the truncate returned, until the next write.
func TestGlimpseDuringTruncate(t *testing.T) {
	_, _, _, _, oa, ob := twoClients(t)
	ctx := ctxT(t, time.Minute)
	const n = 256 << 10
	if _, err := oa.WriteAt(ctx, pattern(n, 13), 0); err != nil {
		t.Fatal(err)
	}
	if err := oa.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var during uint64
	var derr error
	osc.OnTruncating(func(o *osc.Object, punched bool) {
		if o == oa && punched {
			during, derr = ob.Size(ctx)
		}
	})
	err := oa.Truncate(ctx, 0)
	osc.OnTruncating(nil)
	if err != nil {
		t.Fatal(err)
	}
	sz, err := ob.Size(ctx)
	if err != nil || derr != nil || sz != 0 {
		t.Fatalf("size after a truncate to 0 elsewhere: %d %v (during it: %d %v)", sz, err, during, derr)
	}
}
