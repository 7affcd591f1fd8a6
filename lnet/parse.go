package lnet

import (
	"fmt"
	"time"

	"github.com/nacrefs/nacre/internal/iovec"
	"github.com/nacrefs/nacre/lnet/wire"
)

// parse is Host.Parse (lnet_parse): it checks the header, finds where the
// message lands (or, on a router, where it goes next), and has the LND
// move the payload there.
func (ln *LNet) parse(via *ni, hdr *wire.Header, from wire.NID, rx Rx) error {
	if hdr == nil {
		return ln.drop(via, nil, rx, "no header")
	}
	via.counters.recvCount.Add(1)
	via.counters.recvBytes.Add(uint64(hdr.PayloadLen))

	switch {
	case ln.closing():
		return ln.drop(via, hdr, rx, "shutting down")
	case hdr.Type == wire.MsgHello || !hdr.Type.Known():
		return ln.drop(via, hdr, rx, "not an LNet message type")
	case via != ln.lo && (hdr.SrcNID.Net.Type == wire.LO || from.Net.Type == wire.LO):
		return ln.drop(via, hdr, rx, "loopback source on a network NI")
	case via == ln.lo && from != wire.LoNID:
		return ln.drop(via, hdr, rx, "non-loopback neighbour on 0@lo")
	}
	// Hearing from a neighbour is the sure sign that it, and the NI it
	// came in on, work.
	ln.net.Lock()
	src := ln.initiatorLocked(hdr)
	if !ln.net.closed && !from.IsZero() {
		lp, err := ln.peerNILocked(from)
		if err != nil {
			ln.net.Unlock()
			return ln.drop(via, hdr, rx, err.Error())
		}
		lp.recvCount++
		lp.recvBytes += uint64(hdr.PayloadLen)
		if ln.cfg.Routing {
			lp.lastAlive = time.Now()
		}
		ln.raisePeerNILocked(lp)
		ln.raiseNILocked(via)
	}
	ln.net.Unlock()

	if !ln.isLocal(hdr.DstNID) {
		if !ln.cfg.Routing {
			ln.rtr.dropped.Add(1)
			ln.rtr.dropBytes.Add(uint64(hdr.PayloadLen))
			return ln.drop(via, hdr, rx, "destination is not one of our NIDs, and routing is disabled")
		}
		return ln.forward(via, hdr, from, rx)
	}
	// A ping (GET) or a push (PUT) may name any process: they are LNet's.
	if hdr.DstPID != ln.pid && !(hdr.DstPID == wire.PIDAny && (hdr.Type == wire.MsgGet || hdr.Type == wire.MsgPut) && hdr.Portal == PingPortal) {
		return ln.drop(via, hdr, rx, fmt.Sprintf("destination pid %d is not ours (%d)", hdr.DstPID, ln.pid))
	}
	switch hdr.Type {
	case wire.MsgPut:
		return ln.parsePut(via, hdr, src, rx)
	case wire.MsgGet:
		return ln.parseGet(via, hdr, src, rx)
	case wire.MsgAck:
		return ln.parseAck(via, hdr, rx)
	default:
		return ln.parseReply(via, hdr, rx)
	}
}

func (ln *LNet) closing() bool {
	ln.res.Lock()
	defer ln.res.Unlock()
	return ln.res.closed
}

// drop refuses a message: it drains the payload, counts and logs the drop,
// and returns an error wrapping ErrDropped.
func (ln *LNet) drop(via *ni, hdr *wire.Header, rx Rx, why string) error {
	var plen uint32
	if hdr != nil {
		plen = hdr.PayloadLen
	}
	via.counters.dropCount.Add(1)
	via.counters.dropBytes.Add(uint64(plen))
	rerr := rx.Recv(nil, 0)
	if hdr == nil {
		ln.log.Debug("dropped message", "ni", via.nid, "why", why)
		return fmt.Errorf("%w: %s", ErrDropped, why)
	}
	ln.log.Debug("dropped message", "ni", via.nid, "type", hdr.Type, "from", hdr.Src(), "to", hdr.Dst(),
		"portal", hdr.Portal, "match", hdr.MatchBits, "len", plen, "why", why)
	err := fmt.Errorf("%w: %v from %v to %v: %s", ErrDropped, hdr.Type, hdr.Src(), hdr.Dst(), why)
	if rerr != nil {
		err = fmt.Errorf("%w (draining: %w)", err, rerr)
	}
	return err
}

// initiatorLocked is the process an incoming operation is attributed to
// for matching and events: the sender's primary NID once discovery found
// it multi-rail (so a match entry filtering on a peer matches whichever
// rail its messages come by), else the source NID of the header.
func (ln *LNet) initiatorLocked(hdr *wire.Header) wire.ProcessID {
	src := hdr.Src()
	if lp := ln.net.peers[src.NID]; lp != nil && lp.peer.mr {
		src.NID = lp.peer.primary
	}
	return src
}

func (ln *LNet) parsePut(via *ni, hdr *wire.Header, src wire.ProcessID, rx Rx) error {
	ln.res.Lock()
	m, off, mlen, ok := ln.matchLocked(wire.MsgPut, hdr.Portal, src, hdr.MatchBits, hdr.PayloadLen, hdr.Offset)
	if !ok {
		ln.res.Unlock()
		return ln.drop(via, hdr, rx, "no match entry")
	}
	m.commitLocked()
	if m.options&MDManageRemote == 0 {
		m.offset += mlen
	}
	ack := !hdr.WMD.IsNone() && m.options&MDAckDisable == 0
	ev := Event{
		Type: EventPut, Initiator: src, Target: hdr.Dst(), Portal: hdr.Portal, MatchBits: hdr.MatchBits,
		RLength: hdr.PayloadLen, MLength: uint32(mlen), Offset: uint32(off), HdrData: hdr.HdrData,
		MD: m.handle(), User: m.user,
	}
	cont, _ := rx.(Continuer)
	ev.rx = cont
	dst := iovec.Slice(m.bufs, off, mlen)
	obs := m.observe
	ln.res.Unlock()

	err := recvObserved(rx, dst, mlen, off, obs)

	d := dispatchList{rx: cont}
	ln.res.Lock()
	if err != nil {
		ev.Status = fmt.Errorf("lnet: receive PUT from %v: %w", src, err)
	}
	ln.opDoneLocked(m, ev, &d)
	ln.res.Unlock()
	if ack && err == nil {
		a := &msg{kind: kindAck, heapIdx: -1, fixedSrc: true, forceNI: via, exactDst: true}
		a.deadline = ln.deadline()
		a.lm = Msg{
			Hdr: wire.Header{
				Type: wire.MsgAck, SrcNID: hdr.DstNID, DstNID: hdr.SrcNID, SrcPID: ln.pid, DstPID: hdr.SrcPID,
				WMD: hdr.WMD, MatchBits: hdr.MatchBits, MLength: uint32(mlen),
			},
			Deadline: a.deadline,
			priv:     a,
		}
		ln.launchResponse(a)
	}
	ln.dispatch(&d, true)
	return err
}

func (ln *LNet) parseGet(via *ni, hdr *wire.Header, src wire.ProcessID, rx Rx) error {
	ln.res.Lock()
	m, off, mlen, ok := ln.matchLocked(wire.MsgGet, hdr.Portal, src, hdr.MatchBits, hdr.SinkLength, hdr.Offset)
	if !ok {
		ln.res.Unlock()
		return ln.drop(via, hdr, rx, "no match entry")
	}
	m.commitLocked()
	if m.options&MDManageRemote == 0 {
		m.offset += mlen
	}
	r := &msg{kind: kindReply, heapIdx: -1, fixedSrc: true, forceNI: via, exactDst: true, md: m}
	r.deadline = ln.deadline()
	r.ev = Event{
		Type: EventGet, Initiator: src, Target: hdr.Dst(), Portal: hdr.Portal, MatchBits: hdr.MatchBits,
		RLength: hdr.SinkLength, MLength: uint32(mlen), Offset: uint32(off),
		MD: m.handle(), User: m.user,
	}
	r.lm = Msg{
		Hdr: wire.Header{
			Type: wire.MsgReply, SrcNID: hdr.DstNID, DstNID: hdr.SrcNID, SrcPID: ln.pid, DstPID: hdr.SrcPID,
			PayloadLen: uint32(mlen), WMD: hdr.WMD,
		},
		Payload:  iovec.Slice(m.bufs, off, mlen),
		ReplyTo:  rx,
		Deadline: r.deadline,
		priv:     r,
	}
	ln.res.Unlock()
	// As lnet_parse_get: the REPLY is posted before the GET's receive
	// completes, so an RDMA LND can still reach the sink it advertised.
	ln.launchResponse(r)
	return rx.Recv(nil, 0)
}

// responderOK reports whether an ACK/REPLY from src may answer m: it must
// come from the node m was sent to. With multi-rail, any NID of that peer.
func (ln *LNet) responderOK(m *msg, src wire.NID) bool {
	if src == m.ev.Target.NID {
		return true
	}
	ln.net.Lock()
	defer ln.net.Unlock()
	for _, nid := range ln.peerNIDsLocked(m.ev.Target.NID) {
		if nid == src {
			return true
		}
	}
	return false
}

// pendingFor finds the transaction an ACK or REPLY answers.
func (ln *LNet) pendingLocked(hdr *wire.Header, kind msgKind) (*msg, string) {
	if hdr.WMD.Interface != ln.incarnation {
		return nil, "stale handle (another incarnation)"
	}
	m := ln.res.pending[hdr.WMD.Object]
	if m == nil {
		return nil, "nothing awaits it (late or unknown)"
	}
	if m.kind != kind {
		return nil, "answers another operation type"
	}
	return m, ""
}

func (ln *LNet) parseAck(via *ni, hdr *wire.Header, rx Rx) error {
	ln.res.Lock()
	m, why := ln.pendingLocked(hdr, kindPut)
	ln.res.Unlock()
	if m == nil {
		return ln.drop(via, hdr, rx, why)
	}
	if !ln.responderOK(m, hdr.SrcNID) {
		return ln.drop(via, hdr, rx, "from a node the PUT was not sent to")
	}
	if err := rx.Recv(nil, 0); err != nil {
		return err
	}
	var d dispatchList
	ln.res.Lock()
	if m.respDone || ln.res.pending[hdr.WMD.Object] != m {
		ln.res.Unlock()
		via.counters.dropCount.Add(1)
		return fmt.Errorf("%w: ACK from %v: transaction ended meanwhile", ErrDropped, hdr.Src())
	}
	m.respDone = true
	delete(ln.res.pending, m.cookie)
	ev := m.respEvent(nil)
	ev.MLength = hdr.MLength
	ln.respondLocked(m, ev, &d)
	ln.res.Unlock()
	ln.dispatch(&d, true)
	return nil
}

func (ln *LNet) parseReply(via *ni, hdr *wire.Header, rx Rx) error {
	ln.res.Lock()
	m, why := ln.pendingLocked(hdr, kindGet)
	ln.res.Unlock()
	if m == nil {
		return ln.drop(via, hdr, rx, why)
	}
	if !ln.responderOK(m, hdr.SrcNID) {
		return ln.drop(via, hdr, rx, "from a node the GET was not sent to")
	}
	ln.res.Lock()
	if m.respDone || ln.res.pending[hdr.WMD.Object] != m {
		ln.res.Unlock()
		return ln.drop(via, hdr, rx, "transaction ended meanwhile")
	}
	sink := m.md
	mlen := int(hdr.PayloadLen)
	if mlen > sink.length {
		if sink.options&MDTruncate == 0 {
			ln.res.Unlock()
			return ln.drop(via, hdr, rx, fmt.Sprintf("REPLY of %d bytes for a sink of %d", mlen, sink.length))
		}
		mlen = sink.length
	}
	// Claim the transaction so no timeout or peer restart ends it while
	// the data moves.
	m.respDone = true
	delete(ln.res.pending, m.cookie)
	ln.res.Unlock()

	err := recvObserved(rx, iovec.Slice(sink.bufs, 0, mlen), mlen, 0, sink.observe)

	var d dispatchList
	ln.res.Lock()
	ev := m.respEvent(nil)
	ev.RLength, ev.MLength = hdr.PayloadLen, uint32(mlen)
	if err != nil {
		ev.Status = fmt.Errorf("lnet: receive REPLY from %v: %w", hdr.Src(), err)
		ev.MLength = 0
	}
	ln.respondLocked(m, ev, &d)
	ln.res.Unlock()
	ln.dispatch(&d, true)
	return err
}

// peerEvent is Host.PeerEvent.
func (ln *LNet) peerEvent(via *ni, nid wire.NID, ev PeerEvent) {
	ln.net.Lock()
	if lp := ln.net.peers[nid]; lp != nil {
		lp.state = ev
		if ev == PeerUp || ev == PeerRestarted {
			// A handshake went both ways: the path works.
			lp.health = healthMax
			lp.lastAlive = time.Now()
			delete(ln.net.recovery, lp)
		}
		if ev == PeerRestarted {
			// Its pushes are numbered anew (by its clock, which may
			// have gone back).
			lp.peer.pushSeq = 0
		}
		if ev == PeerRestarted && lp.peer.disc == discDone {
			// It may have come back with other NIDs.
			lp.peer.disc = discNone
		}
	}
	nids := ln.peerNIDsLocked(nid)
	ln.net.Unlock()
	ln.log.Debug("peer event", "ni", via.nid, "peer", nid, "event", ev)
	if ev != PeerRestarted {
		return
	}
	var d dispatchList
	n := 0
	ln.res.Lock()
	for _, m := range ln.res.pending {
		// A message still in the LND goes to the new incarnation (the LND
		// fails those it held for the old one itself).
		if !m.sendDone {
			continue
		}
		for _, p := range nids {
			if m.ev.Target.NID == p {
				ln.respFailLocked(m, ErrPeerRestarted, &d)
				n++
				break
			}
		}
	}
	ln.res.Unlock()
	if n > 0 {
		ln.log.Info("peer restarted: failed the operations awaiting it", "peer", nid, "operations", n)
	}
	ln.dispatch(&d, false)
}

// deadline is when a message started now times out.
func (ln *LNet) deadline() time.Time { return time.Now().Add(ln.TransactionTimeout()) }

// recvObserved has rx move mlen bytes of its payload into dst, which
// starts off bytes into its MD, showing them to obs (the MD's observer, if
// any) as they land.
func recvObserved(rx Rx, dst [][]byte, mlen, off int, obs func(int, []byte)) error {
	if obs == nil || mlen == 0 {
		return rx.Recv(dst, mlen)
	}
	seen := func(b []byte) {
		obs(off, b)
		off += len(b)
	}
	if o, ok := rx.(ObservingRx); ok {
		return o.RecvObserved(dst, mlen, seen)
	}
	err := rx.Recv(dst, mlen)
	if err == nil {
		for _, b := range iovec.Slice(dst, 0, mlen) {
			seen(b)
		}
	}
	return err
}
