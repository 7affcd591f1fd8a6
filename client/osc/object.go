package osc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/ldlm"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// ErrLockRange is returned by I/O through a Lock whose extent or mode
// does not cover it.
var ErrLockRange = errors.New("osc: I/O outside the lock")

// lockInfo is what an object remembers of a lock it holds.
type lockInfo struct {
	mode ldlm.Mode
	ext  ldlm.Extent
}

// Object is one OST object as a client sees it (Lustre's osc_object): its
// cached pages, the extent locks the client holds on it, and what the
// client knows of its size. Reads and writes of the object go through the
// page cache under extent locks; the OSC's writeback engine sends its
// dirty pages. Safe for concurrent use; I/O of different objects never
// waits for each other except for RPC slots, grant and cache space.
type Object struct {
	c     *Client
	fid   fid.FID
	res   ldlm.Resource
	hooks ldlm.Hooks

	// Guarded by Client.mu: references from Open, and whether the object
	// is on the writeback queue.
	refs   int
	queued bool

	onDrop atomic.Pointer[func()]
	// raObjects and raStripe are the striping of the object's file (the
	// object count of its component, the stripe size): a reader of the
	// file reads ahead every object its read-ahead window spans at once.
	// 0 counts as one object.
	raObjects, raStripe atomic.Uint32

	mu struct {
		sync.Mutex
		// pages are the cached pages by index.
		pages pageTable
		// dirtyIdx holds the indexes of the charged dirty pages not yet
		// in an RPC, sorted; dirtySince is when the oldest became dirty.
		dirtyIdx   []uint64
		dirtySince time.Time
		// busy counts pages in an RPC, writeback those in a write RPC;
		// changed is closed and replaced whenever a page stops being busy
		// or leaves the cache.
		busy, writeback int
		changed         chan struct{}
		// locks are the granted locks whose hooks have not run.
		locks map[*ldlm.ClientLock]lockInfo
		// sizeSeen is the largest size learnt from lock grants and local
		// writes, as set by local truncates; see kmsLocked.
		sizeSeen uint64
		// mtime is when the client last wrote (or the mtime it last set),
		// for glimpses and write RPCs; lvbTime is the newest mtime and
		// ctime the OST told with a lock. Both are forgotten with the
		// client's last lock on the object: another client may set older
		// times then (touch -d, tar), and only the OST knows them.
		mtime   int64
		lvbTime struct{ m, c int64 }
		// blocks is the object's allocated 512-byte blocks as the OST
		// last told them (Lustre's lvb_blocks): with a lock grant, a
		// write, a truncate or a glimpse. Dirty pages count nothing until
		// their write lands. Forgotten with the client's last lock, as
		// the times are. cutTransno is the transno of the client's last
		// truncate of the object, which write replies before it predate.
		blocks, cutTransno uint64
		// err is the first error of an async write since the last Sync.
		err error
		// job and readJob are the job ids of the last writer and reader,
		// for the RPCs sent later on their behalf (writeback, read-ahead).
		job, readJob string
		// truncating counts truncates in progress: writes wait for them.
		truncating int
		// waitPins counts writes and truncates waiting for pages a Vec
		// pins: the last unpin broadcasts changed for them.
		waitPins int
		ra       raState
	}
}

func newObject(c *Client, f fid.FID) *Object {
	o := &Object{c: c, fid: f, res: ldlm.Resource{ID: ldlm.ResIDOfFID(f.Seq, f.Oid, f.Ver), Type: ldlm.TypeExtent}}
	o.hooks = ldlm.Hooks{Blocking: o.blocking, Glimpse: o.glimpse}
	o.mu.locks = make(map[*ldlm.ClientLock]lockInfo)
	o.mu.changed = make(chan struct{})
	return o
}

// FID returns the object's FID.
func (o *Object) FID() fid.FID { return o.fid }

// OnDrop sets fn to run whenever a lock on the object is called back,
// after its pages there were written back and dropped, so that a cache
// above the client's (the kernel's page cache, under FUSE) drops its copy
// too. nil removes it.
func (o *Object) OnDrop(fn func()) {
	if fn == nil {
		o.onDrop.Store(nil)
		return
	}
	o.onDrop.Store(&fn)
}

// SetReadAheadShare tells the object that its file is striped over n
// objects in stripes of stripeSize bytes. A sequential reader of the file
// reads ahead all the objects its window spans at once (Lustre's
// max_read_ahead_per_file_mb is per file, in file offsets): each gets its
// share of the window and of the client's budget. Without it, the first
// objects of a wide file took the whole budget and the others read each
// page on demand.
func (o *Object) SetReadAheadShare(n int, stripeSize uint32) {
	o.raObjects.Store(uint32(min(max(n, 1), 1<<16)))
	o.raStripe.Store(stripeSize)
}

// raShare is how many objects a reader's window of window bytes may span:
// ceil(window / stripe) stripes, and one more where it starts inside one.
func (o *Object) raShare(window uint64) int {
	n := uint64(max(o.raObjects.Load(), 1))
	if s := uint64(o.raStripe.Load()); s > 0 {
		n = min(n, (window+s-1)/s+1)
	}
	return int(n)
}

// Close drops the reference Open gave. Cached pages and locks stay (they
// are the client's cache) until the locks go.
func (o *Object) Close() {
	c := o.c
	c.mu.Lock()
	o.refs--
	last := o.refs == 0
	c.mu.Unlock()
	if last {
		c.tryForget(o)
	}
}

func (o *Object) errorf(format string, args ...any) error {
	return fmt.Errorf("osc: ost%04x: %v: "+format, append([]any{o.c.index, o.fid}, args...)...)
}

// broadcastLocked wakes everyone waiting for a page of o.
func (o *Object) broadcastLocked() {
	close(o.mu.changed)
	o.mu.changed = make(chan struct{})
}

// waitBusyLocked lets go of o.mu and waits until a page stops being busy
// (pinned: stops being pinned) or ctx ends.
func (o *Object) waitBusyLocked(ctx context.Context, pinned bool) error {
	ch := o.mu.changed
	if pinned {
		o.mu.waitPins++
	}
	o.mu.Unlock()
	err := o.wait(ctx, ch)
	if pinned {
		o.mu.Lock()
		o.mu.waitPins--
		o.mu.Unlock()
	}
	return err
}

// wait waits for ch (an o.mu.changed taken under o.mu) or ctx.
func (o *Object) wait(ctx context.Context, ch chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kmsLocked returns the known minimum size (Lustre's kms): the object is
// at least this long as long as the client holds its locks. Nobody can cut
// the object below the end of a lock the client holds without that lock
// being called back first, so the largest size seen counts only up to the
// end of the held locks; with no lock, nothing is known.
func (o *Object) kmsLocked() uint64 {
	var end uint64
	for _, li := range o.mu.locks {
		if li.ext.End == ldlm.EOF {
			return o.mu.sizeSeen
		}
		end = max(end, li.ext.End+1)
	}
	return min(o.mu.sizeSeen, end)
}

// exactSizeLocked returns the object's size if the client knows it
// exactly: it holds a lock reaching EOF that starts at or below the known
// size, so no other client can change the size.
func (o *Object) exactSizeLocked() (bool, uint64) {
	kms := o.kmsLocked()
	for _, li := range o.mu.locks {
		if li.ext.End == ldlm.EOF && li.ext.Start <= kms {
			return true, kms
		}
	}
	return false, 0
}

// SizeKnown reports whether the client knows the object's size exactly,
// without an RPC (it holds a lock to EOF that settles it).
func (o *Object) SizeKnown() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	exact, _ := o.exactSizeLocked()
	return exact
}

// KnownSize returns the size the client knows the object has at least,
// without an RPC (0 without a lock).
func (o *Object) KnownSize() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.kmsLocked()
}

// Size returns the object's size: known locally when the client holds a
// lock that settles it, otherwise by a glimpse to the OST's lock server,
// which asks the holders of write locks for their view.
func (o *Object) Size(ctx context.Context) (uint64, error) {
	a, err := o.Attr(ctx)
	return a.Size, err
}

// Attr is what the objects of a file say of it: its size, the space it
// occupies, and the newest mtime and ctime of its writes (Lustre's LVB,
// merged with the MDT's times by ll_merge_attr).
type Attr struct {
	Size         uint64
	Blocks       uint64 // 512-byte blocks allocated on the OST
	Mtime, Ctime int64  // ns since the epoch; 0 unknown
}

// Attr returns the object's size, as Size does, its blocks, and its mtime
// and ctime: with a lock that settles the size, the newest of this
// client's writes and of what the OST told with the lock, and the blocks
// the OST last told (Lustre's too: dirty pages count only once written);
// otherwise the glimpse's, which counts the writes other clients hold in
// their caches.
func (o *Object) Attr(ctx context.Context) (Attr, error) {
	o.mu.Lock()
	exact, s := o.exactSizeLocked()
	a := Attr{Size: s, Blocks: o.mu.blocks, Mtime: max(o.mu.mtime, o.mu.lvbTime.m), Ctime: max(o.mu.mtime, o.mu.lvbTime.c)}
	o.mu.Unlock()
	if exact {
		return a, nil
	}
	c := o.c
	// The glimpse takes the PR lock on the whole object when nobody
	// writes it, so that the next stat needs no RPC (as Lustre's does).
	l, lvb, valid, err := c.locks.GlimpseLock(ctx, c.imp, o.res, o.hooks)
	if err != nil {
		return Attr{}, o.errorf("glimpse: %w", err)
	}
	if l != nil {
		o.addLock(l)
		l.Release() // cached, unused, until a writer calls it back
	}
	a = Attr{Size: lvb.Size, Blocks: lvb.Blocks, Mtime: lvb.MTime, Ctime: lvb.CTime}
	if !valid && lvb.Size == 0 && lvb.Blocks == 0 && lvb.MTime == 0 {
		// The lock server did not read the object (an object it found
		// missing, a server that does not): ask the OST, which says
		// whether the object exists. Without locks there is no cached
		// data anywhere, so its attributes are the truth.
		oa, err := c.getattr(ctx, o.fid)
		if err != nil {
			return Attr{}, err
		}
		a = Attr{Size: oa.GetSize(), Blocks: oa.GetBlocks(), Mtime: oa.GetMtime(), Ctime: oa.GetCtime()}
	}
	o.mu.Lock()
	a.Size = max(a.Size, o.kmsLocked())
	if len(o.mu.locks) > 0 {
		o.mu.blocks = a.Blocks
	}
	o.mu.Unlock()
	return a, nil
}

// noteWritten records the blocks a write's reply tells (transno its
// transno), as Lustre's osc_brw_fini_request updates lvb_blocks. Writes
// only add blocks, and the replies of concurrent writes may come in any
// order, so the largest counts; a reply of a write from before the last
// truncate (a lower transno) does not.
func (o *Object) noteWritten(a *ostv1.Attr, transno uint64) {
	if a.GetValid()&uint32(ostv1.AttrValid_ATTR_VALID_BLOCKS) == 0 {
		return
	}
	o.mu.Lock()
	if transno == 0 || transno > o.mu.cutTransno {
		o.mu.blocks = max(o.mu.blocks, a.Blocks)
	}
	o.mu.Unlock()
}

// Lock is an extent lock on an object that the caller holds, for I/O
// that must happen under one lock (an append) or many locks at once.
// Release it when done; while held it cannot be called back.
type Lock struct {
	obj  *Object
	l    *ldlm.ClientLock
	info lockInfo
	once sync.Once
}

// Lock takes a lock on [start, end] of the object (inclusive; end
// ldlm.EOF for the rest of the object): PW to write, PR to read. A lock the
// client already holds that covers the range serves without an RPC;
// otherwise the OST's lock server grants one (calling back conflicting
// locks of other clients, which flush and drop their caches first),
// possibly larger than asked. The range is taken in whole pages, as
// Lustre's locks are of page indexes: the I/O of a page needs the lock
// from its start (a lock on [size, EOF] that the server could not grow
// down, past locks of other clients, would not cover the page holding
// size otherwise).
func (o *Object) Lock(ctx context.Context, write bool, start, end uint64) (*Lock, error) {
	mode := ldlm.PR
	if write {
		mode = ldlm.PW
	}
	start = pageFloor(start)
	if end > ldlm.EOF-PageSize {
		end = ldlm.EOF
	} else {
		end = pageCeil(end+1) - 1
	}
	l, info, err := o.enqueue(ctx, mode, ldlm.Extent{Start: start, End: end}, 0)
	if err != nil {
		return nil, err
	}
	return &Lock{obj: o, l: l, info: info}, nil
}

// LockAhead takes a PW lock on exactly [start, end] before any I/O
// (Lustre's lockahead, lfs ladvise -a lockahead), so that clients writing
// disjoint parts of a file each hold their own part instead of bouncing
// one grown lock. It neither waits nor calls anybody back: a conflict
// fails with an error wrapping ldlm.ErrWouldBlock. The lock stays in the
// lock cache for later I/O to use.
func (o *Object) LockAhead(ctx context.Context, start, end uint64) error {
	l, _, err := o.enqueue(ctx, ldlm.PW, ldlm.Extent{Start: start, End: end}, ldlm.BlockNoWait|ldlm.NoExpansion)
	if err != nil {
		return err
	}
	l.Release()
	return nil
}

// enqueue takes a lock and records it in the object: its extent for the
// hooks, and the size its LVB tells the first time the object sees it.
func (o *Object) enqueue(ctx context.Context, mode ldlm.Mode, ext ldlm.Extent, flags ldlm.Flags) (*ldlm.ClientLock, lockInfo, error) {
	c := o.c
	l, _, _, err := c.locks.Enqueue(ctx, c.imp, ldlm.Enqueue{Resource: o.res, Mode: mode,
		Policy: ldlm.Policy{Extent: ext}, Flags: flags, Hooks: o.hooks})
	if err != nil {
		return nil, lockInfo{}, o.errorf("lock %v %v: %w", mode, ext, err)
	}
	return l, o.addLock(l), nil
}

// addLock records a lock granted on the object, with what its LVB says.
// The size the LVB gives counts only up to the end of the lock's extent
// (Lustre's osc_lock_lvb_update): beyond it another client may truncate
// without calling this lock back, so a larger size seen under it would
// outlive the truncate and later pass for exact under a lock to EOF. A lock
// already gone (an eviction's hooks ran) is not recorded.
func (o *Object) addLock(l *ldlm.ClientLock) lockInfo {
	info := lockInfo{mode: l.Mode(), ext: l.Policy().Extent}
	o.mu.Lock()
	if _, ok := o.mu.locks[l]; !ok && !l.Gone() {
		o.mu.locks[l] = info
		lvb := l.LVB()
		size := lvb.Size
		if info.ext.End != ldlm.EOF {
			size = min(size, info.ext.End+1)
		}
		o.mu.sizeSeen = max(o.mu.sizeSeen, size)
		o.mu.lvbTime.m, o.mu.lvbTime.c = max(o.mu.lvbTime.m, lvb.MTime), max(o.mu.lvbTime.c, lvb.CTime)
		o.mu.blocks = lvb.Blocks
	}
	o.mu.Unlock()
	return info
}

// Mode returns the lock's mode as granted (a cached PW lock may serve a
// read).
func (l *Lock) Mode() ldlm.Mode { return l.info.mode }

// Extent returns the lock's extent as granted.
func (l *Lock) Extent() ldlm.Extent { return l.info.ext }

// Release gives the lock back to the lock client's cache; calling it
// again does nothing.
func (l *Lock) Release() { l.once.Do(l.l.Release) }

// ReadAt reads into p from object offset off under the lock, which must
// cover the range.
func (l *Lock) ReadAt(ctx context.Context, p []byte, off uint64) (int, error) {
	return l.obj.readAt(ctx, l, p, off)
}

// ReadVec is ReadAt of len(p) bytes without the copy: they go into v as
// slices of the cached pages, pinned until v is released (also after an
// error, which may leave some in v). Pages past the cache's share of pins
// (a quarter of it) are copied into p instead, and p's slices go into v.
func (l *Lock) ReadVec(ctx context.Context, v *Vec, p []byte, off uint64) (int, error) {
	return l.obj.read(ctx, l, p, v, off)
}

// WriteAt writes p at object offset off under the lock, which must be a
// write lock covering the range.
func (l *Lock) WriteAt(ctx context.Context, p []byte, off uint64) (int, error) {
	return l.obj.writeAt(ctx, l, p, off)
}

// covers reports whether the lock allows the I/O on the pages of
// [off, end).
func (l *Lock) covers(write bool, off, end uint64) bool {
	if write && l.info.mode != ldlm.PW && l.info.mode != ldlm.EX && l.info.mode != ldlm.GROUP {
		return false
	}
	return l.info.ext.Start <= pageFloor(off) && pageCeil(end)-1 <= l.info.ext.End
}

// glimpse is the lock's glimpse hook: the client's view of the size,
// which its dirty pages may put ahead of the OST's.
func (o *Object) glimpse(*ldlm.ClientLock) ldlm.LVB {
	o.mu.Lock()
	defer o.mu.Unlock()
	return ldlm.LVB{Size: o.kmsLocked(), MTime: o.mu.mtime, CTime: o.mu.mtime}
}

// blocking is the lock's blocking hook (Lustre's osc_ldlm_blocking_ast):
// before the lock goes, write back exactly the dirty pages in its extent
// and wait for the OST to have them, then drop every cached page there.
// After an eviction the lock is already gone on the OST: dirty pages are
// lost, which the next Sync reports. A lock called back because the OST
// destroys the object (DiscardData) drops its pages unwritten, dirty or
// not, with no error: the file they belonged to is gone.
func (o *Object) blocking(ctx context.Context, l *ldlm.ClientLock, evicted bool) {
	o.mu.Lock()
	info, ok := o.mu.locks[l]
	o.mu.Unlock()
	if !ok {
		info = lockInfo{mode: l.Mode(), ext: l.Policy().Extent}
	}
	first, last := info.ext.Start/PageSize, info.ext.End/PageSize
	var lost error
	discard := !evicted && l.DiscardData()
	if evicted {
		lost = o.errorf("lock %v %v: evicted: dirty data lost", info.mode, info.ext)
	} else if discard {
		o.c.st.discardedLocks.Add(1)
	} else if err := o.flushPages(ctx, first, last); err != nil {
		lost = o.errorf("flush for lock %v %v: %w", info.mode, info.ext, err)
	} else if o.hasUnstable(first, last) {
		// The pages go with the lock: the OST must not lose them now.
		if err := o.c.syncOST(ctx, o.fid); err != nil {
			lost = o.errorf("commit for lock %v %v: %w", info.mode, info.ext, err)
		}
		o.c.releaseCommitted()
	}
	// The lock counts for the known size until its pages are on the OST:
	// a glimpse meanwhile (a stat elsewhere; the OST still lists the lock
	// as granted) must see the writes it covers, which the OST's size does
	// not hold until the flush is acknowledged. Gone from the locks, it
	// stops counting when its pages go.
	o.mu.Lock()
	delete(o.mu.locks, l)
	o.mu.Unlock()
	o.dropPages(ctx, first, last, lost, discard)
	o.mu.Lock()
	if len(o.mu.locks) == 0 && len(o.mu.dirtyIdx) == 0 {
		o.mu.mtime, o.mu.lvbTime.m, o.mu.lvbTime.c, o.mu.blocks = 0, 0, 0, 0
	}
	o.mu.Unlock()
	if fn := o.onDrop.Load(); fn != nil {
		(*fn)()
	}
	o.c.tryForget(o)
}

// dropPages removes the pages in [first, last] from the cache once no RPC
// uses them, and lowers the known size to what the remaining locks cover.
// Dirty pages there (only after an eviction or a failed flush) are lost:
// lost is recorded for Sync, unless discard says the object is destroyed.
func (o *Object) dropPages(ctx context.Context, first, last uint64, lost error, discard bool) {
	c := o.c
	o.mu.Lock()
	ps, _ := o.idlePagesLocked(ctx, first, last) // given up waiting: what is idle goes
	dirty := 0
	for _, p := range ps {
		if !p.clean() {
			dirty++
		}
	}
	if dirty > 0 && discard {
		c.st.discardedPages.Add(uint64(dirty))
	} else if dirty > 0 {
		c.st.lostPages.Add(uint64(dirty))
		if lost == nil {
			lost = o.errorf("%d dirty pages dropped", dirty)
		}
		if o.mu.err == nil {
			o.mu.err = lost
		}
	}
	uncharged := o.removePagesLocked(ps)
	o.mu.sizeSeen = min(o.mu.sizeSeen, o.kmsLocked())
	o.mu.Unlock()
	c.uncharge(uncharged)
}

// idlePagesLocked waits until none of the pages in [first, last] is being
// filled or written, and returns them. If ctx ends first, it returns those
// that are idle, and ctx's error. o.mu is held, and released while it
// waits.
func (o *Object) idlePagesLocked(ctx context.Context, first, last uint64) ([]*page, error) {
	busy := func(p *page) bool { return p.state != pageIdle }
	for {
		ps := o.pagesInLocked(first, last)
		if !slices.ContainsFunc(ps, busy) {
			return ps, nil
		}
		ch := o.mu.changed
		o.mu.Unlock()
		err := o.wait(ctx, ch)
		o.mu.Lock()
		if err != nil {
			return slices.DeleteFunc(o.pagesInLocked(first, last), busy), err
		}
	}
}

// removePagesLocked takes ps out of the object and the cache, dirty ones
// with their grant, and returns how many pages of grant to uncharge once
// o.mu is released.
func (o *Object) removePagesLocked(ps []*page) (uncharged int) {
	for _, p := range ps {
		if p.charged {
			uncharged++
			o.undirtyLocked(p)
		}
		o.mu.pages.del(p.idx)
	}
	o.c.cache.release(ps)
	o.broadcastLocked()
	return uncharged
}

// discardAll drops every page, waiting a while for RPCs in flight (after
// an eviction they fail soon). err, if not nil, is recorded for Sync when
// dirty pages go.
func (o *Object) discardAll(err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o.dropPages(ctx, 0, ^uint64(0), err, false)
}

// pagesInLocked returns the cached pages with index in [first, last].
func (o *Object) pagesInLocked(first, last uint64) []*page {
	var out []*page
	if last-first < uint64(o.mu.pages.len()) {
		for i := first; ; i++ {
			if p := o.mu.pages.get(i); p != nil {
				out = append(out, p)
			}
			if i == last {
				break
			}
		}
		return out
	}
	for p := range o.mu.pages.all {
		if p.idx >= first && p.idx <= last {
			out = append(out, p)
		}
	}
	return out
}

// evictLocked takes a clean idle page out of the object for the cache's
// evictor, which holds o.mu and the cache's lock.
func (o *Object) evictLocked(p *page) {
	if o.mu.pages.get(p.idx) == p {
		o.mu.pages.del(p.idx)
	}
}

// addDirtyLocked records a newly charged dirty page.
func (o *Object) addDirtyLocked(p *page) {
	idx := o.mu.dirtyIdx
	if len(idx) == 0 {
		o.mu.dirtySince = time.Now()
	}
	if n := len(idx); n == 0 || idx[n-1] < p.idx {
		o.mu.dirtyIdx = append(idx, p.idx)
		return
	}
	i := sort.Search(len(idx), func(k int) bool { return idx[k] >= p.idx })
	o.mu.dirtyIdx = slices.Insert(idx, i, p.idx)
}

// lastDirtyIn returns the highest index in [first, last] of an unsent
// dirty page of o, if there is one.
func (o *Object) lastDirtyIn(first, last uint64) (uint64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	idx := o.mu.dirtyIdx
	i := sort.Search(len(idx), func(k int) bool { return idx[k] > last })
	if i == 0 || idx[i-1] < first {
		return 0, false
	}
	return idx[i-1], true
}

// undirtyLocked takes an unsent charged page off the dirty list; the
// caller gives its charge back.
func (o *Object) undirtyLocked(p *page) {
	idx := o.mu.dirtyIdx
	i := sort.Search(len(idx), func(k int) bool { return idx[k] >= p.idx })
	if i < len(idx) && idx[i] == p.idx {
		o.mu.dirtyIdx = slices.Delete(idx, i, i+1)
	}
	p.charged = false
}

// dirtyInLocked reports whether o has unsent dirty pages with index in
// [first, last].
func (o *Object) dirtyInLocked(first, last uint64) bool {
	idx := o.mu.dirtyIdx
	i := sort.Search(len(idx), func(k int) bool { return idx[k] >= first })
	return i < len(idx) && idx[i] <= last
}

// gatherLocked builds a write RPC from the unsent dirty pages with index
// in [first, last], in order, up to a full RPC (max_pages_per_rpc pages,
// maxNiobufs extents), and marks them in writeback. It returns nil if
// there is nothing to send.
func (o *Object) gatherLocked(first, last uint64) *brwRPC {
	idx := o.mu.dirtyIdx
	i := sort.Search(len(idx), func(k int) bool { return idx[k] >= first })
	r := &brwRPC{obj: o, write: true, mtime: o.mu.mtime, job: o.mu.job}
	j := i
	for ; j < len(idx) && idx[j] <= last && len(r.segs) < o.c.rpcPages(); j++ {
		p := o.mu.pages.get(idx[j])
		if p.state != pageIdle {
			continue // being filled: next time
		}
		if !r.add(p, p.dirty) {
			break
		}
		p.state = pageWriteback
		o.mu.busy++
		o.mu.writeback++
		r.charged++
	}
	if len(r.segs) == 0 {
		return nil
	}
	w := i
	for k := i; k < j; k++ {
		if o.mu.pages.get(idx[k]).state != pageWriteback {
			idx[w] = idx[k]
			w++
		}
	}
	o.mu.dirtyIdx = append(idx[:w], idx[j:]...)
	if len(o.mu.dirtyIdx) == 0 {
		o.mu.dirtySince = time.Time{}
	}
	var lru []*page
	for _, s := range r.segs {
		lru = append(lru, s.p)
	}
	o.c.cache.lruUpdate(lru)
	return r
}

// writeDone records the outcome of a write RPC: its pages are clean, or,
// if it failed, dropped (their data never reached the OST and the cache
// must not pretend otherwise) with the error kept for Sync when sticky.
func (o *Object) writeDone(r *brwRPC, err error, sticky bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var freed, lru []*page
	for _, s := range r.segs {
		p := s.p
		p.state = pageIdle
		o.mu.busy--
		o.mu.writeback--
		p.charged = false
		if err == nil {
			p.dirty, p.sumOf = span{}, span{}
			if !r.stable {
				p.unstable = r.transno
				p.sent = p.sent.union(s.s)
			}
			lru = append(lru, p)
			continue
		}
		if o.mu.pages.get(p.idx) == p {
			o.mu.pages.del(p.idx)
		}
		freed = append(freed, p)
	}
	if err != nil {
		o.c.st.lostPages.Add(uint64(len(freed)))
		if sticky && o.mu.err == nil {
			o.mu.err = err
		}
	}
	o.c.cache.lruUpdate(lru)
	o.c.cache.release(freed)
	o.broadcastLocked()
}

// fillDone records the outcome of a read RPC: its pages are valid, or, if
// it failed, pages without dirty or uncommitted data go and the others stay
// as they were (a rewrite after an OST restart needs the latter).
func (o *Object) fillDone(r *brwRPC, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var freed, lru []*page
	for _, s := range r.segs {
		p := s.p
		if p.state != pageFilling {
			continue // a page with two ranges in the RPC
		}
		p.state = pageIdle
		o.mu.busy--
		if err == nil {
			p.valid = wholePage
			lru = append(lru, p)
			continue
		}
		p.held = false
		if p.clean() && p.unstable == 0 {
			if o.mu.pages.get(p.idx) == p {
				o.mu.pages.del(p.idx)
			}
			freed = append(freed, p)
		} else {
			lru = append(lru, p)
		}
	}
	o.c.cache.lruUpdate(lru)
	o.c.cache.release(freed)
	o.broadcastLocked()
}

// flushPages writes back the dirty pages with index in [first, last] and
// waits until the OST has acknowledged every page of the range that was in
// writeback, keeping within max_rpcs_in_flight. Failed writes are kept for
// Sync; flushPages itself fails only when ctx ends.
func (o *Object) flushPages(ctx context.Context, first, last uint64) error {
	c := o.c
	for {
		if err := c.wslots.Acquire(ctx); err != nil {
			return err
		}
		o.mu.Lock()
		// Near full, writes from grant go one at a time, as the engine
		// sends them (writebackPass), so that each reply's grant is exact
		// (see grant.go): the range's dirty pages wait for the one in
		// flight.
		c.mu.Lock()
		serial, changed := c.grantWriteWaitsLocked(), c.mu.changed
		c.mu.Unlock()
		if serial && o.dirtyInLocked(first, last) {
			o.mu.Unlock()
			c.wslots.Release()
			select {
			case <-changed:
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		r := o.gatherLocked(first, last)
		if r == nil {
			// Wait for the pages of the range in writeback, and for dirty
			// pages gather skipped because a read is filling them.
			busy := false
			switch {
			case first == 0 && last == ^uint64(0):
				busy = o.mu.writeback > 0 || len(o.mu.dirtyIdx) > 0
			case o.mu.busy > 0:
				for _, p := range o.pagesInLocked(first, last) {
					if p.state == pageWriteback || (p.state == pageFilling && !p.clean()) {
						busy = true
						break
					}
				}
			}
			ch := o.mu.changed
			o.mu.Unlock()
			c.wslots.Release()
			if !busy {
				return nil
			}
			if err := o.wait(ctx, ch); err != nil {
				return err
			}
			continue
		}
		o.mu.Unlock()
		c.startWrite(r)
		// Its slot bounds these RPCs; the loop waits for each through its
		// pages (in writeback until it ends), within ctx.
		c.goWrite(ctx, r, func() { c.wslots.Release(); c.kickWriteback(false) })
	}
}

// Flush writes back the object's dirty pages and waits for the OST to
// acknowledge them (not for them to be durable: see Sync).
func (o *Object) Flush(ctx context.Context) error {
	return o.flushPages(ctx, 0, ^uint64(0))
}

// Sync makes everything written to the object so far durable on the OST
// (fsync): it writes back the dirty pages, sends OST_SYNC, and waits for
// the OST's last_committed to cover the writes. It returns the first error
// of an async write of the object since the last Sync (ENOSPC, EIO after
// an eviction, ...), or of its own RPCs.
func (o *Object) Sync(ctx context.Context) error {
	if err := o.Flush(ctx); err != nil {
		return err
	}
	err := o.c.syncOST(ctx, o.fid)
	o.mu.Lock()
	if o.mu.err != nil {
		err = o.mu.err
		o.mu.err = nil
	}
	o.mu.Unlock()
	return err
}

// Truncate sets the object's size (shrinking or extending it) with
// OST_PUNCH under a PW lock on [size, EOF], as Lustre's osc_punch: cached
// pages past the new size go (dirty ones unsent, their grant back), the
// page holding the new end is cut, and writes of the object wait until
// the OST has done it.
func (o *Object) Truncate(ctx context.Context, size uint64) error {
	if size > MaxObjectSize {
		return o.errorf("truncate to %d: %w", size, syscall.EFBIG)
	}
	lk, err := o.Lock(ctx, true, size, ldlm.EOF)
	if err != nil {
		return err
	}
	defer lk.Release()
	return o.truncate(ctx, size)
}

// Truncate truncates the object as Object.Truncate does, under the lock,
// which must be a write lock covering [size, EOF] (so that a file layer
// can hold every stripe's lock while it cuts them all).
func (l *Lock) Truncate(ctx context.Context, size uint64) error {
	o := l.obj
	if size > MaxObjectSize {
		return o.errorf("truncate to %d: %w", size, syscall.EFBIG)
	}
	if !l.covers(true, size, size+1) || l.info.ext.End != ldlm.EOF || l.info.ext.Start > size {
		return o.errorf("truncate to %d under %v %v: %w", size, l.info.mode, l.info.ext, ErrLockRange)
	}
	return o.truncate(ctx, size)
}

// SetTimes sets the object's mtime and ctime on the OST (an explicit time:
// touch -d, tar, cp -p), under the lock, which must be a write lock on the
// whole object, so that no other client holds writes that would carry
// their own times there later. What this client wrote before goes first,
// with the times of its writes; later writes carry theirs.
func (l *Lock) SetTimes(ctx context.Context, mtime, ctime int64) error {
	o := l.obj
	if !l.covers(true, 0, 1) || l.info.ext.End != ldlm.EOF {
		return o.errorf("set times under %v %v: %w", l.info.mode, l.info.ext, ErrLockRange)
	}
	if err := o.Flush(ctx); err != nil {
		return err
	}
	if err := o.c.setTimes(ctx, o.fid, mtime, ctime); err != nil {
		return err
	}
	o.mu.Lock()
	o.mu.mtime, o.mu.lvbTime.m, o.mu.lvbTime.c = mtime, mtime, ctime
	o.mu.Unlock()
	return nil
}

// cutting counts a truncate or punch in progress, during which the
// object's writes and reads ahead wait, and returns the function that
// ends it.
func (o *Object) cutting() func() {
	o.mu.Lock()
	o.mu.truncating++
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		o.mu.truncating--
		o.broadcastLocked()
		o.mu.Unlock()
	}
}

// testHookTruncating, if set (by tests), runs when a truncate has dropped
// the pages past the new size and is about to punch (punched false), and
// when the punch is done (true).
var testHookTruncating func(o *Object, punched bool)

// truncate is Truncate under a write lock on [size, EOF].
func (o *Object) truncate(ctx context.Context, size uint64) error {
	defer o.cutting()()
	c := o.c
	cut, cutOff := size/PageSize, int(size%PageSize)
	var was uint64
	for {
		o.mu.Lock()
		ps := o.pagesInLocked(cut, ^uint64(0))
		busy, pinned := false, false
		for _, p := range ps {
			// (The page cut in two changes; the others only leave.)
			pinned = p.idx == cut && cutOff > 0 && p.pins > 0
			if p.state != pageIdle || pinned {
				busy = true
				break
			}
		}
		if busy {
			if err := o.waitBusyLocked(ctx, pinned); err != nil {
				return err
			}
			continue
		}
		var freed, lru []*page
		uncharged := 0
		for _, p := range ps {
			if p.idx == cut && cutOff > 0 {
				clear(p.data[cutOff:])
				p.sumOf = span{} // the dirty bytes may be cut
				p.sent = p.sent.intersect(span{0, cutOff})
				switch {
				case p.uptodate():
				case p.valid.to >= cutOff:
					p.valid = span{min(p.valid.from, cutOff), PageSize}
				default:
					// valid bytes end before the cut; what follows is
					// zeros now but cannot join them
				}
				if p.dirty.to > cutOff {
					p.dirty.to = cutOff
				}
				if p.dirty.empty() {
					p.dirty = span{}
					if p.charged {
						uncharged++
						o.undirtyLocked(p)
					}
				}
				lru = append(lru, p)
				continue
			}
			if p.charged {
				uncharged++
				o.undirtyLocked(p)
			}
			o.mu.pages.del(p.idx)
			freed = append(freed, p)
		}
		// A shrinking object is no longer known to be longer than size,
		// before the punch, as Lustre sets the kms at osc_io_setattr_start:
		// a glimpse answered once the OST has cut it must not tell the
		// old size, which the lock server would keep as the largest it
		// heard (a stat elsewhere would see it after the truncate).
		was = o.mu.sizeSeen
		o.mu.sizeSeen = min(was, size)
		c.cache.lruUpdate(lru)
		c.cache.release(freed)
		o.broadcastLocked()
		o.mu.Unlock()
		c.uncharge(uncharged)
		break
	}
	if testHookTruncating != nil {
		testHookTruncating(o, false)
	}
	oa, transno, err := c.punch(ctx, o.fid, size, ^uint64(0))
	if err != nil {
		o.mu.Lock()
		o.mu.sizeSeen = max(o.mu.sizeSeen, was) // not cut, as far as we know
		o.mu.Unlock()
		return err
	}
	if testHookTruncating != nil {
		testHookTruncating(o, true)
	}
	o.mu.Lock()
	o.mu.sizeSeen = size
	if oa.GetValid()&uint32(ostv1.AttrValid_ATTR_VALID_BLOCKS) != 0 {
		o.mu.blocks, o.mu.cutTransno = oa.Blocks, transno
	}
	o.mu.mtime = time.Now().UnixNano()
	o.mu.Unlock()
	return nil
}
