package lnet

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nacrefs/nacre/internal/iovec"
	"github.com/nacrefs/nacre/lnet/wire"
)

// Ack says whether a Put wants an ACK (lnet_ack_req).
type Ack uint8

// The ACK requests.
const (
	// NoAckReq: the initiator's operation ends with its SEND event.
	NoAckReq Ack = iota
	// AckReq: the target sends an ACK once the data is in place (unless its
	// MD has MDAckDisable); the operation ends with the ACK event.
	AckReq
)

type msgKind uint8

const (
	kindPut   msgKind = iota + 1 // initiator's PUT
	kindGet                      // initiator's GET
	kindAck                      // target's ACK to a PUT
	kindReply                    // target's REPLY to a GET
	kindFwd                      // a router forwarding another node's message
)

// discoverMode says whether selecting a message's path may start automatic
// discovery of its destination.
type discoverMode uint8

const (
	discoverNo     discoverMode = iota // internal messages, responses, forwards
	discoverOK                         // a user's PUT or GET: may start it
	discoverMarked                     // started: the caller must ping discoverNID
)

// msg is LNet's state of one outgoing message (lnet_msg). Its Msg is what
// the LND sees; Msg.priv points back here.
type msg struct {
	lm   Msg
	kind msgKind

	// Set before the message is published (in pending or on a queue), then
	// read-only.
	md       *md       // PUT: source; GET: sink; REPLY: the target MD read from; nil for ACK
	ev       Event     // template of the events of the operation
	wantResp bool      // PUT with ACK, or GET
	cookie   uint64    // key in LNet.res.pending when wantResp
	deadline time.Time // when the transaction times out
	fixedSrc bool      // keep Hdr.SrcNID (responses answer from the NID that was addressed; forwards)
	forceNI  *ni       // send from this NI if it is on the way (responses: the NI the request came in on)
	exactDst bool      // send to exactly Hdr.DstNID, not another NID of its peer
	noBlock  bool      // fail with errBusy instead of waiting for room in a credit queue
	fwdBuf   []byte    // kindFwd: the router buffer holding the payload
	fwdVia   *ni       // kindFwd: the NI the message came in on

	// Protected by LNet.net.
	ni         *ni
	lpni       *peerNI
	txCredit   bool // holds an NI credit
	peerCredit bool // holds a peer NI credit
	q          *msgQueue
	qprev      *msg
	qnext      *msg
	inLND      bool // handed to LND.Send and not finalized
	waited     bool // kindFwd: queued for a credit (drain checks its next hop again)
	retries    int
	gw         *gateway // the gateway of a routed message, nil if direct
	sentOK     bool     // the LND sent it (for the health of a response that never comes)
	// discover and discoverNID: see discoverMode.
	discover    discoverMode
	discoverNID wire.NID

	// handing is set while drain is in the LND's Send for m; finished and
	// finErr hold a completion that came meanwhile, which drain runs once
	// it has stopped sending (see drain). Protected by LNet.net.
	handing  bool
	finished bool
	finErr   error

	// Protected by LNet.res.
	sendDone bool   // the send finished (finalized or failed locally)
	respDone bool   // the ACK/REPLY arrived or will never come
	resp     *Event // the ACK/REPLY event, held back until the SEND event is out

	// Protected by timer.mu.
	heapIdx int // index in the timer heap, -1 if not in it

	// canceled: the MD's owner unlinked it before the send finished
	// (Msg.Canceled).
	canceled atomic.Bool
}

// localSrc is the NID an operation to dst leaves from, for events: the
// first NI on dst's net, or on the net of the first route to it (the rail
// actually taken may differ).
func (ln *LNet) localSrc(dst wire.NID) wire.NID {
	if dst.Net.Type == wire.LO || ln.isLocal(dst) {
		return dst
	}
	if nis := ln.netNIs(dst.Net); len(nis) > 0 {
		return nis[0].nid
	}
	ln.net.Lock()
	defer ln.net.Unlock()
	if rs := ln.net.routes[dst.Net]; len(rs) > 0 {
		if nis := ln.netNIs(rs[0].Gateway.Net); len(nis) > 0 {
			return nis[0].nid
		}
	}
	return wire.AnyNID
}

// Put sends the whole of a bound MD (at most wire.MTU bytes) to target's
// portal with the given match bits, asking the target to write it at offset
// (if its MD is MANAGE_REMOTE) and to hand hdrData to its event. It returns
// once the message is queued; the outcome arrives as events on the MD:
// SEND, then ACK if ack is AckReq (see Event).
//
// Put blocks only when the NI's queue of messages waiting for credits is
// full (Config.MaxWaiting), until there is room or ctx ends. It fails
// without raising events with ErrNoMD (stale handle or threshold used up),
// ErrInvalid (an attached MD), ErrMsgSize, ErrNoRoute, ErrShutdown or ctx's
// error. It is safe for concurrent use, from handlers too (but a handler
// that blocks in Put stalls its connection; pass a short ctx).
func (ln *LNet) Put(ctx context.Context, h MDHandle, ack Ack, target wire.ProcessID, portal uint32, match uint64, offset uint32, hdrData uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ack != NoAckReq && ack != AckReq {
		return fmt.Errorf("%w: ack %d", ErrInvalid, ack)
	}
	m := &msg{kind: kindPut, heapIdx: -1, wantResp: ack == AckReq, discover: discoverOK}
	m.deadline = ln.deadline()
	return ln.put(ctx, m, h, target, portal, match, offset, hdrData)
}

// put is Put of a message m the caller made: a user's, or one of LNet's
// own (a push).
func (ln *LNet) put(ctx context.Context, m *msg, h MDHandle, target wire.ProcessID, portal uint32, match uint64, offset uint32, hdrData uint64) error {
	if err := ln.startOp(m, h, target); err != nil {
		return err
	}
	d := m.md
	wmd := wire.WireHandleNone
	if m.wantResp {
		wmd = wire.WireHandle{Interface: ln.incarnation, Object: m.cookie}
	}
	m.lm = Msg{
		Hdr: wire.Header{
			Type: wire.MsgPut, DstNID: target.NID, SrcPID: ln.pid, DstPID: target.PID,
			PayloadLen: uint32(d.length), WMD: wmd, MatchBits: match, HdrData: hdrData,
			Portal: portal, Offset: offset,
		},
		Payload:         iovec.Slice(d.bufs, 0, d.length),
		Deadline:        m.deadline,
		FailUnreachable: d.options&MDFailUnreachable != 0,
		priv:            m,
	}
	m.ev = Event{
		Initiator: wire.ProcessID{NID: ln.localSrc(target.NID), PID: ln.pid},
		Target:    target, Portal: portal, MatchBits: match,
		RLength: uint32(d.length), MLength: uint32(d.length), Offset: offset,
		HdrData: hdrData, MD: d.handle(), User: d.user,
	}
	return ln.launch(ctx, m)
}

// Get asks target's portal for data from the MD matching the match bits,
// at offset (if that MD is MANAGE_REMOTE), to be written into the whole of
// a bound MD (at most wire.MTU bytes) from its start. It returns once the
// message is queued; the outcome arrives as events on the MD: SEND, then
// REPLY once the data is in place (or with an error status). Blocking and
// errors are as for Put.
func (ln *LNet) Get(ctx context.Context, h MDHandle, target wire.ProcessID, portal uint32, match uint64, offset uint32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m := &msg{kind: kindGet, heapIdx: -1, wantResp: true, discover: discoverOK}
	m.deadline = ln.deadline()
	return ln.get(ctx, m, h, target, portal, match, offset)
}

// get sends the GET m, made by Get or by an internal ping.
func (ln *LNet) get(ctx context.Context, m *msg, h MDHandle, target wire.ProcessID, portal uint32, match uint64, offset uint32) error {
	if err := ln.startOp(m, h, target); err != nil {
		return err
	}
	d := m.md
	m.lm = Msg{
		Hdr: wire.Header{
			Type: wire.MsgGet, DstNID: target.NID, SrcPID: ln.pid, DstPID: target.PID,
			WMD:       wire.WireHandle{Interface: ln.incarnation, Object: m.cookie},
			MatchBits: match, Portal: portal, Offset: offset, SinkLength: uint32(d.length),
		},
		Sink:            iovec.Slice(d.bufs, 0, d.length),
		Deadline:        m.deadline,
		FailUnreachable: d.options&MDFailUnreachable != 0,
		priv:            m,
	}
	m.ev = Event{
		Initiator: wire.ProcessID{NID: ln.localSrc(target.NID), PID: ln.pid},
		Target:    target, Portal: portal, MatchBits: match,
		RLength: uint32(d.length), Offset: offset, MD: d.handle(), User: d.user,
	}
	return ln.launch(ctx, m)
}

// startOp checks the initiator's MD and target, takes one operation from
// the MD, and registers the transaction if a response is wanted.
func (ln *LNet) startOp(m *msg, h MDHandle, target wire.ProcessID) error {
	if err := target.NID.Validate(); err != nil {
		return fmt.Errorf("%w: target %v: %w", ErrInvalid, target, err)
	}
	ln.res.Lock()
	defer ln.res.Unlock()
	if ln.res.closed {
		return ErrShutdown
	}
	d := ln.res.mds[h.cookie]
	switch {
	case d == nil || !d.usableLocked():
		return fmt.Errorf("%w: %v", ErrNoMD, h)
	case !d.bound:
		return fmt.Errorf("%w: %v is attached to a match entry; Put and Get take a bound MD", ErrInvalid, h)
	case d.length > wire.MTU:
		return fmt.Errorf("%w: %v is %d bytes, MTU %d", ErrMsgSize, h, d.length, wire.MTU)
	}
	d.commitLocked()
	m.md = d
	d.sends = append(d.sends, m)
	if m.wantResp {
		ln.res.nextCookie++
		m.cookie = ln.res.nextCookie
	}
	return nil
}

// publishLocked makes the transaction findable by its ACK/REPLY. It is
// done after the message is fully built, since a response (forged or
// fast) may look at it at once.
func (ln *LNet) publishLocked(m *msg) {
	if m.wantResp {
		ln.res.pending[m.cookie] = m
	}
}

// abort undoes startOp for an operation that never started.
func (ln *LNet) abort(m *msg) {
	var d dispatchList
	ln.res.Lock()
	if m.cookie != 0 {
		delete(ln.res.pending, m.cookie)
	}
	m.md.dropSendLocked(m)
	ln.abortLocked(m.md, &d)
	ln.res.Unlock()
	ln.dispatch(&d, false)
}

// launch publishes an initiator's message and posts it for credits,
// blocking while its NI's queue is full (unless m.noBlock: then it fails
// with errBusy).
func (ln *LNet) launch(ctx context.Context, m *msg) error {
	ln.res.Lock()
	ln.publishLocked(m)
	ln.res.Unlock()
	for {
		ln.net.Lock()
		if ln.net.closed {
			ln.net.Unlock()
			ln.abort(m)
			return ErrShutdown
		}
		err := ln.selectPathLocked(m)
		disc := m.discover == discoverMarked
		m.discover = discoverNo
		if err != nil {
			ln.net.Unlock()
			ln.startMarked(disc, m)
			ln.abort(m)
			return err
		}
		n := m.ni
		if n.waiting >= n.maxWaiting && wouldWaitLocked(m) {
			if m.noBlock {
				ln.net.Unlock()
				ln.startMarked(disc, m)
				ln.abort(m)
				return errBusy
			}
			if n.spaceCh == nil {
				n.spaceCh = make(chan struct{})
			}
			ch := n.spaceCh
			ln.net.Unlock()
			ln.startMarked(disc, m)
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				ln.abort(m)
				return ctx.Err()
			}
		}
		if m.canceled.Load() {
			// Given up (Unlink) before it was posted: cancel found it on
			// no queue.
			ln.net.Unlock()
			ln.startMarked(disc, m)
			ln.completeSend(m, ErrCanceled)
			return nil
		}
		ln.timer.add(m)
		ready := ln.postLocked(m)
		ln.net.Unlock()
		ln.startMarked(disc, m)
		if ready {
			ln.drain(n)
		}
		return nil
	}
}

// errBusy: an internal message found its NI's credit queue full.
var errBusy = fmt.Errorf("lnet: credit queue full")

// startMarked starts the discovery selectPathLocked marked m for.
func (ln *LNet) startMarked(marked bool, m *msg) {
	if marked {
		ln.startDiscovery(m.discoverNID)
	}
}

// launchResponse posts an ACK or REPLY. It never blocks: responses are
// bounded by the requests peers may send us, which their credits bound.
func (ln *LNet) launchResponse(m *msg) {
	ln.net.Lock()
	if ln.net.closed {
		ln.net.Unlock()
		ln.completeSend(m, ErrShutdown)
		return
	}
	if err := ln.selectPathLocked(m); err != nil {
		ln.net.Unlock()
		ln.log.Debug("cannot answer", "type", m.lm.Hdr.Type, "to", m.lm.Hdr.Dst(), "err", err)
		ln.completeSend(m, err)
		return
	}
	ln.timer.add(m)
	ready := ln.postLocked(m)
	n := m.ni
	ln.net.Unlock()
	if ready {
		ln.drain(n)
	}
}

// drain hands n's ready messages to its LND, in the order they got their
// credits. One goroutine at a time does it per NI, so concurrent grants
// never reorder the messages of a peer. The messages that piled up while
// it was in the LND go in one SendBatch to an LND that takes batches.
//
// A forward that waited for its credits is checked again for a dead next
// hop as it is taken (Lustre's lnet_post_send_locked checks whenever a message gets
// its credits): the next hop may have died while it waited, and the
// forward would then hold its router buffer until its transaction timeout.
// It fails with ErrPeerUnreachable instead, and its credits go on.
//
// An LND may finalize a message inside Send (socklnd writes a small
// message there). Its credits come back at once, but its completion (the
// SEND event and its handler) waits until drain has stopped sending: a
// handler must not hold up every send of the NI, nor wait, in Put, for
// room that only the messages queued behind it can make.
func (ln *LNet) drain(n *ni) {
	ln.net.Lock()
	if n.gone && !n.sending && len(n.ready) > 0 {
		// Handed credits after DelNet took n away (by a peer NI that
		// left the peer table with waiters): they go another way (or,
		// LNet closing, fail as Close fails the others).
		ms := n.ready
		n.ready = nil
		var drains []*ni
		for _, m := range ms {
			ln.returnCreditsLocked(m, &drains)
		}
		closed := ln.net.closed
		ln.net.Unlock()
		ln.drainAll(drains)
		for _, m := range ms {
			if closed {
				ln.completeSend(m, ErrShutdown)
				continue
			}
			ln.reroute(m, fmt.Errorf("%w: NI %v deleted", ErrLocalNI, n.nid))
		}
		return
	}
	if n.sending || n.lnd == nil || len(n.ready) == 0 || ln.net.closed {
		ln.net.Unlock()
		return
	}
	n.sending = true
	lnd := n.lnd
	batcher, _ := lnd.(BatchLND)
	var buf [8]*msg
	done := buf[:0]  // completed while handed over
	var dead []*msg  // forwards to a next hop that died while they waited
	var drains []*ni // NIs the credits of dead forwards went to
	handed := func(m *msg) {
		m.handing = false
		if m.finished {
			m.finished = false
			done = append(done, m)
		}
	}
	for len(n.ready) > 0 {
		if batcher == nil || len(n.ready) == 1 {
			m := n.ready[0]
			n.ready[0] = nil
			if len(n.ready) == 1 {
				n.ready = n.ready[:0] // keep the array for the next message
			} else {
				n.ready = n.ready[1:]
			}
			if ln.deadForwardLocked(m) {
				ln.returnCreditsLocked(m, &drains)
				dead = append(dead, m)
				continue
			}
			m.inLND, m.handing = true, true
			ln.net.Unlock()
			lnd.Send(&m.lm)
			ln.net.Lock()
			handed(m)
			continue
		}
		// n.batch and n.handed are only used here, by the one goroutine
		// that has set n.sending.
		batch, ms := n.batch[:0], n.handed[:0]
		nd := len(dead)
		for i, m := range n.ready {
			n.ready[i] = nil
			if ln.deadForwardLocked(m) {
				dead = append(dead, m)
				continue
			}
			m.inLND, m.handing = true, true
			batch, ms = append(batch, &m.lm), append(ms, m)
		}
		n.ready = n.ready[:0]
		for _, m := range dead[nd:] {
			// Their credits may make more ready, for the next round.
			ln.returnCreditsLocked(m, &drains)
		}
		if len(batch) == 0 {
			continue
		}
		ln.net.Unlock()
		batcher.SendBatch(batch)
		clear(batch)
		n.batch = batch[:0]
		ln.net.Lock()
		for _, m := range ms {
			handed(m)
		}
		clear(ms)
		n.handed = ms[:0]
	}
	if cap(n.ready) > 256 {
		n.ready = nil // let a burst's array go
	}
	n.sending = false
	if ln.net.closed || n.gone {
		ln.net.idle.Broadcast()
	}
	ln.net.Unlock()
	for _, m := range done {
		err := m.finErr
		m.finErr = nil
		ln.completeSend(m, err)
	}
	for _, m := range dead {
		err := m.finErr
		m.finErr = nil
		ln.completeSend(m, err)
	}
	ln.drainAll(drains)
}

// deadForwardLocked reports whether m is a forward that waited for its
// credits and whose next hop is now dead (deadNextHopLocked); its error is
// then in m.finErr. The caller gives its credits back and completes it
// once it has dropped LNet.net.
func (ln *LNet) deadForwardLocked(m *msg) bool {
	if !m.waited {
		return false
	}
	m.waited = false
	if !deadNextHopLocked(m.ni, m.lpni, time.Now()) {
		return false
	}
	m.finErr = errDeadNextHop(m)
	return true
}

func (ln *LNet) drainAll(drains []*ni) {
	for _, n := range drains {
		ln.drain(n)
	}
}

// finalize is Host.Finalize: the LND is done with a message.
func (ln *LNet) finalize(via *ni, lm *Msg, err error) {
	m, _ := lm.priv.(*msg)
	if m == nil {
		ln.log.Error("LND finalized a message LNet did not send", "ni", via.nid, "type", lm.Hdr.Type)
		return
	}
	var drains []*ni
	ln.net.Lock()
	if !m.inLND {
		ln.net.Unlock()
		ln.log.Error("LND finalized a message twice", "ni", via.nid, "type", lm.Hdr.Type, "to", lm.NextHop)
		return
	}
	m.inLND = false
	n, lp := m.ni, m.lpni
	ln.returnCreditsLocked(m, &drains)
	ln.healthLocked(m, err)
	if m.gw != nil {
		ln.routeSendLocked(m, err)
	}
	if err == nil {
		lp.sendCount++
		lp.sendBytes += uint64(lm.Hdr.PayloadLen)
		m.sentOK = true
	}
	resend := err != nil && ln.resendableLocked(m, err)
	ln.net.Unlock()
	if err == nil {
		n.counters.sendCount.Add(1)
		n.counters.sendBytes.Add(uint64(lm.Hdr.PayloadLen))
		if m.kind == kindFwd {
			ln.rtr.forwarded.Add(1)
			ln.rtr.fwdBytes.Add(uint64(lm.Hdr.PayloadLen))
		}
	} else {
		n.counters.sendErrors.Add(1)
		ln.log.Debug("send failed", "type", lm.Hdr.Type, "to", lm.NextHop, "err", err, "resend", resend)
	}
	ln.drainAll(drains)
	if resend && ln.resend(m) {
		return
	}
	ln.net.Lock()
	if m.handing { // finalized inside drain's Send: drain completes it
		m.finished, m.finErr = true, err
		ln.net.Unlock()
		return
	}
	ln.net.Unlock()
	ln.completeSend(m, err)
}

// resendableLocked reports whether a failed send may be tried again (on
// the path selection now prefers, which health has moved off the failed
// one): a PUT, GET or forwarded message, failed on the connection or the
// interface, with retries and time left.
func (ln *LNet) resendableLocked(m *msg, err error) bool {
	if m.kind == kindAck || m.kind == kindReply || ln.net.closed || m.canceled.Load() {
		return false
	}
	if !errors.Is(err, ErrConnReset) && !errors.Is(err, ErrPeerUnreachable) &&
		!errors.Is(err, ErrTimeout) && !errors.Is(err, ErrLocalNI) {
		return false
	}
	return m.retries < ln.retries() && time.Now().Before(m.deadline)
}

// resend posts a failed message again on the best path (lnet_resend_msg),
// unless its response already arrived.
func (ln *LNet) resend(m *msg) bool {
	ln.res.Lock()
	ok := !m.respDone && !ln.res.closed
	ln.res.Unlock()
	if !ok {
		return false
	}
	ln.net.Lock()
	if ln.net.closed {
		ln.net.Unlock()
		return false
	}
	if m.canceled.Load() { // given up since resendableLocked looked
		ln.net.Unlock()
		return false
	}
	m.retries++
	if err := ln.selectPathLocked(m); err != nil {
		ln.net.Unlock()
		return false
	}
	ready := ln.postLocked(m)
	n := m.ni
	ln.net.Unlock()
	if ready {
		ln.drain(n)
	}
	return true
}

// completeSend raises what follows the end of a send (sent, or failed
// before or by the LND): SEND for an initiator (then its ACK/REPLY if it
// failed or already arrived), GET for a REPLY.
func (ln *LNet) completeSend(m *msg, err error) {
	var d dispatchList
	ln.res.Lock()
	switch m.kind {
	case kindPut, kindGet:
		m.sendDone = true
		m.md.dropSendLocked(m)
		ev := m.ev
		ev.Type, ev.Status = EventSend, err
		if !m.wantResp {
			ln.opDoneLocked(m.md, ev, &d)
			ln.timer.del(m)
			break
		}
		ln.enqueueLocked(m.md, ev, &d)
		switch {
		case m.resp != nil:
			// The answer came first (or was given up on): it follows the
			// SEND now, even if the send itself reports an error.
			ev := *m.resp
			m.resp = nil
			ln.opDoneLocked(m.md, ev, &d)
			ln.timer.del(m)
		case err != nil:
			// No answer will come; if a REPLY is being received right now
			// (respDone already set) its own completion ends the operation.
			ln.respFailLocked(m, err, &d)
		}
	case kindReply:
		ev := m.ev
		ev.Status = err
		if err != nil {
			ev.MLength = 0
		}
		ln.opDoneLocked(m.md, ev, &d)
		ln.timer.del(m)
	case kindFwd:
		ln.timer.del(m)
		ln.res.Unlock()
		if err != nil {
			// Dropped after all: counted as every drop of a message that
			// came in, by the router and by the NI it came in on.
			ln.rtr.dropped.Add(1)
			ln.rtr.dropBytes.Add(uint64(m.lm.Hdr.PayloadLen))
			m.fwdVia.counters.dropCount.Add(1)
			m.fwdVia.counters.dropBytes.Add(uint64(m.lm.Hdr.PayloadLen))
			ln.log.Debug("forward failed", "type", m.lm.Hdr.Type, "from", m.lm.Hdr.Src(), "to", m.lm.Hdr.Dst(),
				"next_hop", m.lm.NextHop, "err", err)
		}
		ln.releaseBuf(m.fwdBuf)
		return
	default:
		ln.timer.del(m)
	}
	ln.res.Unlock()
	ln.dispatch(&d, false)
}

// respEvent builds the ACK or REPLY event of an initiator's operation.
func (m *msg) respEvent(status error) Event {
	ev := m.ev
	ev.Status = status
	ev.MLength = 0
	if m.kind == kindPut {
		ev.Type = EventAck
	} else {
		ev.Type = EventReply
		ev.RLength = 0
		ev.Offset = 0
	}
	return ev
}

// respFailLocked ends an awaited ACK/REPLY with an error.
func (ln *LNet) respFailLocked(m *msg, err error, d *dispatchList) {
	if m.respDone {
		return
	}
	m.respDone = true
	delete(ln.res.pending, m.cookie)
	ln.respondLocked(m, m.respEvent(err), d)
}

// respondLocked raises an operation's ACK/REPLY event, or holds it back
// until the SEND event is out.
func (ln *LNet) respondLocked(m *msg, ev Event, d *dispatchList) {
	if !m.sendDone {
		m.resp = &ev
		return
	}
	ln.opDoneLocked(m.md, ev, d)
	ln.timer.del(m)
}

// cancel ends m, whose sender gave it up, if it has not started to go: off
// the credit queue it waits on, or given back by its LND (Canceler).
func (ln *LNet) cancel(m *msg) {
	var drains []*ni
	var lnd LND
	var hop wire.NID
	ln.net.Lock()
	queued := ln.unqueueLocked(m, &drains)
	if !queued && m.inLND && m.ni != nil {
		lnd, hop = m.ni.lnd, m.lm.NextHop
	}
	ln.net.Unlock()
	ln.drainAll(drains)
	switch {
	case queued:
		ln.completeSend(m, ErrCanceled)
	case lnd != nil:
		if c, ok := lnd.(Canceler); ok {
			c.Cancel(&m.lm, hop)
		}
	}
}

// expire handles a message whose transaction timed out: out of the credit
// queue if it still waits there, and its ACK/REPLY failed.
func (ln *LNet) expire(m *msg) {
	var drains []*ni
	ln.net.Lock()
	queued := ln.unqueueLocked(m, &drains)
	ln.net.Unlock()
	ln.drainAll(drains)
	if queued {
		ln.log.Debug("message timed out waiting for credits", "type", m.lm.Hdr.Type, "to", m.lm.Hdr.Dst())
		ln.completeSend(m, ErrTimeout)
		return
	}
	if !m.wantResp {
		return
	}
	var d dispatchList
	ln.res.Lock()
	timedOut := !m.respDone
	if timedOut {
		ln.log.Debug("transaction timed out", "type", m.lm.Hdr.Type, "to", m.lm.Hdr.Dst(), "portal", m.ev.Portal, "match", m.ev.MatchBits)
		ln.respFailLocked(m, ErrTimeout, &d)
	}
	ln.res.Unlock()
	if timedOut {
		// The message left but nothing came back: the peer NI it went to
		// is suspect (Lustre's remote timeout). Through a router, the
		// gateway's pings judge instead.
		ln.net.Lock()
		if m.sentOK && m.gw == nil && !m.inLND {
			ln.lowerPeerNILocked(m.lpni)
		}
		ln.net.Unlock()
	}
	ln.dispatch(&d, false)
}
