package mdd

import (
	"errors"
	"reflect"
	"syscall"
	"testing"
)

func TestSticky(t *testing.T) {
	s := newStore(t)
	tmp := mkdir(t, s, root, RootFID, "tmp", 0o1777)
	alice, bob, carol := user(1001, 100), user(1002, 100), user(1003, 100)
	create(t, s, alice, tmp, "a1", 0o666)
	create(t, s, alice, tmp, "a2", 0o666)
	create(t, s, alice, tmp, "a3", 0o666)
	create(t, s, bob, tmp, "b1", 0o666)
	_, err := s.Unlink(bob, tmp, "a1")
	wantErrno(t, "bob unlinks alice's file in /tmp", err, syscall.EPERM)
	_, err = s.Rename(bob, tmp, "a1", tmp, "mine", 0)
	wantErrno(t, "bob renames alice's file", err, syscall.EPERM)
	_, err = s.Rename(bob, tmp, "b1", tmp, "a1", 0)
	wantErrno(t, "bob renames over alice's file", err, syscall.EPERM)
	_, err = s.Unlink(alice, tmp, "a1")
	wantErrno(t, "alice unlinks her file", err, 0)
	_, err = s.Unlink(root, tmp, "a2")
	wantErrno(t, "root unlinks alice's file", err, 0)
	// The owner of the sticky directory may remove anything in it.
	own := mkdir(t, s, carol, tmp, "carols", 0o1777)
	create(t, s, alice, own, "a", 0o666)
	_, err = s.Unlink(carol, own, "a")
	wantErrno(t, "directory owner unlinks", err, 0)
	// Without the sticky bit, write permission on the directory suffices.
	pub := mkdir(t, s, root, RootFID, "pub", 0o777)
	create(t, s, alice, pub, "a", 0o600)
	_, err = s.Unlink(bob, pub, "a")
	wantErrno(t, "bob unlinks in a plain 0777 dir", err, 0)
}

func TestSetgidInheritance(t *testing.T) {
	s := newStore(t)
	proj := mkdir(t, s, root, RootFID, "proj", 0o2777)
	if _, err := s.Setattr(root, proj, SetAttr{Valid: AttrGID, GID: 500}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Setattr(root, proj, SetAttr{Valid: AttrMode, Mode: 0o2777}); err != nil {
		t.Fatal(err)
	}
	u := user(1000, 1000) // not in group 500
	f, err := s.Create(u, proj, "f", Spec{Mode: 0o2755})
	if err != nil || f.GID != 500 || f.Mode&S_ISGID != 0 {
		t.Fatalf("file in setgid dir = gid %d mode %#o, %v; want gid 500, setgid dropped", f.GID, f.Mode, err)
	}
	member := user(1001, 1000, 500)
	g, err := s.Create(member, proj, "g", Spec{Mode: 0o2755})
	if err != nil || g.GID != 500 || g.Mode&S_ISGID == 0 {
		t.Fatalf("file by a member = gid %d mode %#o, %v; want setgid kept", g.GID, g.Mode, err)
	}
	d, err := s.Mkdir(u, proj, "sub", Spec{Mode: 0o755})
	if err != nil || d.GID != 500 || d.Mode&S_ISGID == 0 {
		t.Fatalf("subdir = gid %d mode %#o, %v; want gid 500 and setgid", d.GID, d.Mode, err)
	}
	dd, err := s.Mkdir(u, d.FID, "subsub", Spec{Mode: 0o700})
	if err != nil || dd.GID != 500 || dd.Mode&S_ISGID == 0 {
		t.Fatalf("sub-subdir = gid %d mode %#o, %v", dd.GID, dd.Mode, err)
	}
	_, err = s.Create(u, RootFID, "x", Spec{})
	wantErrno(t, "create in the root as a user", err, syscall.EACCES)
}

func TestChmodChownUtimes(t *testing.T) {
	s := newStore(t)
	pub := mkdir(t, s, root, RootFID, "pub", 0o777)
	owner := user(1000, 1000, 2000)
	other := user(1001, 1001)
	f := create(t, s, owner, pub, "f", 0o644)
	tests := []struct {
		name string
		r    Req
		sa   SetAttr
		want syscall.Errno
		mode uint32 // expected permission bits after, if no error
	}{
		{"owner chmod", owner, SetAttr{Valid: AttrMode, Mode: 0o600}, 0, 0o600},
		{"other chmod", other, SetAttr{Valid: AttrMode, Mode: 0o777}, syscall.EPERM, 0},
		{"root chmod", root, SetAttr{Valid: AttrMode, Mode: 0o640}, 0, 0o640},
		{"owner setgid not in group", owner, SetAttr{Valid: AttrMode, Mode: 0o2755}, 0, 0o2755}, // owner is in gid 1000
		{"owner chown to other uid", owner, SetAttr{Valid: AttrUID, UID: 1001}, syscall.EPERM, 0},
		{"owner chown to self", owner, SetAttr{Valid: AttrUID, UID: 1000}, 0, 0o755}, // clears setgid of group-exec file
		{"owner chgrp to member group", owner, SetAttr{Valid: AttrGID, GID: 2000}, 0, 0o755},
		{"owner chgrp to foreign group", owner, SetAttr{Valid: AttrGID, GID: 3000}, syscall.EPERM, 0},
		{"other chgrp to same group", other, SetAttr{Valid: AttrGID, GID: 2000}, syscall.EPERM, 0},
		{"owner setgid not in new group", owner, SetAttr{Valid: AttrMode, Mode: 0o2755}, 0, 0o2755},
		{"other explicit times", other, SetAttr{Valid: AttrMtime, Mtime: 5}, syscall.EPERM, 0},
		{"other times to now without write", other, SetAttr{Valid: AttrMtimeNow | AttrAtimeNow}, syscall.EACCES, 0},
		{"owner explicit times", owner, SetAttr{Valid: AttrMtime | AttrAtime, Mtime: 5, Atime: 6}, 0, 0o2755},
		{"other truncate without write", other, SetAttr{Valid: AttrSize, Size: 0}, syscall.EACCES, 0},
		{"owner truncate", owner, SetAttr{Valid: AttrSize | AttrBlocks, Size: 1 << 20, Blocks: 2048}, 0, 0o2755},
		{"owner immutable", owner, SetAttr{Valid: AttrFlags, Flags: FlagImmutable}, syscall.EPERM, 0},
		{"root immutable", root, SetAttr{Valid: AttrFlags, Flags: FlagImmutable}, 0, 0o2755},
		{"root chown immutable", root, SetAttr{Valid: AttrUID | AttrGID, UID: 1001, GID: 1001}, syscall.EPERM, 0},
		{"root clears immutable", root, SetAttr{Valid: AttrFlags, Flags: 0}, 0, 0o2755},
		{"root chown", root, SetAttr{Valid: AttrUID | AttrGID, UID: 1001, GID: 1001}, 0, 0o755},
		{"new owner chmod", other, SetAttr{Valid: AttrMode, Mode: 0o666}, 0, 0o666},
		{"other times to now with write", owner, SetAttr{Valid: AttrMtimeNow}, 0, 0o666},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := s.Setattr(tt.r, f, tt.sa)
			wantErrno(t, tt.name, err, tt.want)
			if err == nil && a.Mode&PermMask != tt.mode {
				t.Fatalf("mode %#o, want %#o", a.Mode&PermMask, tt.mode)
			}
		})
	}
	a := getattr(t, s, f)
	if a.UID != 1001 || a.GID != 1001 || a.Mtime == 5 || a.Atime != 6 || a.Size != 1<<20 || a.Blocks != 2048 || a.Flags != 0 {
		t.Fatalf("final attrs %+v", a)
	}
	_, err := s.Setattr(root, pub, SetAttr{Valid: AttrSize})
	wantErrno(t, "truncate a directory", err, syscall.EISDIR)
	// A chmod by a caller outside the file's group drops setgid.
	g := create(t, s, root, pub, "g", 0o644)
	s.Setattr(root, g, SetAttr{Valid: AttrUID | AttrGID, UID: 1000, GID: 4000})
	if a, err := s.Setattr(owner, g, SetAttr{Valid: AttrMode, Mode: 0o2755}); err != nil || a.Mode&S_ISGID != 0 {
		t.Fatalf("chmod g+s outside the group = %#o, %v", a.Mode, err)
	}
	// ftruncate through an fd opened for write before a chmod.
	s.Setattr(owner, g, SetAttr{Valid: AttrMode, Mode: 0o444})
	_, err = s.Setattr(owner, g, SetAttr{Valid: AttrSize, Size: 3})
	wantErrno(t, "truncate a 0444 file", err, syscall.EACCES)
	_, err = s.Setattr(owner, g, SetAttr{Valid: AttrSize | AttrOpenWrite, Size: 3})
	wantErrno(t, "ftruncate of an fd open for write", err, 0)
}

func TestOpenPermissions(t *testing.T) {
	s := newStore(t)
	pub := mkdir(t, s, root, RootFID, "pub", 0o777)
	owner, other := user(1000, 1000), user(1001, 1001)
	f := create(t, s, owner, pub, "f", 0o640)
	ln, _ := s.Symlink(owner, pub, "l", "f", Spec{})
	_, err := s.OpenFile(other, f, OpenReadOnly)
	wantErrno(t, "other opens a 0640 file", err, syscall.EACCES)
	s.Setattr(owner, f, SetAttr{Valid: AttrMode, Mode: 0o400})
	_, err = s.OpenFile(owner, f, OpenWriteOnly)
	wantErrno(t, "owner opens a 0400 file for write", err, syscall.EACCES)
	_, err = s.OpenFile(owner, f, OpenWriteOnly|OpenOwnerOverride)
	wantErrno(t, "owner override", err, 0)
	_, err = s.OpenFile(root, f, OpenWriteOnly)
	wantErrno(t, "root opens for write", err, 0)
	_, err = s.OpenFile(root, pub, OpenWriteOnly)
	wantErrno(t, "open a directory for write", err, syscall.EISDIR)
	_, err = s.OpenFile(root, ln.FID, OpenReadOnly)
	wantErrno(t, "open a symlink", err, syscall.ELOOP)
	if s.OpenCount(f) != 2 {
		t.Fatalf("open count %d", s.OpenCount(f))
	}
	som := LSOM{Size: 4096, Blocks: 8}
	s.CloseFile(owner, f, CloseInfo{Write: true, LSOM: &som})
	s.CloseFile(root, f, CloseInfo{})
	if a := getattr(t, s, f); a.Size != 4096 || a.Blocks != 8 {
		t.Fatalf("LSOM after close: size %d blocks %d", a.Size, a.Blocks)
	}
	// Execute permission is granted to root on files only if some x bit is set.
	x := create(t, s, root, pub, "x", 0o644)
	tx := s.read(&root)
	n, _ := tx.inode(x)
	err = tx.may(n, MayExec)
	tx.done()
	wantErrno(t, "root executes a 0644 file", err, syscall.EACCES)
}

// acl builds an ACL from entries (tag, perm, id) in any order.
func acl(entries ...ACLEntry) ACL {
	a := ACL(entries)
	for i := range a {
		if a[i].Tag != ACLUser && a[i].Tag != ACLGroup {
			a[i].ID = ACLUndefinedID
		}
	}
	sortACL(a)
	return a
}

func TestACLAccess(t *testing.T) {
	s := newStore(t)
	pub := mkdir(t, s, root, RootFID, "pub", 0o777)
	owner := user(1000, 1000)
	f := create(t, s, owner, pub, "f", 0o600)
	a := acl(
		ACLEntry{Tag: ACLUserObj, Perm: 6},
		ACLEntry{Tag: ACLUser, Perm: 6, ID: 2000},  // named user rw-
		ACLEntry{Tag: ACLUser, Perm: 7, ID: 2001},  // named user rwx, masked to r--
		ACLEntry{Tag: ACLGroupObj, Perm: 0},        // owning group ---
		ACLEntry{Tag: ACLGroup, Perm: 4, ID: 3000}, // named group r--
		ACLEntry{Tag: ACLMask, Perm: 6},            // mask rw-
		ACLEntry{Tag: ACLOther, Perm: 0},
	)
	err := s.Setxattr(user(2000, 2000), f, XattrACLAccess, a.Marshal(), 0)
	wantErrno(t, "non-owner sets an ACL", err, syscall.EPERM)
	if err := s.Setxattr(owner, f, XattrACLAccess, a.Marshal(), 0); err != nil {
		t.Fatal(err)
	}
	if m := getattr(t, s, f).Mode & 0o777; m != 0o660 {
		t.Fatalf("mode after setfacl %#o, want 0660 (group bits = mask)", m)
	}
	for _, tt := range []struct {
		name string
		r    Req
		want uint64
		err  syscall.Errno
	}{
		{"named user rw", user(2000, 9), OpenReadWrite, 0},
		{"named user masked", user(2001, 9), OpenReadOnly, 0},
		{"named user masked write", user(2001, 9), OpenWriteOnly, 0},
		{"named group read", user(5000, 9, 3000), OpenReadOnly, 0},
		{"named group write", user(5000, 9, 3000), OpenWriteOnly, syscall.EACCES},
		{"owning group", user(5000, 1000), OpenReadOnly, syscall.EACCES},
		{"other", user(5000, 9), OpenReadOnly, syscall.EACCES},
	} {
		_, err := s.OpenFile(tt.r, f, tt.want)
		wantErrno(t, tt.name, err, tt.err)
	}
	// chmod rewrites the mask: named user 2000 loses write.
	if _, err := s.Setattr(owner, f, SetAttr{Valid: AttrMode, Mode: 0o640}); err != nil {
		t.Fatal(err)
	}
	_, err = s.OpenFile(user(2000, 9), f, OpenWriteOnly)
	wantErrno(t, "named user after chmod g-w", err, syscall.EACCES)
	v, err := s.Getxattr(owner, f, XattrACLAccess)
	got, perr := ParseACL(v)
	if err != nil || perr != nil || got[got.find(ACLMask)].Perm != 4 {
		t.Fatalf("ACL after chmod = %v, %v, %v", got, err, perr)
	}
	// An ACL equivalent to a mode is not stored; it only sets the mode.
	if err := s.Setxattr(owner, f, XattrACLAccess, ACLFromMode(0o754).Marshal(), 0); err != nil {
		t.Fatal(err)
	}
	_, err = s.Getxattr(owner, f, XattrACLAccess)
	wantErrno(t, "minimal ACL not stored", err, syscall.ENODATA)
	if m := getattr(t, s, f).Mode & 0o777; m != 0o754 {
		t.Fatalf("mode after minimal ACL %#o", m)
	}
	err = s.Setxattr(owner, f, XattrACLAccess, []byte{1, 2, 3}, 0)
	wantErrno(t, "garbage ACL", err, syscall.EINVAL)
	err = s.Setxattr(owner, f, XattrACLDefault, a.Marshal(), 0)
	wantErrno(t, "default ACL on a file", err, syscall.EACCES)
}

func TestDefaultACLInheritance(t *testing.T) {
	s := newStore(t)
	d := mkdir(t, s, root, RootFID, "d", 0o777)
	dflt := acl(
		ACLEntry{Tag: ACLUserObj, Perm: 7},
		ACLEntry{Tag: ACLUser, Perm: 7, ID: 2000},
		ACLEntry{Tag: ACLGroupObj, Perm: 5},
		ACLEntry{Tag: ACLMask, Perm: 7},
		ACLEntry{Tag: ACLOther, Perm: 1},
	)
	if err := s.Setxattr(root, d, XattrACLDefault, dflt.Marshal(), 0); err != nil {
		t.Fatal(err)
	}
	u := user(1000, 1000)
	u.Cred.Umask = 0o077 // ignored under a default ACL
	f, err := s.Create(u, d, "f", Spec{Mode: 0o640})
	if err != nil || f.Mode&0o777 != 0o640 {
		t.Fatalf("file under default ACL: mode %#o, %v; want 0640 (no umask)", f.Mode&0o777, err)
	}
	v, err := s.Getxattr(u, f.FID, XattrACLAccess)
	got, _ := ParseACL(v)
	want := acl(
		ACLEntry{Tag: ACLUserObj, Perm: 6},
		ACLEntry{Tag: ACLUser, Perm: 7, ID: 2000},
		ACLEntry{Tag: ACLGroupObj, Perm: 5},
		ACLEntry{Tag: ACLMask, Perm: 4},
		ACLEntry{Tag: ACLOther, Perm: 0},
	)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("inherited access ACL = %v, %v; want %v", got, err, want)
	}
	_, err = s.Getxattr(u, f.FID, XattrACLDefault)
	wantErrno(t, "a file inherits no default ACL", err, syscall.ENODATA)
	sub, err := s.Mkdir(u, d, "sub", Spec{Mode: 0o755})
	if err != nil || sub.Mode&0o777 != 0o751 { // other: default 1 & requested 5
		t.Fatalf("subdir mode %#o, %v", sub.Mode&0o777, err)
	}
	v, err = s.Getxattr(u, sub.FID, XattrACLDefault)
	if got, _ := ParseACL(v); err != nil || !reflect.DeepEqual(got, dflt) {
		t.Fatalf("subdir default ACL = %v, %v", got, err)
	}
	// Without a default ACL the umask applies.
	plain := mkdir(t, s, root, RootFID, "plain", 0o777)
	g, _ := s.Create(u, plain, "g", Spec{Mode: 0o666})
	if g.Mode&0o777 != 0o600 {
		t.Fatalf("umask 077: mode %#o", g.Mode&0o777)
	}
	// Removing the default ACL stops inheritance.
	if err := s.Removexattr(root, d, XattrACLDefault); err != nil {
		t.Fatal(err)
	}
	h, _ := s.Create(u, d, "h", Spec{Mode: 0o666})
	if h.Mode&0o777 != 0o600 {
		t.Fatalf("after removing the default ACL: mode %#o", h.Mode&0o777)
	}
}

// TestWriterKillsSetID: a caller who may write a file but does not own it
// may clear its set-ID bits (and nothing else), as its write would; one
// who may not write it may not.
func TestWriterKillsSetID(t *testing.T) {
	s := newStore(t)
	pub := mkdir(t, s, root, RootFID, "pub", 0o777)
	owner, writer, reader := user(1000, 1000), user(1001, 1001), user(1002, 1002)
	f := create(t, s, owner, pub, "f", 0o644)
	if _, err := s.Setattr(owner, f, SetAttr{Valid: AttrMode, Mode: 0o6777}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Setattr(writer, f, SetAttr{Valid: AttrMode, Mode: 0o777 | S_ISGID})
	if err != nil {
		t.Fatalf("a writer clears setuid: %v", err)
	}
	_, err = s.Setattr(writer, f, SetAttr{Valid: AttrMode, Mode: 0o776})
	wantErrno(t, "a writer clears setgid and another bit", err, syscall.EPERM)
	_, err = s.Setattr(writer, f, SetAttr{Valid: AttrMode, Mode: 0o777 | S_ISGID})
	wantErrno(t, "a writer's chmod that clears nothing", err, syscall.EPERM)
	if _, err := s.Setattr(owner, f, SetAttr{Valid: AttrMode, Mode: 0o6755}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Setattr(reader, f, SetAttr{Valid: AttrMode, Mode: 0o755})
	wantErrno(t, "a non-writer clears the set-ID bits", err, syscall.EPERM)
	if a, err := s.Setattr(writer, f, SetAttr{Valid: AttrMode, Mode: 0o755}); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("a writer without write permission (0755) clears them: %#o, %v", a.Mode, err)
	}
	if a := getattr(t, s, f); a.Mode&PermMask != 0o6755 {
		t.Fatalf("mode %#o after the refusals, want 06755", a.Mode&PermMask)
	}
}
