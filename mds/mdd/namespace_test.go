package mdd

import (
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
)

func TestFormatAndRoot(t *testing.T) {
	s := newStore(t)
	a := getattr(t, s, RootFID)
	if a.Mode != S_IFDIR|0o755 || a.Nlink != 2 || a.UID != 0 || a.FID.String() != "[0x200000007:0x1:0x0]" {
		t.Fatalf("root = %+v", a)
	}
	dot, err := s.Lookup(root, RootFID, "..")
	if err != nil || dot.FID != RootFID {
		t.Fatalf("lookup .. of root = %v, %v", dot.FID, err)
	}
}

func TestCreateKinds(t *testing.T) {
	s := newStore(t)
	r := root
	r.Cred.Umask = 0o022
	f, err := s.Create(r, RootFID, "file", Spec{Mode: 0o666, Layout: striped(1)})
	if err != nil || f.Mode != S_IFREG|0o644 || f.Nlink != 1 {
		t.Fatalf("create = %+v, %v", f, err)
	}
	d, err := s.Mkdir(r, RootFID, "dir", Spec{Mode: 0o777})
	if err != nil || d.Mode != S_IFDIR|0o755 || d.Nlink != 2 || d.Size != DirSize {
		t.Fatalf("mkdir = %+v, %v", d, err)
	}
	if got := getattr(t, s, RootFID).Nlink; got != 3 {
		t.Fatalf("root nlink %d after mkdir", got)
	}
	l, err := s.Symlink(r, d.FID, "link", "../file", Spec{})
	if err != nil || l.Mode != S_IFLNK|0o777 || l.Size != 7 {
		t.Fatalf("symlink = %+v, %v", l, err)
	}
	if target, err := s.Readlink(l.FID); err != nil || target != "../file" {
		t.Fatalf("readlink = %q, %v", target, err)
	}
	_, err = s.Readlink(f.FID)
	wantErrno(t, "readlink of a file", err, syscall.EINVAL)
	for _, m := range []struct {
		name string
		mode uint32
		rdev uint64
	}{{"fifo", S_IFIFO | 0o600, 0}, {"sock", S_IFSOCK | 0o600, 0}, {"chr", S_IFCHR | 0o600, 0x0501}, {"blk", S_IFBLK | 0o600, 0x0801}} {
		a, err := s.Mknod(r, RootFID, m.name, Spec{Mode: m.mode, Rdev: m.rdev})
		if err != nil || a.Mode != m.mode || a.Rdev != m.rdev {
			t.Fatalf("mknod %s = %+v, %v", m.name, a, err)
		}
		got, err := s.Lookup(r, RootFID, m.name)
		if err != nil || got != a {
			t.Fatalf("lookup %s = %+v, %v; want %+v", m.name, got, err, a)
		}
	}
	lay, err := s.GetLayout(f.FID)
	if err != nil || !reflect.DeepEqual(lay, *striped(1)) {
		t.Fatalf("layout = %v, %v", lay, err)
	}
	_, err = s.GetLayout(d.FID)
	wantErrno(t, "layout of a plain directory", err, syscall.ENODATA)
	paths, err := s.FID2Path(l.FID)
	if err != nil || !reflect.DeepEqual(paths, []string{"/dir/link"}) {
		t.Fatalf("fid2path = %v, %v", paths, err)
	}
	st, err := s.Statfs()
	if err != nil || st.Files-st.Ffree != 8 || st.Namelen != 255 || st.Blocks == 0 {
		t.Fatalf("statfs = %+v, %v", st, err)
	}
}

// TestNamespaceErrors runs every operation into its errors, as root and as
// an unprivileged user (uid 1000) in a tree made by root:
//
//	/pub (0777)   /priv (0700)   /ro (0755)   /file (0644)   /ro/sub/   /ro/f
func TestNamespaceErrors(t *testing.T) {
	s := newStore(t)
	pub := mkdir(t, s, root, RootFID, "pub", 0o777)
	priv := mkdir(t, s, root, RootFID, "priv", 0o700)
	ro := mkdir(t, s, root, RootFID, "ro", 0o755)
	file := create(t, s, root, RootFID, "file", 0o644)
	sub := mkdir(t, s, root, ro, "sub", 0o755)
	create(t, s, root, ro, "f", 0o644)
	create(t, s, root, sub, "inner", 0o644)
	u := user(1000, 1000)
	long := strings.Repeat("n", 256)
	missing := fid.FID{Seq: fid.SeqNormal, Oid: 0xdead}
	tests := []struct {
		name string
		op   func() error
		root syscall.Errno // outcome as root
		user syscall.Errno // outcome as uid 1000
	}{
		{"create in missing dir", func() error { return errOf(s.Create(root, missing, "x", Spec{})) }, syscall.ENOENT, syscall.ENOENT},
		{"create in a file", func() error { return errOf(s.Create(root, file, "x", Spec{})) }, syscall.ENOTDIR, syscall.ENOTDIR},
		{"create existing", func() error { return errOf(s.Create(root, RootFID, "pub", Spec{})) }, syscall.EEXIST, syscall.EEXIST},
		{"create .", func() error { return errOf(s.Create(root, pub, ".", Spec{})) }, syscall.EEXIST, syscall.EEXIST},
		{"create ..", func() error { return errOf(s.Mkdir(root, pub, "..", Spec{})) }, syscall.EEXIST, syscall.EEXIST},
		{"create long name", func() error { return errOf(s.Create(root, pub, long, Spec{})) }, syscall.ENAMETOOLONG, syscall.ENAMETOOLONG},
		{"create empty name", func() error { return errOf(s.Create(root, pub, "", Spec{})) }, syscall.EINVAL, syscall.EINVAL},
		{"create slash", func() error { return errOf(s.Create(root, pub, "a/b", Spec{})) }, syscall.EINVAL, syscall.EINVAL},
		{"create NUL", func() error { return errOf(s.Create(root, pub, "a\x00b", Spec{})) }, syscall.EINVAL, syscall.EINVAL},
		{"create bad layout", func() error {
			l := striped(9)
			l.Components[0].StripeSize = 1000
			return errOf(s.Create(root, pub, "badlayout", Spec{Layout: l}))
		}, syscall.EINVAL, syscall.EINVAL},
		{"create with foreign FID", func() error {
			return errOf(s.Create(root, pub, "foreign", Spec{FID: fid.FID{Seq: 0x300000000, Oid: 1}}))
		}, syscall.EINVAL, syscall.EINVAL},
		{"mknod dir", func() error { return errOf(s.Mknod(root, pub, "d", Spec{Mode: S_IFDIR})) }, syscall.EPERM, syscall.EPERM},
		{"mknod bad type", func() error { return errOf(s.Mknod(root, pub, "d", Spec{Mode: 0o130000})) }, syscall.EINVAL, syscall.EINVAL},
		{"symlink empty", func() error { return errOf(s.Symlink(root, pub, "l", "", Spec{})) }, syscall.ENOENT, syscall.ENOENT},
		{"symlink long", func() error { return errOf(s.Symlink(root, pub, "l", strings.Repeat("x", 4096), Spec{})) }, syscall.ENAMETOOLONG, syscall.ENAMETOOLONG},
		{"lookup missing", func() error { return errOf(s.Lookup(root, pub, "nope")) }, syscall.ENOENT, syscall.ENOENT},
		{"lookup in a file", func() error { return errOf(s.Lookup(root, file, "x")) }, syscall.ENOTDIR, syscall.ENOTDIR},
		{"getattr missing", func() error { return errOf(s.Getattr(missing)) }, syscall.ENOENT, syscall.ENOENT},
		{"link a directory", func() error { return errOf(s.Link(root, sub, pub, "l")) }, syscall.EPERM, syscall.EPERM},
		{"link over existing", func() error { return errOf(s.Link(root, file, RootFID, "pub")) }, syscall.EEXIST, syscall.EEXIST},
		{"link missing", func() error { return errOf(s.Link(root, missing, pub, "l")) }, syscall.ENOENT, syscall.ENOENT},
		{"unlink missing", func() error { return errOf(s.Unlink(root, pub, "nope")) }, syscall.ENOENT, syscall.ENOENT},
		{"unlink a directory", func() error { return errOf(s.Unlink(root, ro, "sub")) }, syscall.EISDIR, syscall.EACCES},
		{"unlink .", func() error { return errOf(s.Unlink(root, ro, ".")) }, syscall.EINVAL, syscall.EINVAL},
		{"rmdir a file", func() error { return errOf(s.Rmdir(root, ro, "f")) }, syscall.ENOTDIR, syscall.EACCES},
		{"rmdir non-empty", func() error { return errOf(s.Rmdir(root, ro, "sub")) }, syscall.ENOTEMPTY, syscall.EACCES},
		{"rmdir .", func() error { return errOf(s.Rmdir(root, ro, ".")) }, syscall.EINVAL, syscall.EINVAL},
		{"rmdir ..", func() error { return errOf(s.Rmdir(root, sub, "..")) }, syscall.ENOTEMPTY, syscall.ENOTEMPTY},
		{"rmdir missing", func() error { return errOf(s.Rmdir(root, pub, "nope")) }, syscall.ENOENT, syscall.ENOENT},
		{"rename missing", func() error { return errOf(s.Rename(root, pub, "nope", pub, "x", 0)) }, syscall.ENOENT, syscall.ENOENT},
		{"rename dir over file", func() error { return errOf(s.Rename(root, ro, "sub", ro, "f", 0)) }, syscall.ENOTDIR, syscall.EACCES},
		{"rename file over dir", func() error { return errOf(s.Rename(root, ro, "f", ro, "sub", 0)) }, syscall.EISDIR, syscall.EACCES},
		{"rename over non-empty dir", func() error { return errOf(s.Rename(root, RootFID, "pub", ro, "sub", 0)) }, syscall.ENOTEMPTY, syscall.EACCES},
		{"rename into own subtree", func() error { return errOf(s.Rename(root, RootFID, "ro", sub, "x", 0)) }, syscall.EINVAL, syscall.EACCES},
		{"rename into itself", func() error { return errOf(s.Rename(root, RootFID, "ro", ro, "x", 0)) }, syscall.EINVAL, syscall.EACCES},
		{"rename noreplace", func() error { return errOf(s.Rename(root, RootFID, "file", RootFID, "ro", RenameNoReplace)) }, syscall.EEXIST, syscall.EEXIST},
		{"rename exchange missing", func() error { return errOf(s.Rename(root, RootFID, "file", RootFID, "nope", RenameExchange)) }, syscall.ENOENT, syscall.ENOENT},
		{"rename both flags", func() error { return errOf(s.Rename(root, RootFID, "file", RootFID, "x", 3)) }, syscall.EINVAL, syscall.EINVAL},
		{"rename dot", func() error { return errOf(s.Rename(root, ro, ".", RootFID, "x", 0)) }, syscall.EBUSY, syscall.EBUSY},
		{"readdir a file", func() error { _, _, err := s.Readdir(root, file, 0, 10); return err }, syscall.ENOTDIR, syscall.ENOTDIR},
		{"readdir zero max", func() error { _, _, err := s.Readdir(root, pub, 0, 0); return err }, syscall.EINVAL, syscall.EINVAL},
		// Permission outcomes differ between root and uid 1000.
		{"create in 0755 dir", func() error { return errOf(s.Create(root, ro, "new", Spec{})) }, 0, syscall.EACCES},
		{"lookup in 0700 dir", func() error { return errOf(s.Lookup(root, priv, "x")) }, syscall.ENOENT, syscall.EACCES},
		// No permission checked: the open did (Lustre's mdd_readpage).
		{"readdir 0700 dir", func() error { _, _, err := s.Readdir(root, priv, 0, 10); return err }, 0, 0},
		{"unlink in 0755 dir", func() error { return errOf(s.Unlink(root, ro, "f")) }, 0, syscall.EACCES},
		{"link into 0755 dir", func() error { return errOf(s.Link(root, file, ro, "hl")) }, 0, syscall.EACCES},
		{"mknod chr", func() error { return errOf(s.Mknod(root, pub, "chr", Spec{Mode: S_IFCHR | 0o600})) }, 0, syscall.EPERM},
		{"create in 0777 dir", func() error { return errOf(s.Create(root, pub, "mine", Spec{Mode: 0o600})) }, syscall.EEXIST, 0}, // user runs first
		{"create existing in 0755 dir", func() error { return errOf(s.Mkdir(root, RootFID, "ro", Spec{})) }, syscall.EEXIST, syscall.EEXIST},
		{"unlink missing in 0755 dir", func() error { return errOf(s.Unlink(root, ro, "nope")) }, syscall.ENOENT, syscall.ENOENT},
	}
	for _, who := range []string{"user", "root"} { // user first: root's successes change the tree
		for _, tt := range tests {
			t.Run(who+"/"+tt.name, func(t *testing.T) {
				want := tt.root
				if who == "user" {
					want = tt.user
				}
				wantErrno(t, tt.name, withCred(s, who, u, tt.op), want)
			})
		}
	}
	check(t, s)
}

// withCred runs op with root replaced by u (ops close over the package
// variable root).
func withCred(s *Store, who string, u Req, op func() error) error {
	if who == "root" {
		return op()
	}
	saved := root
	root = u
	defer func() { root = saved }()
	return op()
}

func errOf[T any](_ T, err error) error { return err }

func TestUnlinkAndDestroyLog(t *testing.T) {
	s := newStore(t)
	f, err := s.Create(root, RootFID, "f", Spec{Mode: 0o644, Layout: striped(7)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Link(root, f.FID, RootFID, "g"); err != nil {
		t.Fatal(err)
	}
	if a := getattr(t, s, f.FID); a.Nlink != 2 {
		t.Fatalf("nlink %d after link", a.Nlink)
	}
	paths, _ := s.FID2Path(f.FID)
	if !reflect.DeepEqual(paths, []string{"/f", "/g"}) {
		t.Fatalf("fid2path = %v", paths)
	}
	rm, err := s.Unlink(root, RootFID, "f")
	if err != nil || rm.Last || rm.Nlink != 1 || rm.Destroyed {
		t.Fatalf("first unlink = %+v, %v", rm, err)
	}
	rm, err = s.Unlink(root, RootFID, "g")
	if err != nil || !rm.Last || !rm.Destroyed || rm.Orphan || rm.DestroyID == 0 || !reflect.DeepEqual(rm.Layout, striped(7)) {
		t.Fatalf("last unlink = %+v, %v", rm, err)
	}
	_, err = s.Getattr(f.FID)
	wantErrno(t, "getattr after unlink", err, syscall.ENOENT)
	recs, err := s.PendingDestroys(0, 10)
	if err != nil || len(recs) != 1 || recs[0].ID != rm.DestroyID || recs[0].FID != f.FID || !reflect.DeepEqual(recs[0].Layout, *striped(7)) {
		t.Fatalf("destroy log = %+v, %v", recs, err)
	}
	// A file without objects leaves nothing to destroy.
	create(t, s, root, RootFID, "empty", 0o644)
	if rm, err := s.Unlink(root, RootFID, "empty"); err != nil || rm.DestroyID != 0 || !rm.Destroyed {
		t.Fatalf("unlink of a file without layout = %+v, %v", rm, err)
	}
	if err := s.DestroyDone(recs[0].ID); err != nil {
		t.Fatal(err)
	}
	if recs, _ := s.PendingDestroys(0, 10); len(recs) != 0 {
		t.Fatalf("destroy log after done = %+v", recs)
	}
}

func TestOrphan(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	f, _ := s.Create(root, RootFID, "f", Spec{Mode: 0o644, Layout: striped(3)})
	if _, err := s.OpenFile(root, f.FID, OpenReadWrite); err != nil {
		t.Fatal(err)
	}
	rm, err := s.Unlink(root, RootFID, "f")
	if err != nil || !rm.Last || !rm.Orphan || rm.Destroyed || rm.DestroyID != 0 {
		t.Fatalf("unlink of an open file = %+v, %v", rm, err)
	}
	if a := getattr(t, s, f.FID); a.Nlink != 0 {
		t.Fatalf("orphan nlink %d", a.Nlink)
	}
	check(t, s)
	if o, _ := s.Orphans(); !reflect.DeepEqual(o, []fid.FID{f.FID}) {
		t.Fatalf("orphans = %v", o)
	}
	_, err = s.OpenFile(root, f.FID, OpenReadOnly)
	wantErrno(t, "open an orphan", err, syscall.ENOENT)
	rm, err = s.CloseFile(root, f.FID, CloseInfo{Write: true})
	if err != nil || !rm.Destroyed || rm.DestroyID == 0 {
		t.Fatalf("last close = %+v, %v", rm, err)
	}
	_, err = s.CloseFile(root, f.FID, CloseInfo{})
	wantErrno(t, "close again", err, syscall.EBADF)
	// An orphan left by a crash is destroyed by DestroyOrphans.
	g, _ := s.Create(root, RootFID, "g", Spec{Mode: 0o644})
	s.OpenFile(root, g.FID, OpenReadOnly)
	s.Unlink(root, RootFID, "g")
	check(t, s)
	s.Close()
	s2, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	check(t, s2)
	rms, err := s2.DestroyOrphans(root)
	if err != nil || len(rms) != 1 || rms[0].FID != g.FID {
		t.Fatalf("DestroyOrphans = %+v, %v", rms, err)
	}
	check(t, s2)
}

func TestRename(t *testing.T) {
	s := newStore(t)
	a := mkdir(t, s, root, RootFID, "a", 0o755)
	b := mkdir(t, s, root, RootFID, "b", 0o755)
	f := create(t, s, root, a, "f", 0o644)
	g := create(t, s, root, b, "g", 0o644)
	// File within a directory, then across.
	if _, err := s.Rename(root, a, "f", a, "f2", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rename(root, a, "f2", b, "f3", 0); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.FID2Path(f); !reflect.DeepEqual(p, []string{"/b/f3"}) {
		t.Fatalf("path after renames = %v", p)
	}
	// Over an existing file: the target's last link goes.
	rm, err := s.Rename(root, b, "f3", b, "g", 0)
	if err != nil || rm == nil || rm.FID != g || !rm.Last || !rm.Destroyed {
		t.Fatalf("rename over g = %+v, %v", rm, err)
	}
	// A directory across parents: link counts follow.
	d := mkdir(t, s, root, a, "d", 0o755)
	if _, err := s.Rename(root, a, "d", b, "d", 0); err != nil {
		t.Fatal(err)
	}
	if getattr(t, s, a).Nlink != 2 || getattr(t, s, b).Nlink != 3 {
		t.Fatalf("nlinks a=%d b=%d", getattr(t, s, a).Nlink, getattr(t, s, b).Nlink)
	}
	if dd, _ := s.Lookup(root, d, ".."); dd.FID != b {
		t.Fatalf(".. of moved dir = %v", dd.FID)
	}
	// A directory over an empty directory.
	e := mkdir(t, s, root, a, "e", 0o755)
	rm, err = s.Rename(root, b, "d", a, "e", 0)
	if err != nil || rm == nil || rm.FID != e || !rm.Destroyed {
		t.Fatalf("dir over empty dir = %+v, %v", rm, err)
	}
	if getattr(t, s, a).Nlink != 3 || getattr(t, s, b).Nlink != 2 {
		t.Fatalf("nlinks a=%d b=%d", getattr(t, s, a).Nlink, getattr(t, s, b).Nlink)
	}
	// Onto another link of itself: nothing happens.
	s.Link(root, f, a, "hl")
	if rm, err := s.Rename(root, b, "g", a, "hl", 0); err != nil || rm != nil {
		t.Fatalf("rename onto own link = %+v, %v", rm, err)
	}
	if getattr(t, s, f).Nlink != 2 {
		t.Fatal("rename onto own link changed nlink")
	}
	// Exchange a file and a directory across parents.
	if _, err := s.Rename(root, a, "e", b, "g", RenameExchange); err != nil {
		t.Fatal(err)
	}
	if x, _ := s.Lookup(root, b, "g"); x.FID != d {
		t.Fatalf("after exchange b/g = %v, want dir %v", x.FID, d)
	}
	if x, _ := s.Lookup(root, a, "e"); x.FID != f {
		t.Fatalf("after exchange a/e = %v, want file %v", x.FID, f)
	}
	if getattr(t, s, a).Nlink != 2 || getattr(t, s, b).Nlink != 3 {
		t.Fatalf("nlinks after exchange a=%d b=%d", getattr(t, s, a).Nlink, getattr(t, s, b).Nlink)
	}
	// Exchange that would put a directory below itself.
	mkdir(t, s, root, d, "deep", 0o755)
	c := create(t, s, root, RootFID, "c", 0o644)
	_ = c
	dd, _ := s.Lookup(root, d, "deep")
	create(t, s, root, dd.FID, "x", 0o644)
	_, err = s.Rename(root, dd.FID, "x", b, "g", RenameExchange)
	wantErrno(t, "exchange into own subtree", err, syscall.EINVAL)
}

func TestRenameOpenTarget(t *testing.T) {
	s := newStore(t)
	f := create(t, s, root, RootFID, "f", 0o644)
	g, _ := s.Create(root, RootFID, "g", Spec{Mode: 0o644, Layout: striped(5)})
	s.OpenFile(root, g.FID, OpenReadOnly)
	rm, err := s.Rename(root, RootFID, "f", RootFID, "g", 0)
	if err != nil || rm == nil || !rm.Orphan || rm.Destroyed {
		t.Fatalf("rename over open file = %+v, %v", rm, err)
	}
	check(t, s)
	rm2, err := s.CloseFile(root, g.FID, CloseInfo{})
	if err != nil || !rm2.Destroyed || rm2.DestroyID == 0 {
		t.Fatalf("close = %+v, %v", rm2, err)
	}
	if x, _ := s.Lookup(root, RootFID, "g"); x.FID != f {
		t.Fatal("g is not f")
	}
}

func TestReopenKeepsState(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	d := mkdir(t, s, Req{Cred: Root(), Transno: 5}, RootFID, "d", 0o755)
	f := create(t, s, Req{Cred: Root(), Transno: 6}, d, "f", 0o644)
	if s.LastTransno() != 6 {
		t.Fatalf("last transno %d", s.LastTransno())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.LastCommitted() != 6 {
		t.Fatalf("last committed after reopen %d", s.LastCommitted())
	}
	x, err := s.Lookup(root, d, "f")
	if err != nil || x.FID != f {
		t.Fatalf("lookup after reopen = %v, %v", x.FID, err)
	}
	// New FIDs never repeat old ones: a new sequence after a restart.
	g := create(t, s, root, d, "g", 0o644)
	if g.Seq == f.Seq {
		t.Fatalf("same sequence %#x after restart", g.Seq)
	}
	check(t, s)
}

// TestRenameOntoItselfNeedsNoWrite: renaming a name onto itself, or onto
// another link of the same file, does nothing and succeeds (POSIX), even
// for a caller who may not write the directories: Linux returns before
// its permission checks of the parents (vfs_rename).
func TestRenameOntoItselfNeedsNoWrite(t *testing.T) {
	s := newStore(t)
	d := mkdir(t, s, root, RootFID, "d", 0o755) // owned by root: uid 1000 may only search it
	f := create(t, s, root, d, "f", 0o644)
	if _, err := s.Link(root, f, d, "hl"); err != nil {
		t.Fatal(err)
	}
	u := user(1000, 1000)
	for _, tname := range []string{"f", "hl"} {
		if rm, err := s.Rename(u, d, "f", d, tname, 0); err != nil || rm != nil {
			t.Fatalf("rename f onto %s = %+v, %v", tname, rm, err)
		}
	}
	_, err := s.Rename(u, d, "f", d, "g", 0)
	wantErrno(t, "rename to a new name without write permission", err, syscall.EACCES)
	if getattr(t, s, f).Nlink != 2 {
		t.Fatal("nlink changed")
	}
}

// TestTmpfile: an O_TMPFILE file is an orphan from the start, in no
// directory, which the directory's setgid bit and permissions still
// govern; its first link names it (once), unless it was made with O_EXCL;
// one never linked goes at its last close, or with DestroyOrphans after
// a restart; an orphan made by unlink cannot be linked.
func TestTmpfile(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	d := mkdir(t, s, root, RootFID, "d", 0o2777)
	if _, err := s.Setattr(root, d, SetAttr{Valid: AttrGID, GID: 77}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Setattr(root, d, SetAttr{Valid: AttrMode, Mode: 0o2777}); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Getattr(d)
	u := user(1000, 1000)
	a, err := s.Tmpfile(u, d, Spec{Mode: 0o640, Layout: striped(2)}, true)
	if err != nil {
		t.Fatal(err)
	}
	if a.Nlink != 0 || a.Mode != S_IFREG|0o640 || a.UID != 1000 || a.GID != 77 {
		t.Fatalf("tmpfile attributes %+v", a)
	}
	if after, _ := s.Getattr(d); after.Mtime != before.Mtime || after.Nlink != before.Nlink {
		t.Fatalf("directory changed: %+v, was %+v", after, before)
	}
	if ents, _, _ := s.Readdir(root, d, 0, 100); len(ents) != 2 {
		t.Fatalf("directory entries %+v", ents)
	}
	_, err = s.OpenFile(u, a.FID, OpenReadWrite)
	wantErrno(t, "open without OpenTmpfile", err, syscall.ENOENT)
	if _, err := s.OpenFile(u, a.FID, OpenReadWrite|OpenTmpfile); err != nil {
		t.Fatal(err)
	}
	check(t, s)
	if o, _ := s.Orphans(); !reflect.DeepEqual(o, []fid.FID{a.FID}) {
		t.Fatalf("orphans %v", o)
	}
	// Named by its first link, not by a second one while unlinked again.
	l, err := s.Link(u, a.FID, d, "named")
	if err != nil || l.Nlink != 1 {
		t.Fatalf("link = %+v, %v", l, err)
	}
	if o, _ := s.Orphans(); len(o) != 0 {
		t.Fatalf("orphans after the link %v", o)
	}
	check(t, s)
	if _, err := s.Unlink(u, d, "named"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Link(u, a.FID, d, "again")
	wantErrno(t, "link after the unlink", err, syscall.ENOENT)
	if rm, err := s.CloseFile(u, a.FID, CloseInfo{Write: true}); err != nil || !rm.Destroyed {
		t.Fatalf("last close = %+v, %v", rm, err)
	}

	// O_EXCL: never linkable; destroyed at its last close.
	x, err := s.Tmpfile(u, d, Spec{Mode: 0o600}, false)
	if err != nil {
		t.Fatal(err)
	}
	s.OpenFile(u, x.FID, OpenWriteOnly|OpenTmpfile)
	_, err = s.Link(u, x.FID, d, "x")
	wantErrno(t, "link of an O_EXCL tmpfile", err, syscall.ENOENT)
	if rm, err := s.CloseFile(u, x.FID, CloseInfo{Write: true}); err != nil || !rm.Destroyed {
		t.Fatalf("last close of the O_EXCL tmpfile = %+v, %v", rm, err)
	}
	_, err = s.Getattr(x.FID)
	wantErrno(t, "getattr after the last close", err, syscall.ENOENT)

	// Refusals: a directory the caller may not write, a file.
	ro := mkdir(t, s, root, RootFID, "ro", 0o755)
	_, err = s.Tmpfile(u, ro, Spec{Mode: 0o600}, true)
	wantErrno(t, "tmpfile in a directory not writable", err, syscall.EACCES)
	f := create(t, s, root, RootFID, "f", 0o644)
	_, err = s.Tmpfile(root, f, Spec{Mode: 0o600}, true)
	wantErrno(t, "tmpfile in a file", err, syscall.ENOTDIR)

	// One left open by a crash goes with DestroyOrphans.
	y, err := s.Tmpfile(u, d, Spec{Mode: 0o600}, true)
	if err != nil {
		t.Fatal(err)
	}
	s.OpenFile(u, y.FID, OpenReadWrite|OpenTmpfile)
	check(t, s)
	s.Close()
	s2 := newStore2(t, dir)
	rms, err := s2.DestroyOrphans(root)
	if err != nil || len(rms) != 1 || rms[0].FID != y.FID {
		t.Fatalf("DestroyOrphans = %+v, %v", rms, err)
	}
	check(t, s2)
}

// TestMkdirDefaultLayout: a directory made with a default layout (the one
// it inherits) has it from its creation, generation 0; a layout naming
// objects is refused, and no directory made.
func TestMkdirDefaultLayout(t *testing.T) {
	s := newStore(t)
	def := layout.Plain(layout.RAID0{StripeCount: 3, StripeSize: 4 << 20, StripeOffset: layout.AnyOffset})
	def.Gen = 7
	d, err := s.Mkdir(root, RootFID, "striped", Spec{Mode: 0o755, Layout: &def})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetLayout(d.FID)
	if err != nil || got.Gen != 0 || len(got.Components) != 1 || got.Components[0].StripeCount != 3 || got.Components[0].StripeSize != 4<<20 {
		t.Fatalf("the new directory's layout: %+v, %v", got, err)
	}
	_, err = s.Mkdir(root, RootFID, "objects", Spec{Mode: 0o755, Layout: striped(9)})
	wantErrno(t, "mkdir with a layout naming objects", err, syscall.EINVAL)
	_, err = s.Lookup(root, RootFID, "objects")
	wantErrno(t, "the refused directory", err, syscall.ENOENT)
}
