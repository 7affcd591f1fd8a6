package osdfile

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/internal/durable"
)

// committer is the device's one goroutine: it takes committed records off the
// queue in batches (group commit) and, for each batch, makes the bulk data
// and new files durable, writes and syncs the records, applies their
// journaled changes to the object files, and then reports the batch durable.
// Close stops it after the queue is empty.
func (d *Device) committer() {
	defer close(d.done)
	for {
		select {
		case <-d.kick:
		case <-d.stop:
			for d.commitOnce() {
			}
			return
		}
		for d.commitOnce() {
		}
	}
}

// commitOnce commits one batch; it reports whether there was one.
func (d *Device) commitOnce() bool {
	batch, bounds := d.takeBatch()
	if len(batch) == 0 {
		return false
	}
	d.wmu.Lock()
	err := d.writable()
	if err == nil {
		if err = d.commitBatch(batch, bounds); err != nil {
			d.fail(err)
		}
	}
	if err == nil {
		// Aborted while it was written (another node serves the store
		// now, which does not have it): durable for nobody.
		err = d.writable()
	}
	d.wmu.Unlock()
	// On failure the batch is dropped: it never becomes durable, and its
	// waiters see the device's error.
	for _, rec := range batch {
		for _, o := range rec.objs {
			d.release(o)
		}
	}
	if err == nil {
		d.markDurable(batch, bounds)
	}
	return true
}

// takeBatch takes as many queued records as fit in the journal area and
// works out, for each, the last committed transno once it is durable: the
// highest durable transno below every transno still pending after it.
func (d *Device) takeBatch() ([]*txRecord, []uint64) {
	d.jmu.Lock()
	defer d.jmu.Unlock()
	room := int(d.jsize - areaStart)
	n, bytes := 0, 0
	for n < len(d.jmu.queue) && bytes+len(d.jmu.queue[n].buf) <= room {
		bytes += len(d.jmu.queue[n].buf)
		n++
	}
	batch := d.jmu.queue[:n:n]
	d.jmu.queue = d.jmu.queue[n:]
	if len(d.jmu.queue) == 0 {
		d.jmu.queue = nil
	}
	if n == 0 {
		return nil, nil
	}
	inBatch := map[uint64]int{}
	for _, r := range batch {
		if r.transno != 0 {
			inBatch[r.transno]++
		}
	}
	// The lowest transno pending outside the batch.
	var minOther uint64
	for t, c := range d.jmu.pending {
		if c > inBatch[t] && (minOther == 0 || t < minOther) {
			minOther = t
		}
	}
	bounds := make([]uint64, n)
	suffixMin := minOther
	for i := n - 1; i >= 0; i-- {
		bounds[i] = suffixMin // lowest transno pending after record i
		if t := batch[i].transno; t != 0 && (suffixMin == 0 || t < suffixMin) {
			suffixMin = t
		}
	}
	maxD, prev := d.jmu.maxDurable, d.jmu.persistedBound
	for i, r := range batch {
		maxD = max(maxD, r.transno)
		b := maxD
		if m := bounds[i]; m != 0 && m-1 < b {
			b = m - 1
		}
		b = max(b, prev)
		bounds[i], prev = b, b
	}
	return batch, bounds
}

func (d *Device) commitBatch(batch []*txRecord, bounds []uint64) error {
	if err := d.syncData(batch); err != nil {
		return err
	}
	if testHookSynced != nil {
		testHookSynced(d)
	}
	if err := d.writable(); err != nil { // aborted meanwhile
		return err
	}
	bytes := 0
	for _, r := range batch {
		bytes += len(r.buf)
	}
	if d.tail+int64(bytes) > d.jsize {
		if err := d.checkpoint(); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	bufs := make([][]byte, len(batch))
	for i, r := range batch {
		if r.lsn != d.jnext+uint64(i) {
			return fmt.Errorf("journal: record %d queued where %d belongs", r.lsn, d.jnext+uint64(i))
		}
		sealRecord(r.buf, d.gen, r.lsn, bounds[i])
		bufs[i] = r.buf
	}
	if _, err := pwritevFull(d.jfd, bufs, d.tail); err != nil {
		return fmt.Errorf("write journal: %w", err)
	}
	if err := ignoreEINTR(func() error { return unix.Fdatasync(d.jfd) }); err != nil {
		return fmt.Errorf("sync journal: %w", err)
	}
	d.tail += int64(bytes)
	d.jnext = batch[len(batch)-1].lsn + 1

	// The batch is durable: apply its changes to the files. The caller
	// tells the waiters (markDurable) once it has dropped the records'
	// references to their objects.
	unlinked := map[string]bool{}
	for _, r := range batch {
		if err := d.writable(); err != nil { // aborted meanwhile
			return err
		}
		if err := d.apply(r, unlinked); err != nil {
			return err
		}
	}
	// A destroyed object may be created again as soon as its unlink is
	// applied, and a lazy create makes no file: the unlink must be durable
	// by then, or a crash could bring the old file back under the new
	// object (replay skips a destroy that a create of the FID follows).
	for dir := range unlinked {
		if err := durable.SyncDir(dir); err != nil {
			return fmt.Errorf("sync directory %s: %w", dir, err)
		}
	}
	for _, r := range batch {
		for _, o := range r.objs {
			o.appliedThrough(r.lsn)
		}
	}
	return nil
}

// testHookSynced, if set (by tests), runs when a batch's data is synced,
// before its journal record is written.
var testHookSynced func(d *Device)

// markDurable records that batch is durable and applied, and wakes Sync.
func (d *Device) markDurable(batch []*txRecord, bounds []uint64) {
	last := batch[len(batch)-1]
	d.jmu.Lock()
	for _, r := range batch {
		if r.transno != 0 {
			d.jmu.maxDurable = max(d.jmu.maxDurable, r.transno)
			d.forgetTransnoLocked(r.transno)
		}
	}
	d.jmu.persistedBound = bounds[len(bounds)-1]
	d.jmu.durableLSN = last.lsn
	d.updateLastCommittedLocked()
	close(d.jmu.durableCh)
	d.jmu.durableCh = make(chan struct{})
	d.jmu.Unlock()
}

// syncData makes the batch's bulk data and new files durable before its
// records are (ordered mode): fsync of each file written or created (fsync,
// not fdatasync, so that the attribute updates applied before are durable
// too: replay relies on that), then of each directory that got a new entry.
func (d *Device) syncData(batch []*txRecord) error {
	seen := map[*object]bool{}
	var fds []int
	dirs := map[string]bool{}
	for _, r := range batch {
		for _, o := range r.syncFiles {
			if seen[o] {
				continue
			}
			seen[o] = true
			o.mu.Lock()
			if o.mu.fd >= 0 {
				fds = append(fds, o.mu.fd)
			}
			o.mu.Unlock()
		}
		for _, dir := range r.syncDirs {
			dirs[dir] = true
		}
	}
	jobs := make([]func() error, 0, len(fds)+len(dirs))
	for _, fd := range fds {
		jobs = append(jobs, func() error {
			if err := ignoreEINTR(func() error { return unix.Fsync(fd) }); err != nil {
				return fmt.Errorf("sync object data: %w", err)
			}
			return nil
		})
	}
	for dir := range dirs {
		jobs = append(jobs, func() error {
			if err := durable.SyncDir(dir); err != nil {
				return fmt.Errorf("sync directory %s: %w", dir, err)
			}
			return nil
		})
	}
	return parallel(d.cfg.SyncWorkers, jobs)
}

// parallel runs jobs on at most workers goroutines and returns their
// errors joined.
func parallel(workers int, jobs []func() error) error {
	if len(jobs) == 0 {
		return nil
	}
	ch := make(chan func() error)
	errs := make(chan error, len(jobs))
	var wg sync.WaitGroup
	for range min(workers, len(jobs)) {
		wg.Go(func() {
			for job := range ch {
				errs <- job()
			}
		})
	}
	for _, job := range jobs {
		ch <- job
	}
	close(ch)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		if err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// apply applies a durable record's changes to the object files, adding to
// unlinked the directories it removed files from. The caller drops the
// changes from the objects' pending lists (appliedThrough).
func (d *Device) apply(r *txRecord, unlinked map[string]bool) error {
	lma := make([]byte, lmaSize)
	// overwritten are the files this record's journaled writes went to.
	// Their data reaches the disk before the attributes saying the record
	// is applied (opAttr, after every other op of the record): the lma is
	// metadata, which the file system's journal may commit first (ext4
	// orders data only of newly allocated blocks), and replay skips a
	// record the lma covers, so a power loss would keep the old bytes of
	// a write acknowledged durable (LAST_ID, a client's slot).
	var overwritten []int
	for _, op := range r.ops {
		o := op.o
		o.mu.Lock()
		fd := o.mu.fd
		if o.mu.fileless {
			// A lazy object: its create's attributes are in memory and
			// this record; its destroy has no file to remove, unless a
			// create that never committed left one.
			switch op.op {
			case opAttr:
				o.mu.createApplied = true
				o.mu.Unlock()
				continue
			case opDestroy:
				o.mu.fileless = false
				o.mu.Unlock()
				err := unix.Unlink(o.path)
				d.unpinLazy(o)
				if err != nil && !errors.Is(err, unix.ENOENT) {
					return fmt.Errorf("apply record %d to %v (%s): %w", r.lsn, o.fid, o.path, err)
				}
				continue
			}
		}
		o.mu.Unlock()
		if fd < 0 {
			return fmt.Errorf("apply record %d to %v: the object has no open file", r.lsn, o.fid)
		}
		var err error
		switch op.op {
		case opTruncate:
			err = ignoreEINTR(func() error { return unix.Ftruncate(fd, int64(op.a)) })
		case opPunch:
			err = punchFile(fd, op.a, op.b)
		case opRecord:
			err = pwriteFull(fd, op.data, int64(op.a))
			if err == nil && !slices.Contains(overwritten, fd) {
				overwritten = append(overwritten, fd)
			}
		case opAttr:
			if i := slices.Index(overwritten, fd); i >= 0 {
				overwritten = slices.Delete(overwritten, i, i+1)
				if err = ignoreEINTR(func() error { return unix.Fdatasync(fd) }); err != nil {
					break
				}
			}
			err = ignoreEINTR(func() error { return unix.Fsetxattr(fd, d.xattr, encodeLMA(lma, o.fid, r.lsn, &op.attr), 0) })
		case opDestroy:
			err = unix.Unlink(o.path)
			if err == nil {
				unlinked[bucketDir(d.dir, o.fid)] = true
			}
			if errors.Is(err, unix.ENOENT) {
				err = nil
			}
			if err == nil {
				o.mu.Lock()
				unix.Close(o.mu.fd)
				o.mu.fd = -1
				o.mu.Unlock()
			}
		}
		if err != nil {
			return fmt.Errorf("apply record %d to %v (%s): %w", r.lsn, o.fid, o.path, err)
		}
	}
	return nil
}

// checkpoint starts a new journal generation: everything applied so far is
// made durable in the store (syncfs), so the records that carried it are no
// longer needed. Only the committer calls it, or Open and Close while the
// committer is not running.
func (d *Device) checkpoint() error {
	if err := d.writable(); err != nil {
		return err
	}
	if err := d.materializeDurable(); err != nil {
		return fmt.Errorf("make the files of lazy objects: %w", err)
	}
	if err := ignoreEINTR(func() error { return unix.Syncfs(d.dirfd) }); err != nil {
		return fmt.Errorf("syncfs: %w", err)
	}
	d.jmu.Lock()
	bound, failed := d.jmu.persistedBound, d.jmu.failErr
	d.jmu.Unlock()
	if failed != nil {
		// Turned read-only meanwhile (Abort: another node serves the
		// store now): the journal header is not written.
		return failed
	}
	h := jheader{gen: d.gen + 1, startLSN: d.jnext, lastCommitted: bound, size: uint64(d.jsize)}
	if err := pwriteFull(d.jfd, h.encode(), int64(h.gen%2)*slotSize); err != nil {
		return fmt.Errorf("write journal header: %w", err)
	}
	if err := ignoreEINTR(func() error { return unix.Fdatasync(d.jfd) }); err != nil {
		return fmt.Errorf("sync journal header: %w", err)
	}
	d.gen++
	d.tail = areaStart
	return nil
}
