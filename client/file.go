package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/client/lov"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
)

// File is an open file: its MDT open handle and, for a regular file with
// objects, its data. Reads and writes go through the client's page cache
// under extent locks. Safe for concurrent use.
type File struct {
	fs    *FS
	cred  Cred
	flags uint64
	mf    *mdc.File
	data  *lov.File // nil: no objects (not a regular file, or none yet)

	mu      sync.Mutex
	closed  bool
	written bool
}

// CreateOptions are a new file's layout choices (nil: the directory's
// default layout, else the file system's).
type CreateOptions = mdc.CreateOptions

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
	}
	rep, err := fs.mdc.Enqueue(ctx, cred, mdc.Intent{Op: op, Parent: parent, Name: name, Flags: flags, Mode: mode, Create: opts}, fs.hooks())
	if err != nil {
		if rep != nil && rep.Lock != nil {
			rep.Lock.Release()
		}
		return nil, Attr{}, err
	}
	return fs.opened(ctx, cred, rep.File(), flags)
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
	rep, err := fs.mdc.Enqueue(ctx, cred, mdc.Intent{Op: mdc.ItOpen, FID: f, Flags: flags}, fs.hooks())
	if err != nil {
		return nil, Attr{}, err
	}
	return fs.opened(ctx, cred, rep.File(), flags)
}

// opened sets up the File of an open intent's reply.
func (fs *FS) opened(ctx context.Context, cred Cred, mf *mdc.File, flags uint64) (_ *File, _ Attr, err error) {
	if mf.Lock != nil {
		// The open lock (LOOKUP, LAYOUT) caches nothing here beyond the
		// layout the reply carries; give it back to the LRU.
		mf.Lock.Release()
		mf.Lock = nil
	}
	f := &File{fs: fs, cred: cred, flags: flags, mf: mf}
	fs.cache.mu.Lock()
	ino := fs.cache.getLocked(mf.FID)
	ino.opens++
	fs.cache.mu.Unlock()
	defer func() {
		if err != nil {
			f.Close(context.Background())
		}
	}()
	a := mf.Attr
	if a.Mode&sIFMT == sIFREG && mf.Layout != nil {
		d, _, err := fs.dataOf(mf.FID, mf.Layout)
		if err != nil {
			return nil, Attr{}, err
		}
		f.data = d
		if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY && !mf.Created {
			if err := d.Truncate(ctx, 0); err != nil {
				return nil, Attr{}, fmt.Errorf("open %v: truncate: %w", mf.FID, err)
			}
			fs.cache.invalidate(mf.FID)
			f.written = true
		}
		size, err := d.Size(ctx)
		if err != nil {
			return nil, Attr{}, fmt.Errorf("open %v: size: %w", mf.FID, err)
		}
		a.Size, a.Blocks = uint64(size), (uint64(size)+511)/512
	}
	return f, a, nil
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
	case f.data == nil && f.mf.Attr.Mode&sIFMT == sIFDIR:
		return fmt.Errorf("file %v: %w", f.mf.FID, syscall.EISDIR)
	}
	return nil
}

// ReadAt reads len(p) bytes at off: fewer and io.EOF at the end of the
// file.
func (f *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if err := f.check(false); err != nil {
		return 0, err
	}
	if f.data == nil {
		return 0, io.EOF
	}
	ctx, cancel := f.fs.op(ctx)
	defer cancel()
	return f.data.ReadAt(ctx, p, off)
}

// WriteAt writes p at off (at the end of the file, atomically, for a file
// opened O_APPEND) and returns the bytes written and the offset they went
// to.
func (f *File) WriteAt(ctx context.Context, p []byte, off int64) (int, int64, error) {
	if err := f.check(true); err != nil {
		return 0, 0, err
	}
	if f.data == nil {
		return 0, 0, fmt.Errorf("file %v has no objects: %w", f.mf.FID, syscall.EIO)
	}
	ctx, cancel := f.fs.op(ctx)
	defer cancel()
	f.markWritten()
	if f.flags&syscall.O_APPEND != 0 {
		at, err := f.data.Append(ctx, p)
		if err != nil {
			return 0, 0, err
		}
		return len(p), at, nil
	}
	n, err := f.data.WriteAt(ctx, p, off)
	return n, off, err
}

func (f *File) markWritten() {
	f.mu.Lock()
	first := !f.written
	f.written = true
	f.mu.Unlock()
	if first {
		// The attributes cached (the kernel's too) miss the new mtime.
		f.fs.cache.invalidate(f.mf.FID)
	}
}

// Size returns the file's size now.
func (f *File) Size(ctx context.Context) (int64, error) {
	if f.data == nil {
		return int64(f.mf.Attr.Size), nil
	}
	ctx, cancel := f.fs.op(ctx)
	defer cancel()
	return f.data.Size(ctx)
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
	if f.data == nil {
		return nil
	}
	ctx, cancel := f.fs.op(ctx)
	defer cancel()
	return f.data.Flush(ctx)
}

// Sync makes the file's data durable (fsync), reporting errors of earlier
// asynchronous writes.
func (f *File) Sync(ctx context.Context) error {
	if f.data == nil {
		return nil
	}
	ctx, cancel := f.fs.op(ctx)
	defer cancel()
	return f.data.Sync(ctx)
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
	if f.data != nil {
		if err := f.data.Flush(ctx); err != nil {
			errs = append(errs, err)
		}
		if size, err := f.data.Size(ctx); err == nil {
			lsom = &mdc.LSOM{Size: uint64(size), Blocks: (uint64(size) + 511) / 512}
		}
	}
	if written {
		now := time.Now().UnixNano()
		if _, err := fs.mdc.Setattr(ctx, Root(), f.mf.FID, SetAttr{Valid: mdc.AttrMtime | mdc.AttrCtime, Mtime: now, Ctime: now}); err != nil &&
			!errors.Is(err, syscall.ENOENT) {
			errs = append(errs, err)
		}
		fs.cache.invalidate(f.mf.FID)
	}
	if err := fs.mdc.Close(ctx, f.cred, f.mf, lsom); err != nil {
		errs = append(errs, err)
	}
	fs.cache.mu.Lock()
	var data *lov.File
	if ino := fs.cache.inodes[f.mf.FID]; ino != nil {
		ino.opens--
		if ino.opens == 0 && ino.lock == nil {
			data = ino.data
			delete(fs.cache.inodes, f.mf.FID)
		}
	}
	fs.cache.mu.Unlock()
	if data != nil {
		data.Close()
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
