package mdt

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/mds/mdd"
)

// TestConstants: the values mdc sends are the store's.
func TestConstants(t *testing.T) {
	for _, p := range [][2]uint64{
		{uint64(mdc.AttrMode), uint64(mdd.AttrMode)}, {uint64(mdc.AttrUID), uint64(mdd.AttrUID)}, {uint64(mdc.AttrGID), uint64(mdd.AttrGID)},
		{uint64(mdc.AttrSize), uint64(mdd.AttrSize)}, {uint64(mdc.AttrAtime), uint64(mdd.AttrAtime)}, {uint64(mdc.AttrMtime), uint64(mdd.AttrMtime)},
		{uint64(mdc.AttrCtime), uint64(mdd.AttrCtime)}, {uint64(mdc.AttrAtimeNow), uint64(mdd.AttrAtimeNow)},
		{uint64(mdc.AttrMtimeNow), uint64(mdd.AttrMtimeNow)}, {uint64(mdc.AttrFlags), uint64(mdd.AttrFlags)},
		{uint64(mdc.AttrBlocks), uint64(mdd.AttrBlocks)}, {uint64(mdc.AttrOpenWrite), uint64(mdd.AttrOpenWrite)},
		{mdc.CapRoot, mdd.CapRoot}, {mdc.CapDacReadSearch, mdd.CapDacReadSearch}, {mdc.DirEnd, mdd.DirEnd},
		{uint64(mdc.RenameNoReplace), mdd.RenameNoReplace}, {uint64(mdc.RenameExchange), mdd.RenameExchange},
		{mdc.XattrCreate, mdd.XattrCreate}, {mdc.XattrReplace, mdd.XattrReplace},
		{uint64(mdc.ItOpen), uint64(ItOpen)}, {uint64(mdc.ItCreat), uint64(ItCreat)}, {uint64(mdc.ItGetattr), uint64(ItGetattr)},
		{uint64(mdc.ItLookup), uint64(ItLookup)}, {syscall.O_CREAT, oCreat}, {syscall.O_EXCL, oExcl},
	} {
		if p[0] != p[1] {
			t.Errorf("mdc value %#x, mdd value %#x", p[0], p[1])
		}
	}
}

// TestNamespace drives every namespace operation through mdc → PtlRPC →
// the MDT, with their error cases, as root.
func TestNamespace(t *testing.T) {
	c := newCluster(t, 0, nil)
	n := c.client()
	ctx := ctxT(t, time.Minute)
	m := n.mdc
	r := n.root

	if r != mdd.RootFID {
		t.Fatalf("root %v", r)
	}
	ra, err := m.Getattr(ctx, root, r)
	if err != nil || ra.Mode != syscall.S_IFDIR|0o755 || ra.Nlink != 2 {
		t.Fatalf("root attrs %+v: %v", ra, err)
	}

	// mkdir, create, lookup, getattr.
	d, err := m.Mkdir(ctx, root, r, "d", 0o755)
	if err != nil || d.Mode != syscall.S_IFDIR|0o755 || !d.FID.IsNormal() {
		t.Fatalf("mkdir: %+v %v", d, err)
	}
	_, err = m.Mkdir(ctx, root, r, "d", 0o755)
	wantErrno(t, "mkdir existing", err, syscall.EEXIST)
	f, l, err := m.Create(ctx, root, d.FID, "f", 0o640, nil)
	if err != nil || f.Mode != syscall.S_IFREG|0o640 || l != nil {
		t.Fatalf("create: %+v %v %v", f, l, err)
	}
	_, _, err = m.Create(ctx, root, d.FID, "f", 0o640, nil)
	wantErrno(t, "create existing", err, syscall.EEXIST)
	_, _, err = m.Create(ctx, root, f.FID, "x", 0o640, nil)
	wantErrno(t, "create in a file", err, syscall.ENOTDIR)
	_, _, err = m.Create(ctx, root, d.FID, strings.Repeat("n", 256), 0o640, nil)
	wantErrno(t, "create long name", err, syscall.ENAMETOOLONG)
	if a, err := m.Lookup(ctx, root, d.FID, "f"); err != nil || a.FID != f.FID {
		t.Fatalf("lookup: %+v %v", a, err)
	}
	_, err = m.Lookup(ctx, root, d.FID, "nope")
	wantErrno(t, "lookup missing", err, syscall.ENOENT)
	_, err = m.Lookup(ctx, root, f.FID, "x")
	wantErrno(t, "lookup in a file", err, syscall.ENOTDIR)
	if a, err := m.Lookup(ctx, root, d.FID, ".."); err != nil || a.FID != r {
		t.Fatalf("lookup ..: %+v %v", a, err)
	}
	if a, err := m.Getattr(ctx, root, d.FID); err != nil || a.Nlink != 2 {
		t.Fatalf("getattr dir: %+v %v", a, err)
	}

	// mknod, symlink, readlink.
	fifo, err := m.Mknod(ctx, root, d.FID, "fifo", syscall.S_IFIFO|0o600, 0)
	if err != nil || fifo.Mode != syscall.S_IFIFO|0o600 {
		t.Fatalf("mknod fifo: %+v %v", fifo, err)
	}
	if dev, err := m.Mknod(ctx, root, d.FID, "dev", syscall.S_IFCHR|0o600, 0x0103); err != nil || dev.Rdev != 0x0103 {
		t.Fatalf("mknod chr: %+v %v", dev, err)
	}
	_, err = m.Mknod(ctx, root, d.FID, "x", syscall.S_IFDIR|0o600, 0)
	wantErrno(t, "mknod dir", err, syscall.EINVAL)
	s, err := m.Symlink(ctx, root, d.FID, "s", "../target")
	if err != nil || s.Mode&syscall.S_IFMT != syscall.S_IFLNK || s.Size != 9 {
		t.Fatalf("symlink: %+v %v", s, err)
	}
	if got, err := m.Readlink(ctx, root, s.FID); err != nil || got != "../target" {
		t.Fatalf("readlink: %q %v", got, err)
	}
	_, err = m.Readlink(ctx, root, f.FID)
	wantErrno(t, "readlink of a file", err, syscall.EINVAL)
	_, err = m.Symlink(ctx, root, d.FID, "s2", "")
	wantErrno(t, "symlink to nothing", err, syscall.ENOENT)

	// link.
	if a, err := m.Link(ctx, root, f.FID, r, "f-link"); err != nil || a.Nlink != 2 {
		t.Fatalf("link: %+v %v", a, err)
	}
	_, err = m.Link(ctx, root, d.FID, r, "d-link")
	wantErrno(t, "link a directory", err, syscall.EPERM)
	_, err = m.Link(ctx, root, f.FID, r, "f-link")
	wantErrno(t, "link over an existing name", err, syscall.EEXIST)

	// setattr.
	a, err := m.Setattr(ctx, root, f.FID, mdc.SetAttr{Valid: mdc.AttrMode | mdc.AttrUID | mdc.AttrGID, Mode: 0o600, UID: 7, GID: 8})
	if err != nil || a.Mode != syscall.S_IFREG|0o600 || a.UID != 7 || a.GID != 8 {
		t.Fatalf("setattr: %+v %v", a, err)
	}
	a, err = m.Setattr(ctx, root, f.FID, mdc.SetAttr{Valid: mdc.AttrSize | mdc.AttrMtime, Size: 12345, Mtime: 1e18})
	if err != nil || a.Size != 12345 || a.Mtime != 1e18 {
		t.Fatalf("truncate: %+v %v", a, err)
	}
	_, err = m.Setattr(ctx, root, d.FID, mdc.SetAttr{Valid: mdc.AttrSize, Size: 1})
	wantErrno(t, "truncate a directory", err, syscall.EISDIR)

	// xattrs.
	if err := m.Setxattr(ctx, root, f.FID, "user.color", []byte("blue"), 0); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "setxattr create existing", m.Setxattr(ctx, root, f.FID, "user.color", []byte("red"), mdc.XattrCreate), syscall.EEXIST)
	wantErrno(t, "setxattr replace missing", m.Setxattr(ctx, root, f.FID, "user.size", []byte("big"), mdc.XattrReplace), syscall.ENODATA)
	big := bytes.Repeat([]byte("v"), mdd.MaxXattrValue)
	if err := m.Setxattr(ctx, root, f.FID, "user.big", big, 0); err != nil {
		t.Fatalf("setxattr of %d bytes: %v", len(big), err)
	}
	if v, err := m.Getxattr(ctx, root, f.FID, "user.big"); err != nil || !bytes.Equal(v, big) {
		t.Fatalf("getxattr big: %d bytes, %v", len(v), err)
	}
	if v, err := m.Getxattr(ctx, root, f.FID, "user.color"); err != nil || string(v) != "blue" {
		t.Fatalf("getxattr: %q %v", v, err)
	}
	if names, err := m.Listxattr(ctx, root, f.FID); err != nil || !slices.Equal(names, []string{"user.big", "user.color"}) {
		t.Fatalf("listxattr: %q %v", names, err)
	}
	if err := m.Removexattr(ctx, root, f.FID, "user.color"); err != nil {
		t.Fatal(err)
	}
	_, err = m.Getxattr(ctx, root, f.FID, "user.color")
	wantErrno(t, "getxattr removed", err, syscall.ENODATA)
	wantErrno(t, "removexattr missing", m.Removexattr(ctx, root, f.FID, "user.color"), syscall.ENODATA)
	wantErrno(t, "setxattr unknown namespace", m.Setxattr(ctx, root, f.FID, "bogus.x", []byte("1"), 0), syscall.EOPNOTSUPP)

	// rename, incl. over an existing target, and loops.
	if err := m.Rename(ctx, root, d.FID, "f", r, "g", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lookup(ctx, root, d.FID, "f"); err == nil {
		t.Fatal("rename left the source")
	}
	other, _, err := m.Create(ctx, root, r, "other", 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Rename(ctx, root, r, "other", r, "g", 0); err != nil {
		t.Fatalf("rename over a file: %v", err)
	}
	if a, err := m.Lookup(ctx, root, r, "g"); err != nil || a.FID != other.FID {
		t.Fatalf("after rename over: %+v %v", a, err)
	}
	if a, err := m.Getattr(ctx, root, f.FID); err != nil || a.Nlink != 1 {
		t.Fatalf("the replaced file keeps its other link: %+v %v", a, err)
	}
	sub, err := m.Mkdir(ctx, root, d.FID, "sub", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "rename into own subtree", m.Rename(ctx, root, r, "d", sub.FID, "d2", 0), syscall.EINVAL)
	wantErrno(t, "rename into itself", m.Rename(ctx, root, r, "d", d.FID, "x", 0), syscall.EINVAL)
	wantErrno(t, "rename missing", m.Rename(ctx, root, r, "nope", r, "x", 0), syscall.ENOENT)
	wantErrno(t, "rename dir over its non-empty parent", m.Rename(ctx, root, d.FID, "sub", r, "d", 0), syscall.ENOTEMPTY)
	empty, err := m.Mkdir(ctx, root, r, "empty", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "rename dir over a file", m.Rename(ctx, root, r, "empty", r, "g", 0), syscall.ENOTDIR)
	wantErrno(t, "rename file over a dir", m.Rename(ctx, root, r, "g", r, "empty", 0), syscall.EISDIR)
	wantErrno(t, "rename noreplace", m.Rename(ctx, root, r, "g", r, "f-link", mdc.RenameNoReplace), syscall.EEXIST)
	if err := m.Rename(ctx, root, d.FID, "sub", r, "empty", 0); err != nil {
		t.Fatalf("rename dir over empty dir: %v", err)
	}
	if _, err := m.Getattr(ctx, root, empty.FID); err == nil {
		t.Fatal("the replaced empty directory still exists")
	}
	if err := m.Rename(ctx, root, r, "g", r, "f-link", mdc.RenameExchange); err != nil {
		t.Fatalf("rename exchange: %v", err)
	}
	if a, _ := m.Lookup(ctx, root, r, "f-link"); a.FID != other.FID {
		t.Fatalf("exchange did not swap: %+v", a)
	}

	// unlink, rmdir.
	wantErrno(t, "unlink a directory", m.Unlink(ctx, root, r, "d"), syscall.EISDIR)
	wantErrno(t, "rmdir a file", m.Rmdir(ctx, root, r, "g"), syscall.ENOTDIR)
	wantErrno(t, "rmdir non-empty", m.Rmdir(ctx, root, r, "d"), syscall.ENOTEMPTY)
	wantErrno(t, "unlink missing", m.Unlink(ctx, root, r, "nope"), syscall.ENOENT)
	wantErrno(t, "rmdir .", m.Rmdir(ctx, root, d.FID, "."), syscall.EINVAL)
	for _, name := range []string{"fifo", "dev", "s"} {
		if err := m.Unlink(ctx, root, d.FID, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Rmdir(ctx, root, d.FID, "sub"); err == nil {
		t.Fatal("rmdir of a moved directory")
	}
	if err := m.Rmdir(ctx, root, r, "d"); err != nil {
		t.Fatal(err)
	}
	_, err = m.Getattr(ctx, root, d.FID)
	wantErrno(t, "getattr removed dir", err, syscall.ENOENT)

	// fid2path, statfs, sync, FLD.
	if p, err := m.FID2Path(ctx, root, f.FID); err != nil || !slices.Equal(p, []string{"/g"}) {
		t.Fatalf("fid2path: %q %v", p, err)
	}
	_, err = m.FID2Path(ctx, user(5, 5), f.FID)
	wantErrno(t, "fid2path as a user", err, syscall.EPERM)
	st, err := m.Statfs(ctx)
	if err != nil || st.Files == 0 || st.Ffree >= st.Files || st.Namelen != 255 {
		t.Fatalf("statfs: %+v %v", st, err)
	}
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if un := n.imp.Uncommitted(); len(un) != 0 {
		t.Fatalf("uncommitted after sync: %v", un)
	}
	e, err := m.FLDQuery(ctx, f.FID.Seq)
	if err != nil || e.Type != 0 || e.Index != 0 || e.Start > f.FID.Seq || e.End <= f.FID.Seq {
		t.Fatalf("fld query: %+v %v", e, err)
	}
	_, err = m.FLDQuery(ctx, 0xffff_0000_0000)
	wantErrno(t, "fld query of a sequence nobody has", err, syscall.ENOENT)
	c.check()
}

// TestReaddir pages through a directory and checks the iterator.
func TestReaddir(t *testing.T) {
	c := newCluster(t, 0, nil)
	n := c.client()
	ctx := ctxT(t, time.Minute)
	d, err := n.mdc.Mkdir(ctx, root, n.root, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{".": true, "..": true}
	for i := range 300 {
		name := strings.Repeat("x", i%200) + "-" + string(rune('a'+i%26)) + "-" + itoa(i)
		if _, err := n.mdc.Mknod(ctx, root, d.FID, name, syscall.S_IFIFO|0o644, 0); err != nil {
			t.Fatal(err)
		}
		want[name] = true
	}
	got := map[string]bool{}
	for e, err := range n.mdc.Readdir(ctx, root, d.FID) {
		if err != nil {
			t.Fatal(err)
		}
		if got[e.Name] {
			t.Fatalf("%q twice", e.Name)
		}
		got[e.Name] = true
	}
	if len(got) != len(want) {
		t.Fatalf("readdir gave %d entries, want %d", len(got), len(want))
	}
	// Small pages.
	pages, cookie := 0, uint64(0)
	seen := 0
	for cookie != mdc.DirEnd {
		ents, next, err := n.mdc.ReadPage(ctx, root, d.FID, cookie, 7)
		if err != nil {
			t.Fatal(err)
		}
		seen += len(ents)
		cookie = next
		pages++
	}
	if seen != len(want) || pages < 300/7 {
		t.Fatalf("%d entries in %d pages", seen, pages)
	}
	_, _, err = n.mdc.ReadPage(ctx, root, n.root, 0, 1)
	wantErrno(t, "readdir of the root", err, 0)
	f, _, err := n.mdc.Create(ctx, root, n.root, "file", 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = n.mdc.ReadPage(ctx, root, f.FID, 0, 10)
	wantErrno(t, "readdir of a file", err, syscall.ENOTDIR)
	_, _, err = n.mdc.ReadPage(ctx, user(9, 9), d.FID, 0, 10)
	wantErrno(t, "readdir as a user without read permission (0755: allowed)", err, 0)
}

func itoa(i int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
		if i == 0 {
			return string(b)
		}
	}
}

// TestPermissions: a non-root caller meets POSIX permissions on every
// operation through the wire.
func TestPermissions(t *testing.T) {
	c := newCluster(t, 0, nil)
	n := c.client()
	ctx := ctxT(t, time.Minute)
	m := n.mdc
	alice, bob := user(1000, 1000), user(1001, 1001)
	pub, err := m.Mkdir(ctx, root, n.root, "pub", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := m.Mkdir(ctx, root, n.root, "priv", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = m.Create(ctx, alice, priv.FID, "x", 0o644, nil)
	wantErrno(t, "create in root's 0700 dir", err, syscall.EACCES)
	_, err = m.Lookup(ctx, alice, priv.FID, "anything")
	wantErrno(t, "lookup in root's 0700 dir", err, syscall.EACCES)
	// READDIR checks no permission, as Lustre's readpage: the client
	// checked read permission at the open of the directory.
	_, _, err = m.ReadPage(ctx, alice, priv.FID, 0, 10)
	wantErrno(t, "readdir of root's 0700 dir", err, 0)

	af, _, err := m.Create(ctx, alice, pub.FID, "alice", 0o666, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The open flags only the MDT sets (a replay's, a creator's) and the
	// HSM restore's are no way past the permissions for a client.
	for _, fl := range []struct {
		flag uint64
		want syscall.Errno
	}{{mdd.OpenReplay, syscall.EACCES}, {mdd.OpenOwnerOverride, syscall.EACCES}, {mdd.OpenRestore, syscall.EPERM}} {
		_, err = m.Enqueue(ctx, bob, mdc.Intent{Op: mdc.ItOpen, FID: af.FID, Flags: syscall.O_WRONLY | fl.flag}, ldlm.Hooks{})
		wantErrno(t, fmt.Sprintf("bob's open of alice's 0644 file for write with flag %#x", fl.flag), err, fl.want)
	}
	if af.UID != 1000 || af.GID != 1000 || af.Mode != syscall.S_IFREG|0o644 {
		t.Fatalf("alice's file %+v (umask 022)", af)
	}
	_, err = m.Setattr(ctx, bob, af.FID, mdc.SetAttr{Valid: mdc.AttrMode, Mode: 0o777})
	wantErrno(t, "chmod of another's file", err, syscall.EPERM)
	_, err = m.Setattr(ctx, alice, af.FID, mdc.SetAttr{Valid: mdc.AttrUID, UID: 1001})
	wantErrno(t, "chown without CAP_CHOWN", err, syscall.EPERM)
	_, err = m.Setattr(ctx, bob, af.FID, mdc.SetAttr{Valid: mdc.AttrSize, Size: 0})
	wantErrno(t, "truncate of another's 0644 file", err, syscall.EACCES)
	_, err = m.Setattr(ctx, bob, af.FID, mdc.SetAttr{Valid: mdc.AttrMtime, Mtime: 5})
	wantErrno(t, "utimes of another's file", err, syscall.EPERM)
	if _, err := m.Setattr(ctx, alice, af.FID, mdc.SetAttr{Valid: mdc.AttrMode, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	_, err = m.Open(ctx, bob, pub.FID, "alice", syscall.O_RDONLY, 0, nil)
	wantErrno(t, "open of another's 0600 file", err, syscall.EACCES)
	_, err = m.OpenFID(ctx, bob, af.FID, syscall.O_WRONLY)
	wantErrno(t, "open by FID of another's 0600 file", err, syscall.EACCES)
	wantErrno(t, "user xattr on another's 0600 file", m.Setxattr(ctx, bob, af.FID, "user.x", []byte("1"), 0), syscall.EACCES)
	wantErrno(t, "trusted xattr as a user", m.Setxattr(ctx, alice, af.FID, "trusted.x", []byte("1"), 0), syscall.EPERM)
	_, err = m.Mknod(ctx, alice, pub.FID, "dev", syscall.S_IFBLK|0o600, 1)
	wantErrno(t, "mknod of a device without CAP_MKNOD", err, syscall.EPERM)

	// The sticky bit: bob may not remove or rename alice's file in a
	// sticky directory, or replace it.
	if _, err := m.Setattr(ctx, root, pub.FID, mdc.SetAttr{Valid: mdc.AttrMode, Mode: 0o1777}); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "unlink in a sticky dir", m.Unlink(ctx, bob, pub.FID, "alice"), syscall.EPERM)
	wantErrno(t, "rename from a sticky dir", m.Rename(ctx, bob, pub.FID, "alice", pub.FID, "mine", 0), syscall.EPERM)
	if _, _, err := m.Create(ctx, bob, pub.FID, "bob", 0o644, nil); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "rename over another's file in a sticky dir", m.Rename(ctx, bob, pub.FID, "bob", pub.FID, "alice", 0), syscall.EPERM)
	wantErrno(t, "link into root's 0700 dir", func() error { _, err := m.Link(ctx, bob, af.FID, priv.FID, "l"); return err }(), syscall.EACCES)
	wantErrno(t, "rmdir as a user in the root", m.Rmdir(ctx, alice, n.root, "priv"), syscall.EACCES)
	if err := m.Unlink(ctx, alice, pub.FID, "alice"); err != nil {
		t.Fatalf("the owner unlinks in a sticky dir: %v", err)
	}
	// Groups: a group-writable directory admits its group's members.
	grp, err := m.Mkdir(ctx, root, n.root, "grp", 0o770)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Setattr(ctx, root, grp.FID, mdc.SetAttr{Valid: mdc.AttrGID, GID: 500}); err != nil {
		t.Fatal(err)
	}
	_, _, err = m.Create(ctx, alice, grp.FID, "x", 0o644, nil)
	wantErrno(t, "create without the group", err, syscall.EACCES)
	if _, _, err := m.Create(ctx, user(1000, 1000, 500), grp.FID, "x", 0o644, nil); err != nil {
		t.Fatalf("create with the group: %v", err)
	}
	c.check()
}

// sameFID reports whether two FIDs are equal (for readability).
func sameFID(a, b fid.FID) bool { return a == b }
