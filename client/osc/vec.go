package osc

// Vec is the bytes of a read as slices of the cached pages that hold
// them, in order, and of other buffers: what a FUSE reply gives the kernel
// without first copying the bytes into a buffer of its own. The pages are
// pinned until Release: their bytes do not change (a write into them
// waits) and their buffers go to no other page. Release it soon; a Vec
// not released keeps its pages from eviction. The zero Vec is empty.
type Vec struct {
	bufs  [][]byte
	pages []*page
	n     int
}

// Bufs returns the slices, in order: they are the pages' own memory,
// valid until Release, and must not be written to.
func (v *Vec) Bufs() [][]byte { return v.bufs }

// Len returns the bytes the slices hold.
func (v *Vec) Len() int { return v.n }

// AppendBuf adds b, a buffer of the caller's (zeros for a hole, say).
func (v *Vec) AppendBuf(b []byte) {
	if len(b) > 0 {
		v.add(b)
	}
}

// Append moves w's slices and pins to the end of v; w is empty after.
func (v *Vec) Append(w *Vec) {
	for _, b := range w.bufs {
		v.add(b)
	}
	v.pages = append(v.pages, w.pages...)
	*w = Vec{}
}

// add appends b, joining it to the last slice when b continues it in
// memory (pages of one slab are contiguous), so that a run of pages is
// one iovec.
func (v *Vec) add(b []byte) {
	if len(b) == 0 {
		return
	}
	v.n += len(b)
	if k := len(v.bufs) - 1; k >= 0 {
		last := v.bufs[k]
		if cap(last) > len(last) && &last[:len(last)+1][len(last)] == &b[0] && cap(last)-len(last) >= len(b) {
			v.bufs[k] = last[:len(last)+len(b)]
			return
		}
	}
	v.bufs = append(v.bufs, b)
}

// pinLocked adds b, bytes of p's buffer, and pins p; p's object lock is
// held.
func (v *Vec) pinLocked(p *page, b []byte) {
	p.pins++
	v.pages = append(v.pages, p)
	v.add(b)
}

// Release unpins the pages; v is empty after. Safe to call again.
func (v *Vec) Release() {
	ps := v.pages
	*v = Vec{}
	for len(ps) > 0 {
		// The run of pages of one object, under one hold of its lock.
		o := ps[0].obj
		k := 1
		for k < len(ps) && ps[k].obj == o {
			k++
		}
		o.unpin(ps[:k])
		ps = ps[k:]
	}
}

// unpin drops a pin of each page of o in ps: a page dropped from o
// meanwhile gives its buffer back to the cache with its last pin, and a
// write waiting for the bytes to stay still is woken.
func (o *Object) unpin(ps []*page) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var spare []*page
	unpinned := 0
	for _, p := range ps {
		p.pins--
		if p.pins > 0 {
			continue
		}
		unpinned++
		if p.spare != nil {
			spare = append(spare, p)
		}
	}
	if unpinned > 0 {
		o.c.cache.unpinned(unpinned)
	}
	if len(spare) > 0 {
		o.c.cache.freeSpare(spare)
	}
	if unpinned > 0 && o.mu.waitPins > 0 {
		o.broadcastLocked()
	}
}
