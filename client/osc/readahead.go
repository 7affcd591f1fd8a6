package osc

// Read-ahead detection (Lustre's ll_readahead_state and ras_update), pure
// logic, kept per object: a striped file read sequentially reads each of
// its objects sequentially, so per-object state sees the pattern whatever
// the striping.
//
// Two patterns are recognised:
//
//   - Sequential: each read starts inside or right at the end of the one
//     before, or, once the pattern is seen, inside what is read ahead and
//     within raOutOfOrder of the one before (reads overtaking each
//     other). From the second such read on, the object is read ahead by a
//     window that starts at four times the read (at least raMinWindow) and
//     doubles each time more is read ahead, up to the per-object maximum.
//     More is read ahead when less than half the window is left ahead of the
//     reader, so read-ahead goes out in pieces of at least half a window.
//   - Strided: reads of one length whose starts are a fixed distance apart
//     (a process reading its column of a matrix). From the third read with
//     the same length and stride on, the next chunks are read ahead, as many
//     as fit in the window. A stride that begins inside a sequential
//     stream's read-ahead takes one read more to end the stream.
//
// Anything else resets the state.

// raMinWindow is the smallest read-ahead window.
const raMinWindow = 1 << 20

// extent is a byte range of an object, [start, end).
type extent struct{ start, end uint64 }

// raState is the read-ahead state of one object.
type raState struct {
	lastOff, lastEnd uint64 // the previous read
	seqHits          int    // consecutive sequential reads after the first
	window           uint64 // bytes to keep read ahead
	next             uint64 // first byte not read ahead yet (sequential) or next chunk start (strided)
	stride, chunk    uint64 // strided: distance between starts, read length
	strideHits       int
	started          bool
}

// access records a read of [off, off+n) and returns what to read ahead now,
// page-aligned and in order. maxWindow bounds the window (0: no
// read-ahead); sequential read-ahead ends on a multiple of align (the RPC
// size, so that read-ahead goes out in full RPCs).
func (r *raState) access(off, n, maxWindow, align uint64) []extent {
	if n == 0 {
		return nil
	}
	end := off + n
	defer func() { r.lastOff, r.lastEnd, r.started = off, end, true }()
	if maxWindow == 0 {
		r.reset()
		return nil
	}
	// A read that leaves a gap after the one before may be a step of a
	// stride, whether or not it lands in what is read ahead.
	if r.started && off > r.lastEnd {
		d := off - r.lastOff
		if d == r.stride && n == r.chunk {
			r.strideHits++
		} else {
			r.stride, r.chunk, r.strideHits = d, n, 0
		}
	} else {
		r.stride, r.chunk, r.strideHits = 0, 0, 0
	}
	seq := r.started && (off >= r.lastOff && off <= r.lastEnd || r.inStream(off))
	if seq && r.strideHits >= raStrideInStream && r.stride > r.chunk {
		// A stride that began inside a sequential stream: its steps
		// land in what is read ahead, close together, as reads
		// overtaking each other do. Equal steps of equal reads, several
		// in a row, end the stream, whose read-ahead would fetch the
		// gaps too.
		seq, r.window = false, 0
	}
	if seq {
		r.seqHits++
		if r.window == 0 {
			r.window = max(4*n, raMinWindow)
		}
		r.window = min(r.window, maxWindow)
		from := max(r.next, pageCeil(end))
		if r.next >= end && r.next-end >= r.window/2 {
			return nil // enough ahead already
		}
		to := pageCeil(end + r.window)
		if align > PageSize && to <= ^uint64(0)-align {
			to = (to + align - 1) / align * align
		}
		if to <= from {
			return nil
		}
		r.next = to
		r.window = min(2*r.window, maxWindow)
		return []extent{{from, to}}
	}
	// Not sequential: a stride?
	r.seqHits, r.next = 0, 0
	if r.strideHits == 0 {
		r.window = 0
	}
	if r.strideHits < 1 || r.stride <= r.chunk {
		return nil
	}
	if r.window == 0 {
		r.window = max(4*n, raMinWindow)
	}
	r.window = min(r.window, maxWindow)
	k := max(r.window/r.chunk, 1)
	first := off + r.stride
	if r.next > first {
		first = r.next
	}
	var out []extent
	limit := off + k*r.stride
	for s := first; s <= limit; s += r.stride {
		e := extent{pageFloor(s), pageCeil(s + r.chunk)}
		if len(out) > 0 && out[len(out)-1].end >= e.start {
			out[len(out)-1].end = e.end
		} else {
			out = append(out, e)
		}
		r.next = s + r.stride
	}
	r.window = min(2*r.window, maxWindow)
	return out
}

// raOutOfOrder is how far from the read before a read may start and still
// belong to its sequential stream: the kernel's read-ahead of a FUSE mount
// (4 MiB at most, as llite sets it) has that much in flight, as several
// reads served at once, which come in any order.
const raOutOfOrder = 4 << 20

// raStrideInStream is how many repeats of a step a stride that began inside
// a sequential stream needs before it ends the stream: one more than a
// stride needs elsewhere, since reads overtaking each other also step
// forward inside the stream (but rarely by the same step three times in a
// row without one coming back to fill a gap).
const raStrideInStream = 2

// inStream reports whether a read at off, though not right after the one
// before, belongs to the sequential stream being read ahead: it starts
// inside what is read ahead, and within raOutOfOrder (and a window) of the
// read before, on either side. A read overtaken by the next must not end
// the pattern; a read further away, even inside what is read ahead, is
// another pattern (random reads, a stride).
func (r *raState) inStream(off uint64) bool {
	tol := min(r.window, raOutOfOrder)
	return r.seqHits > 0 && off < r.next && off+tol >= r.lastOff && off <= r.lastEnd+tol
}

// rewind marks the bytes from off on as not read ahead (their RPCs could
// not be sent), so that the next access reads them ahead again.
func (r *raState) rewind(off uint64) {
	if r.next > off {
		r.next = off
	}
}

// reset forgets every pattern.
func (r *raState) reset() {
	*r = raState{lastOff: r.lastOff, lastEnd: r.lastEnd, started: r.started}
}

// pageFloor rounds x down to a page boundary.
func pageFloor(x uint64) uint64 { return x &^ (PageSize - 1) }

// pageCeil rounds x up to a page boundary (saturating near 2^64).
func pageCeil(x uint64) uint64 {
	if x > ^uint64(0)-PageSize {
		return pageFloor(^uint64(0))
	}
	return (x + PageSize - 1) &^ (PageSize - 1)
}
