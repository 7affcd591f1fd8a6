package ldlm

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/jobstats"
	ldlmv1 "github.com/nacrefs/nacre/proto/nacre/ldlm/v1"
)

// Defaults of a ClientConfig.
const (
	// DefaultLRUSize is how many unused locks a client keeps per target
	// (Lustre's lru_size). Lustre's fixed default is 100 per CPU, but by
	// default its servers size the clients' LRUs (lru_size=0, from the
	// server's lock volume), which lets a client keep thousands; without
	// that, a fixed bound of that order serves alike: a client that walks
	// a directory of a few thousand files (ls -l, mdtest, a build) keeps
	// their names and attributes cached, instead of giving back the lock
	// of one file to take that of the next, an RPC each. A lock and what
	// the client caches under it take about 1 KiB.
	DefaultLRUSize = 4096
	// DefaultLRUMaxAge is how long an unused lock is kept (Lustre's
	// lru_max_age, 3900 s).
	DefaultLRUMaxAge = 3900 * time.Second
	// DefaultCancelDelay is how long a lock cancelled to trim the LRU waits
	// to ride on the next enqueue to its target (early lock cancel) before
	// it gets a CANCEL of its own.
	DefaultCancelDelay = 100 * time.Millisecond
	// DefaultCancelBatch bounds the handles in one cancel or enqueue.
	DefaultCancelBatch = 64
	// cancelWorkers run the flush hooks of locks being given back.
	cancelWorkers = 2
)

// ErrLockFailed wraps the errno of a waiting lock the server would not
// grant (EDEADLK for a POSIX lock in a deadlock).
var ErrLockFailed = errors.New("ldlm: lock failed")

// Hooks are what the layer above a lock does when the lock's server needs
// it: the OSC writes back dirty pages of the lock's extent and drops its
// cached pages there; the MDC drops cached attributes, entries and layouts.
type Hooks struct {
	// Blocking runs before the lock is given back (a blocking AST, LRU
	// trimming, eviction): flush what the lock protects and drop it from
	// caches. ctx ends when the client closes. evicted says the server has
	// already dropped the lock: drop caches, flushing is pointless.
	Blocking func(ctx context.Context, l *ClientLock, evicted bool)
	// Glimpse returns the holder's view of the resource (size, times) for
	// a glimpse AST; nil means the LVB the lock was granted with.
	Glimpse func(l *ClientLock) LVB
	// Convert, if not nil, lets an unused IBITS lock whose blocking AST
	// conflicts with only some of its bits keep the others, LOOKUP among
	// them (Lustre's ibits convert): it drops what the dropped bits
	// protected and says whether to go on (false: the lock is given back
	// whole, Blocking then runs).
	Convert func(ctx context.Context, l *ClientLock, dropped Bits) bool
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// LRUSize bounds the unused locks kept per target; 0 means
	// DefaultLRUSize.
	LRUSize int
	// LRUMaxAge is how long an unused lock is kept; 0 means
	// DefaultLRUMaxAge.
	LRUMaxAge time.Duration
	// CancelDelay and CancelBatch tune early lock cancel; 0 means the
	// defaults.
	CancelDelay time.Duration
	CancelBatch int
	// Logger receives the client's logs; nil means slog.Default().
	Logger *slog.Logger
}

// ClientStats are a Client's counters.
type ClientStats struct {
	// Locks counts the locks the client knows; Unused those in LRUs.
	Locks, Unused int
	// Enqueues counts enqueue RPCs; Matches enqueues served from a cached
	// lock without an RPC; Glimpses the glimpse enqueues (GlimpseLock).
	Enqueues, Matches, Glimpses uint64
	// Duplicates counts intent locks given back at once because a lock
	// the client held already served (the old one was kept).
	Duplicates uint64
	// Served counts unused inode bits locks given back because a lock
	// granted since on the same resource covers all they did (Retire).
	Served uint64
	// CancelRPCs counts LDLM_CANCEL requests; EarlyCancels the handles
	// carried inside enqueues instead; Converts the LDLM_CONVERTs that
	// kept some bits of a lock a blocking AST asked for.
	CancelRPCs, EarlyCancels, Converts uint64
	// BlockingASTs, CompletionASTs and GlimpseASTs count callbacks served.
	BlockingASTs, CompletionASTs, GlimpseASTs uint64
}

// Client is the client side of the lock manager for every target a
// process talks to: it enqueues locks through imports, matches new needs
// against granted locks, keeps unused locks in an LRU per target, gives
// locks back early (inside the next enqueue), and serves the server's
// callbacks (Handlers, on the client's LDLM_CB_REQUEST_PORTAL service).
// Safe for concurrent use.
type Client struct {
	cfg    ClientConfig
	log    *slog.Logger
	ctx    context.Context
	stop   func()
	wg     sync.WaitGroup
	cancel chan *ClientLock // locks whose hooks and CANCEL are due
	// converts are locks to convert to fewer IBITS bits.
	converts chan conversion
	kick     chan struct{}

	mu struct {
		sync.Mutex
		next   uint64
		locks  map[uint64]*ClientLock // by client handle
		ns     map[*ptlrpc.Import]*clientNS
		closed bool
	}

	enqueues, matches, duplicates, cancelRPCs, earlyCancels, convertRPCs, blASTs, cpASTs, glASTs atomic.Uint64
	glimpses, served                                                                             atomic.Uint64
}

// clientNS is a client's view of one target's namespace.
type clientNS struct {
	imp *ptlrpc.Import
	// byRes holds the first of each resource's locks, which are chained
	// through their resPrev/resNext (no set to make per resource: an
	// uncontended lock is on a resource of its own).
	byRes  map[Resource]*ClientLock
	nlocks int
	lru    list.List // unused granted locks, least recently used first
	// pending are server handles given back locally and not yet told to
	// the server; since is when the oldest was added.
	pending []Handle
	since   time.Time
	// blocked are handles of locks given back after a blocking AST: the
	// server waits for them, maybe in handlers that hold up every other
	// request of the target. Only the flusher sends them, at once, in an
	// LDLM_CANCEL, which the target serves apart (ptlrpc.HighPriority);
	// never an enqueue or an MDS request, which would queue behind those
	// very handlers.
	blocked []Handle
	// sending: the flusher's LDLM_CANCEL of this namespace is in flight;
	// the next waits for it, but no other namespace's does (a target that
	// is down must not hold up the cancels a healthy one waits for, or
	// that one evicts the client).
	sending bool
	// converted are locks converted locally (GiveBackUnused), each once,
	// whose new bits the server has not been told yet: the next enqueue or
	// MDS request takes them (TakeConverts), with the handles and bits the
	// locks have then (a lock replay gives them new handles).
	converted []*ClientLock
	// lruSize overrides ClientConfig.LRUSize for this namespace when
	// not 0 (ldlm.namespaces.*.lru_size).
	lruSize   int
	lruMaxAge time.Duration // lru_max_age of this namespace; 0: ClientConfig.LRUMaxAge
}

// lockState is where a client lock is in its life.
type lockState uint8

const (
	lockWaiting lockState = iota
	lockGranted
	lockConverting // giving back some IBITS bits, keeping the rest
	lockCancelling
	lockGone
)

// ClientLock is a lock as its client holds it. Its fields are read-only
// to callers.
type ClientLock struct {
	c      *Client
	ns     *clientNS
	handle uint64
	hooks  Hooks
	// Resource is the lock's resource.
	Resource Resource

	// Guarded by c.mu.
	// done is made by an Enqueue that must wait for the grant (most are
	// granted in the reply and make none) and closed when the lock leaves
	// lockWaiting: granted, failed or gone.
	done      chan struct{}
	remote    Handle
	mode      Mode
	policy    Policy
	lvb       LVB
	state     lockState
	users     int
	cbPending bool
	// discard: a blocking AST said the object is being destroyed
	// (DiscardData): what the lock covers is dropped, not written back.
	discard  bool
	err      error
	lru      *list.Element
	lastUsed time.Time
	// reblocked: another blocking AST came while the lock was
	// converting; it is given back whole then.
	reblocked bool
	// The resource's other locks in clientNS.byRes; linked says l is there.
	resPrev, resNext *ClientLock
	linked           bool
	// gone is set when the client forgets l (before its hook runs, when an
	// eviction drops it): what a caller caches under l after that would
	// outlive it.
	gone atomic.Bool
}

// Gone reports whether the client has forgotten l: cancelled, or dropped
// with its import by an eviction. A cache that files what a lock covers
// checks it under its own mutex, which the lock's hook takes too.
func (l *ClientLock) Gone() bool { return l.gone.Load() }

// Touch marks l used now without taking a reference: a cache that
// answers from what l covers keeps it from ageing out of the LRU first.
func (l *ClientLock) Touch() {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.lru != nil && l.state == lockGranted {
		l.lastUsed = time.Now()
		l.ns.lru.MoveToBack(l.lru)
	}
}

// queueHandleLocked queues a handle given back, for the server to hear of
// with the next enqueue or the flusher's CANCEL.
func (ns *clientNS) queueHandleLocked(h Handle) {
	if len(ns.pending) == 0 {
		ns.since = time.Now()
	}
	ns.pending = append(ns.pending, h)
}

// returnHandleLocked queues the handle of a lock given back: blocked (the
// server waits for it, after a blocking AST) for the flusher's next
// CANCEL, which the caller kicks, otherwise as queueHandleLocked.
func (ns *clientNS) returnHandleLocked(h Handle, blocked bool) {
	if blocked {
		ns.blocked = append(ns.blocked, h)
	} else {
		ns.queueHandleLocked(h)
	}
}

// replayableLocked reports whether l is replayed after a server restart,
// and whether as granted (Replay) rather than as a waiting request.
func (l *ClientLock) replayableLocked() (ok, granted bool) {
	granted = l.state == lockGranted || l.state == lockConverting
	return granted || l.state == lockWaiting && l.remote != 0, granted
}

// link files l under its resource.
func (ns *clientNS) link(l *ClientLock) {
	if l.linked {
		return
	}
	first := ns.byRes[l.Resource]
	l.resPrev, l.resNext, l.linked = nil, first, true
	if first != nil {
		first.resPrev = l
	}
	ns.byRes[l.Resource] = l
	ns.nlocks++
}

// unlink takes l out of its resource's chain.
func (ns *clientNS) unlink(l *ClientLock) {
	if !l.linked {
		return
	}
	switch {
	case l.resPrev != nil:
		l.resPrev.resNext = l.resNext
	case l.resNext != nil:
		ns.byRes[l.Resource] = l.resNext
	default:
		delete(ns.byRes, l.Resource)
	}
	if l.resNext != nil {
		l.resNext.resPrev = l.resPrev
	}
	l.resPrev, l.resNext, l.linked = nil, nil, false
	ns.nlocks--
}

// NewClient starts a lock client. Close stops it.
func NewClient(cfg ClientConfig) *Client {
	if cfg.LRUSize <= 0 {
		cfg.LRUSize = DefaultLRUSize
	}
	if cfg.LRUMaxAge <= 0 {
		cfg.LRUMaxAge = DefaultLRUMaxAge
	}
	if cfg.CancelDelay <= 0 {
		cfg.CancelDelay = DefaultCancelDelay
	}
	if cfg.CancelBatch <= 0 {
		cfg.CancelBatch = DefaultCancelBatch
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	c := &Client{cfg: cfg, log: lg, cancel: make(chan *ClientLock, 1024), converts: make(chan conversion, 1024), kick: make(chan struct{}, 1)}
	c.mu.locks = make(map[uint64]*ClientLock)
	c.mu.ns = make(map[*ptlrpc.Import]*clientNS)
	c.ctx, c.stop = context.WithCancel(context.Background())
	for range cancelWorkers {
		c.wg.Go(c.cancelWorker)
	}
	c.wg.Go(c.convertWorker)
	c.wg.Go(c.flusher)
	return c
}

// Handlers returns the callback handlers, for the client's service on
// ptlrpc.LDLMCBRequestPortal.
func (c *Client) Handlers() map[wire.Opcode]ptlrpc.HandlerSpec {
	return map[wire.Opcode]ptlrpc.HandlerSpec{
		wire.LDLMBlCallback: {Fn: c.handleBlocking, Flags: ptlrpc.NoExport},
		wire.LDLMCpCallback: {Fn: c.handleCompletion, Flags: ptlrpc.NoExport},
		wire.LDLMGlCallback: {Fn: c.handleGlimpse, Flags: ptlrpc.NoExport},
	}
}

// Stats returns the client's counters.
func (c *Client) Stats() ClientStats {
	c.mu.Lock()
	st := ClientStats{Locks: len(c.mu.locks)}
	for _, ns := range c.mu.ns {
		st.Unused += ns.lru.Len()
	}
	c.mu.Unlock()
	st.Enqueues, st.Matches, st.Duplicates, st.Glimpses = c.enqueues.Load(), c.matches.Load(), c.duplicates.Load(), c.glimpses.Load()
	st.Served = c.served.Load()
	st.CancelRPCs, st.EarlyCancels, st.Converts = c.cancelRPCs.Load(), c.earlyCancels.Load(), c.convertRPCs.Load()
	st.BlockingASTs, st.CompletionASTs, st.GlimpseASTs = c.blASTs.Load(), c.cpASTs.Load(), c.glASTs.Load()
	return st
}

// LRUSize returns how many unused locks the client keeps for the
// namespace of imp's target (Lustre's ldlm.namespaces.*.lru_size).
func (c *Client) LRUSize(imp *ptlrpc.Import) int {
	size, _ := c.lruRules(imp)
	return size
}

// lruRules returns imp's namespace's lru_size and lru_max_age.
func (c *Client) lruRules(imp *ptlrpc.Import) (size int, age time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lruRulesLocked(c.mu.ns[imp])
}

// lruRulesLocked returns ns's lru_size and lru_max_age: its own where
// set, else the client's (ns may be nil: none yet).
func (c *Client) lruRulesLocked(ns *clientNS) (size int, age time.Duration) {
	size, age = c.cfg.LRUSize, c.cfg.LRUMaxAge
	if ns != nil && ns.lruSize > 0 {
		size = ns.lruSize
	}
	if ns != nil && ns.lruMaxAge > 0 {
		age = ns.lruMaxAge
	}
	return size, age
}

// LRUMaxAge returns how long an unused lock of imp's namespace is kept.
func (c *Client) LRUMaxAge(imp *ptlrpc.Import) time.Duration {
	_, age := c.lruRules(imp)
	return age
}

// SetLRUMaxAge sets how long an unused lock of imp's namespace is kept
// (Lustre's lru_max_age); older ones are given back at the next trim.
func (c *Client) SetLRUMaxAge(imp *ptlrpc.Import, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("ldlm: lru_max_age %v: want a positive duration", d)
	}
	c.setNS(imp, func(ns *clientNS) { ns.lruMaxAge = d })
	return nil
}

// SetLRUSize sets how many unused locks the client keeps for imp's
// namespace; 0 goes back to ClientConfig.LRUSize (Lustre's 0, dynamic
// LRU sizing, is not implemented). Unused locks over the new size are
// given back at once, least recently used first. A negative n is an
// error.
func (c *Client) SetLRUSize(imp *ptlrpc.Import, n int) error {
	if n < 0 {
		return fmt.Errorf("ldlm: lru_size %d is negative", n)
	}
	c.setNS(imp, func(ns *clientNS) { ns.lruSize = n })
	return nil
}

// setNS changes imp's namespace with set and has the flusher trim its LRU
// by the new rules.
func (c *Client) setNS(imp *ptlrpc.Import, set func(*clientNS)) {
	c.mu.Lock()
	set(c.nsLocked(imp))
	c.mu.Unlock()
	c.kickFlusher()
}

// kickFlusher wakes the flusher, if it is not awake already.
func (c *Client) kickFlusher() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// NamespaceStats returns the locks the client holds in imp's namespace
// and how many of them are unused (lock_count, lock_unused_count).
func (c *Client) NamespaceStats(imp *ptlrpc.Import) (locks, unused int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns := c.mu.ns[imp]
	if ns == nil {
		return 0, 0
	}
	return ns.nlocks, ns.lru.Len()
}

// Mode returns the lock's mode as granted.
func (l *ClientLock) Mode() Mode {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.mode
}

// DiscardData reports whether a blocking AST asked for the lock because
// its object is being destroyed: its Blocking hook drops what the lock
// covers without writing it back.
func (l *ClientLock) DiscardData() bool {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.discard
}

// Policy returns the lock's policy as granted (the grown extent).
func (l *ClientLock) Policy() Policy {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.policy
}

// LVB returns the LVB the lock was granted with.
func (l *ClientLock) LVB() LVB {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.lvb
}

// Handle returns the server's handle of the lock.
func (l *ClientLock) Handle() Handle {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.remote
}

// Import returns the import the lock was taken through.
func (l *ClientLock) Import() *ptlrpc.Import { return l.ns.imp }

// Enqueue is a lock request from a client.
type Enqueue struct {
	Resource Resource
	Mode     Mode
	Policy   Policy
	// Flags are BlockNoWait and NoExpansion.
	Flags Flags
	// Intent, if not nil, is an operation for the target to run with the
	// enqueue; its answer is returned with the lock. Intents never match a
	// cached lock.
	Intent []byte
	// Hooks are the lock's flush and glimpse hooks.
	Hooks Hooks
	// KeepIntent, if not nil, gives the intent the enqueue is replayed
	// with, from the intent sent and the target's answer to it
	// (ptlrpc.Req.KeepBody); nil from it replays the intent sent.
	KeepIntent func(intent, reply []byte) []byte
}

// nsLocked returns imp's namespace view.
func (c *Client) nsLocked(imp *ptlrpc.Import) *clientNS {
	ns := c.mu.ns[imp]
	if ns == nil {
		ns = &clientNS{imp: imp, byRes: make(map[Resource]*ClientLock)}
		c.mu.ns[imp] = ns
	}
	return ns
}

// serves reports whether a granted lock of mode have and policy hp serves
// a need of mode want and policy wp (Lustre's ldlm_lock_match).
func serves(t Type, have Mode, hp Policy, want Mode, wp Policy) bool {
	switch want {
	case EX:
		if have != EX {
			return false
		}
	case PW:
		if have != PW && have != EX {
			return false
		}
	case PR:
		if have != PR && have != PW && have != EX {
			return false
		}
	case CW:
		if have != CW && have != PW && have != EX {
			return false
		}
	case CR:
		if have == NL || have == GROUP {
			return false
		}
	case GROUP:
		if have != GROUP || hp.GID != wp.GID {
			return false
		}
	}
	switch t {
	case TypeExtent:
		return hp.Extent.Start <= wp.Extent.Start && wp.Extent.End <= hp.Extent.End
	case TypeIBits:
		return wp.Bits&^hp.Bits == 0
	case TypeFlock:
		return false
	}
	return true
}

// matchLocked finds a granted lock that serves e and takes a reference.
func (c *Client) matchLocked(ns *clientNS, e *Enqueue) *ClientLock {
	for l := ns.byRes[e.Resource]; l != nil; l = l.resNext {
		if l.state != lockGranted || l.cbPending || !serves(e.Resource.Type, l.mode, l.policy, e.Mode, e.Policy) {
			continue
		}
		l.users++
		if l.lru != nil {
			ns.lru.Remove(l.lru)
			l.lru = nil
		}
		return l
	}
	return nil
}

// Enqueue gets a lock through imp: a cached lock that covers the need, or
// a new one from the server (waiting for its grant if it conflicts). The
// lock comes with a reference; Release it after use. With BlockNoWait a
// conflict returns an error wrapping ErrWouldBlock. intentReply and
// intentStatus are the target's answer to e.Intent; with an intent the
// server may grant no lock (nil).
func (c *Client) Enqueue(ctx context.Context, imp *ptlrpc.Import, e Enqueue) (l *ClientLock, intentReply []byte, intentStatus int32, err error) {
	var rep ldlmv1.EnqueueReply // on the stack (see below)
	l, sent, err := c.enqueue(ctx, imp, e, 0, &rep)
	if err != nil || !sent {
		return l, nil, 0, err
	}
	return l, rep.IntentReply, rep.IntentStatus, nil
}

// enqueue is Enqueue with wire flags of the daemon's own, decoding the
// reply into rep; sent is false for a lock matched locally (no RPC). It
// returns no lock when the target granted none.
func (c *Client) enqueue(ctx context.Context, imp *ptlrpc.Import, e Enqueue, wireExtra uint32, rep *ldlmv1.EnqueueReply) (l *ClientLock, sent bool, err error) {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil, false, fmt.Errorf("ldlm: client closed")
	}
	ns := c.nsLocked(imp)
	if e.Intent == nil && e.Resource.Type != TypeFlock {
		if l := c.matchLocked(ns, &e); l != nil {
			c.mu.Unlock()
			c.matches.Add(1)
			return l, false, nil
		}
	}
	if wireExtra&wireGlimpse == 0 {
		if ls := c.takeConflictingLocked(ns, &e); len(ls) > 0 {
			c.mu.Unlock()
			// Their hooks drop clean pages: not to be cut short by a
			// caller that gives up.
			hctx := context.WithoutCancel(ctx)
			for _, l := range ls {
				c.giveBack(hctx, l)
			}
			c.mu.Lock()
			if c.mu.closed {
				c.mu.Unlock()
				return nil, false, fmt.Errorf("ldlm: client closed")
			}
		}
	}
	c.mu.next++
	l = &ClientLock{c: c, ns: ns, handle: c.mu.next, hooks: e.Hooks, Resource: e.Resource, mode: e.Mode, policy: e.Policy,
		users: 1}
	c.mu.locks[l.handle] = l
	ns.link(l)
	// Early lock cancel: what waits to be given back rides along, and
	// what was converted.
	cancels, converts := c.takePendingLocked(ns), takeConvertsLocked(ns)
	c.mu.Unlock()

	// The request and the reply are encoded by their own generated
	// methods rather than through ptlrpc's proto.Message interface, so that
	// they and their parts stay on the stack: an uncontended lock is two
	// RPCs, and its allocations are most of what it adds to them.
	er := ldlmv1.EnqueueRequest{Resource: resourceToWire(e.Resource), Mode: uint32(e.Mode),
		Policy: policyToWire(e.Policy), Flags: uint32(e.Flags) | wireExtra, ClientHandle: l.handle, Cancels: cancels, Converts: converts, Intent: e.Intent}
	body, err := er.MarshalVT()
	if err != nil {
		c.forget(l)
		return nil, true, err
	}
	if wireExtra&wireGlimpse != 0 {
		c.glimpses.Add(1)
	} else {
		c.enqueues.Add(1)
	}
	preq := &ptlrpc.Req{Opcode: wire.LDLMEnqueue, Body: body, JobID: jobstats.JobOf(ctx)}
	if e.KeepIntent != nil {
		preq.KeepBody = keepIntent(e.KeepIntent)
	}
	repBody, err := imp.Do(ctx, preq)
	if err != nil {
		c.forget(l)
		c.requeueCancels(ns, cancels)
		return nil, true, fmt.Errorf("ldlm: enqueue %v %v on %s: %w", e.Mode, e.Resource, imp.Target(), err)
	}
	if err := rep.UnmarshalVT(repBody); err != nil {
		c.forget(l)
		return nil, true, fmt.Errorf("ldlm: enqueue reply from %s: %w", imp.Target(), err)
	}
	if rep.Handle == 0 {
		c.forget(l)
		return nil, true, nil
	}
	var moved *Resource
	if rep.Resource != nil {
		r, err := resourceFromWire(rep.Resource)
		if err != nil || r.Type != e.Resource.Type {
			c.forget(l)
			// The server holds the lock for us: give it back, or it
			// stays until a callback finds us not knowing it.
			c.requeueCancels(ns, []uint64{rep.Handle})
			return nil, true, fmt.Errorf("ldlm: enqueue reply from %s: granted resource %v: %w", imp.Target(), rep.Resource, ErrInvalid)
		}
		moved = &r
	}
	c.mu.Lock()
	l.remote = Handle(rep.Handle)
	if moved != nil && *moved != l.Resource {
		// The target's intent policy granted a lock on another resource
		// (the child a lookup found): file it there.
		ns.unlink(l)
		l.Resource = *moved
		ns.link(l)
	}
	if l.state == lockWaiting && rep.Granted {
		l.grantLocked(Mode(rep.Mode), policyFromWire(rep.Policy), lvbFromWire(rep.Lvb), rep.CallbackPending)
		if e.Intent != nil {
			if old := c.keepOldLocked(l); old != nil {
				c.mu.Unlock()
				return old, true, nil
			}
		}
	}
	var done chan struct{}
	if l.state == lockWaiting {
		l.done = make(chan struct{})
		done = l.done
	}
	err = l.err
	c.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			if e.Resource.Type == TypeFlock {
				if c.giveUpFlock(ctx, l) {
					return l, true, nil
				}
				return nil, true, ctx.Err()
			}
			// Give the waiting lock back; the server's completion AST will
			// find it gone.
			l.Release()
			return nil, true, ctx.Err()
		}
		c.mu.Lock()
		err = l.err
		c.mu.Unlock()
	}
	if err != nil {
		c.forget(l)
		return nil, true, err
	}
	return l, true, nil
}

// flockGiveUpTimeout bounds the CANCEL of a FLOCK wait given up.
const flockGiveUpTimeout = 10 * time.Second

// giveUpFlock gives back l, a FLOCK lock whose wait its caller gave up,
// before the caller returns, and reports whether it was granted first
// (the wait then succeeded; the caller keeps it). Not lazily, as other
// locks go: the server may grant it meanwhile, replacing the owner's
// locks in its range by it, and a cancel would then drop those too. The
// server refuses to cancel a granted FLOCK lock (EBUSY), so a grant just
// before the cancel is no loss either. If the CANCEL fails otherwise the
// handle goes lazily as usual (an eviction drops the lock anyway).
func (c *Client) giveUpFlock(ctx context.Context, l *ClientLock) (granted bool) {
	c.mu.Lock()
	if l.state == lockGranted {
		c.mu.Unlock()
		return true
	}
	if l.state != lockWaiting {
		c.mu.Unlock()
		c.forget(l)
		return false
	}
	// A completion AST from now on finds it no longer waiting.
	l.state = lockCancelling
	h, ns := l.remote, l.ns
	c.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flockGiveUpTimeout)
	defer cancel()
	err := c.cancelRPC(cctx, ns.imp, uint64(h))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unlinkLocked(l)
	switch {
	case errors.Is(err, syscall.EBUSY):
		return true
	case err != nil && !errors.Is(err, syscall.ESTALE):
		c.log.Info("ldlm: cancel of a flock wait given up", "target", ns.imp.Target(), "lock", h, "err", err)
		ns.queueHandleLocked(h)
	}
	return false
}

// requeueCancels puts back the handles an enqueue that failed carried, for
// the next request or the flusher to tell the server (it may never have
// seen them).
func (c *Client) requeueCancels(ns *clientNS, cancels []uint64) {
	if len(cancels) == 0 {
		return
	}
	c.mu.Lock()
	for _, h := range cancels {
		ns.queueHandleLocked(Handle(h))
	}
	c.mu.Unlock()
	c.kickFlusher()
}

// takeConflictingLocked takes out, for giveBack, this client's unused
// granted read locks (PR, CR) on e's extent resource that e's lock would
// conflict with (a lock a glimpse or a read left, before a write lock), so
// that their hooks run now and their handles ride on e's enqueue instead
// of the server calling them back and waiting (Lustre's early lock cancel
// before an enqueue). Read locks only: they cover no dirty data, so giving
// them back drops clean pages and waits for nothing but reads in flight;
// a write lock's flush is the blocking AST's to run, on the lock client's
// own goroutines.
func (c *Client) takeConflictingLocked(ns *clientNS, e *Enqueue) []*ClientLock {
	if e.Intent != nil || e.Resource.Type != TypeExtent {
		return nil
	}
	var ls []*ClientLock
	for l := ns.byRes[e.Resource]; l != nil; l = l.resNext {
		if l.state != lockGranted || l.users != 0 || l.remote == 0 || (l.mode != PR && l.mode != CR) || Compatible(l.mode, e.Mode) ||
			!l.policy.Extent.overlaps(e.Policy.Extent) {
			continue
		}
		if l.lru != nil {
			ns.lru.Remove(l.lru)
			l.lru = nil
		}
		l.state = lockCancelling
		ls = append(ls, l)
	}
	return ls
}

// keepOldLocked is Lustre's mdc_finish_intent_lock check: an intent's
// lock l, just granted, that a lock the client already holds serves is a
// duplicate (the intent could not be matched locally, as it asks the
// target something: every negative lookup in a directory is granted
// another PR UPDATE lock on it). The old lock, with a reference, replaces
// it, and l goes back with the next request, without its hook: the old
// lock still covers what was cached under either. Without this the
// duplicates fill the LRU and lengthen the resource's queues on both
// sides. The old lock's hooks serve for l's: a namespace's intents all
// come from one layer with one set of hooks.
func (c *Client) keepOldLocked(l *ClientLock) *ClientLock {
	ns := l.ns
	for old := ns.byRes[l.Resource]; old != nil; old = old.resNext {
		if old == l || old.state != lockGranted || old.cbPending || old.remote == 0 ||
			!serves(l.Resource.Type, old.mode, old.policy, l.mode, l.policy) {
			continue
		}
		old.users++
		if old.lru != nil {
			ns.lru.Remove(old.lru)
			old.lru = nil
		}
		l.users, l.state = 0, lockCancelling
		c.unlinkLocked(l)
		ns.returnHandleLocked(l.remote, l.cbPending)
		if l.cbPending {
			c.kickFlusher() // the server waits for it
		}
		c.duplicates.Add(1)
		return old
	}
	return nil
}

// Retire gives back old, an unused inode bits lock under which its
// owner caches nothing any more, because by, granted since on the same
// resource, covers all old did (same mode or stronger, a superset of its
// bits). Its Blocking hook runs, on the caller's goroutine, for anything
// cached under it meanwhile; its handle rides on the next request (early
// cancel). It does nothing and returns false if old is in use, being
// called back or given back already, or not covered by by.
//
// Without it such locks pile up on one resource: a directory's lock keeps
// its LOOKUP bit when a change in the directory calls back UPDATE
// (conversion), the next getattr of the directory is granted a new lock
// with every bit, the next change converts that one, and so on, one lock
// more per change until the LRU drops them, each scanned by every
// enqueue on the resource.
func (c *Client) Retire(ctx context.Context, old, by *ClientLock) bool {
	if old == nil || by == nil || old == by {
		return false
	}
	c.mu.Lock()
	if old.ns != by.ns || old.Resource != by.Resource || old.Resource.Type != TypeIBits ||
		old.state != lockGranted || old.users != 0 || old.cbPending || old.remote == 0 ||
		by.state != lockGranted || by.cbPending || !serves(TypeIBits, by.mode, by.policy, old.mode, old.policy) {
		c.mu.Unlock()
		return false
	}
	if old.lru != nil {
		old.ns.lru.Remove(old.lru)
		old.lru = nil
	}
	old.state = lockCancelling
	c.mu.Unlock()
	c.served.Add(1)
	c.giveBack(ctx, old)
	return true
}

// takePendingLocked takes up to CancelBatch of the handles ns has given
// back and not yet told the server of, for a request to carry.
func (c *Client) takePendingLocked(ns *clientNS) []uint64 {
	n := min(len(ns.pending), c.cfg.CancelBatch)
	if n == 0 {
		return nil
	}
	cancels := make([]uint64, n)
	for i, h := range ns.pending[:n] {
		cancels[i] = uint64(h)
	}
	ns.pending = ns.pending[n:]
	c.earlyCancels.Add(uint64(n))
	return cancels
}

// TakeCancels returns handles of locks on imp's target given back locally
// (GiveBackUnused, LRU trimming) whose CANCEL has not gone out, for a
// request of the caller's to carry instead (Lustre packs them into any
// MDS request, not only an enqueue). The server must be told: the caller
// sends them, or the locks stay granted there until a blocking AST finds
// them gone.
func (c *Client) TakeCancels(imp *ptlrpc.Import) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil
	}
	return c.takePendingLocked(c.nsLocked(imp))
}

// GiveBackUnused gives back bits of the unused granted IBITS locks of res
// but except (nil: none; a lock the caller keeps for a change the server
// was asked to leave it alone for, Request.Tolerate), ahead of a change
// that would otherwise call them back. A lock that would keep its LOOKUP
// bit (one with a Convert hook) is converted: the hook drops what the bits
// protected, the lock keeps the rest, and the server is told by the next
// request of the caller's (TakeConverts). The others holding any of bits
// are given back (Lustre's early lock cancel, mdc_resource_get_unused):
// their hooks run now and their handles ride on the next enqueue, so the
// server has no blocking AST to send and wait for. It returns how many it
// converted or gave back.
func (c *Client) GiveBackUnused(ctx context.Context, imp *ptlrpc.Import, res Resource, bits Bits, except *ClientLock) int {
	return c.convertUnused(ctx, imp, res, bits, except) + c.cancelUnused(ctx, imp, res, bits, false, except)
}

func (c *Client) convertUnused(ctx context.Context, imp *ptlrpc.Import, res Resource, bits Bits, except *ClientLock) int {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return 0
	}
	ns := c.nsLocked(imp)
	var cvs []conversion
	for l := ns.byRes[res]; l != nil; l = l.resNext {
		if l.remote == 0 || l == except {
			continue
		}
		if keep := l.keepOnConvertLocked(bits); keep != 0 {
			c.startConvertLocked(l)
			cvs = append(cvs, conversion{l, keep})
		}
	}
	c.mu.Unlock()
	n := 0
	for _, cv := range cvs {
		c.mu.Lock()
		dropped := cv.l.policy.Bits &^ cv.keep
		c.mu.Unlock()
		ok := cv.l.hooks.Convert(ctx, cv.l, dropped)
		c.mu.Lock()
		kept, cancel := c.endConvertLocked(cv.l, cv.keep, ok)
		if kept {
			if !slices.Contains(ns.converted, cv.l) {
				ns.converted = append(ns.converted, cv.l)
			}
			n++
		}
		c.mu.Unlock()
		if cancel {
			c.queueCancel(cv.l)
		}
	}
	return n
}

// keepOnConvertLocked returns the inode bits l keeps if it gives up drop
// by a conversion rather than whole: an unused granted IBITS lock whose
// owner can drop part of what it caches (Hooks.Convert), left with its
// LOOKUP bit; 0 if it cannot be converted so.
func (l *ClientLock) keepOnConvertLocked(drop Bits) Bits {
	if l.state != lockGranted || l.users != 0 || l.Resource.Type != TypeIBits || l.hooks.Convert == nil {
		return 0
	}
	if keep := l.policy.Bits &^ drop; keep&BitLookup != 0 && keep != l.policy.Bits {
		return keep
	}
	return 0
}

// startConvertLocked takes l, which keepOnConvertLocked allowed, out of
// the LRU for its conversion.
func (c *Client) startConvertLocked(l *ClientLock) {
	if l.lru != nil {
		l.ns.lru.Remove(l.lru)
		l.lru = nil
	}
	l.state = lockConverting
}

// endConvertLocked ends l's conversion to keep, ok saying the hook (and
// the server, if it was asked) agreed: l goes back to the LRU with keep,
// unless a blocking AST came meanwhile or it failed, when it is to be
// given back whole (cancel: the caller queues it once the mutex is let
// go). A lock dropped meanwhile (eviction) is left alone.
func (c *Client) endConvertLocked(l *ClientLock, keep Bits, ok bool) (kept, cancel bool) {
	if l.state != lockConverting {
		return false, false
	}
	if !ok || l.reblocked {
		l.state = lockCancelling
		return false, true
	}
	l.policy.Bits, l.cbPending, l.state = keep, false, lockGranted
	if l.users == 0 {
		l.lastUsed = time.Now()
		l.lru = l.ns.lru.PushBack(l)
	}
	return true, false
}

// TakeConverts returns the conversions GiveBackUnused made on imp's
// target that the server has not been told of, for a request of the
// caller's to carry. If it never arrives, a blocking AST for the dropped
// bits finds the lock without them and it is given back whole.
func (c *Client) TakeConverts(imp *ptlrpc.Import) []*ldlmv1.ConvertRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil
	}
	return takeConvertsLocked(c.nsLocked(imp))
}

// takeConvertsLocked returns ns's conversions not yet told to the server,
// as requests under the locks' handles now, and forgets them. A lock no
// longer held needs none.
func takeConvertsLocked(ns *clientNS) []*ldlmv1.ConvertRequest {
	var out []*ldlmv1.ConvertRequest
	for _, l := range ns.converted {
		if l.state == lockGranted && l.remote != 0 {
			out = append(out, &ldlmv1.ConvertRequest{Handle: uint64(l.remote), Bits: uint64(l.policy.Bits)})
		}
	}
	ns.converted = nil
	return out
}

// Glimpse asks the server of imp for res's attributes as the holders of
// write locks see them, without taking a lock. valid says the server
// vouches for them as the object's (it read the object, or keeps the LVB
// of a locked resource); otherwise only the lock holders' part is known.
func (c *Client) Glimpse(ctx context.Context, imp *ptlrpc.Import, res Resource) (lvb LVB, valid bool, err error) {
	er := ldlmv1.EnqueueRequest{Resource: resourceToWire(res), Mode: uint32(PR), // on the stack, as in Enqueue
		Policy: policyToWire(Policy{Extent: Whole}), Flags: wireGlimpse}
	body, err := er.MarshalVT()
	if err != nil {
		return LVB{}, false, err
	}
	repBody, err := imp.Do(ctx, &ptlrpc.Req{Opcode: wire.LDLMEnqueue, Body: body, JobID: jobstats.JobOf(ctx)})
	if err != nil {
		return LVB{}, false, fmt.Errorf("ldlm: glimpse %v on %s: %w", res, imp.Target(), err)
	}
	var rep ldlmv1.EnqueueReply
	if err := rep.UnmarshalVT(repBody); err != nil {
		return LVB{}, false, fmt.Errorf("ldlm: glimpse reply from %s: %w", imp.Target(), err)
	}
	return lvbFromWire(rep.Lvb), rep.LvbValid, nil
}

// GlimpseLock is Glimpse that also takes the PR lock on the whole of res
// the target grants when no lock conflicts with it (Lustre's glimpse
// enqueue), if the target agreed to ConnectGlimpseLock: then it returns
// the lock, with one reference for the caller to Release, and its LVB,
// which stays true while the lock is held (a writer calls it back first).
// Otherwise, as Glimpse, it returns no lock and the LVB the target learnt
// from the writers. A granted lock the client already holds serves
// without an RPC.
func (c *Client) GlimpseLock(ctx context.Context, imp *ptlrpc.Import, res Resource, hooks Hooks) (l *ClientLock, lvb LVB, valid bool, err error) {
	flags := wireGlimpse
	if imp.Features()&ConnectGlimpseLock != 0 {
		flags |= wireGlimpseLock
	}
	var rep ldlmv1.EnqueueReply
	l, _, err = c.enqueue(ctx, imp, Enqueue{Resource: res, Mode: PR, Policy: Policy{Extent: Whole}, Hooks: hooks}, flags, &rep)
	switch {
	case err != nil:
		return nil, LVB{}, false, fmt.Errorf("ldlm: glimpse %v on %s: %w", res, imp.Target(), err)
	case l != nil:
		return l, l.LVB(), true, nil
	}
	return nil, lvbFromWire(rep.Lvb), rep.LvbValid, nil
}

// LockAhead asks for a write lock on ext of res before any I/O (Lustre's
// lockahead), exactly that extent, without waiting: a conflict fails with
// ErrWouldBlock rather than calling anybody back. The lock is kept unused
// in the LRU for the I/O to match.
func (c *Client) LockAhead(ctx context.Context, imp *ptlrpc.Import, res Resource, ext Extent, hooks Hooks) error {
	l, _, _, err := c.Enqueue(ctx, imp, Enqueue{Resource: res, Mode: PW, Policy: Policy{Extent: ext},
		Flags: BlockNoWait | NoExpansion, Hooks: hooks})
	if err != nil {
		return err
	}
	l.Release()
	return nil
}

// grantLocked records a grant.
func (l *ClientLock) grantLocked(m Mode, p Policy, lvb LVB, cbPending bool) {
	if l.state != lockWaiting {
		return
	}
	l.state, l.mode, l.policy, l.lvb = lockGranted, m, p, lvb
	l.cbPending = l.cbPending || cbPending
	l.settledLocked()
}

// settledLocked wakes the Enqueue waiting for l to leave lockWaiting,
// if one is.
func (l *ClientLock) settledLocked() {
	if l.done != nil {
		close(l.done)
		l.done = nil
	}
}

// forget drops a lock the server does not hold (refused, failed, or never
// made).
func (c *Client) forget(l *ClientLock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unlinkLocked(l)
}

// unlinkLocked removes l from every table.
func (c *Client) unlinkLocked(l *ClientLock) {
	l.gone.Store(true)
	delete(c.mu.locks, l.handle)
	l.ns.unlink(l)
	if l.lru != nil {
		l.ns.lru.Remove(l.lru)
		l.lru = nil
	}
	if l.state == lockWaiting {
		l.settledLocked()
	}
	l.state = lockGone
}

// Release drops a reference. A lock nobody uses goes to the LRU, or, if
// the server wants it back, is given back now.
func (l *ClientLock) Release() {
	c := l.c
	c.mu.Lock()
	l.users--
	if l.users > 0 {
		c.mu.Unlock()
		return
	}
	if l.state == lockWaiting || l.cbPending || c.mu.closed {
		// A wait abandoned, or the server asked for it back.
		l.state = lockCancelling
		c.mu.Unlock()
		c.queueCancel(l)
		return
	}
	if l.state != lockGranted {
		c.mu.Unlock()
		return
	}
	l.lastUsed = time.Now()
	l.lru = l.ns.lru.PushBack(l)
	trim := c.trimLocked(l.ns, time.Now())
	c.mu.Unlock()
	for _, t := range trim {
		c.queueCancel(t)
	}
}

// Cancel gives the lock back now: it drops the caller's reference, runs
// the lock's flush hook and tells the server, all before returning. The
// caller must hold the only reference. A lock the server no longer has is
// not an error.
func (l *ClientLock) Cancel(ctx context.Context) error {
	c := l.c
	c.mu.Lock()
	if l.users != 1 || l.state != lockGranted {
		c.mu.Unlock()
		return fmt.Errorf("ldlm: cancel of lock %v (%d users, state %d)", l.remote, l.users, l.state)
	}
	l.users = 0
	l.state = lockCancelling
	c.mu.Unlock()
	if l.hooks.Blocking != nil {
		l.hooks.Blocking(ctx, l, false)
	}
	c.mu.Lock()
	h := l.remote
	c.unlinkLocked(l)
	c.mu.Unlock()
	if err := c.cancelRPC(ctx, l.ns.imp, uint64(h)); err != nil && !errors.Is(err, syscall.ESTALE) {
		return fmt.Errorf("ldlm: cancel %v on %s: %w", h, l.ns.imp.Target(), err)
	}
	return nil
}

// trimLocked takes the locks over lru_size and older than lru_max_age out
// of ns's LRU, to be given back.
func (c *Client) trimLocked(ns *clientNS, now time.Time) []*ClientLock {
	var out []*ClientLock
	for e := ns.lru.Front(); e != nil; e = ns.lru.Front() {
		l := e.Value.(*ClientLock)
		size, age := c.lruRulesLocked(ns)
		if ns.lru.Len() <= size && now.Sub(l.lastUsed) < age {
			break
		}
		ns.lru.Remove(e)
		l.lru = nil
		l.state = lockCancelling
		out = append(out, l)
	}
	return out
}

// CancelUnusedWhole gives back, as GiveBackUnused does, the unused locks
// of res holding any of bits, for a change that takes every one of them
// away (an unlink, a rename): locks a blocking AST would convert are given
// back whole as well, as Lustre's ldlm_cancel_resource_local does for
// early lock cancel.
func (c *Client) CancelUnusedWhole(ctx context.Context, imp *ptlrpc.Import, res Resource, bits Bits) int {
	return c.cancelUnused(ctx, imp, res, bits, true, nil)
}

func (c *Client) cancelUnused(ctx context.Context, imp *ptlrpc.Import, res Resource, bits Bits, whole bool, except *ClientLock) int {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return 0
	}
	ns := c.nsLocked(imp)
	var ls []*ClientLock
	for l := ns.byRes[res]; l != nil; l = l.resNext {
		if l.state != lockGranted || l.users != 0 || l.remote == 0 || l.policy.Bits&bits == 0 || l == except {
			continue
		}
		if !whole && l.keepOnConvertLocked(bits) != 0 {
			continue // a blocking AST converts it, keeping its LOOKUP bit
		}
		if l.lru != nil {
			ns.lru.Remove(l.lru)
			l.lru = nil
		}
		l.state = lockCancelling
		ls = append(ls, l)
	}
	c.mu.Unlock()
	for _, l := range ls {
		c.giveBack(ctx, l)
	}
	return len(ls)
}

// queueCancel hands l to the cancel workers, which run its hook and queue
// its handle for the server.
func (c *Client) queueCancel(l *ClientLock) {
	select {
	case c.cancel <- l:
	case <-c.ctx.Done():
	}
}

// cancelWorker runs the flush hooks of locks given back, then queues their
// handles: urgently for a blocking AST (the server waits), lazily for LRU
// trimming (to ride on the next enqueue).
func (c *Client) cancelWorker() {
	for {
		var l *ClientLock
		select {
		case <-c.ctx.Done():
			return
		case l = <-c.cancel:
		}
		c.giveBack(c.ctx, l)
	}
}

// giveBack runs the hook of l, a lock being cancelled, forgets it and
// queues its handle for the server: on the next enqueue, or at once by
// the flusher if the server waits for it (a blocking AST came).
func (c *Client) giveBack(ctx context.Context, l *ClientLock) {
	if l.hooks.Blocking != nil {
		l.hooks.Blocking(ctx, l, false)
	}
	c.mu.Lock()
	ns, h, urgent := l.ns, l.remote, l.cbPending
	wasGranted := l.state == lockCancelling && h != 0
	c.unlinkLocked(l)
	if wasGranted {
		ns.returnHandleLocked(h, urgent)
	}
	c.mu.Unlock()
	if urgent {
		c.kickFlusher()
	}
}

// flusher sends the CANCELs nobody's enqueue carried: at once when the
// server waits for one, after CancelDelay otherwise, and trims aged locks.
func (c *Client) flusher() {
	t := time.NewTicker(max(c.cfg.CancelDelay/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.kick:
		case <-t.C:
		}
		now := time.Now()
		type batch struct {
			ns      *clientNS
			handles []uint64
		}
		var batches []batch
		var trim []*ClientLock
		c.mu.Lock()
		for _, ns := range c.mu.ns {
			trim = append(trim, c.trimLocked(ns, now)...)
			if hs := c.takeCancelsLocked(ns, now); len(hs) > 0 {
				batches = append(batches, batch{ns, hs})
			}
		}
		c.mu.Unlock()
		for _, l := range trim {
			c.queueCancel(l)
		}
		for _, b := range batches {
			c.wg.Go(func() {
				c.sendCancels(b.ns.imp, b.handles)
				c.mu.Lock()
				b.ns.sending = false
				c.mu.Unlock()
				c.kickFlusher() // (what is left of ns's waits for it)
			})
		}
	}
}

// takeCancelsLocked takes the handles of ns's next LDLM_CANCEL, none while
// one is in flight (it is then marked so): the blocked ones first, then
// lazy ones to fill the batch once they go anyway or are due (CancelDelay,
// or a batch of them).
func (c *Client) takeCancelsLocked(ns *clientNS, now time.Time) []uint64 {
	if ns.sending {
		return nil
	}
	var hs []uint64
	n := min(len(ns.blocked), c.cfg.CancelBatch)
	for _, h := range ns.blocked[:n] {
		hs = append(hs, uint64(h))
	}
	ns.blocked = ns.blocked[n:]
	if len(ns.pending) > 0 && len(hs) < c.cfg.CancelBatch &&
		(len(hs) > 0 || now.Sub(ns.since) >= c.cfg.CancelDelay || len(ns.pending) >= c.cfg.CancelBatch) {
		m := min(len(ns.pending), c.cfg.CancelBatch-len(hs))
		for _, h := range ns.pending[:m] {
			hs = append(hs, uint64(h))
		}
		ns.pending = ns.pending[m:]
		ns.since = now
	}
	ns.sending = len(hs) > 0
	return hs
}

// cancelRPC sends one LDLM_CANCEL of handles to imp's target and waits
// for its answer.
func (c *Client) cancelRPC(ctx context.Context, imp *ptlrpc.Import, handles ...uint64) error {
	cr := ldlmv1.CancelRequest{Handles: handles}
	body, err := cr.MarshalVT()
	if err != nil {
		return err
	}
	_, err = imp.Do(ctx, &ptlrpc.Req{Opcode: wire.LDLMCancel, Body: body})
	c.cancelRPCs.Add(1) // once done: a stat of the CANCELs answered or failed
	return err
}

// sendCancels tells imp's target that the client gave back the locks of
// handles (one LDLM_CANCEL).
func (c *Client) sendCancels(imp *ptlrpc.Import, handles []uint64) {
	ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
	defer cancel()
	err := c.cancelRPC(ctx, imp, handles...)
	if err != nil && c.ctx.Err() == nil {
		// The server forgets locks of an evicted client by itself, and
		// cancels one the client no longer knows at its next blocking AST.
		c.log.Info("ldlm: cancel", "target", imp.Target(), "locks", len(handles), "err", err)
	}
}

// lookupAST finds the lock a callback names.
func (c *Client) lookupAST(clientHandle uint64, h Handle) *ClientLock {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.mu.locks[clientHandle]
	if l == nil || (l.remote != 0 && h != 0 && l.remote != h) {
		return nil
	}
	return l
}

func (c *Client) handleBlocking(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	var ast ldlmv1.BlockingAST
	if err := ptlrpc.Unmarshal(r.Body, &ast); err != nil {
		return nil, -int32(syscall.EPROTO)
	}
	c.blASTs.Add(1)
	l := c.lookupAST(ast.ClientHandle, Handle(ast.Handle))
	if l == nil {
		return nil, -int32(syscall.ESTALE) // the server cancels it itself
	}
	c.mu.Lock()
	l.cbPending = true
	l.discard = l.discard || ast.DiscardData
	if l.state == lockConverting {
		l.reblocked = true
	}
	var keep Bits
	if ast.ConflictPolicy != nil {
		keep = l.keepOnConvertLocked(policyFromWire(ast.ConflictPolicy).Bits)
	}
	cancelNow := keep == 0 && l.state == lockGranted && l.users == 0
	switch {
	case keep != 0:
		c.startConvertLocked(l)
	case cancelNow:
		if l.lru != nil {
			l.ns.lru.Remove(l.lru)
			l.lru = nil
		}
		l.state = lockCancelling
	}
	c.mu.Unlock()
	switch {
	case cancelNow:
		// The flush and the cancel follow on a worker; the reply goes now.
		c.queueCancel(l)
	case keep != 0:
		select {
		case c.converts <- conversion{l, keep}:
		case <-c.ctx.Done():
		}
	}
	return nil, 0
}

// conversion is a lock to convert to the bits in keep.
type conversion struct {
	l    *ClientLock
	keep Bits
}

// convertWorker converts locks whose blocking ASTs conflict with only some
// of their bits: the Convert hook drops what the other bits protected,
// LDLM_CONVERT tells the server, and the lock goes back to the LRU with
// the bits it kept. A failure, or another AST meanwhile, gives it back
// whole.
func (c *Client) convertWorker() {
	for {
		var cv conversion
		select {
		case <-c.ctx.Done():
			return
		case cv = <-c.converts:
		}
		l := cv.l
		c.mu.Lock()
		dropped := l.policy.Bits &^ cv.keep
		c.mu.Unlock()
		ok := l.hooks.Convert(c.ctx, l, dropped)
		var err error
		var h Handle
		if ok {
			c.mu.Lock()
			h = l.remote // after the hook: a lock replay meanwhile gave it a new one
			c.mu.Unlock()
			err = c.convertRPC(l.ns.imp, h, cv.keep)
		}
		c.mu.Lock()
		_, cancel := c.endConvertLocked(l, cv.keep, ok && err == nil)
		c.mu.Unlock()
		if err != nil {
			c.log.Info("ldlm: convert failed; giving the lock back", "target", l.ns.imp.Target(), "lock", h, "err", err)
		}
		if cancel {
			c.queueCancel(l)
		}
	}
}

// convertRPC sends one LDLM_CONVERT keeping bits of lock h.
func (c *Client) convertRPC(imp *ptlrpc.Import, h Handle, bits Bits) error {
	body, err := ptlrpc.Marshal(&ldlmv1.ConvertRequest{Handle: uint64(h), Bits: uint64(bits)})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
	defer cancel()
	c.convertRPCs.Add(1)
	_, err = imp.Do(ctx, &ptlrpc.Req{Opcode: wire.LDLMConvert, Body: body})
	return err
}

func (c *Client) handleCompletion(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	var ast ldlmv1.CompletionAST
	if err := ptlrpc.Unmarshal(r.Body, &ast); err != nil {
		return nil, -int32(syscall.EPROTO)
	}
	c.cpASTs.Add(1)
	l := c.lookupAST(ast.ClientHandle, Handle(ast.Handle))
	if l == nil {
		return nil, -int32(syscall.ESTALE)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.remote == 0 {
		l.remote = Handle(ast.Handle)
	}
	if ast.Status != 0 {
		if l.state == lockWaiting {
			l.err = fmt.Errorf("%w: %v on %v: %w", ErrLockFailed, l.mode, l.Resource, syscall.Errno(-ast.Status))
			l.state = lockGone
			l.settledLocked()
		}
		return nil, 0
	}
	m, err := modeFromWire(ast.Mode)
	if err != nil {
		return nil, -int32(syscall.EPROTO)
	}
	l.grantLocked(m, policyFromWire(ast.Policy), lvbFromWire(ast.Lvb), ast.CallbackPending)
	return nil, 0
}

func (c *Client) handleGlimpse(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	var ast ldlmv1.GlimpseAST
	if err := ptlrpc.Unmarshal(r.Body, &ast); err != nil {
		return nil, -int32(syscall.EPROTO)
	}
	c.glASTs.Add(1)
	l := c.lookupAST(ast.ClientHandle, Handle(ast.Handle))
	if l == nil {
		return nil, -int32(syscall.ESTALE)
	}
	lvb := l.LVB()
	if l.hooks.Glimpse != nil {
		lvb = l.hooks.Glimpse(l)
	}
	return marshal(&ldlmv1.GlimpseReply{Lvb: lvbToWire(lvb)})
}

// ImportEvicted drops every lock taken through imp after the server
// evicted the client: their hooks run with evicted set (drop caches, do not
// flush), waiters fail. Call it from the import's OnEvict.
func (c *Client) ImportEvicted(imp *ptlrpc.Import) {
	if n := c.dropImport(imp); n > 0 {
		c.log.Warn("ldlm: evicted: dropped locks", "target", imp.Target(), "locks", n)
	}
}

// ImportClosed drops every lock taken through imp after the client
// disconnected from the server (which dropped them with the export), as
// ImportEvicted does, without a warning: nothing went wrong.
func (c *Client) ImportClosed(imp *ptlrpc.Import) {
	if n := c.dropImport(imp); n > 0 {
		c.log.Debug("ldlm: disconnected: dropped locks", "target", imp.Target(), "locks", n)
	}
}

// dropImport drops imp's locks and returns how many there were.
func (c *Client) dropImport(imp *ptlrpc.Import) int {
	c.mu.Lock()
	ns := c.mu.ns[imp]
	var all []*ClientLock
	if ns != nil {
		for _, first := range ns.byRes {
			for l := first; l != nil; l = l.resNext {
				all = append(all, l)
			}
		}
		ns.pending, ns.blocked = nil, nil
	}
	for _, l := range all {
		if l.state == lockWaiting {
			l.err = fmt.Errorf("ldlm: %v on %v: %w", l.mode, l.Resource, ptlrpc.ErrEvicted)
		}
		c.unlinkLocked(l)
	}
	c.mu.Unlock()
	for _, l := range all {
		if l.hooks.Blocking != nil {
			l.hooks.Blocking(c.ctx, l, true)
		}
	}
	return len(all)
}

// Close stops the client's workers; locks are not given back (close the
// imports, which disconnects, for that).
func (c *Client) Close() {
	c.mu.Lock()
	c.mu.closed = true
	c.mu.Unlock()
	c.stop()
	c.wg.Wait()
}

// keepIntent turns an Enqueue's KeepIntent into the ptlrpc.Req.KeepBody
// of its request: the enqueue kept for replay carries the intent it
// gives.
func keepIntent(fn func(intent, reply []byte) []byte) func(req, reply []byte) []byte {
	return func(req, reply []byte) []byte {
		var er ldlmv1.EnqueueRequest
		var rep ldlmv1.EnqueueReply
		if er.UnmarshalVT(req) != nil || rep.UnmarshalVT(reply) != nil {
			return nil
		}
		it := fn(er.Intent, rep.IntentReply)
		if it == nil {
			return nil
		}
		er.Intent = it
		b, err := er.MarshalVT()
		if err != nil {
			return nil
		}
		return b
	}
}
