package mdd

import (
	"errors"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
)

// TestSwapLayouts: two files exchange objects and lazy sizes and keep
// their FIDs and names; both generations go up; bad pairs change nothing.
func TestSwapLayouts(t *testing.T) {
	s := newStore(t)
	a := create(t, s, root, RootFID, "a", 0o644)
	b := create(t, s, root, RootFID, "b", 0o600)
	dir, err := s.Mkdir(root, RootFID, "d", Spec{Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	la, err := s.SetLayout(root, a, plainOn(obj(0, 1), obj(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := s.SetLayout(root, b, plainOn(obj(2, 7)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenFile(root, a, OpenReadWrite); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CloseFile(root, a, CloseInfo{Write: true, LSOM: &LSOM{Size: 4096, Blocks: 8}}); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "with itself", s.SwapLayouts(root, a, a, nil), syscall.EINVAL)
	wantErrno(t, "with a directory", s.SwapLayouts(root, a, dir.FID, nil), syscall.EINVAL)
	wantErrno(t, "without write permission", s.SwapLayouts(user(1000, 1000), a, b, nil), syscall.EACCES)
	if got, _ := s.GetLayout(a); got.Gen != la.Gen {
		t.Fatalf("a failed swap changed a's layout: %+v", got)
	}
	stale := uint64(99)
	wantErrno(t, "with a stale data version", s.SwapLayouts(root, a, b, &stale), syscall.EBUSY)
	h, err := s.GetHSM(a)
	if err != nil {
		t.Fatal(err)
	}
	// Open for write, either file: EBUSY (a writer's dirty pages belong
	// to the objects it wrote them for); open to read, or closed: fine.
	for _, f := range []fid.FID{a, b} {
		for _, mode := range []uint64{OpenWriteOnly, OpenReadWrite} {
			if _, err := s.OpenFile(root, f, mode); err != nil {
				t.Fatal(err)
			}
			wantErrno(t, "with a file open for write", s.SwapLayouts(root, a, b, &h.DataVersion), syscall.EBUSY)
			if _, err := s.CloseFile(root, f, CloseInfo{Write: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, _ := s.GetLayout(a); got.Gen != la.Gen {
		t.Fatalf("a swap refused for a writer changed a's layout: %+v", got)
	}
	if _, err := s.OpenFile(root, a, OpenReadOnly); err != nil {
		t.Fatal(err)
	}
	defer s.CloseFile(root, a, CloseInfo{})
	if err := s.SwapLayouts(root, a, b, &h.DataVersion); err != nil {
		t.Fatalf("with a reader: %v", err)
	}
	ga, err := s.GetLayout(a)
	if err != nil {
		t.Fatal(err)
	}
	gb, err := s.GetLayout(b)
	if err != nil {
		t.Fatal(err)
	}
	objs := func(l layout.Layout) []layout.Object { return l.Components[0].RAID0.Objects }
	if len(objs(ga)) != 1 || objs(ga)[0] != obj(2, 7) || len(objs(gb)) != 2 || objs(gb)[1] != obj(1, 1) {
		t.Fatalf("after the swap a has %v, b has %v", objs(ga), objs(gb))
	}
	if g := max(la.Gen, lb.Gen); ga.Gen <= g || gb.Gen <= g {
		t.Fatalf("generations %d %d not past %d", ga.Gen, gb.Gen, g)
	}
	if l, ok, _ := s.GetLSOM(b); !ok || l.Size != 4096 {
		t.Fatalf("b's lazy size %+v %v, want a's", l, ok)
	}
	if _, ok, _ := s.GetLSOM(a); ok {
		t.Fatal("a kept a lazy size b never had")
	}
	if c, err := s.Lookup(root, RootFID, "a"); err != nil || c.FID != a {
		t.Fatalf("a's name: %v %v", c.FID, err)
	}
	check(t, s)
}

// TestRemoveDefaultLayout: a directory's default goes (lfs setstripe -d)
// and new files there get the file system's; other types and directories
// without one are refused.
func TestRemoveDefaultLayout(t *testing.T) {
	s := newStore(t)
	d, err := s.Mkdir(root, RootFID, "d", Spec{Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	f := create(t, s, root, RootFID, "f", 0o644)
	wantErrno(t, "without a default", s.RemoveDefaultLayout(root, d.FID), syscall.ENODATA)
	wantErrno(t, "of a file", s.RemoveDefaultLayout(root, f), syscall.ENOTDIR)
	if _, err := s.SetLayout(root, d.FID, *striped(2)); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "without write permission", s.RemoveDefaultLayout(user(1000, 1000), d.FID), syscall.EACCES)
	if err := s.RemoveDefaultLayout(root, d.FID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetLayout(d.FID); !errors.Is(err, syscall.ENODATA) {
		t.Fatalf("default layout after removal: %v", err)
	}
	check(t, s)
}

func template(stripes int32) layout.Layout {
	return layout.Plain(layout.RAID0{StripeCount: stripes, StripeSize: 1 << 20, StripeOffset: layout.AnyOffset})
}

// TestDefaultLayout: a create's template is its directory's default, else
// the root's, else none; a directory removed or never made has none.
func TestDefaultLayout(t *testing.T) {
	s := newStore(t)
	d, err := s.Mkdir(root, RootFID, "d", Spec{Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.Mkdir(root, RootFID, "e", Spec{Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	stripes := func(dir fid.FID) int {
		t.Helper()
		l, err := s.DefaultLayout(dir, RootFID)
		if err != nil {
			t.Fatal(err)
		}
		if l == nil {
			return 0
		}
		return int(l.Components[0].RAID0.StripeCount)
	}
	if n := stripes(d.FID); n != 0 {
		t.Fatalf("a default layout (%d stripes) where none was set", n)
	}
	if _, err := s.SetLayout(root, RootFID, template(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetLayout(root, d.FID, template(2)); err != nil {
		t.Fatal(err)
	}
	if n, m := stripes(d.FID), stripes(e.FID); n != 2 || m != 3 {
		t.Fatalf("d's default %d stripes, want its own 2; e's %d, want the root's 3", n, m)
	}
	if err := s.RemoveDefaultLayout(root, d.FID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rmdir(root, RootFID, "e"); err != nil {
		t.Fatal(err)
	}
	if n, m, x := stripes(d.FID), stripes(e.FID), stripes(fid.FID{Seq: 0x200000401, Oid: 77}); n != 3 || m != 3 || x != 3 {
		t.Fatalf("after removal: d %d, removed e %d, unknown FID %d stripes, want the root's 3", n, m, x)
	}
}

// TestOpenFailureCountsNothing: an open that fails after its checks (its
// LSOM record does not read) leaves no open, nor open for write, counted:
// no close will come for it, and a counted writer refused every swap of
// the file until the MDT restarted.
func TestOpenFailureCountsNothing(t *testing.T) {
	s := newStore(t)
	a := create(t, s, root, RootFID, "a", 0o644)
	b := create(t, s, root, RootFID, "b", 0o644)
	if err := s.db.Set(fidKey(pfxLSOM, a), []byte{0xff}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.cache.reset()
	if _, err := s.OpenFile(root, a, OpenReadWrite); err == nil {
		t.Fatal("open with a bad LSOM record succeeded")
	}
	if n := s.OpenCount(a); n != 0 {
		t.Errorf("a failed open left %d opens counted", n)
	}
	if err := s.db.Delete(fidKey(pfxLSOM, a), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.cache.reset()
	if err := s.SwapLayouts(root, a, b, nil); err != nil {
		t.Errorf("swap after a failed open for write: %v", err)
	}
}

// TestCloseFailureEndsOpen: a close that fails (the file's HSM record does
// not read) still ends the open: the MDT has dropped the handle and the
// client forgot it, so no other close will come, and a writer left
// counted refused every swap of the file until the MDT restarted.
func TestCloseFailureEndsOpen(t *testing.T) {
	s := newStore(t)
	a := create(t, s, root, RootFID, "a", 0o644)
	b := create(t, s, root, RootFID, "b", 0o644)
	if _, err := s.OpenFile(root, a, OpenWriteOnly); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set(fidKey(pfxHSM, a), []byte{0xff}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.cache.reset()
	if _, err := s.CloseFile(root, a, CloseInfo{Write: true, LSOM: &LSOM{Size: 1, Blocks: 1}}); err == nil {
		t.Fatal("close with a bad HSM record succeeded")
	}
	if err := s.db.Delete(fidKey(pfxHSM, a), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.cache.reset()
	if n := s.OpenCount(a); n != 0 {
		t.Errorf("a failed close left %d opens counted", n)
	}
	if err := s.SwapLayouts(root, a, b, nil); err != nil {
		t.Errorf("swap after the writer's (failed) close: %v", err)
	}
}

// TestSwapLayoutsReplayWithWriter: a replayed swap goes through with a
// file open for write: it was allowed when first made, and a writer's
// replayed open may come before it though the writer opened after it.
func TestSwapLayoutsReplayWithWriter(t *testing.T) {
	s := newStore(t)
	a := create(t, s, root, RootFID, "a", 0o644)
	b := create(t, s, root, RootFID, "b", 0o644)
	if _, err := s.OpenFile(root, a, OpenWriteOnly|OpenReplay); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "with a writer", s.SwapLayouts(root, a, b, nil), syscall.EBUSY)
	replay := root
	replay.Replay = true
	if err := s.SwapLayouts(replay, a, b, nil); err != nil {
		t.Fatalf("replayed, with a writer: %v", err)
	}
	if _, err := s.CloseFile(root, a, CloseInfo{Write: true}); err != nil {
		t.Fatal(err)
	}
}

// TestRecoveryKeepsOrphans: between BeginRecovery and DestroyOrphans the
// open counts may miss opens clients have not replayed yet, so nothing
// that an open would stop happens: an unlink of the last link or the
// last close of an orphan keeps the file as an orphan (objects and all),
// a swap of layouts (but a replayed one) and an HSM release are refused.
// DestroyOrphans ends it and destroys the orphans nobody reopened.
func TestRecoveryKeepsOrphans(t *testing.T) {
	s := newStore(t)
	a := create(t, s, root, RootFID, "a", 0o644)
	b := create(t, s, root, RootFID, "b", 0o644)
	c := create(t, s, root, RootFID, "c", 0o644)
	for _, f := range []fid.FID{a, b, c} {
		if _, err := s.SetLayout(root, f, plainOn(obj(0, f.Oid))); err != nil {
			t.Fatal(err)
		}
	}
	// c: archived, clean, closed: releasable but for recovery.
	if _, err := s.HSMProgress(root, c, HSMActionArchive, 1, 0); err != nil {
		t.Fatal(err)
	}
	// b: an orphan whose only counted open is about to close.
	if _, err := s.OpenFile(root, b, OpenReadOnly); err != nil {
		t.Fatal(err)
	}
	if rm, err := s.Unlink(root, RootFID, "b"); err != nil || !rm.Orphan {
		t.Fatalf("unlink of an open file: %+v %v", rm, err)
	}

	s.BeginRecovery()
	if rm, err := s.Unlink(root, RootFID, "a"); err != nil || !rm.Orphan || rm.Destroyed {
		t.Fatalf("unlink in recovery of a file nobody has open (yet): %+v %v, want an orphan", rm, err)
	}
	if rm, err := s.CloseFile(root, b, CloseInfo{}); err != nil || rm.Destroyed {
		t.Fatalf("last counted close of an orphan in recovery: %+v %v, want it kept", rm, err)
	}
	d := create(t, s, root, RootFID, "d", 0o644)
	wantErrno(t, "swap in recovery", s.SwapLayouts(root, c, d, nil), syscall.EBUSY)
	replay := root
	replay.Replay = true
	if err := s.SwapLayouts(replay, c, d, nil); err != nil {
		t.Fatalf("a replayed swap in recovery: %v", err)
	}
	if err := s.SwapLayouts(replay, c, d, nil); err != nil { // and back
		t.Fatal(err)
	}
	_, _, err := s.HSMRelease(root, c, 0)
	wantErrno(t, "release in recovery", err, syscall.EBUSY)
	for _, f := range []fid.FID{a, b} {
		if _, err := s.GetLayout(f); err != nil {
			t.Fatalf("the orphan %v lost its layout in recovery: %v", f, err)
		}
	}

	// A client reopens a (a replayed open); recovery ends.
	if _, err := s.OpenFile(root, a, OpenReadWrite|OpenReplay); err != nil {
		t.Fatal(err)
	}
	rms, err := s.DestroyOrphans(root)
	if err != nil || len(rms) != 1 || rms[0].FID != b || !rms[0].Destroyed || rms[0].Layout == nil {
		t.Fatalf("end of recovery: %+v %v, want b destroyed with its layout", rms, err)
	}
	if rm, err := s.CloseFile(root, a, CloseInfo{Write: true}); err != nil || !rm.Destroyed {
		t.Fatalf("last close of the reopened orphan after recovery: %+v %v", rm, err)
	}
	if _, destroyed, err := s.HSMRelease(root, c, 0); err != nil || !destroyed {
		t.Fatalf("release after recovery: %v %v", destroyed, err)
	}
	if err := s.SwapLayouts(root, c, d, nil); err != nil {
		t.Fatalf("swap after recovery: %v", err)
	}
	check(t, s)
}

// TestCloseTimesOlderThanChange: the times a writer's close brings (its
// writes') do not overwrite a change made after the writes, such as an
// explicit mtime in the past, which the close can reach the MDT after
// (the kernel releases a file after close(2) returns); a close with
// times newer than the inode's ctime sets them.
func TestCloseTimesOlderThanChange(t *testing.T) {
	s := newStore(t)
	f := create(t, s, root, RootFID, "f", 0o644)
	for _, c := range []struct {
		name                string
		utimeMtime, utimeAt int64 // the utime's mtime and ctime
		closeAt, wantMtime  int64
	}{
		{"close after a later utime", -5, 2500, 2000, -5},
		{"close newer than the utime", 3000, 3000, 4000, 4000},
	} {
		if _, err := s.OpenFile(root, f, OpenWriteOnly); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Setattr(root, f, SetAttr{Valid: AttrMtime | AttrCtime, Mtime: c.utimeMtime, Ctime: c.utimeAt}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CloseFile(root, f, CloseInfo{Write: true, Written: true, Mtime: c.closeAt, Ctime: c.closeAt}); err != nil {
			t.Fatal(err)
		}
		a, err := s.Getattr(f)
		if err != nil {
			t.Fatal(err)
		}
		if a.Mtime != c.wantMtime {
			t.Errorf("%s: mtime %d, want %d", c.name, a.Mtime, c.wantMtime)
		}
	}
}
