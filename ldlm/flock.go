package ldlm

// POSIX record locks, after Lustre's ldlm/ldlm_flock.c. A FLOCK lock
// belongs to a lock owner (a process) on a client: flockKey. An owner's
// locks never conflict with each other and never overlap: a new lock
// replaces what the owner held in its range, merges with the owner's
// overlapping or adjacent locks of the same mode, and trims or splits the
// owner's locks of the other mode. Conflicts are only with other owners'
// granted locks; POSIX locks have no queue fairness and are never called
// back, so they produce no blocking ASTs.

// enqueueFlock is Enqueue for a FLOCK request l (validated, not yet
// registered) on r (nil if the resource does not exist yet).
func (ns *Namespace) enqueueFlock(r *resource, l *lock, flags Flags) (Result, error) {
	if l.mode == NL {
		out := Result{Lock: Lock{Resource: l.name, Owner: l.owner, Mode: NL, State: Granted, Policy: l.pol, Requested: l.req}}
		if r != nil {
			ns.flockApply(r, l, &out.Effects)
			ns.settle(r, &out.Effects)
		}
		return out, nil
	}
	var blocker *lock
	if r != nil {
		blocker = r.flockBlocker(l)
	}
	if blocker != nil {
		if flags&BlockNoWait != 0 {
			ns.stats.Aborted++
			return Result{}, fail(ErrWouldBlock, "%s: flock %s %v %v by %q/%d: held by %q/%d (%v)",
				ns.name, l.name, l.mode, l.req, l.owner, l.pol.FlockOwner, blocker.owner, blocker.pol.FlockOwner, blocker.h)
		}
		if ns.flockDeadlock(r, l) {
			ns.stats.Deadlocks++
			return Result{}, fail(ErrDeadlock, "%s: flock %s %v %v by %q/%d: waits on %q/%d, which waits, directly or through others, on it",
				ns.name, l.name, l.mode, l.req, l.owner, l.pol.FlockOwner, blocker.owner, blocker.pol.FlockOwner)
		}
	}
	var out Result
	r, out.NewResource = ns.resource(l.name)
	ns.register(r, l)
	if blocker != nil {
		r.waiting = append(r.waiting, l)
		ns.stats.Waiting++
		k := l.flockKey()
		ns.flockWaiting[k] = append(ns.flockWaiting[k], l)
		out.NoTimeout = true
		out.Lock = l.snapshot()
		return out, nil
	}
	ns.flockApply(r, l, &out.Effects)
	ns.grant(r, l)
	out.Lock = l.snapshot()
	// Replacing the owner's locks may have released ranges (a downgrade,
	// a partial unlock by a lock of the other mode): others may go.
	ns.settle(r, &out.Effects)
	return out, nil
}

// flockBlocker returns the first granted lock of another owner that
// conflicts with l, or nil.
func (r *resource) flockBlocker(l *lock) *lock {
	for _, g := range r.granted {
		if conflicts(l, g) {
			return g
		}
	}
	return nil
}

// flockApply makes room for nl, a lock (or, in mode NL, an unlock) of its
// owner that is on no queue: the owner's locks of nl's mode that overlap or
// touch it are merged into it (removed, nl's extent widened); the owner's
// locks of another mode inside its range are removed, trimmed, or split in
// two. Owners' locks never overlap each other, so merging cannot make nl
// reach further locks of another mode.
func (ns *Namespace) flockApply(r *resource, nl *lock, eff *Effects) {
	key := nl.flockKey()
	ext := nl.pol.Extent
	kept := make([]*lock, 0, len(r.granted)+1)
	for _, g := range r.granted {
		gx := g.pol.Extent
		switch {
		case g.flockKey() != key:
			kept = append(kept, g)
		case g.mode == nl.mode:
			if !gx.touches(ext) {
				kept = append(kept, g)
				continue
			}
			ext = Extent{min(ext.Start, gx.Start), max(ext.End, gx.End)}
			ns.dropFlock(g, eff)
		case !gx.overlaps(ext):
			kept = append(kept, g)
		case ext.contains(gx):
			ns.dropFlock(g, eff)
		case gx.Start < ext.Start && gx.End > ext.End:
			tail := &lock{name: g.name, owner: g.owner, mode: g.mode, granted: true, pol: g.pol}
			tail.pol.Extent = Extent{ext.End + 1, gx.End}
			tail.req = tail.pol.Extent
			ns.register(r, tail)
			g.pol.Extent.End = ext.Start - 1
			g.req = g.pol.Extent
			ns.stats.Granted++
			kept = append(kept, g, tail)
			eff.Changed = append(eff.Changed, g.snapshot(), tail.snapshot())
		case gx.Start < ext.Start:
			g.pol.Extent.End = ext.Start - 1
			g.req = g.pol.Extent
			kept = append(kept, g)
			eff.Changed = append(eff.Changed, g.snapshot())
		default:
			g.pol.Extent.Start = ext.End + 1
			g.req = g.pol.Extent
			kept = append(kept, g)
			eff.Changed = append(eff.Changed, g.snapshot())
		}
	}
	r.granted = kept
	nl.pol.Extent = ext
	nl.req = ext
}

// dropFlock forgets a granted FLOCK lock that flockApply has taken off
// the granted queue.
func (ns *Namespace) dropFlock(g *lock, eff *Effects) {
	delete(ns.locks, g.h)
	ns.stats.Granted--
	eff.Removed = append(eff.Removed, g.h)
}

// reprocessFlock grants every waiting FLOCK lock of r that no other owner
// blocks, then fails the waiting locks that are now part of a wait cycle.
// A grant replaces locks of the grantee, which can unblock a lock passed
// over earlier in the scan, so the scan restarts after each grant.
func (ns *Namespace) reprocessFlock(r *resource, eff *Effects) {
	for i := 0; i < len(r.waiting); {
		l := r.waiting[i]
		if r.flockBlocker(l) != nil {
			i++
			continue
		}
		r.waiting = removeLock(r.waiting, l)
		ns.stats.Waiting--
		ns.unindexFlockWaiter(l)
		ns.flockApply(r, l, eff)
		ns.grant(r, l)
		eff.Granted = append(eff.Granted, l.snapshot())
		ns.stats.CompletionASTs++
		i = 0
	}
	// The grants may have put new holders in front of waiting locks; a
	// waiting lock may now wait, through them, on itself (Lustre checks
	// this on reprocess too, ldlm_flock_cancel_on_deadlock).
	for i := 0; i < len(r.waiting); {
		l := r.waiting[i]
		if !ns.flockDeadlock(r, l) {
			i++
			continue
		}
		ns.unlink(l)
		ns.stats.Deadlocks++
		eff.Failed = append(eff.Failed, Failure{
			Lock: l.snapshot(),
			Err: fail(ErrDeadlock, "%s: flock %s %v %v by %q/%d (%v): the locks it waits on now wait on it",
				ns.name, l.name, l.mode, l.req, l.owner, l.pol.FlockOwner, l.h),
		})
	}
}

func (ns *Namespace) unindexFlockWaiter(l *lock) {
	k := l.flockKey()
	q := removeLock(ns.flockWaiting[k], l)
	if len(q) == 0 {
		delete(ns.flockWaiting, k)
		return
	}
	ns.flockWaiting[k] = q
}

// flockDeadlock reports whether l, waiting (or about to wait) on r, waits
// on its own owner: l is blocked by the owners of the granted locks it
// conflicts with; each of those is blocked by whatever its own waiting
// locks, on any resource of the namespace, conflict with; and so on.
// Lustre's ldlm_flock_deadlock follows one blocker per waiting lock; this
// follows all of them, so it also finds cycles through a lock blocked by
// several owners.
func (ns *Namespace) flockDeadlock(r *resource, l *lock) bool {
	target := l.flockKey()
	var stack []flockKey
	push := func(w *lock, wr *resource) {
		for _, g := range wr.granted {
			if conflicts(w, g) {
				stack = append(stack, g.flockKey())
			}
		}
	}
	push(l, r)
	seen := make(map[flockKey]bool)
	for len(stack) > 0 {
		k := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if k == target {
			return true
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		for _, w := range ns.flockWaiting[k] {
			push(w, w.res)
		}
	}
	return false
}
