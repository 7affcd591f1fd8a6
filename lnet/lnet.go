package lnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nacrefs/nacre/lnet/wire"
)

// LNet is one node's LNet instance: its NIs, its portal table and MDs, its
// peers and their credits, and the operations in flight. All methods are
// safe for concurrent use. See the package documentation for the locking
// order.
type LNet struct {
	log         *slog.Logger
	pid         uint32
	incarnation uint64       // also the Interface cookie of every WireHandle we hand out
	timeout     atomic.Int64 // TransactionTimeout in ns
	glob        globals      // the other Globals
	cfg         Config

	lo *ni // 0@lo, there from New to Close
	// nit is the NI table. AddNet and DelNet replace it whole (copy on
	// write), so readers load it and need no lock; niMu orders the
	// writers (and Close's shutdown of the NIs after them).
	nit  atomic.Pointer[niTable]
	niMu sync.Mutex
	// niDown counts the NIs DelNet (or a failed AddNet) took out of the
	// table and has not shut down yet: Close waits for them.
	niDown sync.WaitGroup
	// pushMu orders the changes of the ping answer and the pushes that
	// follow; pushSeq numbers them (in the pushes' header data), so that
	// a peer takes the newest whatever order they arrive in.
	pushMu  sync.Mutex
	pushSeq uint64
	// changed is closed, and replaced, at each change of the node's NIs
	// (NIChanges); guarded by pushMu.
	changed chan struct{}

	rtr rtrPool  // router buffers (router.go)
	rec recovery // the housekeeping goroutine (recovery.go)

	pingMu sync.Mutex
	pingMD MDHandle // the MD answering pings; guarded by pingMu

	// res guards the resources: what incoming messages are matched against
	// and what outgoing ones wait on (lnet_res_lock).
	res struct {
		sync.Mutex
		closed     bool
		portals    map[uint32]*portal
		mds        map[uint64]*md  // by cookie
		pending    map[uint64]*msg // PUTs awaiting ACK and GETs awaiting REPLY, by wire cookie
		nextCookie uint64          // last cookie handed out (MDs and pending share the space)
		internal   int             // MDs LNet made for itself (ping buffer, ping sinks)
		evCond     sync.Cond       // signalled when an MD's event backlog shrinks
		evWaiters  int             // goroutines waiting on evCond
	}

	// net guards the network state: credits, credit queues, peers
	// (lnet_net_lock). Fields of ni, peer, peerNI and msg documented as
	// "protected by LNet.net" are too.
	net struct {
		sync.Mutex
		closed bool
		peers  map[wire.NID]*peerNI // every peer NI, by NID; at most Config.MaxPeers
		idle   sync.Cond            // signalled when an NI stops sending, once closed
		selSeq uint64               // selection clock, for round robin
		// recovery holds the peer NIs below full health, to be pinged.
		recovery map[*peerNI]struct{}
		// discovering counts the automatic discovery pings in flight.
		discovering int
		// routes are the routes by remote net; nroutes counts them.
		routes  map[wire.Net][]*route
		nroutes int
		// gateways are the gateways of the routes, by NID.
		gateways map[wire.NID]*gateway
		// sweep numbers the passes over the peers (aging, listing), so each
		// peer is looked at once per pass.
		sweep uint64
		// peersRefused counts peer NIs refused for a full table;
		// fullLogged is when that was last logged.
		peersRefused uint64
		fullLogged   time.Time
		// nidsClaimed counts peer NIDs that a ping of another discovered
		// peer took over; claimLogged is when that was last logged.
		nidsClaimed uint64
		claimLogged time.Time
	}

	timer     timer
	collector *collector
	closeOnce sync.Once
	closeErr  error
}

// ni is one local network interface.
type ni struct {
	ln         *LNet
	nid        wire.NID
	iface      string
	opts       map[string]string // the driver's options
	host       *niHost
	maxWaiting int

	counters niCounters

	// Protected by LNet.net.
	lnd        LND      // nil until the driver's Startup returns
	gone       bool     // deleted (DelNet): no longer selected
	tun        Tunables // after defaults
	credits    int      // send credits left; negative: that many wait on txq
	minCredits int      // low-water mark of credits
	txq        msgQueue // messages holding a peer credit, waiting for an NI credit
	waiting    int      // messages of this NI waiting for any credit
	spaceCh    chan struct{}
	ready      []*msg // holding both credits, to hand to lnd.Send in this order
	sending    bool   // a goroutine is handing ready messages to the LND
	batch      []*Msg // drain's SendBatch argument, used by the goroutine that set sending
	handed     []*msg // the messages of batch, likewise
	health     int
	seq        uint64 // selection round-robin: bumped each time the NI is picked
	// linkDown is set while the OS interface of the NI is down.
	linkDown bool
	// recovering is set while a recovery ping goes through the NI;
	// nextRecovery is when the next may.
	recovering   bool
	nextRecovery time.Time
}

// niCounters are an NI's statistics, updated without locks.
type niCounters struct {
	sendCount, sendBytes, sendErrors atomic.Uint64
	recvCount, recvBytes             atomic.Uint64
	dropCount, dropBytes             atomic.Uint64
}

// lastIncarnation makes incarnations unique within the process even when
// several LNets start within one clock tick.
var lastIncarnation atomic.Uint64

func newIncarnation() uint64 {
	for {
		now := uint64(time.Now().UnixNano())
		last := lastIncarnation.Load()
		if now <= last {
			now = last + 1
		}
		if lastIncarnation.CompareAndSwap(last, now) {
			return now
		}
	}
}

// New starts an LNet: 0@lo and every NI of cfg.Networks, each through the
// driver registered for its net type (import the drivers for their side
// effects, as with database/sql: lnd/lolnd always, lnd/socklnd for tcp).
// Interface names are resolved to addresses now. If any NI fails to start,
// the ones already started are shut down and the error returned. ctx bounds
// the startup only.
func New(ctx context.Context, cfg Config) (*LNet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	specs, err := resolveNIs(cfg.Networks, osResolver)
	if err != nil {
		return nil, err
	}
	ln := &LNet{
		log:         cfg.Logger.With("component", "lnet"),
		pid:         cfg.PID,
		incarnation: newIncarnation(),
		cfg:         cfg,
	}
	ln.pushSeq = uint64(time.Now().UnixNano()) // (above any of an earlier life)
	ln.rtr.max = cfg.RouterBuffers
	ln.timeout.Store(int64(cfg.TransactionTimeout))
	ln.glob.init(cfg)
	ln.res.portals = map[uint32]*portal{}
	ln.res.mds = map[uint64]*md{}
	ln.res.pending = map[uint64]*msg{}
	ln.res.evCond.L = &ln.res.Mutex
	ln.net.peers = map[wire.NID]*peerNI{}
	ln.net.idle.L = &ln.net.Mutex
	ln.net.recovery = map[*peerNI]struct{}{}
	ln.net.routes = map[wire.Net][]*route{}
	ln.net.gateways = map[wire.NID]*gateway{}

	drivers, nis, err := ln.newNIs(specs)
	if err != nil {
		return nil, err
	}
	ln.lo = nis[0]
	ln.nit.Store(newNITable(nis, cfg.Networks))
	ln.timer.start(ln)

	for i, n := range nis {
		if err := ln.startNI(ctx, drivers[i], n, specs[i]); err != nil {
			ln.Close(context.WithoutCancel(ctx))
			return nil, err
		}
		ln.drain(n) // anything an early incoming message made us send
	}
	fail := func(err error) (*LNet, error) {
		ln.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	for _, r := range cfg.Routes {
		if err := ln.AddRoute(r); err != nil {
			return fail(fmt.Errorf("lnet: config: %w", err))
		}
	}
	if len(nis) > 1 {
		ln.checkLinks(osLinks())
	}
	if err := ln.refreshPingMD(); err != nil {
		return fail(err)
	}
	if err := ln.pushTargets(); err != nil {
		return fail(err)
	}
	ln.startRecovery()
	if cfg.Routing {
		ln.log.Info("routing enabled", "router_buffers", cfg.RouterBuffers)
	}
	if cfg.Registerer != nil {
		c := newCollector(ln)
		if err := cfg.Registerer.Register(c); err != nil {
			ln.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("lnet: register metrics: %w", err)
		}
		ln.collector = c
	}
	return ln, nil
}

// withDefaults fills zero tunables.
func (t Tunables) withDefaults() Tunables {
	if t.Credits <= 0 {
		t.Credits = DefaultCredits
	}
	if t.PeerCredits <= 0 {
		t.PeerCredits = DefaultPeerCredits
	}
	if t.PeerCredits > t.Credits {
		t.PeerCredits = t.Credits
	}
	return t
}

// setTunablesLocked applies tunables, keeping the credits in use.
func (n *ni) setTunablesLocked(t Tunables, maxWaiting int) {
	n.credits += t.Credits - n.tun.Credits
	n.minCredits = min(n.minCredits+t.Credits-n.tun.Credits, n.credits)
	n.tun = t
	n.maxWaiting = maxWaiting
	if n.maxWaiting <= 0 {
		n.maxWaiting = 4 * t.Credits
	}
}

// NIDs returns the node's NIDs, 0@lo first, in configuration order (NIs
// added at run time last).
func (ln *LNet) NIDs() []wire.NID {
	nis := ln.nis()
	out := make([]wire.NID, len(nis))
	for i, n := range nis {
		out[i] = n.nid
	}
	return out
}

// NIChanges returns a channel closed at the next change of the node's
// NIs (a net added or deleted, an interface's link gone or back): a
// server that registers its NIDs with the MGS reads NIDs again then.
func (ln *LNet) NIChanges() <-chan struct{} {
	ln.pushMu.Lock()
	defer ln.pushMu.Unlock()
	if ln.changed == nil {
		ln.changed = make(chan struct{})
	}
	return ln.changed
}

// PID returns the node's LNet process id.
func (ln *LNet) PID() uint32 { return ln.pid }

// Incarnation returns the value that identifies this start of the node to
// its peers.
func (ln *LNet) Incarnation() uint64 { return ln.incarnation }

// Config returns the configuration LNet runs with, defaults applied and
// the current Globals.
func (ln *LNet) Config() Config {
	c := ln.cfg
	g := ln.Globals()
	c.TransactionTimeout, c.RetryCount, c.RecoveryInterval, c.DisableDiscovery = g.TransactionTimeout, g.RetryCount, g.RecoveryInterval, !g.Discovery
	if c.HealthSensitivity = g.HealthSensitivity; c.HealthSensitivity == 0 {
		c.HealthSensitivity = -1 // (0 is the default in a Config)
	}
	c.Networks = slices.Clone(ln.nit.Load().nets)
	c.Routes = slices.Clone(c.Routes)
	return c
}

// TransactionTimeout returns the current transaction timeout.
func (ln *LNet) TransactionTimeout() time.Duration { return time.Duration(ln.timeout.Load()) }

// SetTransactionTimeout changes the transaction timeout of operations
// started from now on (lnetctl set transaction_timeout). d <= 0 restores
// DefaultTransactionTimeout.
func (ln *LNet) SetTransactionTimeout(d time.Duration) {
	if d <= 0 {
		d = DefaultTransactionTimeout
	}
	ln.timeout.Store(int64(d))
}

// isLocal reports whether nid is one of this node's NIDs.
func (ln *LNet) isLocal(nid wire.NID) bool {
	_, ok := ln.nit.Load().byNID[nid]
	return ok
}

// Close shuts LNet down: new operations fail with ErrShutdown, messages
// waiting for credits are failed with ErrShutdown, every NI is shut down
// (its driver fails what it still holds with ErrShutdown), and every PUT or
// GET still awaiting its ACK or REPLY gets that event with ErrShutdown. MDs
// stay as they are and raise no more events. Close returns once the drivers
// have stopped, or with ctx's error if they do not stop in time; later
// calls return the first call's result.
func (ln *LNet) Close(ctx context.Context) error {
	ln.closeOnce.Do(func() { ln.closeErr = ln.close(ctx) })
	return ln.closeErr
}

func (ln *LNet) close(ctx context.Context) error {
	ln.res.Lock()
	ln.res.closed = true
	ln.res.Unlock()
	ln.stopRecovery()

	// Messages waiting for a router buffer are drained and dropped; their
	// connections' readers are waiting for that.
	for _, f := range ln.rtr.close() {
		go func() {
			defer ln.rtr.resumed.Done()
			f.rx.Recv(nil, 0)
			ln.forwardDrop(f, "shutting down", nil)
		}()
	}

	// No NI comes or goes from here on: AddNet and DelNet see res.closed
	// under niMu, and one that came first is done with. niMu is not held
	// after: handlers that run below may call them (ErrShutdown).
	ln.niMu.Lock()
	nis := ln.nis()
	ln.niMu.Unlock()

	// Stop handing messages to the LNDs and take back every message still
	// waiting for credits (closed, no credit is handed on).
	ln.net.Lock()
	ln.net.closed = true
	failed := ln.takeBackLocked(nis, func(*ni) bool { return true }, nil)
	ln.net.Unlock()
	for _, f := range failed {
		ln.completeSend(f.m, ErrShutdown)
	}

	// Shut the NIs down, lo last, and wait for those deleted before.
	ln.niDown.Wait()
	var errs []error
	for i := len(nis) - 1; i >= 0; i-- {
		if err := ln.shutdownNI(ctx, nis[i]); err != nil {
			errs = append(errs, err)
		}
	}

	// Nothing will answer what is still awaited.
	var d dispatchList
	ln.res.Lock()
	for _, m := range ln.res.pending {
		ln.respFailLocked(m, ErrShutdown, &d)
	}
	ln.res.Unlock()
	ln.dispatch(&d, false)

	ln.rtr.resumed.Wait()
	ln.timer.stop()
	if ln.collector != nil {
		ln.cfg.Registerer.Unregister(ln.collector)
	}
	ln.log.Info("LNet shut down")
	return errors.Join(errs...)
}

// niHost is the Host LNet gives the driver of one NI.
type niHost struct {
	ln *LNet
	ni *ni
}

var _ Host = (*niHost)(nil)

// Parse implements Host.
func (h *niHost) Parse(hdr *wire.Header, from wire.NID, rx Rx) error {
	return h.ln.parse(h.ni, hdr, from, rx)
}

// Finalize implements Host.
func (h *niHost) Finalize(msg *Msg, err error) { h.ln.finalize(h.ni, msg, err) }

// PeerEvent implements Host.
func (h *niHost) PeerEvent(peer wire.NID, ev PeerEvent) { h.ln.peerEvent(h.ni, peer, ev) }
