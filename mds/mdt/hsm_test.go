package mdt

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/mds/mdd"
)

// TestHSMWriterGoneMarksDirty: a client that had an archived file open
// for write and went away without closing it (crashed, evicted) may have
// written to its objects; no close brings a size, so the MDT counts the
// data as changed when it ends the open (Lustre's mdt_export_cleanup adds
// the dirty flag): the archive copy is stale and the file cannot be
// released, its new data dropped.
func TestHSMWriterGoneMarksDirty(t *testing.T) {
	c := newCluster(t, 1, nil)
	ctx := ctxT(t, time.Minute)
	n := c.client()
	f, dv := archivedFile(ctx, t, n)
	w := c.client()
	if _, err := w.mdc.OpenFID(ctx, root, f.FID, syscall.O_WRONLY); err != nil {
		t.Fatal(err)
	}
	// Readers that go away change nothing.
	if _, err := w.mdc.OpenFID(ctx, root, f.FID, syscall.O_RDONLY); err != nil {
		t.Fatal(err)
	}
	w.imp.Close(ctx)
	for deadline := time.Now().Add(10 * time.Second); c.mdt.Stats().Opens != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the departed writer's open stayed: %d opens", c.mdt.Stats().Opens)
		}
	}
	h, err := c.mdt.Store().HSMState(f.FID)
	if err != nil {
		t.Fatal(err)
	}
	if h.Flags != mdd.HSMExists|mdd.HSMArchived|mdd.HSMDirty || h.DataVersion != dv+1 {
		t.Fatalf("after the writer went without a close: %+v, want dirty at data version %d", h, dv+1)
	}
	_, err = n.mdc.HSMRelease(ctx, root, f.FID, 10)
	wantErrno(t, "release after the writer went", err, syscall.EBUSY)
}

// TestHSMCloseWithoutSizeMarksDirty: a writer's close that brings no size
// (its client could not read it from the objects) but says it wrote moves
// the data version and marks an archived file dirty: its archive copy is
// stale, and a release would drop the new data. A close of an open for
// write that wrote nothing changes nothing.
func TestHSMCloseWithoutSizeMarksDirty(t *testing.T) {
	c := newCluster(t, 1, nil)
	ctx := ctxT(t, time.Minute)
	n := c.client()
	f, dv := archivedFile(ctx, t, n)
	for _, written := range []bool{false, true} {
		w, err := n.mdc.OpenFID(ctx, root, f.FID, syscall.O_WRONLY)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.mdc.CloseWritten(ctx, root, w, nil, written, 0, 0); err != nil {
			t.Fatal(err)
		}
		h, err := c.mdt.Store().HSMState(f.FID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case !written && (h.DataVersion != dv || h.Flags&mdd.HSMDirty != 0):
			t.Fatalf("a writer's close that wrote nothing changed %+v (data version was %d)", h, dv)
		case written && (h.DataVersion != dv+1 || h.Flags&mdd.HSMDirty == 0):
			t.Fatalf("after a write closed without a size: %+v, want dirty at data version %d", h, dv+1)
		}
	}
	_, err := n.mdc.HSMRelease(ctx, root, f.FID, 10)
	wantErrno(t, "release after a write closed without a size", err, syscall.EBUSY)
}

// archivedFile makes file f of 10 bytes through n, archived, and returns
// it with its data version.
func archivedFile(ctx context.Context, t *testing.T, n *node) (*mdc.File, uint64) {
	t.Helper()
	f, err := n.mdc.Open(ctx, root, n.root, "f", syscall.O_CREAT|syscall.O_RDWR, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.mdc.CloseWritten(ctx, root, f, &mdc.LSOM{Size: 10, Blocks: 1}, true, 0, 0); err != nil {
		t.Fatal(err)
	}
	st, err := n.mdc.HSMState(ctx, root, f.FID)
	if err != nil {
		t.Fatal(err)
	}
	if st, err = n.mdc.HSMProgress(ctx, root, f.FID, mdc.HSMActionArchive, 1, st.DataVersion); err != nil || st.Flags != mdc.HSMExists|mdc.HSMArchived {
		t.Fatalf("archive: %+v %v", st, err)
	}
	return f, st.DataVersion
}
