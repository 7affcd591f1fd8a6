package mdd

import (
	"strings"
	"syscall"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
)

// MaxName is the longest entry name (NAME_MAX).
const MaxName = 255

// LinkMax is the most hard links a file may have (ldiskfs's limit).
const LinkMax = 65000

// checkName validates an entry name: ENAMETOOLONG over MaxName bytes,
// EINVAL if empty or holding '/' or NUL.
func checkName(name string) error {
	switch {
	case len(name) > MaxName:
		return fail(syscall.ENAMETOOLONG, "name of %d bytes", len(name))
	case name == "" || strings.ContainsAny(name, "/\x00"):
		return fail(syscall.EINVAL, "name %q", clampName(name))
	}
	return nil
}

// checkNewName also refuses "." and ".." (EEXIST: they always exist).
func checkNewName(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if name == "." || name == ".." {
		return fail(syscall.EEXIST, "name %q", name)
	}
	return nil
}

// Spec describes a new inode.
type Spec struct {
	// FID names the new inode, as the client minted it from its
	// sequence; the zero FID asks the store to mint one. A given FID must
	// be sane, belong by the FLD to this MDT, and be unused (EEXIST).
	FID fid.FID
	// Mode holds the permission bits (PermMask) as the client asks them,
	// before the umask; Mknod also takes the file type here.
	Mode uint32
	// Rdev is the device number of a character or block device (Mknod).
	Rdev uint64
	// Layout is the layout of a new regular file (Create), validated and
	// stored as the layout EA; nil for none yet.
	Layout *layout.Layout
	// Alloc, if set (and Layout nil), gives a new regular file its layout
	// with objects: it is called once the create is sure to be applied,
	// with the store's lock held, so that objects are taken from the
	// MDT's precreated pools in the order creates are applied and the
	// OSTs' last objects (LastObjects) stay exact. It must not block. An
	// error fails the create with nothing changed; an invalid layout fails
	// it with EINVAL.
	Alloc func() (layout.Layout, error)
	// Tmpfile makes a regular file with no name (Tmpfile); Linkable lets
	// Link give it one.
	Tmpfile, Linkable bool
}

// Create makes a regular file name in directory parent and returns its
// attributes. The caller needs search and write permission on parent.
// Outcomes: the new attributes; ENOENT (no parent), ENOTDIR (parent not a
// directory), EACCES, EEXIST (name taken, or "." and ".."), EINVAL or
// ENAMETOOLONG (bad name, bad FID, bad layout), ENOSPC (no sequence left).
// The new inode's owner is the caller; its group is the caller's, or the
// parent's if the parent is setgid; its mode is Spec.Mode less the umask,
// or masked by the parent's default ACL, which it then inherits as its
// access ACL.
func (s *Store) Create(r Req, parent fid.FID, name string, sp Spec) (Attr, error) {
	sp.Mode = S_IFREG | sp.Mode&PermMask
	return s.create(&r, parent, name, sp, "", CLCreate)
}

// Tmpfile makes a regular file in no directory, as open(2) with
// O_TMPFILE does in dir: an orphan (no link, destroyed when its last open
// closes unless a link gave it a name first), so the caller opens it with
// OpenTmpfile straight after. dir, in which the caller needs search and
// write permission, gives it its group and default ACL as to a file
// created there; it does not change. A linkable file (O_TMPFILE without
// O_EXCL) may get its first name from Link. Outcomes as Create's.
func (s *Store) Tmpfile(r Req, dir fid.FID, sp Spec, linkable bool) (Attr, error) {
	sp.Mode = S_IFREG | sp.Mode&PermMask
	sp.Tmpfile, sp.Linkable = true, linkable
	return s.create(&r, dir, "", sp, "", CLCreate)
}

// Mkdir makes a directory, as Create does a file; it also inherits the
// parent's default ACL as its own default ACL, and the setgid bit of a
// setgid parent. The parent's link count goes up by one. Spec.Layout, if
// set, is the new directory's default layout (the one it inherits from
// its parent), in the same transaction; it may name no objects.
func (s *Store) Mkdir(r Req, parent fid.FID, name string, sp Spec) (Attr, error) {
	if sp.Layout != nil {
		if hasObjects(sp.Layout) {
			return Attr{}, fail(syscall.EINVAL, "mkdir %q: a default layout naming objects", clampName(name))
		}
		l := sp.Layout.Clone()
		l.Gen = 0
		sp.Layout = &l
	}
	sp.Mode = S_IFDIR | sp.Mode&(0o777|S_ISVTX)
	return s.create(&r, parent, name, sp, "", CLMkdir)
}

// Mknod makes a special file: Spec.Mode carries the type (S_IFIFO,
// S_IFSOCK, S_IFCHR, S_IFBLK, or S_IFREG for a plain file), otherwise as
// Create. Devices need CapMknod (EPERM); S_IFDIR is EPERM and an unknown
// type EINVAL, as mknod(2) says.
func (s *Store) Mknod(r Req, parent fid.FID, name string, sp Spec) (Attr, error) {
	switch sp.Mode & S_IFMT {
	case S_IFCHR, S_IFBLK:
		if !r.Cred.Has(CapMknod) {
			return Attr{}, fail(syscall.EPERM, "mknod %q: device without CAP_MKNOD", clampName(name))
		}
	case S_IFIFO, S_IFSOCK, S_IFREG:
		sp.Rdev = 0
	case S_IFDIR:
		return Attr{}, fail(syscall.EPERM, "mknod %q: a directory", clampName(name))
	default:
		return Attr{}, fail(syscall.EINVAL, "mknod %q: mode %#o", clampName(name), sp.Mode)
	}
	if sp.Layout != nil && sp.Mode&S_IFMT != S_IFREG {
		return Attr{}, fail(syscall.EINVAL, "mknod %q: a layout on a special file", clampName(name))
	}
	sp.Mode &= S_IFMT | PermMask
	return s.create(&r, parent, name, sp, "", CLMknod)
}

// Symlink makes a symbolic link to target (1..MaxSymlink bytes: ENOENT if
// empty, ENAMETOOLONG if longer), mode 0777, otherwise as Create.
func (s *Store) Symlink(r Req, parent fid.FID, name, target string, sp Spec) (Attr, error) {
	switch {
	case target == "":
		return Attr{}, fail(syscall.ENOENT, "symlink %q: empty target", clampName(name))
	case len(target) > MaxSymlink:
		return Attr{}, fail(syscall.ENAMETOOLONG, "symlink %q: target of %d bytes", clampName(name), len(target))
	case strings.IndexByte(target, 0) >= 0:
		return Attr{}, fail(syscall.EINVAL, "symlink %q: NUL in the target", clampName(name))
	}
	sp.Mode, sp.Layout = S_IFLNK|0o777, nil
	return s.create(&r, parent, name, sp, target, CLSoftlink)
}

func (s *Store) create(r *Req, parent fid.FID, name string, sp Spec, target string, cl ChangelogType) (Attr, error) {
	if !sp.Tmpfile { // (which has no name)
		if err := checkNewName(name); err != nil {
			return Attr{}, err
		}
	}
	var lb []byte
	if sp.Layout != nil {
		var err error
		if lb, err = sp.Layout.Marshal(); err != nil {
			return Attr{}, fail(syscall.EINVAL, "create %q: %v", clampName(name), err)
		}
	}
	t := s.begin(r)
	n, err := t.create(parent, name, sp, target, lb, cl)
	switch {
	case err != nil:
	case sp.Layout != nil:
		t.noteObjects(sp.Layout)
	case sp.Alloc != nil && n.Mode&S_IFMT == S_IFREG:
		err = t.alloc(n.FID, sp.Alloc)
	default:
		// Nor a layout, then (a file of a filesystem without OSTs, a
		// directory, a special file): an unlink need not look. Noted
		// only when this transaction writes none, since a note could
		// outlive the record in a cache shard emptied between the two.
		t.absent = append(t.absent, fidKey(pfxLayout, n.FID))
	}
	if err = t.finish(err); err != nil {
		return Attr{}, err
	}
	return n.attr(nil), nil
}

// alloc stores the layout alloc gives the new file f.
func (t *tx) alloc(f fid.FID, alloc func() (layout.Layout, error)) error {
	l, err := alloc()
	if err != nil {
		return err
	}
	b, err := l.Marshal()
	if err != nil {
		return fail(syscall.EINVAL, "layout of %v: %v", f, err)
	}
	t.b.Set(fidKey(pfxLayout, f), b, nil)
	t.noteObjects(&l)
	return nil
}

func (t *tx) create(parent fid.FID, name string, sp Spec, target string, lb []byte, cl ChangelogType) (*inode, error) {
	c := &t.r.Cred
	dir, err := t.dir(parent)
	if err != nil {
		return nil, err
	}
	if err := t.may(dir, MayExec); err != nil {
		return nil, err
	}
	if sp.Tmpfile {
		// No name to look up.
	} else if _, _, found, err := t.lookup(parent, name); err != nil {
		return nil, err
	} else if found {
		return nil, fail(syscall.EEXIST, "create %q in %v", clampName(name), parent)
	}
	if err := t.may(dir, MayWrite|MayExec); err != nil {
		return nil, err
	}
	f := sp.FID
	if f.IsZero() {
		// Minted here from a sequence nobody else has: new by
		// construction.
		if f, err = t.s.mintLocked(); err != nil {
			return nil, err
		}
	} else if err := t.s.checkNewFIDLocked(f); err != nil {
		return nil, err
	} else if unused, err := t.s.unusedFIDLocked(f); err != nil {
		return nil, err
	} else if !unused {
		if _, err := t.inode(f); err == nil {
			return nil, fail(syscall.EEXIST, "create %q: FID %v in use", clampName(name), f)
		} else if Errno(err) != syscall.ENOENT {
			return nil, err
		}
	}
	mode := sp.Mode
	n := &inode{Attr: Attr{FID: f, UID: c.UID, GID: c.GID, Nlink: 1, Rdev: sp.Rdev,
		Atime: t.now, Mtime: t.now, Ctime: t.now, Crtime: t.now}, target: target, iflags: inoXattrsTracked}
	// Group and setgid, as inode_init_owner does.
	if dir.Mode&S_ISGID != 0 {
		n.GID = dir.GID
		if isDir(mode) {
			mode |= S_ISGID
		} else if mode&(S_ISGID|0o010) == S_ISGID|0o010 && !c.InGroup(n.GID) && !c.Has(CapFsetid) {
			mode &^= S_ISGID
		}
	}
	// The default ACL, or the umask (posix_acl_create).
	var access, dflt ACL
	if mode&S_IFMT != S_IFLNK {
		if dflt, err = t.acl(dir, XattrACLDefault); err != nil {
			return nil, err
		}
		if dflt != nil {
			var perm uint32
			access, perm = dflt.createMasq(mode & 0o777)
			mode = mode&^0o777 | perm
			if !isDir(mode) {
				dflt = nil
			}
		} else {
			mode &^= c.Umask & 0o777
		}
	}
	n.Mode = mode
	switch mode & S_IFMT {
	case S_IFDIR:
		n.Nlink, n.Size = 2, DirSize
		dir.Nlink++
		t.newDirs = append(t.newDirs, f)
	case S_IFLNK:
		n.Size = uint64(len(target))
	}
	if access != nil {
		n.iflags |= inoACL
		t.b.Set(xattrKey(f, XattrACLAccess), access.Marshal(), nil)
	}
	if dflt != nil {
		n.iflags |= inoDefaultACL
		t.b.Set(xattrKey(f, XattrACLDefault), dflt.Marshal(), nil)
	}
	if lb != nil {
		t.b.Set(fidKey(pfxLayout, f), lb, nil)
	}
	t.inodes[f] = n
	t.touch(n)
	// A new FID is nobody's (unusedFIDLocked, or minted here): it has no
	// LSOM record.
	t.absent = append(t.absent, fidKey(pfxLSOM, f))
	t.inodeDelta++
	if sp.Tmpfile {
		// An orphan from the start; the directory is left as it was
		// (Linux's vfs_tmpfile changes nothing in it).
		n.Nlink = 0
		if sp.Linkable {
			n.iflags |= inoLinkable
		}
		t.b.Set(fidKey(pfxOrphan, f), nil, nil)
		return n, nil
	}
	dir.Mtime, dir.Ctime = t.now, t.now
	t.touch(dir)
	t.addEntry(parent, name, n)
	t.changelog(ChangelogRecord{Type: cl, TFID: f, PFID: parent, Name: name})
	return n, nil
}

// attr returns n's attributes with the LSOM size of a regular file.
func (n *inode) attr(som *LSOM) Attr {
	a := n.Attr
	a.NoXattrs = !n.mayHaveXattrs()
	if isDir(a.Mode) {
		a.Blocks = DirSize / 512
	}
	if som != nil {
		a.Size, a.Blocks = som.Size, som.Blocks
	}
	return a
}

// Lookup returns the attributes of entry name in directory parent. The
// caller needs search permission on parent. "." is parent itself and ".."
// its parent. Outcomes: the attributes; ENOENT (no parent or no such
// entry), ENOTDIR, EACCES, EINVAL or ENAMETOOLONG (bad name).
func (s *Store) Lookup(r Req, parent fid.FID, name string) (Attr, error) {
	if err := checkName(name); err != nil {
		return Attr{}, err
	}
	t := s.read(&r)
	defer t.done()
	dir, err := t.dir(parent)
	if err != nil {
		return Attr{}, err
	}
	if err := t.may(dir, MayExec); err != nil {
		return Attr{}, err
	}
	var child fid.FID
	switch name {
	case ".":
		child = parent
	case "..":
		if child, err = t.parentOf(parent); err != nil {
			return Attr{}, err
		}
	default:
		var found bool
		if child, _, found, err = t.lookup(parent, name); err != nil {
			return Attr{}, err
		} else if !found {
			return Attr{}, fail(syscall.ENOENT, "lookup %q in %v", clampName(name), parent)
		}
	}
	return t.getattr(child)
}

func (t *tx) getattr(f fid.FID) (Attr, error) {
	n, err := t.inode(f)
	if err != nil {
		return Attr{}, err
	}
	if n.Mode&S_IFMT != S_IFREG {
		return n.attr(nil), nil
	}
	som, ok, err := t.s.lsom(f)
	if err != nil || !ok {
		return n.attr(nil), err
	}
	return n.attr(&som), nil
}

// Getattr returns the attributes of f (an orphan too, with Nlink 0).
// No permission is needed: the client found f through lookups that were
// checked. ENOENT if f does not exist.
func (s *Store) Getattr(f fid.FID) (Attr, error) {
	t := s.read(&Req{})
	defer t.done()
	return t.getattr(f)
}

// Readlink returns a symlink's target; EINVAL for another type, ENOENT if
// f does not exist.
func (s *Store) Readlink(f fid.FID) (string, error) {
	t := s.read(&Req{})
	defer t.done()
	n, err := t.inode(f)
	if err != nil {
		return "", err
	}
	if n.Mode&S_IFMT != S_IFLNK {
		return "", fail(syscall.EINVAL, "readlink %v: not a symlink", f)
	}
	return n.target, nil
}

// Link makes name in directory parent a new hard link to f. The caller
// needs search and write permission on parent. Outcomes: f's attributes
// with the new link count; ENOENT (no f, f unlinked, no parent), ENOTDIR,
// EACCES, EEXIST, EPERM (f is a directory), EMLINK (LinkMax links),
// EINVAL or ENAMETOOLONG (bad name).
func (s *Store) Link(r Req, f, parent fid.FID, name string) (Attr, error) {
	if err := checkNewName(name); err != nil {
		return Attr{}, err
	}
	t := s.begin(&r)
	n, err := t.link(f, parent, name)
	if err = t.finish(err); err != nil {
		return Attr{}, err
	}
	return s.Getattr(n.FID)
}

func (t *tx) link(f, parent fid.FID, name string) (*inode, error) {
	dir, err := t.dir(parent)
	if err != nil {
		return nil, err
	}
	if err := t.may(dir, MayExec); err != nil {
		return nil, err
	}
	if _, _, found, err := t.lookup(parent, name); err != nil {
		return nil, err
	} else if found {
		return nil, fail(syscall.EEXIST, "link %q in %v", clampName(name), parent)
	}
	if err := t.may(dir, MayWrite|MayExec); err != nil {
		return nil, err
	}
	n, err := t.inode(f)
	if err != nil {
		return nil, err
	}
	if err := n.fixed("link to"); err != nil {
		return nil, err
	}
	switch {
	case isDir(n.Mode):
		return nil, fail(syscall.EPERM, "link %v: a directory", f)
	case n.Nlink == 0 && n.iflags&inoLinkable != 0:
		// An O_TMPFILE file gets its first name: an orphan no more.
		n.iflags &^= inoLinkable
		t.b.Delete(fidKey(pfxOrphan, f), nil)
	case n.Nlink == 0:
		return nil, fail(syscall.ENOENT, "link %v: unlinked", f)
	case n.Nlink >= LinkMax:
		return nil, fail(syscall.EMLINK, "link %v: %d links", f, n.Nlink)
	}
	n.Nlink++
	n.Ctime = t.now
	t.touch(n)
	dir.Mtime, dir.Ctime = t.now, t.now
	t.touch(dir)
	t.addEntry(parent, name, n)
	t.changelog(ChangelogRecord{Type: CLHardlink, TFID: f, PFID: parent, Name: name})
	return n, nil
}

// Removal says what became of an inode that lost a link (Unlink, Rmdir,
// Rename over it) or an open (Close).
type Removal struct {
	FID   fid.FID
	Type  DType
	Nlink uint32 // links left
	// Last: the last link went.
	Last bool
	// Orphan: the last link went but the file is open; it stays, with
	// Nlink 0, until its last Close.
	Orphan bool
	// Destroyed: the inode is gone. Layout is its layout (nil if it had
	// none); if it had OST objects, DestroyID names the destroy log record
	// (already durable with the removal) that the caller finishes with
	// DestroyDone once the objects are destroyed.
	Destroyed bool
	Layout    *layout.Layout
	DestroyID uint64

	destroyIdx int // 1 + index in tx.destroys
}

func (rm *Removal) fill(t *tx) {
	if rm != nil && rm.destroyIdx > 0 {
		rm.DestroyID = t.destroys[rm.destroyIdx-1].ID
	}
}

// Unlink removes entry name, not a directory, from parent. The caller
// needs search and write permission on parent, and in a sticky parent must
// own the file or the parent (or have CapFowner). Outcomes: the Removal;
// ENOENT, ENOTDIR (parent), EISDIR (name is a directory), EACCES, EPERM
// (sticky), EINVAL or ENAMETOOLONG (bad name). An open file whose last
// link goes becomes an orphan; otherwise its inode and records go, and
// its objects are queued in the destroy log in the same batch.
func (s *Store) Unlink(r Req, parent fid.FID, name string) (Removal, error) {
	return s.remove(&r, parent, name, false)
}

// Rmdir removes the empty directory name from parent, with Unlink's
// permission rules. Outcomes: the Removal; ENOENT, ENOTDIR (parent, or
// name is not a directory), ENOTEMPTY (also for ".."), EINVAL (for "."),
// EACCES, EPERM.
func (s *Store) Rmdir(r Req, parent fid.FID, name string) (Removal, error) {
	return s.remove(&r, parent, name, true)
}

func (s *Store) remove(r *Req, parent fid.FID, name string, wantDir bool) (Removal, error) {
	if err := checkName(name); err != nil {
		return Removal{}, err
	}
	if name == "." || name == ".." {
		if wantDir && name == ".." {
			return Removal{}, fail(syscall.ENOTEMPTY, "rmdir ..")
		}
		return Removal{}, fail(syscall.EINVAL, "remove %q", name)
	}
	t := s.begin(r)
	rm, err := t.remove(parent, name, wantDir)
	if err = t.finish(err); err != nil {
		return Removal{}, err
	}
	rm.fill(t)
	return rm, nil
}

func (t *tx) remove(parent fid.FID, name string, wantDir bool) (Removal, error) {
	dir, err := t.dir(parent)
	if err != nil {
		return Removal{}, err
	}
	if err := t.may(dir, MayExec); err != nil {
		return Removal{}, err
	}
	f, _, found, err := t.lookup(parent, name)
	if err != nil {
		return Removal{}, err
	}
	if !found {
		return Removal{}, fail(syscall.ENOENT, "remove %q from %v", clampName(name), parent)
	}
	if err := t.may(dir, MayWrite|MayExec); err != nil {
		return Removal{}, err
	}
	n, err := t.inode(f)
	if err != nil {
		return Removal{}, err
	}
	if err := keepsEntries(dir, name); err != nil {
		return Removal{}, err
	}
	if err := n.fixed("remove"); err != nil {
		return Removal{}, err
	}
	switch {
	case wantDir && !isDir(n.Mode):
		return Removal{}, fail(syscall.ENOTDIR, "rmdir %q in %v", clampName(name), parent)
	case !wantDir && isDir(n.Mode):
		return Removal{}, fail(syscall.EISDIR, "unlink %q in %v", clampName(name), parent)
	}
	if err := t.sticky(dir, n); err != nil {
		return Removal{}, err
	}
	if wantDir {
		if empty, err := t.s.emptyDir(f); err != nil {
			return Removal{}, err
		} else if !empty {
			return Removal{}, fail(syscall.ENOTEMPTY, "rmdir %q in %v", clampName(name), parent)
		}
	}
	t.delEntry(parent, name, f)
	dir.Mtime, dir.Ctime = t.now, t.now
	t.touch(dir)
	rm, err := t.unref(n, dir)
	if err != nil {
		return Removal{}, err
	}
	typ, flags := CLUnlink, uint16(0)
	if wantDir {
		typ = CLRmdir
	}
	if rm.Last {
		flags = CLFUnlinkLast
	}
	t.changelog(ChangelogRecord{Type: typ, Flags: flags, TFID: f, PFID: parent, Name: name})
	return rm, nil
}

// unref drops one link of n, whose entry in dir is already deleted.
func (t *tx) unref(n *inode, dir *inode) (Removal, error) {
	dt, _ := dtype(n.Mode)
	rm := Removal{FID: n.FID, Type: dt}
	n.Ctime = t.now
	t.touch(n)
	if isDir(n.Mode) {
		n.Nlink = 0
		dir.Nlink--
	} else {
		n.Nlink--
	}
	rm.Nlink = n.Nlink
	if n.Nlink > 0 {
		return rm, nil
	}
	return rm, t.release(n, &rm)
}

// emptyDir reports whether directory d has no entries.
func (s *Store) emptyDir(d fid.FID) (bool, error) {
	lo, hi := fidPrefix(pfxDirent, d)
	empty := true
	err := s.scanRange(lo, hi, func(_, _ []byte) error {
		empty = false
		return errStop
	})
	return empty, ioError(err, "readdir %v", d)
}

// Rename flags (Linux's renameat2).
const (
	RenameNoReplace = 1 << 0 // fail with EEXIST if the target exists
	RenameExchange  = 1 << 1 // swap source and target, which must exist
)

// Rename moves entry sname of directory sp to tname of tp, replacing the
// target as rename(2) does. The caller needs search and write permission
// on both parents, write permission on a directory it moves to another
// parent (its ".." changes), and passes the sticky rules on the source and
// on a replaced target. Outcomes: the Removal of a replaced target whose
// link went (nil if none); ENOENT (no source; no target with
// RenameExchange), ENOTDIR (a parent; a directory over a non-directory),
// EISDIR (a non-directory over a directory), ENOTEMPTY (over a non-empty
// directory), EEXIST (RenameNoReplace and the target exists), EINVAL (a
// directory into its own subtree, both flags, unknown flags), EBUSY ("."
// or ".."), EACCES, EPERM (sticky). Renaming a file onto another link of
// itself does nothing, successfully.
func (s *Store) Rename(r Req, sp fid.FID, sname string, tp fid.FID, tname string, flags uint) (*Removal, error) {
	for _, n := range []string{sname, tname} {
		if err := checkName(n); err != nil {
			return nil, err
		}
		if n == "." || n == ".." {
			return nil, fail(syscall.EBUSY, "rename %q", n)
		}
	}
	if flags&^(RenameNoReplace|RenameExchange) != 0 || flags == RenameNoReplace|RenameExchange {
		return nil, fail(syscall.EINVAL, "rename flags %#x", flags)
	}
	t := s.begin(&r)
	rm, err := t.rename(sp, sname, tp, tname, flags)
	if err = t.finish(err); err != nil {
		return nil, err
	}
	rm.fill(t)
	return rm, nil
}

func (t *tx) rename(sp fid.FID, sname string, tp fid.FID, tname string, flags uint) (*Removal, error) {
	spd, err := t.dir(sp)
	if err != nil {
		return nil, err
	}
	tpd, err := t.dir(tp)
	if err != nil {
		return nil, err
	}
	if err := t.may(spd, MayExec); err != nil {
		return nil, err
	}
	if err := t.may(tpd, MayExec); err != nil {
		return nil, err
	}
	sf, _, found, err := t.lookup(sp, sname)
	if err != nil {
		return nil, err
	} else if !found {
		return nil, fail(syscall.ENOENT, "rename %q in %v", clampName(sname), sp)
	}
	tf, _, tfound, err := t.lookup(tp, tname)
	if err != nil {
		return nil, err
	}
	if flags&RenameExchange != 0 && !tfound {
		return nil, fail(syscall.ENOENT, "rename exchange: no %q in %v", clampName(tname), tp)
	}
	if flags&RenameNoReplace != 0 && tfound {
		return nil, fail(syscall.EEXIST, "rename %q in %v", clampName(tname), tp)
	}
	if tfound && tf == sf {
		// Two links of one file: POSIX says do nothing, and Linux does so
		// before it checks the write permission on the parents
		// (vfs_rename's source == target).
		return nil, nil
	}
	if err := t.may(spd, MayWrite|MayExec); err != nil {
		return nil, err
	}
	if err := t.may(tpd, MayWrite|MayExec); err != nil {
		return nil, err
	}
	src, err := t.inode(sf)
	if err != nil {
		return nil, err
	}
	// may_delete of the source, then of a target it replaces.
	if err := keepsEntries(spd, sname); err != nil {
		return nil, err
	}
	if err := src.fixed("rename"); err != nil {
		return nil, err
	}
	if err := t.sticky(spd, src); err != nil {
		return nil, err
	}
	var tgt *inode
	if tfound {
		if tgt, err = t.inode(tf); err != nil {
			return nil, err
		}
		if err := keepsEntries(tpd, tname); err != nil {
			return nil, err
		}
		if err := tgt.fixed("rename over"); err != nil {
			return nil, err
		}
		if err := t.sticky(tpd, tgt); err != nil {
			return nil, err
		}
		if flags&RenameExchange == 0 {
			switch {
			case isDir(src.Mode) && !isDir(tgt.Mode):
				return nil, fail(syscall.ENOTDIR, "rename directory %q over non-directory %q", clampName(sname), clampName(tname))
			case !isDir(src.Mode) && isDir(tgt.Mode):
				return nil, fail(syscall.EISDIR, "rename non-directory %q over directory %q", clampName(sname), clampName(tname))
			case isDir(tgt.Mode):
				if empty, err := t.s.emptyDir(tf); err != nil {
					return nil, err
				} else if !empty {
					return nil, fail(syscall.ENOTEMPTY, "rename over %q in %v", clampName(tname), tp)
				}
			}
		}
	}
	if sp != tp {
		if isDir(src.Mode) {
			if err := t.may(src, MayWrite); err != nil {
				return nil, err
			}
			if err := t.notUnder(tp, sf); err != nil {
				return nil, err
			}
		}
		if flags&RenameExchange != 0 && isDir(tgt.Mode) {
			if err := t.may(tgt, MayWrite); err != nil {
				return nil, err
			}
			if err := t.notUnder(sp, tf); err != nil {
				return nil, err
			}
		}
	}
	spd.Mtime, spd.Ctime, tpd.Mtime, tpd.Ctime = t.now, t.now, t.now, t.now
	t.touch(spd)
	t.touch(tpd)
	src.Ctime = t.now
	t.touch(src)
	rec := ChangelogRecord{Type: CLRename, PFID: tp, Name: tname, SFID: sf, SPFID: sp, SName: sname}
	if flags&RenameExchange != 0 {
		t.delEntry(sp, sname, sf)
		t.delEntry(tp, tname, tf)
		t.addEntry(tp, tname, src)
		t.addEntry(sp, sname, tgt)
		tgt.Ctime = t.now
		t.touch(tgt)
		if sp != tp && isDir(src.Mode) != isDir(tgt.Mode) {
			if isDir(src.Mode) {
				spd.Nlink--
				tpd.Nlink++
			} else {
				tpd.Nlink--
				spd.Nlink++
			}
		}
		rec.TFID, rec.Flags = tf, CLFRenameExchange
		t.changelog(rec)
		return nil, nil
	}
	var rm *Removal
	if tfound {
		t.delEntry(tp, tname, tf)
		r, err := t.unref(tgt, tpd)
		if err != nil {
			return nil, err
		}
		rm = &r
		rec.TFID = tf
		if r.Last {
			rec.Flags |= CLFUnlinkLast
		}
	}
	t.delEntry(sp, sname, sf)
	t.addEntry(tp, tname, src)
	if isDir(src.Mode) && sp != tp {
		spd.Nlink--
		tpd.Nlink++
	}
	t.changelog(rec)
	return rm, nil
}

// notUnder refuses (EINVAL) when directory d is dir or lies below it:
// moving dir there would cut it off from the tree. It walks ".." link EAs
// from d up to the root.
func (t *tx) notUnder(d, dir fid.FID) error {
	for seen := 0; ; seen++ {
		if d == dir {
			return fail(syscall.EINVAL, "rename %v into its own subtree", dir)
		}
		if d == RootFID {
			return nil
		}
		if seen > 1<<16 {
			return ioError(syscall.ELOOP, "walking up from %v: a cycle", d)
		}
		p, err := t.parentOf(d)
		if err != nil {
			return err
		}
		d = p
	}
}
