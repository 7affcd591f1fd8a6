package nrs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// Policy names, as lctl's nrs_policies parameter takes them.
const (
	// PolicyFIFO serves requests in arrival order.
	PolicyFIFO = "fifo"
	// PolicyTBF rate-limits requests by rule; each rule's classes are
	// keyed by the fields its expression tests (see the package doc).
	PolicyTBF = "tbf"
	// PolicyTBFNID, PolicyTBFJobID and PolicyTBFOpcode are TBF with every
	// class keyed by one field whatever the rule, as Lustre's
	// "tbf nid", "tbf jobid" and "tbf opcode".
	PolicyTBFNID    = "tbf nid"
	PolicyTBFJobID  = "tbf jobid"
	PolicyTBFOpcode = "tbf opcode"
)

// DefaultMaxQueued is the queue bound of a Config whose MaxQueued is 0.
const DefaultMaxQueued = 1024

// maxMaxQueued bounds MaxQueued so that a typo cannot reserve gigabytes.
const maxMaxQueued = 1 << 20

// Item is one request in a head. The caller fills the exported fields
// before Enqueue and must not change them, or enqueue the item again, until
// Get or TryGet has returned it.
type Item struct {
	// NID is the client's NID, for nid={...} rules.
	NID lwire.NID
	// JobID is the job id the request carries, for jobid={...} rules.
	JobID string
	// Opcode is the request's opcode, for opcode={...} rules.
	Opcode wire.Opcode
	// Value is the caller's request; the head never looks at it.
	Value any

	seq    uint64 // arrival order; guarded by Head.mu
	queued bool   // in a head; guarded by Head.mu
}

// Config configures a Head. The zero Config is valid: a FIFO head of
// DefaultMaxQueued items on the real clock.
type Config struct {
	// MaxQueued bounds the items queued across all classes; 0 means
	// DefaultMaxQueued. At most 1<<20.
	MaxQueued int
	// Clock drives TBF; nil means the real clock.
	Clock Clock
	// Policy is the initial policy: "" or "fifo", "tbf", "tbf nid",
	// "tbf jobid", "tbf opcode".
	Policy string
}

// DefaultConfig returns the configuration NewHead gives a zero Config.
func DefaultConfig() Config {
	return Config{MaxQueued: DefaultMaxQueued, Policy: PolicyFIFO}
}

// Validate returns nil if NewHead accepts c, or an error wrapping
// ErrBadConfig or ErrBadPolicy.
func (c Config) Validate() error {
	if c.MaxQueued < 0 || c.MaxQueued > maxMaxQueued {
		return &kindError{ErrBadConfig, fmt.Sprintf("nrs: config: MaxQueued %d: want 0 to %d", c.MaxQueued, maxMaxQueued)}
	}
	_, _, err := parsePolicy(c.Policy)
	return err
}

// parsePolicy returns a policy's canonical name and, for TBF, its key mode
// (0: by rule). Words may be separated by any whitespace, in any case.
func parsePolicy(name string) (canon string, mode keyFields, err error) {
	canon = strings.ToLower(strings.Join(strings.Fields(name), " "))
	switch canon {
	case "", PolicyFIFO:
		return PolicyFIFO, 0, nil
	case PolicyTBF:
		return PolicyTBF, 0, nil
	case PolicyTBFNID:
		return canon, keyNID, nil
	case PolicyTBFJobID:
		return canon, keyJobID, nil
	case PolicyTBFOpcode:
		return canon, keyOpcode, nil
	}
	if len(name) > 64 {
		name = name[:64] + "..."
	}
	return "", 0, &kindError{ErrBadPolicy, fmt.Sprintf("nrs: unknown policy %q: want fifo, tbf, tbf nid, tbf jobid or tbf opcode", name)}
}

// ruleSet is a head's ordered TBF rules. Guarded by Head.mu.
type ruleSet struct {
	list []*rule // in match order; the default rule is always last
}

// match returns the first rule it matches; the default rule matches all.
func (s *ruleSet) match(it *Item) *rule {
	for _, r := range s.list {
		if r.Match.Matches(it.NID, it.JobID, it.Opcode) {
			return r
		}
	}
	return s.list[len(s.list)-1]
}

func (s *ruleSet) has(r *rule) bool { return slices.Contains(s.list, r) }

// find returns the index of the rule named name, or -1.
func (s *ruleSet) find(name string) int {
	return slices.IndexFunc(s.list, func(r *rule) bool { return r.Name == name })
}

// Head is the request scheduler of one service: it holds the requests that
// arrived but are not being handled yet, at most MaxQueued of them, and
// releases them to handlers in the order its policy decides.
//
// All methods are safe for concurrent use: Enqueue is called from LNet
// event callbacks and never blocks; Get is called by a pool of handler
// goroutines; the rest by administration at any time.
type Head struct {
	clock     Clock
	maxQueued int
	done      chan struct{} // closed by Close, wakes every Get

	// mu guards the queue, the rules and the sleeping Get calls. Waking
	// follows one rule (wakeLocked): after any change that can make an
	// item releasable sooner, a sleeping Get is signalled unless a
	// signalled one is already on its way or the timekeeper's timer fires
	// in time. A Get that leaves holding a signal or the timer (its ctx
	// ended) passes it on, so no item waits while a Get sleeps.
	mu struct {
		sync.Mutex
		closed     bool              // set once by Close
		policy     string            // canonical name of the active policy
		fifo       *fifo             // the queue when policy is fifo, else nil
		tbf        *tbf              // the queue when policy is a TBF one, else nil
		rules      ruleSet           // TBF rules, kept whatever the policy
		queued     int               // items in fifo or tbf
		seq        uint64            // seq of the last item enqueued
		dispatched uint64            // items returned by Get and TryGet
		rejected   uint64            // Enqueue calls that returned false
		byPolicy   map[string]uint64 // dispatched per policy name; at most one key per policy
		waiters    []*waiter         // Get calls asleep, not yet signalled
		signalled  int               // waiters signalled that have not taken mu since
		timekeeper *waiter           // the waiter whose timer fires at timerAt, or nil
		timerAt    time.Time         // when the timekeeper wakes
	}
}

// waiters keeps the waiters of Get calls that have returned: a service's
// handler goroutine sleeps in Get between requests, and a new waiter (and
// its channel) for every sleep was two allocations per request.
var waiters = sync.Pool{New: func() any { return &waiter{ch: make(chan struct{}, 1)} }}

// waiter is one Get call asleep.
type waiter struct {
	ch        chan struct{} // receives the one signal, capacity 1
	inList    bool          // in Head.mu.waiters; guarded by Head.mu
	signalled bool          // signalled and not yet awake; guarded by Head.mu
}

// NewHead returns an empty head, or an error if cfg.Validate fails.
func NewHead(cfg Config) (*Head, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxQueued == 0 {
		cfg.MaxQueued = DefaultMaxQueued
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	h := &Head{clock: cfg.Clock, maxQueued: cfg.MaxQueued, done: make(chan struct{})}
	h.mu.rules.list = []*rule{newRule(Rule{Name: DefaultRuleName, Rate: DefaultRate})}
	h.mu.byPolicy = make(map[string]uint64)
	name, mode, _ := parsePolicy(cfg.Policy)
	h.setPolicyLocked(name, mode)
	return h, nil
}

// setPolicyLocked installs an empty policy.
func (h *Head) setPolicyLocked(name string, mode keyFields) {
	h.mu.policy = name
	h.mu.fifo, h.mu.tbf = nil, nil
	if name == PolicyFIFO {
		h.mu.fifo = &fifo{}
		return
	}
	h.mu.tbf = newTBF(&h.mu.rules, mode, h.classLimitLocked)
}

// classLimitLocked is the most TBF classes the head keeps: one per item it
// can queue, plus one per rule so that every rule has room for an idle
// class.
func (h *Head) classLimitLocked() int { return h.maxQueued + len(h.mu.rules.list) }

// Enqueue queues it and reports true, or reports false, without blocking
// and without queueing it, if MaxQueued items are already queued, the head
// is closed, it is nil or it is already queued. It never waits for room:
// the caller answers a refused request with -EAGAIN.
func (h *Head) Enqueue(it *Item) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.enqueueLocked(it)
}

func (h *Head) enqueueLocked(it *Item) bool {
	if it == nil || it.queued || h.mu.closed || h.mu.queued >= h.maxQueued {
		h.mu.rejected++
		return false
	}
	h.wakeLocked(h.addLocked(it))
	return true
}

// addLocked puts it in the policy's queue and returns the time it used.
func (h *Head) addLocked(it *Item) time.Time {
	h.mu.seq++
	it.seq, it.queued = h.mu.seq, true
	h.mu.queued++
	now := h.nowLocked()
	if h.mu.fifo != nil {
		h.mu.fifo.enqueue(it)
	} else {
		h.mu.tbf.enqueue(it, now)
	}
	return now
}

// EnqueueOrTake is Enqueue for a caller that can run the item itself: when
// nothing is queued and the policy releases it at once (always under fifo;
// under TBF when its class has a token), it is counted in and out as if
// queued and returned by Get, and EnqueueOrTake reports taken; no sleeping
// Get is woken. Otherwise it is queued as Enqueue queues it (ok), or
// refused as Enqueue refuses (!ok). Items queued earlier always go first:
// one is never taken past them.
func (h *Head) EnqueueOrTake(it *Item) (taken, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.queued > 0 || it == nil || it.queued || h.mu.closed {
		return false, h.enqueueLocked(it)
	}
	now := h.addLocked(it)
	if got, _ := h.dequeueLocked(now); got != nil {
		// The only item queued, so it.
		return true, true
	}
	h.wakeLocked(now) // its class has no token: a Get waits for it
	return false, true
}

// Get returns the next item the policy releases, waiting as long as it
// takes: under TBF until a class has a token. Three other things end the
// wait: ctx ends (Get returns ctx.Err()), or the head is closed (Get returns
// ErrClosed; items still queued are left for TryGet). Any number of
// goroutines may call Get at once; each item goes to exactly one of them.
func (h *Head) Get(ctx context.Context) (*Item, error) {
	var w *waiter
	defer func() {
		if w != nil {
			waiters.Put(w) // left (leaveLocked) at the end of its last wait
		}
	}()
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		if err := ctx.Err(); err != nil {
			h.wakeLocked(h.clock.Now()) // pass on a signal or timer this call held
			return nil, err
		}
		if h.mu.closed {
			return nil, ErrClosed
		}
		now := h.nowLocked()
		it, next := h.dequeueLocked(now)
		if it != nil {
			h.wakeLocked(now)
			return it, nil
		}
		if w == nil {
			w = waiters.Get().(*waiter)
		}
		w.inList = true
		h.mu.waiters = append(h.mu.waiters, w)
		var timer Timer
		var fire <-chan time.Time
		if !next.IsZero() && (h.mu.timekeeper == nil || next.Before(h.mu.timerAt)) {
			h.mu.timekeeper, h.mu.timerAt = w, next
			timer = h.clock.NewTimer(next.Sub(now))
			fire = timer.C()
		}
		h.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-h.done:
		case <-w.ch:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		h.mu.Lock()
		h.leaveLocked(w)
	}
}

// nowLocked is the time TBF's tokens go by; fifo does without the clock.
func (h *Head) nowLocked() time.Time {
	if h.mu.tbf == nil {
		return time.Time{}
	}
	return h.clock.Now()
}

// dequeueLocked asks the policy for an item at now. Without one it returns
// the time one will be released (zero if nothing is queued or it depends
// on no time).
func (h *Head) dequeueLocked(now time.Time) (*Item, time.Time) {
	var it *Item
	var next time.Time
	if h.mu.fifo != nil {
		it = h.mu.fifo.dequeue()
	} else {
		it, next = h.mu.tbf.dequeue(now)
	}
	if it != nil {
		h.tookLocked(it)
	}
	return it, next
}

// tookLocked accounts for an item leaving the head.
func (h *Head) tookLocked(it *Item) {
	it.queued = false
	h.mu.queued--
	h.mu.dispatched++
	h.mu.byPolicy[h.mu.policy]++
}

// leaveLocked takes an awake waiter out of the waiting state, whatever
// woke it.
func (h *Head) leaveLocked(w *waiter) {
	switch {
	case w.signalled:
		w.signalled = false
		h.mu.signalled--
		select {
		case <-w.ch:
		default:
		}
	case w.inList:
		i := slices.Index(h.mu.waiters, w)
		h.mu.waiters = slices.Delete(h.mu.waiters, i, i+1)
		w.inList = false
	}
	if h.mu.timekeeper == w {
		h.mu.timekeeper = nil
	}
}

// wakeLocked signals a sleeping Get when queued work would otherwise have
// nobody to take it: when an item can be released now, or when the next
// one becomes releasable before any armed timer fires and no signalled
// waiter is on its way to arm one. It is called after every change that
// can make an item releasable sooner, so the waiters never sleep through
// work (see Get).
func (h *Head) wakeLocked(now time.Time) {
	if len(h.mu.waiters) == 0 || h.mu.queued == 0 {
		return
	}
	if h.mu.tbf != nil {
		at, _ := h.mu.tbf.ready()
		if at.After(now) {
			if h.mu.signalled > 0 || (h.mu.timekeeper != nil && !h.mu.timerAt.After(at)) {
				return
			}
		}
	}
	w := h.mu.waiters[len(h.mu.waiters)-1]
	h.mu.waiters = h.mu.waiters[:len(h.mu.waiters)-1]
	w.inList, w.signalled = false, true
	h.mu.signalled++
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// Poll returns the next item the policy releases now, as Get would, or
// nil without waiting if none is (or the head is closed).
func (h *Head) Poll() *Item {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.closed {
		return nil
	}
	now := h.nowLocked()
	it, _ := h.dequeueLocked(now)
	if it != nil {
		h.wakeLocked(now)
	}
	return it
}

// TryGet removes and returns an item if one is queued, ignoring TBF
// tokens (the item TBF would release next once its token came); it reports
// false if the head is empty. It never blocks and works after Close: the
// service drains the head with it at shutdown.
func (h *Head) TryGet() (*Item, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var it *Item
	if h.mu.fifo != nil {
		it = h.mu.fifo.dequeue()
	} else {
		it = h.mu.tbf.take()
	}
	if it == nil {
		return nil, false
	}
	h.tookLocked(it)
	return it, true
}

// Len returns the number of items queued.
func (h *Head) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.queued
}

// Close wakes every Get, which returns ErrClosed, and makes every later
// Enqueue return false. Items still queued stay for TryGet. Calling Close
// again does nothing.
func (h *Head) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.mu.closed {
		h.mu.closed = true
		close(h.done)
	}
}

// Policy returns the active policy's canonical name ("fifo", "tbf",
// "tbf nid", ...).
func (h *Head) Policy() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.policy
}

// SetPolicy switches to the named policy (as Config.Policy) keeping every
// queued item: they move to the new policy in arrival order, none lost,
// none repeated. TBF bucket state starts afresh; rules are kept whatever
// the policy. Setting the active policy again does nothing. An unknown
// name returns an error wrapping ErrBadPolicy and changes nothing.
func (h *Head) SetPolicy(name string) error {
	canon, mode, err := parsePolicy(name)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if canon == h.mu.policy {
		return nil
	}
	var items []*Item
	if h.mu.fifo != nil {
		items = h.mu.fifo.drain()
	} else {
		items = h.mu.tbf.drain()
	}
	h.setPolicyLocked(canon, mode)
	now := h.clock.Now()
	for _, it := range items {
		if h.mu.fifo != nil {
			h.mu.fifo.enqueue(it)
		} else {
			h.mu.tbf.enqueue(it, now)
		}
	}
	h.wakeLocked(now)
	return nil
}

// Stats is a snapshot of a head's counters.
type Stats struct {
	// Policy is the active policy's name.
	Policy string
	// Queued is the number of items queued.
	Queued int
	// Dispatched counts items returned by Get and TryGet since NewHead.
	Dispatched uint64
	// Rejected counts Enqueue calls that returned false.
	Rejected uint64
	// ByPolicy counts dispatched items per policy name; the values add up
	// to Dispatched.
	ByPolicy map[string]uint64
	// Classes is the number of TBF classes held (0 under fifo).
	Classes int
	// Rules is the number of TBF rules, the default rule included.
	Rules int
}

// Stats returns a snapshot of the head's counters.
func (h *Head) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := Stats{
		Policy: h.mu.policy, Queued: h.mu.queued, Dispatched: h.mu.dispatched, Rejected: h.mu.rejected,
		ByPolicy: make(map[string]uint64, len(h.mu.byPolicy)), Rules: len(h.mu.rules.list),
	}
	for k, v := range h.mu.byPolicy {
		s.ByPolicy[k] = v
	}
	if h.mu.tbf != nil {
		s.Classes = len(h.mu.tbf.classes)
	}
	return s
}
