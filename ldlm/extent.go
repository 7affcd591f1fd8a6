package ldlm

// Extent growth, after Lustre's ldlm_extent_policy and its helpers
// (ldlm/ldlm_extent.c). A client asks for the pages it is about to touch;
// the server grants as much more as it can without conflicting, so the
// client's next reads and writes need no new lock.
const (
	// growthContended: when more than this many locks on one queue
	// conflict with the request by mode, the lock does not grow
	// downwards at all (clients usually move forwards through a file).
	growthContended = 4
	// growthCapContended: when more than this many conflict, a PW or CW
	// lock grows at most maxGrownExtent past the start of its request.
	growthCapContended = 32
	// maxGrownExtent is Lustre's LDLM_MAX_GROWN_EXTENT: 32 MiB - 1.
	maxGrownExtent = 32<<20 - 1
)

// grow returns the extent to grant l, which is on no queue of r. The rule:
//
//  1. Start from the whole object [0, EOF].
//  2. Every granted lock whose mode conflicts with l's bounds the growth:
//     the result stops short of it on whichever side of the request it
//     lies. If more than growthContended such locks exist, no growth
//     downwards.
//  3. Every waiting lock whose mode conflicts — or that belongs to l's
//     owner, so one client does not pile up overlapping locks — bounds it
//     the same way, except locks whose requested extent overlaps l's
//     request: those wait for l whatever it is granted, so they do not
//     limit it. More than growthContended of them: no growth downwards.
//  4. After each of steps 2 and 3, with more than growthCapContended
//     conflicting locks a PW or CW lock grows at most maxGrownExtent past
//     its requested start; and the result is shrunk to the alignment of
//     the request (the largest power of two, at least the page size,
//     dividing both its start and its end + 1) so that no page is ever
//     covered by two write locks.
//
// The result always contains the request. Whole-object requests, GROUP
// locks and NoExpansion requests do not grow.
func (ns *Namespace) grow(r *resource, l *lock) Extent {
	want := l.req
	if want == Whole {
		return want
	}
	ex := Whole
	n := 0
	for _, g := range r.granted {
		if Compatible(g.mode, l.mode) {
			continue
		}
		n++
		ex = clip(ex, g.pol.Extent, want)
	}
	if n > growthContended {
		ex.Start = want.Start
	}
	ex = ns.fixup(l, ex, n)

	n = 0
	for _, w := range r.waiting {
		if w == l || (Compatible(w.mode, l.mode) && w.owner != l.owner) {
			continue
		}
		n++
		if w.req.overlaps(want) {
			continue
		}
		ex = clip(ex, w.pol.Extent, want)
	}
	if n > growthContended {
		ex.Start = want.Start
	}
	return ns.fixup(l, ex, n)
}

// clip shrinks ex so that it does not overlap o, keeping want (which o
// does not overlap) inside it.
func clip(ex, o, want Extent) Extent {
	switch {
	case o.End < want.Start:
		if o.End+1 > ex.Start {
			ex.Start = o.End + 1
		}
	case o.Start > want.End:
		if o.Start-1 < ex.End {
			ex.End = o.Start - 1
		}
	}
	return ex
}

// fixup applies Lustre's ldlm_extent_internal_policy_fixup to a grown
// extent: the cap for contended PW/CW locks, then alignment. It only ever
// shrinks ex, and never below the request.
func (ns *Namespace) fixup(l *lock, ex Extent, conflicting int) Extent {
	want := l.req
	if conflicting > growthCapContended && (l.mode == PW || l.mode == CW) && want.Start <= EOF-maxGrownExtent {
		if lim := want.Start + maxGrownExtent; want.End < lim && lim < ex.End {
			ex.End = lim
		}
	}
	if ex == Whole {
		return ex
	}
	mask := ns.page
	if align := (want.End + 1) | want.Start; align != 0 && align&(mask-1) == 0 {
		for align&mask == 0 {
			mask <<= 1
		}
	}
	mask--
	// Round the start up and the end down to the alignment; 0 and EOF
	// stay put. An unaligned request can leave nothing to round to: keep
	// the request's own bound then (also for a start in the last
	// alignment unit, which rounds up past EOF, to 0).
	if s := ((ex.Start - 1) | mask) + 1; s <= want.Start && (s != 0 || ex.Start == 0) {
		ex.Start = s
	} else {
		ex.Start = want.Start
	}
	if ex.End != EOF {
		if e := (ex.End + 1) &^ mask; e != 0 && e-1 >= want.End {
			ex.End = e - 1
		} else {
			ex.End = want.End
		}
	}
	return ex
}
