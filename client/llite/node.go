package llite

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/mdc"
)

// node is a file the kernel knows: nothing but its FID (see doc.go).
type node struct {
	fs.Inode
	m   *mount
	fid client.FID
	// mode is the file's mode as last seen (0: not yet), for the search
	// permission a create's entry needs to be cached without an RPC.
	mode atomic.Uint32
	// sa is a directory's page of entries last read, for statahead.
	sa atomic.Pointer[statAhead]
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeAccesser       = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
	_ fs.NodeGetxattrer     = (*node)(nil)
	_ fs.NodeSetxattrer     = (*node)(nil)
	_ fs.NodeListxattrer    = (*node)(nil)
	_ fs.NodeRemovexattrer  = (*node)(nil)
	_ fs.NodeIoctler        = (*node)(nil)
)

// child returns the kernel's node for a, which go-fuse matches with the
// node it already has for the same inode number.
func (n *node) child(ctx context.Context, a client.Attr) *fs.Inode {
	ch := n.NewInode(ctx, &node{m: n.m, fid: a.FID},
		fs.StableAttr{Mode: a.Mode & syscall.S_IFMT, Ino: inoOf(a.FID), Gen: uint64(a.FID.Ver)})
	if cn, ok := ch.Operations().(*node); ok {
		cn.mode.Store(a.Mode)
	}
	return ch
}

// Lookup resolves name in the directory (cached by the library under the
// file's lock, or one intent RPC).
//
// Without default_permissions the kernel checks no search permission on
// the way through directories whose entries it caches: an entry of a
// directory not everyone may search is not cached, so that every walk
// through it comes here, where the library checks the caller.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, cred, done := n.m.req(ctx)
	defer done()
	if sa := n.sa.Load(); sa != nil {
		sa.looking(ctx, n.m, cred, name)
	}
	// A regular file's attributes are not cached by the kernel (fillEntry):
	// the GETATTR of a stat that follows glimpses its size, so this one
	// need not (it would be a second glimpse of every stat).
	a, err := n.m.fs.LookupLazySize(ctx, cred, n.fid, name)
	if err != nil {
		errno := n.m.errno(err, "lookup", n.fid, "name", name)
		if errno == syscall.ENOENT && n.m.fs.NegativeShared(n.fid, name) {
			// Missing under the directory's lock: the kernel may keep it
			// (rawFS.Lookup makes it a negative entry) until the lock's
			// callback invalidates it, as it does names that exist; not
			// in a directory that not everyone may search.
			out.SetEntryTimeout(cacheTTL)
		}
		return nil, errno
	}
	fillEntry(a, out, true)
	if mode, err := n.m.fs.Mode(ctx, cred, n.fid); err != nil || mode&0o111 != 0o111 {
		out.SetEntryTimeout(0)
	}
	return n.child(ctx, a), 0
}

// Getattr returns the file's attributes; a regular file's size is its
// objects'.
func (n *node) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctx, cred, done := n.m.req(ctx)
	defer done()
	if mode := n.mode.Load(); mode == 0 || mode&syscall.S_IFMT == syscall.S_IFREG {
		n.glimpseAhead(ctx, cred)
	}
	a, err := n.m.fs.Getattr(ctx, cred, n.fid)
	if err != nil {
		return n.m.errno(err, "getattr", n.fid)
	}
	fillAttr(a, &out.Attr)
	n.mode.Store(a.Mode)
	if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		out.SetTimeout(cacheTTL)
	}
	return 0
}

// glimpseAhead tells the statahead of the directory page the file was
// last read in (if any) that its GETATTR came (see statahead.go: AGL).
func (n *node) glimpseAhead(ctx context.Context, cred client.Cred) {
	name, parent := n.Parent()
	if parent == nil {
		return
	}
	if pn, ok := parent.Operations().(*node); ok {
		if sa := pn.sa.Load(); sa != nil {
			sa.getattr(ctx, n.m, cred, name)
		}
	}
}

// Setattr changes mode, owner, times and size; a size change through an
// open file (ftruncate, open with O_TRUNC) uses it, so that a file opened
// for writing can be cut whatever its mode says now.
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx, cred, done := n.m.req(ctx)
	defer done()
	var sa client.SetAttr
	if mode, ok := in.GetMode(); ok {
		sa.Valid |= mdc.AttrMode
		sa.Mode = mode
	}
	if uid, ok := in.GetUID(); ok {
		sa.Valid |= mdc.AttrUID
		sa.UID = uid
	}
	if gid, ok := in.GetGID(); ok {
		sa.Valid |= mdc.AttrGID
		sa.GID = gid
	}
	if in.Valid&fuse.FATTR_ATIME != 0 {
		if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
			sa.Valid |= mdc.AttrAtimeNow
		} else {
			sa.Valid |= mdc.AttrAtime
			sa.Atime = joinTime(in.Atime, in.Atimensec)
		}
	}
	if in.Valid&fuse.FATTR_MTIME != 0 {
		if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
			sa.Valid |= mdc.AttrMtimeNow
		} else {
			sa.Valid |= mdc.AttrMtime
			sa.Mtime = joinTime(in.Mtime, in.Mtimensec)
		}
	}
	if in.Valid&fuse.FATTR_CTIME != 0 {
		sa.Valid |= mdc.AttrCtime
		sa.Ctime = joinTime(in.Ctime, in.Ctimensec)
	}
	size, hasSize := in.GetSize()
	h, _ := fh.(*handle)
	if hasSize && h != nil {
		if err := h.f.Truncate(ctx, int64(size)); err != nil {
			return n.m.errno(err, "truncate", n.fid, "size", size)
		}
	} else if hasSize {
		sa.Valid |= mdc.AttrSize
		sa.Size = size
	}
	var a client.Attr
	var err error
	if sa.Valid != 0 {
		a, err = n.m.fs.Setattr(ctx, cred, n.fid, sa)
	} else {
		a, err = n.m.fs.Getattr(ctx, cred, n.fid)
	}
	if err != nil {
		return n.m.errno(err, "setattr", n.fid, "valid", in.Valid)
	}
	if sa.Valid&mdc.AttrMode != 0 && a.Mode&syscall.S_IFMT == syscall.S_IFDIR && a.Mode&0o111 != 0o111 {
		// Who may search the directory changed: the kernel's entries in
		// it must go (see Lookup).
		for name := range n.Children() {
			n.m.n.InvalidateEntry(n.fid, name)
		}
	}
	fillAttr(a, &out.Attr)
	n.mode.Store(a.Mode)
	return 0
}

// Access checks access(2) and chdir as the MDT checks every operation:
// by mode bits and capabilities, and for a caller other than the owner by
// the file's access ACL when it has one (a named entry may grant what the
// mode bits do not, or deny what they allow). See client.FS.Access.
func (n *node) Access(ctx context.Context, mask uint32) syscall.Errno {
	ctx, cred, done := n.m.req(ctx)
	defer done()
	if mask&2 != 0 && n.m.ro {
		if _, err := n.m.fs.Getattr(ctx, cred, n.fid); err != nil {
			return n.m.errno(err, "access", n.fid)
		}
		return syscall.EROFS
	}
	if err := n.m.fs.Access(ctx, cred, n.fid, mask); err != nil {
		if e := client.Errno(err); e == syscall.EACCES || e == syscall.EPERM {
			return e
		}
		return n.m.errno(err, "access", n.fid)
	}
	return 0
}

// Create opens name, making it if needed: one intent RPC. The kernel gets
// no timeout on the entry (no lock covers the name yet).
//
// Lustre's O_LOV_DELAY_CREATE (O_NOCTTY|FASYNC: flags no open of a new
// regular file otherwise means anything with) makes the file without
// objects, for lfs setstripe to give it a layout through lustre.lov. The
// kernel drops O_NOCTTY before FUSE sees the create: FASYNC says it.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx, cred, done := n.m.createReq(ctx)
	defer done()
	var opts *client.CreateOptions
	if flags&delayCreate != 0 {
		opts = &client.CreateOptions{Delay: true}
		flags &^= delayCreate
	}
	f, a, err := n.m.fs.Create(ctx, cred, n.fid, name, uint64(flags)|syscall.O_CREAT, mode&0o7777, opts)
	if err != nil {
		return nil, nil, 0, n.m.errno(err, "create", n.fid, "name", name, "flags", flags)
	}
	// The open's lock keeps the new entry valid (its callback drops it):
	// the kernel may cache it, so that the next access by name needs no
	// LOOKUP; as in Lookup, not in a directory not everyone may search
	// (by the mode last seen: the create just changed the directory, and
	// asking for its attributes again would cost an RPC).
	fillEntry(a, out, f.EntryLocked() && n.mode.Load()&0o111 == 0o111)
	if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		// Another mount's file found in place (a fifo, say): the open's
		// lock covers its name, not its attributes.
		out.SetAttrTimeout(0)
	}
	if f.Created() {
		// A new file has no capabilities: the kernel's read of them
		// before the first write needs no RPC.
		n.m.setNoCap(a.FID, true)
	}
	n.made(name)
	ch := n.child(ctx, a)
	h, fl := n.m.newHandle(f, flags)
	return ch, h, fl, 0
}

// Tmpfile makes and opens a file with no name in the directory
// (open(2) with O_TMPFILE): an orphan on the MDT, destroyed at its last
// close unless linkat(2) through /proc/self/fd names it first.
func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx, cred, done := n.m.createReq(ctx)
	defer done()
	f, a, err := n.m.fs.Tmpfile(ctx, cred, n.fid, uint64(flags)|unix.O_TMPFILE, mode&0o7777, nil)
	if err != nil {
		return nil, nil, 0, n.m.errno(err, "tmpfile", n.fid, "flags", flags)
	}
	fillEntry(a, out, false) // no name for the kernel to cache
	n.m.setNoCap(a.FID, true)
	ch := n.child(ctx, a)
	h, fl := n.m.newHandle(f, flags)
	return ch, h, fl, 0
}

// made tells the notifier that the kernel's entry name in the directory
// is the one an operation of the mount's just made (see madeName).
func (n *node) made(name string) {
	n.m.n.madeName(nodeID(n.m.root, n.fid), name)
}

// delayCreate is what the kernel leaves of O_LOV_DELAY_CREATE in a
// create's flags.
const delayCreate = syscall.O_ASYNC

// Open opens the file by its FID.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ctx, cred, done := n.m.req(ctx)
	defer done()
	f, _, err := n.m.fs.Open(ctx, cred, n.fid, uint64(flags))
	if err != nil {
		return nil, 0, n.m.errno(err, "open", n.fid, "flags", flags)
	}
	h, fl := n.m.newHandle(f, flags)
	return h, fl, 0
}

// Mkdir makes a directory.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, cred, done := n.m.createReq(ctx)
	defer done()
	a, err := n.m.fs.Mkdir(ctx, cred, n.fid, name, mode&0o7777)
	if err != nil {
		return nil, n.m.errno(err, "mkdir", n.fid, "name", name)
	}
	if a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, n.m.errno(syscall.EIO, "mkdir: not a directory", a.FID, "mode", a.Mode)
	}
	n.made(name)
	fillEntry(a, out, false)
	return n.child(ctx, a), 0
}

// Mknod makes a FIFO, socket, device or (empty) regular file.
func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, cred, done := n.m.createReq(ctx)
	defer done()
	a, err := n.m.fs.Mknod(ctx, cred, n.fid, name, mode, uint64(dev))
	if err != nil {
		return nil, n.m.errno(err, "mknod", n.fid, "name", name, "mode", mode)
	}
	n.made(name)
	fillEntry(a, out, false)
	return n.child(ctx, a), 0
}

// Symlink makes a symbolic link.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, cred, done := n.m.req(ctx)
	defer done()
	a, err := n.m.fs.Symlink(ctx, cred, n.fid, name, target)
	if err != nil {
		return nil, n.m.errno(err, "symlink", n.fid, "name", name)
	}
	n.made(name)
	fillEntry(a, out, false)
	return n.child(ctx, a), 0
}

// Readlink returns the link's target.
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx, cred, done := n.m.req(ctx)
	defer done()
	t, err := n.m.fs.Readlink(ctx, cred, n.fid)
	if err != nil {
		return nil, n.m.errno(err, "readlink", n.fid)
	}
	return []byte(t), 0
}

// Link makes name another link to target.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	ctx, cred, done := n.m.req(ctx)
	defer done()
	a, err := n.m.fs.Link(ctx, cred, t.fid, n.fid, name)
	if err != nil {
		return nil, n.m.errno(err, "link", t.fid, "parent", n.fid, "name", name)
	}
	n.made(name)
	fillEntry(a, out, false)
	return n.child(ctx, a), 0
}

// Unlink removes a name; an open file stays readable until its last
// close (the MDT keeps it as an orphan).
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	ctx, cred, done := n.m.req(ctx)
	defer done()
	n.giveBack(ctx, name)
	if err := n.m.fs.Unlink(ctx, cred, n.fid, name); err != nil {
		return n.m.errno(err, "unlink", n.fid, "name", name)
	}
	return 0
}

// giveBack gives back the locks of the file the kernel knows as name
// (its entry may have come with a create, which the library's cache of
// names does not hold), ahead of a change of the name.
func (n *node) giveBack(ctx context.Context, name string) {
	if c := n.GetChild(name); c != nil {
		if cn, ok := c.Operations().(*node); ok {
			n.m.fs.GiveBack(ctx, cn.fid)
		}
	}
}

// Rmdir removes an empty directory.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	ctx, cred, done := n.m.req(ctx)
	defer done()
	n.giveBack(ctx, name)
	if err := n.m.fs.Rmdir(ctx, cred, n.fid, name); err != nil {
		return n.m.errno(err, "rmdir", n.fid, "name", name)
	}
	return 0
}

// Rename flags (renameat2's) the MDT knows.
const renameFlags = client.RenameNoReplace | client.RenameExchange

// Rename moves name to newName in newParent (flags RENAME_NOREPLACE,
// RENAME_EXCHANGE). The kernel moves its entry, which keeps the old
// name's timeout: the new names are looked up again through the library,
// which caches them under the files' locks, so that another client's
// change of them reaches the kernel.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if flags&^renameFlags != 0 {
		return syscall.EINVAL
	}
	ctx, cred, done := n.m.req(ctx)
	defer done()
	n.giveBack(ctx, name)
	np.giveBack(ctx, newName)
	if err := n.m.fs.Rename(ctx, cred, n.fid, name, np.fid, newName, flags); err != nil {
		return n.m.errno(err, "rename", n.fid, "name", name, "to", np.fid, "newname", newName, "flags", flags)
	}
	np.made(newName)
	n.m.fs.Lookup(ctx, cred, np.fid, newName)
	np.uncacheIfPrivate(ctx, cred, newName)
	if flags&client.RenameExchange != 0 {
		n.m.fs.Lookup(ctx, cred, n.fid, name)
		n.uncacheIfPrivate(ctx, cred, name)
	}
	return 0
}

// uncacheIfPrivate drops the kernel's entry name, which a rename moved
// here with the timeout it had where it came from, if not everyone may
// search the directory (see Lookup: such entries are not cached). The
// invalidation waits for the kernel's rename to finish (it holds the
// directory's lock).
func (n *node) uncacheIfPrivate(ctx context.Context, cred client.Cred, name string) {
	if a, err := n.m.fs.Getattr(ctx, cred, n.fid); err != nil || a.Mode&0o111 != 0o111 {
		n.m.n.InvalidateEntry(n.fid, name)
	}
}

// OpendirHandle opens the directory for reading: pages are read from the
// MDT as the kernel asks for them. open(2) of a directory needs read
// permission, which is checked here, once, with the opener's credentials
// (EACCES at the open, not at the first getdents, which readdir(3) takes
// for the end of the directory): the MDT's READDIR checks none, as
// Lustre's does not, so that the handle reads on whoever calls getdents
// (a descriptor root opened, kept across a setuid or passed to another
// user) and whatever chmod comes after, as Linux's do. The first page is
// read now; its errors are the first getdents' (a removed directory
// opens, as Linux's do, and reads ENOENT).
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	actx, cred, done := n.m.req(ctx)
	dir, err := n.m.fs.OpenDir(actx, cred, n.fid)
	done()
	if e := client.Errno(err); e == syscall.EACCES || e == syscall.EPERM {
		return nil, 0, e
	}
	// (Another error is the first getdents' to report: dir is nil, and
	// the reads check again.)
	d := &dirHandle{n: n, dir: dir}
	if errno := d.read(ctx); errno == syscall.EACCES || errno == syscall.EPERM {
		return nil, 0, errno
	}
	return d, 0, 0
}

// Fsync makes an open file's data durable (a directory's changes are
// already: the MDT commits them before it answers).
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		return h.Fsync(ctx, flags)
	}
	return 0
}

// Statfs returns the file system's space and inodes.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	ctx, _, done := n.m.req(ctx)
	defer done()
	st, err := n.m.fs.Statfs(ctx)
	if err != nil {
		return n.m.errno(err, "statfs", n.fid)
	}
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bavail
	out.Files, out.Ffree = st.Files, st.Ffree
	out.Bsize, out.Frsize, out.NameLen = st.Bsize, st.Bsize, st.Namelen
	return 0
}

// Getxattr copies the value of an extended attribute into dest; ERANGE
// with the size when dest is too small (go-fuse asks with an empty dest
// for the size).
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if attr == capXattr && n.m.knownNoCap(n.fid) {
		return 0, syscall.ENODATA
	}
	ctx, cred, done := n.m.req(ctx)
	defer done()
	v, err := n.m.fs.Getxattr(ctx, cred, n.fid, attr)
	if err != nil {
		e := n.m.errno(err, "getxattr", n.fid, "name", attr)
		if attr == capXattr && e == syscall.ENODATA {
			n.m.setNoCap(n.fid, true)
		}
		return 0, e
	}
	if len(v) > len(dest) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

// Setxattr sets an extended attribute (flags XATTR_CREATE, XATTR_REPLACE).
func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if attr == capXattr {
		n.m.setNoCap(n.fid, false)
	}
	ctx, cred, done := n.m.req(ctx)
	defer done()
	if err := n.m.fs.Setxattr(ctx, cred, n.fid, attr, data, int(flags)); err != nil {
		return n.m.errno(err, "setxattr", n.fid, "name", attr)
	}
	return 0
}

// Listxattr copies the names of the extended attributes, each ending in
// NUL, into dest; ERANGE with the size when dest is too small.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	ctx, cred, done := n.m.req(ctx)
	defer done()
	names, err := n.m.fs.Listxattr(ctx, cred, n.fid)
	if err != nil {
		return 0, n.m.errno(err, "listxattr", n.fid)
	}
	size := 0
	for _, s := range names {
		size += len(s) + 1
	}
	if size > len(dest) {
		return uint32(size), syscall.ERANGE
	}
	off := 0
	for _, s := range names {
		off += copy(dest[off:], s)
		dest[off] = 0
		off++
	}
	return uint32(size), 0
}

// Removexattr removes an extended attribute.
func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	ctx, cred, done := n.m.req(ctx)
	defer done()
	if err := n.m.fs.Removexattr(ctx, cred, n.fid, attr); err != nil {
		return n.m.errno(err, "removexattr", n.fid, "name", attr)
	}
	return 0
}

// dirEndOff is the offset the kernel gets for the end of a directory
// (Lustre's LL_DIR_END_OFF): the largest off_t.
const dirEndOff = 1<<63 - 1

// dirHandle reads a directory page by page, by the MDT's cookies: an
// entry's offset (d_off) is the cookie of the entry after it (dirEndOff
// after the last), so the kernel can seek back to any entry
// (telldir/seekdir).
type dirHandle struct {
	n    *node
	dir  *client.Dir       // nil if the open could not tell (see OpendirHandle)
	ents []client.DirEntry // of the page read, not returned yet
	next uint64            // cookie after ents (0: the start)
	// fresh says ents is a whole page not returned from yet: its
	// lookups ahead begin with its first entry returned (an open alone,
	// which reads the first page, starts none).
	fresh bool
	sa    *statAhead // the lookups ahead of the page last read
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
)

// Releasedir ends the lookups ahead of the handle's page, and forgets it
// if it is still the directory's.
func (d *dirHandle) Releasedir(_ context.Context, _ uint32) {
	if d.sa != nil {
		d.n.sa.CompareAndSwap(d.sa, nil)
		d.sa.cancel()
	}
}

// read reads the page at d.next.
func (d *dirHandle) read(ctx context.Context) syscall.Errno {
	rctx, cred, done := d.n.m.req(ctx)
	var ents []client.DirEntry
	var next uint64
	var err error
	if d.dir != nil {
		ents, next, err = d.dir.ReadDir(rctx, d.next, 0)
	} else {
		ents, next, err = d.n.m.fs.ReadDir(rctx, cred, d.n.fid, d.next, 0)
	}
	done()
	if err != nil {
		return d.n.m.errno(err, "readdir", d.n.fid, "cookie", d.next)
	}
	if len(ents) == 0 && next != client.DirEnd && next <= d.next {
		return d.n.m.errno(syscall.EIO, "readdir: no progress", d.n.fid, "cookie", d.next)
	}
	d.ents, d.next, d.fresh = ents, next, true
	return 0
}

// Readdirent returns the next entry, nil at the end. go-fuse calls it for
// one handle at a time.
func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	for len(d.ents) == 0 {
		if d.next == client.DirEnd {
			return nil, 0
		}
		if errno := d.read(ctx); errno != 0 {
			return nil, errno
		}
	}
	if d.fresh {
		d.fresh = false
		sa := newStatAhead(d.n.m.saCtx, d.n.fid, d.ents)
		if old := d.n.sa.Swap(sa); old != nil {
			old.cancel()
		}
		if d.sa != nil {
			d.sa.cancel()
		}
		d.sa = sa
	}
	e := d.ents[0]
	d.ents = d.ents[1:]
	off := d.next
	if len(d.ents) > 0 {
		off = d.ents[0].Cookie
	}
	switch off {
	case 0:
		off = 1 // never the start again
	case client.DirEnd:
		// Negative as an off_t, which lseek refuses: the kernel gets
		// Lustre's LL_DIR_END_OFF, a cookie past every name's hash but
		// one, from which a page holds no entry but that one's.
		off = dirEndOff
	}
	return &fuse.DirEntry{Name: e.Name, Ino: inoOf(e.FID), Mode: uint32(e.Type&0xf) << 12, Off: off}, 0
}

// Seekdir goes to an offset a Readdirent returned (0: the start).
func (d *dirHandle) Seekdir(_ context.Context, off uint64) syscall.Errno {
	d.ents, d.next, d.fresh = nil, off, false
	return 0
}

// The inode flag ioctls (lsattr, chattr). The kernel sends them through
// its own read-only open of the file or directory (fuse_fileattr_get and
// _set), with an int of flags whatever size the command says. chattr
// reads the flags first, then sets them all; before it passes the set on,
// the kernel reads the old flags again as an fsxattr (FS_IOC_FSGETXATTR)
// to check who may change which.
const (
	iocGetFlags   = unix.FS_IOC_GETFLAGS
	iocSetFlags   = unix.FS_IOC_SETFLAGS
	iocGetFlags32 = 0x80046601 // FS_IOC32_GETFLAGS
	iocSetFlags32 = 0x40046602 // FS_IOC32_SETFLAGS
	iocFSGetXattr = 0x801c581f // FS_IOC_FSGETXATTR
	fsxattrSize   = 28         // struct fsxattr
	fsxattrXflags = 0          // offset of fsx_xflags
)

// xflagsOf maps the FS_*_FL flags that have one to their FS_XFLAG_* (the
// kernel's fileattr_fill_flags).
var xflagsOf = [...]struct{ fl, xfl uint32 }{
	{0x00000008, 0x00000020}, // SYNC
	{0x00000010, 0x00000008}, // IMMUTABLE
	{0x00000020, 0x00000010}, // APPEND
	{0x00000040, 0x00000080}, // NODUMP
	{0x00000080, 0x00000040}, // NOATIME
	{0x02000000, 0x00008000}, // DAX
	{0x20000000, 0x00000200}, // PROJINHERIT
}

// Ioctl answers FS_IOC_GETFLAGS, FS_IOC_FSGETXATTR and FS_IOC_SETFLAGS
// from and to the MDT, which keeps the flags (only mdd.FlagsKept, as
// Lustre's: other bits are dropped without an error), checks who may
// change them (the immutable and append-only flags need
// CAP_LINUX_IMMUTABLE) and enforces them for every client. Other
// commands: ENOTTY.
func (n *node) Ioctl(ctx context.Context, _ fs.FileHandle, cmd uint32, _ uint64, input, output []byte) (int32, syscall.Errno) {
	switch cmd {
	case iocGetFlags, iocGetFlags32, iocFSGetXattr:
		if len(output) < 4 || cmd == iocFSGetXattr && len(output) < fsxattrSize {
			return 0, syscall.EINVAL
		}
		ctx, cred, done := n.m.req(ctx)
		defer done()
		a, err := n.m.fs.Getattr(ctx, cred, n.fid)
		if err != nil {
			return 0, n.m.errno(err, "getflags", n.fid)
		}
		if cmd != iocFSGetXattr {
			binary.NativeEndian.PutUint32(output, a.Flags)
			return 0, 0
		}
		var xfl uint32
		for _, m := range xflagsOf {
			if a.Flags&m.fl != 0 {
				xfl |= m.xfl
			}
		}
		clear(output[:fsxattrSize])
		binary.NativeEndian.PutUint32(output[fsxattrXflags:], xfl)
		return 0, 0
	case iocSetFlags, iocSetFlags32:
		if len(input) < 4 {
			return 0, syscall.EINVAL
		}
		flags := binary.NativeEndian.Uint32(input)
		ctx, cred, done := n.m.req(ctx)
		defer done()
		if _, err := n.m.fs.Setattr(ctx, cred, n.fid, client.SetAttr{Valid: mdc.AttrFlags, Flags: flags}); err != nil {
			return 0, n.m.errno(err, "setflags", n.fid, "flags", flags)
		}
		return 0, 0
	}
	return 0, syscall.ENOTTY
}
