package lnet

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nacrefs/nacre/lnet/wire"
)

// This file is the router's side of routing (Lustre's lnet_parse_forward
// and router buffers): a node with Config.Routing forwards the messages it
// receives for other nodes.
//
// A message to forward needs a router buffer to hold its payload between
// the two networks. The buffers are MTU-size, Config.RouterBuffers of them
// at most, made when first needed and kept. A message that finds none free
// waits in a FIFO without its payload being read: Parse returns, and rx.Recv
// is called only when a buffer is handed to it (by the forward that frees
// it, on a goroutine of its own since Recv reads the network). Until then
// the LND reads nothing more from that connection, so a sender that
// outpaces the router's outgoing side is pushed back through its
// connection, and the router's memory stays bounded. Messages without
// payload (GET, ACK) need no buffer and are forwarded at once; they are
// bounded by the credits of the peers sending them.
//
// The forwarded message keeps the header as it came (source and
// destination NID and pid, cookies, match bits...) and is sent on like any
// message (selectPathLocked): directly if the router has an NI on the
// destination's net, else through a route of its own. It holds credits of
// the outgoing NI and peer NI like any send; it is never sent back to the
// neighbour it came from. Its buffer is freed when the LND is done with it.
//
// A next hop that has failed (its health is below full) and has not been
// heard from for its NI's Tunables.PeerTimeout is dead: what would go to it
// is dropped at once (deadNextHopLocked), as Lustre's router does, instead
// of holding a buffer and a credit until it times out; a forward that
// waited for credits is checked again when it gets them (see drain).

// fwd is a message waiting for a router buffer.
type fwd struct {
	hdr  wire.Header
	from wire.NID
	via  *ni
	rx   Rx
	next *fwd
}

// rtrPool is the router buffer pool. Its mutex is a leaf: nothing is
// called with it held.
type rtrPool struct {
	mu        sync.Mutex
	max       int      // Config.RouterBuffers
	free      [][]byte // made and unused
	made      int      // buffers made (or being made)
	inUse     int
	maxInUse  int
	closed    bool
	head      *fwd // waiting for a buffer, oldest first
	tail      *fwd
	waiting   int
	resumed   sync.WaitGroup // goroutines receiving into a buffer handed over
	forwarded atomic.Uint64  // messages forwarded (sent on successfully)
	fwdBytes  atomic.Uint64
	dropped   atomic.Uint64 // messages for others not forwarded
	dropBytes atomic.Uint64
}

// take gives f a buffer, or queues f for the next one freed (ok false).
// Once the pool is closed it gives no buffer (ok true, buf nil).
func (p *rtrPool) take(f *fwd) (buf []byte, ok bool) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, true
	}
	if p.head != nil || (len(p.free) == 0 && p.made >= p.max) {
		if p.tail == nil {
			p.head = f
		} else {
			p.tail.next = f
		}
		p.tail = f
		p.waiting++
		p.mu.Unlock()
		return nil, false
	}
	p.inUse++
	p.maxInUse = max(p.maxInUse, p.inUse)
	if n := len(p.free); n > 0 {
		buf = p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return buf, true
	}
	p.made++
	p.mu.Unlock()
	return make([]byte, wire.MTU), true
}

// give returns a buffer; if a message waits for one, it gets it and the
// returned fwd must be resumed with the buffer.
func (p *rtrPool) give(buf []byte) *fwd {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := p.head; f != nil && !p.closed {
		p.head = f.next
		if p.head == nil {
			p.tail = nil
		}
		f.next = nil
		p.waiting--
		p.resumed.Add(1)
		return f
	}
	p.inUse--
	p.free = append(p.free, buf)
	return nil
}

// close stops handing buffers to waiters and returns them.
func (p *rtrPool) close() []*fwd {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var out []*fwd
	for f := p.head; f != nil; f = f.next {
		out = append(out, f)
		p.resumed.Add(1)
	}
	p.head, p.tail, p.waiting = nil, nil, 0
	return out
}

// RouterStats describe this node's forwarding (lnetctl routing show and
// the route_* counters of lnetctl stats show).
type RouterStats struct {
	// Enabled is Config.Routing.
	Enabled bool
	// Buffers is Config.RouterBuffers; InUse the buffers holding a payload
	// now, MaxInUse the high-water mark, Allocated those made so far.
	Buffers, InUse, MaxInUse, Allocated int
	// Waiting counts the messages waiting for a buffer now (each holds up
	// the connection it came on).
	Waiting int
	// RouteCount and RouteLength count the messages forwarded and their
	// payload bytes (Lustre's route_count and route_length).
	RouteCount, RouteLength uint64
	// DropCount and DropLength count the messages for other nodes that were
	// not forwarded: routing disabled, no route onward, a routing loop, a
	// dead next hop, the onward send failing, or the payload failing to
	// arrive. Each is counted in the DropCount of the NI it came in on too.
	DropCount, DropLength uint64
}

func (p *rtrPool) stats(enabled bool) RouterStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return RouterStats{
		Enabled: enabled, Buffers: p.max, InUse: p.inUse, MaxInUse: p.maxInUse, Allocated: p.made,
		Waiting: p.waiting, RouteCount: p.forwarded.Load(), RouteLength: p.fwdBytes.Load(),
		DropCount: p.dropped.Load(), DropLength: p.dropBytes.Load(),
	}
}

// forward handles a message for another node received on via from the
// neighbour from (lnet_parse_forward_locked). Routing must be enabled.
func (ln *LNet) forward(via *ni, hdr *wire.Header, from wire.NID, rx Rx) error {
	f := &fwd{hdr: *hdr, from: from, via: via, rx: rx}
	if hdr.PayloadLen == 0 {
		return ln.forwardRecv(f, nil)
	}
	buf, ok := ln.rtr.take(f)
	if !ok {
		ln.log.Debug("forward waits for a router buffer", "from", from, "to", hdr.Dst(), "len", hdr.PayloadLen)
		return nil
	}
	return ln.forwardRecv(f, buf)
}

// resumeForward receives and sends on a message that waited for a buffer;
// it runs on a goroutine of its own, owned by LNet (Close waits for it).
func (ln *LNet) resumeForward(f *fwd, buf []byte) {
	defer ln.rtr.resumed.Done()
	if err := ln.forwardRecv(f, buf); err != nil {
		ln.log.Debug("forward failed", "from", f.from, "to", f.hdr.Dst(), "err", err)
	}
}

// releaseBuf returns a router buffer, resuming the next waiter with it.
func (ln *LNet) releaseBuf(buf []byte) {
	if buf == nil {
		return
	}
	if f := ln.rtr.give(buf); f != nil {
		go ln.resumeForward(f, buf)
	}
}

// forwardDrop counts and logs a message not forwarded.
func (ln *LNet) forwardDrop(f *fwd, why string, err error) error {
	ln.rtr.dropped.Add(1)
	ln.rtr.dropBytes.Add(uint64(f.hdr.PayloadLen))
	f.via.counters.dropCount.Add(1)
	f.via.counters.dropBytes.Add(uint64(f.hdr.PayloadLen))
	ln.log.Debug("not forwarded", "type", f.hdr.Type, "from", f.hdr.Src(), "to", f.hdr.Dst(), "neighbour", f.from,
		"len", f.hdr.PayloadLen, "why", why, "err", err)
	if err != nil {
		return fmt.Errorf("%w: %v from %v to %v: %s: %w", ErrDropped, f.hdr.Type, f.hdr.Src(), f.hdr.Dst(), why, err)
	}
	return fmt.Errorf("%w: %v from %v to %v: %s", ErrDropped, f.hdr.Type, f.hdr.Src(), f.hdr.Dst(), why)
}

// errDeadNextHop is the error of a forward dropped for a dead next hop.
// Called with LNet.net held.
func errDeadNextHop(m *msg) error {
	return fmt.Errorf("%w: the next hop %v is dead (health %d, silent for over %v)",
		ErrPeerUnreachable, m.lm.NextHop, m.lpni.health, m.ni.tun.PeerTimeout)
}

// forwardRecv moves the payload into buf and sends the message on.
func (ln *LNet) forwardRecv(f *fwd, buf []byte) error {
	n := int(f.hdr.PayloadLen)
	if ln.closing() || (buf == nil && n > 0) {
		f.rx.Recv(nil, 0)
		ln.releaseBuf(buf)
		return ln.forwardDrop(f, "shutting down", nil)
	}
	var dst [][]byte
	if n > 0 {
		dst = [][]byte{buf[:n:n]}
	}
	if err := f.rx.Recv(dst, n); err != nil {
		ln.releaseBuf(buf)
		return ln.forwardDrop(f, "receiving the payload", err)
	}
	m := &msg{kind: kindFwd, heapIdx: -1, fixedSrc: true, fwdBuf: buf, fwdVia: f.via}
	m.deadline = ln.deadline()
	m.lm = Msg{Hdr: f.hdr, Payload: dst, Deadline: m.deadline, priv: m}

	ln.net.Lock()
	err := ErrShutdown
	if !ln.net.closed {
		err = ln.selectPathLocked(m)
	}
	if err == nil {
		if back := ln.net.peers[f.from]; back != nil && m.lpni.peer == back.peer {
			err = fmt.Errorf("%w: the next hop %v is the neighbour it came from (routing loop)", ErrNoRoute, m.lm.NextHop)
		} else if deadNextHopLocked(m.ni, m.lpni, time.Now()) {
			err = errDeadNextHop(m)
		}
	}
	if err != nil {
		ln.net.Unlock()
		ln.releaseBuf(buf)
		return ln.forwardDrop(f, "no way onward", err)
	}
	ln.timer.add(m)
	ready := ln.postLocked(m)
	out := m.ni
	ln.net.Unlock()
	if ready {
		ln.drain(out)
	}
	return nil
}
