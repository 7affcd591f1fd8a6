package socklnd

// The transmit path (the tx half of Lustre's socklnd_cb.c): Send queues a
// message on its peer's queue for the message's connection type, and the
// writer goroutine of that connection writes header and payload views with
// one vectored write.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// txItem is a message waiting for its writer, with its header already
// marshalled: the small per-message buffer the writer sends in front of
// the payload views.
type txItem struct {
	msg *lnet.Msg
	// deadline is when the message stops waiting for a connection to be
	// made: msg.Deadline, or Config.ConnectTimeout after Send if zero.
	deadline time.Time
	// inc is the peer's incarnation if a connection of the message's type
	// was up when it was queued, 0 if it was queued waiting for one: a
	// message queued behind a connection is committed to that incarnation
	// and fails if the peer turns out to have restarted, while one waiting
	// for a connection goes to whichever incarnation answers (Lustre moves
	// a peer's waiting txs onto the new connection the same way).
	inc uint64
	hdr [wire.HeaderSize]byte
}

// txQueue is a bounded FIFO of txItems: a ring allocated on first use.
// Guarded by the owning peer's mu.
type txQueue struct {
	ring    []txItem
	head, n int
}

func (q *txQueue) push(it *txItem, limit int) bool {
	if q.ring == nil {
		q.ring = make([]txItem, limit)
	}
	if q.n == len(q.ring) {
		return false
	}
	q.ring[(q.head+q.n)%len(q.ring)] = *it
	q.n++
	return true
}

// pop moves the oldest item into it, reporting whether there was one.
func (q *txQueue) pop(it *txItem) bool {
	if q.n == 0 {
		return false
	}
	*it = q.ring[q.head]
	q.ring[q.head] = txItem{} // drop the reference to the message
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	return true
}

// earliest returns the earliest deadline in q (zero time if q is empty).
func (q *txQueue) earliest() time.Time {
	var t time.Time
	for i := range q.n {
		d := q.ring[(q.head+i)%len(q.ring)].deadline
		if t.IsZero() || d.Before(t) {
			t = d
		}
	}
	return t
}

// fail takes out of q the items drop selects, keeping the order of the
// rest, and fails their messages with err.
func (d *deferred) fail(q *txQueue, err error, drop func(*txItem) bool) {
	kept := 0
	for i := range q.n {
		idx := (q.head + i) % len(q.ring)
		it := q.ring[idx]
		q.ring[idx] = txItem{}
		if drop(&it) {
			d.fins = append(d.fins, fin{it.msg, err})
			continue
		}
		q.ring[(q.head+kept)%len(q.ring)] = it
		kept++
	}
	q.n = kept
}

func all(*txItem) bool { return true }

// Send queues msg for msg.NextHop and returns without touching the network.
// The message goes on the peer's control connection, or its bulk-out
// connection if the payload is at least Config.MinBulk, in order with the
// other messages of that type; a missing connection is made first.
//
// Every message is finalized exactly once through Host.Finalize: nil once
// header and payload have been written to the socket (the payload buffers
// may then be reused), otherwise an error wrapping
//   - lnet.ErrPeerUnreachable: no connection could be made before
//     msg.Deadline (Config.ConnectTimeout after Send if zero), NextHop
//     is not a peer on this net, or NextHop is a new peer and the peer
//     table is full (Config.MaxPeers);
//   - lnet.ErrConnReset: the connection broke while it was being written;
//   - lnet.ErrPeerRestarted: the message was queued behind a connection to
//     the peer, and the peer turned out to have restarted before it was
//     written (a message queued while no connection existed goes to
//     whichever incarnation answers);
//   - lnet.ErrTimeout: msg.Deadline passed while it waited for its turn on
//     a connection;
//   - lnet.ErrShutdown: the NI is shutting down;
//   - lnet.ErrLocalNI: the peer's queue is full (2*PeerCredits messages of
//     one type), which only happens when the caller exceeds its credits;
//   - a wire error (or no sentinel at all) for a message LNet should never
//     have built: a header that does not marshal, payload views whose
//     lengths do not add up to Hdr.PayloadLen.
//
// Messages refused at once are finalized before Send returns, on the
// caller's goroutine and without any socklnd lock held.
func (ni *NI) Send(msg *lnet.Msg) {
	it := txItem{msg: msg}
	if err := ni.prepare(msg, &it.hdr); err != nil {
		ni.finalize(msg, err)
		return
	}
	it.deadline = msg.Deadline
	if it.deadline.IsZero() {
		it.deadline = time.Now().Add(ni.conf.ConnectTimeout)
	}
	t := ni.txType(msg)
	p, err := ni.lockPeer(msg.NextHop)
	if err != nil {
		if !errors.Is(err, lnet.ErrShutdown) {
			err = fmt.Errorf("%w: %w", lnet.ErrPeerUnreachable, err)
		}
		ni.finalize(msg, fmt.Errorf("socklnd: send to %v: %w", msg.NextHop, err))
		return
	}
	if ni.closed.Load() {
		p.mu.Unlock()
		ni.finalize(msg, fmt.Errorf("socklnd: send to %v: %w", msg.NextHop, lnet.ErrShutdown))
		return
	}
	p.mu.lastUsed = time.Now()
	connected := p.mu.conns[t] != nil
	if connected {
		it.inc = p.mu.incarnation
	}
	if !p.mu.txq[t].push(&it, ni.qcap) {
		p.mu.Unlock()
		ni.finalize(msg, fmt.Errorf("socklnd: send to %v: %v queue full (%d messages, more than the peer credits allow): %w",
			msg.NextHop, t, ni.qcap, lnet.ErrLocalNI))
		return
	}
	if !connected {
		ni.dialLocked(p, t)
	}
	p.mu.Unlock()
	if connected {
		select {
		case p.kick[t] <- struct{}{}:
		default: // a kick is pending already
		}
	}
}

// prepare checks msg and marshals its header into hdr.
func (ni *NI) prepare(msg *lnet.Msg, hdr *[wire.HeaderSize]byte) error {
	switch nh := msg.NextHop; {
	case nh.Net != ni.nid.Net || !nh.Addr.IsValid():
		return fmt.Errorf("socklnd: next hop %v is not on net %v: %w", nh, ni.nid.Net, lnet.ErrPeerUnreachable)
	case nh == ni.nid:
		return fmt.Errorf("socklnd: next hop %v is this NI (lolnd's job): %w", nh, lnet.ErrPeerUnreachable)
	}
	n := 0
	for _, f := range msg.Payload {
		n += len(f)
	}
	if n != int(msg.Hdr.PayloadLen) {
		return fmt.Errorf("socklnd: send to %v: payload views hold %d bytes, header says %d",
			msg.NextHop, n, msg.Hdr.PayloadLen)
	}
	if err := msg.Hdr.Marshal(hdr[:]); err != nil {
		return fmt.Errorf("socklnd: send to %v: %w", msg.NextHop, err)
	}
	return nil
}

// finalize reports a message's outcome to the host, counting it.
func (ni *NI) finalize(msg *lnet.Msg, err error) {
	if err != nil {
		ni.stats.txErrors.Add(1)
	} else {
		ni.stats.txMsgs.Add(1)
		ni.stats.txBytes.Add(uint64(wire.HeaderSize) + uint64(msg.Hdr.PayloadLen))
	}
	ni.host.Finalize(msg, err)
}

// writeLoop is c's writer: it drains the peer's queue of c's type, one
// message at a time, until c is closed or replaced. A write error drops the
// connection and fails the message being written with the error c was
// closed with (lnet.ErrConnReset unless a restart or shutdown closed it);
// messages still queued wait for the next connection.
func (c *conn) writeLoop() {
	defer close(c.wdone)
	if c.prevW != nil {
		select {
		case <-c.prevW:
		case <-c.closing:
			return
		}
	}
	ni, p := c.ni, c.p
	var it txItem
	for {
		p.mu.Lock()
		if p.mu.conns[c.typ] != c {
			p.mu.Unlock()
			return
		}
		ok := p.mu.txq[c.typ].pop(&it)
		p.mu.Unlock()
		if !ok {
			select {
			case <-p.kick[c.typ]:
				continue
			case <-c.closing:
				return
			}
		}
		msg := it.msg
		it.msg = nil
		if !msg.Deadline.IsZero() && time.Now().After(msg.Deadline) {
			ni.finalize(msg, fmt.Errorf("socklnd: send to %v: deadline passed in the %v queue: %w",
				p.nid, c.typ, lnet.ErrTimeout))
			continue
		}
		if err := c.write(msg, &it.hdr); err != nil {
			ni.dropConn(c, slog.LevelWarn, "write failed", err)
			ni.finalize(msg, fmt.Errorf("socklnd: send to %v on %v connection: %w (%v)", p.nid, c.typ, c.err, err))
			return
		}
		ni.finalize(msg, nil)
	}
}

// write sends the marshalled header and msg's payload views with one
// vectored write (writev on a TCP socket), straight from the caller's
// buffers.
func (c *conn) write(msg *lnet.Msg, hdr *[wire.HeaderSize]byte) error {
	c.txHdr = *hdr
	vec := append(c.vec[:0], c.txHdr[:])
	for _, f := range msg.Payload {
		if len(f) > 0 {
			vec = append(vec, f)
		}
	}
	c.nc.SetWriteDeadline(time.Now().Add(c.ni.conf.Timeout))
	bufs := net.Buffers(vec) // WriteTo consumes bufs, not vec
	_, err := bufs.WriteTo(c.nc)
	clear(vec) // do not keep the caller's buffers alive
	c.vec = vec[:0]
	return err
}
