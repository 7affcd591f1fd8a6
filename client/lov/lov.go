package lov

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/sync/semaphore"

	"github.com/nacrefs/nacre/client/osc"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
)

// Targets finds the OSC of an OST by index (Lustre's lov_tgts). The
// client's configuration (the MGS's OST list) fills it.
type Targets interface {
	OSC(idx uint32) (*osc.Client, error)
}

// TargetMap is a fixed table of OSCs by OST index.
type TargetMap map[uint32]*osc.Client

// OSC implements Targets.
func (m TargetMap) OSC(idx uint32) (*osc.Client, error) {
	if c := m[idx]; c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("lov: no OSC for OST%04x", idx)
}

var _ Targets = TargetMap(nil)

// File is a file's data as its layout spreads it over OST objects
// (Lustre's lov_object): reads, writes, appends, truncates, size and sync
// of the file, each split by the layout into per-object work that goes to
// the objects' OSCs, all of them at once. Safe for concurrent use; the
// OSCs keep the file's cache coherent with other clients through extent
// locks.
type File struct {
	l layout.Layout
	// objs holds each instantiated component's objects by stripe; nil for
	// a component without objects.
	objs [][]*osc.Object
	// maxBytes is the first file offset the layout cannot store, each
	// object holding at most osc.MaxObjectSize bytes: writes stop short
	// of it.
	maxBytes uint64
	once     sync.Once
	// io orders the calls of this client's goroutines as the kernel's
	// inode lock and Lustre's lli_trunc_sem do: reads and writes share
	// it, a truncate, an append or a punch hold it alone. Extent locks
	// do not: the lock client lends a lock it holds to every goroutine,
	// so two appenders took the same offset, and a read that decided the
	// size before a truncate's cut read zeros from objects cut after.
	io *semaphore.Weighted
}

// ioAlone is the weight of io that a call holding it alone takes.
const ioAlone = 1 << 30

// shared takes f.io along with other readers and writers.
func (f *File) shared(ctx context.Context) (release func(), err error) {
	if err := f.io.Acquire(ctx, 1); err != nil {
		return nil, fmt.Errorf("lov: %w", err)
	}
	return func() { f.io.Release(1) }, nil
}

// alone takes f.io for the caller alone.
func (f *File) alone(ctx context.Context) (release func(), err error) {
	if err := f.io.Acquire(ctx, ioAlone); err != nil {
		return nil, fmt.Errorf("lov: %w", err)
	}
	return func() { f.io.Release(ioAlone) }, nil
}

// Open returns the file with layout l, opening its objects on the OSCs t
// gives. Components not instantiated yet read as holes; writing to them
// fails with an error wrapping layout.ErrUninstantiated (the caller asks
// the MDS to instantiate them and opens the new layout).
func Open(l layout.Layout, t Targets) (*File, error) {
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("lov: open: %w", err)
	}
	f := &File{l: l.Clone(), objs: make([][]*osc.Object, len(l.Components)), maxBytes: l.MaxFileSize(osc.MaxObjectSize),
		io: semaphore.NewWeighted(ioAlone)}
	for ci := range f.l.Components {
		c := &f.l.Components[ci]
		if !c.Instantiated() {
			continue
		}
		objs := make([]*osc.Object, len(c.Objects))
		f.objs[ci] = objs // (so that Close on an error closes those opened)
		for k, ob := range c.Objects {
			cl, err := t.OSC(ob.OSTIndex)
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("lov: open %v: %w", ob.Object, err)
			}
			objs[k] = cl.Open(ob.Object)
			objs[k].SetReadAheadShare(len(c.Objects), c.StripeSize)
		}
	}
	return f, nil
}

// OnDrop sets fn to run whenever a lock on one of the file's objects is
// called back (see osc.Object.OnDrop).
func (f *File) OnDrop(fn func()) {
	for _, objs := range f.objs {
		for _, o := range objs {
			o.OnDrop(fn)
		}
	}
}

// SizeKnown reports whether every object of the file has its size known
// exactly without an RPC (see osc.Object.SizeKnown).
func (f *File) SizeKnown() bool {
	for _, objs := range f.objs {
		for _, o := range objs {
			if o != nil && !o.SizeKnown() {
				return false
			}
		}
	}
	return true
}

// Layout returns the file's layout (a copy).
func (f *File) Layout() layout.Layout { return f.l.Clone() }

// Close lets go of the file's objects. Their cached pages and locks stay
// in the client's cache; dirty data is written back as usual.
func (f *File) Close() {
	f.once.Do(func() {
		for _, objs := range f.objs {
			for _, o := range objs {
				if o != nil {
					o.Close()
				}
			}
		}
	})
}

// piece is the part of a file I/O that falls on one object.
type piece struct {
	obj     *osc.Object
	comp    int
	stripe  int
	objOff  uint64
	fileOff uint64
	size    uint64   // bytes, len(buf) where there is one
	buf     []byte   // nil for an operation without data (fallocate)
	vec     *osc.Vec // for ReadVec: the bytes read, in place of buf's
	done    int
	err     error
}

// split maps [off, off+len(p)) to pieces in file order. Ranges in
// components without objects are zero-filled in p for a read and refused
// for a write.
func (f *File) split(p []byte, off uint64, write bool) ([]*piece, error) {
	out, err := f.mapRange(off, off+uint64(len(p)), write, func(from, to uint64) { clear(p[from-off : to-off]) })
	for _, pc := range out {
		pc.buf = p[pc.fileOff-off : pc.fileOff-off+pc.size]
	}
	return out, err
}

// mapRange maps [off, end) to pieces in file order, without buffers.
// A range in a component without objects, or past the layout, is refused
// for a write (layout.ErrUninstantiated, layout.ErrBeyondLayout) and
// otherwise given to hole, if not nil: it reads as zeros.
func (f *File) mapRange(off, end uint64, write bool, hole func(from, to uint64)) ([]*piece, error) {
	var out []*piece
	for pos := off; pos < end; {
		ci := f.l.ComponentAt(pos)
		if ci < 0 {
			if write {
				return nil, fmt.Errorf("lov: write at %d: %w", pos, layout.ErrBeyondLayout)
			}
			if hole != nil {
				hole(pos, end)
			}
			break
		}
		c := &f.l.Components[ci]
		stop := end
		if c.End != layout.EOF {
			stop = min(end, c.End)
		}
		if f.objs[ci] == nil {
			if write {
				return nil, fmt.Errorf("lov: write [%d,%d): component %d: %w", pos, stop, ci, layout.ErrUninstantiated)
			}
			if hole != nil {
				hole(pos, stop)
			}
			pos = stop
			continue
		}
		chunks, err := f.l.Map(pos, stop-pos)
		if err != nil {
			return nil, fmt.Errorf("lov: %w", err)
		}
		for _, ch := range chunks {
			out = append(out, &piece{obj: f.objs[ch.Component][ch.Stripe], comp: ch.Component, stripe: ch.Stripe,
				objOff: ch.ObjOffset, fileOff: ch.FileOffset, size: ch.Len})
		}
		pos = stop
	}
	return out, nil
}

// run does each piece with fn, the pieces of one object in order and the
// objects at once (one goroutine per object, so at most the stripe count
// of each component). It returns how many bytes from the start were done
// before the first failed piece, and that piece's error.
func run(pieces []*piece, fn func(pc *piece) (int, error)) (int, error) {
	byObj := make(map[*osc.Object][]*piece)
	var order []*osc.Object
	for _, pc := range pieces {
		if byObj[pc.obj] == nil {
			order = append(order, pc.obj)
		}
		byObj[pc.obj] = append(byObj[pc.obj], pc)
	}
	work := func(ps []*piece) {
		for _, pc := range ps {
			pc.done, pc.err = fn(pc)
			if pc.err != nil {
				return
			}
		}
	}
	if len(order) == 1 {
		work(byObj[order[0]])
	} else {
		var wg sync.WaitGroup
		for _, o := range order {
			wg.Go(func() { work(byObj[o]) })
		}
		wg.Wait()
	}
	n := 0
	for _, pc := range pieces {
		n += pc.done
		if pc.err != nil {
			return n, pc.err
		}
		if uint64(pc.done) < pc.size {
			return n, fmt.Errorf("lov: short I/O on %v at %d", pc.obj.FID(), pc.objOff+uint64(pc.done))
		}
	}
	return n, nil
}

// each runs fn on every object of the file at once and returns the first
// error in layout order.
func (f *File) each(fn func(ci, k int, o *osc.Object) error) error {
	n := 0
	for _, objs := range f.objs {
		n += len(objs)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	i := 0
	for ci, objs := range f.objs {
		for k, o := range objs {
			e := &errs[i]
			i++
			if i == n {
				// The last in this goroutine: one stripe needs none.
				*e = fn(ci, k, o)
				continue
			}
			wg.Go(func() { *e = fn(ci, k, o) })
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// MaxBytes returns the largest size the file can have: the first file
// offset its layout cannot store, each object holding at most
// osc.MaxObjectSize bytes (Lustre's lsm_maxbytes). For a composite layout
// with components not instantiated yet it may be above what they will
// allow once they are.
func (f *File) MaxBytes() uint64 { return f.maxBytes }

// clip returns how many of the n bytes of a write at off the file can
// hold, as Linux's generic_write_checks with s_maxbytes: a write that
// starts at or past the limit fails with EFBIG, one that crosses it is cut
// short there (the caller returns the short count, and the next write gets
// EFBIG). This is done on the file range before it is split: with several
// stripes a byte past the limit may map to an object that still has room,
// and the object limits alone would let it be written.
func (f *File) clip(off uint64, n int) (int, error) {
	if off >= f.maxBytes {
		return 0, fmt.Errorf("lov: write of %d bytes at %d: the layout stores at most %d bytes: %w", n, off, f.maxBytes, syscall.EFBIG)
	}
	return int(min(uint64(n), f.maxBytes-off)), nil
}

// checkRange validates an I/O range.
func checkRange(off int64, n int) (uint64, error) {
	if off < 0 || uint64(off)+uint64(n) < uint64(off) {
		return 0, fmt.Errorf("lov: I/O at offset %d of %d bytes: %w", off, n, syscall.EINVAL)
	}
	return uint64(off), nil
}

// WriteAt writes p at file offset off: it takes a write lock on each
// object's part of the range, in layout order (Lustre's cl_io lock
// ordering: a reader or another writer of the same range sees all of the
// write or none of it, and no two clients deadlock), then each stripe's
// bytes go to its object's OSC, into the page cache, every object at
// once. It returns len(p), or the bytes written from off before the first
// error. A write that crosses the largest size the file can have
// (MaxBytes) writes the bytes below it and returns their count with no
// error; one that starts there fails with EFBIG.
func (f *File) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	uoff, err := checkRange(off, len(p))
	if err != nil || len(p) == 0 {
		return 0, err
	}
	n, err := f.clip(uoff, len(p))
	if err != nil {
		return 0, err
	}
	p = p[:n]
	pieces, err := f.split(p, uoff, true)
	if err != nil {
		return 0, err
	}
	done, err := f.shared(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	locks, err := lockPieces(ctx, pieces, true)
	if err != nil {
		return 0, err
	}
	defer releaseLocks(locks)
	return run(pieces, func(pc *piece) (int, error) { return locks[pc.obj].WriteAt(ctx, pc.buf, pc.objOff) })
}

// ReadAt reads into p from file offset off, as io.ReaderAt: it returns
// len(p) bytes, or fewer and io.EOF at the end of the file. Holes read as
// zeros. As Lustre's cl_io, it first takes a read lock on each object's
// part of the range (in layout order, so that it never deadlocks with an
// appender), then decides the size under those locks (from what they tell
// or, when the range reaches past that, a glimpse of every object), then
// reads every object at once.
func (f *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return f.read(ctx, nil, p, off)
}

// ReadVec is ReadAt without copying cached bytes into p: on success v
// holds the n bytes read, in order, as slices of the OSCs' cached pages
// (pinned until v.Release) and of p (where a hole reads as zeros). On an
// error v is empty.
func (f *File) ReadVec(ctx context.Context, v *osc.Vec, p []byte, off int64) (int, error) {
	return f.read(ctx, v, p, off)
}

// read is ReadAt, or ReadVec with v.
func (f *File) read(ctx context.Context, v *osc.Vec, p []byte, off int64) (int, error) {
	uoff, err := checkRange(off, len(p))
	if err != nil || len(p) == 0 {
		return 0, err
	}
	pieces, err := f.split(p, uoff, false)
	if err != nil {
		return 0, err
	}
	done, err := f.shared(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	locks, err := lockPieces(ctx, pieces, false)
	if err != nil {
		return 0, err
	}
	defer releaseLocks(locks)
	end := uoff + uint64(len(p))
	eof := false
	if known := f.KnownSize(); end > known {
		size, err := f.Size(ctx)
		if err != nil {
			return 0, err
		}
		if uoff >= uint64(size) {
			return 0, io.EOF
		}
		if end > uint64(size) {
			end, eof = uint64(size), true
			if pieces, err = f.split(p[:end-uoff], uoff, false); err != nil {
				return 0, err
			}
		}
	}
	if v == nil {
		n, err := run(pieces, func(pc *piece) (int, error) { return locks[pc.obj].ReadAt(ctx, pc.buf, pc.objOff) })
		if err == nil {
			// Every byte up to end is read or, in a component without
			// objects, a hole split zeroed.
			n = int(end - uoff)
			if eof {
				err = io.EOF
			}
		}
		return n, err
	}
	vecs := make([]osc.Vec, len(pieces))
	for i, pc := range pieces {
		pc.vec = &vecs[i]
	}
	if _, err = run(pieces, func(pc *piece) (int, error) { return locks[pc.obj].ReadVec(ctx, pc.vec, pc.buf, pc.objOff) }); err != nil {
		for i := range vecs {
			vecs[i].Release()
		}
		return 0, err
	}
	// The pieces in file order, and between them what split zeroed.
	pos := uoff
	for i, pc := range pieces {
		v.AppendBuf(p[pos-uoff : pc.fileOff-uoff])
		v.Append(&vecs[i])
		pos = pc.fileOff + pc.size
	}
	v.AppendBuf(p[pos-uoff : end-uoff])
	if eof {
		err = io.EOF
	}
	return int(end - uoff), err
}

// releaseLocks gives back the locks of lockPieces.
func releaseLocks(locks map[*osc.Object]*osc.Lock) {
	for _, l := range locks {
		l.Release()
	}
}

// lockPieces takes a lock (a write lock if write) on each object's part
// of the pieces, in layout order.
func lockPieces(ctx context.Context, pieces []*piece, write bool) (map[*osc.Object]*osc.Lock, error) {
	spans, order := objectSpans(pieces)
	locks := make(map[*osc.Object]*osc.Lock, len(order))
	for _, o := range order {
		s := spans[o]
		l, err := o.Lock(ctx, write, s.start&^(osc.PageSize-1), (s.end+osc.PageSize-1)&^(osc.PageSize-1)-1)
		if err != nil {
			releaseLocks(locks)
			return nil, err
		}
		locks[o] = l
	}
	return locks, nil
}

// objSpan is the extent of one object's pieces, in object space.
type objSpan struct {
	comp, stripe int
	start, end   uint64
}

// objectSpans returns the extent each object's pieces cover, and the
// objects in layout order (the order their locks are taken in).
func objectSpans(pieces []*piece) (map[*osc.Object]*objSpan, []*osc.Object) {
	spans := make(map[*osc.Object]*objSpan)
	var order []*osc.Object
	for _, pc := range pieces {
		s := spans[pc.obj]
		if s == nil {
			s = &objSpan{comp: pc.comp, stripe: pc.stripe, start: pc.objOff, end: pc.objOff + pc.size}
			spans[pc.obj] = s
			order = append(order, pc.obj)
		}
		s.start, s.end = min(s.start, pc.objOff), max(s.end, pc.objOff+pc.size)
	}
	slices.SortFunc(order, func(a, b *osc.Object) int {
		sa, sb := spans[a], spans[b]
		if sa.comp != sb.comp {
			return sa.comp - sb.comp
		}
		return sa.stripe - sb.stripe
	})
	return spans, order
}

// Fallocate reserves the blocks of [off, off+n) of the file, as
// fallocate(2) mode 0 (the file grows to off+n unless keepSize), or, with
// punch, frees them (PUNCH_HOLE|KEEP_SIZE: they read as zeros), under a
// write lock on each object's part of the range, taken in layout order,
// every object at once. An allocation of a range in a component without
// objects fails with layout.ErrUninstantiated (the caller instantiates
// it); for a punch such a range, and one past the layout, is a hole
// already.
func (f *File) Fallocate(ctx context.Context, off, n int64, keepSize, punch bool) error {
	if off < 0 || n <= 0 || uint64(off)+uint64(n) < uint64(off) {
		return fmt.Errorf("lov: fallocate of %d bytes at %d: %w", n, off, syscall.EINVAL)
	}
	if end := uint64(off) + uint64(n); end > f.maxBytes {
		// As vfs_fallocate against s_maxbytes, in every mode: nothing is
		// done, where the objects' own limits would refuse only some.
		return fmt.Errorf("lov: fallocate [%d,%d): the layout stores at most %d bytes: %w", off, end, f.maxBytes, syscall.EFBIG)
	}
	pieces, err := f.mapRange(uint64(off), uint64(off)+uint64(n), !punch, nil)
	if err != nil || len(pieces) == 0 {
		return err
	}
	take := f.shared
	if punch { // a reader sees all of the hole or none of it
		take = f.alone
	}
	done, err := take(ctx)
	if err != nil {
		return err
	}
	defer done()
	locks, err := lockPieces(ctx, pieces, true)
	if err != nil {
		return err
	}
	defer releaseLocks(locks)
	spans, order := objectSpans(pieces)
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for i, o := range order {
		s, l := spans[o], locks[o]
		wg.Go(func() {
			if punch {
				errs[i] = l.PunchHole(ctx, s.start, s.end)
			} else {
				errs[i] = l.Allocate(ctx, s.start, s.end, keepSize)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sizes returns the table layout.FileSize takes, filled by fn.
func (f *File) sizes(fn func(ci, k int, o *osc.Object) (uint64, error)) ([][]uint64, error) {
	tab := make([][]uint64, len(f.objs))
	for ci, objs := range f.objs {
		tab[ci] = make([]uint64, len(objs))
	}
	err := f.each(func(ci, k int, o *osc.Object) error {
		s, err := fn(ci, k, o)
		tab[ci][k] = s
		return err
	})
	return tab, err
}

// KnownSize returns the size the client knows the file has at least from
// the locks it holds, without an RPC.
func (f *File) KnownSize() uint64 {
	tab := make([][]uint64, len(f.objs))
	for ci, objs := range f.objs {
		tab[ci] = make([]uint64, len(objs))
		for k, o := range objs {
			tab[ci][k] = o.KnownSize()
		}
	}
	size, _ := f.l.FileSize(tab)
	return size
}

// Size returns the file's size (Lustre's glimpse of every stripe merged by
// lov_merge_lvb_kms): every object's size at once, known from the
// client's locks or by a glimpse, combined by the layout.
func (f *File) Size(ctx context.Context) (int64, error) {
	a, err := f.Attr(ctx)
	return a.Size, err
}

// Attr is what a file's objects say of it.
type Attr struct {
	Size         int64
	Blocks       uint64 // 512-byte blocks, the sum of the objects'
	Mtime, Ctime int64  // the newest of the objects'; 0 unknown
}

// Attr returns the file's size, as Size does, the blocks its objects
// occupy (summed over every object of every instantiated component, as
// Lustre's lov_merge_lvb_kms sums lvb_blocks), and the newest mtime and
// ctime of its objects.
func (f *File) Attr(ctx context.Context) (Attr, error) {
	var mu sync.Mutex
	var a Attr
	tab, err := f.sizes(func(_, _ int, o *osc.Object) (uint64, error) {
		oa, err := o.Attr(ctx)
		mu.Lock()
		a.Blocks += oa.Blocks
		a.Mtime, a.Ctime = max(a.Mtime, oa.Mtime), max(a.Ctime, oa.Ctime)
		mu.Unlock()
		return oa.Size, err
	})
	if err != nil {
		return Attr{}, err
	}
	size, err := f.l.FileSize(tab)
	a.Size = int64(size)
	return a, err
}

// SetTimes sets the mtime and ctime of every object (an explicit time set
// on the file), under a write lock on each whole object, so that writes
// other clients cached go to the OSTs first and the times set are the
// objects' last.
func (f *File) SetTimes(ctx context.Context, mtime, ctime int64) error {
	var targets []objectEnd
	for _, objs := range f.objs {
		for _, o := range objs {
			targets = append(targets, objectEnd{o, 0})
		}
	}
	return underWriteLocks(ctx, targets, func(l *osc.Lock, _ uint64) error { return l.SetTimes(ctx, mtime, ctime) })
}

// Truncate sets the file's size: every object that holds bytes at or past
// size is cut (or extended) to what the layout says it holds below it,
// with a punch under a PW lock on [its new size, EOF]. Every lock is taken
// first, in layout order, and the objects are cut at once while all are
// held, so that no reader sees some stripes cut and others not.
func (f *File) Truncate(ctx context.Context, size int64) error {
	if size < 0 {
		return fmt.Errorf("lov: truncate to %d: %w", size, syscall.EINVAL)
	}
	if uint64(size) > f.maxBytes {
		return fmt.Errorf("lov: truncate to %d: the layout stores at most %d bytes: %w", size, f.maxBytes, syscall.EFBIG)
	}
	objs, err := f.l.Truncate(uint64(size))
	if err != nil {
		return fmt.Errorf("lov: truncate to %d: %w", size, err)
	}
	done, err := f.alone(ctx)
	if err != nil {
		return err
	}
	defer done()
	targets := make([]objectEnd, len(objs))
	for i, os := range objs {
		// Checked before any object is cut: one refused after others
		// were would leave the file half truncated.
		if os.Size > osc.MaxObjectSize {
			return fmt.Errorf("lov: truncate to %d: object %v would hold %d bytes: %w", size, os.Object, os.Size, syscall.EFBIG)
		}
		targets[i] = objectEnd{f.objs[os.Component][os.Stripe], os.Size}
	}
	return underWriteLocks(ctx, targets, func(l *osc.Lock, from uint64) error { return l.Truncate(ctx, from) })
}

// objectEnd is an object and the offset from which a change takes all of
// it to its end.
type objectEnd struct {
	o    *osc.Object
	from uint64
}

// underWriteLocks takes a PW lock on [from, EOF] of each target, in the
// order given (layout order, so that two such changes never deadlock),
// then runs fn on every object at once while all are held, and releases
// them.
func underWriteLocks(ctx context.Context, targets []objectEnd, fn func(l *osc.Lock, from uint64) error) error {
	locks := make([]*osc.Lock, 0, len(targets))
	defer func() {
		for _, l := range locks {
			l.Release()
		}
	}()
	for _, t := range targets {
		l, err := t.o.Lock(ctx, true, t.from, ldlm.EOF)
		if err != nil {
			return err
		}
		locks = append(locks, l)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(locks))
	for i, l := range locks {
		wg.Go(func() { errs[i] = fn(l, targets[i].from) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Sync makes the file's data durable (fsync): every object writes back its
// dirty pages and has its OST commit them, all at once. It reports the
// errors of earlier async writes too (ENOSPC, data lost to an eviction).
func (f *File) Sync(ctx context.Context) error {
	return f.each(func(_, _ int, o *osc.Object) error { return o.Sync(ctx) })
}

// Flush writes back the file's dirty pages and waits for the OSTs to
// acknowledge them, without making them durable.
func (f *File) Flush(ctx context.Context) error {
	return f.each(func(_, _ int, o *osc.Object) error { return o.Flush(ctx) })
}

// Append writes p at the end of the file, atomically with respect to
// other appenders and truncates on any client (O_APPEND), and returns the
// bytes written and the offset they went to. As WriteAt, it writes only
// the bytes below MaxBytes (a short count, no error) and fails with EFBIG
// if the end of the file is there already.
//
// The approach (Lustre takes PW [0, EOF] on every stripe; this takes
// less): glimpse the size S; take a PW lock on [StripeObjectSize(k, S),
// EOF] of every object of every component that reaches past S, in layout
// order (so appenders never deadlock); those locks cover every byte at or
// past S, so nobody else can write there or truncate, and the size cannot
// change while they are held, unless it is already below S. Under them the
// size is exact if every locked object's known size reaches its lock's
// start; otherwise a glimpse says it (and if it fell below S, a truncate
// came in between: start over from the new size). Then p is written at the
// size under the held locks, and the locks are released.
func (f *File) Append(ctx context.Context, p []byte) (int, int64, error) {
	done, err := f.alone(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer done()
	size, err := f.Size(ctx)
	if err != nil {
		return 0, 0, err
	}
	for {
		s := uint64(size)
		locks, exact, err := f.lockTail(ctx, s)
		if err != nil {
			return 0, 0, err
		}
		at := s
		if exact {
			at = max(s, f.KnownSize())
		} else {
			sz, err := f.Size(ctx)
			if err != nil {
				releaseAll(locks)
				return 0, 0, err
			}
			if uint64(sz) < s {
				releaseAll(locks)
				size = sz
				continue
			}
			at = uint64(sz)
		}
		n, err := f.writeLocked(ctx, locks, p, at)
		releaseAll(locks)
		return n, int64(at), err
	}
}

// tailLocks are the locks of lockTail, by component and stripe.
type tailLocks map[[2]int]*osc.Lock

func releaseAll(locks tailLocks) {
	for _, l := range locks {
		l.Release()
	}
}

// lockTail takes PW locks covering every byte at or past s on every
// object, in layout order, and reports whether they make the size exact.
func (f *File) lockTail(ctx context.Context, s uint64) (tailLocks, bool, error) {
	locks := make(tailLocks)
	exact := true
	for ci := range f.l.Components {
		c := &f.l.Components[ci]
		if c.End != layout.EOF && c.End <= s {
			continue
		}
		if f.objs[ci] == nil {
			releaseAll(locks)
			return nil, false, fmt.Errorf("lov: append at %d: component %d: %w", s, ci, layout.ErrUninstantiated)
		}
		for k, o := range f.objs[ci] {
			start := c.StripeObjectSize(k, s)
			l, err := o.Lock(ctx, true, start, ldlm.EOF)
			if err != nil {
				releaseAll(locks)
				return nil, false, err
			}
			locks[[2]int{ci, k}] = l
			if o.KnownSize() < start {
				exact = false
			}
		}
	}
	return locks, exact, nil
}

// writeLocked writes p at file offset at under locks, which cover it, up
// to MaxBytes, and returns the bytes written.
func (f *File) writeLocked(ctx context.Context, locks tailLocks, p []byte, at uint64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := f.clip(at, len(p))
	if err != nil {
		return 0, err
	}
	pieces, err := f.split(p[:n], at, true)
	if err != nil {
		return 0, err
	}
	return run(pieces, func(pc *piece) (int, error) {
		l := locks[[2]int{pc.comp, pc.stripe}]
		if l == nil {
			return 0, fmt.Errorf("lov: append: %v not locked", pc.obj.FID())
		}
		return l.WriteAt(ctx, pc.buf, pc.objOff)
	})
}
