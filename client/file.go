package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/client/lov"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/client/osc"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/mds/mdd"
)

// File is an open file: its MDT open handle and, for a regular file with
// objects, its data. Reads and writes go through the client's page cache
// under extent locks. Safe for concurrent use.
type File struct {
	fs    *FS
	cred  Cred
	flags uint64
	mf    *mdc.File
	// ino is the file's inode, which stays in the cache while the file is
	// open; its data are the objects (nil: not a regular file, or no
	// objects yet).
	ino *inode

	// entryLocked says the name the file was opened by is cached under
	// the open's lock (its LOOKUP bit): a caller may let the kernel keep
	// the entry until the lock's callback says otherwise.
	entryLocked bool

	mu      sync.Mutex
	closed  bool
	written bool
	// mtimeGen is the inode's mtimeGen at the first write: another
	// explicit time set since makes the close leave the times alone.
	mtimeGen uint64
}

// CreateOptions are a new file's layout choices (nil: the directory's
// default layout, else the file system's).
type CreateOptions = mdc.CreateOptions

// errExisted tells makingName that a create found its name taken.
var errExisted = errors.New("the name existed")

// testBeforeCreate, set by tests, runs between an O_CREAT open's taking of
// the name's negative entry and its RPC.
var testBeforeCreate func()

// testBeforeRead, set by tests, runs in ReadAt between taking the file's
// objects and reading them.
var testBeforeRead func()

// Create opens name in parent with Linux's open flags, making it (a
// regular file with permission bits mode) if O_CREAT says so: one
// LDLM_ENQUEUE with an open intent. It returns the file and its
// attributes.
func (fs *FS) Create(ctx context.Context, cred Cred, parent FID, name string, flags uint64, mode uint32, opts *CreateOptions) (*File, Attr, error) {
	if err := checkName(name); err != nil {
		return nil, Attr{}, err
	}
	if flags&(syscall.O_CREAT|syscall.O_TRUNC) != 0 || flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		if err := fs.writable(); err != nil {
			return nil, Attr{}, err
		}
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	op := mdc.ItOpen
	if flags&syscall.O_CREAT != 0 {
		op |= mdc.ItCreat
		fs.cache.forgetEntry(parent, name)
		done := fs.makingName(parent, name)
		mk := fs.cache.beginMaking(parent, name)
		if testBeforeCreate != nil {
			testBeforeCreate()
		}
		f, a, err := fs.openIntent(ctx, cred, mdc.Intent{Op: op, Parent: parent, Name: name, Flags: flags, Mode: mode, Create: opts, KeepDirLock: mk.lock})
		if err == nil {
			fs.endMaking(ctx, mk, &f.mf.Attr, f.Created(), nil)
		} else {
			fs.endMaking(ctx, mk, nil, false, err)
		}
		if err == nil && !f.Created() {
			// It existed (another client made it since the name was
			// found missing): the kernel's create fails or finds a file
			// it did not make, and keeps its negative entry unless told.
			done(errExisted)
		} else {
			done(err)
		}
		return f, a, err
	}
	return fs.openIntent(ctx, cred, mdc.Intent{Op: op, Parent: parent, Name: name, Flags: flags, Mode: mode, Create: opts})
}

// Tmpfile makes and opens a regular file with no name in directory dir,
// as open(2) with O_TMPFILE does (flags must hold O_TMPFILE and O_WRONLY or
// O_RDWR; EINVAL otherwise): the file goes when its last open closes,
// unless Link gives it a name first, which O_EXCL forbids. Its layout is
// the one a file created in dir would get (opts as Create's).
func (fs *FS) Tmpfile(ctx context.Context, cred Cred, dir FID, flags uint64, mode uint32, opts *CreateOptions) (*File, Attr, error) {
	if flags&unix.O_TMPFILE != unix.O_TMPFILE || flags&syscall.O_ACCMODE == syscall.O_RDONLY || flags&syscall.O_CREAT != 0 {
		return nil, Attr{}, fmt.Errorf("client: tmpfile in %v: flags %#o: %w", dir, flags, syscall.EINVAL)
	}
	if err := fs.writable(); err != nil {
		return nil, Attr{}, err
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	return fs.openIntent(ctx, cred, mdc.Intent{Op: mdc.ItOpen, Parent: dir, Flags: flags, Mode: mode, Create: opts})
}

// Open opens the file f (by FID: the handle a lookup gave) with Linux's
// open flags.
func (fs *FS) Open(ctx context.Context, cred Cred, f FID, flags uint64) (*File, Attr, error) {
	if flags&syscall.O_TRUNC != 0 || flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		if err := fs.writable(); err != nil {
			return nil, Attr{}, err
		}
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	return fs.openIntent(ctx, cred, mdc.Intent{Op: mdc.ItOpen, FID: f, Flags: flags})
}

// openIntent runs an open intent; a file found HSM released is restored
// first (transparent restore: the data come back before the open
// completes), then opened again.
func (fs *FS) openIntent(ctx context.Context, cred Cred, it mdc.Intent) (*File, Attr, error) {
	for try := 0; ; try++ {
		rep, err := fs.mdc.Enqueue(ctx, cred, it, fs.hooks())
		if err != nil {
			if rep != nil && rep.Lock != nil {
				rep.Lock.Release()
			}
			return nil, Attr{}, err
		}
		mf := rep.File()
		if mf.Released {
			if err := fs.restoreReleased(ctx, cred, mf, try); err != nil {
				return nil, Attr{}, err
			}
			continue
		}
		return fs.opened(ctx, cred, mf, it.Flags, dentKey{it.Parent, it.Name})
	}
}

// EntryLocked reports whether the name f was opened by stays valid under
// a lock of the client's, whose loss the Notifier hears of
// (InvalidateEntry): a FUSE mount then lets the kernel cache the entry.
func (f *File) EntryLocked() bool { return f.entryLocked }

// opened sets up the File of an open intent's reply.
func (fs *FS) opened(ctx context.Context, cred Cred, mf *mdc.File, flags uint64, name dentKey) (_ *File, _ Attr, err error) {
	// Counted open first: a callback of the open's lock that comes
	// before openLock has recorded it marks the layout stale then.
	fs.cache.mu.Lock()
	ino := fs.cache.getLocked(mf.FID)
	ino.opens++
	fs.cache.mu.Unlock()
	entryLocked := false
	if mf.Lock != nil {
		if mf.Created && name.name != "" && mf.Lock.Policy().Bits&ldlm.BitUpdate != 0 {
			// A file this open made, granted with its attributes (the
			// MDT's getattr bits): cached as a getattr's are, so that a
			// stat that follows asks the MDT nothing.
			fs.store(ctx, mf.Attr, mf.Layout, mf.Lock, name.parent, name.name)
			entryLocked = !mf.Lock.Gone()
		} else {
			// The open lock (LOOKUP, LAYOUT) stays in the LRU; its
			// callback says the layout changed, and that the name it was
			// opened by may lead elsewhere now.
			entryLocked = fs.cache.openLock(mf.FID, mf.Lock, name)
		}
		mf.Lock.Release()
		mf.Lock = nil
	} else if mf.Attr.Mode&sIFMT == sIFREG {
		// Opened without a lock on the layout: nothing would say when it
		// changes. The first I/O reads it again, under a lock.
		fs.cache.mu.Lock()
		ino.staleLocked()
		fs.cache.mu.Unlock()
	}
	f := &File{fs: fs, cred: cred, flags: flags, mf: mf, ino: ino, entryLocked: entryLocked}
	defer func() {
		if err != nil {
			f.Close(context.Background())
		}
	}()
	a := mf.Attr
	if a.Mode&sIFMT == sIFREG && mf.Layout != nil && !mf.Released {
		d, _, err := fs.dataOf(mf.FID, mf.Layout)
		if err != nil {
			return nil, Attr{}, err
		}
		if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY && !mf.Created {
			if err := d.Truncate(ctx, 0); err != nil {
				return nil, Attr{}, fmt.Errorf("open %v: truncate: %w", mf.FID, err)
			}
			fs.cache.invalidate(mf.FID)
			f.written = true
		}
		if mf.Created || f.written {
			// Made or emptied by this open: empty, no glimpse needed.
			a.Size, a.Blocks = 0, 0
		} else {
			// By the file's objects now, not the open's: its layout may
			// have been swapped and its objects destroyed since it was
			// read (the open's lock was called back then).
			da, err := f.attr(ctx)
			if err != nil {
				return nil, Attr{}, fmt.Errorf("open %v: size: %w", mf.FID, err)
			}
			a.Size, a.Blocks = uint64(da.Size), da.Blocks
		}
	}
	return f, a, nil
}

// data returns the file's objects as its current layout has them: read
// again from the MDT, under a lock on the layout, when a lock covering it
// went meanwhile. nil for a file without objects.
func (f *File) data(ctx context.Context) (*lov.File, error) {
	d, _, err := f.dataGen(ctx)
	return d, err
}

// dataGen is data, with the inode's layoutGen the objects are current
// for: if it moves, the layout changed since (Lustre's layout generation,
// which restarts an I/O that ran on the old layout).
func (f *File) dataGen(ctx context.Context) (*lov.File, uint64, error) {
	fs := f.fs
	fs.cache.mu.Lock()
	d, stale, gen := f.ino.data, f.ino.stale, f.ino.layoutGen
	fs.cache.mu.Unlock()
	if !stale && (d != nil || f.mf.Attr.Mode&sIFMT != sIFREG) {
		return d, gen, nil
	}
	if f.mf.Attr.Mode&sIFMT != sIFREG {
		return nil, gen, nil
	}
	// A getattr intent: the layout comes read under the lock granted
	// with it, whose loss marks the layout stale again (a layout fetched
	// without one would never be known to change). The mark stays until
	// the new layout's objects are in the inode's place: an I/O that
	// starts meanwhile reads the layout as well, rather than use the
	// objects it replaces.
	rep, err := fs.mdc.Enqueue(ctx, Root(), mdc.Intent{Op: mdc.ItGetattr, FID: f.mf.FID}, fs.hooks())
	if err != nil {
		return nil, gen, fmt.Errorf("layout of %v: %w", f.mf.FID, err) // (still stale: the next I/O tries again)
	}
	if rep.Lock != nil {
		fs.cache.openLock(f.mf.FID, rep.Lock, dentKey{})
		rep.Lock.Release()
	} else {
		fs.cache.mu.Lock()
		f.ino.staleLocked()
		fs.cache.mu.Unlock()
	}
	d = nil
	if rep.Layout != nil {
		if d, _, err = fs.dataOf(f.mf.FID, rep.Layout); err != nil {
			return nil, gen, err
		}
	}
	fs.cache.mu.Lock()
	if f.ino.layoutGen == gen {
		f.ino.stale = false // (else lost again since it was read: read it again)
	}
	fs.cache.mu.Unlock()
	return d, gen, nil
}

// onData runs fn on f's objects, and again on the new ones if the layout
// was lost while it ran (its objects may have been destroyed under it), at
// most layoutRetries times more. It reports false, without calling fn, for
// a file without objects.
func (f *File) onData(ctx context.Context, what string, fn func(d *lov.File) error) (bool, error) {
	for try := 0; ; try++ {
		d, gen, err := f.dataGen(ctx)
		if err != nil || d == nil {
			return false, err
		}
		err = fn(d)
		f.fs.cache.mu.Lock()
		moved := f.ino.layoutGen != gen
		f.fs.cache.mu.Unlock()
		if try == layoutRetries || !moved {
			return true, err
		}
		f.fs.log.Debug("client: again: the layout changed under it", "op", what, "fid", f.mf.FID, "err", err)
	}
}

// layoutRetries bounds how often an I/O is done again because the layout
// changed under it.
const layoutRetries = 3

// instantiate has the MDT instantiate the components covering [off,
// off+n) and returns the objects of the new layout.
func (f *File) instantiate(ctx context.Context, off, n uint64) (*lov.File, error) {
	return f.instantiateTo(ctx, off, off+max(n, 1))
}

// instantiateTo is instantiate of [start, end) (end layout.EOF: to the
// end of the file).
func (f *File) instantiateTo(ctx context.Context, start, end uint64) (*lov.File, error) {
	lay, err := f.fs.mdc.LayoutIntent(ctx, f.cred, f.mf.FID, start, end)
	if err != nil {
		return nil, err
	}
	d, _, err := f.fs.dataOf(f.mf.FID, lay)
	return d, err
}

// FID returns the file's FID.
func (f *File) FID() FID { return f.mf.FID }

// Layout returns the file's layout at open (nil without objects).
func (f *File) Layout() *layout.Layout { return f.mf.Layout }

// Created says whether the open made the file.
func (f *File) Created() bool { return f.mf.Created }

func (f *File) check(write bool) error {
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("file %v: closed: %w", f.mf.FID, syscall.EBADF)
	case write && f.flags&syscall.O_ACCMODE == syscall.O_RDONLY:
		return fmt.Errorf("file %v: not open for writing: %w", f.mf.FID, syscall.EBADF)
	case !write && f.flags&syscall.O_ACCMODE == syscall.O_WRONLY:
		return fmt.Errorf("file %v: not open for reading: %w", f.mf.FID, syscall.EBADF)
	case f.mf.Attr.Mode&sIFMT == sIFDIR:
		return fmt.Errorf("file %v: %w", f.mf.FID, syscall.EISDIR)
	}
	return nil
}

// ReadAt reads len(p) bytes at off: fewer and io.EOF at the end of the
// file.
func (f *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return f.read(ctx, nil, p, off)
}

// ReadVec is ReadAt that, rather than copying cached bytes into p, puts
// the n bytes read into v as slices of the client's cached pages, pinned
// until v.Release (and of p, for holes): what a FUSE reply hands the
// kernel without a copy. v is empty after an error other than io.EOF.
func (f *File) ReadVec(ctx context.Context, v *osc.Vec, p []byte, off int64) (int, error) {
	return f.read(ctx, v, p, off)
}

// read is ReadAt, or ReadVec with v.
func (f *File) read(ctx context.Context, v *osc.Vec, p []byte, off int64) (int, error) {
	if err := f.check(false); err != nil {
		return 0, err
	}
	ctx, cancel := f.fs.op(ctx)
	defer cancel()
	var n int
	some, err := f.onData(ctx, "read", func(d *lov.File) (err error) {
		if testBeforeRead != nil {
			testBeforeRead()
		}
		if v == nil {
			n, err = d.ReadAt(ctx, p, off)
			return err
		}
		v.Release() // a read again after a layout change
		n, err = d.ReadVec(ctx, v, p, off)
		return err
	})
	if !some && err == nil {
		err = io.EOF
	}
	if v != nil && err != nil && !errors.Is(err, io.EOF) {
		v.Release() // (a try after a layout change may have failed before reading)
	}
	return n, err
}

// WriteAt writes p at off (at the end of the file, atomically, for a file
// opened O_APPEND) and returns the bytes written and the offset they went
// to. A write into a component of a composite layout that has no objects
// yet has the MDT instantiate it first.
func (f *File) WriteAt(ctx context.Context, p []byte, off int64) (int, int64, error) {
	return f.writeAt(ctx, p, off, f.flags&syscall.O_APPEND != 0)
}

// WriteAtOffset writes p at off even if the file was opened O_APPEND: for
// data whose place is known, such as the pages of a shared mapping the
// kernel writes back through whichever open of the file may write
// (FUSE_WRITE_CACHE), an O_APPEND one included. EPERM for a file that
// was append-only at the open: only appends may change it.
func (f *File) WriteAtOffset(ctx context.Context, p []byte, off int64) (int, error) {
	if f.mf.Attr.Flags&mdd.FlagAppend != 0 {
		return 0, fmt.Errorf("file %v: append-only: write at %d: %w", f.mf.FID, off, syscall.EPERM)
	}
	n, _, err := f.writeAt(ctx, p, off, false)
	return n, err
}

func (f *File) writeAt(ctx context.Context, p []byte, off int64, appending bool) (int, int64, error) {
	if err := f.check(true); err != nil {
		return 0, 0, err
	}
	ctx, cancel := f.fs.op(ctx)
	defer cancel()
	d, err := f.data(ctx)
	if err != nil {
		return 0, 0, err
	}
	if d == nil {
		return 0, 0, fmt.Errorf("file %v has no objects: %w", f.mf.FID, syscall.EIO)
	}
	f.markWritten()
	for try := 0; ; try++ {
		var n int
		at := off
		if appending {
			n, at, err = d.Append(ctx, p)
		} else {
			n, err = d.WriteAt(ctx, p, off)
		}
		if !errors.Is(err, layout.ErrUninstantiated) || try > 0 {
			return n, at, err
		}
		if appending {
			size, serr := d.Size(ctx)
			if serr != nil {
				return 0, 0, serr
			}
			// An append locks the file from its size to the end, and
			// goes wherever other appenders leave the end: every
			// component past the size gets its objects, as Lustre's
			// append intent asks for them to EOF.
			if d, err = f.instantiateTo(ctx, uint64(size), layout.EOF); err != nil {
				return 0, 0, err
			}
			continue
		}
		if d, err = f.instantiate(ctx, uint64(at), uint64(len(p))); err != nil {
			return 0, 0, err
		}
	}
}

// Fallocate is fallocate(2) of [off, off+n) of the file, as Lustre's
// ll_fallocate: mode 0 reserves the blocks on the OSTs (the file grows to
// off+n), FALLOC_FL_KEEP_SIZE reserves them keeping the size, and
// FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE frees them (the range reads as
// zeros). Other modes are EOPNOTSUPP. As the kernel's vfs_fallocate: the
// file must be open for writing (EBADF), not immutable (EPERM), and an
// append-only file may only be given blocks (EPERM).
func (f *File) Fallocate(ctx context.Context, mode uint32, off, n int64) error {
	const keep, punch = unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_PUNCH_HOLE
	if err := f.check(true); err != nil {
		return err
	}
	switch {
	case mode != 0 && mode != keep && mode != punch|keep:
		return fmt.Errorf("file %v: fallocate mode %#x: %w", f.mf.FID, mode, syscall.EOPNOTSUPP)
	case off < 0 || n <= 0:
		return fmt.Errorf("file %v: fallocate of %d bytes at %d: %w", f.mf.FID, n, off, syscall.EINVAL)
	case off > math.MaxInt64-n:
		return fmt.Errorf("file %v: fallocate of %d bytes at %d: %w", f.mf.FID, n, off, syscall.EFBIG)
	case f.mf.Attr.Flags&mdd.FlagImmutable != 0:
		return fmt.Errorf("file %v: immutable: fallocate: %w", f.mf.FID, syscall.EPERM)
	case f.mf.Attr.Flags&mdd.FlagAppend != 0 && mode&^keep != 0:
		return fmt.Errorf("file %v: append-only: punch: %w", f.mf.FID, syscall.EPERM)
	}
	ctx, cancel := f.fs.op(ctx)
	defer cancel()
	d, err := f.data(ctx)
	if err != nil {
		return err
	}
	if d == nil {
		return fmt.Errorf("file %v has no objects: %w", f.mf.FID, syscall.EIO)
	}
	f.markWritten()
	err = d.Fallocate(ctx, off, n, mode&keep != 0, mode&punch != 0)
	if errors.Is(err, layout.ErrUninstantiated) {
		// Components of the range have no objects yet (PFL): the MDT
		// gives them some, as for a write.
		if d, err = f.instantiate(ctx, uint64(off), uint64(n)); err != nil {
			return err
		}
		err = d.Fallocate(ctx, off, n, mode&keep != 0, false)
	}
	return err
}

func (f *File) markWritten() {
	f.mu.Lock()
	first := !f.written
	f.written = true
	f.mu.Unlock()
	if first {
		f.fs.cache.mu.Lock()
		f.mtimeGen = f.ino.mtimeGen
		f.fs.cache.mu.Unlock()
		// The attributes cached (the kernel's too) miss the new mtime.
		f.fs.cache.invalidate(f.mf.FID)
	}
}

// Size returns the file's size now.
func (f *File) Size(ctx context.Context) (int64, error) {
	a, err := f.attr(ctx)
	return a.Size, err
}

// attr is what the file's objects say of its size and blocks; a file
// without objects (released) has the MDT's.
func (f *File) attr(ctx context.Context) (lov.Attr, error) {
	ctx, cancel := f.fs.op(ctx)
	defer cancel()
	a := lov.Attr{Size: int64(f.mf.Attr.Size), Blocks: f.mf.Attr.Blocks}
	_, err := f.onData(ctx, "size", func(d *lov.File) (err error) {
		a, err = d.Attr(ctx)
		return err
	})
	return a, err
}

// Truncate sets the file's size.
func (f *File) Truncate(ctx context.Context, size int64) error {
	if err := f.check(true); err != nil {
		return err
	}
	f.markWritten()
	_, err := f.fs.Setattr(ctx, f.cred, f.mf.FID, SetAttr{Valid: mdc.AttrSize | mdc.AttrOpenWrite, Size: uint64(size)})
	return err
}

// Flush writes back the file's dirty data and waits for the OSTs to have
// it (close-to-open: what a close flushed, the next open anywhere sees).
func (f *File) Flush(ctx context.Context) error {
	ctx, cancel := f.fs.op(ctx)
	defer cancel()
	d, err := f.data(ctx)
	if err != nil || d == nil {
		return err
	}
	return d.Flush(ctx)
}

// Sync makes the file's data durable (fsync), reporting errors of earlier
// asynchronous writes.
func (f *File) Sync(ctx context.Context) error {
	ctx, cancel := f.fs.op(ctx)
	defer cancel()
	d, err := f.data(ctx)
	if err != nil || d == nil {
		return err
	}
	return d.Sync(ctx)
}

// Close flushes the file's data, records its size on the MDT (LSOM) and
// its mtime if it was written, and ends the open. The last close of an
// unlinked file destroys its objects.
func (f *File) Close(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return fmt.Errorf("file %v: %w", f.mf.FID, syscall.EBADF)
	}
	f.closed = true
	written := f.written
	f.mu.Unlock()
	fs := f.fs
	ctx, cancel := fs.op(ctx)
	defer cancel()
	var errs []error
	var lsom *mdc.LSOM
	var lastWrite int64
	if d, err := f.data(ctx); err != nil {
		errs = append(errs, err)
	} else if d != nil && written {
		// The size goes to the MDT (LSOM) only when this open changed it;
		// the locks the writes took make it known without a glimpse, and
		// the time of the last write with it.
		if err := d.Flush(ctx); err != nil {
			errs = append(errs, err)
		}
		if a, err := d.Attr(ctx); err == nil {
			lsom = &mdc.LSOM{Size: uint64(a.Size), Blocks: a.Blocks}
			lastWrite = a.Mtime
		}
	}
	fs.cache.mu.Lock()
	explicit := f.ino.mtimeGen != f.mtimeGen
	fs.cache.mu.Unlock()
	var mtime int64 // 0: the close leaves the times
	if written && !explicit {
		// The writes' mtime goes to the MDT with the close, the last
		// moment it can: unless someone set the times explicitly since the
		// first write (touch, cp -p, utime), which must stand.
		mtime = lastWrite
		if mtime == 0 {
			mtime = time.Now().UnixNano()
		}
	}
	// The close of a file this open made and nothing changed since is put
	// off (mdc.CloseLater): only the open count changes, and a create loop
	// saves an RPC per file. Other closes go now: a file someone opened to
	// read, an HSM copytool say, may be released (which wants it closed)
	// right after.
	if lsom != nil || mtime != 0 || written || !f.mf.Created || !fs.mdc.CloseLater(f.cred, f.mf) {
		if err := fs.mdc.CloseWritten(ctx, f.cred, f.mf, lsom, written, mtime, mtime); err != nil {
			errs = append(errs, err)
		}
	}
	if mtime != 0 {
		fs.cache.invalidate(f.mf.FID)
	}
	fs.cache.mu.Lock()
	var gone *inode
	f.ino.opens--
	if f.ino.opens == 0 && f.ino.lock == nil && fs.cache.inodes[f.mf.FID] == f.ino {
		gone = f.ino
		delete(fs.cache.inodes, f.mf.FID)
	} else if f.ino.opens == 0 && len(f.ino.retired) > 0 {
		gone = &inode{retired: f.ino.retired}
		f.ino.retired = nil
	}
	fs.cache.mu.Unlock()
	if gone != nil {
		gone.closeData()
	}
	return errors.Join(errs...)
}

// Lock types of Flock (fcntl's).
const (
	LockRead   = syscall.F_RDLCK
	LockWrite  = syscall.F_WRLCK
	LockUnlock = syscall.F_UNLCK
)

// LockRange is a POSIX record lock: type, byte range [Start, End]
// (End ldlm.EOF: to the end), and the process that holds it.
type LockRange struct {
	Type       int
	Start, End uint64
	PID        uint32
}

// EOF is the end of every file, for lock ranges.
const EOF = ldlm.EOF

func (fs *FS) flockRes(f FID) ldlm.Resource {
	return ldlm.Resource{ID: ldlm.ResIDOfFID(f.Seq, f.Oid, f.Ver), Type: ldlm.TypeFlock}
}

func lockMode(typ int) (ldlm.Mode, error) {
	switch typ {
	case LockRead:
		return ldlm.PR, nil
	case LockWrite:
		return ldlm.PW, nil
	case LockUnlock:
		return ldlm.NL, nil
	}
	return 0, fmt.Errorf("lock type %d: %w", typ, syscall.EINVAL)
}

// SetLock takes, changes or drops (LockUnlock) the POSIX record lock of
// owner on f's range lr through the MDT's lock server, so it excludes
// other clients' locks; wait says F_SETLKW (block until granted, EDEADLK
// on a deadlock) rather than F_SETLK (EAGAIN on a conflict).
func (fs *FS) SetLock(ctx context.Context, f FID, owner uint64, lr LockRange, wait bool) error {
	if !fs.cfg.Flock {
		return fmt.Errorf("locks on a noflock mount: %w", syscall.ENOSYS)
	}
	mode, err := lockMode(lr.Type)
	if err != nil {
		return err
	}
	if lr.End < lr.Start {
		return fmt.Errorf("lock range [%d, %d]: %w", lr.Start, lr.End, syscall.EINVAL)
	}
	pol := ldlm.Policy{Extent: ldlm.Extent{Start: lr.Start, End: lr.End}, FlockOwner: owner, PID: lr.PID}
	if !wait || mode == ldlm.NL {
		var cancel context.CancelFunc
		ctx, cancel = fs.op(ctx)
		defer cancel()
	}
	err = fs.lk.Flock(ctx, fs.mdc.Import(), fs.flockRes(f), mode, pol, wait)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ldlm.ErrWouldBlock):
		return fmt.Errorf("lock %v [%d, %d]: %w", f, lr.Start, lr.End, syscall.EAGAIN)
	case errors.Is(err, ldlm.ErrDeadlock):
		return fmt.Errorf("lock %v [%d, %d]: %w", f, lr.Start, lr.End, syscall.EDEADLK)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("lock %v: %w", f, syscall.EINTR)
	}
	return err
}

// GetLock returns the lock that would keep owner from taking lr (F_GETLK),
// or lr with Type LockUnlock when none would.
func (fs *FS) GetLock(ctx context.Context, f FID, owner uint64, lr LockRange) (LockRange, error) {
	if !fs.cfg.Flock {
		return LockRange{}, fmt.Errorf("locks on a noflock mount: %w", syscall.ENOSYS)
	}
	mode, err := lockMode(lr.Type)
	if err != nil || mode == ldlm.NL {
		return LockRange{}, fmt.Errorf("test of lock type %d: %w", lr.Type, syscall.EINVAL)
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	pol := ldlm.Policy{Extent: ldlm.Extent{Start: lr.Start, End: lr.End}, FlockOwner: owner, PID: lr.PID}
	c, cm, found, err := fs.lk.TestFlock(ctx, fs.mdc.Import(), fs.flockRes(f), mode, pol)
	if err != nil {
		return LockRange{}, err
	}
	if !found {
		lr.Type = LockUnlock
		return lr, nil
	}
	t := LockRead
	if cm == ldlm.PW || cm == ldlm.EX {
		t = LockWrite
	}
	return LockRange{Type: t, Start: c.Extent.Start, End: c.Extent.End, PID: c.PID}, nil
}
