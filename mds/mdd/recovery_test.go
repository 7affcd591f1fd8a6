package mdd

import (
	"syscall"
	"testing"

	"github.com/nacrefs/nacre/internal/fid"
)

// TestDestroyOrphansCloseRace: when recovery ends, DestroyOrphans lists
// the orphans, then destroys those not open one by one. An orphan open at
// the listing (a client replayed its open) whose last close comes before
// DestroyOrphans reaches it is destroyed by that close (recovery is over).
// DestroyOrphans must pass over it and still destroy the others: it gave
// up at the first orphan gone (ENOENT), leaving every orphan after it,
// made by unlinks in the whole window, with its objects until the next
// restart.
func TestDestroyOrphansCloseRace(t *testing.T) {
	s := newStore(t)
	var fs []fid.FID
	for _, name := range []string{"a", "b", "c", "d"} {
		fs = append(fs, create(t, s, root, RootFID, name, 0o644))
	}
	s.BeginRecovery()
	// The first orphan in key order is open (a replayed open); the rest
	// were unlinked in the window by clients that had them closed.
	first := fs[0]
	for _, f := range fs[1:] {
		if f.Seq < first.Seq || f.Seq == first.Seq && f.Oid < first.Oid {
			first = f
		}
	}
	if _, err := s.OpenFile(root, first, OpenReadOnly|OpenReplay); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		if rm, err := s.Unlink(root, RootFID, name); err != nil || !rm.Orphan {
			t.Fatalf("unlink %s in recovery: %+v %v", name, rm, err)
		}
	}
	testHookOrphansListed = func() {
		// The client closes the file as recovery ends.
		if rm, err := s.CloseFile(root, first, CloseInfo{}); err != nil || !rm.Destroyed {
			t.Errorf("last close after recovery: %+v %v", rm, err)
		}
	}
	defer func() { testHookOrphansListed = nil }()
	rms, err := s.DestroyOrphans(root)
	if err != nil || len(rms) != 3 {
		t.Errorf("DestroyOrphans: %d destroyed, %v; want the 3 not open", len(rms), err)
	}
	if o, err := s.Orphans(); err != nil || len(o) != 0 {
		t.Errorf("orphans left after recovery: %v %v", o, err)
	}
	check(t, s)
}

// TestReplayedReleaseInRecovery: in recovery the store cannot know which
// files clients still have open (their opens are replayed later), so a
// new release is refused; a replayed one, checked when it was first made,
// goes through. It was refused too, and the release lost.
func TestReplayedReleaseInRecovery(t *testing.T) {
	s := newStore(t)
	a, err := s.Create(root, RootFID, "f", Spec{Mode: 0o644, Layout: striped(7)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.HSMProgress(root, a.FID, HSMActionArchive, 1, 0); err != nil {
		t.Fatal(err)
	}
	s.BeginRecovery()
	_, _, err = s.HSMRelease(root, a.FID, 100)
	wantErrno(t, "a new release in recovery", err, syscall.EBUSY)
	replay := root
	replay.Replay = true
	if h, destroyed, err := s.HSMRelease(replay, a.FID, 100); err != nil || !destroyed || h.Flags&HSMReleased == 0 {
		t.Fatalf("a replayed release in recovery: %+v %v %v", h, destroyed, err)
	}
	check(t, s)
}
