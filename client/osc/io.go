package osc

import (
	"context"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/jobstats"
	"github.com/nacrefs/nacre/ldlm"
)

// ReadAt reads len(p) bytes of the object at offset off into p, under a
// PR lock it takes for the range (or a write lock it already holds).
// Cached pages are copied out; missing ones are read from the OST in RPCs
// of up to max_pages_per_rpc pages, and sequential or strided patterns
// are read ahead. Holes and bytes past the end of the object read as
// zeros (the file layer clips reads to the file size). It returns len(p),
// or fewer with an error.
func (o *Object) ReadAt(ctx context.Context, p []byte, off uint64) (int, error) {
	return o.readAt(ctx, nil, p, off)
}

// WriteAt writes p at object offset off, under a PW lock it takes for the
// range (Lustre's cl_io write): the bytes are copied into cached pages
// that become dirty within the OST's grant and max_dirty_mb, and the
// writeback engine sends them later. Pages that cannot get grant (the OST
// is filling up) are written at once without it, and an OST out of space
// then fails the write with ENOSPC. It returns len(p), or the bytes
// written before an error.
func (o *Object) WriteAt(ctx context.Context, p []byte, off uint64) (int, error) {
	return o.writeAt(ctx, nil, p, off)
}

// window returns the bytes of [off, end) one pass of I/O takes: up to a
// full RPC of pages.
func (o *Object) window(off, end uint64) uint64 {
	return min(end, pageFloor(off)+uint64(o.c.rpcPages())*PageSize)
}

func (o *Object) writeAt(ctx context.Context, lk *Lock, p []byte, off uint64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	end := off + uint64(len(p))
	if end < off || end > MaxObjectSize {
		return 0, o.errorf("write [%d,+%d): %w", off, len(p), syscall.EFBIG)
	}
	if job := jobstats.JobOf(ctx); job != "" {
		// Writeback sends the data later, tagged with the last writer's
		// job (job_stats on the OST).
		o.mu.Lock()
		o.mu.job = job
		o.mu.Unlock()
	}
	if lk == nil {
		l, err := o.Lock(ctx, true, pageFloor(off), pageCeil(end)-1)
		if err != nil {
			return 0, err
		}
		defer l.Release()
		lk = l
	} else if !lk.covers(true, off, end) {
		return 0, o.errorf("write [%d,%d) under %v %v: %w", off, end, lk.info.mode, lk.info.ext, ErrLockRange)
	}
	done := 0
	for done < len(p) {
		woff := off + uint64(done)
		wend := o.window(woff, end)
		n, err := o.writeWindow(ctx, lk.l, p[done:done+int(wend-woff)], woff)
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// pageSpan returns the part of page i that the I/O [off, end) covers.
func pageSpan(i, off, end uint64) span {
	s := wholePage
	if i == off/PageSize {
		s.from = int(off % PageSize)
	}
	if i == (end-1)/PageSize {
		s.to = int((end-1)%PageSize) + 1
	}
	return s
}

// writeWindow writes buf, at most a full RPC of pages, at off, under l.
func (o *Object) writeWindow(ctx context.Context, l *ldlm.ClientLock, buf []byte, off uint64) (int, error) {
	c := o.c
	end := off + uint64(len(buf))
	first, last := off/PageSize, (end-1)/PageSize
	// The algorithm the pages' sums are taken by, asked before the
	// object's lock is (it takes the import's, and the first call
	// measures the algorithms' speeds).
	summing := c.tun.checksums.Load()
	var ct ptlrpc.ChecksumType
	if summing {
		ct = c.ChecksumType()
	}
	for {
		o.mu.Lock()
		if l.Gone() {
			o.mu.Unlock()
			return 0, o.lockGone(l)
		}
		busy, pinned, flushFirst := o.mu.truncating > 0, false, false
		var fill []uint64
		need := 0
		for i := first; i <= last && !busy; i++ {
			p := o.mu.pages.get(i)
			switch {
			case p == nil:
				need++
			case p.state != pageIdle:
				busy = true
			case p.pins > 0:
				// A read hands its bytes to the kernel as they are.
				busy, pinned = true, true
			case p.clean():
				if p.unstable != 0 && !p.uptodate() && !p.valid.empty() && !p.valid.touches(pageSpan(i, off, end)) {
					// The page's piece was sent and is not committed: a
					// rewrite after an OST restart needs it, so it may not
					// give way to the new bytes as a committed piece does.
					// Read the rest of the page first: whole, it holds both.
					fill = append(fill, i)
				}
				need++
			case !p.uptodate() && !p.valid.touches(pageSpan(i, off, end)):
				// A dirty piece the new bytes do not join: send it first,
				// as a page holds one piece of partial data.
				flushFirst = true
			}
		}
		if busy {
			if err := o.waitBusyLocked(ctx, pinned); err != nil {
				return 0, err
			}
			continue
		}
		if flushFirst {
			o.mu.Unlock()
			if err := o.flushPages(ctx, first, last); err != nil {
				return 0, err
			}
			continue
		}
		if len(fill) > 0 {
			o.mu.Unlock()
			var noRA func()
			scratch := make([]byte, PageSize)
			for _, i := range fill {
				if err := o.readWindow(ctx, l, scratch, nil, i*PageSize, &noRA, nil); err != nil {
					return 0, o.errorf("read of page %d before a write into it: %w", i, err)
				}
			}
			continue
		}
		ok, wait := c.charge(need)
		if !ok && wait {
			o.mu.Unlock()
			if err := c.waitRoom(ctx); err != nil {
				return 0, err
			}
			continue
		}
		charged := 0
		if ok {
			charged = need
		}
		// The window's cached pages leave the LRU first, so that making
		// room for the others does not evict them.
		absent := 0
		var present []*page
		for i := first; i <= last; i++ {
			if p := o.mu.pages.get(i); p == nil {
				absent++
			} else {
				present = append(present, p)
			}
		}
		c.cache.lruRemove(present)
		bufs := c.cache.allocLocked(o, absent)
		fresh := make([]*page, 0, len(bufs))
		for i := first; i <= last && len(fresh) < len(bufs); i++ {
			if o.mu.pages.get(i) == nil {
				fresh = append(fresh, &page{obj: o, idx: i, data: bufs[len(fresh)]})
			}
		}
		if len(bufs) < absent {
			c.cache.release(fresh)
			c.cache.lruUpdate(present)
			o.mu.Unlock()
			c.uncharge(charged)
			if err := c.cache.waitSpace(ctx); err != nil {
				return 0, err
			}
			continue
		}
		for _, p := range fresh {
			o.mu.pages.set(p.idx, p)
		}
		n, sync := o.applyWriteLocked(buf, off, ok, summing, ct)
		o.mu.Unlock()
		if sync == nil {
			return n, nil
		}
		c.st.syncWrites.Add(1)
		c.startWrite(sync)
		// The RPC goes on if ctx ends: it may carry pages of earlier
		// writes, already reported written (goWrite). This write then
		// reports the bytes before the RPC's.
		select {
		case err := <-c.goWrite(ctx, sync, nil):
			if err != nil {
				return n, err
			}
			return len(buf), nil
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
}

// applyWriteLocked copies buf into the window's pages, which are all
// cached and idle. With charged, every page that was clean becomes dirty
// within the grant; without, the first such page and every page after it
// go into a write RPC the caller sends now (pages of earlier writes among
// them give their charge back: the RPC is not from grant). It returns the
// bytes of buf before that RPC's first page, and the RPC. With summing,
// each page's sum of its dirty bytes is brought up to date by algorithm ct
// as the bytes are copied in (page.resum).
func (o *Object) applyWriteLocked(buf []byte, off uint64, charged, summing bool, ct ptlrpc.ChecksumType) (int, *brwRPC) {
	c := o.c
	end := off + uint64(len(buf))
	first, last := off/PageSize, (end-1)/PageSize
	exact, esize := o.exactSizeLocked()
	now := time.Now().UnixNano()
	var sync *brwRPC
	n := len(buf)
	pulled, added := 0, false
	lru := make([]*page, 0, last-first+1)
	for i := first; i <= last; i++ {
		p := o.mu.pages.get(i)
		ws := pageSpan(i, off, end)
		wasClean := p.clean()
		if p.valid.empty() || (wasClean && !p.uptodate() && !p.valid.touches(ws)) {
			p.valid = span{}
			if exact && p.off(0) >= esize {
				// Past the end of the object: zeros around what is written.
				clear(p.data[:ws.from])
				clear(p.data[ws.to:])
				p.valid = wholePage
			}
		}
		at := int(p.off(ws.from) - off)
		copy(p.data[ws.from:ws.to], buf[at:at+ws.to-ws.from])
		p.valid = p.valid.union(ws)
		was := p.dirty
		p.dirty = p.dirty.union(ws)
		if summing {
			p.resum(ct, was, ws)
		} else {
			p.sumOf = span{}
		}
		lru = append(lru, p)
		if sync == nil && wasClean && !charged {
			sync = &brwRPC{obj: o, write: true, sync: true, mtime: now}
			n = at
		}
		switch {
		case sync != nil:
			if p.charged {
				pulled++
				o.undirtyLocked(p)
			}
			p.state = pageWriteback
			o.mu.busy++
			o.mu.writeback++
			sync.add(p, p.dirty) // one extent: the window is contiguous
		case wasClean:
			p.charged = true
			o.addDirtyLocked(p)
			added = true
		}
	}
	if sync != nil {
		sync.pulled = pulled
	}
	o.mu.sizeSeen = max(o.mu.sizeSeen, end)
	o.mu.mtime = now
	c.cache.lruUpdate(lru)
	if pulled > 0 {
		c.uncharge(pulled)
	}
	if added {
		full := len(o.mu.dirtyIdx) >= c.rpcPages()
		c.mu.Lock()
		c.queueLocked(o)
		full = full || c.mu.dirty*2 >= c.dirtyPages()
		c.mu.Unlock()
		if full {
			c.kickWriteback(false)
		}
	}
	return n, sync
}

func (o *Object) readAt(ctx context.Context, lk *Lock, p []byte, off uint64) (int, error) {
	return o.read(ctx, lk, p, nil, off)
}

// read reads len(p) bytes at off into p, or, with v, as slices of the
// pages read, pinned, added to v (or, past the cache's share of pins,
// copied into p, whose slice is added to v).
func (o *Object) read(ctx context.Context, lk *Lock, p []byte, v *Vec, off uint64) (int, error) {
	n := len(p)
	if n == 0 {
		return 0, nil
	}
	end := off + uint64(n)
	if end < off {
		return 0, o.errorf("read [%d,+%d): %w", off, n, syscall.EINVAL)
	}
	if lk == nil {
		l, err := o.Lock(ctx, false, pageFloor(off), pageCeil(end)-1)
		if err != nil {
			return 0, err
		}
		defer l.Release()
		lk = l
	} else if !lk.covers(false, off, end) {
		return 0, o.errorf("read [%d,%d) under %v %v: %w", off, end, lk.info.mode, lk.info.ext, ErrLockRange)
	}
	c := o.c
	o.mu.Lock()
	exts := o.mu.ra.access(off, uint64(n), o.raWindow(), uint64(c.rpcPages())*PageSize)
	limit := pageCeil(o.kmsLocked())
	o.mu.Unlock()
	if lk.info.ext.End != ^uint64(0) {
		limit = min(limit, lk.info.ext.End+1)
	}
	exts = clipExtents(exts, limit)
	ra := func() {
		if len(exts) > 0 {
			o.readAhead(lk.l, exts)
		}
	}
	done := 0
	missed := false
	for done < n {
		woff := off + uint64(done)
		wend := o.window(woff, end)
		if err := o.readWindow(ctx, lk.l, p[done:done+int(wend-woff)], v, woff, &ra, &missed); err != nil {
			return done, err
		}
		done += int(wend - woff)
	}
	if missed && len(exts) == 0 {
		// Pages of the stream that the state counts as read ahead are
		// gone (a lock callback dropped them, the cache evicted them, or
		// this is a second pass over the file): the next read goes ahead
		// again from here, instead of reading page by page up to where
		// the first pass read ahead.
		o.mu.Lock()
		o.mu.ra.rewind(pageCeil(end))
		o.mu.Unlock()
	}
	return done, nil
}

// raWindow is the most o reads ahead.
func (o *Object) raWindow() uint64 {
	c := o.c
	perFile := c.cache.raFilePages()
	return raWindowOf(c.cache.raPages(), perFile, c.rpcPages(), o.raShare(uint64(perFile)*PageSize))
}

// raWindowOf is the read-ahead window of one of share objects a file is
// striped over, in bytes, for a client budget, a per-file window and an
// RPC size, all in pages: its share of max_read_ahead_per_file_mb, but at
// least two RPCs (one in flight while the reader takes the other) and at
// most its share of the client's budget (one RPC at least, and never more
// than the budget). Either budget at 0 turns read-ahead off.
func raWindowOf(budgetPages, perFilePages, rpcPages, share int) uint64 {
	if budgetPages == 0 || perFilePages == 0 {
		return 0
	}
	share = max(share, 1)
	most := min(budgetPages, max(budgetPages/share, rpcPages))
	return uint64(min(most, max(perFilePages/share, 2*rpcPages))) * PageSize
}

// clipExtents cuts exts at limit.
func clipExtents(exts []extent, limit uint64) []extent {
	out := exts[:0]
	for _, e := range exts {
		e.end = min(e.end, limit)
		if e.start < e.end {
			out = append(out, e)
		}
	}
	return out
}

// lockGone is the error of I/O under l after an eviction dropped it: its
// hook has dropped what l covered, and pages cached under it now would
// stay with no lock to call them back (stale for every later reader), or
// go to the OST dirty with nobody's lock held.
func (o *Object) lockGone(l *ldlm.ClientLock) error {
	return o.errorf("lock %v %v: dropped by an eviction: %w", l.Mode(), l.Policy().Extent, syscall.EIO)
}

// readWindow reads buf, at most a full RPC of pages, at off, under l: it
// copies out what is cached and valid, waits for pages other RPCs are
// filling, and fills the rest with one read RPC. *ra starts read-ahead
// once, after the window's own RPC is built (so that it goes first) or
// once the window is served from the cache. *missed, if missed is not nil,
// is set when pages had to be read for the window (none was cached).
func (o *Object) readWindow(ctx context.Context, l *ldlm.ClientLock, buf []byte, v *Vec, off uint64, ra *func(), missed *bool) error {
	if job := jobstats.JobOf(ctx); job != "" {
		o.mu.Lock()
		o.mu.readJob = job // read-ahead goes on this reader's behalf
		o.mu.Unlock()
	}
	c := o.c
	end := off + uint64(len(buf))
	first, last := off/PageSize, (end-1)/PageSize
	startRA := func() {
		if f := *ra; f != nil {
			*ra = nil
			f()
		}
	}
	var missing []uint64
	var mine []*page
	defer func() {
		if len(mine) == 0 {
			return
		}
		// Pages filled for this read and not copied out (an error) may be
		// evicted again.
		o.mu.Lock()
		var lru []*page
		for _, p := range mine {
			if p.held && o.mu.pages.get(p.idx) == p {
				p.held = false
				lru = append(lru, p)
			}
		}
		c.cache.lruUpdate(lru)
		o.mu.Unlock()
	}()
	for {
		o.mu.Lock()
		missing = missing[:0]
		// A truncate in progress: pages filled now could hold bytes its
		// punch is about to remove.
		wait := o.mu.truncating > 0
		for i := first; i <= last && !wait; i++ {
			p := o.mu.pages.get(i)
			switch {
			case p == nil:
				missing = append(missing, i)
			case p.state == pageFilling:
				wait = true
			case p.valid.covers(pageSpan(i, off, end)):
			case p.state == pageWriteback:
				wait = true
			default:
				missing = append(missing, i)
			}
		}
		if len(missing) == 0 && !wait {
			lru := make([]*page, 0, last-first+1)
			hits := 0
			// Pinned, unless the pages pinned would pass their share of
			// the cache: then copied, as without v, so that reads holding
			// pins never keep one another (or themselves) from the room
			// they need.
			pin := v != nil && c.cache.reservePins(o, first, last)
			for i := first; i <= last; i++ {
				p := o.mu.pages.get(i)
				s := pageSpan(i, off, end)
				if pin {
					v.pinLocked(p, p.data[s.from:s.to])
				} else {
					at := int(p.off(s.from) - off)
					copy(buf[at:at+s.to-s.from], p.data[s.from:s.to])
				}
				if p.ra {
					p.ra = false
					hits++
				}
				p.held = false
				lru = append(lru, p)
			}
			if v != nil && !pin {
				v.AppendBuf(buf)
			}
			c.cache.lruUpdate(lru)
			o.mu.Unlock()
			mine = nil
			c.cache.raUsed(hits)
			c.st.raHits.Add(uint64(hits))
			c.st.hits.Add(uint64(len(lru)))
			startRA()
			return nil
		}
		if len(missing) == 0 || o.mu.truncating > 0 {
			ch := o.mu.changed
			o.mu.Unlock()
			if err := o.wait(ctx, ch); err != nil {
				return err
			}
			continue
		}
		if l.Gone() {
			o.mu.Unlock()
			return o.lockGone(l)
		}
		r := &brwRPC{obj: o, job: jobstats.JobOf(ctx)}
		exact, esize := o.exactSizeLocked()
		absent := 0
		for _, i := range missing {
			if o.mu.pages.get(i) == nil {
				absent++
			}
		}
		if absent > 0 && missed != nil {
			*missed = true
		}
		bufs := c.cache.allocLocked(o, absent)
		full, filling := len(bufs) < absent, 0
		var zeroed []*page
		for _, i := range missing {
			p := o.mu.pages.get(i)
			if p == nil {
				if len(bufs) == 0 {
					break
				}
				b := bufs[0]
				bufs = bufs[1:]
				p = &page{obj: o, idx: i, data: b}
				o.mu.pages.set(i, p)
				if exact && p.off(0) >= esize {
					clear(b)
					p.valid = wholePage
					zeroed = append(zeroed, p)
					continue
				}
			}
			n := len(r.nbs)
			ok := true
			if p.valid.empty() {
				ok = r.add(p, wholePage)
			} else {
				if p.valid.from > 0 {
					ok = r.add(p, span{0, p.valid.from})
				}
				if ok && p.valid.to < PageSize {
					ok = r.add(p, span{p.valid.to, PageSize})
				}
			}
			if !ok {
				// Out of niobufs: undo this page's ranges, the rest next time.
				r.nbs = r.nbs[:n]
				for len(r.segs) > 0 && r.segs[len(r.segs)-1].p == p {
					r.bytes -= r.segs[len(r.segs)-1].s.to - r.segs[len(r.segs)-1].s.from
					r.segs = r.segs[:len(r.segs)-1]
				}
				r.bufs = rebuildBufs(r.segs)
				if p.valid.empty() {
					o.mu.pages.del(i)
					c.cache.release([]*page{p})
				}
				break
			}
			p.state = pageFilling
			p.held = true
			o.mu.busy++
			mine = append(mine, p)
			filling++
		}
		c.cache.freeBufs(bufs)
		c.cache.lruUpdate(zeroed)
		c.cache.lruRemove(mine[len(mine)-filling:]) // partly valid pages were evictable
		o.mu.Unlock()
		c.st.misses.Add(uint64(filling + len(zeroed)))
		if len(r.segs) > 0 {
			startRA()
			err := c.rslots.Acquire(ctx)
			if err == nil {
				_, err = c.brw(ctx, r)
				c.rslots.Release()
			}
			o.fillDone(r, err)
			if err != nil {
				return err
			}
		}
		if full {
			if err := c.cache.waitSpace(ctx); err != nil {
				return err
			}
		}
	}
}

// rebuildBufs recomputes the bulk buffers of segs.
func rebuildBufs(segs []seg) [][]byte {
	var r brwRPC
	for _, s := range segs {
		r.add(s.p, s.s)
	}
	return r.bufs
}

// readAhead reads the extents ahead asynchronously: the pages not cached,
// in RPCs of up to max_pages_per_rpc pages that do not cross an RPC-size
// boundary (several extents of a strided pattern share one RPC, as
// niobufs), as long as read RPC slots (keeping one for readers),
// read-ahead budget and cache space last, for a reader under l (which
// covers them).
func (o *Object) readAhead(l *ldlm.ClientLock, exts []extent) {
	c := o.c
	rpcPages := uint64(c.rpcPages())
	// The pages to read, in order, grouped into RPCs.
	var groups [][]uint64
	o.mu.Lock()
	var cur []uint64
	for _, e := range exts {
		for i := e.start / PageSize; i < e.end/PageSize; i++ {
			if o.mu.pages.get(i) != nil {
				continue
			}
			if len(cur) > 0 && (uint64(len(cur)) == rpcPages || i/rpcPages != cur[0]/rpcPages) {
				groups = append(groups, cur)
				cur = nil
			}
			cur = append(cur, i)
		}
	}
	if len(cur) > 0 {
		groups = append(groups, cur)
	}
	o.mu.Unlock()
	for _, g := range groups {
		if !c.rslots.TryAcquireSpare() {
			// No RPC slot to spare: what is left goes ahead at the
			// reader's next access instead of never.
			o.mu.Lock()
			o.mu.ra.rewind(g[0] * PageSize)
			o.mu.Unlock()
			return
		}
		budget := c.cache.raCharge(len(g))
		r := &brwRPC{obj: o}
		o.mu.Lock()
		if o.mu.truncating > 0 || l.Gone() {
			// A truncate is cutting the object (readWindow waits for it):
			// it dropped the pages past the new size already, and pages
			// read now could get the bytes its punch is about to remove,
			// to be read back as data if the object grows again. Or an
			// eviction dropped the reader's lock (see lockGone).
			o.mu.Unlock()
			c.cache.raUsed(budget)
			c.rslots.Release()
			return
		}
		r.job = o.mu.readJob
		bufs := c.cache.allocLocked(o, budget)
		exhausted := budget < len(g) || len(bufs) < budget
		for _, i := range g {
			if len(bufs) == 0 {
				break
			}
			if o.mu.pages.get(i) != nil {
				continue // cached meanwhile
			}
			p := &page{obj: o, idx: i, data: bufs[0], state: pageFilling}
			if !r.add(p, wholePage) {
				exhausted = true
				break
			}
			bufs = bufs[1:]
			p.ra = true
			o.mu.pages.set(i, p)
			o.mu.busy++
		}
		c.cache.freeBufs(bufs)
		o.mu.Unlock()
		c.cache.raUsed(budget - len(r.segs))
		if len(r.segs) == 0 {
			c.rslots.Release()
			if exhausted {
				return
			}
			continue
		}
		c.st.raPages.Add(uint64(len(r.segs)))
		c.wg.Go(func() {
			_, err := c.brw(c.ctx, r)
			c.rslots.Release()
			o.fillDone(r, err)
		})
		if exhausted {
			return
		}
	}
}
