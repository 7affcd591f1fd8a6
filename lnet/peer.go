package lnet

import (
	"errors"

	"github.com/nacrefs/nacre/lnet/wire"
)

// healthMax is the health of a NI or peer NI nothing has gone wrong with
// (LNET_MAX_HEALTH_VALUE). Send failures lower it; the selection prefers
// the healthiest path.
const healthMax = 1000

// peer is one remote node, known by one or more NIDs (Lustre's lnet_peer).
// For now every peer has exactly one peer NI, created on first contact;
// discovery (a ping returning the peer's NID list) will add the others,
// and selection already picks among them.
//
// Protected by LNet.net.
type peer struct {
	primary wire.NID
	nis     []*peerNI
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
}

// peerNILocked returns the peer NI of nid, creating it (and its peer) with
// the peer credits of the local NI that reaches it.
func (ln *LNet) peerNILocked(nid wire.NID, via *ni) *peerNI {
	if lp := ln.net.peers[nid]; lp != nil {
		return lp
	}
	c := via.tun.PeerCredits
	lp := &peerNI{nid: nid, maxCredits: c, credits: c, minCredits: c, health: healthMax}
	lp.peer = &peer{primary: nid, nis: []*peerNI{lp}}
	ln.net.peers[nid] = lp
	return lp
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
// the peer NI and the next hop (lnet_select_pathway). Messages to one of
// our own NIDs go through 0@lo. Otherwise the local NI is one on the
// destination's net and the peer NI one of the peer's NIDs on that net,
// each chosen by pick. A destination on no local net would be routed; until
// routing exists that is ErrNoRoute.
func (ln *LNet) selectPathLocked(m *msg) error {
	dst := m.lm.Hdr.DstNID
	if dst.Net.Type == wire.LO || ln.isLocal(dst) {
		if dst.Net.Type == wire.LO && dst != wire.LoNID {
			return errNoRoute(dst)
		}
		m.ni = ln.lo
		m.lpni = ln.peerNILocked(wire.LoNID, ln.lo)
		m.lm.NextHop = wire.LoNID
		if !m.fixedSrc {
			m.lm.Hdr.SrcNID = dst
		}
		return nil
	}
	var local []*ni
	for _, n := range ln.nis[1:] {
		if n.nid.Net == dst.Net {
			local = append(local, n)
		}
	}
	if len(local) == 0 {
		return errNoRoute(dst)
	}
	first := ln.peerNILocked(dst, local[0])
	var remote []*peerNI
	for _, p := range first.peer.nis {
		if p.nid.Net == dst.Net {
			remote = append(remote, p)
		}
	}
	n := local[pick(len(local), func(i int) pathScore {
		return pathScore{health: local[i].health, credits: local[i].credits, seq: local[i].seq}
	})]
	lp := remote[pick(len(remote), func(i int) pathScore {
		return pathScore{health: remote[i].health, credits: remote[i].credits, seq: remote[i].seq}
	})]
	n.seq = ln.nextSeqLocked()
	lp.seq = n.seq
	m.ni, m.lpni = n, lp
	m.lm.NextHop = lp.nid
	if !m.fixedSrc {
		m.lm.Hdr.SrcNID = n.nid
	}
	return nil
}

func errNoRoute(dst wire.NID) error {
	return &routeError{dst: dst}
}

type routeError struct{ dst wire.NID }

func (e *routeError) Error() string { return "lnet: no route to " + e.dst.String() }
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
		s := score(i)
		switch {
		case s.health != bs.health:
			if s.health < bs.health {
				continue
			}
		case s.credits != bs.credits:
			if s.credits < bs.credits {
				continue
			}
		case s.seq >= bs.seq:
			continue
		}
		best, bs = i, s
	}
	return best
}

// healthLocked records the outcome of a send on its path's health (the
// seam for health-based selection; lnet_health_check). A failure lowers the
// local NI or the peer NI by the kind of error; a success restores it.
func (ln *LNet) healthLocked(m *msg, err error) {
	const step = 100
	switch {
	case err == nil:
		m.ni.health = min(healthMax, m.ni.health+1)
		m.lpni.health = min(healthMax, m.lpni.health+1)
	case errors.Is(err, ErrLocalNI):
		m.ni.health = max(0, m.ni.health-step)
	case errors.Is(err, ErrPeerUnreachable), errors.Is(err, ErrConnReset), errors.Is(err, ErrTimeout):
		m.lpni.health = max(0, m.lpni.health-step)
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
