package lnet

import (
	"strconv"

	"github.com/nacrefs/nacre/lnet/wire"
)

// EventType says what happened to an MD (lnet_event_kind).
type EventType uint8

// The event types.
const (
	// EventSend: the initiator's PUT or GET has been sent (or failed to be:
	// see Status). The MD of a PUT may be reused once every SEND of it has
	// been seen and no ACK is awaited.
	EventSend EventType = iota + 1
	// EventPut: a PUT landed in a target MD; the data is in place.
	EventPut
	// EventGet: a GET read from a target MD and its REPLY has been sent.
	EventGet
	// EventReply: the REPLY to the initiator's GET arrived; the data is in
	// the sink MD. Status ErrTimeout, ErrPeerRestarted or a send error if it
	// never will.
	EventReply
	// EventAck: the ACK to the initiator's PUT arrived (MLength is what the
	// target took). Status ErrTimeout, ErrPeerRestarted or a send error if
	// it never will.
	EventAck
	// EventUnlink: the MD is gone; it is always the MD's last event.
	EventUnlink
)

// String returns the type's name as Lustre prints it ("SEND", "PUT", ...).
func (t EventType) String() string {
	switch t {
	case EventSend:
		return "SEND"
	case EventPut:
		return "PUT"
	case EventGet:
		return "GET"
	case EventReply:
		return "REPLY"
	case EventAck:
		return "ACK"
	case EventUnlink:
		return "UNLINK"
	}
	return "EventType(" + strconv.Itoa(int(t)) + ")"
}

// Event reports one step of an operation on an MD to the MD's Handler
// (lnet_event).
//
// An initiator that calls Put with AckReq sees exactly SEND then ACK; Put
// without an ACK, exactly SEND; Get, exactly SEND then REPLY. A failure
// anywhere shows in the Status of these events; an ACK or REPLY that will
// never come is raised with ErrTimeout (TransactionTimeout passed),
// ErrPeerRestarted, ErrShutdown, or the send's error. A target MD sees one
// PUT or GET per incoming operation that matched it.
type Event struct {
	Type EventType // what happened
	// Status is nil on success.
	Status error
	// Initiator started the operation and Target received it (as the
	// initiator addressed it).
	Initiator, Target wire.ProcessID
	// Portal and MatchBits are the operation's (for an incoming operation,
	// the initiator's match bits, not the match entry's).
	Portal    uint32
	MatchBits uint64
	// RLength is the length the initiator asked for (the PUT's payload, the
	// GET's sink); MLength is the length actually moved.
	RLength, MLength uint32
	// Offset is where in the target MD the operation landed (PUT, GET), or
	// the offset the initiator asked for (SEND).
	Offset uint32
	// HdrData is the 64 bits the PUT's initiator sent along.
	HdrData uint64
	// MD is the handle of the MD this event is about.
	MD MDHandle
	// User is the MD's User.
	User any
	// Unlinked is set on the MD's last events: the one that completed its
	// last operation after it was unlinked or used up, and EventUnlink.
	// After it the handle is stale.
	Unlinked bool

	// rx is the receive this event completes, while its handler runs on
	// the goroutine that received it (for Continue); nil otherwise.
	rx Continuer
}

// A Continuation is work that an MD's handler hands back to the goroutine
// that received its message: see Event.Continue.
type Continuation interface {
	// Continue runs the work. It may take as long as it needs, block, and
	// send and receive messages. Until it calls r.Release, though, its
	// goroutine is the connection's reader (the LND's watchdog gives the
	// connection a new one after a while): work about to wait for the
	// network — the reply to an RPC it sent, a lock that the peer's next
	// request gives back — calls r.Release first, so that the connection
	// is read meanwhile. Release may be called any number of times.
	Continue(r Releaser)
}

// A Releaser lets a continuation give up its connection's reading.
type Releaser interface{ Release() }

// Continuer is an Rx whose LND can give up the goroutine that received
// the message once LNet is done with it: it lets another goroutine take
// over receiving on the connection, then runs the continuation on the
// receiving one. It saves the hand-off of a request to another goroutine
// (a wakeup, often of an idle CPU) on the path of every RPC. LNet compares
// Continuers with ==: implementations are pointers.
type Continuer interface {
	Rx
	// Continuable reports whether Continue would take a continuation.
	Continuable() bool
	// Continue arranges for c to run as said above, once, and reports
	// whether it will; it takes one continuation per message.
	Continue(c Continuation) bool
}

// Continuable reports whether Continue would take a continuation: the
// handler runs on the goroutine that received the event's message, and its
// LND is a Continuer.
func (ev *Event) Continuable() bool {
	return ev.rx != nil && ev.rx.Continuable()
}

// Continue asks for c to run, after the handler returns, on the goroutine
// that received the event's message, once the LND has let another goroutine
// take over receiving; it reports false, doing nothing, when that cannot be
// (an event handed to the handler on another goroutine, an LND that cannot
// let its receiving goroutine go, a second continuation). Only EventPut
// events of incoming messages can continue.
func (ev *Event) Continue(c Continuation) bool {
	return ev.rx != nil && ev.rx.Continue(c)
}

// dispatchList collects the MDs that got events under LNet.res, to run
// their handlers once the lock is released. It lives on its caller's stack:
// most calls touch one or two MDs, and every message went through several
// of these, each a heap allocation when it was a plain slice.
type dispatchList struct {
	small [4]*md
	n     int
	more  []*md
	rx    Continuer // the receive this goroutine is in, whose events may continue
}

// add appends m unless it is already last.
func (d *dispatchList) add(m *md) {
	if d.n > 0 && d.last() == m {
		return
	}
	if d.n < len(d.small) {
		d.small[d.n] = m
	} else {
		d.more = append(d.more, m)
	}
	d.n++
}

func (d *dispatchList) last() *md {
	if d.n > len(d.small) {
		return d.more[len(d.more)-1]
	}
	return d.small[d.n-1]
}

// maxEventBacklog bounds the events waiting for one MD's busy handler:
// past it, a receive path blocks until the handler catches up, pushing back
// on the sender instead of growing the queue.
const maxEventBacklog = 256

// enqueueLocked queues an event for the MD's handler.
func (ln *LNet) enqueueLocked(m *md, ev Event, d *dispatchList) {
	if m.handler == nil {
		return
	}
	if m.evHead > 0 && len(m.evq) == cap(m.evq) {
		// Reuse the slots already handed out before growing.
		n := copy(m.evq, m.evq[m.evHead:])
		clear(m.evq[n:])
		m.evq, m.evHead = m.evq[:n], 0
	}
	m.evq = append(m.evq, ev)
	d.add(m)
}

// dispatch runs the handlers of the MDs in d with no lock held. For each MD
// exactly one goroutine at a time delivers its events, in queue order: the
// first to find it idle delivers until the queue is empty, later ones leave
// their events to it. With fromNet (a receive path), a caller that finds
// the backlog over maxEventBacklog waits for the handler to catch up.
func (ln *LNet) dispatch(d *dispatchList, fromNet bool) {
	for _, m := range d.small[:min(d.n, len(d.small))] {
		ln.runHandler(m, fromNet, d.rx)
	}
	for _, m := range d.more {
		ln.runHandler(m, fromNet, d.rx)
	}
}

// backlog is how many events wait for m's handler.
func (m *md) backlog() int { return len(m.evq) - m.evHead }

// runHandler delivers m's events; rx is the receive the calling goroutine
// is in (nil if none): only its own events keep their rx, since a
// continuation can run only on the goroutine that received the message.
func (ln *LNet) runHandler(m *md, fromNet bool, rx Continuer) {
	ln.res.Lock()
	if m.dispatching {
		if fromNet {
			for m.dispatching && m.backlog() > maxEventBacklog {
				ln.res.evWaiters++
				ln.res.evCond.Wait()
				ln.res.evWaiters--
			}
		}
		ln.res.Unlock()
		return
	}
	m.dispatching = true
	for m.backlog() > 0 {
		ev := m.evq[m.evHead]
		m.evq[m.evHead] = Event{}
		m.evHead++
		if m.evHead == len(m.evq) {
			// Drained: back to the MD's own array, letting a grown one go.
			m.evq, m.evHead = m.evBuf[:0], 0
		}
		if ln.res.evWaiters > 0 && m.backlog() <= maxEventBacklog/2 {
			ln.res.evCond.Broadcast()
		}
		ln.res.Unlock()
		if ev.rx != rx {
			ev.rx = nil
		}
		m.handler(ev)
		ln.res.Lock()
	}
	m.dispatching = false
	if ln.res.evWaiters > 0 {
		ln.res.evCond.Broadcast()
	}
	ln.res.Unlock()
}
