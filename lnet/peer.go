package lnet

import (
	"errors"
	"fmt"
	"time"

	"github.com/nacrefs/nacre/lnet/wire"
)

// healthMax is the health of a NI or peer NI nothing has gone wrong with
// (LNET_MAX_HEALTH_VALUE). Send failures lower it; the selection prefers
// the healthiest path.
const healthMax = 1000

// discState is where a peer stands in discovery.
type discState uint8

const (
	discNone discState = iota // not pinged yet (or the last ping failed)
	discBusy                  // a discovery ping is in flight
	discDone                  // pinged: nis holds what its ping listed
)

// peer is one remote node, known by one or more NIDs (Lustre's lnet_peer).
// A peer starts with the one peer NI it was first sent to or heard from;
// discovery (a ping returning the peer's NID list, see ping.go) adds the
// others, and selection then spreads sends over those on the destination's
// net.
//
// Protected by LNet.net.
type peer struct {
	primary wire.NID
	nis     []*peerNI
	// mr is set once the peer's ping advertised multi-rail: its NIs are
	// then one node, and sends spread over them.
	mr   bool
	disc discState
	// pinged: the peer discovered this node (its pushes go to it);
	// pushSeq: the number of the last push taken from it.
	pinged  bool
	pushSeq uint64
	// discRetry is when automatic discovery may try again after a failed
	// ping.
	discRetry time.Time
	// sweep is the aging pass that last looked at the peer.
	sweep uint64
	// configured: an administrator made the peer (AddPeer); it is not
	// aged out, and other peers' discovery does not take its NIDs.
	configured bool
}

// peerNI is one NID of a peer (lnet_peer_ni): the unit of peer credits and
// peer health.
type peerNI struct {
	peer *peer
	nid  wire.NID

	// Protected by LNet.net.
	maxCredits int
	credits    int      // send credits left; negative: that many wait on txq
	minCredits int      // low-water mark of credits
	txq        msgQueue // messages waiting for a peer credit
	health     int
	state      PeerEvent // last event the LND reported, 0 if none
	seq        uint64    // selection round-robin
	sendCount  uint64
	sendBytes  uint64
	recvCount  uint64
	recvBytes  uint64
	// lastActive is when the aging sweep first saw a successful send to, or
	// receive from, the peer NI since its previous sweep (or when it was
	// made); peers idle for Config.PeerAge go. The sweep notices a change of
	// sendCount+recvCount (seenCount), so that no message reads the clock
	// for it: the time is late by at most one sweep, which errs on the side
	// of keeping a peer.
	lastActive time.Time
	seenCount  uint64
	// recovering is set while a recovery ping of the peer NI is in flight;
	// nextRecovery is when the next may go.
	recovering   bool
	nextRecovery time.Time
	// lastAlive is when the peer NI was last heard from, on a router only
	// (Lustre's lpni_last_alive, kept only when routing), or when the LND
	// last connected to it; zero if never. See deadNextHopLocked.
	lastAlive time.Time
}

// deadNextHopLocked reports whether a router must drop, rather than queue,
// a message it forwards to lp from n (Lustre's lnet_peer_alive_locked): lp
// failed a send or a transaction (its health is below full) and has not
// been heard from for the NI's Tunables.PeerTimeout (0 turns the check
// off). Such a message would hold a router buffer and a credit until its
// transaction timeout, and enough of them would stall forwarding to every
// other destination. Recovery pings, which are not forwarded messages,
// still go to lp; the first answer makes it alive again.
func deadNextHopLocked(n *ni, lp *peerNI, now time.Time) bool {
	pt := n.tun.PeerTimeout
	return pt > 0 && lp.health < healthMax && now.Sub(lp.lastAlive) >= pt
}

// idleLocked reports whether nothing of the peer NI is in flight: no
// message holds or waits for one of its credits.
func (lp *peerNI) idleLocked() bool { return lp.credits == lp.maxCredits && lp.txq.n == 0 }

// netNIs returns the local NIs on net, in configuration order (nil
// for lo and for nets this node is not on).
func (ln *LNet) netNIs(net wire.Net) []*ni { return ln.nit.Load().byNet[net] }

// peerNILocked returns the peer NI of nid, creating it (and a peer of its
// own) if it is new, with the peer credits of the local NI on its net (or
// DefaultPeerCredits for a NID on a net this node reaches only through a
// router). It fails with ErrPeerTableFull when the table holds
// Config.MaxPeers peer NIs.
func (ln *LNet) peerNILocked(nid wire.NID) (*peerNI, error) {
	if lp := ln.net.peers[nid]; lp != nil {
		return lp, nil
	}
	if nid != wire.LoNID && len(ln.net.peers) >= ln.cfg.MaxPeers {
		return nil, ln.peerTableFullLocked(nid)
	}
	lp := ln.newPeerNILocked(nid)
	lp.peer = &peer{primary: nid, nis: []*peerNI{lp}}
	return lp, nil
}

// newPeerNILocked makes a peer NI and enters it in the table; the caller
// gives it its peer.
func (ln *LNet) newPeerNILocked(nid wire.NID) *peerNI {
	c := DefaultPeerCredits
	if nid == wire.LoNID {
		c = ln.lo.tun.PeerCredits
	} else if nis := ln.netNIs(nid.Net); len(nis) > 0 {
		c = nis[0].tun.PeerCredits
	}
	lp := &peerNI{nid: nid, maxCredits: c, credits: c, minCredits: c, health: healthMax, lastActive: time.Now()}
	ln.net.peers[nid] = lp
	return lp
}

// peerTableFullLocked builds the error for a peer NI that does not fit, and
// logs it (at most once a second: a full table is hit by every message).
func (ln *LNet) peerTableFullLocked(nid wire.NID) error {
	ln.net.peersRefused++
	if now := time.Now(); now.Sub(ln.net.fullLogged) >= time.Second {
		ln.net.fullLogged = now
		ln.log.Warn("peer table full: refusing a new peer", "peer", nid, "max_peers", ln.cfg.MaxPeers,
			"refused_so_far", ln.net.peersRefused)
	}
	return fmt.Errorf("%w: %d peer NIs known, cannot add %v", ErrPeerTableFull, ln.cfg.MaxPeers, nid)
}

// dropPeerLocked forgets a peer and all its peer NIs.
func (ln *LNet) dropPeerLocked(p *peer) {
	for _, lp := range p.nis {
		if ln.net.peers[lp.nid] == lp {
			delete(ln.net.peers, lp.nid)
		}
		delete(ln.net.recovery, lp)
	}
	p.nis = nil
}

// movePeerNILocked makes lp one of p's peer NIs, taking it from the peer it
// belonged to (which disappears once it has none left).
func movePeerNILocked(lp *peerNI, p *peer) {
	old := lp.peer
	if old == p {
		return
	}
	for i, q := range old.nis {
		if q == lp {
			old.nis = append(old.nis[:i], old.nis[i+1:]...)
			break
		}
	}
	if len(old.nis) > 0 && old.primary == lp.nid {
		old.primary = old.nis[0].nid
	}
	lp.peer = p
	p.nis = append(p.nis, lp)
}

// peerNIDsLocked returns every NID of the peer that has nid, or just nid if
// the peer is unknown.
func (ln *LNet) peerNIDsLocked(nid wire.NID) []wire.NID {
	lp := ln.net.peers[nid]
	if lp == nil {
		return []wire.NID{nid}
	}
	out := make([]wire.NID, len(lp.peer.nis))
	for i, p := range lp.peer.nis {
		out[i] = p.nid
	}
	return out
}

// selectPathLocked chooses how m reaches its destination: the local NI,
// the peer NI and the next hop (lnet_select_pathway).
//
//   - A message to one of our own NIDs goes through 0@lo.
//   - A destination on a net of ours is sent directly: the local NI among
//     ours on that net, the peer NI among the peer's NIDs on that net (all
//     of them once discovery found the peer multi-rail), each chosen by
//     pick. Responses (m.exactDst) go to exactly the NID they answer, from
//     the NI the request came in on (m.forceNI), so they retrace the
//     request's path.
//   - A destination on another net whose peer discovery showed NIDs on a
//     net of ours is sent directly to one of those.
//   - Otherwise the message is routed: the header keeps the final
//     destination and the next hop is the gateway of the best live route
//     (routeLocked), reached like any peer.
//
// With m.fixedSrc the header's source NID is kept (responses, forwarded
// messages); otherwise it becomes the chosen local NI's. When m.discover
// may be set, a peer sent to for the first time is marked for automatic
// discovery, which the caller starts once it has dropped the lock.
func (ln *LNet) selectPathLocked(m *msg) error {
	dst := m.lm.Hdr.DstNID
	m.gw = nil
	if dst.Net.Type == wire.LO || ln.isLocal(dst) {
		if dst.Net.Type == wire.LO && dst != wire.LoNID {
			return errNoRoute(dst)
		}
		lp, err := ln.peerNILocked(wire.LoNID)
		if err != nil {
			return err
		}
		m.ni, m.lpni = ln.lo, lp
		m.lm.NextHop = wire.LoNID
		if !m.fixedSrc {
			m.lm.Hdr.SrcNID = dst
		}
		return nil
	}
	if locals := ln.netNIs(dst.Net); len(locals) > 0 {
		lp, err := ln.peerNILocked(dst)
		if err != nil {
			return err
		}
		ln.markDiscoveryLocked(m, lp.peer)
		if !m.exactDst && lp.peer.mr {
			lp = pickPeerNI(lp.peer, dst.Net)
		}
		return ln.setPathLocked(m, locals, lp)
	}
	// Another net. A multi-rail peer may have NIDs on ours.
	if lp := ln.net.peers[dst]; lp != nil && lp.peer.mr && !m.exactDst {
		var best *peerNI
		for _, q := range lp.peer.nis {
			if len(ln.netNIs(q.nid.Net)) > 0 && (best == nil || q.score().better(best.score())) {
				best = q
			}
		}
		if best != nil {
			return ln.setPathLocked(m, ln.netNIs(best.nid.Net), best)
		}
	}
	gw, err := ln.routeLocked(dst.Net)
	if err != nil {
		return err
	}
	glp, err := ln.peerNILocked(gw.nid)
	if err != nil {
		return err
	}
	if m.discover == discoverOK {
		// The destination's peer is tracked (for discovery and for lnetctl)
		// even though credits are the gateway's.
		if lp, err := ln.peerNILocked(dst); err == nil {
			lp.lastActive = time.Now()
			ln.markDiscoveryLocked(m, lp.peer)
		}
	}
	m.gw = gw
	if glp.peer.mr {
		glp = pickPeerNI(glp.peer, gw.nid.Net)
	}
	return ln.setPathLocked(m, ln.netNIs(gw.nid.Net), glp)
}

// setPathLocked picks the local NI among locals (or takes m.forceNI), and
// records the choice of it and of the peer NI lp in m.
func (ln *LNet) setPathLocked(m *msg, locals []*ni, lp *peerNI) error {
	if len(locals) == 0 {
		// A gateway whose net a failed AddNet took back (DelNet keeps
		// the nets of gateways).
		return &routeError{dst: m.lm.Hdr.DstNID, why: "no NI on net " + lp.nid.Net.String()}
	}
	n := m.forceNI
	if n == nil || n.gone || n.nid.Net != locals[0].nid.Net {
		// An NI whose driver is still starting (AddNet) only when there
		// is no other: its start may fail.
		n = locals[0]
		for _, o := range locals[1:] {
			if (o.lnd != nil) != (n.lnd != nil) {
				if o.lnd != nil {
					n = o
				}
				continue
			}
			if o.score().better(n.score()) {
				n = o
			}
		}
	}
	seq := ln.nextSeqLocked()
	n.seq, lp.seq = seq, seq
	m.ni, m.lpni = n, lp
	m.lm.NextHop = lp.nid
	if !m.fixedSrc {
		m.lm.Hdr.SrcNID = n.nid
	}
	m.lm.Deadline = ln.attemptDeadline(m)
	return nil
}

// attemptDeadline is when the LND gives up on this try of m: the
// transaction timeout shared among the tries retry_count allows (Lustre's
// lnd_timeout), so that a path that never connects fails in time for the
// message to be resent on another (health moved off the first) before
// its own deadline. Never past m's deadline.
func (ln *LNet) attemptDeadline(m *msg) time.Time {
	if m.deadline.IsZero() {
		return m.deadline
	}
	d := time.Now().Add(ln.TransactionTimeout() / time.Duration(ln.retries()+1))
	if m.deadline.Before(d) {
		return m.deadline
	}
	return d
}

// score is what selection weighs for n. An NI whose link is down ranks
// below every other (Lustre's ni_fatal_error_on), whatever its health.
func (n *ni) score() pathScore {
	h := n.health
	if n.linkDown {
		h = -1
	}
	return pathScore{health: h, credits: n.credits, seq: n.seq}
}

func (lp *peerNI) score() pathScore {
	return pathScore{health: lp.health, credits: lp.credits, seq: lp.seq}
}

func errNoRoute(dst wire.NID) error {
	return &routeError{dst: dst}
}

type routeError struct {
	dst wire.NID
	why string
}

func (e *routeError) Error() string {
	if e.why != "" {
		return "lnet: no route to " + e.dst.String() + ": " + e.why
	}
	return "lnet: no route to " + e.dst.String()
}
func (e *routeError) Unwrap() error { return ErrNoRoute }

// nextSeqLocked advances the selection clock.
func (ln *LNet) nextSeqLocked() uint64 {
	ln.net.selSeq++
	return ln.net.selSeq
}

// pathScore is what selection weighs for one candidate NI or peer NI.
type pathScore struct {
	health  int    // higher is better
	credits int    // higher is better
	seq     uint64 // when it was last picked; lower (longer ago) is better
}

// pick returns the index of the best of n candidates: the healthiest, then
// the one with the most credits, then the one picked longest ago (round
// robin). Ties beyond that go to the lowest index. It is a pure function so
// the selection rules can be tested alone.
func pick(n int, score func(i int) pathScore) int {
	best := 0
	bs := score(0)
	for i := 1; i < n; i++ {
		if s := score(i); s.better(bs) {
			best, bs = i, s
		}
	}
	return best
}

// better reports whether s beats t by pick's rules.
func (s pathScore) better(t pathScore) bool {
	switch {
	case s.health != t.health:
		return s.health > t.health
	case s.credits != t.credits:
		return s.credits > t.credits
	}
	return s.seq < t.seq
}

// pickPeerNI returns the best of p's peer NIs on net by pick's rules, or
// nil if it has none there.
func pickPeerNI(p *peer, net wire.Net) *peerNI {
	var best *peerNI
	for _, q := range p.nis {
		if q.nid.Net == net && (best == nil || q.score().better(best.score())) {
			best = q
		}
	}
	return best
}

// The health rules (lnet_health_check), with s = Config.HealthSensitivity:
//
//   - A send the LND completed raises its local NI by s.
//   - A message received raises the NI it came in on and the peer NI that
//     handed it over by s (hearing from a peer NI is the only sure sign it
//     works; a send that left says nothing about the far end).
//   - A send failed with ErrLocalNI lowers the local NI by s; one failed
//     with ErrPeerUnreachable, ErrConnReset or ErrTimeout lowers the peer NI
//     by s; an ACK or REPLY that never came (the transaction timed out after
//     the send left) lowers the peer NI it was sent to by s.
//   - An NI whose OS interface is down ranks below every other NI, whatever
//     its health, until the link comes back (see recovery.go).
//
// Anything below 1000 is pinged every Config.RecoveryInterval, and the
// replies raise it back as any received message does.

// healthLocked records the outcome of a send on its path's health.
func (ln *LNet) healthLocked(m *msg, err error) {
	switch {
	case err == nil:
		ln.raiseNILocked(m.ni)
	case errors.Is(err, ErrLocalNI):
		ln.lowerNILocked(m.ni)
	case errors.Is(err, ErrPeerUnreachable), errors.Is(err, ErrConnReset), errors.Is(err, ErrTimeout):
		ln.lowerPeerNILocked(m.lpni)
	}
}

func (ln *LNet) raiseNILocked(n *ni) {
	if s := ln.healthSensitivity(); s > 0 {
		n.health = min(healthMax, n.health+s)
	}
}

func (ln *LNet) lowerNILocked(n *ni) {
	if s := ln.healthSensitivity(); s > 0 && n != ln.lo {
		n.health = max(0, n.health-s)
	}
}

func (ln *LNet) raisePeerNILocked(lp *peerNI) {
	if s := ln.healthSensitivity(); s > 0 && lp.health < healthMax {
		lp.health = min(healthMax, lp.health+s)
		if lp.health == healthMax {
			delete(ln.net.recovery, lp)
		}
	}
}

func (ln *LNet) lowerPeerNILocked(lp *peerNI) {
	s := ln.healthSensitivity()
	if s <= 0 || lp.nid == wire.LoNID {
		return
	}
	lp.health = max(0, lp.health-s)
	if ln.net.peers[lp.nid] == lp {
		ln.net.recovery[lp] = struct{}{}
	}
}

// msgQueue is an intrusive FIFO of messages waiting for credits; a message
// is on at most one queue, and can leave from the middle (timeouts).
type msgQueue struct {
	head, tail *msg
	n          int
}

func (q *msgQueue) push(m *msg) {
	m.q = q
	m.qprev, m.qnext = q.tail, nil
	if q.tail != nil {
		q.tail.qnext = m
	} else {
		q.head = m
	}
	q.tail = m
	q.n++
}

func (q *msgQueue) remove(m *msg) {
	if m.qprev != nil {
		m.qprev.qnext = m.qnext
	} else {
		q.head = m.qnext
	}
	if m.qnext != nil {
		m.qnext.qprev = m.qprev
	} else {
		q.tail = m.qprev
	}
	m.q, m.qprev, m.qnext = nil, nil, nil
	q.n--
}

func (q *msgQueue) pop() *msg {
	m := q.head
	if m != nil {
		q.remove(m)
	}
	return m
}

// wouldWaitLocked reports whether posting m now would queue it.
func wouldWaitLocked(m *msg) bool {
	return (!m.peerCredit && m.lpni.credits <= 0) || (!m.txCredit && m.ni.credits <= 0)
}

// postLocked takes the credits m needs (lnet_post_send_locked): a peer
// credit, then an NI credit. A message that cannot have one waits on the
// FIFO of the peer NI or of the NI; credits go negative by the number of
// waiters, so a later message never overtakes a waiting one. It returns
// true when m holds both and has been put on its NI's ready list.
func (ln *LNet) postLocked(m *msg) bool {
	n, lp := m.ni, m.lpni
	if !m.peerCredit {
		lp.credits--
		lp.minCredits = min(lp.minCredits, lp.credits)
		if lp.credits < 0 {
			lp.txq.push(m)
			n.waiting++
			m.waited = m.kind == kindFwd
			return false
		}
		m.peerCredit = true
	}
	if !m.txCredit {
		n.credits--
		n.minCredits = min(n.minCredits, n.credits)
		if n.credits < 0 {
			n.txq.push(m)
			n.waiting++
			m.waited = m.kind == kindFwd
			return false
		}
		m.txCredit = true
	}
	n.ready = append(n.ready, m)
	return true
}

// returnCreditsLocked gives back the credits m holds and hands them to the
// first waiter, whose NI is added to drains (lnet_return_tx_credits_locked).
// Once LNet is closed credits are not handed on: Close fails the waiters.
func (ln *LNet) returnCreditsLocked(m *msg, drains *[]*ni) {
	if m.txCredit {
		m.txCredit = false
		n := m.ni
		n.credits++
		if n.txq.n > 0 && !ln.net.closed {
			next := n.txq.pop()
			n.waiting--
			next.txCredit = true
			n.ready = append(n.ready, next)
			addDrain(drains, n)
			ln.spaceLocked(n)
		}
	}
	if m.peerCredit {
		m.peerCredit = false
		lp := m.lpni
		lp.credits++
		if lp.txq.n > 0 && !ln.net.closed {
			next := lp.txq.pop()
			next.ni.waiting--
			next.peerCredit = true
			if ln.postLocked(next) {
				addDrain(drains, next.ni)
			}
			ln.spaceLocked(next.ni)
		}
	}
}

func addDrain(drains *[]*ni, n *ni) {
	if drains == nil {
		return
	}
	for _, d := range *drains {
		if d == n {
			return
		}
	}
	*drains = append(*drains, n)
}

// unqueueLocked takes m off the credit queue it waits on, if any, undoing
// its reservation and giving back the peer credit it may hold. It reports
// whether m was waiting.
func (ln *LNet) unqueueLocked(m *msg, drains *[]*ni) bool {
	q := m.q
	if q == nil {
		return false
	}
	q.remove(m)
	n := m.ni
	n.waiting--
	if q == &n.txq {
		n.credits++
	} else {
		m.lpni.credits++
	}
	ln.returnCreditsLocked(m, drains)
	ln.spaceLocked(n)
	return true
}

// spaceLocked wakes the senders blocked on a full queue of n once it has
// room.
func (ln *LNet) spaceLocked(n *ni) {
	if n.spaceCh != nil && (n.waiting < n.maxWaiting || ln.net.closed) {
		close(n.spaceCh)
		n.spaceCh = nil
	}
}
