package client

import (
	"context"
	"fmt"
	"sync"
	"syscall"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/internal/layout"
)

// HSM in the client library: a file's HSM state on the MDT, release, the
// copytool's completions, and transparent restore. Opening a released
// file (Open, Create without O_EXCL on an existing one) asks the FS's
// HSMRestorer for a restore, waits for it, and opens the restored file;
// a failed restore fails the open with EIO, a file system without a
// restorer with ENODATA. The restorer is set by whoever wires the mount
// (the FUSE mount, nacre tools) with SetHSMRestorer.

// HSMState is a file's HSM state (flags HSM*, archive id, data versions).
type HSMState = mdc.HSMState

// HSM flags (Lustre's HS_*).
const (
	HSMExists    = mdc.HSMExists
	HSMDirty     = mdc.HSMDirty
	HSMReleased  = mdc.HSMReleased
	HSMArchived  = mdc.HSMArchived
	HSMNoRelease = mdc.HSMNoRelease
	HSMNoArchive = mdc.HSMNoArchive
	HSMLost      = mdc.HSMLost
)

// HSM actions a copytool completes.
const (
	HSMActionArchive = mdc.HSMActionArchive
	HSMActionRestore = mdc.HSMActionRestore
	HSMActionRemove  = mdc.HSMActionRemove
)

// HSMRestorer brings a released file's data back: Restore returns once
// the file is restored (nil) or the restore failed or ctx ended (an
// error). Called concurrently.
type HSMRestorer interface {
	Restore(ctx context.Context, f FID, archiveID uint32) error
}

// restorers maps *FS to its HSMRestorer (FS keeps no field for it).
var restorers sync.Map

// SetHSMRestorer sets the restorer the FS asks when a released file is
// opened; nil removes it (call that before dropping the FS).
func (fs *FS) SetHSMRestorer(r HSMRestorer) {
	if r == nil {
		restorers.Delete(fs)
		return
	}
	restorers.Store(fs, r)
}

func (fs *FS) restorer() HSMRestorer {
	r, _ := restorers.Load(fs)
	h, _ := r.(HSMRestorer)
	return h
}

// maxRestoreTries bounds the restores one open asks for (a file released
// again between the restore and the open).
const maxRestoreTries = 3

// restoreReleased ends the open mf of a released file and restores it.
func (fs *FS) restoreReleased(ctx context.Context, cred Cred, mf *mdc.File, try int) error {
	if err := fs.mdc.Close(ctx, cred, mf, nil); err != nil {
		return err
	}
	if try >= maxRestoreTries {
		return fmt.Errorf("open %v: still released after %d restores: %w", mf.FID, try, syscall.EIO)
	}
	_, err := fs.restoreIfReleased(ctx, "open", mf.FID)
	return err
}

// restoreIfReleased restores f if it is released (op names the caller in
// errors), returning whether it was.
func (fs *FS) restoreIfReleased(ctx context.Context, op string, f FID) (bool, error) {
	st, err := fs.mdc.HSMState(ctx, Root(), f)
	if err != nil {
		return false, err
	}
	if st.Flags&HSMReleased == 0 {
		return false, nil // restored meanwhile
	}
	r := fs.restorer()
	if r == nil {
		return true, fmt.Errorf("%s %v: released and no HSM coordinator to restore it: %w", op, f, syscall.ENODATA)
	}
	if err := r.Restore(ctx, f, st.ArchiveID); err != nil {
		if ctx.Err() != nil {
			return true, fmt.Errorf("%s %v: waiting for its restore: %w", op, f, ctx.Err())
		}
		return true, fmt.Errorf("%s %v: restore: %v: %w", op, f, err, syscall.EIO)
	}
	fs.cache.invalidate(f)
	return true, nil
}

// HSMState returns f's HSM state: ENOENT, EINVAL for a file that is not
// regular.
func (fs *FS) HSMState(ctx context.Context, cred Cred, f FID) (HSMState, error) {
	ctx, cancel := fs.op(ctx)
	defer cancel()
	return fs.mdc.HSMState(ctx, cred, f)
}

// HSMSetFlags sets then clears f's HSM flags (lfs hsm_set, hsm_clear) and,
// if archiveID is not 0, its archive. The owner or root only (EPERM).
func (fs *FS) HSMSetFlags(ctx context.Context, cred Cred, f FID, set, clear, archiveID uint32) (HSMState, error) {
	if err := fs.writable(); err != nil {
		return HSMState{}, err
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	return fs.mdc.HSMSetFlags(ctx, cred, f, set, clear, archiveID)
}

// HSMRelease frees f's OST objects, its data staying in the archive: f
// must be archived and unchanged since (EPERM: not archived, NORELEASE,
// LOST; EBUSY: dirty, open, or changed since the archive copy). Its size
// and attributes stay. Releasing a released file does nothing.
func (fs *FS) HSMRelease(ctx context.Context, cred Cred, f FID) (HSMState, error) {
	if err := fs.writable(); err != nil {
		return HSMState{}, err
	}
	a, err := fs.Getattr(ctx, cred, f)
	if err != nil {
		return HSMState{}, err
	}
	if a.Mode&sIFMT != sIFREG {
		return HSMState{}, fmt.Errorf("release %v: not a regular file: %w", f, syscall.EINVAL)
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	st, err := fs.mdc.HSMRelease(ctx, cred, f, a.Size)
	fs.cache.invalidate(f)
	return st, err
}

// HSMProgress reports a copytool's completion of action on f to the MDT
// (root only): for an archive, dv is the data version the copy holds.
func (fs *FS) HSMProgress(ctx context.Context, f FID, action, archiveID uint32, dv uint64) (HSMState, error) {
	ctx, cancel := fs.op(ctx)
	defer cancel()
	st, err := fs.mdc.HSMProgress(ctx, Root(), f, action, archiveID, dv)
	fs.cache.invalidate(f)
	return st, err
}

// OpenRestore opens released file f for writing its data back, as a
// copytool's restore does: the open does not wait for a restore, and the
// file gets objects (a fresh layout from the released one's striping).
// Close it, then report HSMActionRestore.
func (fs *FS) OpenRestore(ctx context.Context, f FID) (*File, error) {
	if err := fs.writable(); err != nil {
		return nil, err
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	// (OpenRestore: an immutable or append-only file's data comes back
	// too; the MDT takes it only from root, of a released file.)
	rep, err := fs.mdc.Enqueue(ctx, Root(), mdc.Intent{Op: mdc.ItOpen, FID: f, Flags: syscall.O_WRONLY | mdc.OpenRestore}, fs.hooks())
	if err != nil {
		return nil, err
	}
	mf := rep.File()
	if !mf.Released {
		fs.mdc.Close(ctx, Root(), mf, nil)
		return nil, fmt.Errorf("restore of %v: not released: %w", f, syscall.EINVAL)
	}
	file, _, err := fs.opened(ctx, Root(), mf, syscall.O_WRONLY, dentKey{})
	if err != nil {
		return nil, err
	}
	if mf.Layout == nil || !anyObjects(mf.Layout) {
		// Objects for the start at least, even for an empty file.
		if _, err := file.instantiate(ctx, 0, 1); err != nil {
			file.Close(ctx)
			return nil, fmt.Errorf("restore of %v: new objects: %w", f, err)
		}
		fs.cache.mu.Lock()
		file.ino.staleLocked()
		fs.cache.mu.Unlock()
	}
	return file, nil
}

// anyObjects reports whether some component of l has objects.
func anyObjects(l *layout.Layout) bool {
	for i := range l.Components {
		if l.Components[i].Instantiated() {
			return true
		}
	}
	return false
}
