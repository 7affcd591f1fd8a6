package osc_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/internal/clienttest"
	"github.com/nacrefs/nacre/client/osc"
)

// TestDestroyCallsBackLocks: the OST destroys objects clients cache, as
// after an unlink: one a writer holds dirty pages of under its write
// lock, one a reader caches clean pages of under a read lock. The
// destroys call the locks back with DiscardData: the writer drops its
// dirty pages unwritten, and neither client keeps pages or locks of the
// objects; nobody is evicted, and the writer's dirty data of a third
// object stays and reaches its OST.
func TestDestroyCallsBackLocks(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 1, Nodes: 2})
	cfg := osc.DefaultConfig()
	cfg.DirtyExpire = time.Hour // dirty pages stay dirty until the destroy
	w, r := newNode(t, c, 0, cfg).OSCs[0], newNode(t, c, 1, cfg).OSCs[0]
	ctx := ctxT(t, time.Minute)
	dirty, cached, kept := precreate(t, c, 0), precreate(t, c, 0), precreate(t, c, 0)

	// The reader caches a MiB the writer wrote (the writer's lock goes).
	wc := w.Open(cached)
	defer wc.Close()
	if _, err := wc.WriteAt(ctx, pattern(1<<20, 1), 0); err != nil {
		t.Fatal(err)
	}
	rc := r.Open(cached)
	defer rc.Close()
	buf := make([]byte, 1<<20)
	if _, err := rc.ReadAt(ctx, buf, 0); err != nil || !bytes.Equal(buf, pattern(1<<20, 1)) {
		t.Fatalf("read: %v", err)
	}
	// The writer dirties a MiB of another object (less than an RPC: it
	// waits), and some of a third that must stay.
	wd := w.Open(dirty)
	defer wd.Close()
	if _, err := wd.WriteAt(ctx, pattern(1<<20, 2), 8<<20); err != nil {
		t.Fatal(err)
	}
	wk := w.Open(kept)
	defer wk.Close()
	keptData := pattern(64<<10, 3)
	if _, err := wk.WriteAt(ctx, keptData, 0); err != nil {
		t.Fatal(err)
	}
	w0, r0 := w.Stats(), r.Stats()
	if w0.DirtyBytes < 1<<20 {
		t.Fatalf("%d dirty bytes before the destroy", w0.DirtyBytes)
	}

	if err := c.Destroy(ctx, 0, dirty); err != nil {
		t.Fatal(err)
	}
	if err := c.Destroy(ctx, 0, cached); err != nil {
		t.Fatal(err)
	}
	ws, rs := w.Stats(), r.Stats()
	if d := ws.DiscardedLocks - w0.DiscardedLocks; d != 1 {
		t.Errorf("the writer's locks called back to discard: %d, want 1", d)
	}
	if d := rs.DiscardedLocks - r0.DiscardedLocks; d != 1 {
		t.Errorf("the reader's locks called back to discard: %d, want 1", d)
	}
	if got := ws.DiscardedPages; got != 1<<20/osc.PageSize {
		t.Errorf("the writer discarded %d dirty pages, want %d", got, 1<<20/osc.PageSize)
	}
	if ws.LostPages != 0 || ws.WriteRPCs != w0.WriteRPCs {
		t.Errorf("writer: %d pages lost, %d write RPCs during the destroy; want none", ws.LostPages, ws.WriteRPCs-w0.WriteRPCs)
	}
	if ws.DirtyBytes != int64(len(keptData)) {
		t.Errorf("%d dirty bytes charged after the destroy, want the other object's %d", ws.DirtyBytes, len(keptData))
	}
	for name, o := range map[string]*osc.Client{"writer": w, "reader": r} {
		if st := o.Import().Info().State; st.String() != "FULL" {
			t.Errorf("%s's import %v after the destroy", name, st)
		}
	}
	// The third object's dirty data reaches its OST.
	if err := wk.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	rk := r.Open(kept)
	defer rk.Close()
	got := make([]byte, len(keptData))
	if _, err := rk.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, keptData) {
		t.Fatalf("the other object after the destroy: %v, bytes equal %v", err, bytes.Equal(got, keptData))
	}
}
