package mdd

import (
	"syscall"
	"testing"
)

func clTypes(recs []ChangelogRecord) []ChangelogType {
	var out []ChangelogType
	for _, r := range recs {
		out = append(out, r.Type)
	}
	return out
}

func TestChangelog(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	create(t, s, root, RootFID, "before", 0o644)
	if recs, _ := s.ChangelogRead(0, 100); len(recs) != 0 || s.ChangelogLast() != 0 {
		t.Fatalf("records with no user: %v", recs)
	}
	u1, err := s.ChangelogRegister()
	if err != nil || u1.Name() != "cl1" {
		t.Fatalf("register = %+v, %v", u1, err)
	}
	d := mkdir(t, s, root, RootFID, "d", 0o755)
	f := create(t, s, root, d, "f", 0o644)
	s.Link(root, f, d, "g")
	s.Symlink(root, d, "l", "f", Spec{})
	s.Mknod(root, d, "p", Spec{Mode: S_IFIFO | 0o644})
	s.Setattr(root, f, SetAttr{Valid: AttrMode, Mode: 0o600})
	s.Setattr(root, f, SetAttr{Valid: AttrSize, Size: 10})
	s.Setxattr(root, f, "user.x", []byte("v"), 0)
	s.Rename(root, d, "g", RootFID, "g2", 0)
	s.Unlink(root, d, "f")
	s.Unlink(root, RootFID, "g2")
	s.SetLayout(root, f, *striped(1)) // fails: f is gone
	s.Rmdir(root, RootFID, "d")       // fails: not empty
	want := []ChangelogType{CLMkdir, CLCreate, CLHardlink, CLSoftlink, CLMknod, CLSetattr, CLTrunc, CLXattr, CLRename, CLUnlink, CLUnlink}
	recs, err := s.ChangelogRead(0, 100)
	if err != nil || len(recs) != len(want) {
		t.Fatalf("records = %v, %v; want types %v", clTypes(recs), err, want)
	}
	for i, r := range recs {
		if r.Type != want[i] || r.Index != uint64(i+1) || r.Time == 0 {
			t.Fatalf("record %d = %v", i, r)
		}
	}
	ren := recs[8]
	if ren.SFID != f || ren.SPFID != d || ren.SName != "g" || ren.PFID != RootFID || ren.Name != "g2" || !ren.TFID.IsZero() {
		t.Fatalf("rename record %v", ren)
	}
	if recs[9].Flags&CLFUnlinkLast != 0 || recs[10].Flags&CLFUnlinkLast == 0 {
		t.Fatalf("unlink flags %#x %#x", recs[9].Flags, recs[10].Flags)
	}
	if recs[1].TFID != f || recs[1].PFID != d || recs[1].Name != "f" {
		t.Fatalf("create record %v", recs[1])
	}
	t.Log(recs[8])
	// A second user starts after the records that exist.
	u2, _ := s.ChangelogRegister()
	if u2.Name() != "cl2" || u2.Cleared != 11 {
		t.Fatalf("cl2 = %+v", u2)
	}
	wantErrno(t, "clear past the end", s.ChangelogClear(u1.ID, 99), syscall.EINVAL)
	wantErrno(t, "clear unknown user", s.ChangelogClear(7, 0), syscall.ENOENT)
	create(t, s, root, RootFID, "after", 0o644) // record 12
	if err := s.ChangelogClear(u1.ID, 5); err != nil {
		t.Fatal(err)
	}
	if recs, _ := s.ChangelogRead(0, 100); len(recs) != 7 || recs[0].Index != 6 {
		t.Fatalf("after cl1 cleared 5: %d records from %d", len(recs), recs[0].Index)
	}
	if err := s.ChangelogClear(u1.ID, 0); err != nil { // everything: but cl2 still needs 12
		t.Fatal(err)
	}
	if recs, _ := s.ChangelogRead(0, 100); len(recs) != 1 || recs[0].Index != 12 {
		t.Fatalf("after cl1 cleared all: %v", clTypes(recs))
	}
	if err := s.ChangelogClear(u2.ID, 12); err != nil {
		t.Fatal(err)
	}
	if recs, _ := s.ChangelogRead(0, 100); len(recs) != 0 {
		t.Fatalf("after both cleared: %v", clTypes(recs))
	}
	check(t, s)
	// Indexes and users survive a restart.
	s.Close()
	s, err = Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	create(t, s, root, RootFID, "restarted", 0o644)
	if recs, _ := s.ChangelogRead(0, 100); len(recs) != 1 || recs[0].Index != 13 {
		t.Fatalf("after restart: %v", recs)
	}
	if users := s.ChangelogUsers(); len(users) != 2 || users[0].Cleared != 12 {
		t.Fatalf("users after restart %+v", users)
	}
	// Deregistering the last users stops recording and purges.
	wantErrno(t, "deregister cl1", s.ChangelogDeregister(u1.ID), 0)
	wantErrno(t, "deregister cl2", s.ChangelogDeregister(u2.ID), 0)
	wantErrno(t, "deregister again", s.ChangelogDeregister(u2.ID), syscall.ENOENT)
	create(t, s, root, RootFID, "unrecorded", 0o644)
	if recs, _ := s.ChangelogRead(0, 100); len(recs) != 0 {
		t.Fatalf("records with no users: %v", recs)
	}
	u3, _ := s.ChangelogRegister()
	if u3.Name() != "cl3" {
		t.Fatalf("ids are not reused: got %s", u3.Name())
	}
	if id, err := ParseChangelogUser("cl3"); err != nil || id != 3 {
		t.Fatalf("parse cl3 = %d, %v", id, err)
	}
	check(t, s)
}
