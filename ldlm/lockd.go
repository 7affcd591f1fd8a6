package ldlm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	ldlmv1 "github.com/nacrefs/nacre/proto/nacre/ldlm/v1"
)

// Defaults of a ServerConfig.
const (
	// DefaultCallbackTimeout is how long a client has to give a lock back
	// after a blocking AST before it is evicted, the node's ldlm_timeout
	// until it is set (NodeCallbackTimeout). Lustre stretches it by
	// adaptive timeouts; here it is fixed.
	DefaultCallbackTimeout = 20 * time.Second
	// DefaultASTWorkers send callbacks; DefaultASTQueue bounds the
	// callbacks waiting for one.
	DefaultASTWorkers = 4
	DefaultASTQueue   = 1024
)

// IntentResult is what a target's intent policy decided for an enqueue
// carrying an intent (Lustre's mdt_intent_policy).
type IntentResult struct {
	// Lock, if not nil, is the lock to enqueue instead of the one the
	// client asked for (a lock on the child a lookup found, say); Owner is
	// filled in by the server. Skip means no lock at all.
	Lock *Request
	Skip bool
	// Granted, if not nil, is a lock the policy already took for the
	// client with Server.IntentLock (so that it read what the lock
	// protects under it): the reply grants it as it is. Lock is then
	// ignored.
	Granted *Lock
	// Reply is the intent's answer body, Status its errno (negative).
	Reply  []byte
	Status int32
}

// IntentPolicy runs the intent of an enqueue. req is the PtlRPC request
// (for its export and transno); lock is the lock the client asked for.
// ctx is the one to pass to Server.IntentLock.
type IntentPolicy func(ctx context.Context, req *ptlrpc.Request, lock Request, intent []byte) IntentResult

// LocalOwner owns the locks a target takes for itself (LockLocal): they
// conflict with clients' locks, whose holders get blocking ASTs, and with
// each other, and are never called back themselves.
const LocalOwner Owner = "local"

// ServerConfig configures a Server.
type ServerConfig struct {
	// Namespace configures the lock table; its HandleSeed 0 means a random
	// seed, so handles of an earlier incarnation never alias new locks.
	Namespace Config
	// Client sends the callbacks (ASTs) to lock holders.
	Client *ptlrpc.Client
	// CallbackPortal is where clients serve callbacks; 0 means
	// ptlrpc.LDLMCBRequestPortal.
	CallbackPortal uint32
	// CallbackTimeout is how long a holder has to cancel a lock after a
	// blocking AST, and the timeout of each callback RPC; 0 means the
	// node's ldlm_timeout (NodeCallbackTimeout) as it is at each callback.
	CallbackTimeout time.Duration
	// ASTWorkers and ASTQueue size the callback senders (ASTQueue counts
	// batches: the callbacks one request caused); 0 means the defaults.
	ASTWorkers, ASTQueue int
	// Intent, if not nil, runs the intents of enqueues; without it an
	// enqueue with an intent is refused with EOPNOTSUPP.
	Intent IntentPolicy
	// LVBInit, if not nil, gives a new resource its LVB (an OST reads the
	// object's size): Lustre's lvbo_init. It returns an error wrapping
	// ErrNoObject when there is no object (the LVB stays empty, quietly).
	// A glimpse of a resource without locks gets its LVB from it too, and
	// the client takes that as the object's attributes; a glimpse granted
	// as a lock (GlimpseLock) needs it.
	LVBInit func(res Resource) (LVB, error)
	// Evict evicts a client that failed a callback (its export's target
	// drops it, which calls ExportGone). Nil means ExportGone directly.
	Evict func(exp *ptlrpc.Export)
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
}

// ServerStats are a Server's counters.
type ServerStats struct {
	Namespace Stats
	// Enqueues, Cancels and Converts count requests served; EarlyCancels
	// the locks given back inside enqueues.
	Enqueues, Cancels, Converts, EarlyCancels uint64
	// BlockingASTs, CompletionASTs and GlimpseASTs count callbacks sent;
	// ASTErrors the ones that failed.
	BlockingASTs, CompletionASTs, GlimpseASTs, ASTErrors uint64
	// CallbackTimeouts counts locks not given back in time (each evicts
	// its holder).
	CallbackTimeouts uint64
	// GlimpseLocks counts glimpses answered with a lock (no lock conflicted).
	GlimpseLocks uint64
	// BadRequests counts requests refused as malformed or invalid.
	BadRequests uint64
}

// Server is the lock daemon of one target (Lustre's ldlm_lockd for one
// namespace): it serves LDLM_ENQUEUE, LDLM_CONVERT and LDLM_CANCEL on the
// target's PtlRPC service, sends blocking, completion and glimpse ASTs to
// holders, and evicts a holder that does not give a lock back in time. Safe
// for concurrent use.
type Server struct {
	cfg ServerConfig
	log *slog.Logger
	ast chan []astWork
	ctx context.Context
	// stop ends the AST workers and the context.
	stop func()
	wg   sync.WaitGroup
	// handoff is what the AST workers leave to handoffLoop: the cancels
	// and evictions their callbacks' answers call for queue callbacks of
	// their own, and dispatch waits for room in a queue only the workers
	// drain (with every worker waiting there, nothing would). Its entries
	// are locks and exports the server has, deduplicated: bounded by them.
	handoff struct {
		sync.Mutex
		cancels map[Owner]map[uint64]struct{}
		evicts  map[*ptlrpc.Export]struct{}
		kick    chan struct{} // capacity 1
	}

	mu struct {
		sync.Mutex
		ns *Namespace
		// remote maps a lock to its client's handle for callbacks.
		remote map[Handle]uint64
		// replayed finds a lock a replay granted by its owner and client
		// handle, so that the same replay again (the client's recovery
		// started over after a lost connection) gets that lock back, not
		// a second one (Lustre's find_existing_lock); replayedKey is the
		// way back. Bounded by the locks.
		replayed    map[replayKey]Handle
		replayedKey map[Handle]replayKey
		// discard holds the target's own locks taken with DiscardData.
		discard map[Handle]struct{}
		// timers are the callback timers of locks sent a blocking AST.
		timers map[Handle]*time.Timer
		// owners maps an owner to its export, for callbacks and eviction;
		// bounded by the target's exports.
		owners map[Owner]*ptlrpc.Export
		// waiters are the waiting locks a server goroutine waits on
		// (LockLocal, IntentLock): their grant or failure goes to the
		// channel (buffered) instead of a completion AST.
		waiters map[Handle]chan error
		// recovering: a goroutine waits for the target's recovery to
		// end to grant the locks RecoveryWait queued (Recovered).
		recovering bool
		closed     bool
	}

	enqueues, cancels, converts, earlyCancels           atomic.Uint64
	blASTs, cpASTs, glASTs, astErrs, cbTimeouts, badReq atomic.Uint64
	glLocks                                             atomic.Uint64 // glimpses granted as locks
}

// astWork is one callback to send.
type astWork struct {
	exp  *ptlrpc.Export
	op   wire.Opcode
	body proto.Message
	lock Handle
}

// NewServer starts a lock server. Register its Handlers on the target's
// service, call ExportGone from the target's OnGone, and Close it after
// the service.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("ldlm: server needs a PtlRPC client for callbacks")
	}
	if cfg.Namespace.HandleSeed == 0 {
		cfg.Namespace.HandleSeed = rand.Uint64() >> 1
	}
	if cfg.Namespace.PageSize == 0 {
		cfg.Namespace.PageSize = DefaultConfig().PageSize
	}
	ns, err := New(cfg.Namespace)
	if err != nil {
		return nil, err
	}
	if cfg.CallbackPortal == 0 {
		cfg.CallbackPortal = ptlrpc.LDLMCBRequestPortal
	}
	cfg.CallbackTimeout = max(cfg.CallbackTimeout, 0)
	if cfg.ASTWorkers <= 0 {
		cfg.ASTWorkers = DefaultASTWorkers
	}
	if cfg.ASTQueue <= 0 {
		cfg.ASTQueue = DefaultASTQueue
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	s := &Server{cfg: cfg, log: lg.With("ldlm", ns.Name()), ast: make(chan []astWork, cfg.ASTQueue)}
	s.mu.ns = ns
	s.mu.remote = make(map[Handle]uint64)
	s.mu.replayed = make(map[replayKey]Handle)
	s.mu.replayedKey = make(map[Handle]replayKey)
	s.mu.discard = make(map[Handle]struct{})
	s.mu.timers = make(map[Handle]*time.Timer)
	s.mu.owners = make(map[Owner]*ptlrpc.Export)
	s.mu.waiters = make(map[Handle]chan error)
	ctx, cancel := context.WithCancel(context.Background())
	s.ctx = ctx
	s.stop = cancel
	s.handoff.kick = make(chan struct{}, 1)
	for range cfg.ASTWorkers {
		s.wg.Go(s.astWorker)
	}
	s.wg.Go(s.handoffLoop)
	return s, nil
}

// HandlerFlags are the flags of the lock requests' handlers (Handlers),
// for a service that routes them itself: cancels and converts are what
// enqueues (and handlers in LockLocal) wait for, never queued behind them.
// A target whose enqueues change more than locks (an MDT's intents) adds
// Modifying to LDLM_ENQUEUE.
var HandlerFlags = map[wire.Opcode]ptlrpc.HandlerFlags{
	wire.LDLMEnqueue: 0, wire.LDLMCancel: ptlrpc.HighPriority, wire.LDLMConvert: ptlrpc.HighPriority,
}

// Handlers returns the handler table entries of the lock requests, with
// HandlerFlags, to add to the target's connection-oriented service.
func (s *Server) Handlers() map[wire.Opcode]ptlrpc.HandlerSpec {
	fns := map[wire.Opcode]ptlrpc.Handler{wire.LDLMEnqueue: s.handleEnqueue, wire.LDLMCancel: s.handleCancel, wire.LDLMConvert: s.handleConvert}
	specs := make(map[wire.Opcode]ptlrpc.HandlerSpec, len(fns))
	for op, fn := range fns {
		specs[op] = ptlrpc.HandlerSpec{Fn: fn, Flags: HandlerFlags[op]}
	}
	return specs
}

// ownerOf names an export's locks: the export handle, unique per
// connection, so a client evicted and reconnected never inherits locks.
func ownerOf(exp *ptlrpc.Export) Owner { return Owner(exp.HandleString()) }

// OwnerOf is the owner of the locks of exp's client (Tolerated).
func OwnerOf(exp *ptlrpc.Export) Owner { return ownerOf(exp) }

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	ns := s.mu.ns.Stats()
	s.mu.Unlock()
	return ServerStats{Namespace: ns,
		Enqueues: s.enqueues.Load(), Cancels: s.cancels.Load(), Converts: s.converts.Load(), EarlyCancels: s.earlyCancels.Load(),
		BlockingASTs: s.blASTs.Load(), CompletionASTs: s.cpASTs.Load(), GlimpseASTs: s.glASTs.Load(), ASTErrors: s.astErrs.Load(),
		CallbackTimeouts: s.cbTimeouts.Load(), GlimpseLocks: s.glLocks.Load(), BadRequests: s.badReq.Load()}
}

// Locks returns the locks on a resource, for administration and tests.
func (s *Server) Locks(res Resource) []Lock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.ns.Locks(res)
}

// bad counts and logs a refused request and returns its status.
func (s *Server) bad(r *ptlrpc.Request, err error) ([]byte, int32) {
	s.badReq.Add(1)
	s.log.Info("ldlm: refusing request", "op", r.Header.Opcode, "from", r.Peer, "err", err)
	return nil, -int32(Errno(err))
}

func (s *Server) handleEnqueue(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	exp := r.Export()
	if exp == nil {
		return nil, -int32(syscall.ENOTCONN)
	}
	// Request and reply stay on the stack, encoded by their own methods
	// (see Client.Enqueue).
	var er ldlmv1.EnqueueRequest
	if err := er.UnmarshalVT(r.Body); err != nil {
		return s.bad(r, fmt.Errorf("%w: enqueue body: %v", ErrInvalid, err))
	}
	s.enqueues.Add(1)
	owner := ownerOf(exp)
	s.cancelEarly(owner, er.Cancels)
	s.convertEarly(owner, er.Converts)
	res, err := resourceFromWire(er.Resource)
	if err != nil {
		return s.bad(r, err)
	}
	mode, err := modeFromWire(er.Mode)
	if err != nil {
		return s.bad(r, err)
	}
	if er.Flags&^wireFlags != 0 {
		return s.bad(r, fmt.Errorf("%w: enqueue flags %#x", ErrInvalid, er.Flags))
	}
	req := Request{Resource: res, Mode: mode, Owner: owner, Policy: policyFromWire(er.Policy), Flags: Flags(er.Flags & (wireBlockNoWait | wireNoExpansion | wireReplay))}
	if req.Flags&Replay != 0 && !exp.Target().Recovering() {
		return s.bad(r, fmt.Errorf("%w: lock replay outside recovery", ErrInvalid))
	}
	if req.Flags&Replay != 0 && er.Flags&(wireGlimpse|wireTestLock) != 0 {
		// A replay is granted without a conflict check; a glimpse or a
		// test is never one (a glimpse lock is replayed as the lock it
		// is), and would take a lock over a writer's.
		return s.bad(r, fmt.Errorf("%w: a glimpse or a lock test flagged as a replay", ErrInvalid))
	}
	if er.Flags&wireGlimpse != 0 {
		if er.Flags&wireGlimpseLock != 0 {
			if rep, ok := s.glimpseLock(exp, owner, req, er.ClientHandle, r.Header.Flags&wire.MsgResent != 0); ok {
				return marshalEnqueueReply(rep)
			}
		}
		lvb, valid, err := s.glimpse(ctx, res)
		if err != nil {
			return s.bad(r, err)
		}
		return marshalEnqueueReply(&ldlmv1.EnqueueReply{Lvb: lvbToWire(lvb), LvbValid: valid})
	}
	if er.Flags&wireTestLock != 0 {
		s.mu.Lock()
		g, found, err := s.mu.ns.Test(req)
		s.mu.Unlock()
		if err != nil {
			return s.bad(r, err)
		}
		if !found {
			return marshalEnqueueReply(&ldlmv1.EnqueueReply{Mode: uint32(NL)})
		}
		return marshalEnqueueReply(&ldlmv1.EnqueueReply{Mode: uint32(g.Mode), Policy: policyToWire(g.Policy)})
	}
	// A lock replay: of a granted lock (Replay: granted without a conflict
	// check), or of one the client still waited for (an ordinary enqueue,
	// but sent as a replay from OnRecover). Either may come again when
	// recovery starts over, the second time maybe as granted.
	replay := replayKey{owner, er.ClientHandle}
	replaying := (req.Flags&Replay != 0 || r.Replayed()) && er.ClientHandle != 0
	if replaying {
		if rep, ok := s.replayedAgain(replay); ok {
			return marshalEnqueueReply(rep)
		}
	}
	var rep ldlmv1.EnqueueReply
	if len(er.Intent) > 0 {
		if s.cfg.Intent == nil {
			return nil, -int32(syscall.EOPNOTSUPP)
		}
		ir := s.cfg.Intent(context.WithValue(ctx, clientHandleKey{}, er.ClientHandle), r, req, er.Intent)
		rep.IntentReply, rep.IntentStatus = ir.Reply, ir.Status
		if g := ir.Granted; g != nil {
			s.mu.Lock()
			lvb, _ := s.mu.ns.LVB(g.Resource)
			s.mu.Unlock()
			rep.Handle, rep.Granted, rep.Mode, rep.Policy = uint64(g.Handle), true, uint32(g.Mode), policyToWire(g.Policy)
			rep.CallbackPending, rep.Lvb = g.CallbackPending, lvbToWire(lvb)
			if g.Resource != res {
				rep.Resource = resourceToWire(g.Resource)
			}
			return marshalEnqueueReply(&rep)
		}
		if ir.Skip {
			return marshalEnqueueReply(&rep)
		}
		if ir.Lock != nil {
			req = *ir.Lock
			req.Owner = owner
			if req.Resource != res {
				rep.Resource = resourceToWire(req.Resource)
			}
		}
	}

	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil, -int32(syscall.ESHUTDOWN)
	}
	if exp.Gone() {
		// Evicted or disconnected while this request was on its way in:
		// ExportGone has run (or runs after s.mu), and nothing would drop
		// a lock granted now, nor the export kept for it.
		s.mu.Unlock()
		return nil, -int32(syscall.ENOTCONN)
	}
	if replaying {
		// Again under the lock that records it: the same replay sent again
		// on a new connection may be handled at the same time.
		if rep, ok := s.replayedAgainLocked(replay); ok {
			s.mu.Unlock()
			return marshalEnqueueReply(rep)
		}
	} else if r.Header.Flags&wire.MsgResent != 0 && er.ClientHandle != 0 {
		// A resend whose first send's reply was lost: the lock it got
		// then is the answer (Lustre's find_existing_lock). Enqueued
		// again, the second lock would wait on the first, which the
		// client does not know of and cannot give back: the client is
		// evicted. (An MDT's enqueues are Modifying: answered from the
		// saved reply before they get here.)
		if rep, ok := s.resentAgainLocked(owner, er.ClientHandle, req.Resource); ok {
			s.mu.Unlock()
			return marshalEnqueueReply(rep)
		}
	}
	var newLVB *LVB // a new resource's, read before the enqueue
	if s.cfg.LVBInit != nil {
		if _, known := s.mu.ns.LVB(req.Resource); !known {
			lvb, err := s.cfg.LVBInit(req.Resource)
			switch {
			case errors.Is(err, ErrNoObject) && !replaying:
				// A lock on an object that is gone (destroyed under a
				// reader that still had the file's old layout) would vouch
				// for an empty object: the reader would read zeros where
				// the file had data. Refused, as Lustre's lvbo_init fails
				// the enqueue: the reader finds the file's new layout or
				// reports the loss.
				s.mu.Unlock()
				s.log.Debug("ldlm: enqueue on a missing object", "resource", req.Resource, "from", r.Peer)
				return nil, -int32(syscall.ENOENT)
			case errors.Is(err, ErrNoObject): // a replayed lock's object may be gone: its LVB stays empty
			case err != nil:
				s.log.Warn("ldlm: lvb init", "resource", req.Resource, "err", err)
			default:
				newLVB = &lvb
			}
		}
	}
	if replaying && req.Flags&Replay == 0 && exp.Target().Recovering() {
		// A lock the client waited for: the one it waited for may not be
		// replayed yet.
		req.Flags |= RecoveryWait
	}
	s.mu.owners[owner] = exp
	result, err := s.mu.ns.Enqueue(req)
	if err != nil {
		s.mu.Unlock()
		if errors.Is(err, ErrWouldBlock) || errors.Is(err, ErrDeadlock) {
			return nil, -int32(Errno(err)) // an answer, not bad input
		}
		return s.bad(r, err)
	}
	if result.NewResource && newLVB != nil {
		s.mu.ns.SetLVB(result.Lock.Resource, *newLVB) // (it exists: just made)
	}
	l := result.Lock
	if l.Handle != 0 {
		s.mu.remote[l.Handle] = er.ClientHandle
		if replaying {
			s.mu.replayed[replay], s.mu.replayedKey[l.Handle] = l.Handle, replay
		}
	}
	if req.Flags&RecoveryWait != 0 && !s.mu.recovering {
		s.mu.recovering = true
		s.wg.Go(func() { s.recovered(exp.Target()) })
	}
	lvb, _ := s.mu.ns.LVB(l.Resource)
	work := s.effectsLocked(result.Effects)
	s.mu.Unlock()
	s.dispatch(work)

	rep.Handle = uint64(l.Handle)
	rep.Granted = l.State == Granted
	rep.Mode = uint32(l.Mode)
	rep.Policy = policyToWire(l.Policy)
	rep.NoTimeout = result.NoTimeout
	rep.CallbackPending = l.CallbackPending
	rep.Lvb = lvbToWire(lvb)
	return marshalEnqueueReply(&rep)
}

// recovered waits for the end of tgt's recovery, then grants the locks
// replayed as waiting, and calls back the locks they wait for.
func (s *Server) recovered(tgt *ptlrpc.Target) {
	select {
	case <-tgt.RecoveryDone():
	case <-s.ctx.Done():
		return
	}
	s.mu.Lock()
	s.mu.recovering = false
	work := s.effectsLocked(s.mu.ns.Recovered())
	s.mu.Unlock()
	s.dispatch(work)
}

// glimpseLock grants req, a glimpse's PR lock on a whole resource, if no
// lock conflicts with it and the resource's LVB is known (the object
// exists): a lock the holder keeps vouches for the size it carries until
// a writer calls it back. It reports false, having granted nothing,
// otherwise, and the glimpse asks the writers (Lustre's ofd_intent_policy
// grants a glimpse that meets no resistance and turns it into glimpse
// callbacks otherwise).
func (s *Server) glimpseLock(exp *ptlrpc.Export, owner Owner, req Request, clientHandle uint64, resent bool) (*ldlmv1.EnqueueReply, bool) {
	if s.cfg.LVBInit == nil || req.Mode != PR || req.Policy.Extent != Whole {
		return nil, false // no LVB to vouch for
	}
	req.Flags |= BlockNoWait | NoExpansion
	s.mu.Lock()
	if s.mu.closed || exp.Gone() { // gone: see handleEnqueue
		s.mu.Unlock()
		return nil, false
	}
	if resent && clientHandle != 0 {
		// The lock its first send got, if it got one (see handleEnqueue):
		// a second would never be given back.
		if rep, ok := s.resentAgainLocked(owner, clientHandle, req.Resource); ok {
			s.mu.Unlock()
			rep.LvbValid = true
			return rep, true
		}
	}
	result, err := s.mu.ns.Enqueue(req)
	if err != nil {
		s.mu.Unlock()
		return nil, false // ErrWouldBlock: a writer holds it
	}
	l := result.Lock
	ok := l.State == Granted // BlockNoWait never queues; be safe all the same
	switch {
	case !ok:
	case result.NewResource:
		ok = s.initLVBLocked(l.Resource) == nil
	default:
		// An LVB still empty may be one LVBInit found no object for (see
		// glimpse): no lock vouches for it.
		lvb, _ := s.mu.ns.LVB(l.Resource)
		ok = !lvb.empty()
	}
	if !ok {
		var work []astWork
		if eff, err := s.mu.ns.Cancel(l.Handle, owner); err == nil {
			work = s.effectsLocked(eff)
		}
		s.mu.Unlock()
		s.dispatch(work)
		return nil, false
	}
	s.mu.owners[owner] = exp
	s.mu.remote[l.Handle] = clientHandle
	lvb, _ := s.mu.ns.LVB(l.Resource)
	work := s.effectsLocked(result.Effects)
	s.mu.Unlock()
	s.dispatch(work)
	s.glLocks.Add(1)
	return &ldlmv1.EnqueueReply{Handle: uint64(l.Handle), Granted: true, Mode: uint32(l.Mode), Policy: policyToWire(l.Policy),
		CallbackPending: l.CallbackPending, Lvb: lvbToWire(lvb), LvbValid: true}, true
}

// initLVBLocked gives res, a resource just made, its LVB from LVBInit
// (which the caller has): the object's attributes, or, without an object
// (an error wrapping ErrNoObject, returned quietly), an empty LVB.
func (s *Server) initLVBLocked(res Resource) error {
	lvb, err := s.cfg.LVBInit(res)
	if err == nil {
		err = s.mu.ns.SetLVB(res, lvb)
	}
	if err != nil && !errors.Is(err, ErrNoObject) {
		s.log.Warn("ldlm: lvb init", "resource", res, "err", err)
	}
	return err
}

// cancelHandles cancels locks of owner and returns how many it cancelled.
// Early cancels (inside an enqueue) are best effort; an explicit CANCEL is
// strict: a handle of another owner's lock refuses the whole request, and
// so does a request none of whose handles is known (ErrUnknownHandle).
// Unknown handles beside known ones are skipped, as Lustre's
// ldlm_request_cancel skips them: the server may have cancelled a lock
// itself (its holder answered a blocking AST as if it did not know it,
// or a callback timed out) while the holder's cancel of it was on its
// way, batched with others that must still go. A granted FLOCK lock is
// never cancelled; a strict CANCEL that named only such locks (besides
// unknown ones) fails with errFlockGranted.
func (s *Server) cancelHandles(owner Owner, handles []uint64, strict bool) (int, error) {
	s.mu.Lock()
	if strict {
		var unknown error
		known := 0
		for _, h := range handles {
			l, err := s.mu.ns.Lookup(Handle(h))
			if err != nil {
				unknown = err
				continue
			}
			if l.Owner != owner {
				s.mu.Unlock()
				return 0, fmt.Errorf("%w: lock %v", ErrNotOwner, Handle(h))
			}
			known++
		}
		if known == 0 {
			s.mu.Unlock()
			return 0, unknown
		}
	}
	var work []astWork
	n := 0
	var refused error
	for _, h := range handles {
		if l, err := s.mu.ns.Lookup(Handle(h)); err == nil && l.Owner == owner && l.Resource.Type == TypeFlock && l.State == Granted {
			// A client gives back a FLOCK lock only when it gives up
			// waiting for it (it unlocks granted ones by enqueue); this
			// cancel came after the grant, which merged the owner's locks
			// into it: cancelling it would drop those too. The wait
			// succeeded; the client hears so (errFlockGranted).
			refused = fmt.Errorf("%w: cancel of %v", errFlockGranted, Handle(h))
			continue
		}
		eff, err := s.mu.ns.Cancel(Handle(h), owner)
		if err != nil {
			s.log.Debug("ldlm: cancel", "lock", Handle(h), "err", err)
			continue
		}
		n++
		s.forgetLocked(Handle(h))
		work = append(work, s.effectsLocked(eff)...)
	}
	s.mu.Unlock()
	s.dispatch(work)
	if strict && n == 0 && refused != nil {
		return 0, refused
	}
	return n, nil
}

// errFlockGranted refuses the cancel of a granted FLOCK lock (EBUSY on
// the wire): see cancelHandles.
var errFlockGranted = errors.New("ldlm: FLOCK lock granted before its wait was given up")

func (s *Server) handleCancel(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	exp := r.Export()
	if exp == nil {
		return nil, -int32(syscall.ENOTCONN)
	}
	var cr ldlmv1.CancelRequest
	if err := cr.UnmarshalVT(r.Body); err != nil { // on the stack (see Client.Enqueue)
		return s.bad(r, fmt.Errorf("%w: cancel body: %v", ErrInvalid, err))
	}
	if len(cr.Handles) == 0 {
		return s.bad(r, fmt.Errorf("%w: cancel of no lock", ErrInvalid))
	}
	s.cancels.Add(1)
	if _, err := s.cancelHandles(ownerOf(exp), cr.Handles, true); err != nil {
		if errors.Is(err, errFlockGranted) {
			return nil, -int32(syscall.EBUSY) // an answer, not bad input
		}
		return s.bad(r, err)
	}
	return nil, 0
}

func (s *Server) handleConvert(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	exp := r.Export()
	if exp == nil {
		return nil, -int32(syscall.ENOTCONN)
	}
	var cr ldlmv1.ConvertRequest
	if err := ptlrpc.Unmarshal(r.Body, &cr); err != nil {
		return s.bad(r, fmt.Errorf("%w: convert body: %v", ErrInvalid, err))
	}
	s.converts.Add(1)
	s.mu.Lock()
	l, work, err := s.convertLocked(ownerOf(exp), &cr)
	s.mu.Unlock()
	if err != nil {
		return s.bad(r, err)
	}
	s.dispatch(work)
	return marshal(&ldlmv1.ConvertReply{Mode: uint32(l.Mode), Policy: policyToWire(l.Policy)})
}

// convertLocked converts owner's lock as cr says (LDLM_CONVERT, or one
// an enqueue or an MDS request carries) and returns the lock as it now
// stands and the callbacks to send.
func (s *Server) convertLocked(owner Owner, cr *ldlmv1.ConvertRequest) (Lock, []astWork, error) {
	var to Conversion
	if cr.Mode != 0 {
		m, err := modeFromWire(cr.Mode)
		if err != nil {
			return Lock{}, nil, err
		}
		to.Mode = m
	}
	to.Bits = Bits(cr.Bits)
	res, err := s.mu.ns.Convert(Handle(cr.Handle), owner, to)
	if err != nil {
		return Lock{}, nil, err
	}
	// The holder answered its blocking AST: if the lock is called back
	// again for what it kept, it has a new callback timeout for that.
	s.stopTimerLocked(res.Lock.Handle)
	return res.Lock, s.effectsLocked(res.Effects), nil
}

func marshal(m proto.Message) ([]byte, int32) {
	b, err := ptlrpc.Marshal(m)
	if err != nil {
		return nil, -int32(syscall.EIO)
	}
	return b, 0
}

// marshalEnqueueReply is marshal without the interface, through which
// rep would escape to the heap.
func marshalEnqueueReply(rep *ldlmv1.EnqueueReply) ([]byte, int32) {
	b, err := rep.MarshalVT()
	if err != nil {
		return nil, -int32(syscall.EIO)
	}
	return b, 0
}

// forgetLocked drops what the server keeps about a lock that is gone.
func (s *Server) forgetLocked(h Handle) {
	s.stopTimerLocked(h)
	delete(s.mu.remote, h)
	delete(s.mu.discard, h)
	if k, ok := s.mu.replayedKey[h]; ok {
		delete(s.mu.replayed, k)
		delete(s.mu.replayedKey, h)
	}
}

// replayKey names a replayed lock by its owner and its client's handle.
type replayKey struct {
	owner  Owner
	client uint64
}

// replayedAgain answers a lock replay the server has granted already, as
// it did the first time, if it has.
func (s *Server) replayedAgain(k replayKey) (*ldlmv1.EnqueueReply, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replayedAgainLocked(k)
}

// replayedAgainLocked is replayedAgain with s.mu held.
func (s *Server) replayedAgainLocked(k replayKey) (*ldlmv1.EnqueueReply, bool) {
	h, ok := s.mu.replayed[k]
	if !ok {
		return nil, false
	}
	l, err := s.mu.ns.Lookup(h)
	if err != nil || l.Owner != k.owner {
		return nil, false
	}
	s.log.Debug("ldlm: lock replayed again: the lock of its first replay", "owner", k.owner, "handle", h)
	return s.existingReplyLocked(l), true
}

// resentAgainLocked answers a resent enqueue with the lock its first send
// got, if it got one: owner's lock on res that the client names
// clientHandle. Only the resource's locks are looked at, not every
// lock's client handle: resends are few, but locks many. s.mu is held.
func (s *Server) resentAgainLocked(owner Owner, clientHandle uint64, res Resource) (*ldlmv1.EnqueueReply, bool) {
	for _, l := range s.mu.ns.Locks(res) {
		if l.Owner == owner && s.mu.remote[l.Handle] == clientHandle {
			s.log.Debug("ldlm: enqueue resent: the lock of its first send", "owner", owner, "handle", l.Handle)
			return s.existingReplyLocked(l), true
		}
	}
	return nil, false
}

// existingReplyLocked is the enqueue reply of l, a lock granted or queued
// already. s.mu is held.
func (s *Server) existingReplyLocked(l Lock) *ldlmv1.EnqueueReply {
	lvb, _ := s.mu.ns.LVB(l.Resource)
	return &ldlmv1.EnqueueReply{Handle: uint64(l.Handle), Granted: l.State == Granted, Mode: uint32(l.Mode), Policy: policyToWire(l.Policy),
		CallbackPending: l.CallbackPending, Lvb: lvbToWire(lvb)}
}

// armTimerLocked starts the callback timer of h, owned by owner, unless
// it runs already.
func (s *Server) armTimerLocked(h Handle, owner Owner) {
	if s.mu.timers[h] != nil {
		return
	}
	// t is read under s.mu, after it is set: the timer may fire before
	// AfterFunc returns.
	var t *time.Timer
	t = time.AfterFunc(s.callbackTimeout(), func() { s.callbackExpired(h, owner, &t) })
	s.mu.timers[h] = t
}

func (s *Server) stopTimerLocked(h Handle) {
	if t := s.mu.timers[h]; t != nil {
		t.Stop()
		delete(s.mu.timers, h)
	}
}

// effectsLocked turns a core decision into callbacks to send and callback
// timers.
func (s *Server) effectsLocked(eff Effects) []astWork {
	var work []astWork
	for _, h := range eff.Removed {
		s.forgetLocked(h)
		if ch := s.mu.waiters[h]; ch != nil {
			delete(s.mu.waiters, h)
			ch <- fmt.Errorf("%w: lock %v dropped while waiting", ErrUnknownHandle, h)
		}
	}
	for _, b := range eff.Blocking {
		exp := s.mu.owners[b.Lock.Owner]
		if exp == nil {
			continue
		}
		h, owner := b.Lock.Handle, b.Lock.Owner
		_, discard := s.mu.discard[b.By.Handle]
		work = append(work, astWork{exp: exp, op: wire.LDLMBlCallback, lock: h, body: &ldlmv1.BlockingAST{
			Handle: uint64(h), ClientHandle: s.mu.remote[h], ConflictMode: uint32(b.By.Mode), ConflictPolicy: policyToWire(b.By.Policy),
			DiscardData: discard}})
		s.armTimerLocked(h, owner)
	}
	for _, g := range eff.Granted {
		if g.CallbackPending && s.mu.owners[g.Owner] != nil {
			// It waited while a later request conflicted with it: its
			// holder learns from the grant that it is called back
			// already, and has the callback timeout to give it back
			// like any lock called back (Lustre's ldlm_add_waiting_lock
			// at grant of an AST-sent lock).
			s.armTimerLocked(g.Handle, g.Owner)
		}
		if ch := s.mu.waiters[g.Handle]; ch != nil {
			delete(s.mu.waiters, g.Handle)
			ch <- nil // the waiting goroutine answers for the grant
			continue
		}
		exp := s.mu.owners[g.Owner]
		if exp == nil {
			continue
		}
		lvb, _ := s.mu.ns.LVB(g.Resource)
		work = append(work, astWork{exp: exp, op: wire.LDLMCpCallback, lock: g.Handle, body: &ldlmv1.CompletionAST{
			Handle: uint64(g.Handle), ClientHandle: s.mu.remote[g.Handle], Mode: uint32(g.Mode), Policy: policyToWire(g.Policy),
			Lvb: lvbToWire(lvb), CallbackPending: g.CallbackPending}})
	}
	for _, f := range eff.Failed {
		if ch := s.mu.waiters[f.Lock.Handle]; ch != nil {
			delete(s.mu.waiters, f.Lock.Handle)
			ch <- f.Err
			s.forgetLocked(f.Lock.Handle)
			continue
		}
		exp := s.mu.owners[f.Lock.Owner]
		if exp != nil {
			work = append(work, astWork{exp: exp, op: wire.LDLMCpCallback, lock: f.Lock.Handle, body: &ldlmv1.CompletionAST{
				Handle: uint64(f.Lock.Handle), ClientHandle: s.mu.remote[f.Lock.Handle], Status: -int32(Errno(f.Err))}})
		}
		s.forgetLocked(f.Lock.Handle)
	}
	return work
}

// dispatch queues the callbacks one call decided as one batch for the
// AST workers, waiting for room (a bounded queue: back-pressure on the
// handlers that cause callbacks).
func (s *Server) dispatch(work []astWork) {
	if len(work) == 0 {
		return
	}
	select {
	case s.ast <- work:
	case <-s.ctx.Done():
	}
}

// astWorker sends callback batches until Close.
func (s *Server) astWorker() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case w := <-s.ast:
			s.sendASTs(w)
		}
	}
}

// sendASTs sends a batch of blocking and completion ASTs as one request
// set. A holder that cannot be reached, or fails the callback, is evicted.
// One that no longer knows the lock (it cancelled it meanwhile, or lost
// track of it) answers ESTALE: the lock is cancelled on its behalf.
func (s *Server) sendASTs(work []astWork) {
	calls := make([]ptlrpc.Call, 0, len(work))
	sent := work[:0:0]
	for _, w := range work {
		body, err := ptlrpc.Marshal(w.body)
		if err != nil {
			s.log.Error("ldlm: marshal callback", "op", w.op, "err", err)
			continue
		}
		switch w.op {
		case wire.LDLMBlCallback:
			s.blASTs.Add(1)
		case wire.LDLMCpCallback:
			s.cpASTs.Add(1)
		}
		calls = append(calls, ptlrpc.Call{Target: w.exp.Peer(), Portal: s.cfg.CallbackPortal, Opcode: w.op, Body: body})
		sent = append(sent, w)
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.callbackTimeout())
	defer cancel()
	for i, r := range s.cfg.Client.CallSet(ctx, calls) {
		w, err := sent[i], r.Err
		switch {
		case err == nil || s.ctx.Err() != nil:
		case errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.EINVAL):
			// A completion too: a client that gave up its enqueue while
			// the request was in flight never learned the handle, and
			// would never give the lock back (with a waiter behind it,
			// granted callback-pending, no blocking AST follows: its
			// timer would evict a client that holds nothing).
			if w.op == wire.LDLMBlCallback || w.op == wire.LDLMCpCallback {
				s.log.Info("ldlm: holder does not know the lock, cancelling it", "op", w.op, "lock", w.lock, "client", w.exp.ClientUUID())
				s.handOff(ownerOf(w.exp), uint64(w.lock), nil)
			}
		default:
			s.astErrs.Add(1)
			s.log.Warn("ldlm: callback failed, evicting the client", "op", w.op, "lock", w.lock, "client", w.exp.ClientUUID(), "peer", w.exp.Peer(), "err", err)
			s.handOff("", 0, w.exp)
		}
	}
}

// handOff leaves the cancel of lock h of owner, or the eviction of exp if
// not nil, to handoffLoop (see Server.handoff).
func (s *Server) handOff(owner Owner, h uint64, exp *ptlrpc.Export) {
	s.handoff.Lock()
	if exp != nil {
		if s.handoff.evicts == nil {
			s.handoff.evicts = map[*ptlrpc.Export]struct{}{}
		}
		s.handoff.evicts[exp] = struct{}{}
	} else {
		if s.handoff.cancels == nil {
			s.handoff.cancels = map[Owner]map[uint64]struct{}{}
		}
		if s.handoff.cancels[owner] == nil {
			s.handoff.cancels[owner] = map[uint64]struct{}{}
		}
		s.handoff.cancels[owner][h] = struct{}{}
	}
	s.handoff.Unlock()
	select {
	case s.handoff.kick <- struct{}{}:
	default:
	}
}

// handoffLoop makes the cancels and evictions the AST workers handed off,
// until Close.
func (s *Server) handoffLoop() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.handoff.kick:
		}
		s.handoff.Lock()
		cancels, evicts := s.handoff.cancels, s.handoff.evicts
		s.handoff.cancels, s.handoff.evicts = nil, nil
		s.handoff.Unlock()
		for owner, hs := range cancels {
			handles := make([]uint64, 0, len(hs))
			for h := range hs {
				handles = append(handles, h)
			}
			s.cancelHandles(owner, handles, false)
		}
		for exp := range evicts {
			s.evict(exp)
		}
	}
}

// callbackExpired evicts the holder of a lock it did not give back within
// the callback timeout after a blocking AST. *t is the timer that fired:
// one stopped while this call waited for s.mu (the lock was cancelled or
// converted out of its conflicts just in time), or replaced by a later
// blocking AST's, no longer counts.
func (s *Server) callbackExpired(h Handle, owner Owner, t **time.Timer) {
	s.mu.Lock()
	if s.mu.timers[h] != *t {
		s.mu.Unlock()
		return
	}
	delete(s.mu.timers, h)
	l, err := s.mu.ns.Lookup(h)
	exp := s.mu.owners[owner]
	s.mu.Unlock()
	if err != nil || l.Owner != owner || exp == nil {
		return // cancelled meanwhile
	}
	s.cbTimeouts.Add(1)
	s.log.Warn("ldlm: lock callback timer expired, evicting the client", "lock", h, "resource", l.Resource, "mode", l.Mode,
		"client", exp.ClientUUID(), "peer", exp.Peer(), "timeout", s.callbackTimeout())
	s.evict(exp)
}

func (s *Server) evict(exp *ptlrpc.Export) {
	if s.cfg.Evict != nil {
		s.cfg.Evict(exp)
		return
	}
	s.ExportGone(exp)
}

// ExportGone drops every lock of a client that disconnected or was evicted
// and grants what waited behind them. Call it from the target's OnGone.
func (s *Server) ExportGone(exp *ptlrpc.Export) {
	owner := ownerOf(exp)
	s.mu.Lock()
	if _, ok := s.mu.owners[owner]; !ok {
		s.mu.Unlock()
		return
	}
	eff := s.mu.ns.DropOwner(owner)
	delete(s.mu.owners, owner)
	work := s.effectsLocked(eff)
	s.mu.Unlock()
	if n := len(eff.Removed); n > 0 {
		s.log.Info("ldlm: dropped the locks of a departed client", "client", exp.ClientUUID(), "locks", n)
	}
	s.dispatch(work)
}

// Glimpse returns what the holders of write locks on res know of its
// attributes (their cached size can be ahead of the server's object),
// merged with the resource's LVB, by a glimpse AST to each (Lustre's
// ldlm_glimpse_locks). Holders that do not answer are left out.
func (s *Server) Glimpse(ctx context.Context, res Resource) (LVB, error) {
	lvb, _, err := s.glimpse(ctx, res)
	return lvb, err
}

// glimpse is Glimpse, also saying whether the LVB vouches for the object
// (valid): the resource has locks, whose LVB LVBInit filled and writes
// and glimpse callbacks keep up, or it has none, and LVBInit read the
// object just now (as Lustre's glimpse of an unlocked resource runs
// lvbo_init) — no client caches anything of it then. Without LVBInit, or
// without an object, it does not.
func (s *Server) glimpse(ctx context.Context, res Resource) (LVB, bool, error) {
	s.mu.Lock()
	lvb, known := s.mu.ns.LVB(res)
	if !known {
		s.mu.Unlock()
		if s.cfg.LVBInit == nil {
			return LVB{}, false, nil
		}
		lvb, err := s.cfg.LVBInit(res)
		switch {
		case errors.Is(err, ErrNoObject):
			return LVB{}, false, nil
		case err != nil:
			return LVB{}, false, err
		}
		return lvb, true, nil
	}
	// An LVB still empty may be one LVBInit found no object for.
	valid := s.cfg.LVBInit != nil && !lvb.empty()
	start := lvb
	var calls []ptlrpc.Call
	for _, l := range s.mu.ns.Locks(res) {
		if l.State != Granted || (l.Mode != PW && l.Mode != EX && l.Mode != GROUP) {
			continue
		}
		exp := s.mu.owners[l.Owner]
		if exp == nil {
			continue
		}
		body, err := ptlrpc.Marshal(&ldlmv1.GlimpseAST{Handle: uint64(l.Handle), ClientHandle: s.mu.remote[l.Handle]})
		if err != nil {
			s.mu.Unlock()
			return LVB{}, false, err
		}
		calls = append(calls, ptlrpc.Call{Target: exp.Peer(), Portal: s.cfg.CallbackPortal, Opcode: wire.LDLMGlCallback, Body: body})
	}
	s.mu.Unlock()
	if len(calls) == 0 {
		return lvb, valid, nil
	}
	s.glASTs.Add(uint64(len(calls)))
	ctx, cancel := context.WithTimeout(ctx, s.callbackTimeout())
	defer cancel()
	for i, r := range s.cfg.Client.CallSet(ctx, calls) {
		var gr ldlmv1.GlimpseReply
		if r.Err == nil {
			r.Err = ptlrpc.Unmarshal(r.Reply, &gr)
		}
		if r.Err != nil {
			s.astErrs.Add(1)
			s.log.Info("ldlm: glimpse failed", "resource", res, "peer", calls[i].Target, "err", r.Err)
			continue
		}
		lvb = mergeLVB(lvb, lvbFromWire(gr.Lvb))
	}
	// The holders' views go into the LVB only if nothing set it
	// meanwhile: an OST's update after a change (a setattr putting mtime
	// back, a truncate) is newer than what the holders said before it,
	// and max would undo it.
	s.mu.Lock()
	if cur, ok := s.mu.ns.LVB(res); ok && cur.sameAttrs(start) {
		s.mu.ns.SetLVB(res, mergeLVB(cur, lvb))
	}
	s.mu.Unlock()
	return lvb, valid, nil
}

// SetLVB updates a resource's LVB (an OST after a write or truncate).
func (s *Server) SetLVB(res Resource, v LVB) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.ns.SetLVB(res, v)
}

// clientHandleKey carries an intent enqueue's client handle in the ctx the
// IntentPolicy gets, for IntentLock.
type clientHandleKey struct{}

// LockLocal takes a lock for the target itself (owner LocalOwner), as
// Lustre's MDT locks the objects a reint changes: it enqueues req, sends
// blocking ASTs to the holders of conflicting client locks, and waits
// until it is granted. The caller calls release once the change is done,
// which grants what waited behind. Take several locks in a fixed order
// (by resource) so that two callers never wait on each other. It fails
// with ctx's error (nothing held), ESHUTDOWN after Close, or an error
// wrapping ErrInvalid for a malformed request. wait, if not 0, bounds
// the wait for conflicting locks to go (context.DeadlineExceeded after
// it): unlike a deadline on ctx it costs nothing when the lock is granted
// at once, as almost every one is. Safe for concurrent use.
func (s *Server) LockLocal(ctx context.Context, req Request, wait time.Duration) (release func(), err error) {
	req.Owner = LocalOwner
	l, err := s.enqueueWait(ctx, req, nil, 0, wait)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { s.cancelLocal(l.Handle, LocalOwner) }) }, nil
}

// IntentLock, called by an IntentPolicy with the ctx and request it was
// given, enqueues req for the client that sent the intent and waits until
// it is granted (blocking ASTs go to the holders of conflicting locks), so
// that the policy reads what the lock protects under it and returns it in
// IntentResult.Granted (Lustre's mdt_object_lock in an intent). A policy
// that does not return the lock after all gives it back with
// CancelIntentLock. It fails with ctx's error (nothing held), ESHUTDOWN,
// or ErrInvalid for a malformed request. wait is LockLocal's.
func (s *Server) IntentLock(ctx context.Context, r *ptlrpc.Request, req Request, wait time.Duration) (Lock, error) {
	exp := r.Export()
	if exp == nil {
		return Lock{}, fmt.Errorf("%w: intent lock without an export", ErrInvalid)
	}
	ch, _ := ctx.Value(clientHandleKey{}).(uint64)
	req.Owner = ownerOf(exp)
	l, err := s.enqueueWait(ctx, req, exp, ch, wait)
	if err == nil && exp.Gone() {
		// The client went while it waited: ExportGone may have run
		// before the lock existed.
		s.cancelLocal(l.Handle, req.Owner)
		return Lock{}, fmt.Errorf("ldlm: intent lock for a departed client: %w", syscall.ENOTCONN)
	}
	return l, err
}

// CancelFor cancels the locks handles name that the client of r holds,
// as the cancels an MDS request carries (early lock cancel); handles the
// server no longer knows, or that are another client's, are skipped. It
// returns how many it cancelled.
func (s *Server) CancelFor(r *ptlrpc.Request, handles []uint64) int {
	exp := r.Export()
	if exp == nil {
		return 0
	}
	return s.cancelEarly(ownerOf(exp), handles)
}

// cancelEarly cancels the locks of owner a request gives back with it.
func (s *Server) cancelEarly(owner Owner, handles []uint64) int {
	if len(handles) == 0 {
		return 0
	}
	n, _ := s.cancelHandles(owner, handles, false)
	s.earlyCancels.Add(uint64(n))
	return n
}

// ConvertFor applies the conversions a request of r's client carries
// (Client.TakeConverts: an MDS reint's), as LDLM_CONVERTs would.
func (s *Server) ConvertFor(r *ptlrpc.Request, cvs []*ldlmv1.ConvertRequest) int {
	exp := r.Export()
	if exp == nil {
		return 0
	}
	return s.convertEarly(ownerOf(exp), cvs)
}

// convertEarly applies conversions a request carries; one the server
// refuses (an unknown handle, another client's lock, more bits than the
// lock has) is skipped and logged: the client gives the lock back whole
// at its next blocking AST. It returns how many it applied.
func (s *Server) convertEarly(owner Owner, cvs []*ldlmv1.ConvertRequest) int {
	if len(cvs) == 0 {
		return 0
	}
	n := 0
	var work []astWork
	s.mu.Lock()
	for _, cr := range cvs {
		_, w, err := s.convertLocked(owner, cr)
		if err != nil {
			s.log.Debug("ldlm: early convert", "lock", Handle(cr.Handle), "bits", Bits(cr.Bits), "err", err)
			continue
		}
		work = append(work, w...)
		n++
	}
	s.mu.Unlock()
	s.dispatch(work)
	s.converts.Add(uint64(n))
	return n
}

// CancelIntentLock gives back a lock IntentLock took that the policy does
// not return after all.
func (s *Server) CancelIntentLock(r *ptlrpc.Request, l Lock) {
	if exp := r.Export(); exp != nil {
		s.cancelLocal(l.Handle, ownerOf(exp))
	}
}

// enqueueWait enqueues req and waits for its grant. exp, if not nil, is
// the client owning it, whose handle clientHandle names it in callbacks.
func (s *Server) enqueueWait(ctx context.Context, req Request, exp *ptlrpc.Export, clientHandle uint64, limit time.Duration) (Lock, error) {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return Lock{}, fmt.Errorf("ldlm: %s: %w", s.mu.ns.Name(), syscall.ESHUTDOWN)
	}
	if exp != nil {
		if exp.Gone() { // see handleEnqueue
			s.mu.Unlock()
			return Lock{}, fmt.Errorf("ldlm: lock for a departed client: %w", syscall.ENOTCONN)
		}
		s.mu.owners[req.Owner] = exp
	}
	result, err := s.mu.ns.Enqueue(req)
	if err != nil {
		s.mu.Unlock()
		return Lock{}, err
	}
	l := result.Lock
	if exp != nil {
		s.mu.remote[l.Handle] = clientHandle
	}
	if req.Flags&DiscardData != 0 {
		s.mu.discard[l.Handle] = struct{}{}
	}
	var wait chan error
	if l.State != Granted {
		wait = make(chan error, 1)
		s.mu.waiters[l.Handle] = wait
	}
	work := s.effectsLocked(result.Effects)
	s.mu.Unlock()
	s.dispatch(work)
	if wait == nil {
		return l, nil
	}
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	// The lock that blocks it may be the requester's own: its cancel comes
	// on the connection this handler's request came on.
	ptlrpc.Blocking(ctx)
	select {
	case err := <-wait:
		if err != nil {
			return Lock{}, err
		}
	case <-ctx.Done():
		s.mu.Lock()
		if s.mu.waiters[l.Handle] == wait {
			delete(s.mu.waiters, l.Handle)
		}
		s.mu.Unlock()
		s.cancelLocal(l.Handle, req.Owner) // granted meanwhile or not
		return Lock{}, ctx.Err()
	}
	s.mu.Lock()
	g, err := s.mu.ns.Lookup(l.Handle)
	s.mu.Unlock()
	if err != nil {
		return Lock{}, err // dropped meanwhile (its client was evicted)
	}
	return g, nil
}

// cancelLocal cancels one lock on the server's own behalf and performs
// what that decides.
func (s *Server) cancelLocal(h Handle, owner Owner) {
	s.mu.Lock()
	eff, err := s.mu.ns.Cancel(h, owner)
	if err != nil {
		s.mu.Unlock()
		return
	}
	s.forgetLocked(h)
	work := s.effectsLocked(eff)
	s.mu.Unlock()
	s.dispatch(work)
}

// Close stops the callback senders and the callback timers. Call it after
// the service that runs the handlers is closed.
func (s *Server) Close() {
	s.mu.Lock()
	s.mu.closed = true
	for h, t := range s.mu.timers {
		t.Stop()
		delete(s.mu.timers, h)
	}
	for h, ch := range s.mu.waiters {
		delete(s.mu.waiters, h)
		ch <- fmt.Errorf("ldlm: %s: %w", s.mu.ns.Name(), syscall.ESHUTDOWN)
	}
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
}
