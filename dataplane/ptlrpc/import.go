package ptlrpc

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/slots"
	"github.com/nacrefs/nacre/lnet"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	ptlrpcv1 "github.com/nacrefs/nacre/proto/nacre/ptlrpc/v1"
)

// ImportState is the state of an import (Lustre's LUSTRE_IMP_*).
type ImportState int32

// The import states. An import starts DISCONN and connects by itself;
// a failed request (timeout, lost connection, -ENOTCONN) takes it back to
// DISCONN and it reconnects. After a reconnect that kept the export it is
// RECOVER until every request sent on the old connection has been resent,
// then FULL; after one that found the export gone it is EVICTED while it
// fails the old requests and tells its owner, then FULL on the new export.
// After a reconnect to a restarted server that took the client back it is
// REPLAY while it replays the requests the server lost, REPLAY_LOCKS
// while it replays its locks and opens (once every client has replayed
// its requests), REPLAY_WAIT while the server waits for its other clients
// to have replayed too, then RECOVER.
const (
	StateDisconn ImportState = iota + 1
	StateConnecting
	StateFull
	StateRecover
	StateEvicted
	StateClosed
	StateReplay
	StateReplayWait
	StateReplayLocks
)

var stateNames = [...]string{StateDisconn: "DISCONN", StateConnecting: "CONNECTING", StateFull: "FULL",
	StateRecover: "RECOVER", StateEvicted: "EVICTED", StateClosed: "CLOSED", StateReplay: "REPLAY",
	StateReplayWait: "REPLAY_WAIT", StateReplayLocks: "REPLAY_LOCKS"}

// String returns Lustre's name of the state.
func (s ImportState) String() string {
	if s > 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("ImportState(%d)", int32(s))
}

// Defaults of an ImportConfig.
const (
	// DefaultPingInterval is how often an idle import pings its target
	// (Lustre: obd_timeout/4).
	DefaultPingInterval = 25 * time.Second
	// DefaultInitialTimeout is the service time assumed before any reply
	// has been measured.
	DefaultInitialTimeout = 5 * time.Second
	// DefaultMinTimeout is the least time a request waits for its reply
	// (Lustre's at_min plus its fixed 5 s margin, scaled to Nacre's
	// microsecond services).
	DefaultMinTimeout = time.Second
	// DefaultMaxTimeout caps adaptive timeouts (Lustre's at_max).
	DefaultMaxTimeout = 600 * time.Second
	// DefaultMaxUncommitted bounds the modifying requests an import keeps
	// until the server commits them; past it new requests wait.
	DefaultMaxUncommitted = 8192
)

// ImportConfig configures an Import.
type ImportConfig struct {
	// Target is the target's name ("nacre-OST0000").
	Target string
	// Servers are the processes that serve the target, the primary first;
	// a failed connect moves on to the next (failover).
	Servers []lwire.ProcessID
	// Portal is the target service's request portal.
	Portal uint32
	// ConnectOp and DisconnectOp are the target's connection opcodes; 0
	// means OSTConnect and OSTDisconnect.
	ConnectOp, DisconnectOp wire.Opcode
	// Features are the OBD_CONNECT_* bits the client supports.
	Features uint64
	// PingInterval is how often an idle import pings; 0 means the node's
	// (NodeTimeouts, a quarter of obd_timeout), negative never.
	PingInterval time.Duration
	// InitialTimeout is the service time assumed before any reply has
	// been measured, MinTimeout the margin every request timeout adds to
	// the estimates, MaxTimeout their cap; 0 means DefaultInitialTimeout,
	// DefaultMinTimeout, and for MaxTimeout the node's at_max (or, with
	// adaptive timeouts off, obd_timeout) as it is when a request goes.
	InitialTimeout, MinTimeout, MaxTimeout time.Duration
	// MaxUncommitted bounds the uncommitted modifying requests kept for
	// replay; 0 means DefaultMaxUncommitted.
	MaxUncommitted int
	// MaxRPCsInFlight, if positive, bounds the requests Do has in flight
	// at once (an MDC's max_rpcs_in_flight); more wait for a slot. Pings
	// and lock cancels and converts are not counted: a cancel may
	// be what the requests in flight wait for (the server holds a
	// conflicting enqueue until the lock comes back). DoSet is not
	// limited. SetMaxRPCsInFlight changes it.
	MaxRPCsInFlight int
	// OnEvict, if not nil, is called on the import's goroutine when the
	// import learns it was evicted, after the requests of the old export
	// have failed and before any request goes out on the new one: the
	// layers above drop their locks and cached state there.
	OnEvict func(imp *Import)
	// OnRecover, if not nil, is called on the import's goroutine when it
	// reconnected to a restarted server that took the client back
	// (recovery): after the replay list was replayed, before the requests
	// in flight are resent and new ones go out, the layers above replay
	// what the server lost that the list does not hold — their locks, and
	// data written but not committed — with Replay. An error fails the
	// connection; the next one recovers again.
	OnRecover func(ctx context.Context, imp *Import) error
	// NoReplay, if not nil, names the opcodes whose kept requests the
	// import does not replay itself, because OnRecover replays them its
	// own way (an OSC's writes, whose data is in its pages).
	NoReplay func(op wire.Opcode) bool
	// OnState, if not nil, is called on every state change with the
	// import's lock held; it must not call the import.
	OnState func(from, to ImportState)
	// ConnectData, if not nil, gives what each CONNECT carries for the
	// target (ConnectRequest.client_data: an OSC's grant). It is called on
	// the import's goroutine, without the import's lock.
	ConnectData func() []byte
}

// connInfo is one connection of an import: the export handle the server
// gave, the connection count, and a channel closed when the connection
// fails so that the requests waiting on it resend.
type connInfo struct {
	handle uint64
	count  uint32
	server lwire.ProcessID
	down   chan struct{}
	isDown bool // guarded by Import.mu
	// cksum are the checksum algorithms the target agreed to on this
	// connection.
	cksum ChecksumType
	// instance is the server instance it is to.
	instance uint64
	// lifeCommitted is the last committed transno the import knew when it
	// first connected to instance: the changes of the server's earlier
	// lives it has; a later transno of an earlier life's reply is not of
	// a change this life has, committed or not (its own transnos go on
	// from its start).
	lifeCommitted uint64
}

// Import is the client side of one client–target connection (Lustre's
// obd_import): it connects, keeps the connection alive with pings,
// reconnects after failures, resends requests with their XID, estimates
// timeouts from the server's service times, and keeps modifying requests
// until the server reports them committed. Safe for concurrent use.
type Import struct {
	c       *Client
	cfg     ImportConfig
	log     *slog.Logger
	svcAT   *estimator      // service time, from replies
	netAT   *estimator      // network latency: round trip minus service time
	kick    chan struct{}   // wakes run (capacity 1)
	pingNow atomic.Bool     // PingNow asked run for a ping
	ctx     context.Context // ends at Close: stops run and its RPCs
	cancel  context.CancelFunc
	done    chan struct{} // closed when run returns
	lastUse atomic.Int64  // unix nanoseconds of the last reply
	// slots is MaxRPCsInFlight (nil: no limit).
	slots *slots.Slots

	mu struct {
		sync.Mutex
		state  ImportState
		closed bool
		conn   *connInfo // current or last connection; nil before the first
		// servers are the processes that serve the target (cfg.Servers,
		// then SetServers'); server indexes the one to connect to.
		servers  []lwire.ProcessID
		server   int
		features uint64
		instance uint64
		// targetData is what the target sent with the last CONNECT.
		targetData []byte
		// failedConnects counts the CONNECTs that failed since the last
		// that succeeded.
		failedConnects int
		// gen counts evictions; a request of an older generation fails
		// with ErrEvicted.
		gen uint64
		// changed is closed and replaced on every state change.
		changed chan struct{}
		// inflight holds the requests between begin and end, a heap by
		// XID: every request carries the lowest (lastXID).
		inflight xidHeap
		// recover counts requests of an older connection still to be
		// resent before RECOVER becomes FULL.
		recover int
		// replay holds the uncommitted modifying requests by transno.
		replay []replayReq
		// replayConn is the connection being recovered, while OnRecover runs.
		replayConn *connInfo
		// replayDue says the recovery of the current server instance
		// stopped before it was through (a connection lost while
		// replaying): a reconnect to it goes on with it.
		replayDue bool
		// replayDoneDue says the restarted server has not answered the
		// replay-done request yet: a reconnect sends it again (it has the
		// replays already) and waits for recovery's end once more.
		replayDoneDue bool
		lastCommitted uint64
		// lastReplied is the highest XID that finished, for last_xid when
		// nothing is in flight.
		lastReplied uint64
		// committed is closed and replaced when replay shrinks.
		committed chan struct{}
	}
}

// replySrc is whom an import's reply and bulk MDs take operations from:
// any process. The server may change while a request is in flight (a
// failover, SetServers), and a resend reuses the request's MDs; the XID
// in the match bits and in the reply's header picks the request.
var replySrc = lnet.AnyProcess

// icall is an import request between begin and end.
type icall struct {
	r         *rpc
	gen       uint64
	conn      *connInfo // connection of the last send; nil before it
	timeout   time.Duration
	needSend  bool
	tries     int
	recovered bool // counted in mu.recover and not yet resent
	hidx      int  // index in mu.inflight
}

// replayReq is a modifying request kept until it is committed (Lustre's
// imp_replay_list), enough to replay it to a restarted server.
type replayReq struct {
	transno uint64
	xid     uint64
	op      wire.Opcode
	body    []byte
	// keepBody and reply, if keepBody is not nil, are the request's
	// Req.KeepBody and its reply's body, for replayBody.
	keepBody func(req, reply []byte) []byte
	reply    []byte
	// inst is the server instance it was last replayed to (0: none): a
	// recovery of that instance that has to start again after a lost
	// connection does not replay it twice.
	inst uint64
	// sentXID is the XID of its replay to instance sentTo whose answer
	// was lost with the connection: it goes to that instance again under
	// it, marked resent, so that a server that made the change answers
	// from the reply it kept instead of making it twice.
	sentXID, sentTo uint64
}

// NewImport starts an import of c to cfg.Target; it connects in the
// background (Connect waits for it). Close stops it.
func (c *Client) NewImport(cfg ImportConfig) (*Import, error) {
	if !targetNameRE.MatchString(cfg.Target) {
		return nil, fmt.Errorf("ptlrpc: import: target name %q: want 1-64 of [A-Za-z0-9_.-]", cfg.Target)
	}
	if len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("ptlrpc: import %s: no servers", cfg.Target)
	}
	if cfg.ConnectOp == 0 {
		cfg.ConnectOp, cfg.DisconnectOp = wire.OSTConnect, wire.OSTDisconnect
	}
	if cfg.InitialTimeout <= 0 {
		cfg.InitialTimeout = DefaultInitialTimeout
	}
	if cfg.MinTimeout <= 0 {
		cfg.MinTimeout = DefaultMinTimeout
	}
	if cfg.MaxTimeout < 0 {
		cfg.MaxTimeout = 0
	}
	if cfg.MaxTimeout > 0 && cfg.MaxTimeout < cfg.MinTimeout {
		return nil, fmt.Errorf("ptlrpc: import %s: MaxTimeout %v below MinTimeout %v", cfg.Target, cfg.MaxTimeout, cfg.MinTimeout)
	}
	if cfg.MaxUncommitted <= 0 {
		cfg.MaxUncommitted = DefaultMaxUncommitted
	}
	imp := &Import{
		c: c, cfg: cfg, log: c.log.With("import", cfg.Target),
		svcAT: newEstimator(cfg.InitialTimeout, 0), netAT: newEstimator(0, 0),
		kick: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if cfg.MaxRPCsInFlight > 0 {
		imp.slots = slots.New(cfg.MaxRPCsInFlight)
	}
	imp.ctx, imp.cancel = context.WithCancel(context.Background())
	imp.mu.servers = slices.Clone(cfg.Servers)
	imp.mu.state = StateDisconn
	imp.mu.changed = make(chan struct{})
	imp.mu.committed = make(chan struct{})
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		imp.cancel()
		return nil, fmt.Errorf("ptlrpc: import %s: %w", cfg.Target, ErrClosed)
	}
	c.mu.imports[imp] = struct{}{}
	c.mu.Unlock()
	go imp.run()
	return imp, nil
}

// Target returns the target's name.
func (imp *Import) Target() string { return imp.cfg.Target }

// State returns the import's state.
func (imp *Import) State() ImportState {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	return imp.mu.state
}

// ConnInfo describes an import's connection, for administration.
type ConnInfo struct {
	State ImportState
	// Servers are the processes that may serve the target, Server the
	// one of the current (or last) connection.
	Servers   []lwire.ProcessID
	Server    lwire.ProcessID
	Handle    uint64
	ConnCount uint32
	// FailedConnects counts the CONNECTs that failed since the last that
	// succeeded (the target is out of reach while it grows).
	FailedConnects int
	Features       uint64
	Instance       uint64
	// TargetData is what the target sent with the last CONNECT.
	TargetData    []byte
	Uncommitted   int
	LastCommitted uint64
	// Timeout is the current adaptive request timeout; ServiceEstimate
	// and NetLatency its parts.
	Timeout, ServiceEstimate, NetLatency time.Duration
}

// Features returns the feature bits the target agreed to at the last
// connect (0 before one).
func (imp *Import) Features() uint64 {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	return imp.mu.features
}

// ChecksumTypes returns the bulk checksum algorithms the target agreed
// to at the last connect: CRC-32C alone before one, or if the target is
// older than the negotiation.
func (imp *Import) ChecksumTypes() ChecksumType {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	if imp.mu.conn == nil {
		return ChecksumCRC32C
	}
	return imp.mu.conn.cksum
}

// Info returns the import's connection state.
func (imp *Import) Info() ConnInfo {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	ci := ConnInfo{State: imp.mu.state, Features: imp.mu.features, Instance: imp.mu.instance, TargetData: imp.mu.targetData,
		Uncommitted: len(imp.mu.replay), LastCommitted: imp.mu.lastCommitted,
		Timeout: imp.timeout(), ServiceEstimate: imp.svcAT.current(), NetLatency: imp.netAT.current(),
		Servers: slices.Clone(imp.mu.servers), FailedConnects: imp.mu.failedConnects}
	if cn := imp.mu.conn; cn != nil {
		ci.Server, ci.Handle, ci.ConnCount = cn.server, cn.handle, cn.count
	}
	return ci
}

// OutOfReach reports whether the import has lost the connection it had,
// or has failed to make its first: not FULL, and not merely connecting
// for the first time (as a fresh import does).
func (imp *Import) OutOfReach() bool {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	return imp.mu.state != StateFull && (imp.mu.conn != nil || imp.mu.failedConnects > 0)
}

// SetServers makes servers the processes that serve the target, the
// primary first, as the configuration says now (a failover node added
// with tunefs, a server that moved to another NID): the next connect
// goes to them. A connection in place stays until it fails (Lustre's
// client keeps its active connection too); if its server is in the new
// list, a failure moves on from there, as it would have.
func (imp *Import) SetServers(servers []lwire.ProcessID) error {
	if len(servers) == 0 {
		return fmt.Errorf("ptlrpc: import %s: no servers", imp.cfg.Target)
	}
	imp.mu.Lock()
	defer imp.mu.Unlock()
	if slices.Equal(servers, imp.mu.servers) {
		return nil
	}
	cur := imp.mu.servers[imp.mu.server%len(imp.mu.servers)]
	if cn := imp.mu.conn; cn != nil && (imp.mu.state == StateFull || imp.mu.state == StateRecover) {
		cur = cn.server
	}
	imp.log.Info("ptlrpc: servers changed", "from", imp.mu.servers, "to", servers)
	imp.mu.servers = slices.Clone(servers)
	switch i := slices.Index(servers, cur); {
	case i >= 0:
		imp.mu.server = i
	case imp.mu.state == StateConnecting:
		// A connect to a server no longer listed is under way: should
		// it fail, the step to the next server lands on the first.
		imp.mu.server = len(servers) - 1
	default:
		imp.mu.server = 0
	}
	return nil
}

// setStateLocked moves the import to st.
func (imp *Import) setStateLocked(st ImportState) {
	from := imp.mu.state
	if from == st {
		return
	}
	imp.mu.state = st
	close(imp.mu.changed)
	imp.mu.changed = make(chan struct{})
	if imp.cfg.OnState != nil {
		imp.cfg.OnState(from, st)
	}
	imp.log.Debug("ptlrpc: import state", "from", from, "to", st)
}

// timeout is the adaptive request timeout (Lustre's
// ptlrpc_at_set_req_timeout): the service estimate (at least at_min) with
// a quarter more, twice the network latency, and MinTimeout of margin,
// within MaxTimeout or the node's at_max. With adaptive timeouts off
// (at_max 0) it is obd_timeout, as Lustre's.
func (imp *Import) timeout() time.Duration {
	nt := NodeTimeouts()
	if nt.ATMax == 0 {
		return min(nt.Obd, cmp.Or(imp.cfg.MaxTimeout, nt.Obd))
	}
	t := max(imp.svcAT.current(), nt.ATMin)*5/4 + 2*imp.netAT.current() + imp.cfg.MinTimeout
	return min(t, cmp.Or(imp.cfg.MaxTimeout, nt.ATMax))
}

// pingInterval is how often the import pings when idle; 0 never.
func (imp *Import) pingInterval() time.Duration {
	switch d := imp.cfg.PingInterval; {
	case d < 0:
		return 0
	case d > 0:
		return d
	}
	return NodeTimeouts().PingInterval()
}

// Connect waits until the import is connected (FULL), ctx ends, or the
// import closes.
func (imp *Import) Connect(ctx context.Context) error {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	for {
		switch {
		case imp.mu.closed:
			return fmt.Errorf("ptlrpc: import %s: %w", imp.cfg.Target, ErrClosed)
		case imp.mu.state == StateFull:
			return nil
		}
		ch := imp.mu.changed
		imp.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			imp.mu.Lock()
			return ctx.Err()
		}
		imp.mu.Lock()
	}
}

// run connects, reconnects and pings until Close.
func (imp *Import) run() {
	defer close(imp.done)
	var backoff time.Duration
	busy := false // connects refused for the target's recovery
	ping := time.NewTimer(time.Hour)
	defer ping.Stop()
	for {
		imp.mu.Lock()
		st := imp.mu.state
		imp.mu.Unlock()
		if st == StateClosed {
			return
		}
		if st == StateDisconn {
			if err := imp.connect(); err != nil {
				if errors.Is(err, ErrClosed) {
					return
				}
				backoff = min(max(2*backoff, 50*time.Millisecond), max(imp.pingInterval(), time.Second))
				switch {
				case !isBusy(err):
					busy = false
					imp.log.Info("ptlrpc: connect failed", "err", err, "retry_in", backoff)
				case !busy:
					// The target is recovering and takes us once it is done,
					// which may be any moment: once a second, quietly.
					busy = true
					imp.log.Info("ptlrpc: the target is recovering from a restart; waiting for it to take new clients", "target", imp.cfg.Target)
					fallthrough
				default:
					backoff = min(backoff, time.Second)
				}
				t := time.NewTimer(backoff)
			sleep:
				for {
					select {
					case <-imp.ctx.Done():
						t.Stop()
						return
					case <-t.C:
						break sleep
					case <-imp.kick:
						// PingNow: the target is back (the MGS says so),
						// which the backoff, up to a ping interval, would
						// have the import learn only later.
						if imp.pingNow.Swap(false) {
							t.Stop()
							backoff = 0
							break sleep
						}
					}
				}
				continue
			}
			backoff, busy = 0, false
		}
		changed := timeoutsChanged()
		wait := time.Hour
		if iv := imp.pingInterval(); iv > 0 {
			wait = iv - time.Since(time.Unix(0, imp.lastUse.Load()))
		}
		if wait <= 0 || imp.pingNow.Swap(false) {
			imp.pingOnce()
			continue
		}
		ping.Reset(wait)
		select {
		case <-imp.ctx.Done():
			return
		case <-imp.kick:
		case <-changed: // obd_timeout changed: the interval may be shorter
		case <-ping.C:
		}
	}
}

// PingNow has the import check its connection at once instead of at its
// next ping (Lustre's imperative recovery): the MGS told the client the
// target restarted, so it reconnects and replays now rather than up to a
// ping interval later, which the target's recovery would wait for,
// holding every other client.
func (imp *Import) PingNow() {
	imp.pingNow.Store(true)
	select {
	case imp.kick <- struct{}{}:
	default:
	}
}

// failConn marks cn failed, if it is still the import's connection, so that
// the import reconnects and the requests sent on it resend.
func (imp *Import) failConn(cn *connInfo, why error) {
	if cn == nil {
		return
	}
	imp.mu.Lock()
	if cn.isDown || imp.mu.conn != cn {
		imp.mu.Unlock()
		return
	}
	cn.isDown = true
	close(cn.down)
	if st := imp.mu.state; st == StateFull || st == StateRecover {
		imp.setStateLocked(StateDisconn)
	}
	imp.mu.Unlock()
	imp.log.Info("ptlrpc: connection lost", "server", cn.server, "conn", cn.count, "why", why)
	select {
	case imp.kick <- struct{}{}:
	default:
	}
}

// connect sends CONNECT to the current server and installs the
// connection it gets.
func (imp *Import) connect() error {
	imp.mu.Lock()
	if imp.mu.closed {
		imp.mu.Unlock()
		return ErrClosed
	}
	imp.setStateLocked(StateConnecting)
	server, others := imp.mu.servers[imp.mu.server%len(imp.mu.servers)], len(imp.mu.servers) > 1
	var prev *connInfo = imp.mu.conn
	cr := &ptlrpcv1.ConnectRequest{Target: imp.cfg.Target, ClientUuid: imp.c.uuid, Features: imp.cfg.Features,
		Version: wire.Version, ConnCount: 1, CksumTypes: uint32(ChecksumTypes)}
	if prev != nil {
		cr.Handle, cr.ConnCount = prev.handle, prev.count+1
	}
	timeout := imp.timeout()
	imp.mu.Unlock()
	if imp.cfg.ConnectData != nil {
		cr.ClientData = imp.cfg.ConnectData()
	}

	rep, err := imp.connectRPC(server, cr, timeout, others)
	if err != nil {
		imp.mu.Lock()
		imp.mu.failedConnects++
		if !isBusy(err) {
			imp.mu.server++ // fail over to the next server
		}
		if !imp.mu.closed {
			imp.setStateLocked(StateDisconn)
		}
		imp.mu.Unlock()
		return fmt.Errorf("ptlrpc: connect to %s at %v: %w", imp.cfg.Target, server, err)
	}

	imp.mu.Lock()
	imp.mu.failedConnects = 0
	if imp.mu.closed {
		imp.mu.Unlock()
		return ErrClosed
	}
	cn := &connInfo{handle: rep.Handle, count: cr.ConnCount, server: server, down: make(chan struct{}), cksum: negotiated(rep.CksumTypes),
		instance: rep.Instance, lifeCommitted: imp.mu.lastCommitted}
	if prev != nil && prev.instance == rep.Instance {
		cn.lifeCommitted = prev.lifeCommitted
	}
	imp.mu.conn = cn
	imp.mu.features = rep.Features
	imp.mu.targetData = rep.TargetData
	restarted := imp.mu.instance != 0 && rep.Instance != imp.mu.instance
	imp.mu.instance = rep.Instance
	evicted := prev != nil && (rep.Evicted || !rep.Reconnected)
	if prev != nil {
		imp.c.reconnects.Add(1)
	}
	if evicted {
		imp.mu.gen++
		lost := len(imp.mu.replay)
		imp.mu.replay = nil
		imp.mu.replayDue, imp.mu.replayDoneDue = false, false
		imp.mu.recover = 0
		for _, ic := range imp.mu.inflight {
			ic.recovered = false
		}
		imp.setStateLocked(StateEvicted)
		imp.mu.Unlock()
		imp.c.evictions.Add(1)
		imp.log.Warn("ptlrpc: evicted by the server", "server", server, "restarted", restarted, "uncommitted_lost", lost)
		if imp.cfg.OnEvict != nil {
			imp.cfg.OnEvict(imp)
		}
		imp.mu.Lock()
		if imp.mu.state == StateEvicted {
			imp.setStateLocked(StateFull)
		}
		imp.mu.Unlock()
		return nil
	}
	if prev != nil && (restarted || imp.mu.replayDue || imp.mu.replayDoneDue) {
		// The server restarted and took us back: replay what it lost
		// before anything else goes out (Lustre's REPLAY, REPLAY_LOCKS).
		// Or we lost the connection while replaying to it: the rest goes.
		// Or while it held our replay-done request: only that goes again.
		var err error
		if restarted || imp.mu.replayDue {
			imp.setStateLocked(StateReplay)
			imp.mu.Unlock()
			err = imp.replay(cn)
		} else {
			imp.mu.Unlock()
			err = imp.replayDone(cn)
		}
		imp.mu.Lock()
		if err != nil {
			if !imp.mu.closed {
				// Not FULL or RECOVER: failConn leaves the state alone.
				imp.setStateLocked(StateDisconn)
			}
			imp.mu.Unlock()
			imp.log.Warn("ptlrpc: recovery failed", "server", server, "err", err)
			imp.failConn(cn, err)
			return fmt.Errorf("ptlrpc: recovery of %s: %w", imp.cfg.Target, err)
		}
	}
	// Every request sent on an older connection is resent before new ones
	// go out (Lustre's RECOVER: resend).
	n := 0
	for _, ic := range imp.mu.inflight {
		if ic.conn != nil && ic.conn != cn && ic.gen == imp.mu.gen && !ic.recovered {
			ic.recovered = true
			n++
		}
	}
	imp.mu.recover = n
	if n > 0 {
		imp.setStateLocked(StateRecover)
	} else {
		imp.setStateLocked(StateFull)
	}
	imp.mu.Unlock()
	imp.lastUse.Store(time.Now().UnixNano())
	if prev != nil {
		imp.log.Info("ptlrpc: reconnected", "server", server, "conn", cn.count, "resend", n)
	}
	return nil
}

// replay replays the kept requests to a restarted server in transno
// order (MSG_REPLAY), then runs OnRecover. A server that knows its
// clients runs each in its turn among all clients' replays, under its
// transno (the wait may be long: early replies keep the client waiting);
// another numbers them anew. The list keeps them under the transnos the
// replies give until committed.
func (imp *Import) replay(cn *connInfo) error {
	imp.mu.Lock()
	list := imp.mu.replay
	imp.mu.replay = nil
	inst := imp.mu.instance
	imp.mu.replayDue = true
	imp.mu.Unlock()
	var kept []replayReq
	// putBack returns to the replay list what it held, with the transnos
	// of this instance of those replayed to it.
	putBack := func(rest []replayReq) {
		imp.mu.Lock()
		imp.mu.replay = slices.Concat(kept, rest, imp.mu.replay)
		sort.Slice(imp.mu.replay, func(i, j int) bool { return imp.mu.replay[i].transno < imp.mu.replay[j].transno })
		imp.mu.Unlock()
	}
	n, again := 0, 0
	for i, rq := range list {
		if imp.cfg.NoReplay != nil && imp.cfg.NoReplay(rq.op) {
			continue
		}
		if rq.inst == inst { // replayed before the connection was lost
			kept = append(kept, rq)
			again++
			continue
		}
		req := &Req{Opcode: rq.op, Body: rq.replayBody()}
		if rq.sentTo != inst {
			rq.sentXID = 0 // not sent to this instance yet
		}
		if _, err := imp.replayOne(imp.ctx, cn, req, wire.MsgReplay, rq.transno, false, &rq.sentXID); err != nil {
			if !refused(err) {
				// The rest is replayed after the reconnect (this one
				// again, as a resend: whether the server got it is not
				// known).
				list[i].sentXID, list[i].sentTo = rq.sentXID, inst
				putBack(list[i:])
				return fmt.Errorf("replay of %v transno %d: %w", rq.op, rq.transno, err)
			}
			// The server answered: the change cannot be made again (what
			// it needed went meanwhile). Lustre drops such a replay too.
			imp.log.Warn("ptlrpc: replay refused", "op", rq.op, "transno", rq.transno, "err", err)
		}
		n++
		if req.Transno != 0 {
			kept = append(kept, replayReq{transno: req.Transno, xid: rq.xid, op: rq.op, body: req.Body, inst: inst})
		}
	}
	putBack(nil)
	imp.log.Info("ptlrpc: replayed to the restarted server", "requests", n, "before_a_reconnect", again, "dropped", len(list)-n-again)
	// The server answers once every client has replayed its requests
	// (Lustre's MSG_REQ_REPLAY_DONE): the locks and opens replayed next
	// are numbered after all of them, and conflict with no replay.
	imp.mu.Lock()
	imp.setStateLocked(StateReplayLocks)
	imp.mu.Unlock()
	if _, err := imp.replayOne(imp.ctx, cn, &Req{Opcode: wire.OBDPing}, wire.MsgReqReplayDone, 0, false, nil); err != nil {
		return fmt.Errorf("requests replayed: %w", err)
	}
	ctx, cancel := context.WithTimeout(imp.ctx, 4*imp.timeout()+10*time.Second)
	defer cancel()
	if imp.cfg.OnRecover != nil {
		imp.mu.Lock()
		imp.mu.replayConn = cn
		imp.mu.Unlock()
		err := imp.cfg.OnRecover(ctx, imp)
		imp.mu.Lock()
		imp.mu.replayConn = nil
		imp.mu.Unlock()
		if err != nil {
			if refused(err) {
				// The server's answer, which every reconnect to this
				// instance would get again (replayDue runs OnRecover
				// again): not tried again, as before replayDue. No
				// replay-done either: what OnRecover did not replay
				// (locks, opens, rewrites) the client still counts on,
				// so the server evicts it at the window's end, which
				// drops all that cleanly (OnEvict).
				imp.mu.Lock()
				imp.mu.replayDue = false
				imp.mu.Unlock()
			}
			return err
		}
	}
	imp.mu.Lock()
	imp.mu.replayDue = false
	imp.mu.Unlock()
	cancel() // the replays' deadline is not the wait for the others'
	return imp.replayDone(cn)
}

// replayDone tells the restarted server, with a ping on cn, that this
// client has replayed its requests and locks (Lustre's
// MSG_REQ_REPLAY_DONE and MSG_LOCK_REPLAY_DONE): a server that knows its
// clients ends recovery once all are back, without waiting for the
// window's end. Such a server answers only when recovery is over (Lustre's
// REPLAY_WAIT): the other clients' replays come first, so the import sends
// nothing new until then, however long that takes; early replies say the
// server is still there. A server that does not answer it fails the
// recovery, as a replay that gets no answer does.
//
// Meanwhile (REPLAY_WAIT) the import sends what only gives back: lock
// cancels and conversions, which another client's replay may wait for
// (a replayed request taking a lock that this client's replayed lock
// conflicts with).
func (imp *Import) replayDone(cn *connInfo) error {
	imp.mu.Lock()
	imp.setStateLocked(StateReplayWait)
	imp.mu.replayDoneDue = true
	imp.mu.Unlock()
	if _, err := imp.replayOne(imp.ctx, cn, &Req{Opcode: wire.OBDPing}, replayDone, 0, false, nil); err != nil {
		return fmt.Errorf("replay done: %w", err)
	}
	imp.mu.Lock()
	imp.mu.replayDoneDue = false
	imp.mu.Unlock()
	return nil
}

// Replay sends req once on the connection being recovered, marked
// MSG_REPLAY, and returns the reply's body; only OnRecover may call it.
// req.Transno is set to the transno the server gave it.
func (imp *Import) Replay(ctx context.Context, req *Req) ([]byte, error) {
	imp.mu.Lock()
	cn := imp.mu.replayConn
	imp.mu.Unlock()
	if cn == nil {
		return nil, fmt.Errorf("ptlrpc: import %s: replay outside recovery: %w", imp.cfg.Target, ErrClosed)
	}
	return imp.replayOne(ctx, cn, req, wire.MsgReplay, 0, true, nil)
}

// replayOne sends req once on cn, the connection being recovered, with
// flags in its header (MSG_REPLAY, of transno if not 0; or the replay-done
// flags); keep puts it in the replay list under its new transno. If xid is
// not nil, a non-zero *xid is the XID of an earlier send of it, which it
// is sent again under (MSG_RESENT); otherwise *xid is set to its XID.
func (imp *Import) replayOne(ctx context.Context, cn *connInfo, req *Req, flags wire.MsgFlags, transno uint64, keep bool, xid *uint64) ([]byte, error) {
	resend := xid != nil && *xid != 0
	var r *rpc
	var err error
	if resend {
		r, err = imp.c.newRPCAs(req, replySrc, *xid)
	} else {
		r, err = imp.c.newRPC(req, replySrc)
	}
	if err != nil {
		return nil, err
	}
	defer r.finish()
	if xid != nil {
		*xid = r.xid
	}
	timeout := imp.timeout()
	h := r.header(cn.handle, cn.count, 0, resend, cn.cksum)
	h.Flags |= flags
	h.Transno = transno
	m, err := r.attempt(ctx, cn.server, imp.cfg.Portal, &h, timeout, cn.down)
	if err != nil {
		return nil, err
	}
	imp.measure(r, &m.hdr)
	if m.hdr.Status == 0 {
		req.Transno = m.hdr.Transno
		if keep && req.Transno != 0 {
			imp.keep(r, req.Transno, m.body, true)
		}
	}
	return m.result()
}

// refused reports whether err is the server's answer to a request, not
// a lost connection: -ENOTCONN, the export gone (evicted), is taken as
// the latter, for the reconnect to learn of the eviction.
func refused(err error) bool {
	var re *RemoteError
	return errors.As(err, &re) && re.Status != -errnoENOTCONN
}

// isBusy reports whether err is a target's -EBUSY: it refuses new clients
// while its previous life's clients recover.
func isBusy(err error) bool {
	var re *RemoteError
	return errors.As(err, &re) && re.Status == -errnoEBUSY
}

// connectRPC sends one CONNECT.
func (imp *Import) connectRPC(server lwire.ProcessID, cr *ptlrpcv1.ConnectRequest, timeout time.Duration, others bool) (*ptlrpcv1.ConnectReply, error) {
	body, err := Marshal(cr)
	if err != nil {
		return nil, err
	}
	r, err := imp.c.newRPC(&Req{Opcode: imp.cfg.ConnectOp, Body: body}, replySrc)
	if err != nil {
		return nil, err
	}
	defer r.finish()
	if others {
		// A server nobody answers for (refused, unreachable) is left for
		// the next at once, as Lustre's ksocklnd fails the CONNECT, not
		// after the whole connect timeout.
		r.sendOpts = lnet.MDFailUnreachable
	}
	ctx, cancel := context.WithTimeout(imp.ctx, timeout+time.Second)
	defer cancel()
	h := r.header(0, 0, 0, false, 0)
	m, err := r.attempt(ctx, server, imp.cfg.Portal, &h, timeout, nil)
	if err != nil {
		return nil, err
	}
	imp.measure(r, &m.hdr)
	if _, err := m.result(); err != nil {
		return nil, err
	}
	var rep ptlrpcv1.ConnectReply
	if err := Unmarshal(m.body, &rep); err != nil {
		return nil, fmt.Errorf("%w: connect reply: %w", ErrBadReply, err)
	}
	if rep.Handle == 0 {
		return nil, fmt.Errorf("%w: connect reply without a handle", ErrBadReply)
	}
	return &rep, nil
}

// pingOnce sends one OBD_PING on the current connection, without resend:
// a failure fails the connection.
func (imp *Import) pingOnce() {
	imp.mu.Lock()
	cn := imp.mu.conn
	ok := imp.mu.state == StateFull && cn != nil
	imp.mu.Unlock()
	imp.lastUse.Store(time.Now().UnixNano()) // one ping per interval, answered or not
	if !ok {
		return
	}
	r, err := imp.c.newRPC(&Req{Opcode: wire.OBDPing}, replySrc)
	if err != nil {
		imp.log.Warn("ptlrpc: ping", "err", err)
		return
	}
	defer r.finish()
	timeout := imp.timeout()
	ctx, cancel := context.WithTimeout(imp.ctx, timeout+time.Second)
	defer cancel()
	h := r.header(cn.handle, cn.count, imp.lastXID(), false, cn.cksum)
	m, err := r.attempt(ctx, cn.server, imp.cfg.Portal, &h, timeout, cn.down)
	if err == nil {
		imp.measure(r, &m.hdr)
		if m.hdr.Status == -errnoENOTCONN {
			err = &RemoteError{Status: m.hdr.Status}
		}
	}
	if err != nil && ctx.Err() == nil {
		imp.failConn(cn, fmt.Errorf("ping: %w", err))
	}
}

// measure feeds a reply's service time and round trip to the adaptive
// timeouts and its last_committed to the replay list.
func (imp *Import) measure(r *rpc, h *wire.Header) {
	now := time.Now()
	svc := time.Duration(h.ServiceTime) * time.Millisecond
	imp.svcAT.add(now, svc)
	imp.netAT.add(now, now.Sub(r.sentAt)-svc)
	imp.lastUse.Store(now.UnixNano())
	if h.LastCommitted != 0 {
		imp.committedUpTo(h.LastCommitted)
	}
}

// committedUpTo drops the replay requests the server has committed.
func (imp *Import) committedUpTo(n uint64) {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	if n <= imp.mu.lastCommitted {
		return
	}
	imp.mu.lastCommitted = n
	i := sort.Search(len(imp.mu.replay), func(i int) bool { return imp.mu.replay[i].transno > n })
	if i == 0 {
		return
	}
	clear(imp.mu.replay[:i])
	imp.mu.replay = imp.mu.replay[i:]
	close(imp.mu.committed)
	imp.mu.committed = make(chan struct{})
}

// keep records a modifying request the server has not committed yet,
// whose reply's body is reply (for Req.KeepBody). replayed says it was
// replayed to the instance being recovered, which made it: a recovery of
// that instance that starts over (a lost connection) does not replay it
// from the list as well as from OnRecover.
func (imp *Import) keep(r *rpc, transno uint64, reply []byte, replayed bool) {
	imp.mu.Lock()
	committed := transno <= imp.mu.lastCommitted
	imp.mu.Unlock()
	if committed {
		return
	}
	// The callers' buffers are not ours to keep.
	rq := replayReq{transno: transno, xid: r.xid, op: r.req.Opcode, body: append([]byte(nil), r.req.Body...)}
	if r.req.KeepBody != nil {
		rq.keepBody, rq.reply = r.req.KeepBody, append([]byte(nil), reply...)
	}
	imp.mu.Lock()
	defer imp.mu.Unlock()
	if transno <= imp.mu.lastCommitted { // committed meanwhile
		return
	}
	if replayed {
		rq.inst = imp.mu.instance
	}
	i := sort.Search(len(imp.mu.replay), func(i int) bool { return imp.mu.replay[i].transno > transno })
	imp.mu.replay = append(imp.mu.replay, replayReq{})
	copy(imp.mu.replay[i+1:], imp.mu.replay[i:])
	imp.mu.replay[i] = rq
}

// replayBody is the body rq is replayed with: what its KeepBody gives
// from the request and its reply, else the request's. It is made only
// now: made when the reply came, it would cost a decode and an encode on
// the path of every create.
func (rq *replayReq) replayBody() []byte {
	if rq.keepBody != nil {
		if b := rq.keepBody(rq.body, rq.reply); b != nil {
			return b
		}
	}
	return rq.body
}

// Uncommitted returns the transnos of the modifying requests the import
// keeps because the server has not reported them committed, in order.
func (imp *Import) Uncommitted() []uint64 {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	out := make([]uint64, len(imp.mu.replay))
	for i, r := range imp.mu.replay {
		out[i] = r.transno
	}
	return out
}

// lastXID returns the XID below which every request of the import has
// finished, for the server to forget their saved replies (Lustre's
// known replied XID).
func (imp *Import) lastXID() uint64 {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	if len(imp.mu.inflight) == 0 {
		return imp.mu.lastReplied
	}
	return imp.mu.inflight[0].r.xid - 1
}

// xidHeap is a container/heap of requests by XID.
type xidHeap []*icall

func (h xidHeap) Len() int           { return len(h) }
func (h xidHeap) Less(i, j int) bool { return h[i].r.xid < h[j].r.xid }
func (h xidHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}
func (h *xidHeap) Push(x any) {
	ic := x.(*icall)
	ic.hidx = len(*h)
	*h = append(*h, ic)
}
func (h *xidHeap) Pop() any {
	old := *h
	ic := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return ic
}

// waitRoom waits until the replay list has room, pinging to learn what the
// server committed.
func (imp *Import) waitRoom(ctx context.Context) error {
	for {
		imp.mu.Lock()
		full := len(imp.mu.replay) >= imp.cfg.MaxUncommitted
		ch := imp.mu.committed
		imp.mu.Unlock()
		if !full {
			return nil
		}
		if _, err := imp.Do(ctx, &Req{Opcode: wire.OBDPing}); err != nil {
			return err
		}
		t := time.NewTimer(imp.cfg.MinTimeout)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

// waitConn waits until ic may be sent: the import is FULL, or RECOVER and
// ic is one of the requests to resend.
func (imp *Import) waitConn(ctx context.Context, ic *icall) (*connInfo, error) {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	for {
		switch {
		case imp.mu.closed:
			return nil, fmt.Errorf("ptlrpc: import %s: %w", imp.cfg.Target, ErrClosed)
		case ic.gen != imp.mu.gen:
			return nil, fmt.Errorf("ptlrpc: import %s: %v xid %d: %w", imp.cfg.Target, ic.r.req.Opcode, ic.r.xid, ErrEvicted)
		case imp.mu.state == StateFull, imp.mu.state == StateRecover && ic.recovered,
			(imp.mu.state == StateReplayWait || imp.mu.state == StateReplayLocks) && givesBack(ic.r.req.Opcode):
			return imp.mu.conn, nil
		}
		ch := imp.mu.changed
		imp.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			imp.mu.Lock()
			return nil, ctx.Err()
		}
		imp.mu.Lock()
	}
}

// doneRecoveringLocked takes ic out of the RECOVER count.
func (imp *Import) doneRecoveringLocked(ic *icall) {
	if !ic.recovered {
		return
	}
	ic.recovered = false
	imp.mu.recover--
	if imp.mu.recover == 0 && imp.mu.state == StateRecover {
		imp.setStateLocked(StateFull)
	}
}

// begin posts req's buffers and sends it once the import is connected.
func (imp *Import) begin(ctx context.Context, req *Req) (*icall, error) {
	if req.Opcode != wire.OBDPing {
		if err := imp.waitRoom(ctx); err != nil {
			return nil, err
		}
	}
	r, err := imp.c.allocRPC(req)
	if err != nil {
		return nil, err
	}
	imp.mu.Lock()
	// The XID is taken under imp.mu as the request goes in flight: one
	// taken before would leave a moment when lastXID, below every XID in
	// flight, passed it, and a header made then tells the server to forget
	// the saved reply that a resend of this request needs (it would run
	// twice).
	r.xid = nextXID()
	ic := &r.ic
	*ic = icall{r: r, gen: imp.mu.gen, needSend: true}
	heap.Push(&imp.mu.inflight, ic)
	imp.mu.Unlock()
	if err := r.post(replySrc); err != nil {
		imp.mu.Lock()
		heap.Remove(&imp.mu.inflight, ic.hidx)
		ic.hidx = -1
		imp.mu.Unlock()
		return nil, err
	}
	if testHookXIDTaken != nil {
		testHookXIDTaken(r)
	}
	if err := imp.sendNext(ctx, ic); err != nil && ctx.Err() != nil {
		imp.end(ic)
		return nil, err
	}
	return ic, nil
}

// testHookXIDTaken, if set (by tests), runs in begin once the request
// has its XID, before it is first sent.
var testHookXIDTaken func(r *rpc)

// testHookHeaderMade, if set (by tests), runs in sendNext once the
// request's header (its last_xid) is made, before it is sent.
var testHookHeaderMade func(r *rpc, h *wire.Header)

// sendNext sends ic on the current connection, waiting for one. An error
// that is not the caller's (ctx) or final (eviction, close) leaves
// needSend set for collect to try again.
func (imp *Import) sendNext(ctx context.Context, ic *icall) error {
	cn, err := imp.waitConn(ctx, ic)
	if err != nil {
		return err
	}
	timeout := imp.timeout()
	imp.mu.Lock()
	imp.doneRecoveringLocked(ic)
	ic.conn = cn
	imp.mu.Unlock()
	resend := ic.r.nsent > 0
	h := ic.r.header(cn.handle, cn.count, imp.lastXID(), resend, cn.cksum)
	if testHookHeaderMade != nil {
		testHookHeaderMade(ic.r, &h)
	}
	ic.timeout = timeout
	if err := ic.r.send(ctx, cn.server, imp.cfg.Portal, &h, timeout); err != nil {
		if ctx.Err() == nil {
			imp.failConn(cn, err)
		}
		return err
	}
	ic.needSend = false
	return nil
}

// collect waits for ic's reply, resending it after timeouts, lost
// connections and bulk read checksum mismatches.
func (imp *Import) collect(ctx context.Context, ic *icall) ([]byte, error) {
	for {
		if ic.needSend {
			if err := imp.sendNext(ctx, ic); err != nil {
				if ctx.Err() != nil || errors.Is(err, ErrEvicted) || errors.Is(err, ErrClosed) {
					return nil, err
				}
				continue
			}
		}
		r := ic.r
		m, err := r.wait(ctx, ic.timeout, ic.conn.down)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, ErrBadReply), errors.Is(err, ErrClosed):
			return nil, err
		case errors.Is(err, ErrEvicted): // the connection went down
			ic.needSend = true
			continue
		default: // timeout or send failure
			if errors.Is(err, ErrTimeout) {
				imp.log.Info("ptlrpc: request timed out", "op", r.req.Opcode, "xid", r.xid, "timeout", ic.timeout, "server", ic.conn.server)
			}
			imp.failConn(ic.conn, err)
			ic.needSend = true
			continue
		}
		if m.hdr.Status == -errnoENOTCONN && m.hdr.ConnCount != 0 && m.hdr.ConnCount < ic.conn.count {
			// A send on an older connection, queued while the server was
			// away, reached its new life, which refused it: the answer to
			// this send (on the connection that replaced it) is to come.
			// Any other late reply to an older send is a real answer.
			continue
		}
		imp.measure(r, &m.hdr)
		if m.hdr.Status == -errnoENOTCONN {
			// The server has no export for us: reconnect, which tells
			// whether we were evicted.
			imp.failConn(ic.conn, &RemoteError{Status: m.hdr.Status})
			ic.needSend = true
			continue
		}
		if err := r.checkBulkReply(&m.hdr); err != nil {
			ic.tries++
			if errors.Is(err, errCksumRetry) && ic.tries < bulkVerifyTries {
				ic.needSend = true
				continue
			}
			return nil, err
		}
		if testHookReplyCollected != nil {
			testHookReplyCollected(r, &m.hdr)
		}
		if m.hdr.Transno != 0 && m.hdr.Status == 0 && imp.lostWithItsLife(ic, m.hdr.Transno) {
			// The server's life that made the change has ended since, and
			// the next one recovered without it (it was not in the replay
			// list yet): its change may be lost. Sent again, the new life
			// makes it, or answers from the reply it kept.
			imp.log.Info("ptlrpc: reply of a server life that ended before it was kept: resending", "op", r.req.Opcode, "xid", r.xid, "transno", m.hdr.Transno)
			ic.needSend = true
			continue
		}
		if m.hdr.Transno != 0 && m.hdr.Status == 0 {
			imp.keep(r, m.hdr.Transno, m.body, false)
			r.req.Transno = m.hdr.Transno
		}
		return m.result()
	}
}

// lostWithItsLife reports whether the change of transno, answered on ic's
// connection, may have been lost: the import has connected since to
// another instance of the server, which had not committed it when the
// import first connected to it. (Not the last committed transno now: the
// new life's own changes, under the same transnos, may have passed it.)
func (imp *Import) lostWithItsLife(ic *icall, transno uint64) bool {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	cur := imp.mu.conn
	return ic.conn != nil && cur != nil && cur != ic.conn && cur.instance != ic.conn.instance && transno > cur.lifeCommitted
}

// testHookReplyCollected, if set (by tests), runs in collect once a reply
// to r has come, before it is kept.
var testHookReplyCollected func(r *rpc, h *wire.Header)

// end releases ic.
func (imp *Import) end(ic *icall) {
	imp.mu.Lock()
	if ic.hidx >= 0 {
		heap.Remove(&imp.mu.inflight, ic.hidx)
		ic.hidx = -1
	}
	imp.doneRecoveringLocked(ic)
	imp.mu.lastReplied = max(imp.mu.lastReplied, ic.r.xid)
	imp.mu.Unlock()
	ic.r.finish()
}

// Do sends req to the target and waits for the reply or for ctx to end.
// It waits for the import to be connected first; after a timeout or a
// lost connection it reconnects and resends req with the same XID (marked
// RESENT), so a modifying request runs once on the server however often
// it is sent. A reply with a non-zero status returns a *RemoteError with
// the reply's body. ErrEvicted means the server evicted the client while
// req was outstanding: whether it ran is unknown. A successful reply with
// a transno keeps req until the server reports it committed.
func (imp *Import) Do(ctx context.Context, req *Req) ([]byte, error) {
	if s := imp.slots; s != nil && limited(req.Opcode) {
		if err := s.Acquire(ctx); err != nil {
			return nil, err
		}
		defer s.Release()
	}
	ic, err := imp.begin(ctx, req)
	if err != nil {
		return nil, err
	}
	defer imp.end(ic)
	return imp.collect(ctx, ic)
}

// givesBack reports whether requests of op only give back what the client
// holds (a lock cancel or conversion), so that an import waiting for a
// server's recovery to end may send them.
func givesBack(op wire.Opcode) bool { return op == wire.LDLMCancel || op == wire.LDLMConvert }

// limited reports whether requests of op count against MaxRPCsInFlight
// (connects and disconnects do not go through Do).
func limited(op wire.Opcode) bool {
	return op != wire.OBDPing && op != wire.LDLMCancel && op != wire.LDLMConvert
}

// MaxRPCsInFlight returns the import's limit of requests in flight (0:
// none) and the most it has had in flight at once.
func (imp *Import) MaxRPCsInFlight() (limit, peak int) {
	if imp.slots == nil {
		return 0, 0
	}
	_, limit = imp.slots.State()
	return limit, imp.slots.Peak()
}

// SetMaxRPCsInFlight changes the limit of an import made with one (n at
// least 1); requests over a lowered limit finish, and no new one goes
// until fewer are in flight.
func (imp *Import) SetMaxRPCsInFlight(n int) error {
	if imp.slots == nil {
		return fmt.Errorf("ptlrpc: import %s: made without a limit of RPCs in flight", imp.cfg.Target)
	}
	if n < 1 || n > 512 {
		return fmt.Errorf("ptlrpc: import %s: max_rpcs_in_flight %d: want 1 to 512", imp.cfg.Target, n)
	}
	imp.slots.SetLimit(n)
	return nil
}

// Ping sends an OBD_PING and waits for its reply.
func (imp *Import) Ping(ctx context.Context) error {
	_, err := imp.Do(ctx, &Req{Opcode: wire.OBDPing})
	return err
}

// SetCall is one request of a request set across imports.
type SetCall struct {
	Import *Import
	Req    *Req
}

// DoSet sends every request without waiting for replies, then collects
// them, resending as Do does, all under ctx's one deadline (Lustre's
// ptlrpc_set_wait). Results are in the order of calls.
func DoSet(ctx context.Context, calls []SetCall) []Result {
	res := make([]Result, len(calls))
	// A goroutine per call, each sending and collecting its own: a call
	// sent on a connection that failed is resent only by whoever collects
	// it, and the reconnect (RECOVER) holds the calls not sent yet until
	// it is. One goroutine sending the rest before collecting any would
	// wait for itself until ctx ends.
	var wg sync.WaitGroup
	for i, sc := range calls {
		wg.Go(func() {
			ic, err := sc.Import.begin(ctx, sc.Req)
			if err != nil {
				res[i].Err = err
				return
			}
			defer sc.Import.end(ic)
			res[i].Reply, res[i].Err = sc.Import.collect(ctx, ic)
		})
	}
	wg.Wait()
	return res
}

// Close disconnects (DISCONNECT, best effort within ctx), fails the
// requests still waiting with ErrClosed, and stops the import.
func (imp *Import) Close(ctx context.Context) error {
	imp.mu.Lock()
	if imp.mu.closed {
		imp.mu.Unlock()
		return fmt.Errorf("ptlrpc: import %s: %w", imp.cfg.Target, ErrClosed)
	}
	cn, st := imp.mu.conn, imp.mu.state
	imp.mu.Unlock()
	if cn != nil && (st == StateFull || st == StateRecover) {
		if err := imp.disconnect(ctx, cn); err != nil {
			imp.log.Info("ptlrpc: disconnect", "err", err)
		}
	}
	imp.mu.Lock()
	imp.mu.closed = true
	if cn != nil && !cn.isDown {
		cn.isDown = true
		close(cn.down)
	}
	imp.setStateLocked(StateClosed)
	imp.mu.Unlock()
	imp.cancel()
	imp.c.mu.Lock()
	delete(imp.c.mu.imports, imp)
	imp.c.mu.Unlock()
	select {
	case <-imp.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// abort closes the import at once, without DISCONNECT (Client.Close):
// the requests waiting for a connection fail with ErrClosed, those sent
// resend no more.
func (imp *Import) abort() {
	imp.mu.Lock()
	if !imp.mu.closed {
		imp.mu.closed = true
		if cn := imp.mu.conn; cn != nil && !cn.isDown {
			cn.isDown = true
			close(cn.down)
		}
		imp.setStateLocked(StateClosed)
	}
	imp.mu.Unlock()
	imp.cancel()
}

// disconnect sends one DISCONNECT on cn.
func (imp *Import) disconnect(ctx context.Context, cn *connInfo) error {
	r, err := imp.c.newRPC(&Req{Opcode: imp.cfg.DisconnectOp}, replySrc)
	if err != nil {
		return err
	}
	defer r.finish()
	timeout := imp.timeout()
	h := r.header(cn.handle, cn.count, imp.lastXID(), false, cn.cksum)
	m, err := r.attempt(ctx, cn.server, imp.cfg.Portal, &h, timeout, nil)
	if err != nil {
		return err
	}
	_, err = m.result()
	if errors.Is(err, syscall.ENOTCONN) {
		return nil // already gone
	}
	return err
}
