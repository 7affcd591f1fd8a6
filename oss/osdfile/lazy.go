package osdfile

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Objects without a file (lazy objects).
//
// An OST creates its objects long before a client writes them (precreated
// pools), and many are never written at all: the objects of empty files,
// of files unlinked before their data came. Making a file for each costs a
// create and a directory fsync; on ext4 without a journal, whose inode
// allocator steps over recently freed inodes one by one, a create after
// many unlinks took 220-650 us here. So a Tx whose only step on a new
// object is its Create makes no file: the object lives in the journal (its
// Create record) and in memory, pinned there (a reference of its own) so
// that the cache never drops it, reading as zeros up to its size. Any
// other step on it — a write, a punch, a journaled record, a setattr — gives
// it its file first, in that Tx's eager phase; so does a checkpoint, which
// drops the records that hold it; a Destroy of a fileless object only
// unpins it. Replay makes every object's file, so after a restart there
// are none. Config.LazyObjects bounds how many there are at once; past it
// creates make their files as before, and so they do when the store has
// fewer free inodes than the lazy objects and a margin (each needs one by
// the next checkpoint, which must not fail for want of it; Statfs counts
// them as used).
//
// Replay takes the file at an object's path for the object a create
// replayed made, so a lazy create must find no other file there: a create
// over a file that a create that never committed left (staleFile) makes
// its file at once, truncating it, and the committer makes unlinks durable
// (an fsync of their directories) before a destroyed object can be created
// again. A file a Tx makes for a lazy object has its directory synced with
// the next record on the object, whichever Tx's it is (dirUnsynced).
//
// The object's state is in object.mu: fileless says it has no file yet;
// createLSN is the record that created it and lazyAttr the attributes it
// was created with (nothing else changes them while it is fileless);
// createApplied says the committer has applied that record, so that it is
// durable. A file made for an object whose create is durable gets its lma
// at once (a checkpoint may drop the record next); one made before waits
// for the record's apply to write it, as a created file does.

// pinLazy counts o, just created without a file at record lsn, among the
// lazy objects, with a reference of its own. The caller holds o's lock
// exclusively.
func (d *Device) pinLazy(o *object, lsn uint64) {
	o.mu.Lock()
	o.mu.fileless, o.mu.createApplied, o.mu.createLSN, o.mu.lazyAttr = true, false, lsn, o.mu.attr
	o.mu.Unlock()
	d.refMore(o)
	d.lazyMu.Lock()
	d.lazy[o] = struct{}{}
	d.lazyMu.Unlock()
}

// unpinLazy drops o from the lazy objects once it has a file or is gone.
// o.mu must not be held (release takes the device's lock).
func (d *Device) unpinLazy(o *object) {
	d.lazyMu.Lock()
	delete(d.lazy, o)
	d.lazyMu.Unlock()
	d.lazyCount.Add(-1)
	d.release(o)
}

// materializeLocked makes the file of o, a fileless object, and reports
// whether it did (false: o has one already). o.mu is held; the caller
// unpins o after unlocking it.
func (d *Device) materializeLocked(o *object) (bool, error) {
	if !o.mu.fileless {
		return false, nil
	}
	if err := d.ensureDir(o.fid); err != nil {
		return false, err
	}
	fd, err := openFile(o.path, unix.O_CREAT|unix.O_TRUNC)
	if err != nil {
		return false, fmt.Errorf("create the file of %v: %w", o.fid, err)
	}
	if o.mu.createApplied {
		lma := make([]byte, lmaSize)
		err := ignoreEINTR(func() error {
			return unix.Fsetxattr(fd, d.xattr, encodeLMA(lma, o.fid, o.mu.createLSN, &o.mu.lazyAttr), 0)
		})
		if err != nil {
			unix.Close(fd)
			if uerr := unix.Unlink(o.path); uerr != nil && !errors.Is(uerr, unix.ENOENT) {
				d.log.Warn("osd-file: cannot remove a half-made object file", "fid", o.fid, "err", uerr)
			}
			return false, fmt.Errorf("write the attributes of %v: %w", o.fid, err)
		}
	}
	o.mu.fd, o.mu.fileless, o.mu.dirUnsynced = fd, false, true
	return true, nil
}

// materialize gives o its file if it has none; made reports whether it
// did.
func (d *Device) materialize(o *object) (made bool, err error) {
	o.mu.Lock()
	made, err = d.materializeLocked(o)
	o.mu.Unlock()
	if made {
		d.unpinLazy(o)
	}
	return made, err
}

// lazyInodeMargin is how many free inodes a store keeps beyond its lazy
// objects' before creates make their files at once again.
const lazyInodeMargin = 1024

// inodesForLazy reports whether the store has inodes for more lazy
// objects: each will need one at the latest at the next checkpoint (or
// replay), when running out of them would take the target down; a create
// that makes its file fails alone, with ENOSPC. A store that counts no
// inodes (Files 0) always has room.
func (d *Device) inodesForLazy() bool {
	var st unix.Statfs_t
	if err := ignoreEINTR(func() error { return unix.Fstatfs(d.dirfd, &st) }); err != nil {
		return false
	}
	return st.Files == 0 || st.Ffree >= uint64(max(d.lazyCount.Load(), 0))+lazyInodeMargin
}

// materializeDurable gives a file to every lazy object whose create is
// durable, before a checkpoint drops the records that hold them, with
// Config.SyncWorkers creates at once. Objects whose create is not yet
// applied are in records the new generation will hold.
func (d *Device) materializeDurable() error {
	d.lazyMu.Lock()
	objs := make([]*object, 0, len(d.lazy))
	for o := range d.lazy {
		objs = append(objs, o)
	}
	d.lazyMu.Unlock()
	jobs := make([]func() error, len(objs))
	for i, o := range objs {
		jobs[i] = func() error {
			o.mu.Lock()
			if !o.mu.createApplied {
				o.mu.Unlock()
				return nil
			}
			made, err := d.materializeLocked(o)
			o.mu.Unlock()
			if made {
				d.unpinLazy(o)
			}
			return err
		}
	}
	return parallel(d.cfg.SyncWorkers, jobs)
}
