package socklnd

// Connection management: peers, their typed connections, making them
// (the dialer, Lustre's connd), installing them with connection-race and
// incarnation rules (ksocknal_create_conn), and dropping them
// (ksocknal_close_conn_locked).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// nTypes sizes the per-type arrays of a peer, indexed by wire.ConnType
// (ConnAny, ConnControl, ConnBulkIn, ConnBulkOut) as seen from this side.
const nTypes = int(wire.ConnBulkOut) + 1

// peer is everything this NI knows about one neighbour NID. Peers are made
// on first contact and kept while they are in use and for
// Config.PeerIdleAge after, so that the peer's incarnation is remembered
// across connection losses: that is how a restart is told from a
// reconnect. An idle peer is then reaped (reap), which marks it removed
// under its lock before taking it out of the table: whoever finds a
// removed peer looks it up again.
type peer struct {
	nid wire.NID
	// evMu is held while events are delivered to the host, so that they
	// arrive in the order they were decided even though they are delivered
	// outside mu.
	evMu sync.Mutex

	mu struct {
		sync.Mutex
		// incarnation is the peer's incarnation as last seen in a hello;
		// 0 until the first handshake.
		incarnation uint64
		// pid is the peer's pid from its last hello.
		pid uint32
		// conns are the established connections by type; at most one per
		// type. A connection is here from install until it is dropped.
		conns [nTypes]*conn
		// txq are the messages waiting for the writer of each type's
		// connection, each bounded by NI.qcap (with those being written).
		txq [nTypes]txQueue
		// dialing marks a dialer goroutine that owns (re)connecting the type;
		// it runs while the queue is non-empty and no connection exists.
		dialing [nTypes]bool
		// connecting marks a dial attempt (connect and hello) in progress,
		// for race resolution; false while the dialer backs off.
		connecting [nTypes]bool
		// backingOff marks a dialer waiting to try again after a failed
		// attempt: a message that must not wait for it (FailUnreachable)
		// fails at once, as Lustre's ksocklnd fails a tx to a peer with
		// no connection and none being made.
		backingOff [nTypes]bool
		// up is true from the PeerUp event until the PeerDown one.
		up bool
		// events are peer events decided but not yet delivered.
		events []lnet.PeerEvent
		// lastUsed is the last connection installed or lost, or when the
		// reaper first saw Sends to the peer since its previous look (sends
		// counts them, seenSends is what it saw: no Send reads the clock;
		// the time is late by at most one reaping period, which keeps a
		// peer longer, never shorter); removed is set when the peer is
		// reaped.
		lastUsed  time.Time
		sends     uint64
		seenSends uint64
		removed   bool
	}
}

func newPeer(nid wire.NID) *peer {
	p := &peer{nid: nid}
	p.mu.lastUsed = time.Now()
	return p
}

// errPeerTableFull is what a new peer beyond Config.MaxPeers gets.
var errPeerTableFull = errors.New("socklnd: peer table full")

// peer returns the peer of nid, making it on first use. It fails with
// lnet.ErrShutdown once the NI is shutting down, and with errPeerTableFull
// (logged, at most once a second) if nid is new and the table is full.
func (ni *NI) peer(nid wire.NID) (*peer, error) {
	ni.mu.Lock()
	defer ni.mu.Unlock()
	if ni.mu.closing {
		return nil, lnet.ErrShutdown
	}
	p := ni.mu.peers[nid]
	if p == nil {
		if len(ni.mu.peers) >= ni.conf.MaxPeers {
			ni.stats.peersRefused.Add(1)
			if now := time.Now(); now.Sub(ni.mu.fullLogged) >= time.Second {
				ni.mu.fullLogged = now
				ni.log.Warn("socklnd: peer table full: refusing a new peer", "peer", nid.String(),
					"max_peers", ni.conf.MaxPeers, "refused_so_far", ni.stats.peersRefused.Load())
			}
			return nil, fmt.Errorf("%w (%d peers): cannot add %v", errPeerTableFull, ni.conf.MaxPeers, nid)
		}
		p = newPeer(nid)
		ni.mu.peers[nid] = p
	}
	return p, nil
}

// lockPeer returns the peer of nid with its lock held, making it if need
// be, and looking again if the one found was being reaped.
func (ni *NI) lockPeer(nid wire.NID) (*peer, error) {
	for {
		p, err := ni.peer(nid)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		if !p.mu.removed {
			return p, nil
		}
		p.mu.Unlock()
	}
}

// idleLocked reports whether p has been unused for age: no connection, no
// dial, nothing queued, no event to deliver.
func (p *peer) idleLocked(now time.Time, age time.Duration) bool {
	if p.mu.sends != p.mu.seenSends {
		p.mu.seenSends, p.mu.lastUsed = p.mu.sends, now
	}
	if p.mu.up || len(p.mu.events) > 0 || now.Sub(p.mu.lastUsed) < age {
		return false
	}
	for t := range nTypes {
		if p.mu.conns[t] != nil || p.mu.txq[t].n > 0 || p.mu.txq[t].out > 0 || p.mu.dialing[t] || p.mu.connecting[t] {
			return false
		}
	}
	return true
}

// reapLoop drops idle peers every half Config.PeerIdleAge (at most every
// minute) until Shutdown.
func (ni *NI) reapLoop() {
	every := min(max(ni.conf.PeerIdleAge/2, 10*time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ni.ctx.Done():
			return
		case now := <-t.C:
			ni.reap(now)
		}
	}
}

// reap drops the peers idle for Config.PeerIdleAge, and returns how many.
func (ni *NI) reap(now time.Time) int {
	ni.mu.Lock()
	peers := make([]*peer, 0, len(ni.mu.peers))
	for _, p := range ni.mu.peers {
		peers = append(peers, p)
	}
	ni.mu.Unlock()
	var gone []*peer
	for _, p := range peers {
		p.mu.Lock()
		if !p.mu.removed && p.idleLocked(now, ni.conf.PeerIdleAge) {
			p.mu.removed = true
			gone = append(gone, p)
		}
		p.mu.Unlock()
	}
	if len(gone) == 0 {
		return 0
	}
	ni.mu.Lock()
	for _, p := range gone {
		if ni.mu.peers[p.nid] == p {
			delete(ni.mu.peers, p.nid)
		}
	}
	left := len(ni.mu.peers)
	ni.mu.Unlock()
	ni.stats.peersReaped.Add(uint64(len(gone)))
	ni.log.Debug("socklnd: idle peers dropped", "peers", len(gone), "left", left)
	return len(gone)
}

func (p *peer) addEventLocked(ev lnet.PeerEvent) { p.mu.events = append(p.mu.events, ev) }

func (p *peer) connectedLocked() bool {
	for _, c := range p.mu.conns {
		if c != nil {
			return true
		}
	}
	return false
}

// conn is one established TCP connection to a peer. Its reader goroutine
// owns the socket's read side; its write side belongs to its writer
// goroutine or, for one small message at a time, to a Send writing inline
// (see busy). The peer's mu guards its membership in peer.mu.conns.
type conn struct {
	ni     *NI
	p      *peer
	nc     *net.TCPConn
	typ    wire.ConnType // as seen from this side
	active bool          // this side dialed it
	local  netip.AddrPort
	remote netip.AddrPort
	since  time.Time
	// inProc says the peer's NI runs in this process (its NID and port
	// are among listeners): an inline Send yields before writing only
	// then (combine).
	inProc bool

	// prevW is closed when the writer of the connection this one replaced
	// has exited, so messages of one type never overtake each other across
	// a replacement. Set at install, under p.mu, before the writer starts.
	prevW <-chan struct{}
	// wdone is closed when this connection's writer has exited, and with
	// it every write on the socket (or, if it never started, when that is
	// known).
	wdone chan struct{}
	// kick wakes the writer: a message was queued, or an inline write
	// ended that the writer is waiting for. Capacity 1, so a kick is never
	// lost and never blocks.
	kick chan struct{}
	// rxDone carries the outcome of the current message's Recv to the
	// reader; one message is outstanding at a time, so capacity 1 never
	// blocks.
	rxDone chan error

	once    sync.Once
	closing chan struct{} // closed by shut
	err     error         // set by shut before closing is closed: what in-flight sends fail with

	// Guarded by p.mu: who may write on the socket.
	//
	// writable is set by the writer once it may write (the connection c
	// replaced is done writing, the hellos are exchanged) and cleared when
	// a write fails or the writer exits: only then may a Send write inline.
	writable bool
	// busy is set while the writer or an inline Send is writing.
	busy bool
	// combining is set while a Send that found c idle yields before
	// writing what is queued (conn.combine): Sends meanwhile queue
	// without waking the writer.
	combining bool
	// exiting is set by an exiting writer that waits for an inline write
	// to end: the inline writer then kicks it.
	exiting bool
	// rest is a message an inline write left half written (rest.sent
	// bytes are out): the writer finishes it before anything else.
	rest txItem

	// Write side: used only by the goroutine that set busy.
	vec   [][]byte // the iovec being written
	batch []txItem // the messages being written
	nbw   nbWriter // non-blocking writes, for inline ones

	rb rxBuf // reader only, and Recv while the reader waits for it
	// hdrDeadline is set while a read deadline bounds the rest of a
	// header part of which is in rb (headerReader). Reader only.
	hdrDeadline bool

	// Guarded by NI.cont.mu: the message whose continuation runs, when it
	// started, and where c is in the watchdog's list (-1: not in it).
	contRx    *rx
	contSince time.Time
	watchIdx  int
}

func (ni *NI) newConn(p *peer, tc *net.TCPConn, t wire.ConnType, active bool) *conn {
	c := &conn{
		ni:      ni,
		p:       p,
		nc:      tc,
		typ:     t,
		active:  active,
		local:   addrPort(tc.LocalAddr()),
		remote:  addrPort(tc.RemoteAddr()),
		since:   time.Now(),
		inProc:  !peersElsewhere.Load() && listeners.has(netip.AddrPortFrom(p.nid.Addr, uint16(ni.conf.Port))),
		wdone:   make(chan struct{}),
		kick:    make(chan struct{}, 1),
		rxDone:  make(chan error, 1),
		closing: make(chan struct{}),

		watchIdx: -1,
	}
	c.nbw.init(tc)
	c.rb.init(t)
	// Small messages must not wait for Nagle. Go turns Nagle off on every
	// TCP socket by default and bulk connections keep that default too: a
	// message leaves in one writev, so there is nothing to coalesce, and
	// what seed 004 asks of typed connections is that bulk never queues in
	// front of small messages, which separate sockets give.
	if t == wire.ConnControl || t == wire.ConnAny {
		tc.SetNoDelay(true)
	}
	return c
}

func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// shut closes c once, recording err as what its in-flight sends fail with.
// It reports whether this call closed it. It takes no lock and may be
// called from anywhere.
func (c *conn) shut(err error) bool {
	closed := false
	c.once.Do(func() {
		c.err = err
		close(c.closing)
		c.nc.Close()
		closed = true
	})
	return closed
}

// deferred collects what a critical section under peer.mu decided must
// happen once the lock is released: host callbacks (which may call Send)
// and socket closes never run under the lock. NI.run carries it out.
type deferred struct {
	fins  []fin
	shuts []shutReq
}

type fin struct {
	msg *lnet.Msg
	err error
}

type shutReq struct {
	c   *conn
	err error
	why string
}

func (d *deferred) shut(c *conn, err error, why string) {
	d.shuts = append(d.shuts, shutReq{c, err, why})
}

// run closes, finalizes and delivers events, in that order, for what a
// critical section on p deferred.
func (ni *NI) run(p *peer, d *deferred) {
	for _, s := range d.shuts {
		if s.c.shut(s.err) {
			ni.stats.connsDropped.Add(1)
			ni.log.Info("socklnd: connection closed", "peer", p.nid.String(), "type", s.c.typ.String(),
				"remote", s.c.remote.String(), "reason", s.why)
		}
	}
	for _, f := range d.fins {
		ni.finalize(f.msg, f.err)
	}
	ni.flushEvents(p)
}

// flushEvents delivers p's pending events, in order. Events are dropped
// once Shutdown has begun: LNet is tearing the NI down and knows.
func (ni *NI) flushEvents(p *peer) {
	p.evMu.Lock()
	defer p.evMu.Unlock()
	for {
		p.mu.Lock()
		evs := p.mu.events
		p.mu.events = nil
		p.mu.Unlock()
		if len(evs) == 0 {
			return
		}
		for _, ev := range evs {
			if !ni.closed.Load() {
				ni.host.PeerEvent(p.nid, ev)
			}
		}
	}
}

// nidLess orders the NIDs of one net, for connection-race resolution.
func nidLess(a, b wire.NID) bool { return a.Addr.Less(b.Addr) }

// installLocked makes c, whose peer's hello h has been read, the peer's
// connection of type c.typ, or reports why not. Both sides call it: the
// active side once the answer hello is in (then only shutdown refuses it:
// the passive side has already accepted the connection and may be sending
// on it), the passive side before it answers, so it is the passive side
// that decides every race:
//
//   - A connection whose hello shows a new incarnation first closes every
//     older connection of the peer and fails the messages committed to
//     them with lnet.ErrPeerRestarted (learnLocked).
//   - Simultaneous connects: if this side is dialing the same type and has
//     the higher NID, the peer's connection is refused; the dial of the
//     higher NID wins, as in Lustre. The lower side's dial is refused in
//     turn, and its dialer, seeing the type connected, stops.
//   - An incoming connection of a type already connected is refused if the
//     existing one was dialed by this side and this side has the higher
//     NID (it is the tail of a race the peer lost); otherwise the peer
//     evidently lost the old connection, and the new one replaces it.
//
// So both ends agree on which connection of a type survives, messages are
// only ever written on a connection both ends keep, and a duplicate lives
// only from the passive side's decision until the active side's refused
// dial ends: it never carries a message.
func (ni *NI) installLocked(p *peer, c *conn, h *wire.Hello, d *deferred) (ok bool, why string) {
	if ni.closed.Load() {
		return false, "NI shutting down"
	}
	ni.learnLocked(p, h, d)
	t := c.typ
	if !c.active && nidLess(p.nid, ni.nid) {
		if p.mu.connecting[t] {
			return false, "connection race: this side's connection wins (higher NID)"
		}
		if old := p.mu.conns[t]; old != nil && old.active {
			return false, "already connected: this side's connection stays (higher NID)"
		}
	}
	if old := p.mu.conns[t]; old != nil {
		c.prevW = old.wdone
		d.shut(old, lnet.ErrConnReset, "replaced by a newer connection")
	}
	p.mu.conns[t] = c
	p.mu.backingOff[t] = false // the peer is reachable after all
	p.mu.lastUsed = time.Now()
	ni.stats.connsMade.Add(1)
	if !p.mu.up {
		p.mu.up = true
		p.addEventLocked(lnet.PeerUp)
	}
	return true, ""
}

// learnLocked records what a hello says about its sender. A changed
// incarnation means the peer restarted: every connection to the old one is
// closed, the messages being written on them fail with
// lnet.ErrPeerRestarted, and so do those queued while a connection to the
// old incarnation was up, since they were meant for a process that is gone.
// Messages queued while no connection existed wait for the new one (see
// txItem.inc). The restart is reported as PeerRestarted, followed by PeerUp
// once a connection to the new incarnation is installed (PeerDown is not
// reported for the old one).
func (ni *NI) learnLocked(p *peer, h *wire.Hello, d *deferred) {
	p.mu.pid = h.SrcPID
	old, inc := p.mu.incarnation, h.SrcIncarnation
	switch {
	case old == inc:
		return
	case old == 0:
		p.mu.incarnation = inc
		return
	}
	ni.log.Warn("socklnd: peer restarted", "peer", p.nid.String(), "old_incarnation", old, "incarnation", inc)
	why := fmt.Sprintf("peer %v restarted", p.nid)
	for t, c := range p.mu.conns {
		if c != nil {
			p.mu.conns[t] = nil
			d.shut(c, lnet.ErrPeerRestarted, why)
		}
	}
	stale := fmt.Errorf("socklnd: %s: %w", why, lnet.ErrPeerRestarted)
	for t := range p.mu.txq {
		d.fail(&p.mu.txq[t], stale, func(it *txItem) bool { return it.inc != 0 && it.inc != inc })
	}
	p.mu.incarnation = inc
	p.mu.up = false
	p.addEventLocked(lnet.PeerRestarted)
}

// startConn starts c's reader and writer; c is installed and its hellos are
// exchanged.
func (ni *NI) startConn(c *conn) {
	ni.log.Debug("socklnd: connected", "peer", c.p.nid.String(), "type", c.typ.String(), "active", c.active,
		"local", c.local.String(), "remote", c.remote.String())
	c.startReader()
	if !ni.spawn(c.writeLoop) {
		c.shut(lnet.ErrShutdown)
		close(c.wdone)
	}
}

// dropConn closes c after a failure seen on it and, if it was still
// installed, updates its peer: PeerDown when it was the last connection,
// and a new dialer when messages of its type are still queued. It does
// nothing if c was already closed (whoever closed it did the accounting).
func (ni *NI) dropConn(c *conn, level slog.Level, why string, err error) {
	if !c.shut(lnet.ErrConnReset) {
		return
	}
	ni.stats.connsDropped.Add(1)
	ni.log.Log(context.Background(), level, "socklnd: connection dropped", "peer", c.p.nid.String(),
		"type", c.typ.String(), "remote", c.remote.String(), "reason", why, "err", err)
	p := c.p
	p.mu.Lock()
	p.mu.lastUsed = time.Now()
	if p.mu.conns[c.typ] == c {
		p.mu.conns[c.typ] = nil
		if p.mu.up && !p.connectedLocked() {
			p.mu.up = false
			p.addEventLocked(lnet.PeerDown)
		}
		if p.mu.txq[c.typ].n > 0 {
			ni.dialLocked(p, c.typ)
		}
	}
	p.mu.Unlock()
	ni.flushEvents(p)
}

// dialLocked starts the dialer of type t unless one runs.
func (ni *NI) dialLocked(p *peer, t wire.ConnType) {
	if p.mu.dialing[t] || ni.closed.Load() {
		return
	}
	p.mu.dialing[t] = true
	if !ni.spawn(func() { ni.dialLoop(p, t) }) {
		p.mu.dialing[t] = false // shutting down: Shutdown fails the queue
	}
}

// dialLoop makes a connection of type t to p for the messages queued on
// it, retrying with exponential backoff. It ends when a connection of the
// type is installed (by it, or by the peer dialing in), when the queue is
// empty (messages whose deadline passed before a connection was made are
// finalized with lnet.ErrPeerUnreachable), or at shutdown.
func (ni *NI) dialLoop(p *peer, t wire.ConnType) {
	backoff := ni.conf.BackoffMin
	var lastErr error
	for attempt := 1; ; attempt++ {
		var d deferred
		p.mu.Lock()
		q := &p.mu.txq[t]
		if lastErr != nil {
			now := time.Now()
			d.fail(q, fmt.Errorf("socklnd: no connection to %v before the message's deadline: %w (last attempt: %v)",
				p.nid, lnet.ErrPeerUnreachable, lastErr), func(it *txItem) bool { return !it.deadline.After(now) })
		}
		p.mu.backingOff[t] = false
		if ni.closed.Load() || p.mu.conns[t] != nil || q.n == 0 {
			p.mu.dialing[t] = false
			p.mu.Unlock()
			ni.failExpired(p, t, &d, lastErr)
			return
		}
		p.mu.connecting[t] = true
		pid, inc, deadline := p.mu.pid, p.mu.incarnation, q.earliest()
		p.mu.Unlock()
		ni.failExpired(p, t, &d, lastErr)

		err := ni.connect(p, t, pid, inc, deadline)
		if err == nil {
			return
		}
		ni.stats.connectFailures.Add(1)
		ni.log.Debug("socklnd: connect failed", "peer", p.nid.String(), "type", t.String(),
			"attempt", attempt, "err", err)
		lastErr = err

		// A message whose sender has somewhere else to go
		// (lnet.MDFailUnreachable: a CONNECT with a failover server)
		// fails now instead of waiting for the next attempt.
		// (Not if the peer's own dial made a connection meanwhile: this
		// attempt lost a race, and the queue goes out on that one.)
		var ff deferred
		p.mu.Lock()
		p.mu.connecting[t] = false
		q = &p.mu.txq[t]
		connected := p.mu.conns[t] != nil
		if !connected {
			ff.fail(q, fmt.Errorf("socklnd: no connection to %v: %w: %v", p.nid, lnet.ErrPeerUnreachable, err),
				func(it *txItem) bool { return it.msg.FailUnreachable })
		}
		deadline, empty := q.earliest(), q.n == 0
		p.mu.backingOff[t] = !empty && !connected
		p.mu.Unlock()
		ni.run(p, &ff)
		if empty || connected {
			continue // which ends the loop, unless a message came meanwhile
		}
		wait := backoff
		if until := time.Until(deadline); until < wait {
			wait = max(until, 0)
		}
		backoff = min(2*backoff, ni.conf.BackoffMax)
		if !sleep(ni.ctx, wait) {
			p.mu.Lock()
			p.mu.dialing[t], p.mu.backingOff[t] = false, false
			p.mu.Unlock()
			return // Shutdown fails what is queued
		}
	}
}

// Cancel is lnet.Canceler: a message still queued for nextHop (behind
// others, or for want of a connection) is finalized with
// lnet.ErrCanceled; one taken for writing goes out. It delivers no peer
// events (its caller may be an event handler running under them).
func (ni *NI) Cancel(lm *lnet.Msg, nextHop wire.NID) {
	ni.mu.Lock()
	p := ni.mu.peers[nextHop]
	ni.mu.Unlock()
	if p == nil {
		return
	}
	var d deferred
	p.mu.Lock()
	for t := range p.mu.txq {
		d.fail(&p.mu.txq[t], fmt.Errorf("socklnd: message to %v given up by its sender before it left: %w", p.nid, lnet.ErrCanceled),
			func(it *txItem) bool { return it.msg == lm })
	}
	p.mu.Unlock()
	for _, f := range d.fins {
		ni.finalize(f.msg, f.err)
	}
}

// failExpired finalizes the messages a dialer expired, logging once.
func (ni *NI) failExpired(p *peer, t wire.ConnType, d *deferred, lastErr error) {
	if len(d.fins) > 0 {
		ni.log.Warn("socklnd: peer unreachable, failing queued messages", "peer", p.nid.String(),
			"type", t.String(), "messages", len(d.fins), "err", lastErr)
	}
	ni.run(p, d)
}

// sleep waits for d or ctx's end, and reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// connect makes one attempt at a connection of type t to p: dial, send our
// hello, read and check the peer's, and install the connection. deadline,
// the earliest deadline of the messages waiting, bounds the attempt along
// with Config.HandshakeTimeout.
func (ni *NI) connect(p *peer, t wire.ConnType, pid uint32, inc uint64, deadline time.Time) error {
	end := time.Now().Add(ni.conf.HandshakeTimeout)
	if deadline.Before(end) {
		end = deadline
	}
	ctx, cancel := context.WithDeadline(ni.ctx, end)
	defer cancel()
	raddr := netip.AddrPortFrom(p.nid.Addr, uint16(ni.conf.Port)).String()
	nc, err := ni.dialer.DialContext(ctx, "tcp", raddr)
	if err != nil {
		return err
	}
	tc := nc.(*net.TCPConn)
	stop := context.AfterFunc(ni.ctx, func() { tc.Close() }) // Shutdown interrupts the hello
	tc.SetDeadline(end)
	h, err := ni.activeHello(tc, p.nid, t, pid, inc)
	if !stop() {
		err = errors.New("NI shutting down")
	}
	if err != nil {
		tc.Close()
		if isProtocolError(err) {
			ni.stats.handshakeFailures.Add(1)
			ni.log.Warn("socklnd: handshake failed", "peer", p.nid.String(), "remote", raddr, "err", err)
		}
		return err
	}
	tc.SetDeadline(time.Time{})

	c := ni.newConn(p, tc, t, true)
	var d deferred
	p.mu.Lock()
	p.mu.connecting[t] = false
	ok, why := ni.installLocked(p, c, &h, &d)
	if ok {
		p.mu.dialing[t] = false // the connection's writer takes over the queue
	}
	p.mu.Unlock()
	ni.run(p, &d)
	if !ok {
		tc.Close()
		return errors.New(why)
	}
	ni.startConn(c)
	return nil
}
