package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/client/lov"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/client/osc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
)

// Types of the MDC the library's callers use.
type (
	Cred     = mdc.Cred
	Attr     = mdc.Attr
	SetAttr  = mdc.SetAttr
	DirEntry = mdc.DirEntry
)

// Root is uid 0 with every capability.
func Root() Cred { return mdc.Root() }

// Statfs is the file system's space (the OSTs') and inodes (the MDT's).
type Statfs struct {
	Blocks, Bfree, Bavail uint64 // in Bsize units
	Files, Ffree          uint64
	Bsize, Namelen        uint32
}

const (
	sIFMT  = 0o170000
	sIFREG = 0o100000
	sIFDIR = 0o040000
)

// MaxName is the longest name (bytes).
const MaxName = 255

func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("name %q: %w", name, syscall.EINVAL)
	case len(name) > MaxName:
		return fmt.Errorf("name of %d bytes: %w", len(name), syscall.ENAMETOOLONG)
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == 0 {
			return fmt.Errorf("name %q: %w", name, syscall.EINVAL)
		}
	}
	return nil
}

// op bounds one operation by the mount's timeout.
func (fs *FS) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, fs.Timeout())
}

func (fs *FS) writable() error {
	if fs.cfg.ReadOnly {
		return fmt.Errorf("read-only mount: %w", syscall.EROFS)
	}
	return nil
}

// Lookup returns the attributes of name in parent: from the cache when the
// entry and the file are cached under locks, else by one LDLM_ENQUEUE with
// a getattr intent (which grants the lock that caches them). A regular
// file's size and blocks are its objects' (see Getattr).
func (fs *FS) Lookup(ctx context.Context, cred Cred, parent FID, name string) (Attr, error) {
	return fs.lookup(ctx, cred, parent, name, true)
}

// LookupLazySize is Lookup for a caller that asks for a regular file's
// size again before it uses it: the size and blocks are the MDT's lazy
// ones (LSOM), which may lag behind writes in progress, and finding them
// costs no glimpse of the file's objects. A FUSE lookup is such a caller:
// the kernel holds a regular file's attributes as expired (it caches them
// for no time) and asks for them (GETATTR) for a stat or a read past the
// size it has, as Lustre's lookup leaves the size to getattr's glimpse.
func (fs *FS) LookupLazySize(ctx context.Context, cred Cred, parent FID, name string) (Attr, error) {
	return fs.lookup(ctx, cred, parent, name, false)
}

// SizeHeld reports whether f's size is known without an RPC: the client
// holds locks on its objects that settle it (a glimpse was granted as a
// lock), so that the next Getattr asks nothing.
func (fs *FS) SizeHeld(f FID) bool {
	_, lay, ok := fs.cache.attr(f)
	if !ok || lay == nil || !anyObjects(lay) {
		return false
	}
	d, done, err := fs.dataOf(f, lay)
	if err != nil {
		return false
	}
	defer done()
	return d.SizeKnown()
}

func (fs *FS) lookup(ctx context.Context, cred Cred, parent FID, name string, size bool) (Attr, error) {
	if err := checkName(name); err != nil {
		return Attr{}, err
	}
	return fs.whileLayoutLost("lookup", func() (Attr, bool, error) { return fs.lookupOnce(ctx, cred, parent, name, size) })
}

// whileLayoutLost runs once (lookup, getattr) again while its error may come
// of the layout its size was asked of having been lost (see sizeLost), at
// most layoutRetries times more.
func (fs *FS) whileLayoutLost(what string, once func() (Attr, bool, error)) (Attr, error) {
	for try := 0; ; try++ {
		a, lost, err := once()
		if err == nil || !lost || try == layoutRetries {
			return a, err
		}
		fs.log.Debug("client: again: the layout changed under its size", "op", what, "err", err)
	}
}

// lookupOnce is lookup, once; lost says that an error may come of the
// layout the size was asked of having changed since it was read (see
// sizeLost).
func (fs *FS) lookupOnce(ctx context.Context, cred Cred, parent FID, name string, size bool) (_ Attr, lost bool, _ error) {
	withSize := fs.withSize
	if !size {
		withSize = lazySize
	}
	if f, ok := fs.cache.lookup(parent, name); ok && fs.mayExec(cred, parent) {
		if a, lay, ok := fs.cache.attr(f); ok {
			a, err := withSize(ctx, a, lay)
			return a, fs.sizeLost(err, f, nil), err
		}
	}
	if fs.cache.negative(parent, name) && fs.mayExec(cred, parent) {
		return Attr{}, false, fmt.Errorf("client: lookup %q in %v: %w (cached)", name, parent, syscall.ENOENT)
	}
	if fs.mayExec(cred, parent) {
		if l, ok := fs.cache.answerFromSet(parent, name); ok {
			// Not in the directory's name set: a negative entry now,
			// under the set's lock (the kernel may keep it too).
			l.Touch()
			return Attr{}, false, fmt.Errorf("client: lookup %q in %v: %w (cached)", name, parent, syscall.ENOENT)
		}
	}
	gen := fs.cache.nameGen(parent, name)
	ctx, cancel := fs.op(ctx)
	defer cancel()
	rep, err := fs.mdc.Enqueue(ctx, cred, mdc.Intent{Op: mdc.ItGetattr, Parent: parent, Name: name}, fs.hooks())
	if err != nil {
		if rep != nil && rep.Lock != nil {
			if rep.Negative {
				if testBeforeStoreNegative != nil {
					testBeforeStoreNegative(name)
				}
				fs.cache.storeNegative(parent, name, rep.Lock, gen)
				fs.readNames(ctx, cred, parent, rep.Lock) // (releases it)
			} else {
				rep.Lock.Release()
			}
		}
		return Attr{}, false, err
	}
	fs.store(ctx, rep.Attr, rep.Layout, rep.Lock, parent, name)
	if rep.Lock != nil {
		rep.Lock.Release()
	}
	a, err := withSize(ctx, rep.Attr, rep.Layout)
	return a, fs.sizeLost(err, rep.Attr.FID, rep.Lock), err
}

// sizeLost reports whether err, of a size asked of f's objects by a
// layout read under lock l (nil: cached under a lock), may come of the
// layout having changed since: the lock went, or gave back its LAYOUT
// bit. A swap of the layouts (lfs migrate) calls it back before the old
// objects can be destroyed, and a glimpse of a destroyed object fails
// (ENOENT); the attributes are asked again then.
func (fs *FS) sizeLost(err error, f FID, l *ldlm.ClientLock) bool {
	if err == nil {
		return false
	}
	if l != nil {
		return l.Gone() || l.Policy().Bits&ldlm.BitLayout == 0
	}
	_, _, valid := fs.cache.attr(f)
	return !valid
}

// makingName is called before a change that makes name in parent. The
// kernel's negative entry for the name, if the client knew it missing,
// is the change's to replace (the kernel instantiates what a FUSE create,
// mkdir, link or rename makes), so the directory lock's callback need not
// invalidate it, which would cost every create a notification; done,
// called with the change's outcome, invalidates it if the change failed
// (another client may have made the name meanwhile).
func (fs *FS) makingName(parent FID, name string) (done func(error)) {
	if !fs.cache.takeNegative(parent, name) {
		return func(error) {}
	}
	return func(err error) {
		if err != nil {
			invalidateEntries(fs, []dentKey{{parent, name}})
		}
	}
}

// NegativeCached reports whether the client knows name is missing from
// parent under a lock on parent (a lookup of it found nothing), which a
// name made there calls back first.
func (fs *FS) NegativeCached(parent FID, name string) bool { return fs.cache.negative(parent, name) }

// NegativeShared is NegativeCached for a cache every user shares (the
// kernel's): also, by parent's cached attributes (no RPC), owner, group
// and others may all search parent.
func (fs *FS) NegativeShared(parent FID, name string) bool {
	a, _, ok := fs.cache.attr(parent)
	return ok && a.Mode&0o111 == 0o111 && fs.cache.negative(parent, name)
}

// lazySize leaves the MDT's attributes as they are (LookupLazySize).
func lazySize(_ context.Context, a Attr, _ *layout.Layout) (Attr, error) { return a, nil }

// mayExec says whether cred may search dir by the permission bits of its
// cached attributes (a cached entry skips the MDT's check). The owner's
// bits hold whatever else the directory has; the group's and others' only
// if it has no ACL (a named user or group entry comes before them): the
// attributes say it has no xattrs at all, or its ACL was read absent.
// Otherwise the MDT checks.
func (fs *FS) mayExec(cred Cred, dir FID) bool {
	if cred.Cap&mdc.CapDacOverride != 0 {
		return true
	}
	a, _, ok := fs.cache.attr(dir)
	if !ok {
		return false
	}
	if a.UID == cred.UID {
		return a.Mode&0o100 != 0
	}
	if acl, ok := fs.cache.cachedXattr(dir, xattrACLAccess); !ok || !acl.absent {
		return false
	}
	if a.GID == cred.GID || contains(cred.Groups, a.GID) {
		return a.Mode&0o010 != 0
	}
	return a.Mode&0o001 != 0
}

func contains(s []uint32, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Getattr returns f's attributes: cached under its lock, or from the MDT
// by a getattr intent; a regular file's size and blocks come from its
// objects (what the client's locks say, or a glimpse of each).
func (fs *FS) Getattr(ctx context.Context, cred Cred, f FID) (Attr, error) {
	return fs.whileLayoutLost("getattr", func() (Attr, bool, error) { return fs.getattr(ctx, cred, f) })
}

// Mode returns f's mode (type and permission bits): from the cache while
// a lock covering its permissions is held, even after a change in the
// directory took the rest of its attributes out of date; otherwise as
// Getattr does.
func (fs *FS) Mode(ctx context.Context, cred Cred, f FID) (uint32, error) {
	if a, ok := fs.cache.permAttr(f); ok {
		return a.Mode, nil
	}
	a, err := fs.Getattr(ctx, cred, f)
	return a.Mode, err
}

// store caches what an intent returned (cache.store) and gives back the
// lock it replaced, if l covers all that one did: a directory's lock
// converted by a change in it, replaced by the next getattr's.
func (fs *FS) store(ctx context.Context, a mdc.Attr, lay *layout.Layout, l *ldlm.ClientLock, parent fid.FID, name string) {
	if old := fs.cache.store(a, lay, l, parent, name); old != nil {
		fs.lk.Retire(ctx, old, l)
	}
}

// getattr is Getattr, once; lost as lookupOnce's.
func (fs *FS) getattr(ctx context.Context, cred Cred, f FID) (_ Attr, lost bool, _ error) {
	if a, lay, ok := fs.cache.attr(f); ok {
		a, err := fs.withSize(ctx, a, lay)
		return a, fs.sizeLost(err, f, nil), err
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	rep, err := fs.mdc.Enqueue(ctx, cred, mdc.Intent{Op: mdc.ItGetattr, FID: f}, fs.hooks())
	if err != nil {
		return Attr{}, false, err
	}
	fs.store(ctx, rep.Attr, rep.Layout, rep.Lock, fid.FID{}, "")
	if rep.Lock != nil {
		rep.Lock.Release()
	}
	a, err := fs.withSize(ctx, rep.Attr, rep.Layout)
	return a, fs.sizeLost(err, f, rep.Lock), err
}

// withSize fills in a regular file's size and blocks from its objects.
func (fs *FS) withSize(ctx context.Context, a Attr, lay *layout.Layout) (Attr, error) {
	if a.Mode&sIFMT != sIFREG || lay == nil || !anyObjects(lay) {
		// No objects (an HSM released file): the MDT's size (LSOM).
		return a, nil
	}
	d, done, err := fs.dataOf(a.FID, lay)
	if err != nil {
		return a, err
	}
	defer done()
	da, err := d.Attr(ctx)
	if err != nil {
		return a, fmt.Errorf("size of %v: %w", a.FID, err)
	}
	// The blocks the objects occupy, summed (Lustre's ll_merge_attr):
	// a sparse file counts its holes for nothing.
	a.Size, a.Blocks = uint64(da.Size), da.Blocks
	// A write another client holds in its cache, or that reached the OSTs
	// after the MDT last heard, is newer than the MDT's times (Lustre's
	// ll_merge_attr). Explicit times go to the objects too (Setattr), so
	// the newest is the right one. The objects' 0 is unknown, not the
	// epoch: an explicit time before 1970 stays the MDT's.
	if da.Mtime != 0 {
		a.Mtime = max(a.Mtime, da.Mtime)
	}
	if da.Ctime != 0 {
		a.Ctime = max(a.Ctime, da.Ctime)
	}
	return a, nil
}

func sameLayout(a, b *layout.Layout) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil {
		return false
	}
	x, err1 := a.Marshal()
	y, err2 := b.Marshal()
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// dataOf returns the objects of f with layout lay, opened on first use
// (and again when the layout changed) and kept with f's inode; call done
// after use (it closes them when no inode keeps them). If the inode keeps
// the objects of a newer layout (a later generation: lay was read before
// a layout change another caller has seen the outcome of), those are
// returned: lay's may be destroyed. It leaves the inode's stale mark
// alone: a lock's callback that set it may have come after lay was read.
func (fs *FS) dataOf(f FID, lay *layout.Layout) (_ *lov.File, done func(), _ error) {
	if testBeforeDataOf != nil {
		testBeforeDataOf(fs, f)
	}
	fs.cache.mu.Lock()
	if ino := fs.cache.inodes[f]; ino != nil && ino.keepsLocked(lay) {
		d := ino.data
		fs.cache.mu.Unlock()
		return d, func() {}, nil
	}
	fs.cache.mu.Unlock()
	d, err := lov.Open(*lay, fs)
	if err != nil {
		return nil, nil, fmt.Errorf("objects of %v: %w", f, err)
	}
	if n := fs.cfg.Notify; n != nil {
		d.OnDrop(func() { n.InvalidateData(f, 0, 0) })
	}
	fs.cache.mu.Lock()
	ino := fs.cache.inodes[f]
	if ino == nil {
		// Nothing keeps the inode: do not keep its objects either.
		fs.cache.mu.Unlock()
		return d, d.Close, nil
	}
	if ino.keepsLocked(lay) {
		cur := ino.data
		fs.cache.mu.Unlock()
		d.Close()
		return cur, func() {}, nil
	}
	old := ino.data
	ino.data, ino.dlay = d, lay
	if old != nil && ino.opens > 0 {
		// Open handles may be in the middle of I/O on the old objects.
		ino.retired = append(ino.retired, old)
		old = nil
	}
	fs.cache.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return d, func() {}, nil
}

// keepsLocked reports whether ino's objects serve for layout lay: they are
// lay's, or a newer layout's (a layout's generation only grows). The
// cache's mutex is held.
func (ino *inode) keepsLocked(lay *layout.Layout) bool {
	return ino.data != nil && (sameLayout(ino.dlay, lay) || ino.dlay.Gen > lay.Gen)
}

// Setattr changes f's attributes: mode, owner, times, and size (the MDT
// checks and records the change, then the objects are cut or extended).
func (fs *FS) Setattr(ctx context.Context, cred Cred, f FID, sa SetAttr) (Attr, error) {
	if err := fs.writable(); err != nil {
		return Attr{}, err
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	for try := 0; ; try++ {
		a, err := fs.setattr(ctx, cred, f, sa)
		if sa.Valid&mdc.AttrSize == 0 || !errors.Is(err, syscall.ENODATA) || try >= maxRestoreTries {
			return a, err
		}
		// The MDT refuses the size of a released file: released again
		// between the restore setattr made and its change.
		if _, rerr := fs.restoreIfReleased(ctx, "truncate", f); rerr != nil {
			return Attr{}, rerr
		}
	}
}

// setattr is Setattr, once.
func (fs *FS) setattr(ctx context.Context, cred Cred, f FID, sa SetAttr) (Attr, error) {
	var lay *layout.Layout
	if sa.Valid&mdc.AttrSize != 0 {
		// The type and layout: cached under a lock, or from the MDT.
		a, l, ok := fs.cache.attr(f)
		if !ok {
			var err error
			if a, l, err = fs.mdc.GetattrLayout(ctx, cred, f); err != nil {
				return Attr{}, err
			}
		}
		switch a.Mode & sIFMT {
		case sIFREG:
		case sIFDIR:
			return Attr{}, fmt.Errorf("truncate %v: %w", f, syscall.EISDIR)
		default:
			return Attr{}, fmt.Errorf("truncate %v: %w", f, syscall.EINVAL)
		}
		lay = l
		// A released file (no objects) is restored first, as Lustre's
		// ll_setattr_raw does: otherwise only the MDT's size changes, and
		// the next restore brings the archive's data and size back over
		// the truncate.
		for try := 0; lay != nil && !anyObjects(lay); try++ {
			if try >= maxRestoreTries {
				return Attr{}, fmt.Errorf("truncate %v: still released after %d restores: %w", f, try, syscall.EIO)
			}
			restored, err := fs.restoreIfReleased(ctx, "truncate", f)
			if err != nil {
				return Attr{}, err
			}
			if !restored {
				break
			}
			if _, lay, err = fs.mdc.GetattrLayout(ctx, cred, f); err != nil {
				return Attr{}, err
			}
		}
		if lay != nil {
			// As inode_newsize_ok against s_maxbytes: refused before the
			// MDT or any object changes (each OST would refuse only its
			// own part).
			if most := lay.MaxFileSize(osc.MaxObjectSize); sa.Size > most {
				return Attr{}, fmt.Errorf("truncate %v to %d: the layout stores at most %d bytes: %w", f, sa.Size, most, syscall.EFBIG)
			}
			// The size's last byte must have an object to be cut at (a
			// component of a progressive layout not written yet has
			// none): instantiated first, as Lustre's truncate layout
			// intent does, before the MDT records the size.
			if ci := lay.ComponentAt(sa.Size - 1); sa.Size > 0 && ci >= 0 && !lay.Components[ci].Instantiated() && anyObjects(lay) {
				l, err := fs.mdc.LayoutIntent(ctx, cred, f, sa.Size-1, sa.Size)
				if err != nil {
					return Attr{}, fmt.Errorf("truncate %v to %d: %w", f, sa.Size, err)
				}
				lay = l
			}
		}
		if sa.Valid&(mdc.AttrMtime|mdc.AttrMtimeNow) == 0 {
			sa.Valid |= mdc.AttrMtimeNow
		}
	}
	if sa.Valid&mdc.AttrCtime == 0 {
		sa.Valid |= mdc.AttrCtime
		sa.Ctime = time.Now().UnixNano()
	}
	if sa.Valid&mdc.AttrMtime != 0 {
		fs.cache.mu.Lock()
		if ino := fs.cache.inodes[f]; ino != nil {
			ino.mtimeGen++
		}
		fs.cache.mu.Unlock()
	}
	a, sent, err := fs.mdc.SetattrLayout(ctx, cred, f, sa)
	fs.cache.invalidate(f)
	if err != nil {
		return Attr{}, err
	}
	if sent != nil {
		// The layout as of the change (objects may have been given since
		// the one read before; without it, an older MDT, that one).
		lay = sent
	}
	if sa.Valid&mdc.AttrSize != 0 && lay != nil {
		// A caller with the file open for write keeps its layout from
		// being swapped (the MDT refuses); others check it was not.
		recheck := sa.Valid&mdc.AttrOpenWrite == 0
		if lay, err = fs.truncateObjects(ctx, cred, f, lay, int64(sa.Size), recheck); err != nil {
			return Attr{}, err
		}
	}
	if a.Mode&sIFMT == sIFREG && lay == nil {
		if lay, err = fs.Layout(ctx, cred, f); err != nil {
			return Attr{}, err
		}
	}
	if sa.Valid&mdc.AttrMtime != 0 && a.Mode&sIFMT == sIFREG && lay != nil && anyObjects(lay) {
		// An explicit mtime, perhaps older than the objects' (touch -d,
		// tar, cp -p): the objects get it too, or their newer one would
		// win in withSize.
		d, done, err := fs.dataOf(f, lay)
		if err != nil {
			return Attr{}, err
		}
		err = d.SetTimes(ctx, a.Mtime, a.Ctime)
		done()
		if err != nil {
			return Attr{}, fmt.Errorf("set times of %v: %w", f, err)
		}
	}
	return fs.withSize(ctx, a, lay)
}

// truncateObjects cuts f's objects, those of layout lay, to size, and
// returns the layout whose objects were cut. With recheck, it reads the
// layout again after the cut: a swap of the layouts (lfs migrate) since
// lay was read gave the objects to the migration's copy, which goes with
// them, and the file has the copy's objects, not cut (or, if the old ones
// were destroyed, the cut failed). The new ones are cut then, as Lustre
// restarts an I/O whose layout changed under it.
func (fs *FS) truncateObjects(ctx context.Context, cred Cred, f FID, lay *layout.Layout, size int64, recheck bool) (*layout.Layout, error) {
	for try := 0; ; try++ {
		d, done, err := fs.dataOf(f, lay)
		if err != nil {
			return nil, err
		}
		err = d.Truncate(ctx, size)
		done()
		if !recheck || try == layoutRetries {
			return lay, wrapTruncate(f, size, err)
		}
		_, now, lerr := fs.mdc.GetattrLayout(ctx, cred, f)
		switch {
		case lerr != nil && err == nil:
			return nil, fmt.Errorf("truncate %v to %d: layout after the cut: %w", f, size, lerr)
		case lerr != nil || now == nil || sameLayout(now, lay):
			return lay, wrapTruncate(f, size, err)
		}
		fs.log.Debug("client: truncate again: the layout changed under it", "fid", f, "size", size, "err", err)
		lay = now
	}
}

// wrapTruncate gives an error of a cut of f's objects its context.
func wrapTruncate(f FID, size int64, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("truncate %v to %d: %w", f, size, err)
}

// Mkdir makes directory name in parent.
func (fs *FS) Mkdir(ctx context.Context, cred Cred, parent FID, name string, mode uint32) (_ Attr, err error) {
	done, err := fs.precheck(parent, name)
	if err != nil {
		return Attr{}, err
	}
	defer func() { done(err) }()
	ctx, cancel := fs.op(ctx)
	defer cancel()
	return fs.mdc.Mkdir(ctx, cred, parent, name, mode)
}

// Mknod makes a device, FIFO or socket (mode carries the type).
func (fs *FS) Mknod(ctx context.Context, cred Cred, parent FID, name string, mode uint32, rdev uint64) (_ Attr, err error) {
	done, err := fs.precheck(parent, name)
	if err != nil {
		return Attr{}, err
	}
	defer func() { done(err) }()
	ctx, cancel := fs.op(ctx)
	defer cancel()
	if mode&sIFMT == sIFREG || mode&sIFMT == 0 {
		a, _, err := fs.mdc.Create(ctx, cred, parent, name, mode&0o7777, nil)
		return a, err
	}
	return fs.mdc.Mknod(ctx, cred, parent, name, mode, rdev)
}

// Symlink makes a symbolic link name in parent pointing at target.
func (fs *FS) Symlink(ctx context.Context, cred Cred, parent FID, name, target string) (_ Attr, err error) {
	done, err := fs.precheck(parent, name)
	if err != nil {
		return Attr{}, err
	}
	defer func() { done(err) }()
	if len(target) == 0 || len(target) > 4095 {
		return Attr{}, fmt.Errorf("symlink target of %d bytes: %w", len(target), syscall.ENAMETOOLONG)
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	return fs.mdc.Symlink(ctx, cred, parent, name, target)
}

// Readlink returns a symbolic link's target.
func (fs *FS) Readlink(ctx context.Context, cred Cred, f FID) (string, error) {
	ctx, cancel := fs.op(ctx)
	defer cancel()
	return fs.mdc.Readlink(ctx, cred, f)
}

// precheck checks a change that makes name in parent, forgets what the
// cache knows of the name, and returns makingName's done, for the
// change's outcome.
func (fs *FS) precheck(parent FID, name string) (done func(error), err error) {
	if err := fs.checkChange(name); err != nil {
		return nil, err
	}
	fs.cache.forgetEntry(parent, name)
	return fs.makingName(parent, name), nil
}

// checkChange checks a change of name: a valid name on a writable mount.
func (fs *FS) checkChange(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	return fs.writable()
}

// Unlink removes name (not a directory) from parent. The file's data
// stays readable through handles still open until the last closes.
func (fs *FS) Unlink(ctx context.Context, cred Cred, parent FID, name string) error {
	if err := fs.checkChange(name); err != nil {
		return err
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	fs.giveBack(ctx, parent, name)
	return fs.mdc.Unlink(ctx, cred, parent, name)
}

// GiveBack gives back f's unused locks now, ahead of a change of one of
// its names that would call them back (early lock cancel: their handles
// ride on the change's request). Unlink, Rmdir and Rename do it for the
// files whose names the cache knows; a caller that knows the file some
// other way (the kernel's dentry, whose entry came with a create) tells
// it here first.
func (fs *FS) GiveBack(ctx context.Context, f FID) {
	fs.mdc.GiveBack(ctx, f)
}

// giveBack forgets the cached entry name in parent, which a change is
// about to remove or replace, and gives back, with the request that makes
// the change, what the change would call back (early lock cancel): the
// UPDATE bit of parent's locks (the entries change; their LOOKUP stays),
// and every lock of the file name led to, if the cache knew it (its link
// count or name changes). Otherwise the MDT calls each back with a
// blocking AST, and the client answers each with a CANCEL: two RPCs more
// per lock, for an unlink of a file looked up before.
func (fs *FS) giveBack(ctx context.Context, parent FID, name string) {
	f, ok := fs.cache.forgetEntry(parent, name)
	fs.mdc.GiveBackBits(ctx, parent, ldlm.BitUpdate)
	if ok {
		fs.mdc.GiveBack(ctx, f)
	}
}

// Rmdir removes the empty directory name from parent.
func (fs *FS) Rmdir(ctx context.Context, cred Cred, parent FID, name string) error {
	if err := fs.checkChange(name); err != nil {
		return err
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	fs.giveBack(ctx, parent, name)
	return fs.mdc.Rmdir(ctx, cred, parent, name)
}

// Rename moves sname in sp to tname in tp (flags: RenameNoReplace,
// RenameExchange).
func (fs *FS) Rename(ctx context.Context, cred Cred, sp FID, sname string, tp FID, tname string, flags uint32) error {
	if err := fs.checkChange(sname); err != nil {
		return err
	}
	if err := fs.checkChange(tname); err != nil {
		return err
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	done := fs.makingName(tp, tname)
	fs.giveBack(ctx, sp, sname)
	fs.giveBack(ctx, tp, tname)
	err := fs.mdc.Rename(ctx, cred, sp, sname, tp, tname, flags)
	done(err)
	return err
}

// The POSIX ACLs' extended attributes.
const (
	xattrACLAccess  = mdc.XattrACLAccess
	xattrACLDefault = mdc.XattrACLDefault
)

// Rename flags (renameat2's).
const (
	RenameNoReplace = mdc.RenameNoReplace
	RenameExchange  = mdc.RenameExchange
)

// Link makes name in parent another link to f.
func (fs *FS) Link(ctx context.Context, cred Cred, f, parent FID, name string) (_ Attr, err error) {
	done, err := fs.precheck(parent, name)
	if err != nil {
		return Attr{}, err
	}
	defer func() { done(err) }()
	ctx, cancel := fs.op(ctx)
	defer cancel()
	a, err := fs.mdc.Link(ctx, cred, f, parent, name)
	fs.cache.invalidate(f)
	return a, err
}

// ReadDir returns up to max entries of dir from cookie (0: the start,
// with "." and ".."), and the cookie to go on from (DirEnd after the
// last). cred needs read permission on dir, checked at every call (the
// MDT's READDIR checks none, as an open did); OpenDir checks it once.
func (fs *FS) ReadDir(ctx context.Context, cred Cred, dir FID, cookie uint64, max int) ([]DirEntry, uint64, error) {
	if err := fs.Access(ctx, cred, dir, accessRead); err != nil {
		return nil, 0, err
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	return fs.mdc.ReadPage(ctx, cred, dir, cookie, max)
}

// Dir is a directory opened for reading (opendir(3)): the permission to
// read it was checked at the open, and its pages read on whoever reads
// them and whatever chmod comes after, as a Linux directory descriptor
// kept across a setuid or passed to another user does.
type Dir struct {
	fs   *FS
	cred Cred
	fid  FID
}

// OpenDir opens dir for reading as cred, who needs read permission on it
// (EACCES otherwise; ENOTDIR for another kind of file).
func (fs *FS) OpenDir(ctx context.Context, cred Cred, dir FID) (*Dir, error) {
	a, err := fs.access(ctx, cred, dir, accessRead)
	if err != nil {
		return nil, err
	}
	if a.Mode&sIFMT != sIFDIR {
		return nil, fmt.Errorf("client: open dir %v: %w", dir, syscall.ENOTDIR)
	}
	return &Dir{fs: fs, cred: cred, fid: dir}, nil
}

// ReadDir is FS.ReadDir of the directory opened, with the opener's
// credentials and no further permission check.
func (d *Dir) ReadDir(ctx context.Context, cookie uint64, max int) ([]DirEntry, uint64, error) {
	ctx, cancel := d.fs.op(ctx)
	defer cancel()
	return d.fs.mdc.ReadPage(ctx, d.cred, d.fid, cookie, max)
}

// FID returns the directory's FID.
func (d *Dir) FID() FID { return d.fid }

// DirEnd is the cookie after a directory's last entry.
const DirEnd = mdc.DirEnd

// Xattr flags (setxattr's).
const (
	XattrCreate  = mdc.XattrCreate
	XattrReplace = mdc.XattrReplace
)

func (fs *FS) xattrAllowed(name string) error {
	if !fs.cfg.UserXattr && len(name) >= 5 && name[:5] == "user." {
		return fmt.Errorf("xattr %q without user_xattr: %w", name, syscall.EOPNOTSUPP)
	}
	return nil
}

// Getxattr returns the value of f's extended attribute name.
func (fs *FS) Getxattr(ctx context.Context, cred Cred, f FID, name string) ([]byte, error) {
	if v, ok, err := fs.lustreGetxattr(ctx, cred, f, name); ok {
		return v, err
	}
	if err := fs.xattrAllowed(name); err != nil {
		return nil, err
	}
	shared := sharedXattr(name)
	var l *ldlm.ClientLock
	var gen uint64
	if shared {
		if x, ok := fs.cache.cachedXattr(f, name); ok {
			if x.absent {
				return nil, fmt.Errorf("client: getxattr %q of %v: %w (cached)", name, f, syscall.ENODATA)
			}
			return bytes.Clone(x.v), nil
		}
		l, gen = fs.cache.xattrGen(f)
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	v, err := fs.mdc.Getxattr(ctx, cred, f, name)
	if shared && (err == nil || errors.Is(err, syscall.ENODATA)) {
		fs.cache.storeXattr(f, name, xattrValue{v: v, absent: err != nil}, l, gen)
	}
	return v, err
}

// sharedXattr reports whether everyone who can reach a file reads its
// extended attribute name alike (the MDT checks no permission for it), so
// that one read serves every caller: the security and POSIX ACL ones,
// which `ls -l` reads for every file it lists.
func sharedXattr(name string) bool {
	if name == xattrACLAccess || name == xattrACLDefault {
		return true
	}
	// (A bad name goes to the MDT, which says what is wrong with it.)
	return len(name) > len("security.") && strings.HasPrefix(name, "security.") && !strings.ContainsRune(name, 0)
}

// Setxattr sets f's extended attribute name (flags: XattrCreate,
// XattrReplace).
func (fs *FS) Setxattr(ctx context.Context, cred Cred, f FID, name string, value []byte, flags int) error {
	if ok, err := fs.lustreSetxattr(ctx, cred, f, name, value, flags); ok {
		return err
	}
	if err := fs.writable(); err != nil {
		return err
	}
	if err := fs.xattrAllowed(name); err != nil {
		return err
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	err := fs.mdc.Setxattr(ctx, cred, f, name, value, flags)
	fs.cache.invalidate(f)
	return err
}

// Listxattr returns the names of f's extended attributes.
func (fs *FS) Listxattr(ctx context.Context, cred Cred, f FID) ([]string, error) {
	ctx, cancel := fs.op(ctx)
	defer cancel()
	names, err := fs.mdc.Listxattr(ctx, cred, f)
	if err == nil {
		names = fs.lustreListxattr(ctx, cred, f, names)
	}
	if err != nil || fs.cfg.UserXattr {
		return names, err
	}
	out := names[:0]
	for _, n := range names {
		if len(n) < 5 || n[:5] != "user." {
			out = append(out, n)
		}
	}
	return out, nil
}

// Removexattr removes f's extended attribute name.
func (fs *FS) Removexattr(ctx context.Context, cred Cred, f FID, name string) error {
	if ok, err := fs.lustreRemovexattr(ctx, cred, f, name); ok {
		return err
	}
	if err := fs.writable(); err != nil {
		return err
	}
	if err := fs.xattrAllowed(name); err != nil {
		return err
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	err := fs.mdc.Removexattr(ctx, cred, f, name)
	fs.cache.invalidate(f)
	return err
}

// Statfs returns the file system's space, summed over the OSTs (those that
// answer within the timeout with lazystatfs), and the MDT's inode counts.
func (fs *FS) Statfs(ctx context.Context) (Statfs, error) {
	ctx, cancel := fs.op(ctx)
	defer cancel()
	m, err := fs.mdc.Statfs(ctx)
	if err != nil {
		return Statfs{}, err
	}
	out := Statfs{Files: m.Files, Ffree: m.Ffree, Bsize: 4096, Namelen: MaxName}
	idx := fs.OSTs()
	type res struct {
		blocks, bfree, bavail uint64
		err                   error
	}
	results := make([]res, len(idx))
	done := make(chan struct{}, len(idx))
	for i, k := range idx {
		o, err := fs.OSC(k)
		if err != nil {
			results[i].err = err
			done <- struct{}{}
			continue
		}
		go func() {
			sctx := ctx
			if fs.cfg.LazyStatfs {
				var c context.CancelFunc
				sctx, c = context.WithTimeout(ctx, 5*time.Second)
				defer c()
			}
			sr, err := o.Statfs(sctx)
			if err == nil {
				bs := uint64(max(sr.Bsize, 1))
				results[i] = res{blocks: sr.Blocks * bs / 4096, bfree: sr.Bfree * bs / 4096, bavail: sr.Bavail * bs / 4096}
			} else {
				results[i].err = err
			}
			done <- struct{}{}
		}()
	}
	for range idx {
		<-done
	}
	var errs []error
	for _, r := range results {
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		out.Blocks += r.blocks
		out.Bfree += r.bfree
		out.Bavail += r.bavail
	}
	if len(errs) > 0 && !fs.cfg.LazyStatfs {
		return Statfs{}, errors.Join(errs...)
	}
	return out, nil
}

// FID2Path returns every path of f from the root.
func (fs *FS) FID2Path(ctx context.Context, cred Cred, f FID) ([]string, error) {
	ctx, cancel := fs.op(ctx)
	defer cancel()
	return fs.mdc.FID2Path(ctx, cred, f)
}

// SetLayout gives a file made without objects its layout.
func (fs *FS) SetLayout(ctx context.Context, cred Cred, f FID, l layout.Layout) (*layout.Layout, error) {
	if err := fs.writable(); err != nil {
		return nil, err
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	out, err := fs.mdc.SetLayout(ctx, cred, f, l)
	fs.cache.invalidate(f)
	return out, err
}

// SwapLayouts exchanges the objects (and lazy sizes) of the regular files
// a and b, which keep their FIDs, names and attributes (lfs migrate): a
// process with either open reads the other's data from its next I/O on,
// since the MDT calls back the layout locks. With dvA not nil, EBUSY if
// a's data version is no longer *dvA (someone changed its data).
func (fs *FS) SwapLayouts(ctx context.Context, cred Cred, a, b FID, dvA *uint64) error {
	if err := fs.writable(); err != nil {
		return err
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	err := fs.mdc.SwapLayouts(ctx, cred, a, b, dvA)
	fs.cache.invalidate(a)
	fs.cache.invalidate(b)
	return err
}

// Layout returns f's layout (nil for a file without objects, or not a
// regular file).
func (fs *FS) Layout(ctx context.Context, cred Cred, f FID) (*layout.Layout, error) {
	if _, lay, ok := fs.cache.attr(f); ok {
		return lay, nil
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	_, lay, err := fs.mdc.GetattrLayout(ctx, cred, f)
	return lay, err
}

// testBeforeDataOf, set by tests, runs first in dataOf: after the layout
// it is given was read, before its objects are taken.
var testBeforeDataOf func(fs *FS, f FID)

// testBeforeStoreNegative, set by tests, runs when a lookup's RPC found
// name missing, before the name is stored as such.
var testBeforeStoreNegative func(name string)
