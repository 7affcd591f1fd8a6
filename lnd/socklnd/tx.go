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
	"runtime"
	"slices"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

var _ lnet.BatchLND = (*NI)(nil)

// txItem is a message on its way to a socket, with its header already
// marshalled: the small per-message buffer written in front of the
// payload views.
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
	// sent counts the bytes already written, for a message an inline
	// write left half done (conn.rest).
	sent int
	hdr  [wire.HeaderSize]byte
}

// wireLen is how many bytes of it are still to be written.
func (it *txItem) wireLen() int { return wire.HeaderSize + int(it.msg.Hdr.PayloadLen) - it.sent }

// txQueue is a bounded FIFO of txItems: a ring allocated on first use.
// Guarded by the owning peer's mu.
//
// The bound counts the queued messages and those taken out to be written
// (out): the writer's current batch, an inline write, a half-written
// message left to the writer. So a batch whose write fails can always be
// put back in front of messages queued meanwhile.
type txQueue struct {
	ring    []txItem
	head, n int
	out     int // taken for writing and not yet finalized or put back
}

// reserve allocates q's ring for limit items, if it has none yet. Every
// path that takes a message for q, queued or written inline, calls it
// first: an inline message may end up put back in the queue (unpop).
func (q *txQueue) reserve(limit int) {
	if q.ring == nil {
		q.ring = make([]txItem, limit)
	}
}

// full reports whether q is at limit.
func (q *txQueue) full(limit int) bool { return q.n+q.out >= limit }

// push appends it to q unless q is full; q has been reserved.
func (q *txQueue) push(it *txItem, limit int) bool {
	if q.full(limit) {
		return false
	}
	q.ring[(q.head+q.n)%len(q.ring)] = *it
	q.n++
	return true
}

// pop moves the oldest item into it, reporting whether there was one. The
// item counts in q.out until its writer finalizes it (and decrements out)
// or puts it back with unpop.
func (q *txQueue) pop(it *txItem) bool {
	if q.n == 0 {
		return false
	}
	*it = q.ring[q.head]
	q.ring[q.head] = txItem{} // drop the reference to the message
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	q.out++
	return true
}

// unpop puts items taken with pop back at the head of q, in order.
func (q *txQueue) unpop(items []txItem) {
	for i := len(items) - 1; i >= 0; i-- {
		q.head = (q.head - 1 + len(q.ring)) % len(q.ring)
		q.ring[q.head] = items[i]
		q.n++
		q.out--
	}
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

// Batching and inline-write limits.
const (
	// maxBatch bounds the messages one writev of the writer carries, and
	// batchBytes the bytes it gathers before it stops adding more (the
	// first message always goes, whatever its size): small messages that
	// queued up while a write was in progress leave together, bulk ones
	// one per writev, so a failed write fails only the message being
	// written and puts the rest back.
	maxBatch   = 64
	batchBytes = 64 << 10
	// maxInlineVecs bounds the payload views of a message written inline
	// (writev takes at most IOV_MAX, 1024, vectors at once); a message
	// in more pieces goes through the writer, which splits the writev.
	maxInlineVecs = 64
)

// Send queues msg for msg.NextHop, or writes it at once, and returns
// without waiting for the network. The message goes on the peer's control
// connection, or its bulk-out connection if the payload is at least
// Config.MinBulk, in order with the other messages of that type; a missing
// connection is made first.
//
// A small message (payload under Config.MinBulk) whose connection is up and
// idle — nothing queued, nobody writing — is written by Send itself with
// one non-blocking writev, saving the hand-off to the connection's writer
// goroutine; if the socket takes only part of it, the writer finishes it.
// Everything else is queued for the writer.
//
// Every message is finalized exactly once through Host.Finalize: nil once
// header and payload have been written to the socket (the payload buffers
// may then be reused), otherwise an error wrapping
//   - lnet.ErrPeerUnreachable: no connection could be made before
//     msg.Deadline (Config.ConnectTimeout after Send if zero), NextHop
//     is not a peer on this net, or NextHop is a new peer and the peer
//     table is full (Config.MaxPeers); for a msg.FailUnreachable, as
//     soon as an attempt to connect fails (or at once, while the dialer
//     waits to try again after one that did);
//   - lnet.ErrConnReset: the connection broke while it was being written;
//   - lnet.ErrPeerRestarted: the message was queued behind a connection to
//     the peer, and the peer turned out to have restarted before it was
//     written (a message queued while no connection existed goes to
//     whichever incarnation answers);
//   - lnet.ErrTimeout: msg.Deadline passed while it waited for its turn on
//     a connection;
//   - lnet.ErrShutdown: the NI is shutting down;
//   - lnet.ErrLocalNI: the peer's queue is full (2*PeerCredits messages of
//     one type queued or being written), which only happens when the
//     caller exceeds its credits;
//   - a wire error (or no sentinel at all) for a message LNet should never
//     have built: a header that does not marshal, payload views whose
//     lengths do not add up to Hdr.PayloadLen.
//
// Messages refused at once, and messages written whole inline, are
// finalized before Send returns, on the caller's goroutine and without any
// socklnd lock held.
func (ni *NI) Send(msg *lnet.Msg) { ni.send(msg, false) }

// SendBatch is Send for each of msgs, in order (lnet.BatchLND): the
// messages for one connection are queued, then written together, with
// one non-blocking writev on the caller's goroutine if the connection is
// idle, as an inline Send is; the writer takes what is left.
func (ni *NI) SendBatch(msgs []*lnet.Msg) {
	var buf [8]*conn
	conns := buf[:0]
	for _, msg := range msgs {
		if c := ni.send(msg, true); c != nil && !slices.Contains(conns, c) {
			conns = append(conns, c)
		}
	}
	for _, c := range conns {
		c.flush()
	}
}

// send is Send. With hold, a message for a connection that is up is only
// queued, and that connection returned: the caller flushes it.
func (ni *NI) send(msg *lnet.Msg, hold bool) *conn {
	it := txItem{msg: msg}
	if err := ni.prepare(msg, &it.hdr); err != nil {
		ni.finalize(msg, err)
		return nil
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
		return nil
	}
	if ni.closed.Load() {
		p.mu.Unlock()
		ni.finalize(msg, fmt.Errorf("socklnd: send to %v: %w", msg.NextHop, lnet.ErrShutdown))
		return nil
	}
	if msg.Canceled() {
		// Given up while LNet handed it over (Cancel looked before it was
		// queued): checked under p.mu, which Cancel takes.
		p.mu.Unlock()
		ni.finalize(msg, fmt.Errorf("socklnd: send to %v: given up by its sender: %w", msg.NextHop, lnet.ErrCanceled))
		return nil
	}
	if msg.FailUnreachable && p.mu.conns[t] == nil && p.mu.backingOff[t] {
		p.mu.Unlock()
		ni.finalize(msg, fmt.Errorf("socklnd: send to %v: the last attempt to connect failed: %w", msg.NextHop, lnet.ErrPeerUnreachable))
		return nil
	}
	p.mu.sends++
	q := &p.mu.txq[t]
	q.reserve(ni.qcap)
	c := p.mu.conns[t]
	if c != nil {
		it.inc = p.mu.incarnation
		if !hold && c.idleLocked(q) && ni.inlineOK(msg) && !q.full(ni.qcap) {
			if !combineWrites || !c.inProc {
				c.busy = true
				q.out++
				p.mu.Unlock()
				c.sendInline(&it)
				return nil
			}
			q.push(&it, ni.qcap)
			c.combining = true
			p.mu.Unlock()
			c.combine()
			return nil
		}
	}
	if !q.push(&it, ni.qcap) {
		p.mu.Unlock()
		ni.finalize(msg, fmt.Errorf("socklnd: send to %v: %v queue full (%d messages, more than the peer credits allow): %w",
			msg.NextHop, t, ni.qcap, lnet.ErrLocalNI))
		return nil
	}
	if c == nil {
		ni.dialLocked(p, t)
	}
	wake := c != nil && !hold && !c.combining
	p.mu.Unlock()
	switch {
	case c == nil:
	case hold:
		return c
	case wake:
		c.wake()
	}
	return nil
}

// inlineOK reports whether msg is small enough to be written by Send.
// Bulk messages always go through the writer: a write of a large payload
// rarely fits the socket buffer at once, and the writer's blocking write
// is cheaper than an inline attempt followed by a hand-off.
func (ni *NI) inlineOK(msg *lnet.Msg) bool {
	return inlineWrites && int(msg.Hdr.PayloadLen) < ni.conf.MinBulk && len(msg.Payload) < maxInlineVecs
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

// The write side of a connection has one owner at a time: its writer
// goroutine, or a Send writing inline. conn.busy (under the peer's mu)
// says the socket is being written; a Send finding it set, or anything
// queued, queues behind, so messages of one type leave in Send order. An
// inline write never blocks (a Send may run on a connection's reader,
// answering a message, and two readers blocked writing to each other
// would deadlock): what the socket does not take at once is left in
// conn.rest for the writer, which writes it first.

// idleLocked reports whether a Send may write on c now: c's writer has
// started (so the hellos are exchanged and the connection c replaced is
// done writing), nobody is writing, and nothing waits before it.
func (c *conn) idleLocked(q *txQueue) bool {
	return c.writable && !c.busy && c.rest.msg == nil && q.n == 0
}

// wake tells c's writer there is work; it never blocks.
func (c *conn) wake() {
	select {
	case c.kick <- struct{}{}:
	default: // a kick is pending already
	}
}

// sendInline writes it on c from Send's goroutine. The caller has set
// c.busy and counted it in the queue's out, under the peer's mu.
func (c *conn) sendInline(it *txItem) {
	c.batch = append(c.batch[:0], *it)
	c.writeNow(c.batch)
}

// combine writes the small message Send just queued on an idle c, and
// those queued behind it meanwhile, with one writev on the caller's
// goroutine. It first yields the processor: the goroutines runnable now
// (handlers finishing, callers woken by replies the reader just
// delivered) queue their messages behind this one instead of each paying
// for a system call of its own, and the writer is not woken for them
// (c.combining).
//
// Only a connection whose two ends run in this process yields (c.inProc):
// there the goroutines that run meanwhile are both ends' (one scheduler
// serves the requester, the replier and their readers), so the yield
// batches under load and hands the processor to the receiving end at
// once; in-process null RPCs go 25-30 % faster with it at 1, 8 and 64 in
// flight. Across processes it only lets this process's goroutines queue
// behind the message, and a yield with a processor idle wakes a thread
// to look for work, a futex call and a context switch on a virtual
// machine: an mdtest from a client process to a server process ran 5-20 %
// faster at 8 jobs without it (creates, stats and unlinks), no slower at
// 1. Messages that come while a write is in progress batch all the same
// (flush).
func (c *conn) combine() {
	runtime.Gosched()
	c.p.mu.Lock()
	c.combining = false
	c.p.mu.Unlock()
	c.flush()
}

// flush writes what is queued for c with one non-blocking writev on the
// caller's goroutine if c's write side is free and the first message is
// small, as Send would write it; otherwise it leaves it to the writer.
func (c *conn) flush() {
	p := c.p
	p.mu.Lock()
	var batch []txItem
	q := &p.mu.txq[c.typ]
	if c.writable && !c.ni.closed.Load() {
		batch = c.takeLocked(true)
	}
	wake := len(batch) == 0 && q.n > 0
	p.mu.Unlock()
	if wake {
		c.wake()
	}
	if len(batch) > 0 {
		c.writeNow(batch)
	}
}

// writeNow writes batch, which the caller has taken with c's write side,
// with one writev that does not wait, and settles each message: those the
// socket took whole are finalized; a message it took part of is left in
// c.rest, and those it took nothing of go back to the head of the queue,
// for the writer, which is woken. On an error the message being written
// fails, the rest go back to the queue, and the connection is dropped.
func (c *conn) writeNow(batch []txItem) {
	ni, p := c.ni, c.p
	vec := c.vec[:0]
	for i := range batch {
		vec = appendViews(vec, batch[i].hdr[:], batch[i].msg.Payload, batch[i].sent)
	}
	n, err := c.nbw.write(vec)
	clear(vec) // do not keep the callers' buffers alive
	c.vec = vec[:0]
	if n > 0 {
		ni.stats.txWrites.Add(1)
	}

	done := 0
	for ; done < len(batch) && n >= batch[done].wireLen(); done++ {
		n -= batch[done].wireLen()
	}
	var d deferred
	var sent [maxBatch]*lnet.Msg // batch is c's, and c's write side is free once mu is released
	var failed *lnet.Msg
	q := &p.mu.txq[c.typ]
	p.mu.Lock()
	c.busy = false
	q.out -= done
	for i := range done {
		sent[i] = batch[i].msg
	}
	left := batch[done:]
	switch {
	case err != nil:
		c.writable = false
		if len(left) > 0 {
			q.out-- // the one being written fails
			failed = left[0].msg
			c.requeueLocked(left[1:], &d)
		}
	// What the socket did not take goes back through requeueLocked, as
	// everywhere: a Shutdown or a peer restart while the lock was out
	// fails it instead of leaving it queued where nothing would send it.
	case len(left) > 0 && n > 0:
		left[0].sent += n
		c.rest = left[0]
		c.requeueLocked(left[1:], &d)
	default:
		c.requeueLocked(left, &d)
	}
	clear(batch) // do not keep the messages alive
	wake := err != nil || q.n > 0 || c.rest.msg != nil || c.exiting
	p.mu.Unlock()
	if wake {
		c.wake()
	}
	for _, m := range sent[:done] {
		ni.finalize(m, nil)
	}
	if err != nil {
		ni.dropConn(c, slog.LevelWarn, "write failed", err)
		if failed != nil {
			ni.finalize(failed, fmt.Errorf("socklnd: send to %v on %v connection: %w (%v)", p.nid, c.typ, c.err, err))
		}
	}
	if err != nil || len(d.fins) > 0 {
		ni.run(p, &d)
	}
}

// writeLoop is c's writer: it writes what inline Sends left (c.rest) and
// the peer's queue of c's type, several small messages to a writev, until
// c is closed or replaced. A write error drops the connection and fails
// the message being written with the error c was closed with
// (lnet.ErrConnReset unless a restart or shutdown closed it); messages
// still queued, and those of the failed batch not yet begun, wait for the
// next connection.
func (c *conn) writeLoop() {
	defer close(c.wdone)
	if c.prevW != nil {
		select {
		case <-c.prevW:
		case <-c.closing:
			return
		}
	}
	p := c.p
	p.mu.Lock()
	c.writable = true
	p.mu.Unlock()
	defer c.retire()
	for {
		p.mu.Lock()
		if p.mu.conns[c.typ] != c || !c.writable {
			p.mu.Unlock()
			return // replaced, removed, or a write on it failed
		}
		batch := c.takeLocked(false)
		p.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-c.kick:
				continue
			case <-c.closing:
				return
			}
		}
		if !c.writeBatch(batch) {
			return
		}
	}
}

// takeLocked takes the next batch to write and c's write side, or returns
// nothing if someone else is writing (an inline writer wakes the writer
// when it is done) or there is nothing to write. An inline batch (for a
// non-blocking write on a caller's goroutine) stops before the first
// message Send would not write inline.
func (c *conn) takeLocked(inline bool) []txItem {
	if c.busy {
		return nil
	}
	batch := c.batch[:0]
	size := 0
	if c.rest.msg != nil {
		batch = append(batch, c.rest) // still counted in out
		size = c.rest.wireLen()
		c.rest = txItem{}
	}
	q := &c.p.mu.txq[c.typ]
	var it txItem
	for len(batch) < maxBatch && (len(batch) == 0 || size < batchBytes) && q.n > 0 {
		if inline && !c.ni.inlineOK(q.ring[q.head].msg) {
			break
		}
		q.pop(&it)
		batch = append(batch, it)
		size += it.wireLen()
	}
	c.batch = batch
	c.busy = len(batch) > 0
	return batch
}

// writeBatch writes batch, which the writer has taken with c's write side,
// with one vectored write (writev, split only past IOV_MAX vectors) straight
// from the callers' buffers, and finalizes its messages; a message whose
// deadline passed while it was queued fails with lnet.ErrTimeout instead.
// It reports false if the write failed: the connection is then dropped.
func (c *conn) writeBatch(batch []txItem) bool {
	ni, p := c.ni, c.p
	now := time.Now()
	kept := batch[:0]
	for i := range batch {
		it := &batch[i]
		if it.sent == 0 && !it.msg.Deadline.IsZero() && now.After(it.msg.Deadline) {
			ni.finalize(it.msg, fmt.Errorf("socklnd: send to %v: deadline passed in the %v queue: %w",
				p.nid, c.typ, lnet.ErrTimeout))
			p.mu.Lock()
			p.mu.txq[c.typ].out--
			p.mu.Unlock()
			continue
		}
		kept = append(kept, *it)
	}
	clear(batch[len(kept):])
	batch = kept

	vec := c.vec[:0]
	for i := range batch {
		vec = appendViews(vec, batch[i].hdr[:], batch[i].msg.Payload, batch[i].sent)
	}
	var n int64
	var err error
	if len(vec) > 0 {
		c.nc.SetWriteDeadline(now.Add(ni.conf.Timeout))
		bufs := net.Buffers(vec) // WriteTo consumes bufs, not vec
		n, err = bufs.WriteTo(c.nc)
		ni.stats.txWrites.Add(1)
		if err == nil {
			// An inline write may come next, and must not find a deadline
			// that has since passed.
			c.nc.SetWriteDeadline(time.Time{})
		}
	}
	clear(vec) // do not keep the callers' buffers alive
	c.vec = vec[:0]

	// The messages written whole succeed; on an error, the one being
	// written fails and the rest go back to the queue.
	done := len(batch)
	if err != nil {
		done = 0
		for left := int(n); done < len(batch) && left >= batch[done].wireLen(); done++ {
			left -= batch[done].wireLen()
		}
	}
	var d deferred
	var sent [maxBatch]*lnet.Msg // batch is c's, and c's write side is free once mu is released
	var failed *lnet.Msg
	q := &p.mu.txq[c.typ]
	p.mu.Lock()
	c.busy = false
	q.out -= done
	for i := range done {
		sent[i] = batch[i].msg
	}
	if err != nil {
		c.writable = false
		if done < len(batch) {
			q.out-- // the one being written fails
			failed = batch[done].msg
			c.requeueLocked(batch[done+1:], &d)
		}
	}
	clear(batch) // do not keep the messages alive
	p.mu.Unlock()
	for _, m := range sent[:done] {
		ni.finalize(m, nil)
	}
	if err != nil {
		ni.dropConn(c, slog.LevelWarn, "write failed", err)
		if failed != nil {
			ni.finalize(failed, fmt.Errorf("socklnd: send to %v on %v connection: %w (%v)", p.nid, c.typ, c.err, err))
		}
		ni.run(p, &d)
	}
	return err == nil
}

// requeueLocked puts back at the head of the queue messages the writer took
// but did not begin writing, so they wait for the next connection like
// those queued behind them; unless the NI is shutting down or the peer
// restarted in the meantime (they were committed to the old incarnation):
// then they fail, as they would have in the queue.
func (c *conn) requeueLocked(items []txItem, d *deferred) {
	if len(items) == 0 {
		return
	}
	p := c.p
	q := &p.mu.txq[c.typ]
	var failed error
	switch {
	case c.ni.closed.Load():
		failed = fmt.Errorf("socklnd: %v shutting down: %w", c.ni.nid, lnet.ErrShutdown)
	case items[0].inc != 0 && items[0].inc != p.mu.incarnation:
		failed = fmt.Errorf("socklnd: peer %v restarted: %w", p.nid, lnet.ErrPeerRestarted)
	}
	if failed == nil {
		q.unpop(items)
		return
	}
	for _, it := range items {
		q.out--
		d.fins = append(d.fins, fin{it.msg, failed})
	}
}

// retire ends c's writing when its writer exits: it waits out an inline
// write in progress (it never blocks, so this is short) and settles what it
// left, so that when wdone closes nothing more is written on c.
func (c *conn) retire() {
	p := c.p
	var d deferred
	p.mu.Lock()
	c.writable = false // no inline write starts any more
	c.exiting = true
	for c.busy {
		p.mu.Unlock()
		<-c.kick // writeNow wakes an exiting writer when it is done
		p.mu.Lock()
	}
	rest := c.rest
	c.rest = txItem{}
	if rest.msg != nil {
		if rest.sent == 0 {
			c.requeueLocked([]txItem{rest}, &d)
		} else {
			p.mu.txq[c.typ].out--
			d.fins = append(d.fins, fin{rest.msg, fmt.Errorf("socklnd: send to %v on %v connection: %w",
				p.nid, c.typ, c.closedErr())})
		}
	}
	if p.mu.conns[c.typ] == nil && p.mu.txq[c.typ].n > 0 && !c.ni.closed.Load() {
		c.ni.dialLocked(p, c.typ) // what was put back needs a connection
	}
	p.mu.Unlock()
	c.ni.run(p, &d)
}

// closedErr is what a message cut short on c fails with: the error c was
// closed with, or lnet.ErrConnReset if it is still open.
func (c *conn) closedErr() error {
	select {
	case <-c.closing:
		return c.err
	default:
		return lnet.ErrConnReset
	}
}

// appendViews appends to vec the bytes of one message after its first skip
// bytes: what is left of its header, then its non-empty payload views.
func appendViews(vec [][]byte, hdr []byte, payload [][]byte, skip int) [][]byte {
	if skip < len(hdr) {
		vec = append(vec, hdr[skip:])
		skip = 0
	} else {
		skip -= len(hdr)
	}
	for _, f := range payload {
		if skip >= len(f) {
			skip -= len(f) // also drops empty views
			continue
		}
		vec = append(vec, f[skip:])
		skip = 0
	}
	return vec
}
