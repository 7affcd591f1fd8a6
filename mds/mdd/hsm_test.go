package mdd

import (
	"syscall"
	"testing"
)

// TestHSMRules: data versions and dirty, archive completion, release
// (objects to the destroy log, size kept) and its refusals, restore and
// remove completions, flags set and clear, bad input.
func TestHSMRules(t *testing.T) {
	s := newStore(t)
	root := Req{Cred: Root()}
	a, err := s.Create(root, RootFID, "f", Spec{Mode: 0o644, Layout: striped(7)})
	if err != nil {
		t.Fatal(err)
	}
	f := a.FID
	dir := mkdir(t, s, root, RootFID, "d", 0o755)
	state := func() HSM {
		t.Helper()
		h, err := s.HSMState(f)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	write := func() {
		t.Helper()
		if _, err := s.OpenFile(root, f, OpenWriteOnly); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CloseFile(root, f, CloseInfo{Write: true, LSOM: &LSOM{Size: 100, Blocks: 1}}); err != nil {
			t.Fatal(err)
		}
	}

	_, _, err = s.HSMRelease(root, f, 100)
	wantErrno(t, "release of a never-archived file", err, syscall.EPERM)
	write()
	if h := state(); h.DataVersion != 1 || h.Flags != 0 {
		t.Fatalf("after a write: %+v", h)
	}
	if _, err := s.HSMProgress(root, f, HSMActionArchive, 1, 1); err != nil {
		t.Fatal(err)
	}
	if h := state(); h.Flags != HSMExists|HSMArchived || h.ArchiveID != 1 || h.ArchivedVersion != 1 {
		t.Fatalf("after archive: %+v", h)
	}
	write()
	if h := state(); h.Flags != HSMExists|HSMArchived|HSMDirty {
		t.Fatalf("written after archive: %+v", h)
	}
	_, _, err = s.HSMRelease(root, f, 100)
	wantErrno(t, "release of a dirty file", err, syscall.EBUSY)
	// An archive of an old version leaves it dirty.
	if h, err := s.HSMProgress(root, f, HSMActionArchive, 1, 1); err != nil || h.Flags&HSMDirty == 0 {
		t.Fatalf("stale archive: %+v %v", h, err)
	}
	if h, err := s.HSMProgress(root, f, HSMActionArchive, 1, 2); err != nil || h.Flags != HSMExists|HSMArchived {
		t.Fatalf("current archive: %+v %v", h, err)
	}
	// A late report of a copy older than the one recorded (an attempt
	// canceled, then overtaken) is refused and changes nothing.
	_, err = s.HSMProgress(root, f, HSMActionArchive, 1, 1)
	wantErrno(t, "archive report older than the recorded copy", err, syscall.ESTALE)
	if h := state(); h.Flags != HSMExists|HSMArchived || h.ArchivedVersion != 2 {
		t.Fatalf("after a stale archive report: %+v", h)
	}
	if _, err := s.OpenFile(root, f, OpenReadOnly); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.HSMRelease(root, f, 100)
	wantErrno(t, "release of an open file", err, syscall.EBUSY)
	if _, err := s.CloseFile(root, f, CloseInfo{}); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.HSMRelease(user(1000, 1000), f, 100)
	wantErrno(t, "release by another user", err, syscall.EPERM)
	h, destroyed, err := s.HSMRelease(root, f, 12345)
	if err != nil || !destroyed || h.Flags != HSMExists|HSMArchived|HSMReleased {
		t.Fatalf("release: %+v %v %v", h, destroyed, err)
	}
	if l, err := s.GetLayout(f); err != nil || hasObjects(&l) || l.Components[0].StripeCount != 2 {
		t.Fatalf("released layout %v %v", l, err)
	}
	if a := getattr(t, s, f); a.Size != 12345 {
		t.Fatalf("released size %d", a.Size)
	}
	if recs, err := s.PendingDestroys(0, 10); err != nil || len(recs) != 1 || recs[0].FID != f {
		t.Fatalf("destroy log %v %v", recs, err)
	}
	if _, _, err := s.HSMRelease(root, f, 1); err != nil {
		t.Fatalf("second release: %v", err)
	}
	_, err = s.HSMProgress(root, f, HSMActionRemove, 0, 0)
	wantErrno(t, "remove of a released file's copy", err, syscall.EBUSY)
	_, err = s.HSMProgress(root, f, HSMActionRestore, 0, 0)
	wantErrno(t, "restore completion without objects", err, syscall.EINVAL)
	if _, err := s.SetLayout(root, f, *striped(8)); err != nil {
		t.Fatal(err)
	}
	write() // the copytool's writes
	if h, err := s.HSMProgress(root, f, HSMActionRestore, 0, 0); err != nil || h.Flags != HSMExists|HSMArchived || h.DataVersion != h.ArchivedVersion {
		t.Fatalf("restore: %+v %v", h, err)
	}
	_, err = s.HSMProgress(user(1000, 1000), f, HSMActionRemove, 0, 0)
	wantErrno(t, "progress by a user", err, syscall.EPERM)
	if h, err := s.HSMProgress(root, f, HSMActionRemove, 0, 0); err != nil || h.Flags != 0 {
		t.Fatalf("remove: %+v %v", h, err)
	}
	if h, err := s.HSMSetFlags(root, f, HSMExists|HSMNoRelease, 0, 3); err != nil || h.Flags != HSMExists|HSMNoRelease || h.ArchiveID != 3 {
		t.Fatalf("hsm_set: %+v %v", h, err)
	}
	_, err = s.HSMSetFlags(root, f, HSMReleased, 0, 0)
	wantErrno(t, "hsm_set released", err, syscall.EINVAL)
	_, err = s.HSMSetFlags(root, f, HSMArchived, HSMExists, 0)
	wantErrno(t, "archived without exists", err, syscall.EINVAL)
	_, err = s.HSMSetFlags(root, dir, HSMExists, 0, 0)
	wantErrno(t, "hsm_set on a directory", err, syscall.EINVAL)
	_, err = s.HSMState(dir)
	wantErrno(t, "hsm state of a directory", err, syscall.EINVAL)
	if h := state(); h.Flags != HSMExists|HSMNoRelease {
		t.Fatalf("after refused changes: %+v", h)
	}
}
