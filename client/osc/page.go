package osc

import "github.com/nacrefs/nacre/dataplane/ptlrpc"

// pageState says whether an RPC is using a page.
type pageState uint8

const (
	// pageIdle: no RPC uses the page.
	pageIdle pageState = iota
	// pageFilling: a read RPC is filling the page; nobody else touches it.
	pageFilling
	// pageWriteback: a write RPC is sending the page's dirty bytes; it may
	// be read, not written, until the RPC ends (LNet reads it in place and
	// the checksum covers it).
	pageWriteback
)

// span is a byte range of a page, [from, to); from == to is empty.
type span struct{ from, to int }

func (s span) empty() bool { return s.from >= s.to }

// covers reports whether s holds all of o.
func (s span) covers(o span) bool { return o.empty() || (s.from <= o.from && o.to <= s.to) }

// touches reports whether s and o overlap or meet, so their union is one
// span.
func (s span) touches(o span) bool { return s.from <= o.to && o.from <= s.to }

// union returns the smallest span holding s and o.
func (s span) union(o span) span {
	switch {
	case s.empty():
		return o
	case o.empty():
		return s
	}
	return span{min(s.from, o.from), max(s.to, o.to)}
}

// intersect returns the bytes both s and o hold.
func (s span) intersect(o span) span {
	if r := (span{max(s.from, o.from), min(s.to, o.to)}); !r.empty() {
		return r
	}
	return span{}
}

var wholePage = span{0, PageSize}

// page is one PageSize piece of an object in the cache (Lustre's
// osc_page over a VM page). Its bytes are the object's where valid says
// so; dirty bytes were written by the application and not yet acknowledged
// by the OST. A page that is not wholly valid holds exactly what was
// written into it (valid equals or contains dirty), so a partial write
// needs no read first; a read of the rest fills it from the OST.
type page struct {
	obj  *Object
	idx  uint64 // page index in the object
	data []byte // PageSize bytes; nil once freed

	// Guarded by obj.mu.
	valid, dirty span
	state        pageState
	// charged: the page is dirty within the grant and counts against
	// max_dirty_mb until the OST acknowledges it.
	charged bool
	// ra: read ahead and not used yet (counts against max_read_ahead_mb).
	ra bool
	// held: a reader filled the page and has yet to copy it out; it is
	// kept off the LRU until then.
	held bool
	// unstable is the transno of the write that last sent the page, while
	// the OST has not committed it (see recovery.go); such a page stays.
	unstable uint64
	// sent spans the bytes the writes not yet committed sent (from the
	// first to the last): what a rewrite after an OST restart writes
	// again. Not the valid bytes: those may run past the object's end
	// (a page read whole, or cut by a truncate, which the OST replays
	// before the rewrite), and writing them would make the object longer.
	sent span
	// sum is the checksum, by sumType, of the page's bytes sumOf (its
	// dirty bytes), taken as they were written in while they were in the
	// CPU's cache, when the OSC checksums: a write RPC joins its pages'
	// sums (brwRPC.joinSum) instead of reading all its data again to sum
	// it. sumOf is empty when there is none; whatever changes the dirty
	// bytes other than a write drops it.
	sum     uint32
	sumType ptlrpc.ChecksumType
	sumOf   span
	// pins counts the Vecs that hold slices of data (a read handed to
	// the kernel without a copy): the bytes may not change, nor the
	// buffer go to another page, until the last is released. A pinned
	// page dropped from its object keeps its buffer in spare, counted in
	// the cache, until then.
	pins  int
	spare []byte

	// Guarded by Cache.mu.
	prev, next *page
	inLRU      bool
}

// uptodate reports whether every byte of the page is the object's.
func (p *page) uptodate() bool { return p.valid == wholePage }

// clean reports whether the page has no dirty bytes.
func (p *page) clean() bool { return p.dirty.empty() }

// evictable reports whether the page may go on the LRU: clean, idle, not
// waited for, and committed.
func (p *page) evictable() bool {
	return p.clean() && p.state == pageIdle && !p.held && p.unstable == 0
}

// resum brings p's checksum up to date after a write put bytes ws into
// it, its dirty bytes having been was: it goes on from the old sum when
// the write appended to them, and sums the dirty bytes afresh otherwise.
func (p *page) resum(t ptlrpc.ChecksumType, was, ws span) {
	if p.sumOf == was && !was.empty() && p.sumType == t && ws.from == was.to && p.dirty == (span{was.from, ws.to}) {
		p.sum = t.Update(p.sum, p.data[ws.from:ws.to])
	} else {
		p.sum, p.sumType = t.Update(0, p.data[p.dirty.from:p.dirty.to]), t
	}
	p.sumOf = p.dirty
}

// off returns the object offset of byte i of the page.
func (p *page) off(i int) uint64 { return p.idx*PageSize + uint64(i) }
