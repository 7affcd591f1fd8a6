package lnet

import (
	"fmt"
	"slices"

	"github.com/nacrefs/nacre/lnet/wire"
)

// AddPeer configures a peer, as lnetctl peer add does: primary and nids
// become the NIDs of one node, primary first. A multi-rail peer spreads
// sends over them all; a peer that is not (multiRail false) has its primary
// NID alone. A configured peer is not aged out when idle, and no other
// peer's discovery takes its NIDs. Adding to a peer configured before adds
// NIDs to it (and sets its multi-rail flag). NIDs that an unconfigured
// peer has leave it for this one; a NID of another configured peer, a
// local or loopback NID, or a non-multi-rail peer with more than one NID
// is refused (ErrInvalid) with nothing changed.
func (ln *LNet) AddPeer(primary wire.NID, nids []wire.NID, multiRail bool) error {
	all := []wire.NID{primary} // primary first, each NID once
	for _, nid := range nids {
		if !slices.Contains(all, nid) {
			all = append(all, nid)
		}
	}
	for _, nid := range all {
		if err := nid.Validate(); err != nil || nid.IsZero() {
			return fmt.Errorf("%w: peer NID %v", ErrInvalid, nid)
		}
		if nid.Net.Type == wire.LO || ln.isLocal(nid) {
			return fmt.Errorf("%w: peer NID %v is this node's", ErrInvalid, nid)
		}
	}
	if !multiRail && len(all) > 1 {
		return fmt.Errorf("%w: a peer that is not multi-rail has one NID; %d given", ErrInvalid, len(all))
	}
	ln.net.Lock()
	defer ln.net.Unlock()
	if ln.net.closed {
		return ErrShutdown
	}
	own := func(nid wire.NID) *peer { // the peer nid belongs to, or nil
		if lp := ln.net.peers[nid]; lp != nil {
			return lp.peer
		}
		return nil
	}
	target := own(primary)
	if target != nil && target.primary != primary && target.configured {
		return fmt.Errorf("%w: %v is a NID of configured peer %v", ErrInvalid, primary, target.primary)
	}
	if target != nil && target.primary != primary {
		target = nil // primary leaves its peer, for one of its own
	}
	if target != nil && !multiRail && len(target.nis) > 1 {
		return fmt.Errorf("%w: peer %v has %d NIDs: it cannot be one that is not multi-rail", ErrInvalid, primary, len(target.nis))
	}
	fresh := 0
	for _, nid := range all {
		switch q := own(nid); {
		case q == nil:
			fresh++
		case q != target && q.configured:
			return fmt.Errorf("%w: %v is a NID of configured peer %v", ErrInvalid, nid, q.primary)
		}
	}
	if len(ln.net.peers)+fresh > ln.cfg.MaxPeers {
		return ln.peerTableFullLocked(primary)
	}
	if target == nil {
		lp := ln.net.peers[primary]
		if lp == nil {
			lp = ln.newPeerNILocked(primary)
			lp.peer = &peer{primary: primary, nis: []*peerNI{lp}}
		} else {
			movePeerNILocked(lp, &peer{primary: primary})
		}
		target = lp.peer
	}
	for _, nid := range all[1:] {
		q := ln.net.peers[nid]
		if q == nil {
			q = ln.newPeerNILocked(nid)
			q.peer = target
			target.nis = append(target.nis, q)
			continue
		}
		old := q.peer
		if old == target {
			continue
		}
		wasPrimary := old.primary == nid
		movePeerNILocked(q, target)
		if wasPrimary && len(old.nis) > 0 {
			ln.dropPeerLocked(old) // as mergeLocked does
		}
	}
	target.configured, target.mr = true, multiRail
	target.disc = discDone // what a discovery would learn is configured
	ln.log.Info("peer configured", "peer", primary, "nids", len(target.nis), "multi_rail", multiRail)
	return nil
}

// DelPeer removes a peer, as lnetctl peer del does: with no nids, the peer
// whose primary NID is primary goes, configured or not; with nids, those
// NIDs leave it (not its primary: ErrInvalid). ErrNoPeer if no peer has
// that primary NID. Messages on their way to a NID removed finish as they
// would have; later sends to it find or make a peer again.
func (ln *LNet) DelPeer(primary wire.NID, nids []wire.NID) error {
	ln.net.Lock()
	defer ln.net.Unlock()
	lp := ln.net.peers[primary]
	if lp == nil || lp.peer.primary != primary || primary == wire.LoNID {
		return fmt.Errorf("%w: %v", ErrNoPeer, primary)
	}
	p := lp.peer
	if len(nids) == 0 {
		ln.dropPeerLocked(p)
		ln.log.Info("peer deleted", "peer", primary)
		return nil
	}
	for _, nid := range nids {
		if nid == primary {
			return fmt.Errorf("%w: %v is the primary NID of the peer (delete the peer)", ErrInvalid, nid)
		}
		if q := ln.net.peers[nid]; q == nil || q.peer != p {
			return fmt.Errorf("%w: %v is not a NID of peer %v", ErrInvalid, nid, primary)
		}
	}
	for _, nid := range nids {
		q := ln.net.peers[nid]
		delete(ln.net.peers, nid)
		delete(ln.net.recovery, q)
		p.nis = slices.DeleteFunc(p.nis, func(x *peerNI) bool { return x == q })
	}
	ln.log.Info("peer NIDs deleted", "peer", primary, "nids", len(nids), "left", len(p.nis))
	return nil
}
