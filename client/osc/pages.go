package osc

// pageTable holds an object's cached pages by index in chunks of
// chunkPages consecutive pages, found through a map: a sequential read or
// write walks its pages one by one, and a map lookup for each (256 for
// every MiB) cost it more than copying the data did. The walk looks the
// map up once per chunk, and not at all while it stays in the chunk it
// used last. The zero value is empty and ready. Guarded by Object.mu.
type pageTable struct {
	chunks  map[uint64]*pageChunk
	n       int // pages held
	lastKey uint64
	last    *pageChunk // the chunk of lastKey, or nil
}

const (
	chunkShift = 5
	chunkPages = 1 << chunkShift
	chunkMask  = chunkPages - 1
)

type pageChunk struct {
	p [chunkPages]*page
	n int // pages held
}

func (t *pageTable) chunk(i uint64) *pageChunk {
	k := i >> chunkShift
	if t.last != nil && t.lastKey == k {
		return t.last
	}
	c := t.chunks[k]
	if c != nil {
		t.lastKey, t.last = k, c
	}
	return c
}

// get returns page i, or nil.
func (t *pageTable) get(i uint64) *page {
	if c := t.chunk(i); c != nil {
		return c.p[i&chunkMask]
	}
	return nil
}

// set makes p page i.
func (t *pageTable) set(i uint64, p *page) {
	c := t.chunk(i)
	if c == nil {
		if t.chunks == nil {
			t.chunks = make(map[uint64]*pageChunk)
		}
		c = &pageChunk{}
		t.chunks[i>>chunkShift] = c
		t.lastKey, t.last = i>>chunkShift, c
	}
	if c.p[i&chunkMask] == nil {
		c.n++
		t.n++
	}
	c.p[i&chunkMask] = p
}

// del drops page i.
func (t *pageTable) del(i uint64) {
	c := t.chunk(i)
	if c == nil || c.p[i&chunkMask] == nil {
		return
	}
	c.p[i&chunkMask] = nil
	c.n--
	t.n--
	if c.n == 0 {
		delete(t.chunks, i>>chunkShift)
		if t.last == c {
			t.last = nil
		}
	}
}

// len returns how many pages the table holds.
func (t *pageTable) len() int { return t.n }

// all yields every page, in no particular order; the loop may drop the
// page it is given.
func (t *pageTable) all(yield func(*page) bool) {
	for _, c := range t.chunks {
		for _, p := range c.p {
			if p != nil && !yield(p) {
				return
			}
		}
	}
}
