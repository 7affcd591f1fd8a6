package osc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// slabPages is how many pages are allocated together, so that pages
// allocated one after another are usually contiguous in memory and a bulk
// RPC can hand LNet one buffer for a run of them.
const slabPages = 64

// evictTries bounds the LRU entries one allocation looks at.
const evictTries = 64

// Cache is a client's page cache: every page of every object of every OSC
// that shares it, bounded by max_cached_mb. Clean pages nobody is using
// sit on a least-recently-used list and are evicted from its head when a
// new page is needed; dirty pages and pages with an RPC in flight are not
// evictable, and a full cache of them makes new I/O wait for writeback.
// It also holds the client-wide read-ahead budget (max_read_ahead_mb).
// Safe for concurrent use.
type Cache struct {
	cfg Config
	log *slog.Logger
	// raMB is max_read_ahead_mb, raFileMB max_read_ahead_per_file_mb;
	// tunMu serializes SetLimits.
	raMB     atomic.Int64
	raFileMB atomic.Int64
	tunMu    sync.Mutex

	mu struct {
		sync.Mutex
		maxPages int      // max_cached_mb in pages
		lru      pageList // clean idle pages, least recently used first
		used     int      // pages in objects
		free     [][]byte // page buffers not in use
		ra       int      // pages read ahead and not used yet
		waiters  int      // allocations waiting for space
		pinned   int      // pages Vecs pin (at most maxPages/pinShare)
		space    chan struct{}
		clients  map[*Client]struct{}
		pressure bool // allocations failed since the last writeback pass
	}
	evictions atomic.Uint64
}

// NewCache returns an empty page cache with cfg's tunables, which every
// OSC made with it also uses.
func NewCache(cfg Config) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	c := &Cache{cfg: cfg, log: lg}
	c.mu.maxPages = cfg.cachePages()
	c.raMB.Store(int64(cfg.MaxReadAheadMB))
	c.raFileMB.Store(int64(cfg.MaxReadAheadPerFileMB))
	c.mu.space = make(chan struct{})
	c.mu.clients = make(map[*Client]struct{})
	return c, nil
}

// Config returns the tunables the cache was made with (SetLimits and the
// OSCs' SetTunables change them since).
func (c *Cache) Config() Config { return c.cfg }

// CacheStats are a snapshot of a Cache's counters.
type CacheStats struct {
	// Pages is how many pages the cache holds, MaxPages its bound.
	Pages, MaxPages int
	// LRU is how many of them are clean and evictable.
	LRU int
	// ReadAhead is how many pages were read ahead and not used yet.
	ReadAhead int
	// Evictions counts clean pages evicted to make room.
	Evictions uint64
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Pages: c.mu.used, MaxPages: c.mu.maxPages, LRU: c.mu.lru.n, ReadAhead: c.mu.ra, Evictions: c.evictions.Load()}
}

// String formats the stats for logs.
func (s CacheStats) String() string {
	return fmt.Sprintf("pages %d/%d lru %d ra %d evicted %d", s.Pages, s.MaxPages, s.LRU, s.ReadAhead, s.Evictions)
}

func (c *Cache) register(cl *Client) {
	c.mu.Lock()
	c.mu.clients[cl] = struct{}{}
	c.mu.Unlock()
}

func (c *Cache) unregister(cl *Client) {
	c.mu.Lock()
	delete(c.mu.clients, cl)
	c.mu.Unlock()
}

// allocLocked returns up to n buffers for new pages of o, evicting clean
// pages if the cache is full; fewer if nothing more can be evicted now (the
// caller lets go of o.mu and waits in waitSpace). o.mu is held; other
// objects' locks are only tried, never waited for.
func (c *Cache) allocLocked(o *Object, n int) [][]byte {
	if n == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([][]byte, 0, n)
	for len(out) < n {
		for tries := 0; c.mu.used >= c.mu.maxPages; tries++ {
			v := c.mu.lru.head
			if v == nil || tries >= evictTries {
				c.mu.pressure = true
				return out
			}
			vo := v.obj
			if vo != o && !vo.mu.TryLock() {
				c.mu.lru.remove(v)
				c.mu.lru.pushBack(v) // busy object: look further
				continue
			}
			if v.pins > 0 {
				// Being read without a copy: look further.
				if vo != o {
					vo.mu.Unlock()
				}
				c.mu.lru.remove(v)
				c.mu.lru.pushBack(v)
				continue
			}
			vo.evictLocked(v)
			c.mu.lru.remove(v)
			c.freePageLocked(v)
			if vo != o {
				vo.mu.Unlock()
			}
			c.evictions.Add(1)
		}
		c.mu.used++
		if len(c.mu.free) == 0 {
			slab := make([]byte, slabPages*PageSize)
			for i := slabPages - 1; i >= 0; i-- {
				c.mu.free = append(c.mu.free, slab[i*PageSize:(i+1)*PageSize])
			}
		}
		k := len(c.mu.free) - 1
		out = append(out, c.mu.free[k])
		c.mu.free[k] = nil
		c.mu.free = c.mu.free[:k]
	}
	return out
}

// freeBufs gives back buffers allocLocked handed out and the caller did
// not use.
func (c *Cache) freeBufs(bufs [][]byte) {
	if len(bufs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.used -= len(bufs)
	c.mu.free = append(c.mu.free, bufs...)
	if c.mu.waiters > 0 {
		c.signalLocked()
	}
}

// freePageLocked returns p's buffer; c.mu and p's object lock are held
// and p is off the LRU. A pinned page's buffer is returned when the last
// Vec holding it is released.
func (c *Cache) freePageLocked(p *page) {
	if p.ra {
		p.ra = false
		c.mu.ra--
	}
	if p.pins > 0 {
		p.spare, p.data = p.data, nil
		return
	}
	c.mu.free = append(c.mu.free, p.data)
	p.data = nil
	c.mu.used--
	if c.mu.waiters > 0 {
		c.signalLocked()
	}
}

// pinShare: pinned pages are at most 1/pinShare of the cache.
const pinShare = 4

// reservePins reports whether the pages of o with index in [first, last]
// may be pinned, and counts those not pinned yet if so: pinned pages,
// which no allocation may evict, stay within their share of the cache.
// o.mu is held.
func (c *Cache) reservePins(o *Object, first, last uint64) bool {
	k := 0
	for i := first; i <= last; i++ {
		if p := o.mu.pages.get(i); p != nil && p.pins == 0 {
			k++
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.pinned+k > c.mu.maxPages/pinShare {
		return false
	}
	c.mu.pinned += k
	return true
}

// unpinned counts k pages no longer pinned; their object's lock is held.
func (c *Cache) unpinned(k int) {
	c.mu.Lock()
	c.mu.pinned -= k
	if c.mu.waiters > 0 {
		c.signalLocked()
	}
	c.mu.Unlock()
}

// freeSpare gives back the buffers pinned pages kept when they were
// dropped from their object, now unpinned; their object's lock is held.
func (c *Cache) freeSpare(ps []*page) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range ps {
		c.mu.free = append(c.mu.free, p.spare)
		p.spare = nil
		c.mu.used--
	}
	if c.mu.waiters > 0 {
		c.signalLocked()
	}
}

// release frees pages dropped from their object (whose lock is held).
func (c *Cache) release(ps []*page) {
	if len(ps) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range ps {
		c.mu.lru.remove(p)
		c.freePageLocked(p)
	}
}

// waitSpace waits until a page may have been freed or become evictable,
// after asking every OSC to write back (dirty pages fill the cache), or
// until ctx ends. Evictable pages of objects that were busy when the
// allocation tried them need no event: it looks again after a short while.
func (c *Cache) waitSpace(ctx context.Context) error {
	c.mu.Lock()
	if c.mu.used < c.mu.maxPages {
		c.mu.Unlock()
		return nil
	}
	c.mu.waiters++
	ch := c.mu.space
	var cls []*Client
	for cl := range c.mu.clients {
		cls = append(cls, cl)
	}
	c.mu.Unlock()
	for _, cl := range cls {
		cl.kickWriteback(true)
	}
	defer func() {
		c.mu.Lock()
		c.mu.waiters--
		c.mu.Unlock()
	}()
	t := time.NewTimer(10 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// underPressure reports (and clears) whether allocations failed since it
// was last asked, or the cache is nearly full of pages that cannot be
// evicted: writeback should then send whatever is dirty.
func (c *Cache) underPressure() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.mu.pressure || c.mu.waiters > 0 || (c.mu.used-c.mu.lru.n)*8 >= c.mu.maxPages*7
	c.mu.pressure = false
	return p
}

// lruUpdate puts idle clean pages on the LRU (at the tail, as most recently
// used) and takes the others off. The pages' object lock is held.
func (c *Cache) lruUpdate(ps []*page) {
	if len(ps) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	added := false
	for _, p := range ps {
		if p.data == nil {
			continue // dropped meanwhile
		}
		if p.evictable() {
			added = added || !p.inLRU
			c.mu.lru.remove(p)
			c.mu.lru.pushBack(p)
		} else {
			c.mu.lru.remove(p)
		}
	}
	if added && c.mu.waiters > 0 {
		c.signalLocked()
	}
}

// signalLocked wakes the allocations waiting for space.
func (c *Cache) signalLocked() {
	close(c.mu.space)
	c.mu.space = make(chan struct{})
}

// lruRemove takes pages off the LRU while their object's lock is held,
// so that they are not evicted; lruUpdate puts them back.
func (c *Cache) lruRemove(ps []*page) {
	if len(ps) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range ps {
		c.mu.lru.remove(p)
	}
}

// raCharge takes up to n pages of the read-ahead budget and returns how
// many it took.
func (c *Cache) raCharge(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n = min(n, c.raPages()-c.mu.ra)
	if n <= 0 {
		return 0
	}
	c.mu.ra += n
	return n
}

// raUsed returns n pages to the read-ahead budget (read ahead pages that
// were used, or never made).
func (c *Cache) raUsed(n int) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	c.mu.ra -= n
	c.mu.Unlock()
}

// pageList is an intrusive doubly linked list of pages.
type pageList struct {
	head, tail *page
	n          int
}

func (l *pageList) pushBack(p *page) {
	p.prev, p.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = p
	} else {
		l.head = p
	}
	l.tail = p
	p.inLRU = true
	l.n++
}

func (l *pageList) remove(p *page) {
	if !p.inLRU {
		return
	}
	if p.prev != nil {
		p.prev.next = p.next
	} else {
		l.head = p.next
	}
	if p.next != nil {
		p.next.prev = p.prev
	} else {
		l.tail = p.prev
	}
	p.prev, p.next, p.inLRU = nil, nil, false
	l.n--
}
