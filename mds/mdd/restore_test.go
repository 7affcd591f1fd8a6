package mdd

import (
	"syscall"
	"testing"
)

// TestRestorePastFlagsOnly: an HSM restore (OpenRestore, a layout set
// under Req.Restore) gets past a released file's immutable flag, and
// nothing else: a caller with CAP_SYS_ADMIN but not CAP_DAC_OVERRIDE
// still needs write permission by the mode bits, as any open for write.
func TestRestorePastFlagsOnly(t *testing.T) {
	s := newStore(t)
	root := Req{Cred: Root()}
	a, err := s.Create(root, RootFID, "f", Spec{Mode: 0o600, Layout: striped(7)})
	if err != nil {
		t.Fatal(err)
	}
	f := a.FID
	if _, err := s.Setattr(root, f, SetAttr{Valid: AttrUID | AttrGID, UID: 1000, GID: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenFile(root, f, OpenWriteOnly); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CloseFile(root, f, CloseInfo{Write: true, LSOM: &LSOM{Size: 100, Blocks: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.HSMProgress(root, f, HSMActionArchive, 1, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.HSMRelease(root, f, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Setattr(root, f, SetAttr{Valid: AttrFlags, Flags: FlagImmutable}); err != nil {
		t.Fatal(err)
	}
	admin := Req{Cred: Cred{UID: 2000, GID: 2000, Cap: CapSysAdmin}}
	_, err = s.OpenFile(admin, f, OpenWriteOnly|OpenRestore)
	wantErrno(t, "restore open of another's 0600 file without CAP_DAC_OVERRIDE", err, syscall.EACCES)
	lr := admin
	lr.Restore = true
	_, err = s.SetLayout(lr, f, *striped(8))
	wantErrno(t, "restore layout of another's 0600 file without CAP_DAC_OVERRIDE", err, syscall.EACCES)

	// The owner with CAP_SYS_ADMIN, or root, restores past the flag.
	owner := Req{Cred: Cred{UID: 1000, GID: 1000, Cap: CapSysAdmin}}
	if _, err := s.OpenFile(owner, f, OpenWriteOnly|OpenRestore); err != nil {
		t.Fatalf("restore open by the owner: %v", err)
	}
	if _, err := s.CloseFile(owner, f, CloseInfo{}); err != nil {
		t.Fatal(err)
	}
	lr = owner
	lr.Restore = true
	if _, err := s.SetLayout(lr, f, *striped(8)); err != nil {
		t.Fatalf("restore layout by the owner: %v", err)
	}
	// Without the restore, the flag holds.
	_, err = s.OpenFile(owner, f, OpenWriteOnly)
	wantErrno(t, "open for write of an immutable file", err, syscall.EPERM)
}
