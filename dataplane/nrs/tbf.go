package nrs

import (
	"container/heap"
	"container/list"
	"slices"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// keyFields says which request fields make up a TBF class key: requests
// that match the same rule and agree on these fields share one bucket.
type keyFields uint8

const (
	keyNID keyFields = 1 << iota
	keyJobID
	keyOpcode
)

// rule is a Rule as a head holds it. Guarded by Head.mu.
type rule struct {
	Rule                     // the definition; Burst is never 0 here
	fields     keyFields     // class key under policy "tbf": the fields Match tests, NID for "*"
	interval   time.Duration // time between two tokens, 1s/Rate
	tau        time.Duration // how far a bucket may run ahead: (Burst-1)*interval
	dispatched uint64        // requests released through the rule's classes
}

// newRule makes the head's copy of a validated r.
func newRule(r Rule) *rule {
	nr := &rule{Rule: Rule{Name: r.Name, Match: r.Match.clone()}}
	if len(r.Match.NIDs) > 0 {
		nr.fields |= keyNID
	}
	if len(r.Match.JobIDs) > 0 {
		nr.fields |= keyJobID
	}
	if len(r.Match.Opcodes) > 0 {
		nr.fields |= keyOpcode
	}
	if nr.fields == 0 {
		nr.fields = keyNID // "*" and the default rule: one bucket per client
	}
	nr.set(r.Rate, r.Burst)
	return nr
}

// set changes the rate and burst; 0 leaves a value as it is, except that a
// rule with no burst yet gets DefaultBurst.
func (r *rule) set(rate, burst int) {
	if rate != 0 {
		r.Rate = rate
	}
	if burst != 0 {
		r.Burst = burst
	}
	if r.Burst == 0 {
		r.Burst = DefaultBurst
	}
	r.interval = time.Second / time.Duration(r.Rate)
	r.tau = time.Duration(r.Burst-1) * r.interval
}

// classKey identifies a TBF class. Fields the rule's classes are not keyed
// by are zero.
type classKey struct {
	rule  *rule
	nid   lwire.NID
	jobID string
	op    wire.Opcode
}

// class is one token bucket and the FIFO of requests waiting on it.
//
// The bucket is kept as a theoretical arrival time (tat), as in the generic
// cell rate algorithm: a request may go at now when now >= tat - tau, and
// going moves tat to max(tat, now) + interval. This is exactly a bucket of
// Burst tokens refilled at Rate, held in one timestamp and exact in
// nanoseconds.
type class struct {
	key   classKey
	q     itemQueue
	tat   time.Time
	index int           // position in tbf.active, or -1 when q is empty
	idle  *list.Element // position in tbf.idle, or nil when q is not empty
}

// deadline is when the class's next token is available.
func (c *class) deadline() time.Time { return c.tat.Add(-c.key.rule.tau) }

// tbf is the Token Bucket Filter policy. Guarded by Head.mu.
type tbf struct {
	rules   *ruleSet            // the head's rules, shared with it
	mode    keyFields           // class key for every rule, or 0 to key by rule (policy "tbf")
	classes map[classKey]*class // every class, active or idle
	active  classHeap           // classes with queued requests, earliest deadline first
	idle    list.List           // classes without requests, least recently used first
	limit   func() int          // the most classes to keep
	queued  int                 // requests in all classes
}

func newTBF(rules *ruleSet, mode keyFields, limit func() int) *tbf {
	return &tbf{rules: rules, mode: mode, classes: make(map[classKey]*class), limit: limit}
}

// keyOf classifies it: the first matching rule, and the fields that rule's
// classes are keyed by.
func (t *tbf) keyOf(it *Item) classKey {
	r := t.rules.match(it)
	f := t.mode
	if f == 0 {
		f = r.fields
	}
	k := classKey{rule: r}
	if f&keyNID != 0 {
		k.nid = it.NID
	}
	if f&keyJobID != 0 {
		k.jobID = it.JobID
	}
	if f&keyOpcode != 0 {
		k.op = it.Opcode
	}
	return k
}

func (t *tbf) enqueue(it *Item, now time.Time) {
	c := t.classFor(t.keyOf(it), now)
	c.q.insert(it)
	t.activate(c)
	t.queued++
}

// classFor returns the class for k, creating it with a full bucket. To make
// room it first drops idle classes whose buckets have refilled (they hold
// nothing a new class would not), then, past the limit, the least recently
// used idle classes: a flood of distinct clients cannot grow the map past
// the limit, at the price of forgetting the token debt of idle clients.
func (t *tbf) classFor(k classKey, now time.Time) *class {
	if c := t.classes[k]; c != nil {
		return c
	}
	for e := t.idle.Front(); e != nil; e = t.idle.Front() {
		c := e.Value.(*class)
		if c.tat.After(now) && len(t.classes) < t.limit() {
			break
		}
		t.drop(c)
	}
	c := &class{key: k, tat: now, index: -1}
	t.classes[k] = c
	return c
}

// drop forgets an idle class.
func (t *tbf) drop(c *class) {
	t.idle.Remove(c.idle)
	c.idle = nil
	delete(t.classes, c.key)
}

// activate puts a class that has requests in the active heap.
func (t *tbf) activate(c *class) {
	if c.idle != nil {
		t.idle.Remove(c.idle)
		c.idle = nil
	}
	if c.index < 0 {
		heap.Push(&t.active, c)
	} else {
		heap.Fix(&t.active, c.index)
	}
}

// popFrom removes the oldest request of an active class and moves the
// class to the idle list if that was its last.
func (t *tbf) popFrom(c *class) *Item {
	it := c.q.pop()
	t.queued--
	c.key.rule.dispatched++
	if c.q.len() == 0 {
		heap.Remove(&t.active, c.index)
		c.idle = t.idle.PushBack(c)
	} else {
		heap.Fix(&t.active, c.index)
	}
	return it
}

// dequeue releases the request of the class with the earliest deadline if
// that class has a token at now. Otherwise it returns nil and the time the
// next token becomes available, or the zero time if nothing is queued.
func (t *tbf) dequeue(now time.Time) (*Item, time.Time) {
	if len(t.active) == 0 {
		return nil, time.Time{}
	}
	c := t.active[0]
	if d := c.deadline(); d.After(now) {
		return nil, d
	}
	if c.tat.Before(now) {
		c.tat = now
	}
	c.tat = c.tat.Add(c.key.rule.interval)
	return t.popFrom(c), time.Time{}
}

// ready returns the time the next request may be released; ok is false if
// nothing is queued.
func (t *tbf) ready() (at time.Time, ok bool) {
	if len(t.active) == 0 {
		return time.Time{}, false
	}
	return t.active[0].deadline(), true
}

// take removes a request ignoring tokens: the one dequeue would release
// next once its token came. It returns nil if nothing is queued.
func (t *tbf) take() *Item {
	if len(t.active) == 0 {
		return nil
	}
	return t.popFrom(t.active[0])
}

// drain removes every request, returning them in arrival order, and drops
// every class.
func (t *tbf) drain() []*Item {
	items := make([]*Item, 0, t.queued)
	for _, c := range t.active {
		items = append(items, c.q.all()...)
	}
	slices.SortFunc(items, bySeq)
	clear(t.classes)
	t.active = nil
	t.idle.Init()
	t.queued = 0
	return items
}

// reclassify matches every queued request against the rules again after
// they changed, moving requests whose class changed (keeping arrival order
// within each class) and dropping the classes of rules no longer in the set.
func (t *tbf) reclassify(now time.Time) {
	var moved []*Item
	for _, c := range t.active {
		kept := c.q.items[:c.q.head]
		for _, it := range c.q.all() {
			if t.keyOf(it) == c.key {
				kept = append(kept, it)
			} else {
				moved = append(moved, it)
			}
		}
		clear(c.q.items[len(kept):])
		c.q.items = kept
	}
	for k, c := range t.classes {
		if !t.rules.has(k.rule) {
			delete(t.classes, k) // all its requests moved: its rule is gone
			if c.idle != nil {
				t.idle.Remove(c.idle)
				c.idle = nil
			}
		}
	}
	t.active = t.active[:0]
	for _, c := range t.classes {
		if c.q.len() > 0 {
			c.index = len(t.active)
			t.active = append(t.active, c)
		} else {
			c.index = -1
			if c.idle == nil {
				c.q.reset()
				c.idle = t.idle.PushBack(c)
			}
		}
	}
	heap.Init(&t.active)
	slices.SortFunc(moved, bySeq)
	t.queued -= len(moved)
	for _, it := range moved {
		t.enqueue(it, now)
	}
}

// rescale keeps the token debt of r's classes, counted in tokens, when its
// interval changes from old: a class that was to wait 2 tokens at the old
// rate waits 2 tokens at the new one.
func (t *tbf) rescale(r *rule, old time.Duration, now time.Time) {
	for k, c := range t.classes {
		if k.rule != r || !c.tat.After(now) || old == r.interval {
			continue
		}
		debt := float64(c.tat.Sub(now)) * float64(r.interval) / float64(old)
		c.tat = now.Add(time.Duration(debt))
	}
	heap.Init(&t.active)
}

// ruleStats counts classes and queued requests per rule.
func (t *tbf) ruleStats() map[*rule][2]int {
	m := make(map[*rule][2]int)
	for k, c := range t.classes {
		s := m[k.rule]
		s[0]++
		s[1] += c.q.len()
		m[k.rule] = s
	}
	return m
}

func bySeq(a, b *Item) int {
	switch {
	case a.seq < b.seq:
		return -1
	case a.seq > b.seq:
		return 1
	}
	return 0
}

// classHeap orders active classes by deadline, then by the arrival of
// their oldest request, so that among classes with a token the one that
// has been entitled longest goes first and ties go to the older request.
type classHeap []*class

func (h classHeap) Len() int { return len(h) }

func (h classHeap) Less(i, j int) bool {
	di, dj := h[i].deadline(), h[j].deadline()
	if !di.Equal(dj) {
		return di.Before(dj)
	}
	return h[i].q.peek().seq < h[j].q.peek().seq
}

func (h classHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *classHeap) Push(x any) {
	c := x.(*class)
	c.index = len(*h)
	*h = append(*h, c)
}

func (h *classHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	c.index = -1
	*h = old[:len(old)-1]
	return c
}
