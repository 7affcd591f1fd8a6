package ptlrpc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	ptlrpcv1 "github.com/nacrefs/nacre/proto/nacre/ptlrpc/v1"
)

// Errnos of the connection layer (Linux values).
const (
	errnoEBUSY     = 16
	errnoENODEV    = 19
	errnoENOTCONN  = 107
	errnoEPROTO    = 71
	errnoEINVAL    = 22
	errnoEBADMSG   = 74
	errnoESHUTDOWN = 108
	errnoEUSERS    = 87
)

// Defaults of a Target.
const (
	// DefaultEvictTimeout is how long a target waits without hearing from
	// a client before evicting it at the default obd_timeout: six ping
	// intervals, as Lustre's ping evictor waits PING_EVICT_TIMEOUT
	// (Timeouts.EvictTimeout).
	DefaultEvictTimeout = 6 * DefaultPingInterval
	// DefaultMaxExports bounds the exports of one target.
	DefaultMaxExports = 4096
	// maxSavedReplies bounds the replies one export keeps for
	// reconstruction: more than any client keeps modifying requests in
	// flight, so pruning by last_xid always runs first.
	maxSavedReplies = 1024
)

var targetNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// TargetConfig configures a Target.
type TargetConfig struct {
	// Name is the target's name, as clients ask for it in CONNECT
	// ("nacre-OST0000").
	Name string
	// UUID is the target's uuid; "" means Name+"_UUID".
	UUID string
	// Features are the OBD_CONNECT_* feature bits the target supports.
	Features uint64
	// EvictTimeout is how long an export may stay silent before the target
	// evicts it; 0 means the node's (NodeTimeouts), as it is at each check.
	EvictTimeout time.Duration
	// MaxExports bounds the number of exports; 0 means DefaultMaxExports.
	MaxExports int
	// AutoCommit makes every transno committed as soon as its reply is
	// sent, for targets without stable storage of their own. Otherwise the
	// storage layer reports commits with Target.Committed.
	AutoCommit bool
	// LastTransno is the highest transno the target's storage has used
	// before this start (Lustre's last_rcvd lsd_last_transno): transnos
	// continue after it, and it is taken as committed, so that replies
	// after a restart never carry a transno a client already saw
	// committed. 0 for a new target.
	LastTransno uint64
	// RecoveryWindow is how long after a restart (LastTransno > 0) the
	// target keeps clients that reconnect with a handle of its previous
	// life (Lustre's recovery window): they are taken back, not evicted,
	// and replay what the target lost (locks with ldlm.Replay, requests
	// with MSG_REPLAY, data not yet committed). 0 means none: every
	// client of the previous life is evicted.
	RecoveryWindow time.Duration
	// OnConnect, if not nil, is called for each new or revived export,
	// with what the client sent in ConnectRequest.client_data (maybe
	// nothing); what it returns goes to the client in
	// ConnectReply.target_data (an OST's grant, say).
	OnConnect func(e *Export, clientData []byte) []byte
	// Replies, if not nil, keeps the replies handlers asked to keep
	// (Request.KeepReply) across restarts.
	Replies ReplyStore
	// OnGone, if not nil, is called once for each export that goes away,
	// with evicted set when the target evicted it (not a DISCONNECT), so
	// the layers above drop its locks and state.
	OnGone func(e *Export, evicted bool)
	// Clients, if not nil, are the clients the target had when it last
	// stopped (Lustre's last_rcvd client records, kept by the target's
	// storage through OnNewClient and OnClientGone): the recovery window
	// then ends as soon as each of them has reconnected and said it
	// replayed everything (MsgReqReplayDone and MsgLockReplayDone on a
	// request), or tried to connect afresh (it kept nothing to replay),
	// and at once if there are none; until then the target serves nothing
	// new (see the package doc's Recovery). nil: not known; the window
	// runs its length and new requests are served during it.
	Clients []string
	// OnNewClient, if not nil, is called when a client connects afresh
	// (not a reconnect to its export), before the reply, so that the
	// storage records it for the next life's recovery; an error refuses
	// the connect.
	OnNewClient func(uuid string) error
	// OnClientGone, if not nil, is called when a client's export goes by
	// DISCONNECT or eviction (not when the target closes: its clients
	// come back to the next life), so that the storage forgets it.
	OnClientGone func(uuid string)
	// Logger receives the target's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Target is the server side of one storage target's connections (an obd
// device's export list): it hands out exports at CONNECT, numbers modifying
// requests with transnos, tracks what is committed, and evicts clients
// that stop talking. Services reach targets through a TargetSet. Safe for
// concurrent use.
type Target struct {
	cfg      TargetConfig
	log      *slog.Logger
	set      *TargetSet
	instance uint64
	// recoverStart and recoverUntil (Unix nanoseconds) bound the recovery
	// window (zero: none); recoverUntil moves to the moment recovery ends
	// when every client of the previous life is back (waiting).
	recoverStart, recoverUntil atomic.Int64
	recovered                  atomic.Uint64 // clients taken back during recovery
	recoveryEvicted            atomic.Uint64 // clients EndRecovery evicted
	recoveryDone               chan struct{} // see RecoveryDone
	replaysIn                  atomic.Int64  // replays in their handlers; see ReplaysDone
	doneOnce                   sync.Once     // closes recoveryDone
	// waiting are the clients of the previous life recovery still waits
	// for (TargetConfig.Clients); guarded by mu.
	waiting map[string]struct{}
	// dropped are the handles of this life's exports dropped while it
	// recovered: a client reconnecting with one is not taken back as
	// recovering (its export, and the replies it kept, went); guarded by
	// mu.
	dropped map[uint64]struct{}
	// gate says the target knows its previous life's clients and holds
	// everything new back until they have replayed (Lustre's recovery):
	// other clients' connects are refused with -EBUSY, and a client done
	// replaying gets no answer to its replay-done request (parked) until
	// recovery ends, so it sends nothing new meanwhile. Set at start.
	gate bool
	// parked are those replay-done requests, at most one per export
	// (Export.parked); parking says more are taken. Guarded by mu.
	parked  []*Request
	parking bool
	// replays are the recovering clients' replays of changes the previous
	// life lost (MSG_REPLAY of a transno after LastTransno), queued to run
	// one at a time in transno order on their original transnos, as
	// Lustre's recovery thread runs them: a change is made again only
	// after every change before it that any client may still replay, so a
	// replay finds what it depended on (another client's mkdir), and a
	// restart during recovery never finds a later change committed before
	// an earlier one still to come. At most one per export
	// (Export.queued): a client replays one at a time. replayedTo is the
	// transno of the last run (from LastTransno), replayRunning says one
	// runs now, and requestsReplayed that request replay is over: every
	// client recovery waits for has said it replayed its requests
	// (MsgReqReplayDone), and their lock replays may go. Guarded by mu.
	replays          []*Request
	replayed         uint64 // replays run in their turn
	replayedTo       uint64
	replayRunning    bool
	requestsReplayed bool
	// over says a gated recovery has ended (finishRecoveryLocked): it ends
	// when the target says so, not when the clock passes recoverUntil,
	// which the window's end may extend.
	over atomic.Bool
	// activity counts the replays the target received and the clients
	// done replaying (a client still at it is making progress), and
	// lastActivity is its value at the window's last end (extendRecovery).
	activity     atomic.Uint64
	lastActivity uint64

	tmu       sync.Mutex    // serializes AssignTransno
	transno   atomic.Uint64 // last transno given out
	committed atomic.Uint64 // last transno committed

	// cmu orders the storage's client records (OnNewClient, OnClientGone)
	// with the exports; taken before mu.
	cmu     sync.Mutex
	mu      sync.Mutex // guards exports, closed
	exports map[string]*Export
	closed  bool

	evictions atomic.Uint64
	stop      chan struct{}
	done      chan struct{}
}

// TargetSet holds the targets one server process serves, and finds exports
// by handle for its services. Safe for concurrent use.
type TargetSet struct {
	mu       sync.Mutex // guards targets, byHandle
	targets  map[string]*Target
	byHandle map[uint64]*Export
}

// Recovering reports whether the target is within its recovery window,
// when clients of its previous life may replay what it lost.
func (t *Target) Recovering() bool {
	if t.gate {
		return !t.over.Load()
	}
	return time.Now().UnixNano() < t.recoverUntil.Load()
}

// RecoveryEnd returns the end of the target's recovery window; zero if it
// has none (a new target, or no window configured).
func (t *Target) RecoveryEnd() time.Time { return unixNano(t.recoverUntil.Load()) }

// RecoveryDone is closed when recovery ends: every client of the
// previous life back (see TargetConfig.Clients), EndRecovery, or the
// window run out (the target calls EndRecovery then).
func (t *Target) RecoveryDone() <-chan struct{} { return t.recoveryDone }

// ReplaysDone waits until recovery has ended and no replay is in its
// handler any more, or ctx is done. A replay whose handler saw the target
// recovering may still be making its change when the window runs out (its
// client evicted meanwhile); what must not run beside such a change (the
// orphan cleanup that destroys the objects no layout names) waits for
// this, not only for RecoveryDone. A replay handled later finds recovery
// over.
func (t *Target) ReplaysDone(ctx context.Context) error {
	select {
	case <-t.recoveryDone:
	case <-ctx.Done():
	}
	tick := time.NewTicker(5 * time.Millisecond) // handlers are short; nothing to wake on
	defer tick.Stop()
	for {
		select {
		case <-t.recoveryDone:
			if t.replaysIn.Load() == 0 {
				return nil
			}
		default:
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// RecoveryStart returns the start of the target's recovery window (when
// it started); zero if it has none.
func (t *Target) RecoveryStart() time.Time { return unixNano(t.recoverStart.Load()) }

// RecoveredClients counts the clients of the target's previous life that
// reconnected within its recovery window (Lustre's completed_clients).
func (t *Target) RecoveredClients() uint64 { return t.recovered.Load() }

// RecoveryEvicted counts the clients of the previous life the end of
// recovery evicted: not back, or not done replaying.
func (t *Target) RecoveryEvicted() uint64 { return t.recoveryEvicted.Load() }

// RecoveryWaiting returns how many of the previous life's clients
// (TargetConfig.Clients) recovery still waits for, of how many; -1, -1
// if it does not know them (or is over).
func (t *Target) RecoveryWaiting() (waiting, of int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiting == nil {
		return -1, -1
	}
	return len(t.waiting), len(t.cfg.Clients)
}

// RecoveryStatus is a target's recovery as lctl's recovery_status shows
// it.
type RecoveryStatus struct {
	Recovering bool
	// Start and End bound the window (zero: none); End is when recovery
	// ended once it has.
	Start, End time.Time
	// Clients counts the clients taken back (RecoveredClients), Evicted
	// those the end of recovery evicted (RecoveryEvicted).
	Clients, Evicted uint64
	// Waiting of Of clients of the previous life recovery still waits for
	// (RecoveryWaiting); -1, -1 if it does not know them, or is over.
	Waiting, Of int
	// Replayed counts the requests replayed in transno order. Of a
	// recovering target that knows its clients: how many of those back
	// replay their requests still (ReqReplay) or are done with them and
	// replay their locks (LockReplay); how many requests wait for their
	// turn, and the transno whose turn it is.
	ReqReplay, LockReplay int
	Replayed              uint64
	Queued                int
	NextTransno           uint64
}

// RecoveryStatus returns the target's recovery status.
func (t *Target) RecoveryStatus() RecoveryStatus {
	st := RecoveryStatus{Recovering: t.Recovering(), Start: t.RecoveryStart(), End: t.RecoveryEnd(),
		Clients: t.RecoveredClients(), Evicted: t.RecoveryEvicted(), Waiting: -1, Of: -1}
	t.mu.Lock()
	defer t.mu.Unlock()
	st.Replayed = t.replayed
	if t.waiting == nil {
		return st
	}
	st.Waiting, st.Of = len(t.waiting), len(t.cfg.Clients)
	for c := range t.waiting {
		switch e := t.exports[c]; {
		case e == nil:
		case e.reqDone:
			st.LockReplay++
		default:
			st.ReqReplay++
		}
	}
	st.Queued, st.NextTransno = len(t.replays), t.replayedTo+1
	return st
}

// NewTargetSet returns an empty set.
func NewTargetSet() *TargetSet {
	return &TargetSet{targets: make(map[string]*Target), byHandle: make(map[uint64]*Export)}
}

// NewTarget creates a target in ts and starts its evictor. Close stops it.
func (ts *TargetSet) NewTarget(cfg TargetConfig) (*Target, error) {
	if !targetNameRE.MatchString(cfg.Name) {
		return nil, fmt.Errorf("ptlrpc: target name %q: want 1-64 of [A-Za-z0-9_.-]", cfg.Name)
	}
	if cfg.UUID == "" {
		cfg.UUID = cfg.Name + "_UUID"
	}
	cfg.EvictTimeout = max(cfg.EvictTimeout, 0)
	if cfg.MaxExports <= 0 {
		cfg.MaxExports = DefaultMaxExports
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	t := &Target{
		cfg: cfg, log: lg.With("target", cfg.Name), set: ts, instance: rand.Uint64() | 1,
		exports: make(map[string]*Export), stop: make(chan struct{}), done: make(chan struct{}),
		recoveryDone: make(chan struct{}),
	}
	t.transno.Store(cfg.LastTransno)
	t.committed.Store(cfg.LastTransno)
	t.replayedTo = cfg.LastTransno
	if cfg.LastTransno > 0 && cfg.RecoveryWindow > 0 {
		now := time.Now()
		t.recoverStart.Store(now.UnixNano())
		t.recoverUntil.Store(now.Add(cfg.RecoveryWindow).UnixNano())
		if cfg.Clients != nil {
			t.waiting = make(map[string]struct{}, len(cfg.Clients))
			for _, c := range cfg.Clients {
				t.waiting[c] = struct{}{}
			}
			t.gate, t.parking = true, true
			t.endRecoveryIfDoneLocked()
		}
	}
	ts.mu.Lock()
	if _, dup := ts.targets[cfg.Name]; dup {
		ts.mu.Unlock()
		return nil, fmt.Errorf("ptlrpc: target %s already exists", cfg.Name)
	}
	ts.targets[cfg.Name] = t
	ts.mu.Unlock()
	go t.evictor()
	if t.recoverUntil.Load() != 0 {
		go t.watchRecovery()
	}
	return t, nil
}

// Name returns the target's name.
func (t *Target) Name() string { return t.cfg.Name }

// NextTransno gives out the next transaction number. Services call it for
// modifying requests; a storage layer numbering its own transactions may
// call it too.
func (t *Target) NextTransno() uint64 { return t.transno.Add(1) }

// InternalTransno numbers a change the target's storage makes on its own
// (closing an evicted client's files): NextTransno, or 0 — no number —
// while the clients of a target that knows them still replay their
// requests. A number then could be one of the previous life's that a
// client has still to replay, which a restart would then take for
// committed. Unnumbered, the change is durable with the next commit all
// the same.
func (t *Target) InternalTransno() uint64 {
	if t.gate {
		t.mu.Lock()
		replaying := !t.requestsReplayed && !t.over.Load()
		t.mu.Unlock()
		if replaying {
			return 0
		}
	}
	return t.NextTransno()
}

// takeTransno gives out replay, a replay's transno of the previous life
// run in its turn, or the next transaction number if it is 0. Replays run
// one at a time in transno order, before anything new: the transnos
// given out stay in order.
func (t *Target) takeTransno(replay uint64) uint64 {
	if replay == 0 {
		return t.NextTransno()
	}
	for {
		c := t.transno.Load()
		if c >= replay || t.transno.CompareAndSwap(c, replay) {
			return replay
		}
	}
}

// requestsDone notes that e's client has replayed its requests.
func (t *Target) requestsDone(e *Export) {
	t.mu.Lock()
	e.reqDone = true
	t.mu.Unlock()
}

// Committed records that every transno up to n is on stable storage; replies
// from then on carry it as last_committed.
func (t *Target) Committed(n uint64) {
	for {
		c := t.committed.Load()
		if n <= c || t.committed.CompareAndSwap(c, n) {
			return
		}
	}
}

// LastCommitted returns the highest committed transno.
func (t *Target) LastCommitted() uint64 { return t.committed.Load() }

// replyCommitted is the last_committed replies to e carry: while e's
// client replays to the restarted target, no more than the previous life
// had committed (LastTransno). The transnos after it are, to that client,
// the previous life's numbers of the changes it has still to replay,
// which a target that does not know its clients numbers anew from it:
// once another client's replays committed, a higher last_committed would
// have it drop its own changes unreplayed. (A target that knows them runs
// replays in transno order under their numbers, where the cap costs
// nothing.)
func (e *Export) replyCommitted() uint64 {
	t := e.target
	c := t.committed.Load()
	// Not only while recovering: a client still replaying when recovery
	// ends is evicted (EndRecovery), but a reply sent before that (or
	// to a client that connected just as it ended) must not have it drop
	// old-numbered changes it has not replayed.
	if e.replaying.Load() {
		return min(c, t.cfg.LastTransno)
	}
	return c
}

// committedBefore reports whether transno n, a replay's number from the
// previous life, was committed before the restart (and so is in the
// store already).
func (t *Target) committedBefore(n uint64) bool { return n <= t.cfg.LastTransno }

// LastTransno returns the last transno given out.
func (t *Target) LastTransno() uint64 { return t.transno.Load() }

// Evictions counts the exports the target has evicted.
func (t *Target) Evictions() uint64 { return t.evictions.Load() }

// ExportInfo describes one export, for administration.
type ExportInfo struct {
	Handle    uint64
	UUID      string
	Peer      lwire.ProcessID
	ConnCount uint32
	LastSeen  time.Time
	Saved     int // replies kept for reconstruction
	// Ops counts the requests handled for the client, by opcode;
	// ReadBytes and WriteBytes the bulk data its reads and writes moved.
	Ops                   map[wire.Opcode]uint64
	ReadBytes, WriteBytes uint64
}

// Exports lists the target's exports sorted by client uuid.
func (t *Target) Exports() []ExportInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]ExportInfo, 0, len(t.exports))
	for _, e := range t.exports {
		e.mu.Lock()
		out = append(out, ExportInfo{Handle: e.handle, UUID: e.uuid, Peer: e.peer, ConnCount: e.connCount,
			LastSeen: time.Unix(0, e.lastSeen.Load()), Saved: len(e.saved), Ops: maps.Clone(e.ops),
			ReadBytes: e.readBytes, WriteBytes: e.writeBytes})
		e.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UUID < out[j].UUID })
	return out
}

// Evict evicts the export of the client with uuid, as `lctl evict_client`:
// its later requests get -ENOTCONN and its next CONNECT learns it was
// evicted.
func (t *Target) Evict(uuid string) error {
	t.mu.Lock()
	e := t.exports[uuid]
	t.mu.Unlock()
	if e == nil {
		return fmt.Errorf("ptlrpc: target %s: no export for client %s", t.cfg.Name, uuid)
	}
	t.drop(e, true, "evicted by request")
	return nil
}

// drop removes e; evicted says whether it is an eviction.
func (t *Target) drop(e *Export, evicted bool, why string) {
	t.mu.Lock()
	if t.exports[e.uuid] == e {
		delete(t.exports, e.uuid)
	}
	if t.Recovering() {
		if t.dropped == nil {
			t.dropped = make(map[uint64]struct{})
		}
		t.dropped[e.handle] = struct{}{}
	}
	queued := e.queued
	if queued != nil {
		e.queued = nil
		t.replays = slices.DeleteFunc(t.replays, func(r *Request) bool { return r == queued })
	}
	t.mu.Unlock()
	if queued != nil {
		queued.svc.unpark(queued, true) // after t.mu: unpark takes the service's lock
	}
	t.set.mu.Lock()
	if t.set.byHandle[e.handle] == e {
		delete(t.set.byHandle, e.handle)
	}
	t.set.mu.Unlock()
	e.mu.Lock()
	already := e.gone
	e.gone = true
	e.saved = nil
	e.mu.Unlock()
	if already {
		return
	}
	if evicted {
		t.evictions.Add(1)
		t.log.Warn("ptlrpc: evicting client", "client", e.uuid, "peer", e.peer, "why", why)
	} else {
		t.log.Info("ptlrpc: client disconnected", "client", e.uuid, "peer", e.peer)
	}
	if t.cfg.OnGone != nil {
		t.cfg.OnGone(e, evicted)
	}
	// Not if the client has an export again (connect records it anew
	// under cmu before putting the export in place).
	t.cmu.Lock()
	t.mu.Lock()
	_, back := t.exports[e.uuid]
	closed := t.closed
	t.mu.Unlock()
	if !closed && !back {
		t.forgetClient(e.uuid)
		// A client of the previous life gone in recovery has nothing left
		// to replay (it comes back evicted): recovery waits for it no more.
		t.clientBack(e.uuid)
	}
	t.cmu.Unlock()
	// The others' replays no longer wait for it.
	t.replayNext()
}

// forgetClient has the storage forget uuid, a client gone for good
// (disconnected, evicted, or not back to recovery): its record
// (OnClientGone) and the replies kept for it (Replies), which nothing
// else would ever drop. t.cmu is held.
func (t *Target) forgetClient(uuid string) {
	// Its replies first: a crash between the two then leaves a client
	// recorded with none (recovery waits for it, in vain, one window),
	// not replies of a client nobody will ever forget again.
	if t.cfg.Replies != nil {
		t.cfg.Replies.ForgetReplies(uuid)
	}
	if t.cfg.OnClientGone != nil {
		t.cfg.OnClientGone(uuid)
	}
}

// evictor evicts exports that have been silent for EvictTimeout (Lustre's
// ping evictor).
func (t *Target) evictor() {
	defer close(t.done)
	tick := time.NewTimer(time.Hour)
	defer tick.Stop()
	for {
		changed := timeoutsChanged()
		limit := t.evictTimeout()
		tick.Reset(max(limit/4, time.Millisecond))
		var now time.Time
		select {
		case <-t.stop:
			return
		case <-changed: // obd_timeout changed: check at the new pace
			continue
		case now = <-tick.C:
		}
		var stale []*Export
		t.mu.Lock()
		for _, e := range t.exports {
			if now.Sub(time.Unix(0, e.lastSeen.Load())) > limit && e.busy.Load() == 0 {
				stale = append(stale, e)
			}
		}
		t.mu.Unlock()
		for _, e := range stale {
			t.drop(e, true, fmt.Sprintf("silent for more than %v", limit))
		}
	}
}

// evictTimeout is how long an export may stay silent now.
func (t *Target) evictTimeout() time.Duration {
	if d := t.cfg.EvictTimeout; d > 0 {
		return d
	}
	return NodeTimeouts().EvictTimeout()
}

// Close stops the evictor, drops every export (as a disconnect) and removes
// the target from its set. Later CONNECTs get -ENODEV.
func (t *Target) Close(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return errors.New("ptlrpc: target already closed")
	}
	t.closed = true
	var all []*Export
	for _, e := range t.exports {
		all = append(all, e)
	}
	t.mu.Unlock()
	t.set.mu.Lock()
	delete(t.set.targets, t.cfg.Name)
	t.set.mu.Unlock()
	close(t.stop)
	for _, e := range all {
		t.drop(e, false, "")
	}
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Export is the server side of one client's connection to one target. Its
// methods are safe for concurrent use.
type Export struct {
	target *Target
	handle uint64
	// handleHex is handle in hex, made once: the lock manager names every
	// lock's owner by it.
	handleHex string
	// prevHandle is the handle of the target's previous life the client
	// presented when recovery took it back: a connect with it again (the
	// first reply was lost) is a reconnect, not a new client.
	prevHandle uint64
	uuid       string
	features   uint64
	lastSeen   atomic.Int64 // unix nanoseconds of the last request
	busy       atomic.Int32 // requests being handled: a busy client is not silent
	parked     *Request     // its replay-done request parked (Target.park), if any; guarded by target.mu
	queued     *Request     // its replay queued to run in transno order (Target.queueReplay); guarded by target.mu
	// reqDone says the client has replayed its requests (MsgReqReplayDone)
	// to the recovering target; guarded by target.mu.
	reqDone bool
	// replaying says the client reconnected in recovery and has not said
	// it is done replaying (replyCommitted).
	replaying atomic.Bool
	private   atomic.Value

	mu        sync.Mutex // guards the fields below
	peer      lwire.ProcessID
	connCount uint32
	gone      bool
	saved     map[uint64]savedReply // xid -> reply of a modifying request
	inflight  map[uint64]struct{}   // xids queued or being handled
	// ops counts the requests the client's export had handled, by
	// opcode (only opcodes with a handler get here: bounded); bytes the
	// bulk data its reads and writes moved (Lustre's per-export stats,
	// obdfilter.*.exports.NID.stats).
	ops        map[wire.Opcode]uint64
	readBytes  uint64
	writeBytes uint64
}

// countOp counts one handled request of op.
func (e *Export) countOp(op wire.Opcode) {
	e.mu.Lock()
	if e.ops == nil {
		e.ops = make(map[wire.Opcode]uint64)
	}
	e.ops[op]++
	e.mu.Unlock()
}

// CountBulk adds n bytes the client read (write false) or wrote to the
// export's statistics; the layer that moves the data calls it.
func (e *Export) CountBulk(write bool, n uint64) {
	if e == nil {
		return
	}
	e.mu.Lock()
	if write {
		e.writeBytes += n
	} else {
		e.readBytes += n
	}
	e.mu.Unlock()
}

// savedReply is a reply kept for reconstruction.
// ReplyStore keeps the replies of changes on a target's storage, so that
// they survive a restart (Lustre's reply data in last_rcvd). A reply is
// saved after its change is committed (in the store's order), and
// forgotten once its client's requests report a lowest unreplied XID past
// it, or the client goes. Its methods are called from handlers'
// goroutines, concurrently; SaveReply and LoadReply with the client's
// export locked (a reply kept is not kept past the export's drop, which
// forgets them), so neither may call back into the target.
type ReplyStore interface {
	// SaveReply keeps client's reply to request xid, whose change got
	// transno; lastXID is what the request said the client had heard the
	// replies of (all up to it): those it may forget.
	SaveReply(client string, xid, lastXID, transno uint64, body []byte)
	// LoadReply returns the reply kept for client's request xid.
	LoadReply(client string, xid uint64) (transno uint64, body []byte, ok bool)
	// ForgetReplies drops every reply kept for client.
	ForgetReplies(client string)
}

type savedReply struct {
	hdr  wire.Header
	body []byte
}

// Target returns the export's target.
func (e *Export) Target() *Target { return e.target }

// Handle returns the export's handle cookie.
func (e *Export) Handle() uint64 { return e.handle }

// HandleString returns the export's handle in hexadecimal.
func (e *Export) HandleString() string { return e.handleHex }

// ClientUUID returns the client's uuid.
func (e *Export) ClientUUID() string { return e.uuid }

// Peer returns the client's process id on its latest connection.
func (e *Export) Peer() lwire.ProcessID {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.peer
}

// Features returns the negotiated feature bits.
func (e *Export) Features() uint64 { return e.features }

// SetPrivate attaches the layer above's state (an LDLM export, ...).
func (e *Export) SetPrivate(v any) { e.private.Store(&v) }

// Private returns what SetPrivate stored, or nil.
func (e *Export) Private() any {
	if p, ok := e.private.Load().(*any); ok {
		return *p
	}
	return nil
}

// Gone reports whether the export was evicted or disconnected.
func (e *Export) Gone() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gone
}

// lookup finds the live export for a request's handle.
func (ts *TargetSet) lookup(handle uint64) *Export {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.byHandle[handle]
}

// connect serves CONNECT: it creates or revives the client's export on the
// named target.
func (ts *TargetSet) connect(req *Request) ([]byte, int32) {
	var cr ptlrpcv1.ConnectRequest
	// proto.Unmarshal, not the generated decoder: it checks the UUID strings
	// are UTF-8, and they go on to the Admin API's gRPC replies.
	if err := proto.Unmarshal(req.Body, &cr); err != nil {
		return nil, -errnoEPROTO
	}
	if cr.ClientUuid == "" || len(cr.ClientUuid) > 128 {
		return nil, -errnoEINVAL
	}
	if cr.Version>>16 != uint32(wire.VersionMajor) {
		return nil, -errnoEPROTO
	}
	ts.mu.Lock()
	t := ts.targets[cr.Target]
	ts.mu.Unlock()
	if t == nil {
		return nil, -errnoENODEV
	}
	for {
		reply := &ptlrpcv1.ConnectReply{
			Features: cr.Features & t.cfg.Features, Version: wire.Version, CksumTypes: uint32(negotiated(cr.CksumTypes)),
			Instance: t.instance, TargetUuid: t.cfg.UUID,
		}
		if body, status, again := t.connect(req, &cr, reply); !again {
			return body, status
		}
	}
}

// connect is TargetSet.connect on t, the target cr names. It reports again
// if another connect of the same client put an export in place after this
// one looked for it (a CONNECT the client gave up on, delivered late
// beside the one it sent next): this one has to look again, and take the
// export as the client's reconnect to it, rather than put another in its
// place that the client may never use.
func (t *Target) connect(req *Request, cr *ptlrpcv1.ConnectRequest, reply *ptlrpcv1.ConnectReply) (_ []byte, _ int32, again bool) {
	ts := t.set
	now := time.Now().UnixNano()

	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, -errnoENODEV, false
	}
	old := t.exports[cr.ClientUuid]
	if old == nil && t.gate && t.Recovering() {
		_, prev := t.waiting[cr.ClientUuid]
		if !prev || cr.Handle == 0 {
			// Not a client of the previous life back to replay: it waits
			// until they have (Lustre's "denying connection for new
			// client"), its import retrying. One of them that lost its
			// handle has nothing to replay: recovery need not wait for it.
			back := prev && t.clientBackLocked(cr.ClientUuid)
			if t.Recovering() {
				t.mu.Unlock()
				if back {
					t.replayNext()
				}
				t.log.Info("ptlrpc: refusing a new client while recovering", "client", cr.ClientUuid, "peer", req.Peer,
					"recovery_ends_in", time.Until(t.RecoveryEnd()).Round(time.Second))
				return nil, -errnoEBUSY, false
			}
		}
	}
	_, lost := t.dropped[cr.Handle]
	recovering := old == nil && cr.Handle != 0 && t.Recovering() && !lost
	if old != nil && cr.Handle != 0 && (old.handle == cr.Handle || old.prevHandle == cr.Handle) {
		// A reconnect to the export the client had: keep it, with its saved
		// replies.
		old.mu.Lock()
		old.peer = req.Peer
		old.connCount = max(old.connCount, cr.ConnCount)
		old.mu.Unlock()
		old.lastSeen.Store(now)
		t.mu.Unlock()
		reply.Handle, reply.Reconnected = old.handle, true
		req.exp = old
		if t.cfg.OnConnect != nil {
			reply.TargetData = t.cfg.OnConnect(old, cr.ClientData)
		}
		t.log.Info("ptlrpc: client reconnected", "client", cr.ClientUuid, "peer", req.Peer, "conn", cr.ConnCount)
		body, status := marshalReply(reply)
		return body, status, false
	}
	if old == nil && len(t.exports) >= t.cfg.MaxExports {
		t.mu.Unlock()
		return nil, -errnoEUSERS, false
	}
	t.mu.Unlock()
	if old != nil {
		// The client has lost its handle (it restarted) or names another:
		// its old export goes, as Lustre's "already connected" case does.
		t.drop(old, true, "client reconnected with a new handle")
	}
	// Until the export is in place, a drop of an older export of the
	// same client (the evictor's) must not forget the record made here.
	t.cmu.Lock()
	cmuHeld := true
	defer func() {
		if cmuHeld {
			t.cmu.Unlock()
		}
	}()
	// Exports are put in place under cmu: none can come between this look
	// and this one's.
	t.mu.Lock()
	_, raced := t.exports[cr.ClientUuid]
	t.mu.Unlock()
	if raced {
		return nil, 0, true
	}
	if cr.Handle == 0 && t.cfg.Replies != nil {
		// A client starting afresh: its XIDs start afresh too, and a
		// reply kept for an earlier one of the same name must not answer
		// its resends.
		t.cfg.Replies.ForgetReplies(cr.ClientUuid)
	}
	if t.cfg.OnNewClient != nil {
		if err := t.cfg.OnNewClient(cr.ClientUuid); err != nil {
			t.log.Warn("ptlrpc: cannot record a new client", "client", cr.ClientUuid, "err", err)
			return nil, -errnoEIO, false
		}
	}
	if !recovering {
		t.clientBack(cr.ClientUuid) // back without anything to replay
	}
	e := &Export{
		target: t, uuid: cr.ClientUuid, features: reply.Features, peer: req.Peer, connCount: cr.ConnCount,
		saved: make(map[uint64]savedReply), inflight: make(map[uint64]struct{}),
	}
	e.lastSeen.Store(now)
	if recovering {
		// Before the export can be found: EndRecovery evicts those
		// still replaying.
		e.replaying.Store(true)
		e.prevHandle = cr.Handle
	}
	ts.mu.Lock()
	for {
		e.handle = rand.Uint64()
		if _, dup := ts.byHandle[e.handle]; !dup && e.handle != 0 {
			break
		}
	}
	e.handleHex = strconv.FormatUint(e.handle, 16) // before anyone can find e
	ts.byHandle[e.handle] = e
	ts.mu.Unlock()
	t.mu.Lock()
	if t.closed {
		// Closed while the client was recorded: Close did not see the
		// export, which must not outlive the target.
		t.mu.Unlock()
		ts.mu.Lock()
		delete(ts.byHandle, e.handle)
		ts.mu.Unlock()
		return nil, -errnoENODEV, false
	}
	t.exports[e.uuid] = e
	_, awaited := t.waiting[e.uuid]
	t.mu.Unlock()
	t.cmu.Unlock()
	cmuHeld = false
	switch {
	case recovering && !t.Recovering():
		// Recovery ended as it reconnected, maybe before EndRecovery
		// could see the export: stale as those it saw.
		t.drop(e, true, "recovery over as it reconnected")
	case recovering && t.gate && !awaited:
		// The window's end gave up on it as it reconnected (extendRecovery,
		// before the export was there to see): recovery waits for it no
		// more, and would run its replays out of their turn.
		t.drop(e, true, "given up on by recovery as it reconnected")
	}
	reply.Handle = e.handle
	reply.Evicted = cr.Handle != 0 && !recovering
	reply.Reconnected = recovering
	req.exp = e
	if recovering {
		t.recovered.Add(1)
		t.log.Info("ptlrpc: client recovering", "client", cr.ClientUuid, "peer", req.Peer)
	}
	if t.cfg.OnConnect != nil && !e.Gone() {
		// Not for an export dropped above: OnGone has seen it already,
		// and what OnConnect gave it would never be taken back.
		reply.TargetData = t.cfg.OnConnect(e, cr.ClientData)
	}
	t.log.Info("ptlrpc: client connected", "client", cr.ClientUuid, "peer", req.Peer, "evicted_before", reply.Evicted)
	body, status := marshalReply(reply)
	return body, status, false
}

// disconnect serves DISCONNECT.
func (ts *TargetSet) disconnect(req *Request) ([]byte, int32) {
	if req.exp == nil {
		return nil, -errnoENOTCONN
	}
	req.exp.target.drop(req.exp, false, "")
	return nil, 0
}

func marshalReply(m proto.Message) ([]byte, int32) {
	b, err := Marshal(m)
	if err != nil {
		return nil, -errnoEIO
	}
	return b, 0
}

// admit checks a request against its export before it is queued: it
// reports whether the request should go on, and otherwise answers it (a
// saved reply for a resend) or drops it. Called by the service for every
// request naming an export.
func (e *Export) admit(h *wire.Header, modifying bool) (saved *savedReply, ok bool, why string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.gone:
		return nil, false, "export gone"
	case h.ConnCount < e.connCount:
		return nil, false, "request from an older connection"
	}
	if h.LastXID != 0 {
		for xid := range e.saved {
			if xid <= h.LastXID {
				delete(e.saved, xid)
			}
		}
	}
	if _, busy := e.inflight[h.XID]; busy {
		// The original is queued or running; its reply will answer the
		// resend too (the client keeps its reply buffer posted).
		return nil, false, "original still in progress"
	}
	if h.Flags&wire.MsgResent != 0 {
		if r, ok := e.saved[h.XID]; ok {
			return &r, false, ""
		}
		if rs := e.target.cfg.Replies; rs != nil && modifying {
			// A reply the previous life sent and the client lost (only a
			// change's is kept: the others need no look in the store).
			if transno, body, ok := rs.LoadReply(e.uuid, h.XID); ok {
				return &savedReply{hdr: wire.Header{Type: wire.TypeReply, Opcode: h.Opcode, XID: h.XID, BodyLen: uint32(len(body)),
					ConnCount: h.ConnCount, Handle: e.handle, Transno: transno}, body: body}, false, ""
			}
		}
	}
	e.inflight[h.XID] = struct{}{}
	e.busy.Add(1)
	return nil, true, ""
}

// keepReply has the target's ReplyStore, if any, keep the reply to h,
// whose change got transno, unless e is gone. Under e.mu: drop marks e
// gone under it before it has the store forget the client, so a reply
// kept here goes with the client's others (one kept after a Gone look
// that raced the drop stayed for good).
func (e *Export) keepReply(h *wire.Header, transno uint64, body []byte) {
	rs := e.target.cfg.Replies
	if rs == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return
	}
	if testHookKeepReply != nil {
		testHookKeepReply(e)
	}
	rs.SaveReply(e.uuid, h.XID, h.LastXID, transno, body)
}

// testHookKeepReply, if set (by tests), runs in keepReply once the export
// is found live, before the reply is kept.
var testHookKeepReply func(e *Export)

// finish ends a request admitted by admit, saving its reply if it is to be
// reconstructable.
func (e *Export) finish(xid uint64, save *savedReply, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.inflight, xid)
	e.busy.Add(-1)
	e.lastSeen.Store(now.UnixNano())
	if save == nil || e.gone {
		return
	}
	if len(e.saved) >= maxSavedReplies {
		// The client is not reporting last_xid; forget the oldest.
		var oldest uint64 = ^uint64(0)
		for x := range e.saved {
			oldest = min(oldest, x)
		}
		delete(e.saved, oldest)
	}
	e.saved[xid] = *save
}

// endRecoveryIfDoneLocked ends recovery now if it waits for no client of
// the previous life any more. t.mu is held (or t is not shared yet).
func (t *Target) endRecoveryIfDoneLocked() {
	if t.waiting == nil || len(t.waiting) > 0 || !t.Recovering() {
		return
	}
	t.finishRecoveryLocked()
	t.log.Info("ptlrpc: recovery complete: every client is back", "clients", t.recovered.Load(),
		"after", time.Since(t.RecoveryStart()).Round(time.Millisecond))
}

// EndRecovery ends the recovery window now if it has not ended (Lustre's
// abort_recovery; the target calls it itself when its window runs out):
// the clients of the previous life that have not reconnected will find
// themselves evicted, and OnClientGone forgets them, so that the next
// restart does not wait for them; those that reconnected and have not
// finished replaying are evicted now. It reports how many clients of the
// previous life it evicted.
func (t *Target) EndRecovery() int {
	st := t.RecoveryStatus() // for the log, should it evict
	t.mu.Lock()
	absent := make([]string, 0, len(t.waiting))
	for c := range t.waiting {
		absent = append(absent, c)
	}
	t.finishRecoveryLocked()
	t.mu.Unlock()
	// Those that reconnected and had not finished replaying are evicted
	// (Lustre's stale exports): what they did not replay in time is lost
	// to them, and what they replayed after now would go in among the
	// others' new changes. The others are forgotten.
	t.cmu.Lock()
	var stale []*Export
	for _, c := range absent {
		t.mu.Lock()
		e := t.exports[c]
		closed := t.closed
		t.mu.Unlock()
		if e != nil {
			stale = append(stale, e)
			continue
		}
		// Not by a closed target (its window's end racing the close): its
		// clients come back to the next life, which must wait for them.
		if !closed {
			t.forgetClient(c)
		}
	}
	// A target that does not know its clients (no gate) has them in no
	// waiting list: those still replaying are stale all the same.
	gone := len(absent)
	t.mu.Lock()
	for _, e := range t.exports {
		if !t.gate && e.replaying.Load() {
			stale = append(stale, e)
			gone++
		}
	}
	t.mu.Unlock()
	t.cmu.Unlock()
	for _, e := range stale {
		// Where it was, so that a recovery that stalled can be told from
		// a client too slow or gone.
		t.mu.Lock()
		stage := "its requests"
		if e.reqDone {
			stage = "its locks and opens"
		}
		if e.queued != nil {
			stage += fmt.Sprintf(", transno %d waiting for its turn", e.queued.Header.Transno)
		}
		t.mu.Unlock()
		t.drop(e, true, "recovery over before it had replayed everything: it was replaying "+stage)
	}
	if gone > 0 {
		t.recoveryEvicted.Add(uint64(gone))
		t.log.Warn("ptlrpc: recovery over: clients not back, or not done replaying, are evicted", "clients", gone, "replaying", len(stale),
			"req_replay_clients", st.ReqReplay, "lock_replay_clients", st.LockReplay, "replayed_requests", st.Replayed,
			"queued_requests", st.Queued, "next_transno", st.NextTransno)
	}
	return gone
}

// finishRecoveryLocked ends recovery now (if it has not ended) and wakes
// RecoveryDone; t.mu is held.
func (t *Target) finishRecoveryLocked() {
	t.over.Store(true)
	t.waiting = nil
	t.dropped = nil // connects are no longer taken as recovering
	if now := time.Now().UnixNano(); t.recoverUntil.Load() > now {
		t.recoverUntil.Store(now)
	}
	t.doneOnce.Do(func() { close(t.recoveryDone) })
}

// clientBack notes that uuid, a client of the previous life, needs no more
// recovery: it replayed everything, or connected afresh.
// The replays queued, and the others' word that they replayed their
// requests, wait for it no more (replayNext).
func (t *Target) clientBack(uuid string) {
	t.mu.Lock()
	back := t.clientBackLocked(uuid)
	t.mu.Unlock()
	if back {
		t.replayNext()
	}
}

// clientBackLocked is clientBack with t.mu held, but for replayNext,
// which the caller calls after if it reports true.
func (t *Target) clientBackLocked(uuid string) bool {
	if _, ok := t.waiting[uuid]; !ok {
		return false
	}
	delete(t.waiting, uuid)
	t.activity.Add(1)
	t.endRecoveryIfDoneLocked()
	return true
}

// park holds req, a client's replay-done request, unanswered until
// recovery ends, if the target gates recovery and it goes on; it reports
// whether it did. With untilReplayed, req is the client's word that it
// replayed its requests (MsgReqReplayDone alone), held only until
// request replay is over (and not parked once it is). An export has at
// most one parked: a later one (sent again after a reconnect, the client
// having given up on the first) takes its place, and park returns the
// one it replaced for the caller to drop. A request of a closing service
// is not parked.
func (t *Target) park(req *Request, untilReplayed bool) (ok bool, replaced *Request) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.parking || t.closed || !t.Recovering() || untilReplayed && t.requestsReplayed {
		return false, nil
	}
	req.svc.mu.Lock()
	closing := req.svc.closed
	req.svc.mu.Unlock()
	if closing {
		return false, nil
	}
	if replaced = req.exp.parked; replaced != nil {
		t.parked = slices.DeleteFunc(t.parked, func(r *Request) bool { return r == replaced })
	}
	req.untilReplayed = untilReplayed
	req.exp.parked = req
	t.parked = append(t.parked, req)
	return true, replaced
}

// watchRecovery ends recovery when its window runs out (EndRecovery: the
// clients not back, or not done replaying, are evicted and forgotten, or
// every later restart would wait its whole window for them), and then
// answers the requests parked until it ended (every client back,
// EndRecovery, or the window run out); it drops them if the target
// closes first. At the window's end of a target that knows its clients,
// while clients that came back still replay, it may put the end off
// instead (extendRecovery).
func (t *Target) watchRecovery() {
	timer := time.NewTimer(time.Until(t.RecoveryEnd()))
	defer timer.Stop()
	closing := false
wait:
	for {
		select {
		case <-t.recoveryDone:
		case <-timer.C:
			if d := t.extendRecovery(); d > 0 {
				timer.Reset(d)
				continue
			}
			t.EndRecovery()
		case <-t.stop:
			closing = true
		}
		break wait
	}
	t.mu.Lock()
	t.parking = false
	parked := t.parked
	t.parked = nil
	for _, r := range parked {
		r.exp.parked = nil
	}
	// Replays still queued are of exports EndRecovery dropped (drop takes
	// them out) or of a closing target.
	queued := t.replays
	t.replays = nil
	for _, r := range queued {
		r.exp.queued = nil
	}
	t.requestsReplayed = true
	t.mu.Unlock()
	if len(parked) > 0 {
		t.log.Info("ptlrpc: recovery over: answering the clients that wait for it", "clients", len(parked))
	}
	for _, req := range parked {
		req.svc.unpark(req, closing)
	}
	for _, req := range queued {
		req.svc.unpark(req, true)
	}
}

// recoveryHard bounds a recovery window that its end puts off
// (extendRecovery), in windows from the start (Lustre's
// recovery_time_hard, three times recovery_time_soft by default).
const recoveryHard = 3

// extendRecovery, at the window's end of a target that knows its
// clients, puts the end off by the window's length if clients that came
// back are still replaying and either some others never came back (their
// turns may have held the replays up: the absent are evicted now) or the
// replays went on since the window's last end; never past recoveryHard
// windows from the start. It returns by how much (0: recovery ends now,
// EndRecovery evicting the clients not done).
func (t *Target) extendRecovery() time.Duration {
	t.cmu.Lock()
	t.mu.Lock()
	var absent []string
	replaying := 0
	for c := range t.waiting {
		if t.exports[c] == nil {
			absent = append(absent, c)
		} else {
			replaying++
		}
	}
	act := t.activity.Load()
	moved := act != t.lastActivity
	t.lastActivity = act
	now := time.Now()
	hard := t.RecoveryStart().Add(recoveryHard * t.cfg.RecoveryWindow)
	if !t.gate || replaying == 0 || len(absent) == 0 && !moved || !now.Before(hard) || t.over.Load() {
		t.mu.Unlock()
		t.cmu.Unlock()
		return 0
	}
	d := min(t.cfg.RecoveryWindow, hard.Sub(now))
	t.recoverUntil.Store(now.Add(d).UnixNano())
	for _, c := range absent {
		delete(t.waiting, c)
	}
	t.mu.Unlock()
	// Forgotten, as EndRecovery forgets them: the next restart does not
	// wait for them.
	for _, c := range absent {
		t.forgetClient(c)
	}
	t.cmu.Unlock()
	t.recoveryEvicted.Add(uint64(len(absent)))
	t.log.Warn("ptlrpc: recovery window over: those back and replaying get more time; clients not back are evicted",
		"evicted", len(absent), "replaying", replaying, "more", d)
	t.replayNext()
	return d
}

// queueReplay queues req, a replay of a change the previous life lost
// (MSG_REPLAY of a transno after LastTransno), to run in transno order,
// if the target gates recovery and request replay goes on; it reports
// whether it did (ok), or why req is refused (a client with a replay
// queued already: each waits for its reply).
func (t *Target) queueReplay(req *Request) (ok bool, err error) {
	t.mu.Lock()
	if !t.gate || t.requestsReplayed || t.closed || !t.Recovering() {
		t.mu.Unlock()
		return false, nil
	}
	req.svc.mu.Lock()
	closing := req.svc.closed
	req.svc.mu.Unlock()
	if closing {
		t.mu.Unlock()
		return false, nil
	}
	e := req.exp
	if e.queued != nil {
		t.mu.Unlock()
		return false, fmt.Errorf("replay of transno %d while its replay of %d waits", req.Header.Transno, e.queued.Header.Transno)
	}
	e.queued = req
	i, _ := slices.BinarySearchFunc(t.replays, req.Header.Transno, func(r *Request, n uint64) int {
		return cmp.Compare(r.Header.Transno, n)
	})
	t.replays = slices.Insert(t.replays, i, req)
	t.mu.Unlock()
	t.replayNext()
	return true, nil
}

// replayNext runs the next queued replay if its turn has come, or ends
// request replay if none is left to come.
func (t *Target) replayNext() {
	t.mu.Lock()
	if t.replayRunning {
		t.mu.Unlock()
		return
	}
	r := t.nextReplayLocked()
	var held []*Request
	if r == nil {
		held = t.endRequestReplayLocked()
	}
	t.mu.Unlock()
	if r != nil {
		go t.runReplays(r)
	}
	for _, req := range held {
		req.svc.unpark(req, false)
	}
}

// runReplays runs r, and the replays whose turn comes after it, one at a
// time (one goroutine per target at most: replayRunning).
func (t *Target) runReplays(r *Request) {
	for r != nil {
		r.replayTransno = r.Header.Transno
		r.svc.unpark(r, false)
		t.mu.Lock()
		t.replayed++
		t.replayedTo = max(t.replayedTo, r.replayTransno)
		t.replayRunning = false
		r = t.nextReplayLocked()
		var held []*Request
		if r == nil {
			held = t.endRequestReplayLocked()
		}
		t.mu.Unlock()
		for _, req := range held {
			req.svc.unpark(req, false)
		}
	}
}

// nextReplayLocked takes the first queued replay if it is the next
// transno, or if no client can still replay one before it: each client
// recovery waits for is back, and has a replay queued or has replayed
// its requests. (A transno no one replays was committed, or its change
// failed, or its client went.) None once recovery is over: the replays
// still queued are of clients it evicts (EndRecovery drops them after it
// ended, waiting for no one), which would go in among the new work. t.mu
// is held.
func (t *Target) nextReplayLocked() *Request {
	if t.replayRunning || len(t.replays) == 0 || t.over.Load() {
		return nil
	}
	r := t.replays[0]
	if r.Header.Transno > t.replayedTo+1 && !t.allAccountedLocked() {
		return nil
	}
	t.replays = t.replays[1:]
	r.exp.queued = nil
	t.replayRunning = true
	return r
}

// allAccountedLocked reports whether every client recovery waits for is
// back and has a replay queued, or has replayed its requests. t.mu is
// held.
func (t *Target) allAccountedLocked() bool {
	for c := range t.waiting {
		e := t.exports[c]
		if e == nil || e.queued == nil && !e.reqDone {
			return false
		}
	}
	return true
}

// endRequestReplayLocked ends request replay if every client recovery
// waits for has replayed its requests, and returns the requests parked
// until then (their MsgReqReplayDone), to be answered. t.mu is held.
func (t *Target) endRequestReplayLocked() []*Request {
	if t.requestsReplayed || !t.gate || t.replayRunning || len(t.replays) > 0 {
		return nil
	}
	for c := range t.waiting {
		if e := t.exports[c]; e == nil || !e.reqDone {
			return nil
		}
	}
	t.requestsReplayed = true
	t.log.Info("ptlrpc: request replay over; lock replay goes on", "replayed_to", t.replayedTo)
	var held []*Request
	t.parked = slices.DeleteFunc(t.parked, func(r *Request) bool {
		if r.untilReplayed {
			r.exp.parked = nil
			held = append(held, r)
			return true
		}
		return false
	})
	return held
}

// unparkService takes out of the targets' parked requests those of s,
// which is closing.
func (ts *TargetSet) unparkService(s *Service) []*Request {
	ts.mu.Lock()
	targets := slices.Collect(maps.Values(ts.targets))
	ts.mu.Unlock()
	var out []*Request
	for _, t := range targets {
		t.mu.Lock()
		t.parked = slices.DeleteFunc(t.parked, func(r *Request) bool {
			if r.svc == s {
				r.exp.parked = nil
				out = append(out, r)
				return true
			}
			return false
		})
		t.replays = slices.DeleteFunc(t.replays, func(r *Request) bool {
			if r.svc == s {
				r.exp.queued = nil
				out = append(out, r)
				return true
			}
			return false
		})
		t.mu.Unlock()
	}
	return out
}
