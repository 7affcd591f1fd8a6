package mdd

import (
	"bytes"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nacrefs/nacre/internal/fid"
)

func TestXattrs(t *testing.T) {
	s := newStore(t)
	pub := mkdir(t, s, root, RootFID, "pub", 0o777)
	tmp := mkdir(t, s, root, RootFID, "tmp", 0o1777)
	owner, other := user(1000, 1000), user(1001, 1001)
	f := create(t, s, owner, pub, "f", 0o644)
	fifo, _ := s.Mknod(owner, pub, "fifo", Spec{Mode: S_IFIFO | 0o666})
	tests := []struct {
		name string
		op   func() error
		want syscall.Errno
	}{
		{"set user", func() error { return s.Setxattr(owner, f, "user.a", []byte("1"), 0) }, 0},
		{"create existing", func() error { return s.Setxattr(owner, f, "user.a", []byte("2"), XattrCreate) }, syscall.EEXIST},
		{"replace missing", func() error { return s.Setxattr(owner, f, "user.b", []byte("2"), XattrReplace) }, syscall.ENODATA},
		{"replace", func() error { return s.Setxattr(owner, f, "user.a", []byte("3"), XattrReplace) }, 0},
		{"other sets user without write", func() error { return s.Setxattr(other, f, "user.c", nil, 0) }, syscall.EACCES},
		{"other reads user", func() error { return errOf(s.Getxattr(other, f, "user.a")) }, 0},
		{"user on a fifo", func() error { return s.Setxattr(owner, fifo.FID, "user.a", nil, 0) }, syscall.EPERM},
		{"user read on a fifo", func() error { return errOf(s.Getxattr(owner, fifo.FID, "user.a")) }, syscall.ENODATA},
		{"user on someone's sticky dir", func() error { return s.Setxattr(other, tmp, "user.a", nil, 0) }, syscall.EPERM},
		{"trusted by user", func() error { return s.Setxattr(owner, f, "trusted.t", []byte("x"), 0) }, syscall.EPERM},
		{"trusted by root", func() error { return s.Setxattr(root, f, "trusted.t", []byte("x"), 0) }, 0},
		{"trusted read by user", func() error { return errOf(s.Getxattr(owner, f, "trusted.t")) }, syscall.ENODATA},
		{"security by user", func() error { return s.Setxattr(owner, f, "security.s", nil, 0) }, syscall.EPERM},
		{"unknown namespace", func() error { return s.Setxattr(root, f, "lustre.x", nil, 0) }, syscall.EOPNOTSUPP},
		{"bare prefix", func() error { return s.Setxattr(root, f, "user.", nil, 0) }, syscall.EINVAL},
		{"long name", func() error { return s.Setxattr(root, f, "user."+strings.Repeat("n", 251), nil, 0) }, syscall.ERANGE},
		{"big value", func() error { return s.Setxattr(root, f, "user.big", make([]byte, MaxXattrValue+1), 0) }, syscall.E2BIG},
		{"max value", func() error { return s.Setxattr(root, f, "user.big", make([]byte, MaxXattrValue), 0) }, 0},
		{"bad flags", func() error { return s.Setxattr(root, f, "user.a", nil, 3) }, syscall.EINVAL},
		{"get missing", func() error { return errOf(s.Getxattr(owner, f, "user.zz")) }, syscall.ENODATA},
		{"remove missing", func() error { return s.Removexattr(owner, f, "user.zz") }, syscall.ENODATA},
		{"remove", func() error { return s.Removexattr(owner, f, "user.big") }, 0},
	}
	for _, tt := range tests {
		wantErrno(t, tt.name, tt.op(), tt.want)
	}
	v, err := s.Getxattr(owner, f, "user.a")
	if err != nil || !bytes.Equal(v, []byte("3")) {
		t.Fatalf("user.a = %q, %v", v, err)
	}
	names, err := s.Listxattr(owner, f)
	if err != nil || !reflect.DeepEqual(names, []string{"user.a"}) {
		t.Fatalf("list as user = %v, %v", names, err)
	}
	names, _ = s.Listxattr(root, f)
	if !reflect.DeepEqual(names, []string{"trusted.t", "user.a"}) {
		t.Fatalf("list as root = %v", names)
	}
	// Xattrs go with the inode.
	s.Unlink(owner, pub, "f")
	check(t, s)
}

// clearIflags clears bits of f's internal flags, as an inode made before
// they existed would have them.
func clearIflags(t *testing.T, s *Store, f fid.FID, bits uint8) {
	t.Helper()
	r := root
	tx := s.begin(&r)
	err := func() error {
		n, err := tx.inode(f)
		if err != nil {
			return err
		}
		n.iflags &^= bits
		tx.touch(n)
		return nil
	}()
	if err := tx.finish(err); err != nil {
		t.Fatal(err)
	}
}

// TestXattrsGoWithTheInode: a destroyed inode's extended attributes go
// with it, whether its flags say it has some (set since), has none (no
// search for them), or predate the flags (searched for).
func TestXattrsGoWithTheInode(t *testing.T) {
	s := newStore(t)
	d := mkdir(t, s, root, RootFID, "d", 0o777)
	owner := user(1000, 1000)
	for _, tc := range []struct {
		name   string
		xattrs []string
		old    bool // made before the flags: tracked and xattr bits clear
	}{
		{"none", nil, false},
		{"user", []string{"user.a", "user.b"}, false},
		{"set and removed", []string{"user.gone"}, false},
		{"old, with", []string{"user.a"}, true},
		{"old, without", nil, true},
	} {
		f := create(t, s, owner, d, tc.name, 0o644)
		for _, x := range tc.xattrs {
			if err := s.Setxattr(owner, f, x, []byte("v"), 0); err != nil {
				t.Fatalf("%s: setxattr %s: %v", tc.name, x, err)
			}
		}
		if tc.name == "set and removed" {
			if err := s.Removexattr(owner, f, "user.gone"); err != nil {
				t.Fatal(err)
			}
		}
		if tc.old {
			clearIflags(t, s, f, inoXattrsTracked|inoXattrs)
		}
		check(t, s)
		if _, err := s.Unlink(owner, d, tc.name); err != nil {
			t.Fatalf("%s: unlink: %v", tc.name, err)
		}
		lo, hi := fidPrefix(pfxXattr, f)
		n := 0
		if err := s.scanRange(lo, hi, func(_, _ []byte) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s: %d extended attributes left after the unlink", tc.name, n)
		}
		check(t, s)
	}
	// Check notices an inode whose flags deny the attributes it has.
	f := create(t, s, owner, d, "liar", 0o644)
	if err := s.Setxattr(owner, f, "user.a", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	clearIflags(t, s, f, inoXattrs)
	if err := s.Check(); err == nil || !strings.Contains(err.Error(), "without the inode's flag") {
		t.Fatalf("Check of an inode with xattrs and no flag for them: %v", err)
	}
	clearIflags(t, s, f, inoXattrsTracked) // as an old inode: fine again
}

// TestFormatVersions: a store of the previous format opens and moves to
// the current one, whose records an older binary cannot all read; a store
// of a format newer than this code's is refused.
func TestFormatVersions(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	setFormat := func(v uint64) {
		t.Helper()
		if err := s.db.Set(keyFormat, u64Val(v), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	setFormat(1)
	if s, err = Open(testConfig(dir)); err != nil {
		t.Fatalf("open of a format 1 store: %v", err)
	}
	if v, err := s.getU64(keyFormat); err != nil || v != formatVersion {
		t.Fatalf("format after the open: %d %v, want %d", v, err, formatVersion)
	}
	setFormat(formatVersion + 1)
	if s, err = Open(testConfig(dir)); err == nil {
		s.Close()
		t.Fatal("a store of a newer format opened")
	} else if Errno(err) != syscall.EINVAL {
		t.Fatalf("open of a newer format: %v, want EINVAL", err)
	}
}

// TestNoXattrs: the attributes say whether an inode has no extended
// attributes at all, and never say so of one that has or may have some.
func TestNoXattrs(t *testing.T) {
	s := newStore(t)
	d := mkdir(t, s, root, RootFID, "d", 0o777)
	owner := user(1000, 1000)
	noX := func(f fid.FID) bool {
		t.Helper()
		a, err := s.Getattr(f)
		if err != nil {
			t.Fatal(err)
		}
		return a.NoXattrs
	}
	f := create(t, s, owner, d, "f", 0o644)
	if !noX(f) {
		t.Fatal("a new file: NoXattrs false")
	}
	if err := s.Setxattr(owner, f, "user.a", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if noX(f) {
		t.Fatal("a file with user.a: NoXattrs")
	}
	if err := s.Removexattr(owner, f, "user.a"); err != nil {
		t.Fatal(err)
	}
	if noX(f) {
		t.Fatal("a file that had user.a: NoXattrs (the flag only says where to look)")
	}
	// An ACL, set or inherited.
	g := create(t, s, owner, d, "g", 0o644)
	u := uint32(ACLUndefinedID)
	acl := ACL{{ACLUserObj, 6, u}, {ACLUser, 4, 7}, {ACLGroupObj, 4, u}, {ACLMask, 4, u}, {ACLOther, 4, u}}
	if err := s.Setxattr(owner, g, XattrACLAccess, acl.Marshal(), 0); err != nil {
		t.Fatal(err)
	}
	if noX(g) {
		t.Fatal("a file with an ACL: NoXattrs")
	}
	if err := s.Setxattr(root, d, XattrACLDefault, acl.Marshal(), 0); err != nil {
		t.Fatal(err)
	}
	if h := create(t, s, owner, d, "h", 0o644); noX(h) {
		t.Fatal("a file with an inherited ACL: NoXattrs")
	}
	// An inode from before the flags.
	old := create(t, s, owner, d, "old", 0o644)
	clearIflags(t, s, old, inoXattrsTracked)
	if noX(old) {
		t.Fatal("an inode from before the flags: NoXattrs")
	}
}
