package osdfile

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/iovec"
	"github.com/nacrefs/nacre/oss/osd"
)

type stepKind uint8

const (
	kCreate stepKind = iota + 1
	kDestroy
	kSetAttr
	kWrite
	kRecord
	kPunch
	kAllocate
)

var stepNames = [...]string{kCreate: "create", kDestroy: "destroy", kSetAttr: "setattr", kWrite: "write", kRecord: "write record", kPunch: "punch", kAllocate: "allocate"}

// step is one step of a Tx, as added.
type step struct {
	kind stepKind
	fid  fid.FID
	attr osd.Attr // kCreate, kSetAttr
	bufs [][]byte // kWrite, the caller's
	data []byte   // kRecord, the caller's
	off  uint64   // kWrite, kRecord, kPunch, kAllocate: first byte
	end  uint64   // kWrite, kRecord, kAllocate: past the last byte; kPunch: end or osd.EOF
	keep bool     // kAllocate: FALLOC_FL_KEEP_SIZE
}

func (s *step) String() string {
	switch s.kind {
	case kWrite, kRecord, kAllocate:
		return fmt.Sprintf("%s %v [%d,%d)", stepNames[s.kind], s.fid, s.off, s.end)
	case kPunch:
		if s.end == osd.EOF {
			return fmt.Sprintf("truncate %v at %d", s.fid, s.off)
		}
		return fmt.Sprintf("punch %v [%d,%d)", s.fid, s.off, s.end)
	}
	return fmt.Sprintf("%s %v", stepNames[s.kind], s.fid)
}

// tx implements osd.Tx.
type tx struct {
	d       *Device
	steps   []step
	transno uint64
	done    bool
}

var _ osd.Tx = (*tx)(nil)

// txRecord is a committed transaction on its way to the journal.
type txRecord struct {
	lsn     uint64
	transno uint64
	buf     []byte // the encoded record; sealed by the committer
	ops     []applyOp
	objs    []*object // every object of the Tx, referenced until applied
	// syncFiles hold bulk data or new files that must be durable before
	// the record is; syncDirs hold new directory entries.
	syncFiles []*object
	syncDirs  []string
}

// applyOp is a change the committer applies to an object's file once the
// record is durable.
type applyOp struct {
	o    *object
	op   byte // opTruncate, opPunch, opRecord, opDestroy, opAttr
	a, b uint64
	data []byte
	attr osd.Attr
}

func (t *tx) add(s step) error {
	if t.done {
		return t.d.errorf("%v: %w", &s, osd.ErrTxDone)
	}
	if err := checkFID(s.fid); err != nil {
		return t.d.errorf("%v: %w", &s, err)
	}
	t.steps = append(t.steps, s)
	return nil
}

func checkAttr(a *osd.Attr) error {
	if a.Valid&^osd.AttrAll != 0 {
		return fmt.Errorf("%w: unknown attribute bits %#x", osd.ErrInvalid, uint32(a.Valid&^osd.AttrAll))
	}
	if a.Valid&osd.AttrMtime != 0 && !timeOK(a.Mtime) || a.Valid&osd.AttrAtime != 0 && !timeOK(a.Atime) ||
		a.Valid&osd.AttrCtime != 0 && !timeOK(a.Ctime) {
		return fmt.Errorf("%w: a time outside the years 1678..2262", osd.ErrInvalid)
	}
	if a.Valid&osd.AttrSize != 0 && a.Size > osd.MaxObjectSize {
		return fmt.Errorf("%w: size %d", osd.ErrTooLarge, a.Size)
	}
	return nil
}

// Create implements osd.Tx.
func (t *tx) Create(f fid.FID, a osd.Attr) error {
	s := step{kind: kCreate, fid: f, attr: a}
	if err := checkAttr(&a); err != nil {
		return t.d.errorf("%v: %w", &s, err)
	}
	return t.add(s)
}

// Destroy implements osd.Tx.
func (t *tx) Destroy(f fid.FID) error { return t.add(step{kind: kDestroy, fid: f}) }

// SetAttr implements osd.Tx.
func (t *tx) SetAttr(f fid.FID, a osd.Attr) error {
	s := step{kind: kSetAttr, fid: f, attr: a}
	if err := checkAttr(&a); err != nil {
		return t.d.errorf("%v: %w", &s, err)
	}
	return t.add(s)
}

// checkRange validates a write of n bytes at off.
func checkRange(off int64, n int) (uint64, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: negative offset %d", osd.ErrInvalid, off)
	}
	end := uint64(off) + uint64(n)
	if uint64(off) > osd.MaxObjectSize || end > osd.MaxObjectSize {
		return 0, fmt.Errorf("%w: [%d,%d) ends past %d", osd.ErrTooLarge, off, end, uint64(osd.MaxObjectSize))
	}
	return end, nil
}

// WriteAt implements osd.Tx.
func (t *tx) WriteAt(f fid.FID, bufs [][]byte, off int64) error {
	n := iovec.Len(bufs)
	s := step{kind: kWrite, fid: f, bufs: bufs, off: uint64(off), end: uint64(off) + uint64(n)}
	end, err := checkRange(off, n)
	if err != nil {
		return t.d.errorf("write %v at %d: %w", f, off, err)
	}
	s.end = end
	return t.add(s)
}

// WriteRecord implements osd.Tx.
func (t *tx) WriteRecord(f fid.FID, b []byte, off int64) error {
	if len(b) > osd.MaxRecordSize {
		return t.d.errorf("write record %v at %d: %w: %d bytes, at most %d", f, off, osd.ErrInvalid, len(b), osd.MaxRecordSize)
	}
	end, err := checkRange(off, len(b))
	if err != nil {
		return t.d.errorf("write record %v at %d: %w", f, off, err)
	}
	return t.add(step{kind: kRecord, fid: f, data: b, off: uint64(off), end: end})
}

// Allocate implements osd.Tx.
func (t *tx) Allocate(f fid.FID, start, end uint64, keepSize bool) error {
	s := step{kind: kAllocate, fid: f, off: start, end: end, keep: keepSize}
	switch {
	case start >= end:
		return t.d.errorf("%v: %w: empty range", &s, osd.ErrInvalid)
	case end > osd.MaxObjectSize:
		return t.d.errorf("%v: %w", &s, osd.ErrTooLarge)
	}
	return t.add(s)
}

// Punch implements osd.Tx.
func (t *tx) Punch(f fid.FID, start, end uint64) error {
	s := step{kind: kPunch, fid: f, off: start, end: end}
	switch {
	case end != osd.EOF && start > end:
		return t.d.errorf("%v: %w: start after end", &s, osd.ErrInvalid)
	case start > osd.MaxObjectSize || end != osd.EOF && end > osd.MaxObjectSize:
		return t.d.errorf("%v: %w", &s, osd.ErrTooLarge)
	}
	return t.add(s)
}

// SetTransno implements osd.Tx.
func (t *tx) SetTransno(transno uint64) {
	if t.done || transno == t.transno {
		return
	}
	d := t.d
	d.jmu.Lock()
	defer d.jmu.Unlock()
	if t.transno != 0 {
		d.dropTransnoLocked(t.transno)
	}
	if transno != 0 {
		d.jmu.pending[transno]++
	}
	t.transno = transno
}

// Abort implements osd.Tx.
func (t *tx) Abort() {
	if t.done {
		return
	}
	t.done = true
	t.d.dropTransno(t.transno)
	t.steps = nil
}

// objPlan is what Commit knows about one object of the Tx.
type objPlan struct {
	fid     fid.FID
	o       *object
	excl    bool // holds the lock exclusively
	locked  bool
	eager   bool // creates the file or bulk-writes it ahead of the journal
	created bool // the file was created by this Tx
	// lazy: the Tx creates the object and does nothing else to it, so
	// it makes no file (lazy.go); needsFile: it does something to the
	// object that a lazy one needs its file for; materialized: it made
	// the file of a lazy object.
	lazy, needsFile, materialized bool
	wrote                         bool // bulk data went to the file
	startSize                     uint64
	written                       [][2]uint64 // byte ranges bulk-written, for undoing a failure
	allocated                     [][2]uint64 // byte ranges allocated, likewise
	exists                        bool        // simulated through the steps
	destroyed                     bool        // a Destroy step was seen (ordering rule)
	journaled                     bool        // a journaled change to the bytes was seen (ordering rule)
}

// Commit implements osd.Tx. It runs in four phases: plan (ordering rules,
// record size), lock and check the objects' state, the eager phase (create
// files, bulk writes straight from the caller's buffers), and the commit
// point: under the journal lock the record is built, the LSN assigned and
// the in-memory state changed, and the record is queued for the committer.
func (t *tx) Commit(ctx context.Context) (err error) {
	d := t.d
	if t.done {
		return d.errorf("commit: %w", osd.ErrTxDone)
	}
	t.done = true
	queued := false
	defer func() {
		if !queued {
			d.dropTransno(t.transno)
		}
	}()
	if err := d.enter(); err != nil {
		return d.errorf("commit: %w", err)
	}
	defer d.exit()
	if err := d.writable(); err != nil {
		return err
	}
	if len(t.steps) == 0 && t.transno == 0 {
		return nil
	}

	// Plan.
	plans := map[fid.FID]*objPlan{}
	var order []*objPlan
	size := recHdrLen + 8
	for i := range t.steps {
		s := &t.steps[i]
		p := plans[s.fid]
		if p == nil {
			p = &objPlan{fid: s.fid}
			plans[s.fid] = p
			order = append(order, p)
			size += stepSize(attrSize)
		}
		if p.destroyed {
			return d.errorf("%v: %w: a step on an object after its Destroy in the same transaction", s, osd.ErrInvalid)
		}
		if s.kind != kCreate && s.kind != kDestroy {
			p.needsFile = true
		}
		switch s.kind {
		case kWrite, kAllocate:
			if p.journaled {
				return d.errorf("%v: %w: a WriteAt or Allocate after a Punch, size change or WriteRecord of the same object in the same transaction", s, osd.ErrInvalid)
			}
			p.eager = true
		case kCreate:
			p.excl, p.eager, p.lazy = true, true, true
			size += stepSize(0)
		case kDestroy:
			p.excl, p.destroyed = true, true
			size += stepSize(0)
		case kSetAttr:
			p.excl = true
			if s.attr.Valid&osd.AttrSize != 0 {
				p.journaled = true
				size += stepSize(8)
			}
		case kRecord:
			p.excl, p.journaled = true, true
			size += stepSize(8 + len(s.data))
		case kPunch:
			p.excl, p.journaled = true, true
			size += stepSize(16)
		}
	}
	if size > d.maxRecord {
		return d.errorf("commit: %w: the transaction needs a %d-byte journal record, the journal takes at most %d", osd.ErrInvalid, size, d.maxRecord)
	}
	slices.SortFunc(order, func(a, b *objPlan) int { return fid.Compare(a.fid, b.fid) })

	// Lock, in FID order, and check the steps against the objects' state.
	for _, p := range order {
		p.o = d.ref(p.fid)
	}
	defer func() {
		for _, p := range order {
			if p.locked {
				if p.excl {
					p.o.lock.Unlock()
				} else {
					p.o.lock.RUnlock()
				}
			}
			d.release(p.o)
		}
	}()
	for _, p := range order {
		if err := d.load(p.o); err != nil {
			return d.errorf("commit: %v: %w", p.fid, err)
		}
		if !p.excl {
			p.o.lock.RLock()
			p.o.mu.Lock()
			stale := p.o.mu.staleTail
			p.o.mu.Unlock()
			if !stale {
				p.locked = true
				continue
			}
			p.o.lock.RUnlock()
			p.excl = true // cutting the stale tail needs the object to itself
		}
		p.o.lock.Lock()
		p.locked = true
	}
	for _, p := range order {
		p.o.mu.Lock()
		p.exists, p.startSize = p.o.mu.exists, p.o.mu.attr.Size
		p.o.mu.Unlock()
	}
	for i := range t.steps {
		s := &t.steps[i]
		p := plans[s.fid]
		switch {
		case s.kind == kCreate && p.exists:
			return d.errorf("%v: %w", s, osd.ErrExist)
		case s.kind == kCreate:
			p.exists = true
		case !p.exists:
			return d.errorf("%v: %w", s, osd.ErrNotExist)
		case s.kind == kDestroy:
			p.exists = false
		}
	}

	// Reserve room among the lazy objects for the creates that need no
	// file; the commit point pins them (buildLocked).
	inodes := 0 // 1: the store has inodes for more lazy objects, -1: not; 0: not asked yet
	for _, p := range order {
		if !p.lazy {
			continue
		}
		p.lazy = false
		if p.needsFile || p.destroyed || p.o.staleFile() {
			continue
		}
		if inodes == 0 {
			inodes = -1
			if d.inodesForLazy() {
				inodes = 1
			}
		}
		if inodes < 0 {
			continue
		}
		if d.lazyCount.Add(1) > int64(d.cfg.LazyObjects) {
			d.lazyCount.Add(-1)
			continue
		}
		p.lazy = true
	}
	defer func() {
		if !queued {
			for _, p := range order {
				if p.lazy {
					d.lazyCount.Add(-1)
				}
			}
		}
	}()

	// Wait until the files are up to date with every earlier commit where
	// this Tx writes ahead of the journal or must cut a stale tail.
	for _, p := range order {
		p.o.mu.Lock()
		stale := p.o.mu.staleTail && p.excl
		p.o.mu.Unlock()
		if p.eager || stale {
			if err := d.waitDrained(ctx, p.o); err != nil {
				return d.errorf("commit: wait for earlier changes of %v: %w", p.fid, err)
			}
		}
		if stale {
			if err := d.cutStaleTail(p.o); err != nil {
				d.fail(err)
				return d.writable()
			}
		}
	}

	// Eager phase: new files and bulk data, straight from the caller's
	// buffers.
	undo := func() {
		for _, p := range order {
			d.undoEager(p)
		}
	}
	for _, p := range order {
		if !p.needsFile {
			continue
		}
		made, err := d.materialize(p.o)
		if err != nil {
			undo()
			return d.errorf("commit: %w", ioErr(err))
		}
		p.materialized = p.materialized || made
	}
	for i := range t.steps {
		s := &t.steps[i]
		p := plans[s.fid]
		var err error
		switch s.kind {
		case kCreate:
			if !p.lazy {
				err = d.createFile(p)
			}
		case kWrite:
			p.o.mu.Lock()
			fd := p.o.mu.fd
			p.o.mu.Unlock()
			var n int
			n, err = d.writeData(p.o, fd, s.bufs, int64(s.off))
			if n > 0 {
				p.written = append(p.written, [2]uint64{s.off, s.off + uint64(n)})
				p.wrote = true
			}
		case kAllocate:
			p.o.mu.Lock()
			fd := p.o.mu.fd
			p.o.mu.Unlock()
			var mode uint32
			if s.keep {
				mode = unix.FALLOC_FL_KEEP_SIZE
			}
			// Taken back as a write's bytes are if the Tx fails, this
			// step included (a file system may allocate part of the
			// range before it runs out of space): what lies past the
			// old size, and past what committed allocations reserved,
			// becomes a hole again (undoEager).
			p.allocated = append(p.allocated, [2]uint64{s.off, s.end})
			p.wrote = true
			err = ignoreEINTR(func() error { return unix.Fallocate(fd, mode, int64(s.off), int64(s.end-s.off)) })
		case kRecord:
			// Reserve the blocks now, so that applying the record
			// later cannot run out of space.
			p.o.mu.Lock()
			fd := p.o.mu.fd
			p.o.mu.Unlock()
			if len(s.data) > 0 {
				err = ignoreEINTR(func() error {
					return unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, int64(s.off), int64(len(s.data)))
				})
				if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
					err = nil
				}
			}
		}
		if err != nil {
			undo()
			return d.errorf("%v: %w", s, ioErr(err))
		}
	}

	// Commit point.
	d.jmu.Lock()
	if d.jmu.closed || d.jmu.failErr != nil {
		err := d.jmu.failErr
		if err == nil {
			err = d.errorf("commit: %w", osd.ErrClosed)
		}
		d.jmu.Unlock()
		undo()
		return err
	}
	rec := d.buildLocked(t, plans, order, size)
	d.jmu.queue = append(d.jmu.queue, rec)
	d.jmu.nextLSN++
	queued = true
	d.jmu.Unlock()
	d.kickCommitter()
	return nil
}

// cutStaleTail cuts bytes a failed write left past o's size. The caller holds
// o's lock exclusively, with no pending changes.
func (d *Device) cutStaleTail(o *object) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.mu.staleTail || o.mu.fd < 0 {
		o.mu.staleTail = false
		return nil
	}
	if err := ignoreEINTR(func() error { return unix.Ftruncate(o.mu.fd, int64(o.mu.attr.Size)) }); err != nil {
		return fmt.Errorf("cut the stale tail of %v: %w", o.fid, err)
	}
	o.mu.staleTail = false
	o.mu.allocEnd = min(o.mu.allocEnd, o.mu.attr.Size)
	return nil
}

// createFile creates the file of a new object, empty (an earlier file at the
// path is a leftover of a creation that never committed).
func (d *Device) createFile(p *objPlan) error {
	if err := d.ensureDir(p.fid); err != nil {
		return err
	}
	fd, err := openFile(p.o.path, unix.O_CREAT|unix.O_TRUNC)
	if err != nil {
		return err
	}
	p.o.mu.Lock()
	if p.o.mu.fd >= 0 {
		unix.Close(p.o.mu.fd)
	}
	p.o.mu.fd, p.o.mu.staleFile = fd, false
	p.o.mu.Unlock()
	p.created = true
	return nil
}

// undoEager takes back what the eager phase did to p's object when the Tx
// fails: a file it created goes, bytes it wrote past the object's size when
// the Tx began become a hole again. Bytes it overwrote inside that size keep
// the new data (as with ext4 data=ordered).
func (d *Device) undoEager(p *objPlan) {
	o := p.o
	o.mu.Lock()
	defer o.mu.Unlock()
	if p.created {
		if err := unix.Unlink(o.path); err != nil && !errors.Is(err, unix.ENOENT) {
			d.log.Warn("osd-file: cannot remove the file of a failed create", "fid", o.fid, "err", err)
		}
		if o.mu.fd >= 0 {
			unix.Close(o.mu.fd)
			o.mu.fd = -1
		}
		p.created = false
		return
	}
	punch := func(ranges [][2]uint64, floor uint64, what string) {
		for _, w := range ranges {
			a, b := max(w[0], floor), w[1]
			if a >= b {
				continue
			}
			if err := punchFile(o.mu.fd, a, b); err != nil {
				d.log.Warn("osd-file: cannot punch out the "+what, "fid", o.fid, "range", fmt.Sprintf("[%d,%d)", a, b), "err", err)
				o.mu.staleTail = true
			}
		}
	}
	punch(p.written, p.startSize, "data of a failed write")
	// Blocks an allocation reserved: those past the size and past what
	// committed allocations reserved go (the rest may be an earlier
	// allocation's, which must stay).
	punch(p.allocated, max(p.startSize, o.mu.allocEnd), "blocks of a failed allocation")
	p.written, p.allocated = nil, nil
}

// buildLocked is the commit point of t: it builds the journal record, changes
// the objects' in-memory state and lists what the committer must do. d.jmu
// is held, and every object's lock.
func (d *Device) buildLocked(t *tx, plans map[fid.FID]*objPlan, order []*objPlan, size int) *txRecord {
	lsn := d.jmu.nextLSN
	rb := newRecord(t.transno, size)
	rec := &txRecord{lsn: lsn, transno: t.transno}
	for i := range t.steps {
		s := &t.steps[i]
		o := plans[s.fid].o
		o.mu.Lock()
		switch s.kind {
		case kCreate:
			rb.step(opCreate, s.fid, 0)
			o.mu.exists = true
			o.mu.attr = osd.Attr{Valid: osd.AttrSize | osd.AttrBlocks}
			mergeAttr(&o.mu.attr, &s.attr)
			if s.attr.Valid&osd.AttrSize != 0 {
				o.mu.attr.Size = s.attr.Size // growing an empty file: a hole
			}
		case kDestroy:
			rb.step(opDestroy, s.fid, 0)
			o.mu.exists = false
			o.mu.attr = osd.Attr{}
			o.mu.allocEnd = 0
			o.addPendingLocked(pending{lsn: lsn, kind: pendUnlink})
			rec.ops = append(rec.ops, applyOp{o: o, op: opDestroy})
		case kSetAttr:
			mergeAttr(&o.mu.attr, &s.attr)
			if s.attr.Valid&osd.AttrSize != 0 {
				d.truncateLocked(rb, rec, o, lsn, s.attr.Size)
			}
		case kWrite:
			o.mu.attr.Size = max(o.mu.attr.Size, s.end)
		case kAllocate:
			if !s.keep {
				o.mu.attr.Size = max(o.mu.attr.Size, s.end)
			}
			o.mu.allocEnd = max(o.mu.allocEnd, s.end)
		case kRecord:
			body := rb.step(opRecord, s.fid, 8+len(s.data))
			le.PutUint64(body, s.off)
			data := body[8:]
			copy(data, s.data)
			o.addPendingLocked(pending{lsn: lsn, kind: pendRecord, a: s.off, data: data})
			rec.ops = append(rec.ops, applyOp{o: o, op: opRecord, a: s.off, data: data})
			o.mu.attr.Size = max(o.mu.attr.Size, s.end)
		case kPunch:
			if s.end == osd.EOF {
				d.truncateLocked(rb, rec, o, lsn, s.off)
				break
			}
			if s.off < s.end && s.off < o.mu.attr.Size {
				end := min(s.end, o.mu.attr.Size)
				body := rb.step(opPunch, s.fid, 16)
				le.PutUint64(body, s.off)
				le.PutUint64(body[8:], end)
				o.addPendingLocked(pending{lsn: lsn, kind: pendPunch, a: s.off, b: end})
				rec.ops = append(rec.ops, applyOp{o: o, op: opPunch, a: s.off, b: end})
			}
		}
		o.mu.Unlock()
	}
	for _, p := range order {
		o := p.o
		o.mu.Lock()
		if o.mu.exists {
			putAttr(rb.step(opAttr, p.fid, attrSize), &o.mu.attr)
			rec.ops = append(rec.ops, applyOp{o: o, op: opAttr, attr: o.mu.attr})
		}
		o.mu.Unlock()
		d.refMore(o)
		rec.objs = append(rec.objs, o)
		if p.lazy {
			d.pinLazy(o, lsn)
		}
		o.mu.Lock()
		dirUnsynced := o.mu.dirUnsynced
		o.mu.dirUnsynced = false
		o.mu.Unlock()
		if p.wrote || p.created || p.materialized {
			rec.syncFiles = append(rec.syncFiles, o)
		}
		if p.created || p.materialized || dirUnsynced {
			rec.syncDirs = append(rec.syncDirs, bucketDir(d.dir, p.fid))
		}
	}
	rec.buf = rb.finish()
	return rec
}

// truncateLocked sets o's size; shrinking journals a truncate. o.mu is held.
func (d *Device) truncateLocked(rb *recordBuilder, rec *txRecord, o *object, lsn, size uint64) {
	if size < o.mu.attr.Size {
		o.mu.allocEnd = min(o.mu.allocEnd, size) // the truncate frees the blocks past size
		le.PutUint64(rb.step(opTruncate, o.fid, 8), size)
		o.addPendingLocked(pending{lsn: lsn, kind: pendTruncate, a: size})
		rec.ops = append(rec.ops, applyOp{o: o, op: opTruncate, a: size})
	}
	o.mu.attr.Size = size
}

// dropTransno forgets a transno whose Tx will never be durable.
func (d *Device) dropTransno(transno uint64) {
	if transno == 0 {
		return
	}
	d.jmu.Lock()
	defer d.jmu.Unlock()
	d.dropTransnoLocked(transno)
}

func (d *Device) dropTransnoLocked(transno uint64) {
	d.forgetTransnoLocked(transno)
	d.updateLastCommittedLocked()
}

// forgetTransnoLocked drops a pending transno without recomputing
// LastCommitted, for callers that drop many.
func (d *Device) forgetTransnoLocked(transno uint64) {
	if d.jmu.pending[transno]--; d.jmu.pending[transno] <= 0 {
		delete(d.jmu.pending, transno)
	}
}

// updateLastCommittedLocked recomputes LastCommitted: the highest durable
// transno below every pending one. It never goes down.
func (d *Device) updateLastCommittedLocked() {
	lc := d.jmu.maxDurable
	for t := range d.jmu.pending {
		if t-1 < lc {
			lc = t - 1
		}
	}
	if lc > d.lastCommitted.Load() {
		d.lastCommitted.Store(lc)
	}
}
