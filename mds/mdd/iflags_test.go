package mdd

import (
	"reflect"
	"sort"
	"syscall"
	"testing"

	"github.com/nacrefs/nacre/internal/fid"
)

// names lists the entries of dir, sorted.
func names(t testing.TB, s *Store, dir fid.FID) []string {
	t.Helper()
	ents, _, err := s.Readdir(root, dir, 0, 1000)
	if err != nil {
		t.Fatalf("readdir %v: %v", dir, err)
	}
	var out []string
	for _, e := range ents {
		if e.Name != "." && e.Name != ".." {
			out = append(out, e.Name)
		}
	}
	sort.Strings(out)
	return out
}

func chattr(t testing.TB, s *Store, f fid.FID, flags uint32) {
	t.Helper()
	if _, err := s.Setattr(root, f, SetAttr{Valid: AttrFlags, Flags: flags}); err != nil {
		t.Fatalf("chattr %v %#x: %v", f, flags, err)
	}
}

// A file with FS_IMMUTABLE_FL: nothing about it changes, not even by root,
// until root clears the flag; it still opens for read.
func TestImmutableFile(t *testing.T) {
	s := newStore(t)
	pub := mkdir(t, s, root, RootFID, "pub", 0o777)
	owner := user(1000, 1000)
	f := create(t, s, owner, pub, "f", 0o666)
	create(t, s, owner, pub, "other", 0o666)
	if _, err := s.Setattr(owner, f, SetAttr{Valid: AttrSize | AttrBlocks, Size: 5, Blocks: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Setxattr(owner, f, "user.a", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	_, err := s.Setattr(owner, f, SetAttr{Valid: AttrFlags, Flags: FlagImmutable})
	wantErrno(t, "the owner sets immutable", err, syscall.EPERM)
	chattr(t, s, f, FlagImmutable)
	before := getattr(t, s, f)
	acl := ACL{{ACLUserObj, 6, ACLUndefinedID}, {ACLUser, 6, 7}, {ACLGroupObj, 4, ACLUndefinedID}, {ACLMask, 6, ACLUndefinedID}, {ACLOther, 4, ACLUndefinedID}}
	for _, r := range []struct {
		who string
		r   Req
	}{{"root", root}, {"owner", owner}} {
		for _, tt := range []struct {
			name string
			op   func() error
		}{
			{"open for write", func() error { _, err := s.OpenFile(r.r, f, OpenWriteOnly); return err }},
			{"open for write O_APPEND", func() error { _, err := s.OpenFile(r.r, f, OpenWriteOnly|OpenAppend); return err }},
			{"open read-write", func() error { _, err := s.OpenFile(r.r, f, OpenReadWrite); return err }},
			{"open O_RDONLY|O_TRUNC", func() error { _, err := s.OpenFile(r.r, f, OpenReadOnly|OpenTrunc); return err }},
			{"open for write as its creator", func() error {
				_, err := s.OpenFile(r.r, f, OpenWriteOnly|OpenOwnerOverride)
				return err
			}},
			{"truncate", func() error { _, err := s.Setattr(r.r, f, SetAttr{Valid: AttrSize}); return err }},
			{"ftruncate", func() error { _, err := s.Setattr(r.r, f, SetAttr{Valid: AttrSize | AttrOpenWrite}); return err }},
			{"chmod", func() error { _, err := s.Setattr(r.r, f, SetAttr{Valid: AttrMode, Mode: 0o600}); return err }},
			{"chown", func() error { _, err := s.Setattr(r.r, f, SetAttr{Valid: AttrUID, UID: 1000}); return err }},
			{"utimes", func() error {
				_, err := s.Setattr(r.r, f, SetAttr{Valid: AttrMtime | AttrAtime, Mtime: 1, Atime: 1})
				return err
			}},
			{"touch", func() error { _, err := s.Setattr(r.r, f, SetAttr{Valid: AttrMtimeNow | AttrAtimeNow}); return err }},
			{"setxattr", func() error { return s.Setxattr(r.r, f, "user.b", []byte("2"), 0) }},
			{"replace an xattr", func() error { return s.Setxattr(r.r, f, "user.a", []byte("2"), 0) }},
			{"removexattr", func() error { return s.Removexattr(r.r, f, "user.a") }},
			{"set an ACL", func() error { return s.Setxattr(r.r, f, XattrACLAccess, acl.Marshal(), 0) }},
			{"remove the ACL", func() error { return s.Removexattr(r.r, f, XattrACLAccess) }},
			{"set its layout", func() error { _, err := s.SetLayout(r.r, f, *striped(9)); return err }},
			{"unlink", func() error { _, err := s.Unlink(r.r, pub, "f"); return err }},
			{"rename", func() error { _, err := s.Rename(r.r, pub, "f", pub, "g", 0); return err }},
			{"rename over", func() error { _, err := s.Rename(r.r, pub, "other", pub, "f", 0); return err }},
			{"rename exchange", func() error { _, err := s.Rename(r.r, pub, "other", pub, "f", RenameExchange); return err }},
			{"link", func() error { _, err := s.Link(r.r, f, pub, "h"); return err }},
			{"chattr keeping immutable", func() error {
				_, err := s.Setattr(r.r, f, SetAttr{Valid: AttrFlags, Flags: FlagImmutable | 0x80})
				return err
			}},
		} {
			err := tt.op()
			wantErrno(t, r.who+": "+tt.name+" of an immutable file", err, syscall.EPERM)
		}
	}
	_, err = s.Setattr(owner, f, SetAttr{Valid: AttrFlags})
	wantErrno(t, "the owner clears immutable", err, syscall.EPERM)
	after := getattr(t, s, f)
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("attributes changed:\n got %+v\nwant %+v", after, before)
	}
	if after.Size != 5 || after.Mode&PermMask != 0o666 || after.Nlink != 1 || after.Flags != FlagImmutable {
		t.Fatalf("attributes %+v", after)
	}
	if v, err := s.Getxattr(owner, f, "user.a"); err != nil || string(v) != "1" {
		t.Fatalf("user.a = %q, %v; want \"1\"", v, err)
	}
	if got, want := names(t, s, pub), []string{"f", "other"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("entries %q, want %q", got, want)
	}
	if a, err := s.Lookup(owner, pub, "f"); err != nil || a.FID != f {
		t.Fatalf("lookup f = %v, %v", a.FID, err)
	}
	// Reads work.
	if _, err := s.OpenFile(owner, f, OpenReadOnly); err != nil {
		t.Fatalf("open for read: %v", err)
	}
	if _, err := s.CloseFile(owner, f, CloseInfo{}); err != nil {
		t.Fatal(err)
	}
	// Root clears the flag, and the file is an ordinary one again.
	chattr(t, s, f, 0)
	if _, err := s.Setattr(owner, f, SetAttr{Valid: AttrSize, Size: 1}); err != nil {
		t.Fatalf("truncate after chattr -i: %v", err)
	}
	if _, err := s.Unlink(owner, pub, "f"); err != nil {
		t.Fatalf("unlink after chattr -i: %v", err)
	}
}

// A file with FS_APPEND_FL opens for write only with O_APPEND; it keeps
// its links, size, mode, owner and xattrs, but takes times set to now.
func TestAppendOnlyFile(t *testing.T) {
	s := newStore(t)
	pub := mkdir(t, s, root, RootFID, "pub", 0o777)
	owner := user(1000, 1000)
	f := create(t, s, owner, pub, "f", 0o644)
	create(t, s, owner, pub, "other", 0o666)
	if _, err := s.Setattr(owner, f, SetAttr{Valid: AttrSize, Size: 5}); err != nil {
		t.Fatal(err)
	}
	chattr(t, s, f, FlagAppend)
	before := getattr(t, s, f)
	for _, tt := range []struct {
		name  string
		flags uint64
		want  syscall.Errno
	}{
		{"O_WRONLY", OpenWriteOnly, syscall.EPERM},
		{"O_RDWR", OpenReadWrite, syscall.EPERM},
		{"O_RDONLY|O_TRUNC", OpenReadOnly | OpenTrunc, syscall.EPERM},
		{"O_WRONLY|O_APPEND|O_TRUNC", OpenWriteOnly | OpenAppend | OpenTrunc, syscall.EPERM},
		{"O_WRONLY|O_APPEND", OpenWriteOnly | OpenAppend, 0},
		{"O_RDWR|O_APPEND", OpenReadWrite | OpenAppend, 0},
		{"O_RDONLY", OpenReadOnly, 0},
	} {
		_, err := s.OpenFile(root, f, tt.flags)
		wantErrno(t, "open "+tt.name+" of an append-only file", err, tt.want)
		if err == nil {
			if _, err := s.CloseFile(root, f, CloseInfo{Write: tt.flags&OpenAccMode != OpenReadOnly}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A user without write permission gets EACCES first, as from
	// inode_permission before may_open's IS_APPEND.
	_, err := s.OpenFile(user(2000, 2000), f, OpenWriteOnly)
	wantErrno(t, "a stranger opens for write", err, syscall.EACCES)
	before.Ctime = getattr(t, s, f).Ctime // closes for write record their time
	before.Mtime = getattr(t, s, f).Mtime
	for _, tt := range []struct {
		name string
		op   func() error
	}{
		{"truncate", func() error { _, err := s.Setattr(root, f, SetAttr{Valid: AttrSize}); return err }},
		{"ftruncate", func() error {
			_, err := s.Setattr(owner, f, SetAttr{Valid: AttrSize | AttrOpenWrite, Size: 9})
			return err
		}},
		{"chmod", func() error { _, err := s.Setattr(root, f, SetAttr{Valid: AttrMode, Mode: 0o600}); return err }},
		{"chown", func() error {
			_, err := s.Setattr(root, f, SetAttr{Valid: AttrUID | AttrGID, UID: 1000, GID: 1000})
			return err
		}},
		{"utimes", func() error { _, err := s.Setattr(owner, f, SetAttr{Valid: AttrMtime, Mtime: 1}); return err }},
		{"setxattr", func() error { return s.Setxattr(root, f, "user.b", []byte("2"), 0) }},
		{"removexattr", func() error { return s.Removexattr(root, f, "user.b") }},
		{"unlink", func() error { _, err := s.Unlink(root, pub, "f"); return err }},
		{"rename", func() error { _, err := s.Rename(root, pub, "f", pub, "g", 0); return err }},
		{"rename over", func() error { _, err := s.Rename(root, pub, "other", pub, "f", 0); return err }},
		{"link", func() error { _, err := s.Link(root, f, pub, "h"); return err }},
	} {
		err := tt.op()
		wantErrno(t, tt.name+" of an append-only file", err, syscall.EPERM)
	}
	if a := getattr(t, s, f); !reflect.DeepEqual(a, before) {
		t.Fatalf("attributes changed:\n got %+v\nwant %+v", a, before)
	}
	if got, want := names(t, s, pub), []string{"f", "other"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("entries %q, want %q", got, want)
	}
	// touch (times to now) is allowed, and other flags may change.
	a, err := s.Setattr(owner, f, SetAttr{Valid: AttrMtimeNow | AttrAtimeNow})
	if err != nil || a.Mtime == before.Mtime {
		t.Fatalf("touch of an append-only file: mtime %d (was %d), %v", a.Mtime, before.Mtime, err)
	}
	if a, err := s.Setattr(root, f, SetAttr{Valid: AttrFlags, Flags: FlagAppend | 0x80}); err != nil || a.Flags != FlagAppend|0x80 {
		t.Fatalf("chattr +A of an append-only file: flags %#x, %v", a.Flags, err)
	}
	if a.Size != 5 {
		t.Fatalf("size %d, want 5", a.Size)
	}
}

// An immutable directory takes no new entries and loses none; its files
// themselves are not immutable.
func TestImmutableDir(t *testing.T) {
	s := newStore(t)
	d := mkdir(t, s, root, RootFID, "d", 0o777)
	owner := user(1000, 1000)
	x := create(t, s, owner, d, "x", 0o666)
	mkdir(t, s, owner, d, "sub", 0o777)
	out := create(t, s, root, RootFID, "out", 0o666)
	chattr(t, s, d, FlagImmutable)
	before := getattr(t, s, d)
	for _, tt := range []struct {
		name string
		op   func() error
	}{
		{"create", func() error { _, err := s.Create(root, d, "n", Spec{Mode: 0o644}); return err }},
		{"mkdir", func() error { _, err := s.Mkdir(root, d, "n", Spec{Mode: 0o755}); return err }},
		{"mknod", func() error { _, err := s.Mknod(root, d, "n", Spec{Mode: S_IFIFO | 0o644}); return err }},
		{"symlink", func() error { _, err := s.Symlink(root, d, "n", "x", Spec{}); return err }},
		{"link in", func() error { _, err := s.Link(root, out, d, "n"); return err }},
		{"rename in", func() error { _, err := s.Rename(root, RootFID, "out", d, "n", 0); return err }},
		{"rename in over", func() error { _, err := s.Rename(root, RootFID, "out", d, "x", 0); return err }},
		{"rename out", func() error { _, err := s.Rename(root, d, "x", RootFID, "n", 0); return err }},
		{"rename within", func() error { _, err := s.Rename(root, d, "x", d, "n", 0); return err }},
		{"unlink", func() error { _, err := s.Unlink(root, d, "x"); return err }},
		{"rmdir", func() error { _, err := s.Rmdir(root, d, "sub"); return err }},
		{"rmdir it", func() error { _, err := s.Rmdir(root, RootFID, "d"); return err }},
		{"rename it", func() error { _, err := s.Rename(root, RootFID, "d", RootFID, "e", 0); return err }},
		{"chmod it", func() error { _, err := s.Setattr(root, d, SetAttr{Valid: AttrMode, Mode: 0o700}); return err }},
		{"touch it", func() error { _, err := s.Setattr(root, d, SetAttr{Valid: AttrMtimeNow}); return err }},
		{"setxattr", func() error { return s.Setxattr(root, d, "user.a", []byte("1"), 0) }},
		{"set a default layout", func() error { _, err := s.SetLayout(root, d, *striped(0)); return err }},
	} {
		err := tt.op()
		wantErrno(t, tt.name+" in an immutable directory", err, syscall.EPERM)
	}
	if a := getattr(t, s, d); !reflect.DeepEqual(a, before) {
		t.Fatalf("attributes changed:\n got %+v\nwant %+v", a, before)
	}
	if got, want := names(t, s, d), []string{"sub", "x"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("entries %q, want %q", got, want)
	}
	// Its files change as ever.
	if _, err := s.OpenFile(owner, x, OpenWriteOnly|OpenTrunc); err != nil {
		t.Fatalf("open a file of an immutable directory for write: %v", err)
	}
	if _, err := s.CloseFile(owner, x, CloseInfo{Write: true}); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Setattr(owner, x, SetAttr{Valid: AttrMode, Mode: 0o600}); err != nil || a.Mode&PermMask != 0o600 {
		t.Fatalf("chmod of a file of an immutable directory: %#o, %v", a.Mode, err)
	}
}

// An append-only directory takes new entries but loses none.
func TestAppendOnlyDir(t *testing.T) {
	s := newStore(t)
	d := mkdir(t, s, root, RootFID, "d", 0o777)
	owner := user(1000, 1000)
	create(t, s, owner, d, "x", 0o666)
	mkdir(t, s, owner, d, "sub", 0o777)
	out := create(t, s, root, RootFID, "out", 0o666)
	create(t, s, root, RootFID, "out2", 0o666)
	chattr(t, s, d, FlagAppend)
	for _, tt := range []struct {
		name string
		op   func() error
		want syscall.Errno
	}{
		{"create", func() error { _, err := s.Create(owner, d, "new", Spec{Mode: 0o644}); return err }, 0},
		{"mkdir", func() error { _, err := s.Mkdir(owner, d, "newdir", Spec{Mode: 0o755}); return err }, 0},
		{"link in", func() error { _, err := s.Link(owner, out, d, "lk"); return err }, 0},
		{"rename in", func() error { _, err := s.Rename(root, RootFID, "out2", d, "moved", 0); return err }, 0},
		{"rename in over", func() error { _, err := s.Rename(root, RootFID, "out", d, "x", 0); return err }, syscall.EPERM},
		{"rename out", func() error { _, err := s.Rename(root, d, "x", RootFID, "n", 0); return err }, syscall.EPERM},
		{"rename within", func() error { _, err := s.Rename(root, d, "x", d, "n", 0); return err }, syscall.EPERM},
		{"unlink", func() error { _, err := s.Unlink(root, d, "x"); return err }, syscall.EPERM},
		{"unlink a new one", func() error { _, err := s.Unlink(owner, d, "new"); return err }, syscall.EPERM},
		{"rmdir", func() error { _, err := s.Rmdir(root, d, "sub"); return err }, syscall.EPERM},
		{"chmod it", func() error { _, err := s.Setattr(root, d, SetAttr{Valid: AttrMode, Mode: 0o700}); return err }, syscall.EPERM},
		{"touch it", func() error { _, err := s.Setattr(root, d, SetAttr{Valid: AttrMtimeNow}); return err }, 0},
	} {
		err := tt.op()
		wantErrno(t, tt.name+" in an append-only directory", err, tt.want)
	}
	if got, want := names(t, s, d), []string{"lk", "moved", "new", "newdir", "sub", "x"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("entries %q, want %q", got, want)
	}
	if got := names(t, s, RootFID); !reflect.DeepEqual(got, []string{"d", "out"}) {
		t.Fatalf("root entries %q", got)
	}
}

// The POSIX ACL xattrs as Linux's set_posix_acl takes them (checked on
// ext4 under Linux 6.18).
func TestACLLinuxEdges(t *testing.T) {
	s := newStore(t)
	pub := mkdir(t, s, root, RootFID, "pub", 0o777)
	owner := user(1000, 1000)
	f := create(t, s, owner, pub, "f", 0o640)
	full := ACL{{ACLUserObj, 6, ACLUndefinedID}, {ACLUser, 6, 7}, {ACLGroupObj, 4, ACLUndefinedID}, {ACLMask, 6, ACLUndefinedID}, {ACLOther, 0, ACLUndefinedID}}

	// A symlink has no ACLs to set or remove; its mode stays 0777.
	l, err := s.Symlink(owner, pub, "l", "f", Spec{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Setxattr(owner, l.FID, XattrACLAccess, full.Marshal(), 0)
	wantErrno(t, "set an ACL on a symlink", err, syscall.EOPNOTSUPP)
	err = s.Removexattr(owner, l.FID, XattrACLAccess)
	wantErrno(t, "remove an ACL of a symlink", err, syscall.EOPNOTSUPP)
	if a := getattr(t, s, l.FID); a.Mode != S_IFLNK|0o777 || a.Ctime != l.Ctime {
		t.Fatalf("symlink after setting an ACL: mode %#o ctime %d (was %d)", a.Mode, a.Ctime, l.Ctime)
	}

	// Removing an ACL that is not there (a file's default ACL, or an
	// access ACL never set) succeeds and changes nothing.
	before := getattr(t, s, f)
	wantErrno(t, "remove a file's default ACL", s.Removexattr(owner, f, XattrACLDefault), 0)
	wantErrno(t, "set a file's default ACL to nothing", s.Setxattr(owner, f, XattrACLDefault, nil, 0), 0)
	wantErrno(t, "remove a missing access ACL", s.Removexattr(owner, f, XattrACLAccess), 0)
	if a := getattr(t, s, f); !reflect.DeepEqual(a, before) {
		t.Fatalf("removing nothing changed the file:\n got %+v\nwant %+v", a, before)
	}
	err = s.Setxattr(owner, f, XattrACLDefault, full.Marshal(), 0)
	wantErrno(t, "set a file's default ACL", err, syscall.EACCES)
	err = s.Removexattr(user(2000, 2000), f, XattrACLAccess)
	wantErrno(t, "a stranger removes an ACL", err, syscall.EPERM)

	// A zero-length value removes the ACL; the mode stays as it was.
	if err := s.Setxattr(owner, f, XattrACLAccess, full.Marshal(), 0); err != nil {
		t.Fatal(err)
	}
	if m := getattr(t, s, f).Mode & 0o777; m != 0o660 {
		t.Fatalf("mode with the ACL %#o, want 0660", m)
	}
	wantErrno(t, "set an empty access ACL", s.Setxattr(owner, f, XattrACLAccess, []byte{}, 0), 0)
	_, err = s.Getxattr(owner, f, XattrACLAccess)
	wantErrno(t, "the ACL after an empty value", err, syscall.ENODATA)
	if m := getattr(t, s, f).Mode & 0o777; m != 0o660 {
		t.Fatalf("mode after removing the ACL %#o, want 0660 kept", m)
	}
	_, err = s.OpenFile(user(7, 7), f, OpenReadOnly)
	wantErrno(t, "the named user after the ACL went", err, syscall.EACCES)
	// The xattr flags do not apply to ACLs (Linux passes none).
	wantErrno(t, "XATTR_REPLACE of a missing ACL", s.Setxattr(owner, f, XattrACLAccess, full.Marshal(), XattrReplace), 0)
	wantErrno(t, "XATTR_CREATE of an existing ACL", s.Setxattr(owner, f, XattrACLAccess, full.Marshal(), XattrCreate), 0)
	if v, err := s.Getxattr(owner, f, XattrACLAccess); err != nil || !reflect.DeepEqual(v, full.Marshal()) {
		t.Fatalf("ACL = %v, %v", v, err)
	}
}

// TestChattrKeepsOnlyKnownFlags: a chattr stores only FlagsKept (as
// Lustre's MDT keeps only the flags its inodes carry); other bits are
// dropped without an error, and a chattr of an immutable file that
// differs only by such bits changes nothing and is not refused.
func TestChattrKeepsOnlyKnownFlags(t *testing.T) {
	s := newStore(t)
	f := create(t, s, root, RootFID, "f", 0o644)
	for bit := uint32(1); bit != 0; bit <<= 1 {
		if bit&(FlagImmutable|FlagAppend) != 0 {
			continue
		}
		a, err := s.Setattr(root, f, SetAttr{Valid: AttrFlags, Flags: bit})
		if err != nil {
			t.Fatalf("chattr %#x: %v", bit, err)
		}
		if want := bit & FlagsKept; a.Flags != want || getattr(t, s, f).Flags != want {
			t.Fatalf("chattr %#x: flags %#x (stored %#x), want %#x", bit, a.Flags, getattr(t, s, f).Flags, want)
		}
	}
	a, err := s.Setattr(root, f, SetAttr{Valid: AttrFlags, Flags: ^uint32(0)})
	if err != nil || a.Flags != FlagsKept {
		t.Fatalf("chattr of every bit: flags %#x, %v; want %#x", a.Flags, err, FlagsKept)
	}
	owner := user(1000, 1000)
	pub := mkdir(t, s, root, RootFID, "pub", 0o777)
	g := create(t, s, owner, pub, "g", 0o644)
	chattr(t, s, g, FlagImmutable)
	if a, err := s.Setattr(owner, g, SetAttr{Valid: AttrFlags, Flags: FlagImmutable | 0x40}); err != nil || a.Flags != FlagImmutable {
		t.Fatalf("chattr +d (not kept) of an immutable file by its owner: flags %#x, %v; want %#x", a.Flags, err, FlagImmutable)
	}
}
