package ldlm

import (
	"cmp"
	"fmt"
	"slices"
)

// Config configures a Namespace.
type Config struct {
	// Name names the namespace in errors, as Lustre names namespaces
	// after their target ("filter-nacre-OST0000_UUID", "mdt-nacre-MDT0000_UUID").
	Name string
	// HandleSeed is the first handle issued; handles count up from it,
	// skipping 0. A server should seed from a random number at start-up
	// so that handles held by clients of an earlier incarnation do not
	// name new locks; tests pass a fixed seed so transcripts are stable.
	HandleSeed uint64
	// PageSize is the alignment a grown extent keeps (Lustre's PAGE_SIZE
	// in ldlm_extent_internal_policy_fixup): a power of two, at least 512.
	PageSize uint64
}

// DefaultConfig returns a valid Config with handles starting at 1 and 4 KiB
// pages.
func DefaultConfig() Config {
	return Config{Name: "ldlm", HandleSeed: 1, PageSize: 4096}
}

// Validate reports whether c can build a Namespace.
func (c Config) Validate() error {
	switch {
	case c.Name == "":
		return fail(ErrInvalid, "ldlm config: empty namespace name")
	case c.PageSize < 512 || c.PageSize&(c.PageSize-1) != 0:
		return fail(ErrInvalid, "ldlm config %s: page size %d is not a power of two >= 512", c.Name, c.PageSize)
	}
	return nil
}

// Namespace is the server-side lock table of one target (an MDT, an OST,
// the MGS): its resources, their granted and waiting queues, and the
// lock handles. It decides; it does not act. Every call returns what the
// caller must now do — which locks to call back (blocking ASTs), which
// waiting locks were granted (completion ASTs), which requests failed —
// and sends nothing itself.
//
// A Namespace is not safe for concurrent use: the lock daemon serializes
// its calls (one mutex per namespace, or one namespace per shard), and
// carries out the returned Effects after releasing it. Calls are
// deterministic: the same sequence of calls on namespaces with the same
// Config returns the same results.
type Namespace struct {
	name string
	page uint64
	// next is the next handle to issue; 0 is skipped.
	next Handle
	// locks holds every lock, granted or waiting, by handle.
	locks map[Handle]*lock
	// res holds every resource that has at least one lock.
	res map[Resource]*resource
	// flockWaiting holds each FLOCK lock owner's waiting locks, across
	// resources, for deadlock detection.
	flockWaiting map[flockKey][]*lock
	stats        Stats
}

// lock is a lock inside the namespace. Only snapshots (Lock) leave it.
type lock struct {
	h     Handle
	name  Resource
	res   *resource // nil until the lock is registered
	owner Owner
	mode  Mode
	// granted is true once the lock is on its resource's granted queue.
	granted bool
	// pol is the policy data; pol.Extent is the granted extent once
	// granted (EXTENT locks may grow).
	pol Policy
	// req is the extent as requested.
	req Extent
	// cbPending: a blocking AST was sent (granted lock) or is owed with
	// the completion AST (waiting lock). At most one per lock.
	cbPending bool
	// noExpand: grant exactly the requested extent.
	noExpand bool
	// tolerate: Request.Tolerate.
	tolerate Tolerated
}

// resource is one (ResID, Type) with its queues.
type resource struct {
	name Resource
	// granted holds the granted locks in grant order; they are pairwise
	// compatible.
	granted []*lock
	// waiting holds the waiting locks in queue order (FIFO, except that
	// GROUP requests queue ahead of other modes, as in Lustre).
	waiting []*lock
	lvb     LVB
}

// flockKey identifies a POSIX lock owner: a process (FlockOwner) on a
// client (Owner).
type flockKey struct {
	owner  Owner
	fowner uint64
}

func (l *lock) flockKey() flockKey { return flockKey{l.owner, l.pol.FlockOwner} }

// Stats are a namespace's counters and gauges, for lctl get_param
// ldlm.namespaces.*.
type Stats struct {
	Resources int // resources with at least one lock
	Granted   int // granted locks
	Waiting   int // waiting locks

	Enqueues       uint64 // valid Enqueue calls
	Cancels        uint64 // successful Cancel calls
	Converts       uint64 // successful Convert calls
	BlockingASTs   uint64 // blocking ASTs the namespace asked for
	CompletionASTs uint64 // waiting locks granted later (completion ASTs asked for)
	Aborted        uint64 // BlockNoWait requests refused with ErrWouldBlock
	Deadlocks      uint64 // FLOCK requests failed with ErrDeadlock
	Evicted        uint64 // locks dropped by DropOwner
}

// Effects are what a call requires of the lock daemon, in the order the
// namespace decided them. Lists are nil when empty.
type Effects struct {
	// Blocking lists granted locks that must now be called back, each
	// with the request it blocks. A lock appears here at most once in its
	// life (until a Convert resolves every conflict it has): later
	// conflicting requests do not call it back again; a Convert that
	// leaves one in its way calls it back anew. GROUP locks are
	// never called back; they are released only by their holders.
	Blocking []Blocking
	// Granted lists waiting locks that this call granted, in queue order:
	// each owner gets a completion AST. A granted lock with
	// CallbackPending set must have the completion AST say so (Lustre's
	// LDLM_FL_AST_SENT), so that its owner cancels it after use: a
	// conflicting request already waits behind it.
	Granted []Lock
	// Failed lists waiting locks the namespace gave up on (a FLOCK
	// request found in a deadlock cycle when the locks around it
	// changed); each owner gets a completion AST carrying the error. They
	// are gone from the namespace.
	Failed []Failure
	// Changed lists FLOCK locks whose range changed, or that were created
	// by splitting, as a side effect of a lock or unlock by the same
	// owner: an unlock in the middle of a lock leaves two locks, the
	// second with a new handle.
	Changed []Lock
	// Removed lists locks that ceased to exist as a side effect: FLOCK
	// locks merged into a new lock of their owner or wholly unlocked, and
	// every lock DropOwner dropped. A handle may appear in Changed and
	// then in Removed; Removed wins.
	Removed []Handle
}

// Blocking is one blocking AST to send: Lock's owner is asked to cancel
// (or, for IBITS, to convert away the conflicting bits of) Lock, because By
// waits for it.
type Blocking struct {
	Lock Lock
	By   Lock
}

// Failure is a waiting lock that will not be granted.
type Failure struct {
	Lock Lock
	Err  error
}

// Result is the outcome of an Enqueue or Convert.
type Result struct {
	// Lock is the requested (or converted) lock after the call: Granted,
	// or Waiting for a completion AST. A FLOCK unlock (mode NL) creates no
	// lock: Handle is 0 and State Granted.
	Lock Lock
	// NewResource: the call created the resource, so its LVB is zero
	// until the caller sets it (Lustre's lvbo_init).
	NewResource bool
	// NoTimeout (LDLM_FL_NO_TIMEOUT): the lock waits on something that is
	// never called back (a GROUP lock, a POSIX lock), so the owner must
	// not time the wait out.
	NoTimeout bool
	Effects
}

// Conversion is what Convert changes a granted lock to. Zero fields keep
// the lock's current value.
type Conversion struct {
	// Mode must be a downgrade: every mode compatible with the old mode
	// must be compatible with the new one (EX→PW, PW→PR, PR→CR, any→NL).
	Mode Mode
	// Bits (IBITS only) must be a non-empty subset of the lock's bits.
	Bits Bits
}

// New returns an empty namespace.
func New(cfg Config) (*Namespace, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ns := &Namespace{
		name:         cfg.Name,
		page:         cfg.PageSize,
		next:         Handle(cfg.HandleSeed),
		locks:        make(map[Handle]*lock),
		res:          make(map[Resource]*resource),
		flockWaiting: make(map[flockKey][]*lock),
	}
	return ns, nil
}

// Name returns the namespace's name.
func (ns *Namespace) Name() string { return ns.name }

// Enqueue asks for a lock. Four things can happen:
//
//   - The lock is granted now (Result.Lock.State == Granted): it is
//     compatible with every granted lock and no conflicting request waits
//     (FIFO fairness: a reader does not jump a waiting writer). An EXTENT
//     lock may be granted a larger extent than requested. A FLOCK lock is
//     merged with its owner's locks, which may change or remove them and
//     grant others (Effects).
//   - The lock waits (State == Waiting). Effects.Blocking lists the
//     granted conflicting locks not called back before; conflicting
//     waiting locks are marked CallbackPending for their completion AST.
//   - With BlockNoWait, a lock that would wait fails with ErrWouldBlock.
//   - A FLOCK lock that would close a wait cycle fails with ErrDeadlock.
//
// A FLOCK request in mode NL is an unlock of its range: it trims or splits
// the owner's locks and may grant waiters; no lock is created. Invalid
// requests fail with ErrInvalid. A failed Enqueue changes nothing but the
// counters.
func (ns *Namespace) Enqueue(req Request) (Result, error) {
	if reason := checkRequest(req); reason != "" {
		return Result{}, fail(ErrInvalid, "%s: enqueue %s %v by %q: %s", ns.name, req.Resource, req.Mode, req.Owner, reason)
	}
	ns.stats.Enqueues++
	l := &lock{
		name:     req.Resource,
		owner:    req.Owner,
		mode:     req.Mode,
		pol:      req.Policy,
		req:      req.Policy.Extent,
		noExpand: req.Flags&NoExpansion != 0,
		tolerate: req.Tolerate,
	}
	r := ns.res[req.Resource]
	if req.Resource.Type == TypeFlock {
		return ns.enqueueFlock(r, l, req.Flags)
	}

	if req.Flags&Replay != 0 {
		var out Result
		l.noExpand = true
		r, out.NewResource = ns.resource(req.Resource)
		ns.register(r, l)
		ns.grant(r, l)
		out.Lock = l.snapshot()
		return out, nil
	}
	if req.Flags&RecoveryWait != 0 {
		var out Result
		r, out.NewResource = ns.resource(req.Resource)
		ns.register(r, l)
		r.enqueueWaiting(l)
		ns.stats.Waiting++
		out.Lock = l.snapshot()
		return out, nil
	}
	grant, cs := true, []*lock(nil)
	if r != nil {
		grant, cs = r.enqueueCheck(l)
	}
	if !grant && req.Flags&BlockNoWait != 0 {
		ns.stats.Aborted++
		return Result{}, fail(ErrWouldBlock, "%s: enqueue %s %v by %q: conflicts with %v", ns.name, req.Resource, req.Mode, req.Owner, cs[0].h)
	}
	var out Result
	r, out.NewResource = ns.resource(req.Resource)
	ns.register(r, l)
	if grant {
		ns.grant(r, l)
		out.Lock = l.snapshot()
		return out, nil
	}
	ahead := r.waiting[:r.enqueueWaiting(l)]
	ns.stats.Waiting++
	var owed []*lock
	for _, c := range cs {
		if !c.granted && !slices.Contains(ahead, c) {
			continue // a GROUP request queued ahead of it: c waits for l, not l for c
		}
		if c.mode == GROUP {
			out.NoTimeout = true
			continue
		}
		if c.cbPending {
			continue
		}
		c.cbPending = true
		if c.granted {
			owed = append(owed, c)
		}
	}
	out.Lock = l.snapshot()
	for _, c := range owed {
		out.Blocking = append(out.Blocking, Blocking{Lock: c.snapshot(), By: out.Lock})
		ns.stats.BlockingASTs++
	}
	return out, nil
}

// Cancel removes a lock, granted or waiting, on behalf of its owner, and
// returns the waiting locks that can now be granted (completion ASTs), in
// queue order. An unknown handle fails with ErrUnknownHandle, another
// owner's lock with ErrNotOwner; neither changes anything.
func (ns *Namespace) Cancel(h Handle, owner Owner) (Effects, error) {
	l, err := ns.owned("cancel", h, owner)
	if err != nil {
		return Effects{}, err
	}
	ns.stats.Cancels++
	var eff Effects
	ns.unlink(l)
	ns.settle(l.res, &eff)
	return eff, nil
}

// Convert downgrades a granted lock in place — a weaker mode, or (IBITS)
// fewer bits, as a client does when a blocking AST asks for bits it can
// spare — and returns the waiting locks that can now be granted. If the
// converted lock no longer conflicts with any waiting lock its
// CallbackPending flag is cleared: the daemon disarms its callback timer,
// and a later conflict calls it back afresh. If it still conflicts with a
// waiting lock, it is called back again (Effects.Blocking), for the first
// such lock: its owner took the conversion as the answer to the blocking
// AST it had. Errors: ErrUnknownHandle, ErrNotOwner, and ErrInvalid for
// a waiting or FLOCK lock, an upgrade, or bits that are not a non-empty
// subset; none changes anything.
func (ns *Namespace) Convert(h Handle, owner Owner, to Conversion) (Result, error) {
	l, err := ns.owned("convert", h, owner)
	if err != nil {
		return Result{}, err
	}
	if reason := checkConversion(l, to); reason != "" {
		return Result{}, fail(ErrInvalid, "%s: convert %v: %s", ns.name, h, reason)
	}
	ns.stats.Converts++
	if to.Mode != 0 {
		l.mode = to.Mode
		if l.mode != GROUP {
			l.pol.GID = 0
		}
	}
	if to.Bits != 0 {
		l.pol.Bits = to.Bits
	}
	var out Result
	r := l.res
	ns.reprocess(r, &out.Effects)
	var by *lock
	if l.cbPending {
		if i := slices.IndexFunc(r.waiting, func(w *lock) bool { return conflicts(w, l) }); i >= 0 {
			by = r.waiting[i]
		} else {
			l.cbPending = false
		}
	}
	out.Lock = l.snapshot()
	if by != nil {
		// The owner converted away what its blocking AST asked for, and
		// takes the lock as settled; a request queued since (sent no AST,
		// the lock being marked already) still waits for what is left.
		out.Blocking = append(out.Blocking, Blocking{Lock: out.Lock, By: by.snapshot()})
		ns.stats.BlockingASTs++
	}
	return out, nil
}

// DropOwner removes every lock of owner, granted or waiting, from every
// resource — what eviction does — and returns the grants that follow.
// Effects.Removed lists the dropped handles in handle order, so the daemon
// can disarm their timers; no AST goes to the evicted owner.
func (ns *Namespace) DropOwner(owner Owner) Effects {
	var mine []*lock
	for _, l := range ns.locks {
		if l.owner == owner {
			mine = append(mine, l)
		}
	}
	slices.SortFunc(mine, func(a, b *lock) int { return cmp.Compare(a.h, b.h) })
	var eff Effects
	var touched []*resource
	for _, l := range mine {
		ns.unlink(l)
		eff.Removed = append(eff.Removed, l.h)
		if !slices.Contains(touched, l.res) {
			touched = append(touched, l.res)
		}
	}
	slices.SortFunc(touched, func(a, b *resource) int { return compareResource(a.name, b.name) })
	for _, r := range touched {
		ns.settle(r, &eff)
	}
	ns.stats.Evicted += uint64(len(mine))
	return eff
}

// Recovered ends a recovery: it grants the waiting locks that can be
// granted, resource by resource, and calls back the granted locks that
// the others wait for, as Enqueue would have had they come after every
// lock replayed with Replay (RecoveryWait queued them without either).
func (ns *Namespace) Recovered() Effects {
	var eff Effects
	for _, n := range ns.Resources() {
		r := ns.res[n]
		ns.reprocess(r, &eff)
		if n.Type == TypeFlock {
			continue // never called back
		}
		for i, w := range r.waiting {
			for _, c := range r.granted {
				if c.mode == GROUP || c.cbPending || !conflicts(w, c) {
					continue
				}
				c.cbPending = true
				eff.Blocking = append(eff.Blocking, Blocking{Lock: c.snapshot(), By: w.snapshot()})
				ns.stats.BlockingASTs++
			}
			for _, c := range r.waiting[:i] {
				if c.mode != GROUP && conflicts(w, c) {
					c.cbPending = true
				}
			}
		}
	}
	return eff
}

// Lookup returns a snapshot of the lock with handle h, or ErrUnknownHandle.
func (ns *Namespace) Lookup(h Handle) (Lock, error) {
	l := ns.locks[h]
	if l == nil {
		return Lock{}, fail(ErrUnknownHandle, "%s: lookup %v", ns.name, h)
	}
	return l.snapshot(), nil
}

// Test reports the first granted lock that conflicts with req, without
// queueing anything: F_GETLK for FLOCK (Lustre's LDLM_FL_TEST_LOCK), and a
// probe for the other types. It ignores waiting locks, so a request Test
// finds free may still queue behind a waiting one (except FLOCK, which has
// no queue fairness). A FLOCK NL request is ErrInvalid, as F_GETLK with
// F_UNLCK is.
func (ns *Namespace) Test(req Request) (Lock, bool, error) {
	reason := checkRequest(req)
	if reason == "" && req.Resource.Type == TypeFlock && req.Mode == NL {
		reason = "test of an unlock"
	}
	if reason != "" {
		return Lock{}, false, fail(ErrInvalid, "%s: test %s %v by %q: %s", ns.name, req.Resource, req.Mode, req.Owner, reason)
	}
	r := ns.res[req.Resource]
	if r == nil {
		return Lock{}, false, nil
	}
	l := &lock{name: req.Resource, owner: req.Owner, mode: req.Mode, pol: req.Policy, req: req.Policy.Extent}
	if r.groupJoin(l) {
		return Lock{}, false, nil
	}
	for _, g := range r.granted {
		if conflicts(l, g) {
			return g.snapshot(), true, nil
		}
	}
	return Lock{}, false, nil
}

// Locks returns snapshots of the locks on a resource: granted ones in
// grant order, then waiting ones in queue order. It returns nil for a
// resource with no locks.
func (ns *Namespace) Locks(res Resource) []Lock {
	r := ns.res[res]
	if r == nil {
		return nil
	}
	out := make([]Lock, 0, len(r.granted)+len(r.waiting))
	for _, l := range r.granted {
		out = append(out, l.snapshot())
	}
	for _, l := range r.waiting {
		out = append(out, l.snapshot())
	}
	return out
}

// Resources returns the resources that hold locks, sorted by id then type.
func (ns *Namespace) Resources() []Resource {
	out := make([]Resource, 0, len(ns.res))
	for k := range ns.res {
		out = append(out, k)
	}
	slices.SortFunc(out, compareResource)
	return out
}

// SetLVB stores a resource's lock value block (a copy). A resource exists
// only while it has locks, and its LVB goes with it; setting the LVB of a
// resource without locks fails with ErrUnknownResource.
func (ns *Namespace) SetLVB(res Resource, v LVB) error {
	r := ns.res[res]
	if r == nil {
		return fail(ErrUnknownResource, "%s: set lvb %s", ns.name, res)
	}
	r.lvb = v.clone()
	return nil
}

// LVB returns a copy of a resource's lock value block, and whether the
// resource exists.
func (ns *Namespace) LVB(res Resource) (LVB, bool) {
	r := ns.res[res]
	if r == nil {
		return LVB{}, false
	}
	return r.lvb.clone(), true
}

// Stats returns the namespace's counters.
func (ns *Namespace) Stats() Stats { return ns.stats }

// owned finds the lock h and checks that owner holds it.
func (ns *Namespace) owned(op string, h Handle, owner Owner) (*lock, error) {
	l := ns.locks[h]
	if l == nil {
		return nil, fail(ErrUnknownHandle, "%s: %s %v by %q", ns.name, op, h, owner)
	}
	if l.owner != owner {
		return nil, fail(ErrNotOwner, "%s: %s %v by %q: held by %q", ns.name, op, h, owner, l.owner)
	}
	return l, nil
}

// resource returns the resource named n, creating it if needed.
func (ns *Namespace) resource(n Resource) (*resource, bool) {
	if r := ns.res[n]; r != nil {
		return r, false
	}
	r := &resource{name: n}
	ns.res[n] = r
	ns.stats.Resources++
	return r, true
}

// register gives l a handle on resource r.
func (ns *Namespace) register(r *resource, l *lock) {
	l.res = r
	l.h = ns.nextHandle()
	ns.locks[l.h] = l
}

func (ns *Namespace) nextHandle() Handle {
	h := ns.next
	if h == 0 {
		h = 1
	}
	ns.next = h + 1
	return h
}

// grant puts l, which is on no queue, on r's granted queue.
func (ns *Namespace) grant(r *resource, l *lock) {
	if r.name.Type == TypeExtent && !l.noExpand && l.mode != GROUP {
		l.pol.Extent = ns.grow(r, l)
	}
	l.granted = true
	r.granted = append(r.granted, l)
	ns.stats.Granted++
}

// unlink removes l from its queue and from the handle table. The resource
// stays until settle.
func (ns *Namespace) unlink(l *lock) {
	r := l.res
	if l.granted {
		r.granted = removeLock(r.granted, l)
		ns.stats.Granted--
	} else {
		r.waiting = removeLock(r.waiting, l)
		ns.stats.Waiting--
		if r.name.Type == TypeFlock {
			ns.unindexFlockWaiter(l)
		}
	}
	delete(ns.locks, l.h)
}

// settle grants what can be granted on r after a change, and frees r if
// it is empty.
func (ns *Namespace) settle(r *resource, eff *Effects) {
	ns.reprocess(r, eff)
	if len(r.granted) == 0 && len(r.waiting) == 0 {
		delete(ns.res, r.name)
		ns.stats.Resources--
	}
}

// reprocess grants every waiting lock of r that is now grantable, in
// queue order. A waiting lock is grantable when it conflicts with no
// granted lock and no waiting lock ahead of it — the same rule Enqueue
// applies, so a request's fate does not depend on whether it arrived
// before or after a cancel. (Lustre's ldlm_reprocess_queue stops at the
// first waiting lock it cannot grant; scanning on lets a lock that
// conflicts with nothing ahead of it through, and fairness holds because a
// lock never passes one it conflicts with.)
func (ns *Namespace) reprocess(r *resource, eff *Effects) {
	if r.name.Type == TypeFlock {
		ns.reprocessFlock(r, eff)
		return
	}
	for i := 0; i < len(r.waiting); {
		l := r.waiting[i]
		if !r.grantable(l, r.waiting[:i]) {
			i++
			continue
		}
		r.waiting = slices.Delete(r.waiting, i, i+1)
		ns.stats.Waiting--
		ns.grant(r, l)
		// Requests that marked l while it waited may have gone since:
		// ask for a cancel after use only if one still waits for it.
		l.cbPending = l.mode != GROUP && r.blocksWaiter(l)
		eff.Granted = append(eff.Granted, l.snapshot())
		ns.stats.CompletionASTs++
	}
}

// blocksWaiter reports whether a waiting lock of r conflicts with granted
// lock l.
func (r *resource) blocksWaiter(l *lock) bool {
	return slices.ContainsFunc(r.waiting, func(w *lock) bool { return conflicts(w, l) })
}

// enqueueCheck decides a fresh request: grantable now, or the locks it
// conflicts with (granted first, then waiting, in queue order).
func (r *resource) enqueueCheck(l *lock) (bool, []*lock) {
	if r.groupJoin(l) {
		return true, nil
	}
	var cs []*lock
	for _, g := range r.granted {
		if conflicts(l, g) {
			cs = append(cs, g)
		}
	}
	for _, w := range r.waiting {
		if conflicts(l, w) {
			cs = append(cs, w)
		}
	}
	return len(cs) == 0, cs
}

// grantable reports whether waiting lock l may be granted given the locks
// ahead of it in the waiting queue.
func (r *resource) grantable(l *lock, ahead []*lock) bool {
	if r.groupJoin(l) {
		return true
	}
	for _, g := range r.granted {
		if conflicts(l, g) {
			return false
		}
	}
	for _, w := range ahead {
		if conflicts(l, w) {
			return false
		}
	}
	return true
}

// groupJoin reports whether l is a GROUP request whose group already holds
// the resource. Lustre grants it at once, ahead of any waiters: the members
// of a group take the lock together and release it together, so making a
// late member queue behind a writer that waits for the group would hang
// the group.
func (r *resource) groupJoin(l *lock) bool {
	if l.mode != GROUP {
		return false
	}
	for _, g := range r.granted {
		if g.mode == GROUP && g.pol.GID == l.pol.GID {
			return true
		}
	}
	return false
}

// enqueueWaiting queues l and returns its position. Other modes go to the
// tail. A GROUP request goes right after a waiting request of its group,
// else ahead of the first waiting request of another mode — Lustre's
// ldlm_extent_compat_queue placement, which lets a whole group be granted
// at once.
func (r *resource) enqueueWaiting(l *lock) int {
	pos := len(r.waiting)
	if l.mode == GROUP {
		first, last := -1, -1
		for i, w := range r.waiting {
			if w.mode == GROUP && w.pol.GID == l.pol.GID {
				last = i
			}
			if w.mode != GROUP && first < 0 {
				first = i
			}
		}
		switch {
		case last >= 0:
			pos = last + 1
		case first >= 0:
			pos = first
		}
	}
	r.waiting = slices.Insert(r.waiting, pos, l)
	return pos
}

// conflicts reports whether locks a and b on one resource cannot both be
// granted, a being the one to grant.
func conflicts(a, b *lock) bool {
	if t := a.tolerate; t.Lock != 0 && b.h == t.Lock && b.owner == t.Owner && b.granted && b.mode == PR {
		return false
	}
	if Compatible(a.mode, b.mode) {
		return a.mode == GROUP && b.mode == GROUP && a.pol.GID != b.pol.GID
	}
	switch a.name.Type {
	case TypeExtent:
		// A GROUP lock excludes every other mode but NL whatever the
		// ranges (ldlm_extent_compat_queue: "extent range does not
		// matter").
		return a.mode == GROUP || b.mode == GROUP || a.pol.Extent.overlaps(b.pol.Extent)
	case TypeIBits:
		return a.pol.Bits&b.pol.Bits != 0
	case TypeFlock:
		return a.flockKey() != b.flockKey() && a.pol.Extent.overlaps(b.pol.Extent)
	}
	return true
}

func removeLock(q []*lock, l *lock) []*lock {
	if i := slices.Index(q, l); i >= 0 {
		return slices.Delete(q, i, i+1)
	}
	return q
}

func (l *lock) snapshot() Lock {
	st := Waiting
	if l.granted {
		st = Granted
	}
	return Lock{
		Handle:          l.h,
		Resource:        l.name,
		Owner:           l.owner,
		Mode:            l.mode,
		State:           st,
		Policy:          l.pol,
		Requested:       l.req,
		CallbackPending: l.cbPending,
	}
}

func compareResource(a, b Resource) int {
	for i := range a.ID {
		if c := cmp.Compare(a.ID[i], b.ID[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(a.Type, b.Type)
}

// checkRequest returns why req is invalid, or "".
func checkRequest(req Request) string {
	t, m, p := req.Resource.Type, req.Mode, req.Policy
	switch {
	case !t.Valid():
		return fmt.Sprintf("unknown lock type %d", uint8(t))
	case req.Owner == "":
		return "no owner"
	case !m.Valid():
		return fmt.Sprintf("unknown mode %#x", uint8(m))
	case !validModeFor(t, m):
		return fmt.Sprintf("mode %v is not valid for %v locks", m, t)
	case req.Flags&^allFlags != 0:
		return fmt.Sprintf("unknown flags %#x", uint32(req.Flags&^allFlags))
	case req.Tolerate != Tolerated{} && (t != TypeIBits || req.Tolerate.Lock == 0 || req.Tolerate.Owner == "" || req.Tolerate.Owner == req.Owner):
		return "tolerates no lock, a lock of its own owner or of a type other than IBITS"
	}
	foreign := false
	switch t {
	case TypePlain:
		foreign = p != Policy{}
	case TypeExtent:
		switch {
		case p.Extent.Start > p.Extent.End:
			return fmt.Sprintf("extent start %d past end %d", p.Extent.Start, p.Extent.End)
		case m == GROUP && p.GID == 0:
			return "GROUP lock with group id 0"
		case m != GROUP && p.GID != 0:
			return fmt.Sprintf("group id on a %v lock", m)
		}
		foreign = p.Bits != 0 || p.FlockOwner != 0 || p.PID != 0
	case TypeFlock:
		if p.Extent.Start > p.Extent.End {
			return fmt.Sprintf("extent start %d past end %d", p.Extent.Start, p.Extent.End)
		}
		foreign = p.Bits != 0 || p.GID != 0
	case TypeIBits:
		switch {
		case p.Bits == 0:
			return "no inode bits"
		case p.Bits&^AllBits != 0:
			return fmt.Sprintf("unknown inode bits %#x", uint64(p.Bits&^AllBits))
		}
		foreign = p.Extent != Extent{} || p.GID != 0 || p.FlockOwner != 0 || p.PID != 0
	}
	if foreign {
		return fmt.Sprintf("policy data of another lock type for %v locks", t)
	}
	return ""
}

// checkConversion returns why converting l to c is invalid, or "".
func checkConversion(l *lock, c Conversion) string {
	t := l.name.Type
	switch {
	case t == TypeFlock:
		return "FLOCK locks change by enqueue, not convert"
	case !l.granted:
		return "the lock is waiting; only granted locks convert"
	case c.Mode == 0 && c.Bits == 0:
		return "nothing to convert to"
	}
	if c.Mode != 0 {
		switch {
		case !validModeFor(t, c.Mode):
			return fmt.Sprintf("mode %v is not valid for %v locks", c.Mode, t)
		case c.Mode == GROUP && l.mode != GROUP:
			return "a lock cannot join a group by conversion"
		case !covers(l.mode, c.Mode):
			return fmt.Sprintf("%v → %v is not a downgrade", l.mode, c.Mode)
		}
	}
	if c.Bits != 0 {
		switch {
		case t != TypeIBits:
			return fmt.Sprintf("inode bits on a %v lock", t)
		case c.Bits&^l.pol.Bits != 0:
			return fmt.Sprintf("bits %v are not a subset of %v", c.Bits, l.pol.Bits)
		}
	}
	return ""
}
