package lnet

import (
	"fmt"
	"math"
	"strconv"

	"github.com/nacrefs/nacre/lnet/wire"
)

// ThresholdInfinite is an MD threshold that never runs out
// (LNET_MD_THRESH_INF).
const ThresholdInfinite = -1

// MDOptions are the options of a memory descriptor (LNET_MD_*).
type MDOptions uint32

// The MD options.
const (
	// MDOpPut lets incoming PUTs write into the MD.
	MDOpPut MDOptions = 1 << iota
	// MDOpGet lets incoming GETs read from the MD.
	MDOpGet
	// MDManageRemote makes incoming operations use the offset the initiator
	// put in the header instead of the MD's own offset, which then does not
	// advance.
	MDManageRemote
	// MDTruncate lets an incoming operation that does not fit move only the
	// bytes that fit (MLength < RLength); without it such an operation does
	// not match this MD.
	MDTruncate
	// MDAckDisable: never send an ACK for a PUT into this MD, even if the
	// initiator asked for one (its ACK event will then time out).
	MDAckDisable
	// MDFailUnreachable: a Put or Get from this MD fails with
	// ErrPeerUnreachable as soon as an attempt to connect to its next
	// hop fails, instead of waiting in the LND for a connection until its
	// deadline (LNet's resends each try once more). For a request whose
	// sender has somewhere else to go: a CONNECT to a target that has a
	// failover server (Lustre's ksocklnd fails every waiting message so).
	MDFailUnreachable
)

// String returns the options as "PUT|GET|...", for logs.
func (o MDOptions) String() string {
	if o == 0 {
		return "0"
	}
	names := [...]string{"PUT", "GET", "MANAGE_REMOTE", "TRUNCATE", "ACK_DISABLE", "FAIL_UNREACHABLE"}
	var b []byte
	for i, n := range names {
		if o&(1<<i) != 0 {
			if len(b) > 0 {
				b = append(b, '|')
			}
			b = append(b, n...)
		}
	}
	if rest := o &^ (1<<len(names) - 1); rest != 0 {
		if len(b) > 0 {
			b = append(b, '|')
		}
		b = append(b, "0x"...)
		b = strconv.AppendUint(b, uint64(rest), 16)
	}
	return string(b)
}

// MD describes memory LNet may move data into or out of: Portals' memory
// descriptor. The caller owns the buffers but must not touch them while an
// operation on the MD is in flight (between the operation starting and its
// last event); LNet reads and writes them in place without copying them.
type MD struct {
	// Buffers are the MD's memory, taken in order as one contiguous range
	// (an iovec). The total length is at most math.MaxUint32; an MD used as
	// the source of a Put or the sink of a Get is at most wire.MTU.
	Buffers [][]byte
	// Threshold is how many operations the MD takes before it unlinks
	// itself, or ThresholdInfinite. It must not be 0. One Put or Get started
	// from the MD, or one incoming PUT or GET that matched it, is one
	// operation; ACKs and REPLYs complete an operation and count nothing.
	Threshold int
	// Options select which incoming operations the MD takes and how.
	Options MDOptions
	// Handler, if not nil, receives the MD's events. It is called without
	// any LNet lock held, may call any LNet method but Close, and is never
	// called concurrently with itself for one MD; events of one MD arrive in the
	// order they happened (SEND before ACK or REPLY). It runs on whichever
	// goroutine completed the event (often an LND's receive goroutine), so it
	// must not block for long: a blocked handler stalls that connection.
	Handler func(Event)
	// User is handed back in every event of the MD.
	User any
	// Observe, if not nil, is shown the bytes each incoming PUT or REPLY
	// writes into the MD, in order, as they land: off is where b starts in
	// the MD, so an operation's first call has its starting offset. An LND
	// that reads a payload in pieces calls it after each piece, while the
	// bytes are still in the CPU's cache: a checksum of bulk data then
	// costs no second trip through memory. It runs on the receiving
	// goroutine, before the operation's event, and must be quick. A
	// receive that fails may have shown only part of its payload.
	Observe func(off int, b []byte)
}

// MDHandle names an MD; the zero MDHandle names none. It is a plain
// number, safe to copy and compare; once the MD is unlinked every method
// given the handle returns ErrNoMD.
type MDHandle struct{ cookie uint64 }

// IsZero reports whether h is the zero handle.
func (h MDHandle) IsZero() bool { return h.cookie == 0 }

// String returns "md#" and the cookie, for logs.
func (h MDHandle) String() string { return "md#" + strconv.FormatUint(h.cookie, 10) }

// Position is where Attach puts a new match entry in its portal's list.
type Position uint8

// The positions.
const (
	// InsertLast appends the entry: it is tried after every existing one
	// (LNET_INS_AFTER).
	InsertLast Position = iota
	// InsertFirst prepends the entry: it is tried before every existing one
	// (LNET_INS_BEFORE).
	InsertFirst
)

// AnyProcess is a source filter that accepts every initiator.
var AnyProcess = wire.ProcessID{NID: wire.AnyNID, PID: wire.PIDAny}

// md is the live state of an MD.
type md struct {
	cookie    uint64
	bufs      [][]byte
	length    int
	options   MDOptions
	handler   func(Event)
	user      any
	observe   func(off int, b []byte)
	me        *me // nil for a bound (free-floating) MD
	bound     bool
	internal  bool // made by LNet for itself (ping buffer, ping sink); not in Stats.MDs
	threshold int  // protected by LNet.res; remaining operations or ThresholdInfinite

	// Protected by LNet.res.
	offset      int     // local offset for non-MANAGE_REMOTE MDs
	refs        int     // operations in flight
	zombie      bool    // Unlink was called; unlinks when refs drops to 0
	dead        bool    // unlinked: out of every table
	evq         []Event // events: evq[evHead:] not yet handed to handler
	evHead      int
	dispatching bool // a goroutine is running handler
	// evBuf backs evq until an MD has more than two events waiting: most
	// see one or two (SEND, then REPLY or UNLINK), one at a time.
	evBuf [2]Event
	meBuf me // an attached MD's match entry, one allocation with it
	// sends are the PUTs and GETs sent from the MD whose send has not
	// finished: Unlink cancels them (Msg.Canceled). sendBuf backs it for
	// the usual one.
	sends   []*msg
	sendBuf [1]*msg
}

// dropSendLocked forgets s, whose send finished.
func (m *md) dropSendLocked(s *msg) {
	for i, x := range m.sends {
		if x == s {
			last := len(m.sends) - 1
			m.sends[i], m.sends[last] = m.sends[last], nil
			m.sends = m.sends[:last]
			return
		}
	}
}

func (m *md) handle() MDHandle { return MDHandle{m.cookie} }

// unlinkableLocked reports whether the MD goes away once idle.
func (m *md) unlinkableLocked() bool { return m.zombie || m.threshold == 0 }

// usableLocked reports whether a new operation may use the MD.
func (m *md) usableLocked() bool { return !m.dead && !m.zombie && m.threshold != 0 }

// me is a match entry on a portal's list.
type me struct {
	portal     *portal
	prev, next *me
	src        wire.ProcessID
	match      uint64
	ignore     uint64
	md         *md
}

// portal is one entry of the portal table: an ordered list of match entries.
type portal struct {
	index      uint32
	head, tail *me
	n          int
}

func (p *portal) insert(e *me, pos Position) {
	e.portal = p
	p.n++
	if p.head == nil {
		p.head, p.tail = e, e
		return
	}
	if pos == InsertFirst {
		e.next = p.head
		p.head.prev = e
		p.head = e
		return
	}
	e.prev = p.tail
	p.tail.next = e
	p.tail = e
}

func (p *portal) remove(e *me) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		p.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		p.tail = e.prev
	}
	e.prev, e.next, e.portal = nil, nil, nil
	p.n--
}

// matches reports whether the entry's match bits and source filter accept
// an incoming operation (lnet_match_md without the MD checks).
func (e *me) matches(src wire.ProcessID, bits uint64) bool {
	if (e.match^bits)&^e.ignore != 0 {
		return false
	}
	if !e.src.NID.IsZero() && e.src.NID != src.NID {
		return false
	}
	return e.src.PID == wire.PIDAny || e.src.PID == src.PID
}

// acceptLocked decides whether the MD takes an incoming operation of type
// op asking for rlength bytes at roffset (used only with MANAGE_REMOTE). It
// returns the offset in the MD and the number of bytes to move.
func (m *md) acceptLocked(op wire.MsgType, rlength, roffset uint32) (off, mlen int, ok bool) {
	if !m.usableLocked() {
		return 0, 0, false
	}
	switch op {
	case wire.MsgPut:
		if m.options&MDOpPut == 0 {
			return 0, 0, false
		}
	case wire.MsgGet:
		if m.options&MDOpGet == 0 {
			return 0, 0, false
		}
	default:
		return 0, 0, false
	}
	off = m.offset
	if m.options&MDManageRemote != 0 {
		off = int(roffset)
	}
	if off > m.length {
		return 0, 0, false
	}
	room := m.length - off
	mlen = int(rlength)
	if mlen > room {
		if m.options&MDTruncate == 0 {
			return 0, 0, false
		}
		mlen = room
	}
	return off, mlen, true
}

// checkMD validates an MD given to Attach or Bind and returns its length.
func checkMD(d *MD, attach bool) (int, error) {
	if d.Threshold == 0 || d.Threshold < ThresholdInfinite {
		return 0, fmt.Errorf("%w: MD threshold %d (positive or ThresholdInfinite)", ErrInvalid, d.Threshold)
	}
	if d.Options&^(MDOpPut|MDOpGet|MDManageRemote|MDTruncate|MDAckDisable|MDFailUnreachable) != 0 {
		return 0, fmt.Errorf("%w: MD options %v", ErrInvalid, d.Options)
	}
	if attach && d.Options&(MDOpPut|MDOpGet) == 0 {
		return 0, fmt.Errorf("%w: attached MD takes neither PUT nor GET", ErrInvalid)
	}
	n := 0
	for _, b := range d.Buffers {
		n += len(b)
		if n > math.MaxUint32 {
			return 0, fmt.Errorf("%w: MD longer than %d bytes", ErrInvalid, uint32(math.MaxUint32))
		}
	}
	return n, nil
}

// newMDLocked makes an MD live and gives it a cookie.
func (ln *LNet) newMDLocked(d *MD, length int, internal bool) *md {
	ln.res.nextCookie++
	m := &md{
		cookie:    ln.res.nextCookie,
		bufs:      d.Buffers,
		length:    length,
		threshold: d.Threshold,
		options:   d.Options,
		handler:   d.Handler,
		user:      d.User,
		observe:   d.Observe,
		internal:  internal,
	}
	m.evq, m.sends = m.evBuf[:0], m.sendBuf[:0]
	ln.res.mds[m.cookie] = m
	if internal {
		ln.res.internal++
	}
	return m
}

// Attach posts an MD on a portal behind a new match entry, at the start or
// the end of the portal's list. Incoming PUTs and GETs on the portal try the
// entries in list order; the first entry whose match bits agree with the
// message's outside the ignore bits, whose source filter accepts the
// initiator (src.NID may be wire.AnyNID and src.PID wire.PIDAny; see
// AnyProcess) and whose MD takes the operation is used. The entry goes away
// with its MD. Attach is safe for concurrent use; it fails with ErrInvalid
// for a bad MD and ErrShutdown after Close.
func (ln *LNet) Attach(portalIndex uint32, src wire.ProcessID, match, ignore uint64, pos Position, d MD) (MDHandle, error) {
	return ln.attach(portalIndex, src, match, ignore, pos, d, false)
}

func (ln *LNet) attach(portalIndex uint32, src wire.ProcessID, match, ignore uint64, pos Position, d MD, internal bool) (MDHandle, error) {
	length, err := checkMD(&d, true)
	if err != nil {
		return MDHandle{}, err
	}
	if pos != InsertFirst && pos != InsertLast {
		return MDHandle{}, fmt.Errorf("%w: position %d", ErrInvalid, pos)
	}
	ln.res.Lock()
	defer ln.res.Unlock()
	if ln.res.closed {
		return MDHandle{}, ErrShutdown
	}
	p := ln.res.portals[portalIndex]
	if p == nil {
		p = &portal{index: portalIndex}
		ln.res.portals[portalIndex] = p
	}
	m := ln.newMDLocked(&d, length, internal)
	m.meBuf = me{src: src, match: match, ignore: ignore, md: m}
	e := &m.meBuf
	m.me = e
	p.insert(e, pos)
	return m.handle(), nil
}

// Bind makes a free-floating MD, the source of Put or the sink of Get. Of
// its Options only MDTruncate matters: with it, a REPLY longer than the MD
// delivers what fits instead of being dropped. Bind is safe for concurrent
// use; it fails with ErrInvalid for a bad MD and ErrShutdown after Close.
func (ln *LNet) Bind(d MD) (MDHandle, error) { return ln.bind(d, false) }

func (ln *LNet) bind(d MD, internal bool) (MDHandle, error) {
	length, err := checkMD(&d, false)
	if err != nil {
		return MDHandle{}, err
	}
	ln.res.Lock()
	defer ln.res.Unlock()
	if ln.res.closed {
		return MDHandle{}, ErrShutdown
	}
	m := ln.newMDLocked(&d, length, internal)
	m.bound = true
	return m.handle(), nil
}

// Unlink unlinks an MD (and its match entry): no new operation will use it.
// If no operation is in flight on it, an EventUnlink is raised at once;
// otherwise the operations finish normally, the last of their events has
// Unlinked set, and the EventUnlink follows it. Unlinking an MD that is
// already being unlinked is a no-op. Unlink fails with ErrNoMD if h names
// no live MD. It is safe for concurrent use, from handlers too.
func (ln *LNet) Unlink(h MDHandle) error {
	var d dispatchList
	ln.res.Lock()
	m := ln.res.mds[h.cookie]
	if m == nil || m.dead {
		ln.res.Unlock()
		return fmt.Errorf("%w: %v", ErrNoMD, h)
	}
	m.zombie = true
	var canceled []*msg
	for _, s := range m.sends {
		// Its owner gave it up: LNet does not send it again, and what has
		// not started to send it (a credit queue, the LND) ends it now
		// instead of at its deadline (a dead peer).
		if !s.canceled.Swap(true) {
			canceled = append(canceled, s)
		}
	}
	if m.refs == 0 {
		ln.unlinkLocked(m, &d)
	}
	ln.res.Unlock()
	ln.dispatch(&d, false)
	for _, s := range canceled {
		ln.cancel(s)
	}
	return nil
}

// unlinkLocked takes an idle MD out of every table and raises its
// EventUnlink.
func (ln *LNet) unlinkLocked(m *md, d *dispatchList) {
	if m.dead {
		return
	}
	m.dead = true
	delete(ln.res.mds, m.cookie)
	if m.internal {
		ln.res.internal--
	}
	if e := m.me; e != nil && e.portal != nil {
		p := e.portal
		p.remove(e) // an empty portal stays: the next request's reply MD goes there
	}
	ln.enqueueLocked(m, Event{Type: EventUnlink, MD: m.handle(), User: m.user, Unlinked: true}, d)
}

// commitLocked takes one operation from the MD's threshold.
func (m *md) commitLocked() {
	if m.threshold != ThresholdInfinite {
		m.threshold--
	}
	m.refs++
}

// opDoneLocked raises the last event of one operation on the MD, drops the
// operation's reference, and unlinks the MD if that was its last reference
// and it is used up or unlinked: the event then has Unlinked set and the
// EventUnlink follows it.
func (ln *LNet) opDoneLocked(m *md, last Event, d *dispatchList) {
	m.refs--
	unlink := m.refs == 0 && m.unlinkableLocked()
	last.Unlinked = unlink
	ln.enqueueLocked(m, last, d)
	if unlink {
		ln.unlinkLocked(m, d)
	}
}

// abortLocked gives back an operation that never started: no events, the
// threshold restored.
func (ln *LNet) abortLocked(m *md, d *dispatchList) {
	if m.threshold != ThresholdInfinite {
		m.threshold++
	}
	m.refs--
	if m.refs == 0 && m.unlinkableLocked() {
		ln.unlinkLocked(m, d)
	}
}

// matchLocked finds where an incoming PUT or GET lands: the first entry of
// the portal, in list order, that matches and whose MD accepts it.
func (ln *LNet) matchLocked(op wire.MsgType, portalIndex uint32, src wire.ProcessID, bits uint64, rlength, roffset uint32) (m *md, off, mlen int, ok bool) {
	p := ln.res.portals[portalIndex]
	if p == nil {
		return nil, 0, 0, false
	}
	for e := p.head; e != nil; e = e.next {
		if !e.matches(src, bits) {
			continue
		}
		if off, mlen, ok := e.md.acceptLocked(op, rlength, roffset); ok {
			return e.md, off, mlen, true
		}
	}
	return nil, 0, 0, false
}
