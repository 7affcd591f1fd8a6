package lnet

import (
	"context"
	"slices"
	"time"

	"github.com/nacrefs/nacre/lnet/wire"
)

// Push: when the node's NIs change (lnetctl net add or del, a link going
// down or up), it PUTs its new ping info to every peer that discovered it
// multi-rail, on the ping portal with the ping match bits, so that they
// use an added NID and stop using a deleted one at once, not at their
// next discovery (Lustre's lnet_push_update_to_peers). A push is best
// effort: unanswered, lost or refused, the peer learns the same at its
// next ping.

// pushTarget attaches the MD that takes one push; its handler attaches the
// next. Each push lands in a buffer of its own, read by the handler alone.
func (ln *LNet) pushTarget() error {
	buf := make([]byte, wire.MaxPingInfoSize)
	_, err := ln.attach(PingPortal, AnyProcess, PingMatchBits, 0, InsertLast, MD{
		Buffers: [][]byte{buf}, Threshold: 1, Options: MDOpPut | MDTruncate,
		Handler: func(ev Event) {
			if ev.Type != EventPut {
				return
			}
			if ev.Status == nil {
				ln.pushed(ev.Initiator.NID, buf[:ev.MLength])
			}
			if err := ln.pushTarget(); err != nil && !ln.closing() {
				ln.log.Warn("cannot take pushes", "err", err)
			}
		},
	}, true)
	return err
}

// pushed merges what a peer pushed: its NIDs now, all of them.
func (ln *LNet) pushed(from wire.NID, b []byte) {
	var info wire.PingInfo
	if err := info.Unmarshal(b); err != nil {
		ln.log.Debug("bad push: dropped", "from", from, "err", err)
		return
	}
	if !ln.discoveryOn() || from.Net.Type == wire.LO {
		return
	}
	ln.net.Lock()
	defer ln.net.Unlock()
	if ln.net.closed {
		return
	}
	p, err := ln.mergeLocked(from, info, false)
	if err != nil || p.configured || !p.mr {
		return
	}
	// The NIDs it no longer lists go (not the one it pushed from, which
	// just worked); a primary that went hands over to a NID it lists.
	listed := func(nid wire.NID) bool {
		return nid == from || slices.ContainsFunc(info.NIDs, func(s wire.NIDStatus) bool { return s.NID == nid })
	}
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
		p.primary = p.nis[0].nid // (from at least is left)
	}
	ln.log.Debug("peer pushed its NIDs", "peer", p.primary, "nids", len(p.nis), "gone", gone)
}

// pushPeers pushes the node's ping info to every peer discovered
// multi-rail (through the path selection picks, as any PUT).
func (ln *LNet) pushPeers() {
	info := ln.pingInfo()
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
		if seen[p] || !p.mr || p.disc != discDone || p.primary.Net.Type == wire.LO {
			continue
		}
		seen[p] = true
		targets = append(targets, p.primary)
	}
	ln.net.Unlock()
	deadline := time.Now().Add(ln.cfg.RouterPingTimeout)
	for _, t := range targets {
		h, err := ln.bind(MD{Buffers: [][]byte{b}, Threshold: 1}, true)
		if err != nil {
			return
		}
		m := &msg{kind: kindPut, heapIdx: -1, noBlock: true, deadline: deadline}
		if err := ln.put(context.Background(), m, h, wire.ProcessID{NID: t, PID: wire.PIDAny}, PingPortal, PingMatchBits, 0, 0); err != nil {
			ln.Unlink(h)
			ln.log.Debug("push not sent", "peer", t, "err", err)
		}
	}
}
