package osdfile

import (
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/internal/durable"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/iovec"
	"github.com/nacrefs/nacre/oss/osd"
)

// Device is an open osd-file target. It implements osd.Device; see the
// package documentation for how it keeps objects and survives crashes.
type Device struct {
	dir   string
	label string
	xattr string // the lma attribute's name
	cfg   Config
	log   *slog.Logger

	dirfd int // the target directory, for syncfs
	jfd   int // the journal; its flock marks the target in use

	// wmu is held by the committer while it writes a batch (journal,
	// store) or checkpoints, each step checking first that the device
	// is writable; Abort takes it after turning the device read-only, so
	// it returns only once nothing writes to the store any more.
	wmu sync.Mutex

	// maxRecord bounds one transaction's journal record.
	maxRecord int

	// life is held shared by every call in flight and exclusively by
	// Close, which sets closing first so that new calls fail fast.
	life    sync.RWMutex
	closing atomic.Bool

	// noDirect is set once the store refused O_DIRECT; directMin and
	// directReadMin are Config.DirectWriteMin and DirectReadMin, changed
	// at run time; noCachestat is set once the kernel lacks cachestat(2).
	noDirect      atomic.Bool
	directMin     atomic.Int64
	directReadMin atomic.Int64
	noCachestat   atomic.Bool

	mu struct { // the object table
		sync.Mutex
		objects map[fid.FID]*object
		lru     list.List // unreferenced objects, most recently used first
	}

	// lazy holds the objects without a file (lazy.go), lazyCount how
	// many there are or are about to be (reserved by commits).
	lazyMu    sync.Mutex
	lazy      map[*object]struct{}
	lazyCount atomic.Int64

	dirMu sync.Mutex // serializes creating sequence and bucket directories
	dirs  sync.Map   // bucket directories known to exist (path → struct{})

	jmu struct { // the commit queue and transno bookkeeping
		sync.Mutex
		closed     bool        // Close has begun: no more commits
		failErr    error       // non-nil once the device is read-only
		nextLSN    uint64      // LSN of the next committed transaction
		queue      []*txRecord // committed, not yet durable, in LSN order
		durableLSN uint64      // every record up to it is durable and applied
		durableCh  chan struct{}
		// pending counts the transnos set on transactions that are
		// neither durable nor aborted.
		pending        map[uint64]int
		maxDurable     uint64 // highest durable transno since Open (the persisted bound at Open)
		persistedBound uint64 // last committed transno as written in the journal
	}
	lastCommitted atomic.Uint64
	failed        chan struct{} // closed when the device turns read-only

	kick chan struct{} // wakes the committer; buffered, one slot
	stop chan struct{} // closed by Close: the committer drains the queue and exits
	done chan struct{} // closed when the committer has exited

	// Journal write position, owned by the committer (and by Open and Close
	// when it is not running).
	gen   uint64 // current generation
	tail  int64  // where the next record goes
	jnext uint64 // LSN of the next record to write
	jsize int64
}

var _ osd.Device = (*Device)(nil)

// Open opens the osd-file target in dir, replaying its journal if it was
// not closed cleanly, and starts its committer. It fails with osd.ErrBusy if
// another process (or Device) has the target open, osd.ErrInvalid if dir is
// not a target or cfg is invalid, and osd.ErrCorrupt if the target's identity
// or journal is damaged beyond a torn tail.
func Open(ctx context.Context, dir string, cfg Config) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("osd-file open %s: %w", dir, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	conf, err := readConf(dir)
	if err != nil {
		return nil, fmt.Errorf("osd-file open %s: %w", dir, err)
	}
	d := &Device{
		dir: dir, label: conf.Label, xattr: conf.Xattr, cfg: cfg,
		log:    log.With("target", conf.Label),
		failed: make(chan struct{}),
		kick:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		jsize:  conf.JournalSize,
		dirfd:  -1,
		jfd:    -1,
	}
	d.maxRecord = int(min((conf.JournalSize-areaStart)/2, 64<<20))
	d.directMin.Store(int64(cfg.DirectWriteMin))
	d.directReadMin.Store(int64(cfg.DirectReadMin))
	d.mu.objects = make(map[fid.FID]*object)
	d.lazy = make(map[*object]struct{})
	d.jmu.pending = make(map[uint64]int)
	d.jmu.durableCh = make(chan struct{})
	if err := d.open(ctx); err != nil {
		d.closeFiles()
		return nil, fmt.Errorf("osd-file %s open %s: %w", d.label, dir, err)
	}
	go d.committer()
	return d, nil
}

func (d *Device) open(ctx context.Context) error {
	var err error
	d.jfd, err = unix.Open(filepath.Join(d.dir, journalName), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open journal: %w", err)
	}
	if err := unix.Flock(d.jfd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("%w: %s", osd.ErrBusy, d.dir)
		}
		return fmt.Errorf("lock journal: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(d.jfd, &st); err != nil {
		return fmt.Errorf("stat journal: %w", err)
	}
	if st.Size != d.jsize {
		return fmt.Errorf("%w: journal is %d bytes, the target was formatted with %d", osd.ErrCorrupt, st.Size, d.jsize)
	}
	d.dirfd, err = unix.Open(d.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open target directory: %w", err)
	}
	j := make([]byte, d.jsize)
	if _, err := preadvFull(d.jfd, [][]byte{j}, 0); err != nil {
		return fmt.Errorf("read journal: %w", err)
	}
	h, err := pickHeader(j[:areaStart])
	if err != nil {
		return err
	}
	if h.size != uint64(d.jsize) {
		return fmt.Errorf("%w: journal header says %d bytes, file is %d", osd.ErrCorrupt, h.size, d.jsize)
	}
	next, bound, err := d.replay(ctx, h, j[areaStart:])
	if err != nil {
		return err
	}
	d.gen, d.jnext = h.gen, next
	d.jmu.persistedBound = bound
	if err := d.checkpoint(); err != nil {
		return err
	}
	d.jmu.nextLSN = next
	d.jmu.durableLSN = next - 1
	d.jmu.maxDurable = bound
	d.lastCommitted.Store(bound)
	return nil
}

func (d *Device) closeFiles() {
	if d.jfd >= 0 {
		unix.Close(d.jfd)
		d.jfd = -1
	}
	if d.dirfd >= 0 {
		unix.Close(d.dirfd)
		d.dirfd = -1
	}
}

// Label implements osd.Device.
func (d *Device) Label() string { return d.label }

// errorf formats an error prefixed with the backend and target.
func (d *Device) errorf(format string, args ...any) error {
	return fmt.Errorf("osd-file %s: "+format, append([]any{d.label}, args...)...)
}

// ioErr turns an error from the store into the OSD's vocabulary.
func ioErr(err error) error {
	switch {
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return osd.ErrNoSpace
	case errors.Is(err, unix.EFBIG):
		return fmt.Errorf("%w: %w", osd.ErrTooLarge, err)
	case errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("%w: %w", osd.ErrNotSupported, err)
	}
	return err
}

// enter admits a call unless the device is closing; exit ends it.
func (d *Device) enter() error {
	if d.closing.Load() {
		return osd.ErrClosed
	}
	d.life.RLock()
	if d.closing.Load() {
		d.life.RUnlock()
		return osd.ErrClosed
	}
	return nil
}

func (d *Device) exit() { d.life.RUnlock() }

// writable returns the error that made the device read-only, if any.
func (d *Device) writable() error {
	d.jmu.Lock()
	defer d.jmu.Unlock()
	return d.jmu.failErr
}

// Abort turns the device read-only at once, for err: another node serves
// its store now (multiple-mount protection found the target taken over),
// so not one more write may reach it, not even Close's checkpoint. It
// returns once the committer's write in progress, if any, has stopped: a
// batch taken before is dropped at its next step, not made durable.
func (d *Device) Abort(err error) {
	d.fail(err)
	d.wmu.Lock()
	d.wmu.Unlock()
}

// fail turns the device read-only after an error it cannot recover from
// without a restart (the journal replay repairs the store then).
func (d *Device) fail(err error) {
	d.jmu.Lock()
	defer d.jmu.Unlock()
	d.failLocked(err)
}

func (d *Device) failLocked(err error) {
	if d.jmu.failErr != nil {
		return
	}
	d.jmu.failErr = fmt.Errorf("osd-file %s: %w: %w", d.label, osd.ErrReadOnly, err)
	d.log.Error("osd-file: device is now read-only; restart the target to replay its journal", "err", err)
	close(d.failed)
}

// ref returns f's object, counting a reference; release drops it.
func (d *Device) ref(f fid.FID) *object {
	d.mu.Lock()
	defer d.mu.Unlock()
	o := d.mu.objects[f]
	if o == nil {
		o = &object{fid: f, path: objPath(d.dir, f)}
		o.mu.fd = -1
		d.mu.objects[f] = o
	} else if o.elem != nil {
		d.mu.lru.Remove(o.elem)
		o.elem = nil
	}
	o.refs++
	return o
}

func (d *Device) refMore(o *object) {
	d.mu.Lock()
	o.refs++
	d.mu.Unlock()
}

func (d *Device) release(o *object) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o.refs--
	if o.refs > 0 {
		return
	}
	o.elem = d.mu.lru.PushFront(o)
	for d.mu.lru.Len() > d.cfg.MaxCachedObjects {
		e := d.mu.lru.Back()
		victim := e.Value.(*object)
		d.mu.lru.Remove(e)
		victim.elem = nil
		delete(d.mu.objects, victim.fid)
		victim.mu.Lock()
		if victim.mu.fd >= 0 {
			unix.Close(victim.mu.fd)
			victim.mu.fd = -1
		}
		victim.mu.Unlock()
	}
}

// load reads o from its file the first time it is used.
func (d *Device) load(o *object) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.mu.loaded {
		return o.mu.loadErr
	}
	fd, err := openFile(o.path, 0)
	if errors.Is(err, unix.ENOENT) {
		o.mu.loaded = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", o.path, err)
	}
	_, a, err := readLMA(fd, d.xattr, o.fid)
	if errors.Is(err, unix.ENODATA) {
		// A file whose creation never committed: not an object.
		unix.Close(fd)
		o.mu.loaded, o.mu.staleFile = true, true
		return nil
	}
	if err != nil {
		unix.Close(fd)
		if errors.Is(err, osd.ErrCorrupt) {
			o.mu.loaded = true
			o.mu.loadErr = fmt.Errorf("%s: %w", o.path, err)
			d.log.Error("osd-file: object attributes are corrupt", "fid", o.fid, "path", o.path, "err", err)
			return o.mu.loadErr
		}
		return fmt.Errorf("read attributes of %s: %w", o.path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("stat %s: %w", o.path, err)
	}
	if uint64(st.Size) > a.Size {
		// Bytes past the committed size from a write whose transaction
		// never committed: cut them off, or a later extension would
		// expose them.
		if err := ignoreEINTR(func() error { return unix.Ftruncate(fd, int64(a.Size)) }); err != nil {
			unix.Close(fd)
			return fmt.Errorf("trim uncommitted tail of %s: %w", o.path, err)
		}
	}
	a.Valid |= osd.AttrSize | osd.AttrBlocks
	o.mu.loaded, o.mu.exists, o.mu.attr, o.mu.fd = true, true, a, fd
	return nil
}

// checkFID refuses FIDs that name nothing.
func checkFID(f fid.FID) error {
	if f.IsZero() {
		return fmt.Errorf("%w: zero FID", osd.ErrInvalid)
	}
	return nil
}

// GetAttr implements osd.Device.
func (d *Device) GetAttr(ctx context.Context, f fid.FID) (osd.Attr, error) {
	if err := d.enter(); err != nil {
		return osd.Attr{}, d.errorf("getattr %v: %w", f, err)
	}
	defer d.exit()
	if err := checkFID(f); err != nil {
		return osd.Attr{}, d.errorf("getattr %v: %w", f, err)
	}
	if err := ctx.Err(); err != nil {
		return osd.Attr{}, d.errorf("getattr %v: %w", f, err)
	}
	o := d.ref(f)
	defer d.release(o)
	if err := d.load(o); err != nil {
		return osd.Attr{}, d.errorf("getattr %v: %w", f, err)
	}
	o.lock.RLock()
	defer o.lock.RUnlock()
	o.mu.Lock()
	exists, a, fd, pend := o.mu.exists, o.mu.attr, o.mu.fd, o.mu.pend
	o.mu.Unlock()
	if !exists {
		return osd.Attr{}, d.errorf("getattr %v: %w", f, osd.ErrNotExist)
	}
	if fd < 0 {
		a.Blocks = 0 // a lazy object: no file, no blocks
		return a, nil
	}
	// Punches and truncates committed but not yet applied to the file
	// free its blocks there already, as reads see holes there already:
	// the lock server hands these blocks out right after the change. The
	// committer applies them without the object lock: one applied between
	// the stat and the look at the data would count its blocks as still
	// there, so the stat is taken again after the look, until the two
	// agree.
	var st, after unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return osd.Attr{}, d.errorf("getattr %v: stat: %w", f, err)
	}
	for try := 0; ; try++ {
		freed := pendingFreed(fd, pend, uint64(max(st.Blksize, 512)))
		a.Blocks = uint64(st.Blocks) - min(uint64(st.Blocks), freed/512)
		if len(pend) == 0 || try == getattrTries {
			return a, nil
		}
		if err := unix.Fstat(fd, &after); err != nil {
			return osd.Attr{}, d.errorf("getattr %v: stat: %w", f, err)
		}
		if after.Blocks == st.Blocks {
			return a, nil
		}
		st = after
		o.mu.Lock()
		pend = o.mu.pend
		o.mu.Unlock()
	}
}

// getattrTries bounds the looks GetAttr takes again when the file's blocks
// change under it.
const getattrTries = 8

// pendingFreed returns how many bytes of fd's allocated blocks the pending
// punches and truncates in pend drop: the data, found with SEEK_DATA and
// SEEK_HOLE, in the whole blocks (of bs bytes) of their ranges.
func pendingFreed(fd int, pend []pending, bs uint64) uint64 {
	var cuts [][2]uint64
	for _, p := range pend {
		var a, b uint64
		switch p.kind {
		case pendPunch:
			a, b = p.a, p.b
		case pendTruncate:
			a, b = p.a, osd.MaxObjectSize
		default:
			continue
		}
		if a, b = (a+bs-1)/bs*bs, b/bs*bs; a < b {
			cuts = append(cuts, [2]uint64{a, b})
		}
	}
	if len(cuts) == 0 {
		return 0
	}
	slices.SortFunc(cuts, func(x, y [2]uint64) int { return cmp.Compare(x[0], y[0]) })
	var freed, done uint64 // done: the ranges counted end there
	for _, c := range cuts {
		for off := max(c[0], done); off < c[1]; {
			data, err := unix.Seek(fd, int64(off), unix.SEEK_DATA)
			if err != nil || uint64(data) >= c[1] {
				break // ENXIO: no data past off
			}
			hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
			if err != nil {
				break
			}
			end := min((uint64(hole)+bs-1)/bs*bs, c[1]) // the file's last block is whole
			freed += end - uint64(data)
			off = end
		}
		done = max(done, c[1])
	}
	return freed
}

// ReadAt implements osd.Device.
func (d *Device) ReadAt(ctx context.Context, f fid.FID, bufs [][]byte, off int64) (int, error) {
	total := iovec.Len(bufs)
	if err := d.enter(); err != nil {
		return 0, d.errorf("read %v at %d: %w", f, off, err)
	}
	defer d.exit()
	if err := checkFID(f); err != nil {
		return 0, d.errorf("read %v: %w", f, err)
	}
	if off < 0 || off+int64(total) < off {
		return 0, d.errorf("read %v [%d,+%d): %w: offset out of range", f, off, total, osd.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return 0, d.errorf("read %v [%d,%d): %w", f, off, off+int64(total), err)
	}
	o := d.ref(f)
	defer d.release(o)
	if err := d.load(o); err != nil {
		return 0, d.errorf("read %v: %w", f, err)
	}
	o.lock.RLock()
	defer o.lock.RUnlock()
	o.mu.Lock()
	exists, size, fd, pend := o.mu.exists, o.mu.attr.Size, o.mu.fd, o.mu.pend
	o.mu.Unlock()
	if !exists {
		return 0, d.errorf("read %v: %w", f, osd.ErrNotExist)
	}
	if uint64(off) >= size || total == 0 {
		return 0, nil
	}
	n := int(min(uint64(total), size-uint64(off)))
	rb := limit(bufs, n)
	if fd < 0 {
		// A lazy object: never written, zeros up to its size (and
		// nothing pending: any change but a destroy gives it a file).
		zeroBufs(rb, 0, n)
		return n, nil
	}
	got, err := d.readData(o, fd, rb, off)
	if err != nil {
		return 0, d.errorf("read %v [%d,%d): %w", f, off, off+int64(n), err)
	}
	if got < n {
		zeroBufs(rb, got, n-got) // the file ends early: the rest is a hole
	}
	// Lay the committed changes that have not reached the file over what
	// it gave.
	lo, hi := uint64(off), uint64(off)+uint64(n)
	for _, p := range pend {
		switch p.kind {
		case pendPunch:
			if a, b := max(p.a, lo), min(p.b, hi); a < b {
				zeroBufs(rb, int(a-lo), int(b-a))
			}
		case pendTruncate:
			if a := max(p.a, lo); a < hi {
				zeroBufs(rb, int(a-lo), int(hi-a))
			}
		case pendRecord:
			if a, b := max(p.a, lo), min(p.a+uint64(len(p.data)), hi); a < b {
				copyIntoBufs(rb, int(a-lo), p.data[a-p.a:b-p.a])
			}
		}
	}
	return n, nil
}

// Statfs implements osd.Device.
func (d *Device) Statfs(ctx context.Context) (osd.Statfs, error) {
	if err := d.enter(); err != nil {
		return osd.Statfs{}, d.errorf("statfs: %w", err)
	}
	defer d.exit()
	var st unix.Statfs_t
	if err := ignoreEINTR(func() error { return unix.Fstatfs(d.dirfd, &st) }); err != nil {
		return osd.Statfs{}, d.errorf("statfs: %w", err)
	}
	bsize := st.Frsize
	if bsize == 0 {
		bsize = st.Bsize
	}
	// Lazy objects have no inode yet but will: they are not free.
	ffree := st.Ffree - min(st.Ffree, uint64(max(d.lazyCount.Load(), 0)))
	return osd.Statfs{
		Blocks: st.Blocks, BFree: st.Bfree, BAvail: st.Bavail,
		Files: st.Files, FFree: ffree,
		BSize: uint32(bsize), NameLen: uint32(st.Namelen),
		MaxBytes: osd.MaxObjectSize,
		ReadOnly: d.writable() != nil,
	}, nil
}

// Begin implements osd.Device.
func (d *Device) Begin(ctx context.Context) (osd.Tx, error) {
	if d.closing.Load() {
		return nil, d.errorf("begin: %w", osd.ErrClosed)
	}
	if err := d.writable(); err != nil {
		return nil, err
	}
	return &tx{d: d}, nil
}

// LastCommitted implements osd.Device.
func (d *Device) LastCommitted() uint64 { return d.lastCommitted.Load() }

// Sync implements osd.Device.
func (d *Device) Sync(ctx context.Context) error {
	if err := d.enter(); err != nil {
		return d.errorf("sync: %w", err)
	}
	defer d.exit()
	d.jmu.Lock()
	target := d.jmu.nextLSN - 1
	d.jmu.Unlock()
	d.kickCommitter()
	return d.waitDurable(ctx, target)
}

func (d *Device) kickCommitter() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// waitDurable waits until every record up to lsn is durable and applied.
func (d *Device) waitDurable(ctx context.Context, lsn uint64) error {
	for {
		d.jmu.Lock()
		durable, ch, ferr := d.jmu.durableLSN, d.jmu.durableCh, d.jmu.failErr
		d.jmu.Unlock()
		if ferr != nil {
			return ferr
		}
		if durable >= lsn {
			return nil
		}
		select {
		case <-ch:
		case <-d.failed:
		case <-ctx.Done():
			return d.errorf("sync: %w", ctx.Err())
		}
	}
}

// waitDrained waits until o has no pending changes.
func (d *Device) waitDrained(ctx context.Context, o *object) error {
	for {
		o.mu.Lock()
		ch := o.mu.drained
		o.mu.Unlock()
		if ch == nil {
			return nil
		}
		d.kickCommitter()
		select {
		case <-ch:
		case <-d.failed:
			return d.writable()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close implements osd.Device.
func (d *Device) Close() error {
	if !d.closing.CompareAndSwap(false, true) {
		return d.errorf("close: %w", osd.ErrClosed)
	}
	d.life.Lock() // wait for the calls in flight
	defer d.life.Unlock()
	d.jmu.Lock()
	d.jmu.closed = true
	d.jmu.Unlock()
	close(d.stop)
	<-d.done
	err := d.writable()
	if err == nil {
		if err = d.checkpoint(); err != nil {
			err = d.errorf("close: checkpoint: %w", err)
		}
	}
	d.mu.Lock()
	for _, o := range d.mu.objects {
		o.mu.Lock()
		if o.mu.fd >= 0 {
			unix.Close(o.mu.fd)
			o.mu.fd = -1
		}
		o.mu.Unlock()
	}
	d.mu.objects = nil
	d.mu.Unlock()
	d.closeFiles()
	return err
}

// ensureDir makes sure f's bucket directory exists, durably.
func (d *Device) ensureDir(f fid.FID) error {
	bdir := bucketDir(d.dir, f)
	if _, ok := d.dirs.Load(bdir); ok {
		return nil
	}
	d.dirMu.Lock()
	defer d.dirMu.Unlock()
	if _, ok := d.dirs.Load(bdir); ok {
		return nil
	}
	sdir := seqDir(d.dir, f)
	if err := mkdirSync(sdir, filepath.Join(d.dir, objectsDir)); err != nil {
		return err
	}
	if err := mkdirSync(bdir, sdir); err != nil {
		return err
	}
	d.dirs.Store(bdir, struct{}{})
	return nil
}

// mkdirSync creates dir if missing and makes its entry in parent durable.
func mkdirSync(dir, parent string) error {
	// The parent is synced even when dir was there already: it may be
	// left over from a run that crashed before syncing it.
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return durable.SyncDir(parent)
}

// Advise passes an ladvise hint for f's bytes [start, end) to the kernel's
// page cache: willNeed starts reading them in (POSIX_FADV_WILLNEED), else
// they are dropped (POSIX_FADV_DONTNEED). It is advice: it changes no data
// and fails only for an object that does not exist or a closed device.
func (d *Device) Advise(ctx context.Context, f fid.FID, willNeed bool, start, end uint64) error {
	if err := d.enter(); err != nil {
		return d.errorf("advise %v: %w", f, err)
	}
	defer d.exit()
	if err := checkFID(f); err != nil {
		return d.errorf("advise %v: %w", f, err)
	}
	if start > end || end > osd.MaxObjectSize+1 && end != osd.EOF {
		return d.errorf("advise %v [%d,%d): %w", f, start, end, osd.ErrInvalid)
	}
	o := d.ref(f)
	defer d.release(o)
	if err := d.load(o); err != nil {
		return d.errorf("advise %v: %w", f, err)
	}
	o.mu.Lock()
	exists, fd := o.mu.exists, o.mu.fd
	o.mu.Unlock()
	if !exists {
		return d.errorf("advise %v: %w", f, osd.ErrNotExist)
	}
	if fd < 0 {
		return nil // a lazy object: nothing cached to drop or read ahead
	}
	advice := unix.FADV_DONTNEED
	if willNeed {
		advice = unix.FADV_WILLNEED
	}
	length := int64(0) // to the end
	if end != osd.EOF {
		length = int64(end - start)
	}
	if err := unix.Fadvise(fd, int64(start), length, advice); err != nil {
		return d.errorf("advise %v: %w", f, err)
	}
	return nil
}
