package lnet

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nacrefs/nacre/lnet/wire"
)

// This file is LNet ping and peer discovery (Lustre's api-ni.c ping buffer
// and peer.c discovery): every node answers GETs on the reserved portal
// with its wire.PingInfo, and a ping's answer tells the pinger every NID of
// the node, so that it can use them all (multi-rail).

// PingPortal is the reserved portal LNet answers pings on
// (LNET_RESERVED_PORTAL); applications must not use it.
const PingPortal = 0

// PingMatchBits are the match bits of a ping (LNET_PROTO_PING_MATCHBITS).
const PingMatchBits uint64 = 0x8000000000000000

// maxDiscoveries bounds the automatic discovery pings in flight; a peer
// first sent to while it is reached is discovered on a later send.
const maxDiscoveries = 64

// pingInfo returns what this node answers pings with.
func (ln *LNet) pingInfo() wire.PingInfo {
	nis := ln.nis()
	info := wire.PingInfo{
		Features: wire.PingFeatBase | wire.PingFeatNIStatus | wire.PingFeatMultiRail,
		PID:      ln.pid,
		NIDs:     make([]wire.NIDStatus, len(nis)),
	}
	if ln.discoveryOn() {
		info.Features |= wire.PingFeatDiscovery
	}
	if !ln.cfg.Routing {
		info.Features |= wire.PingFeatRoutingDisabled
	}
	ln.net.Lock()
	for i, n := range nis {
		st := wire.NIStatusUp
		if n.linkDown {
			st = wire.NIStatusDown
		}
		info.NIDs[i] = wire.NIDStatus{NID: n.nid, Status: st}
	}
	ln.net.Unlock()
	return info
}

// refreshPingMD posts the node's current ping info on the ping portal, in
// front of the one it replaces, which is then unlinked (a ping being
// answered from it finishes first). Called by New and by the recovery
// goroutine when an NI's status changes.
func (ln *LNet) refreshPingMD() error {
	info := ln.pingInfo()
	b, err := info.AppendBinary(nil)
	if err != nil {
		return fmt.Errorf("lnet: ping buffer: %w", err)
	}
	h, err := ln.attach(PingPortal, AnyProcess, PingMatchBits, 0, InsertFirst, MD{
		Buffers: [][]byte{b}, Threshold: ThresholdInfinite,
		Options: MDOpGet | MDManageRemote | MDTruncate,
		Handler: func(ev Event) {
			if ev.Type == EventGet && ev.Status == nil {
				ln.pingedBy(ev.Initiator.NID) // (it is pushed to)
			}
		},
	}, true)
	if err != nil {
		return err
	}
	ln.pingMu.Lock()
	old := ln.pingMD
	ln.pingMD = h
	ln.pingMu.Unlock()
	if !old.IsZero() {
		ln.Unlink(old)
	}
	return nil
}

// pingOpts are how an internal ping is sent.
type pingOpts struct {
	deadline time.Time // when the ping fails unanswered
	forceNI  *ni       // send from this NI
	exact    bool      // to exactly the target NID, not another NID of its peer
	noBlock  bool      // fail rather than wait for room in a credit queue
	// ctx, if not nil, bounds the wait for room in a credit queue (a
	// caller's ping gives up with its deadline, not a slot's freeing).
	ctx context.Context
}

// pingDone receives a ping's outcome, on the goroutine that completed it,
// with no LNet lock held.
type pingDone func(info wire.PingInfo, rtt time.Duration, err error)

// pingAsync GETs target's ping info and calls done with it once the REPLY
// is in (or failed). It returns an error, and does not call done, if the
// GET could not be sent.
func (ln *LNet) pingAsync(target wire.NID, o pingOpts, done pingDone) error {
	buf := make([]byte, wire.MaxPingInfoSize)
	var start time.Time
	h, err := ln.bind(MD{Buffers: [][]byte{buf}, Threshold: 1, Options: MDTruncate, Handler: func(ev Event) {
		if ev.Type != EventReply {
			return
		}
		if ev.Status != nil {
			done(wire.PingInfo{}, 0, fmt.Errorf("lnet: ping %v: %w", target, ev.Status))
			return
		}
		var info wire.PingInfo
		if err := info.Unmarshal(buf[:ev.MLength]); err != nil {
			done(wire.PingInfo{}, 0, fmt.Errorf("lnet: ping %v: bad answer: %w", target, err))
			return
		}
		done(info, time.Since(start), nil)
	}}, true)
	if err != nil {
		return err
	}
	start = time.Now()
	m := &msg{kind: kindGet, heapIdx: -1, wantResp: true, deadline: o.deadline,
		forceNI: o.forceNI, exactDst: o.exact, noBlock: o.noBlock}
	if m.deadline.IsZero() {
		m.deadline = ln.deadline()
	}
	ctx := o.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	err = ln.get(ctx, m, h, wire.ProcessID{NID: target, PID: wire.PIDAny}, PingPortal, PingMatchBits, 0)
	if err != nil {
		ln.Unlink(h)
		return err
	}
	return nil
}

// Ping asks target for its ping info (lnetctl ping): a GET on the ping
// portal, answered by target's LNet itself. It returns the info, the round
// trip time, or an error: ctx's (the ping then ends by itself by ctx's
// deadline, or the transaction timeout if ctx has none), one wrapping
// ErrTimeout if no answer came in time, ErrNoRoute, ErrPeerTableFull,
// ErrShutdown, or a send error. Ping learns nothing about the peer; see
// Discover. It is safe for concurrent use.
func (ln *LNet) Ping(ctx context.Context, target wire.NID) (wire.PingInfo, time.Duration, error) {
	if err := target.Validate(); err != nil || target.IsZero() {
		return wire.PingInfo{}, 0, fmt.Errorf("%w: ping %v: bad NID", ErrInvalid, target)
	}
	if err := ctx.Err(); err != nil {
		return wire.PingInfo{}, 0, err
	}
	type result struct {
		info wire.PingInfo
		rtt  time.Duration
		err  error
	}
	ch := make(chan result, 1)
	o := pingOpts{deadline: ln.deadline(), ctx: ctx}
	if d, ok := ctx.Deadline(); ok && d.Before(o.deadline) {
		o.deadline = d
	}
	err := ln.pingAsync(target, o, func(info wire.PingInfo, rtt time.Duration, err error) {
		ch <- result{info, rtt, err}
	})
	if err != nil {
		return wire.PingInfo{}, 0, err
	}
	select {
	case r := <-ch:
		return r.info, r.rtt, r.err
	case <-ctx.Done():
		return wire.PingInfo{}, 0, ctx.Err()
	}
}

// PeerInfo is one peer: a remote node and the NIDs LNet knows it by
// (lnetctl peer show).
type PeerInfo struct {
	// Primary is the NID the peer is known by: the one it was first sent
	// to or heard from, or the one Discover pinged.
	Primary wire.NID
	// MultiRail is set once discovery found that the peer does multi-rail:
	// sends to any of its NIDs then spread over all of them.
	MultiRail bool
	// NIs are the peer's NIDs with their counters, the primary first.
	NIs []PeerNIStats
	// Configured: made by AddPeer, not by traffic or discovery.
	Configured bool
}

// Discover pings target and records every NID its answer lists (if it
// advertises multi-rail) as NIDs of one peer, whose primary NID is target
// (lnetctl discover). Sends to any of those NIDs then spread over all of
// them on the destination's net, by health, credits and round robin. It
// returns the peer as
// recorded, or Ping's errors, or one wrapping ErrPeerTableFull if not even
// target's peer NI fits (NIDs beyond the table's bound are left out). A
// local target is answered from our own ping info and recorded nowhere. It
// is safe for concurrent use.
func (ln *LNet) Discover(ctx context.Context, target wire.NID) (PeerInfo, error) {
	info, _, err := ln.Ping(ctx, target)
	if err != nil {
		return PeerInfo{}, err
	}
	if target.Net.Type == wire.LO || ln.isLocal(target) {
		pi := PeerInfo{Primary: target, MultiRail: info.Features&wire.PingFeatMultiRail != 0}
		for _, ns := range info.NIDs {
			pi.NIs = append(pi.NIs, PeerNIStats{NID: ns.NID, Health: healthMax})
		}
		return pi, nil
	}
	ln.net.Lock()
	defer ln.net.Unlock()
	p, err := ln.mergeLocked(target, info, true)
	if err != nil {
		return PeerInfo{}, err
	}
	return ln.peerInfoLocked(p), nil
}

// mergeLocked records what target's ping answered: the peer becomes
// discovered, and if it does multi-rail, every NID listed joins it
// (leaving whatever peer it belonged to, with a rate-limited warning if
// that peer was discovered too; a peer whose primary NID goes is deleted).
// explicit (Discover) makes target the primary NID even
// of a peer discovered before.
func (ln *LNet) mergeLocked(target wire.NID, info wire.PingInfo, explicit bool) (*peer, error) {
	lp, err := ln.peerNILocked(target)
	if err != nil {
		return nil, err
	}
	p := lp.peer
	p.disc = discDone
	if p.configured {
		return p, nil // its NIDs are the administrator's
	}
	if explicit || !p.mr {
		if p.primary != target {
			// Keep the primary first in the list.
			i := slices.Index(p.nis, lp)
			copy(p.nis[1:i+1], p.nis[:i])
			p.nis[0] = lp
		}
		p.primary = target
	}
	p.mr = info.Features&wire.PingFeatMultiRail != 0
	if !p.mr {
		return p, nil
	}
	added := 0
	for _, ns := range info.NIDs {
		nid := ns.NID
		if nid.Net.Type == wire.LO || ln.isLocal(nid) {
			continue
		}
		q := ln.net.peers[nid]
		if q == nil {
			if len(ln.net.peers) >= ln.cfg.MaxPeers {
				ln.peerTableFullLocked(nid)
				break
			}
			q = ln.newPeerNILocked(nid)
			q.peer = p
			p.nis = append(p.nis, q)
			added++
		} else if q.peer != p {
			old := q.peer
			if old.configured {
				// An administrator said whose NID it is (Lustre's
				// lnet_peer_add_nid refuses it too).
				ln.nidClaimedLocked(nid, old.primary, p.primary)
				continue
			}
			if old.disc == discDone {
				// Another node's ping listed the NID, or it was
				// discovered as that NID: two nodes claim it (a NID
				// moved to another host, a misconfigured node, or a
				// forged answer). Lustre's discovery takes the NID all
				// the same (lnet_peer_add_nid refuses only NIDs an
				// administrator configured, which Nacre has not), so do
				// that, but say so: sends to it now go to p.
				ln.nidClaimedLocked(nid, old.primary, p.primary)
			}
			wasPrimary := old.primary == nid
			movePeerNILocked(q, p)
			if wasPrimary && len(old.nis) > 0 {
				// The node old stood for is known by that NID: it is
				// gone, and so is old, as Lustre deletes the peer whose
				// primary NID another peer takes (lnet_peer_add_nid),
				// rather than keep its other NIDs as a node under a
				// primary it never had. They are found again by traffic
				// or discovery.
				ln.dropPeerLocked(old)
			}
			added++
		}
	}
	if added > 0 {
		ln.log.Debug("peer discovered", "peer", p.primary, "nids", len(p.nis), "multi_rail", p.mr)
	}
	return p, nil
}

// claimLogInterval is the least time between two warnings of NIDs claimed
// by another peer's ping: two nodes that claim one NID do so at every
// discovery of either.
const claimLogInterval = 10 * time.Second

// nidClaimedLocked counts and warns (at most once per claimLogInterval) of
// a ping of peer to that claimed nid, a NID of the discovered peer from.
func (ln *LNet) nidClaimedLocked(nid, from, to wire.NID) {
	ln.net.nidsClaimed++
	if now := time.Now(); ln.net.claimLogged.IsZero() || now.Sub(ln.net.claimLogged) >= claimLogInterval {
		ln.net.claimLogged = now
		ln.log.Warn("peer NID claimed by another peer's ping: moved", "nid", nid,
			"from_peer", from, "to_peer", to, "claimed_so_far", ln.net.nidsClaimed)
	}
}

// markDiscoveryLocked marks p for automatic discovery when m may start it
// (a PUT or GET of the node's user), discovery is on, and p was never
// pinged (or its last ping failed long enough ago). The caller starts it
// with startDiscovery once it has dropped LNet.net.
func (ln *LNet) markDiscoveryLocked(m *msg, p *peer) {
	if m.discover != discoverOK || !ln.discoveryOn() || p.disc != discNone ||
		ln.net.discovering >= maxDiscoveries || p.primary.Net.Type == wire.LO {
		return
	}
	now := time.Now()
	if now.Before(p.discRetry) {
		return
	}
	p.disc = discBusy
	ln.net.discovering++
	m.discover = discoverMarked
	m.discoverNID = p.primary
}

// startDiscovery pings a peer marked by markDiscoveryLocked, in the
// background; the answer is merged as Discover merges it.
func (ln *LNet) startDiscovery(nid wire.NID) {
	o := pingOpts{deadline: time.Now().Add(ln.cfg.RouterPingTimeout), noBlock: true}
	err := ln.pingAsync(nid, o, func(info wire.PingInfo, _ time.Duration, err error) {
		ln.discovered(nid, info, err)
	})
	if err != nil {
		ln.discovered(nid, wire.PingInfo{}, err)
	}
}

// discovered ends an automatic discovery: called exactly once per
// startDiscovery.
func (ln *LNet) discovered(nid wire.NID, info wire.PingInfo, err error) {
	ln.net.Lock()
	ln.net.discovering--
	if err == nil {
		var p *peer
		if p, err = ln.mergeLocked(nid, info, false); err == nil {
			push, to := p.mr && !p.configured, p.primary
			ln.net.Unlock()
			if push {
				ln.pushDiscovered(to)
			}
			return
		}
	}
	defer ln.net.Unlock()
	ln.log.Debug("discovery failed", "peer", nid, "err", err)
	if lp := ln.net.peers[nid]; lp != nil && lp.peer.disc == discBusy {
		lp.peer.disc = discNone
		lp.peer.discRetry = time.Now().Add(5 * ln.recoveryInterval())
	}
}

// Peers returns every peer LNet knows with its peer NIs and their
// counters, sorted by primary NID; 0@lo is left out. It is safe for
// concurrent use; a snapshot.
func (ln *LNet) Peers() []PeerInfo {
	ln.net.Lock()
	ln.net.sweep++
	gen := ln.net.sweep
	var out []PeerInfo
	for _, lp := range ln.net.peers {
		p := lp.peer
		if p.sweep == gen || lp.nid == wire.LoNID {
			continue
		}
		p.sweep = gen
		out = append(out, ln.peerInfoLocked(p))
	}
	ln.net.Unlock()
	slices.SortFunc(out, func(a, b PeerInfo) int { return compareNID(a.Primary, b.Primary) })
	return out
}

func (ln *LNet) peerInfoLocked(p *peer) PeerInfo {
	pi := PeerInfo{Primary: p.primary, MultiRail: p.mr, Configured: p.configured, NIs: make([]PeerNIStats, 0, len(p.nis))}
	for _, lp := range p.nis {
		pi.NIs = append(pi.NIs, lp.stats())
	}
	return pi
}
