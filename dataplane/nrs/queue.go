package nrs

import "sort"

// itemQueue is a FIFO of items in arrival (seq) order. It is not safe for
// concurrent use; the Head's mutex guards every queue.
type itemQueue struct {
	items []*Item // items[head:] are queued, oldest first
	head  int     // index of the oldest queued item
}

// shrinkCap is the capacity above which an emptied queue gives its backing
// array back, so that a class that once held a burst does not keep the
// memory while idle.
const shrinkCap = 64

func (q *itemQueue) len() int { return len(q.items) - q.head }

// peek returns the oldest item, or nil if the queue is empty.
func (q *itemQueue) peek() *Item {
	if q.head == len(q.items) {
		return nil
	}
	return q.items[q.head]
}

func (q *itemQueue) push(it *Item) { q.items = append(q.items, it) }

// pop removes and returns the oldest item; the queue must not be empty.
func (q *itemQueue) pop() *Item {
	it := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	switch {
	case q.head == len(q.items):
		q.reset()
	case q.head >= shrinkCap && 2*q.head >= len(q.items):
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return it
}

// insert adds it in seq order. Items arriving through Enqueue always go to
// the back; re-classified items may land in the middle.
func (q *itemQueue) insert(it *Item) {
	live := q.items[q.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].seq > it.seq })
	if i == len(live) {
		q.push(it)
		return
	}
	q.items = append(q.items, nil)
	live = q.items[q.head:]
	copy(live[i+1:], live[i:])
	live[i] = it
}

// all returns the queued items, oldest first. The slice aliases the queue.
func (q *itemQueue) all() []*Item { return q.items[q.head:] }

// reset empties the queue.
func (q *itemQueue) reset() {
	if cap(q.items) > shrinkCap {
		q.items = nil
	} else {
		clear(q.items)
		q.items = q.items[:0]
	}
	q.head = 0
}

// fifo is the FIFO policy: one queue, first in first out.
type fifo struct {
	q itemQueue
}

func (p *fifo) enqueue(it *Item) { p.q.push(it) }

func (p *fifo) dequeue() *Item {
	if p.q.len() == 0 {
		return nil
	}
	return p.q.pop()
}

func (p *fifo) drain() []*Item {
	items := append([]*Item(nil), p.q.all()...)
	p.q.reset()
	return items
}
