package lnet

import (
	"context"
	"slices"
	"time"

	"github.com/nacrefs/nacre/lnet/wire"
)

// Push: when the node's NIs change (lnetctl net add or del, a link going
// down or up), it PUTs its new ping info to the peers that discovered it
// (pinged it) and those it discovered multi-rail, on the ping portal with
// the ping match bits, so that they use an added NID and stop using a
// deleted one at once (Lustre's lnet_push_update_to_peers). The header
// data numbers the pushes of a node, increasing across its restarts (a
// time in nanoseconds): a peer takes a push only if it is newer than the
// last it took, whatever order they arrive in. A push is best effort: a
// peer that misses one keeps what it knew until the next push or until
// it discovers the node again (lnetctl discover); sends to a NID that
// went fail over to the peer's others as any failed NID does.

// pushSlots is how many pushes a node can take at once: each lands in a
// buffer of its own, attached again once its push is read.
const pushSlots = 4

// pushTargets attaches the MDs that take pushes.
func (ln *LNet) pushTargets() error {
	for range pushSlots {
		if err := ln.pushTarget(); err != nil {
			return err
		}
	}
	return nil
}

// pushTarget attaches one MD that takes one push; its handler attaches
// the next.
func (ln *LNet) pushTarget() error {
	buf := make([]byte, wire.MaxPingInfoSize)
	_, err := ln.attach(PingPortal, AnyProcess, PingMatchBits, 0, InsertLast, MD{
		Buffers: [][]byte{buf}, Threshold: 1, Options: MDOpPut | MDTruncate,
		Handler: func(ev Event) {
			if ev.Type != EventPut {
				return
			}
			if ev.Status == nil {
				ln.pushed(ev.Initiator.NID, ev.HdrData, buf[:ev.MLength])
			}
			if err := ln.pushTarget(); err != nil && !ln.closing() {
				ln.log.Warn("cannot take pushes", "err", err)
			}
		},
	}, true)
	return err
}

// pushed merges what a peer pushed: its NIDs now, all of them, numbered
// seq. from, for the log, is the initiator as the event names it.
func (ln *LNet) pushed(from wire.NID, seq uint64, b []byte) {
	var info wire.PingInfo
	if err := info.Unmarshal(b); err != nil {
		ln.log.Debug("bad push: dropped", "from", from, "err", err)
		return
	}
	if !ln.discoveryOn() || from.Net.Type == wire.LO {
		return
	}
	listed := func(nid wire.NID) bool {
		return slices.ContainsFunc(info.NIDs, func(s wire.NIDStatus) bool { return s.NID == nid })
	}
	ln.net.Lock()
	defer ln.net.Unlock()
	if ln.net.closed {
		return
	}
	// The peer is the one the first NID the push lists (the node's own
	// order) belongs to, whichever NID the push came from: the same on
	// every node, and never a peer made of a NID first heard in the push.
	// A push from a node known by none of the NIDs it lists is not taken
	// (Lustre ignores pushes of unknown peers).
	var lp *peerNI
	for _, ns := range info.NIDs {
		if q := ln.net.peers[ns.NID]; q != nil && ns.NID.Net.Type != wire.LO {
			lp = q
			break
		}
	}
	if lp == nil {
		ln.log.Debug("push from a node known by none of its NIDs: dropped", "from", from)
		return
	}
	if seq <= lp.peer.pushSeq {
		ln.log.Debug("stale push: dropped", "from", from, "seq", seq, "last", lp.peer.pushSeq)
		return
	}
	p, err := ln.mergeLocked(lp.peer.primary, info, false)
	if err != nil || p.configured || !p.mr {
		return
	}
	p.pushSeq = seq
	if !slices.ContainsFunc(p.nis, func(q *peerNI) bool { return listed(q.nid) }) {
		// A push that lists none of the NIDs the peer is known by
		// (merge has added those it lists, unless claimed elsewhere):
		// keep what is known rather than leave the peer with none.
		return
	}
	// The NIDs it no longer lists go; a primary that went hands over to
	// one it lists.
	var gone []wire.NID
	p.nis = slices.DeleteFunc(p.nis, func(q *peerNI) bool {
		if listed(q.nid) {
			return false
		}
		if ln.net.peers[q.nid] == q {
			delete(ln.net.peers, q.nid)
		}
		delete(ln.net.recovery, q)
		gone = append(gone, q.nid)
		return true
	})
	if !listed(p.primary) {
		p.primary = p.nis[0].nid
	}
	ln.log.Debug("peer pushed its NIDs", "peer", p.primary, "nids", len(p.nis), "gone", gone)
}

// pingedBy notes that the peer of nid discovered this node: it is sent
// the node's pushes.
func (ln *LNet) pingedBy(nid wire.NID) {
	ln.net.Lock()
	if lp := ln.net.peers[nid]; lp != nil {
		lp.peer.pinged = true
	}
	ln.net.Unlock()
}

// pushPeers pushes the node's ping info, numbered seq, to every peer
// that pinged it or that it discovered multi-rail (through the path
// selection picks, as any PUT).
func (ln *LNet) pushPeers(info wire.PingInfo, seq uint64) {
	b, err := info.AppendBinary(nil)
	if err != nil {
		ln.log.Warn("cannot push the ping info", "err", err)
		return
	}
	ln.net.Lock()
	var targets []wire.NID
	seen := map[*peer]bool{}
	for _, lp := range ln.net.peers {
		p := lp.peer
		if seen[p] || p.primary.Net.Type == wire.LO || !(p.pinged || p.mr && p.disc == discDone) {
			continue
		}
		seen[p] = true
		targets = append(targets, p.primary)
	}
	ln.net.Unlock()
	for _, t := range targets {
		ln.pushTo(t, b, seq)
	}
}

// pushTo PUTs ping info b, numbered seq, to target.
func (ln *LNet) pushTo(target wire.NID, b []byte, seq uint64) {
	h, err := ln.bind(MD{Buffers: [][]byte{b}, Threshold: 1}, true)
	if err != nil {
		return
	}
	m := &msg{kind: kindPut, heapIdx: -1, noBlock: true, deadline: time.Now().Add(ln.cfg.RouterPingTimeout)}
	if err := ln.put(context.Background(), m, h, wire.ProcessID{NID: target, PID: wire.PIDAny}, PingPortal, PingMatchBits, 0, seq); err != nil {
		ln.Unlink(h)
		ln.log.Debug("push not sent", "peer", target, "err", err)
	}
}

// pushDiscovered pushes the node's ping info to a peer it has just
// discovered multi-rail, so that the peer learns the node's NIDs too (and
// can be pushed to by it later, on a net they share).
func (ln *LNet) pushDiscovered(target wire.NID) {
	ln.pushMu.Lock() // (held only to read: a handler calls this)
	info, seq := ln.pingInfo(), ln.pushSeq
	ln.pushMu.Unlock()
	b, err := info.AppendBinary(nil)
	if err != nil {
		return
	}
	ln.pushTo(target, b, seq)
}
