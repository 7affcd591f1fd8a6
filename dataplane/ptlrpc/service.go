package ptlrpc

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nacrefs/nacre/dataplane/nrs"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/lnet"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// Network errnos the core itself sends (Linux values, as Lustre's).
const (
	errnoEAGAIN     = 11
	errnoEIO        = 5
	errnoEMSGSIZE   = 90
	errnoEOPNOTSUPP = 95
)

// maxMessage is the largest PtlRPC message one LNet PUT carries.
const maxMessage = lwire.MTU

// replySendTimeout bounds how long a reply PUT may wait for LNet credits.
const replySendTimeout = 5 * time.Second

// Handler serves one opcode. It returns the reply body and a status: 0, or
// an errno (negative, or positive and then negated) sent back in the
// reply's status with the body. ctx ends when the service closes.
// req.Body stays valid only until the handler returns; the buffer is
// reused.
type Handler func(ctx context.Context, req *Request) (body []byte, status int32)

// HandlerFlags qualify a handler (Lustre's tgt_handler th_flags).
type HandlerFlags uint32

// The handler flags.
const (
	// Modifying handlers change persistent state: their requests get a
	// transno, and their replies are kept per export so a resent request is
	// answered from the kept reply instead of running twice.
	Modifying HandlerFlags = 1 << iota
	// HasBulk handlers may move bulk data (Request.BulkGet, BulkPut); a
	// request with a bulk buffer for a handler without it is refused.
	HasBulk
	// NoExport handlers serve requests that need no connection (selftest,
	// callbacks); the request's handle is not looked at.
	NoExport
	// HighPriority handlers serve requests that other handlers may be
	// waiting for: LDLM_CANCEL, which a handler waiting in a lock enqueue
	// for clients to give their locks back needs (Lustre serves cancels
	// on ldlm_canceld, apart from the requests that wait for them). They
	// are queued apart and run by handler goroutines of their own
	// (hpThreads), so that requests blocked in their handlers, however
	// many, never hold them up.
	HighPriority
)

// hpThreads is how many handler goroutines serve HighPriority requests.
const hpThreads = 2

// HandlerSpec is one entry of a service's handler table.
type HandlerSpec struct {
	// Fn serves the requests.
	Fn Handler
	// Flags qualify the handler.
	Flags HandlerFlags
	// FailID, if armed in ServiceConfig.Faults, makes the service drop the
	// handler's requests without running it.
	FailID FailID
}

// Request is one incoming request as a Handler sees it.
type Request struct {
	// Header is the request's decoded header.
	Header wire.Header
	// Body is the request body, a view into the service's request buffer.
	Body []byte
	// Peer is the process that sent the request.
	Peer lwire.ProcessID
	// Arrived is when the request landed.
	Arrived time.Time

	svc         *Service
	spec        *HandlerSpec
	replyPortal uint32
	bulkPortal  uint32
	buf         *rqbd
	exp         *Export
	admitted    bool // exp.admit accepted it: exp.finish must follow
	transno     uint64
	// replayTransno is the transno of the previous life a replay run in
	// its turn (Target.queueReplay) makes its change under again.
	replayTransno uint64
	// untilReplayed says the request is parked until request replay is
	// over, not recovery (Target.park).
	untilReplayed bool
	// keepReply: the handler asked for its reply to be stored where it
	// survives a restart (KeepReply).
	keepReply bool

	// Bulk results for the reply.
	bulkMoved  uint32
	replyCksum uint32
	cksumSet   bool

	// Early replies, guarded by svc.erMu.
	erDeadline time.Time // when the client gives up, as far as it told us
	erNext     time.Time // when to send the next early reply
	erIdx      int       // index in svc.erHeap, -1 if not in it
	erTimeout  time.Duration

	// The final reply's message (see msgBufs); replyUsed once it is sent.
	reply     msgBufs
	replyUsed bool

	// hctx is the handler's context when it runs on the goroutine that
	// received the request (queue): it carries the lnet.Releaser that
	// Blocking calls.
	hctx handlerCtx
	// nrsItem is the request's place in the NRS queue and replyCtx the
	// context of its final reply's PUT, here rather than in allocations
	// of their own.
	nrsItem  nrs.Item
	replyCtx sendCtx
}

// Export returns the export the request came through, nil for NoExport
// handlers and connectionless services.
func (r *Request) Export() *Export { return r.exp }

// Replayed reports whether the client replays the request to a restarted
// server (MSG_REPLAY).
func (r *Request) Replayed() bool { return r.Header.Flags&wire.MsgReplay != 0 }

// Stale reports whether the connection r came on was replaced after r
// was let in: its export is gone (evicted, or the client connected
// afresh, as a restarted one does) or the client reconnected since. A
// request is checked for that when it arrives; a handler whose effect
// depends on being its client's latest word (an orphan cleanup) checks
// again once it holds what serializes it, since a request queued behind
// a slow one can run after a later one of its client's next connection.
func (r *Request) Stale() bool {
	e := r.exp
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gone || r.Header.ConnCount < e.connCount
}

// Transno returns the transno the request's change was given, 0 if none
// (yet).
func (r *Request) Transno() uint64 { return r.transno }

// KeepReply asks that the reply of this Modifying request, should it make
// a change, be kept by the target's ReplyStore, so that the client's
// resend after a restart that lost the reply gets it rather than running
// the change again (Lustre's reply data in last_rcvd: a mkdir whose reply
// was lost would fail with EEXIST). Only for replies that stay true
// after a restart: not those naming open handles or locks, which the
// restart lost.
func (r *Request) KeepReply() { r.keepReply = true }

// AssignTransno gives a Modifying request on an export its transno, once,
// and calls fn with it while no other request of the target can get one,
// so a storage layer tags its transactions in transno order (an OSD's
// LastCommitted relies on it). It returns the transno, or 0 for a request
// without an export or a handler without Modifying. A Modifying handler
// that does not call it gets a transno after it returns successfully.
func (r *Request) AssignTransno(fn func(transno uint64)) uint64 {
	if r.exp == nil || r.spec == nil || r.spec.Flags&Modifying == 0 {
		return 0
	}
	if r.transno != 0 {
		return r.transno
	}
	t := r.exp.target
	t.tmu.Lock()
	defer t.tmu.Unlock()
	r.transno = t.takeTransno(r.replayTransno)
	if fn != nil {
		fn(r.transno)
	}
	return r.transno
}

// ServiceConfig configures a Service.
type ServiceConfig struct {
	// Name names the service in logs ("ost_io").
	Name string
	// RequestPortal is the LNet portal requests arrive on.
	RequestPortal uint32
	// Handlers serve the opcodes the service knows.
	Handlers map[wire.Opcode]HandlerSpec
	// Targets, if not nil, makes the service connection-oriented: it
	// serves ConnectOp, DisconnectOp and OBD_PING itself, and every other
	// request (unless its handler has NoExport) must name a live export of
	// one of these targets in its handle.
	Targets *TargetSet
	// ConnectOp and DisconnectOp are the service's connection opcodes
	// (OST_CONNECT, MDS_CONNECT, ...); 0 means OSTConnect and OSTDisconnect.
	ConnectOp, DisconnectOp wire.Opcode
	// MinThreads handler goroutines always run; up to MaxThreads when
	// requests wait. 0 means 2 and 16.
	MinThreads, MaxThreads int
	// BufferSize is the size of each request buffer; 0 means 1 MiB. It is
	// raised to HeaderSize+MaxBodySize if smaller.
	BufferSize int
	// Buffers is the number of request buffers; 0 means 4.
	Buffers int
	// MaxBuffers bounds the request buffers when requests that take long
	// (a bulk waiting for a slow client) hold them: a buffer is reposted
	// only once every request in it is done, so the service adds buffers
	// while fewer than two are posted, up to MaxBuffers, and keeps them
	// (Lustre grows its rqbds the same way). 0 means 4 × Buffers.
	MaxBuffers int
	// MaxBodySize is the largest request body accepted; 0 means 64 KiB. It
	// is capped so that header and body fit one LNet message.
	MaxBodySize int
	// MaxBulkSize is the largest bulk a request may carry; 0 means
	// DefaultMaxBulk. At most wire.MaxBulkSize.
	MaxBulkSize int
	// MaxQueued bounds the requests waiting for a handler; past it requests
	// get -EAGAIN. 0 means 1024.
	MaxQueued int
	// NRSPolicy is the initial NRS policy, "fifo" (default) or "tbf".
	NRSPolicy string
	// Clock drives NRS; nil means real time. Tests inject a fake one.
	Clock nrs.Clock
	// Faults are the armed fault-injection points; nil means none.
	Faults *Faults
	// Logger receives the service's logs; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultMaxBulk is the default largest bulk RPC, 4 MiB.
const DefaultMaxBulk = 4 << 20

// OpStats are the counters of one opcode.
type OpStats struct {
	// Count is how many requests were handled.
	Count uint64
	// Errors is how many of them got a non-zero status.
	Errors uint64
	// ServiceTime is the total time spent in the handler; MinServiceTime
	// and MaxServiceTime the shortest and the longest.
	ServiceTime, MinServiceTime, MaxServiceTime time.Duration
	// QueueTime is the total time requests waited for a handler;
	// MinQueueTime and MaxQueueTime the shortest and the longest wait.
	QueueTime, MinQueueTime, MaxQueueTime time.Duration
}

// ServiceStats are a snapshot of a Service's counters.
type ServiceStats struct {
	// Received counts every request that landed, valid or not.
	Received uint64
	// Malformed counts requests dropped because their header did not decode.
	Malformed uint64
	// Busy counts requests answered -EAGAIN because the queue was full.
	Busy uint64
	// Direct counts requests whose handler ran on the goroutine that
	// received them (nothing queued before them), not on a handler
	// goroutine.
	Direct uint64
	// Unsupported counts requests for opcodes without a handler.
	Unsupported uint64
	// Oversize counts requests answered -EMSGSIZE (body or bulk too big).
	Oversize uint64
	// NotConnected counts requests refused with -ENOTCONN.
	NotConnected uint64
	// Stale counts requests dropped as duplicates or from old connections.
	Stale uint64
	// Reconstructed counts resent requests answered from a kept reply.
	Reconstructed uint64
	// EarlyReplies counts early replies sent.
	EarlyReplies uint64
	// Dropped counts requests and replies dropped by fault injection.
	Dropped uint64
	// BulkChecksumErrors counts bulk writes whose data did not match the
	// client's checksum.
	BulkChecksumErrors uint64
	// BulkCRC32 and BulkCRC32C count the bulk transfers checksummed by
	// each algorithm: writes verified, reads summed for the reply.
	BulkCRC32, BulkCRC32C uint64
	// BulkBytes counts bulk bytes moved.
	BulkBytes uint64
	// ReplyErrors counts replies LNet refused to send.
	ReplyErrors uint64
	// Reposts counts request buffers posted again after filling up.
	Reposts uint64
	// Buffers is the number of request buffers (ServiceConfig.Buffers and
	// those added since), and Grown counts those added.
	Buffers int
	Grown   uint64
	// Threads is the number of handler goroutines running now.
	Threads int
	// Queued is the number of requests waiting for a handler.
	Queued int
	// HPThreads and HPQueued are the same for HighPriority requests,
	// which have goroutines and a queue of their own (0 without such
	// handlers).
	HPThreads, HPQueued int
	// ServiceEstimate is the adaptive service time estimate.
	ServiceEstimate time.Duration
	// Ops are the per-opcode counters of handled requests.
	Ops map[wire.Opcode]OpStats
}

// rqbd is one request buffer (Lustre's ptlrpc_request_buffer_desc).
type rqbd struct {
	mem      []byte
	md       lnet.MDHandle
	refs     int  // requests landed and not yet done
	full     bool // Unlink called
	unlinked bool // EventUnlink seen
	// reposting: a maybeRepost took it to post again (its last release
	// and its EventUnlink may both see it unlinked and unused).
	reposting bool
}

// Service serves requests on one portal. Its methods are safe for
// concurrent use.
type Service struct {
	ln       *lnet.LNet
	cfg      ServiceConfig
	handlers map[wire.Opcode]*HandlerSpec
	log      *slog.Logger
	maxReq   int
	ctx      context.Context
	cancel   context.CancelFunc
	nrs      *nrs.Head
	hp       *nrs.Head // HighPriority requests
	at       *estimator
	workers  sync.WaitGroup
	// unparked are the held requests (Target.park, Target.queueReplay)
	// being handled by the goroutine that let them go, not a worker's:
	// Close waits for them as for its workers. Added to under mu, and
	// only before closed.
	unparked sync.WaitGroup
	threads  atomic.Int32 // handler goroutines running
	idle     atomic.Int32 // handler goroutines waiting for work
	direct   atomic.Int32 // requests run by the goroutine that received them (queue), not finished
	// directRuns counts the requests run so.
	directRuns atomic.Uint64

	mu      sync.Mutex // guards bufs, closed, ops and the rqbds
	bufs    []*rqbd
	closed  bool
	ops     map[wire.Opcode]OpStats
	allGone chan struct{} // closed when every rqbd is unlinked after Close

	erMu   sync.Mutex // guards erHeap, erTimerAt and the requests' er* fields
	erHeap erHeap
	erWake chan struct{}
	// erTimerAt is when the early replier looks at the heap next: a
	// request due later needs no wake-up (one per request would cost a
	// goroutine switch on every RPC).
	erTimerAt time.Time
	erDone    chan struct{}
	erTimer   *time.Timer

	received, malformed, busy, unsupported, oversize, notConn, stale atomic.Uint64
	reconstructed, early, dropped, cksumErrs, bulkBytes, replyErrors atomic.Uint64
	cksumCRC32, cksumCRC32C                                          atomic.Uint64
	observer                                                         atomic.Pointer[func(op wire.Opcode, service, queue time.Duration)]
	reposts, grown                                                   atomic.Uint64
}

// ErrPortalTaken: another service of the LNet takes requests on the
// portal already (one portal, one service: a second would take some of
// the first one's requests).
var ErrPortalTaken = errors.New("ptlrpc: request portal taken")

// servicePortals are the request portals of the services running, by
// LNet, with the service's name.
var servicePortals struct {
	sync.Mutex
	m map[portalKey]string
}

type portalKey struct {
	ln     *lnet.LNet
	portal uint32
}

// claimPortal records a service called name on ln's portal, or fails with
// ErrPortalTaken.
func claimPortal(ln *lnet.LNet, portal uint32, name string) error {
	servicePortals.Lock()
	defer servicePortals.Unlock()
	k := portalKey{ln, portal}
	if other, ok := servicePortals.m[k]; ok {
		return fmt.Errorf("ptlrpc %s: %w: portal %d has service %s on this LNet", name, ErrPortalTaken, portal, other)
	}
	if servicePortals.m == nil {
		servicePortals.m = make(map[portalKey]string)
	}
	servicePortals.m[k] = name
	return nil
}

// releasePortal forgets the service of ln's portal.
func releasePortal(ln *lnet.LNet, portal uint32) {
	servicePortals.Lock()
	delete(servicePortals.m, portalKey{ln, portal})
	servicePortals.Unlock()
}

// NewService starts a service: it posts the request buffers and starts the
// handler goroutines. Close stops it.
func NewService(ln *lnet.LNet, cfg ServiceConfig) (*Service, error) {
	if cfg.MinThreads <= 0 {
		cfg.MinThreads = 2
	}
	if cfg.MaxThreads <= 0 {
		cfg.MaxThreads = max(16, cfg.MinThreads)
	}
	if cfg.MaxThreads < cfg.MinThreads {
		return nil, fmt.Errorf("ptlrpc %s: MaxThreads %d below MinThreads %d", cfg.Name, cfg.MaxThreads, cfg.MinThreads)
	}
	if cfg.BufferSize <= 0 {
		cfg.BufferSize = 1 << 20
	}
	if cfg.Buffers <= 0 {
		cfg.Buffers = 4
	}
	if cfg.MaxBuffers <= 0 {
		cfg.MaxBuffers = 4 * cfg.Buffers
	}
	cfg.MaxBuffers = max(cfg.MaxBuffers, cfg.Buffers)
	if cfg.MaxBodySize <= 0 {
		cfg.MaxBodySize = 64 << 10
	}
	if cfg.MaxBulkSize <= 0 {
		cfg.MaxBulkSize = DefaultMaxBulk
	}
	if cfg.MaxBulkSize > wire.MaxBulkSize {
		return nil, fmt.Errorf("ptlrpc %s: MaxBulkSize %d over %d", cfg.Name, cfg.MaxBulkSize, wire.MaxBulkSize)
	}
	if cfg.MaxQueued <= 0 {
		cfg.MaxQueued = 1024
	}
	if cfg.ConnectOp == 0 {
		cfg.ConnectOp, cfg.DisconnectOp = wire.OSTConnect, wire.OSTDisconnect
	}
	cfg.MaxBodySize = min(cfg.MaxBodySize, wire.MaxBodySize, maxMessage-wire.HeaderSize)
	maxReq := wire.HeaderSize + cfg.MaxBodySize
	cfg.BufferSize = max(cfg.BufferSize, maxReq)
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	head, err := nrs.NewHead(nrs.Config{MaxQueued: cfg.MaxQueued, Clock: cfg.Clock, Policy: cfg.NRSPolicy})
	if err != nil {
		return nil, fmt.Errorf("ptlrpc %s: %w", cfg.Name, err)
	}
	handlers := make(map[wire.Opcode]*HandlerSpec, len(cfg.Handlers)+3)
	var hp *nrs.Head
	for op, spec := range cfg.Handlers {
		if spec.Fn == nil {
			return nil, fmt.Errorf("ptlrpc %s: handler for %v has no function", cfg.Name, op)
		}
		handlers[op] = &spec
		if spec.Flags&HighPriority != 0 && hp == nil {
			if hp, err = nrs.NewHead(nrs.Config{MaxQueued: cfg.MaxQueued}); err != nil {
				return nil, fmt.Errorf("ptlrpc %s: %w", cfg.Name, err)
			}
		}
	}
	if ts := cfg.Targets; ts != nil {
		handlers[cfg.ConnectOp] = &HandlerSpec{Flags: NoExport, Fn: func(_ context.Context, r *Request) ([]byte, int32) { return ts.connect(r) }}
		handlers[cfg.DisconnectOp] = &HandlerSpec{Fn: func(_ context.Context, r *Request) ([]byte, int32) { return ts.disconnect(r) }}
		handlers[wire.OBDPing] = &HandlerSpec{Fn: func(context.Context, *Request) ([]byte, int32) { return nil, 0 }}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{
		ln: ln, cfg: cfg, handlers: handlers, log: lg.With("service", cfg.Name), maxReq: maxReq,
		ctx: ctx, cancel: cancel, nrs: head, hp: hp, at: newEstimator(0, 0),
		ops: make(map[wire.Opcode]OpStats), allGone: make(chan struct{}),
		erWake: make(chan struct{}, 1), erDone: make(chan struct{}),
	}
	if err := claimPortal(ln, cfg.RequestPortal, cfg.Name); err != nil {
		cancel()
		head.Close()
		if hp != nil {
			hp.Close()
		}
		return nil, err
	}
	for range cfg.Buffers {
		b := &rqbd{mem: make([]byte, cfg.BufferSize)}
		s.bufs = append(s.bufs, b)
		if err := s.post(b); err != nil {
			go s.earlyReplier()
			s.Close(context.Background())
			return nil, err
		}
	}
	for range cfg.MinThreads {
		s.startWorker(false)
	}
	if hp != nil {
		for range hpThreads {
			s.workers.Go(s.hpWorker)
		}
	}
	go s.earlyReplier()
	return s, nil
}

// hpWorker runs HighPriority handlers until the service closes.
func (s *Service) hpWorker() {
	for {
		it, err := s.hp.Get(s.ctx)
		if err != nil {
			return
		}
		s.handle(it.Value.(*Request))
	}
}

// NRS returns the service's request scheduler, to change its policy and
// TBF rules at run time.
func (s *Service) NRS() *nrs.Head { return s.nrs }

// post attaches b to the request portal, accepting any match bits.
func (s *Service) post(b *rqbd) error {
	s.mu.Lock()
	if s.closed {
		s.checkGoneLocked()
		s.mu.Unlock()
		return nil
	}
	b.refs, b.full, b.unlinked, b.reposting = 0, false, false, false
	s.mu.Unlock()
	h, err := s.ln.Attach(s.cfg.RequestPortal, lnet.AnyProcess, 0, ^uint64(0), lnet.InsertLast, lnet.MD{
		Buffers:   [][]byte{b.mem},
		Threshold: lnet.ThresholdInfinite,
		Options:   lnet.MDOpPut | lnet.MDTruncate,
		Handler:   s.bufEvent,
		User:      b,
	})
	if err != nil {
		s.mu.Lock()
		b.unlinked = true
		s.mu.Unlock()
		return fmt.Errorf("ptlrpc %s: post request buffer on portal %d: %w", s.cfg.Name, s.cfg.RequestPortal, err)
	}
	s.mu.Lock()
	b.md = h
	closed := s.closed
	s.mu.Unlock()
	if closed {
		s.ln.Unlink(h)
	}
	return nil
}

// bufEvent handles the events of a request buffer.
func (s *Service) bufEvent(ev lnet.Event) {
	b := ev.User.(*rqbd)
	switch ev.Type {
	case lnet.EventUnlink:
		s.mu.Lock()
		b.unlinked = true
		s.mu.Unlock()
		s.maybeRepost(b)
	case lnet.EventPut:
		if ev.Status != nil {
			return
		}
		s.received.Add(1)
		end := int(ev.Offset) + int(ev.MLength)
		s.mu.Lock()
		b.refs++
		unlink := !b.full && len(b.mem)-end < s.maxReq
		var extra *rqbd
		if unlink {
			b.full = true
			extra = s.growLocked()
		}
		s.mu.Unlock()
		if unlink {
			s.ln.Unlink(ev.MD)
		}
		if extra != nil {
			if err := s.post(extra); err != nil {
				s.log.Error("ptlrpc: post an extra request buffer", "err", err)
			}
		}
		s.incoming(b, ev, b.mem[ev.Offset:end:end])
	}
}

// lowPosted is the fewest request buffers the service keeps posted while
// it may add buffers: one filling up leaves another to land in.
const lowPosted = 2

// growLocked returns a new request buffer for the caller to post if fewer
// than lowPosted buffers are posted and MaxBuffers allows one more, else
// nil. s.mu is held.
func (s *Service) growLocked() *rqbd {
	if s.closed || len(s.bufs) >= s.cfg.MaxBuffers {
		return nil
	}
	posted := 0
	for _, b := range s.bufs {
		if !b.full && !b.unlinked {
			posted++
		}
	}
	if posted >= lowPosted {
		return nil
	}
	b := &rqbd{mem: make([]byte, s.cfg.BufferSize)}
	s.bufs = append(s.bufs, b)
	s.grown.Add(1)
	return b
}

// release marks one request of b done; nil (a request that keeps no
// buffer) is nothing.
func (s *Service) release(b *rqbd) {
	if b == nil {
		return
	}
	s.mu.Lock()
	b.refs--
	s.mu.Unlock()
	s.maybeRepost(b)
}

// maybeRepost posts b again once it is unlinked and every request in it is
// done, or, after Close, reports when every buffer is gone.
func (s *Service) maybeRepost(b *rqbd) {
	s.mu.Lock()
	if !b.unlinked || b.refs > 0 || b.reposting {
		s.mu.Unlock()
		return
	}
	if s.closed {
		s.checkGoneLocked()
		s.mu.Unlock()
		return
	}
	b.reposting = true
	s.mu.Unlock()
	s.reposts.Add(1)
	if err := s.post(b); err != nil {
		s.log.Error("ptlrpc: repost request buffer", "err", err)
		s.mu.Lock()
		s.checkGoneLocked()
		s.mu.Unlock()
	}
}

func (s *Service) checkGoneLocked() {
	if !s.closed {
		return
	}
	for _, b := range s.bufs {
		if !b.unlinked || b.refs > 0 {
			return
		}
	}
	select {
	case <-s.allGone:
	default:
		close(s.allGone)
	}
}

// incoming decodes a request that landed and queues it, or answers it at
// once if it cannot be queued.
func (s *Service) incoming(b *rqbd, ev lnet.Event, data []byte) {
	var h wire.Header
	err := h.Unmarshal(data)
	if err == nil && h.Type != wire.TypeRequest {
		err = fmt.Errorf("%v on the request portal", h.Type)
	}
	if err != nil {
		s.malformed.Add(1)
		s.log.Warn("ptlrpc: dropping malformed request", "from", ev.Initiator, "len", ev.RLength, "err", err)
		s.release(b)
		return
	}
	req := &Request{
		Header: h, Peer: ev.Initiator, Arrived: time.Now(), svc: s, buf: b, erIdx: -1,
		replyPortal: uint32(ev.HdrData), bulkPortal: uint32(ev.HdrData >> 32),
	}
	if s.cfg.Faults.check(FailDropRequest) {
		s.dropped.Add(1)
		s.log.Debug("ptlrpc: fault injection: dropping request", "xid", h.XID, "op", h.Opcode)
		s.release(b)
		return
	}
	if ev.MLength < ev.RLength || int(h.BodyLen) > len(data)-wire.HeaderSize || int(h.BodyLen) > s.cfg.MaxBodySize {
		s.oversize.Add(1)
		s.log.Warn("ptlrpc: request too big", "from", ev.Initiator, "xid", h.XID, "op", h.Opcode, "len", ev.RLength)
		s.errorReply(req, -errnoEMSGSIZE)
		return
	}
	req.Body = data[wire.HeaderSize : wire.HeaderSize+int(h.BodyLen) : wire.HeaderSize+int(h.BodyLen)]
	spec := s.handlers[h.Opcode]
	if spec == nil {
		s.unsupported.Add(1)
		s.log.Warn("ptlrpc: no handler", "from", ev.Initiator, "xid", h.XID, "op", h.Opcode)
		s.errorReply(req, -errnoEOPNOTSUPP)
		return
	}
	req.spec = spec
	if int(h.BulkLen) > s.cfg.MaxBulkSize {
		s.oversize.Add(1)
		s.log.Warn("ptlrpc: bulk too big", "from", ev.Initiator, "xid", h.XID, "op", h.Opcode, "bulk", h.BulkLen, "max", s.cfg.MaxBulkSize)
		s.errorReply(req, -errnoEMSGSIZE)
		return
	}
	if h.BulkLen > 0 && spec.Flags&HasBulk == 0 {
		s.log.Warn("ptlrpc: bulk for a handler without bulk", "from", ev.Initiator, "xid", h.XID, "op", h.Opcode)
		s.errorReply(req, -errnoEPROTO)
		return
	}
	if s.cfg.Targets != nil && spec.Flags&NoExport == 0 {
		e := s.cfg.Targets.lookup(h.Handle)
		if e == nil || e.Peer().NID != req.Peer.NID {
			s.notConn.Add(1)
			s.log.Info("ptlrpc: request without a live export", "from", ev.Initiator, "xid", h.XID, "op", h.Opcode, "handle", h.Handle)
			s.errorReply(req, -errnoENOTCONN)
			return
		}
		saved, ok, why := e.admit(&h, spec.Flags&Modifying != 0)
		switch {
		case saved != nil:
			s.reconstructed.Add(1)
			s.log.Info("ptlrpc: reconstructing reply of resent request", "client", e.uuid, "xid", h.XID, "op", h.Opcode)
			hdr := saved.hdr
			hdr.LastCommitted = e.replyCommitted()
			s.sendReply(req, &hdr, saved.body, replyOffset)
			s.release(b)
			return
		case !ok:
			s.stale.Add(1)
			s.log.Debug("ptlrpc: dropping request", "client", e.uuid, "xid", h.XID, "op", h.Opcode, "why", why)
			s.release(b)
			return
		}
		req.exp, req.admitted = e, true
		t := e.target
		if done := h.Flags & replayDone; done != 0 {
			// The client replayed its requests (MsgReqReplayDone): its locks
			// and opens go once every client has (Lustre's REPLAY_LOCKS),
			// numbered after every replayed transno; it gets its answer
			// then. Or it replayed everything (each replay waits for its
			// reply): recovery need not wait for it, and it gets its answer
			// when recovery ends, sending nothing new until then. Early
			// replies keep it waiting.
			final := done == replayDone
			t.requestsDone(e)
			if final {
				e.replaying.Store(false)
				t.clientBack(e.uuid)
			}
			held := s.hold(req, b, func(req *Request) bool { return s.park(req, !final) })
			t.replayNext()
			if held {
				return
			}
		}
		if h.Flags&wire.MsgReplay != 0 {
			t.activity.Add(1) // a client replaying makes progress
		}
		if h.Flags&wire.MsgReplay != 0 && h.Transno != 0 && t.committedBefore(h.Transno) {
			// A replay of a change this target had already committed
			// before it restarted (the client had not heard): done.
			s.log.Debug("ptlrpc: replay of a committed request", "client", e.uuid, "xid", h.XID, "op", h.Opcode, "transno", h.Transno)
			rh := wire.Header{Type: wire.TypeReply, Opcode: h.Opcode, XID: h.XID, ConnCount: h.ConnCount, LastCommitted: e.replyCommitted()}
			req.finishExport(nil)
			s.sendReply(req, &rh, nil, replyOffset)
			s.release(b)
			return
		}
		if h.Flags&wire.MsgReplay != 0 && h.Transno != 0 && spec.Flags&HasBulk == 0 {
			// A change the previous life lost: it runs in its transno's
			// turn (Target.queueReplay).
			var err error
			if s.hold(req, b, func(req *Request) bool {
				var ok bool
				ok, err = t.queueReplay(req)
				return ok
			}) {
				s.log.Debug("ptlrpc: replay queued", "client", e.uuid, "xid", h.XID, "op", h.Opcode, "transno", h.Transno)
				return
			}
			if err != nil {
				s.log.Warn("ptlrpc: refusing a replay", "client", e.uuid, "xid", h.XID, "op", h.Opcode, "err", err)
				req.finishExport(nil)
				s.errorReply(req, -errnoEPROTO)
				return
			}
		}
	}
	// Watch before queueing: a handler may take the request at once, and
	// its unwatch must find it watched.
	s.watchEarly(req)
	it := &req.nrsItem
	*it = nrs.Item{NID: req.Peer.NID, JobID: h.JobID(), Opcode: h.Opcode, Value: req}
	hp := spec.Flags&HighPriority != 0
	var ran, ok bool
	if hp {
		ok = s.hp.Enqueue(it) // (its own goroutines: never more workers)
	} else {
		ran, ok = s.queue(&ev, req, it)
	}
	if ran {
		return
	}
	if !ok {
		s.busy.Add(1)
		s.unwatchEarly(req)
		req.finishExport(nil)
		s.errorReply(req, -errnoEAGAIN)
		return
	}
	if !hp && s.idle.Load() == 0 {
		s.moreWorkers()
	}
}

// queue queues req, whose NRS item is it, as nrs.Head.Enqueue (ok
// reports it queued), unless the NRS releases it at once (nothing queued
// before it, and under TBF a token in its class): then, if LNet can
// (lnet.Event.Continue), it runs on the goroutine that received it, after
// LNet is done with the message, and queue reports ran. That saves the
// hand-off to a handler goroutine — a wakeup, often of an idle CPU, on
// the path of every RPC. Requests run so run besides the handler
// goroutines, at most MaxThreads at once.
func (s *Service) queue(ev *lnet.Event, req *Request, it *nrs.Item) (ran, ok bool) {
	// Not a handler that moves bulk: a bulk under 64 KiB comes on the
	// connection the request came on, so the handler would always have to
	// release it (Blocking), starting a goroutine all the same.
	if !ev.Continuable() || req.spec.Flags&HasBulk != 0 {
		return false, s.nrs.Enqueue(it)
	}
	if s.direct.Add(1) > int32(s.cfg.MaxThreads) {
		s.direct.Add(-1)
		return false, s.nrs.Enqueue(it)
	}
	taken, ok := s.nrs.EnqueueOrTake(it)
	if taken && ev.Continue((*direct)(req)) {
		s.directRuns.Add(1)
		return true, true
	}
	s.direct.Add(-1)
	if taken {
		// Continuable said yes; should the LND change its mind, a worker
		// runs it.
		ok = s.nrs.Enqueue(it)
	}
	return false, ok
}

// unpark runs req, a request parked until its target's recovery ended
// (Target.park), or drops it if the target is closing, or the service.
func (s *Service) unpark(req *Request, drop bool) {
	s.unwatchEarly(req)
	if !drop {
		s.mu.Lock()
		if drop = s.closed; !drop {
			s.unparked.Add(1)
		}
		s.mu.Unlock()
	}
	if drop {
		req.finishExport(nil)
		s.release(req.buf)
		return
	}
	defer s.unparked.Done()
	// It waited for the other clients, not for this service: the wait is
	// not service time for the adaptive timeouts (here and the client's).
	req.Arrived = time.Now()
	s.handle(req)
}

// hold has put take req, which came in request buffer b, to run or
// answer later; it reports whether put did. A held request keeps no
// request buffer: held until other clients are done, one per client, they
// would keep every buffer from being posted again, and the service from
// receiving what they wait for. Early replies keep its client waiting.
func (s *Service) hold(req *Request, b *rqbd, put func(*Request) bool) bool {
	body := req.Body
	req.Body, req.buf = append([]byte(nil), body...), nil
	s.watchEarly(req)
	if put(req) {
		s.release(b)
		return true
	}
	s.unwatchEarly(req)
	req.Body, req.buf = body, b
	return false
}

// park parks req with its target (Target.park), dropping the request it
// replaces.
func (s *Service) park(req *Request, untilReplayed bool) bool {
	ok, replaced := req.exp.target.park(req, untilReplayed)
	if replaced != nil {
		replaced.svc.unpark(replaced, true)
	}
	if ok {
		s.log.Debug("ptlrpc: client replayed; held", "client", req.exp.uuid, "xid", req.Header.XID, "until_requests_replayed", untilReplayed)
	}
	return ok
}

// direct is a request run by the goroutine that received it (queue): an
// lnet.Continuation.
type direct Request

func (d *direct) Continue(rel lnet.Releaser) {
	req := (*Request)(d)
	defer req.svc.direct.Add(-1)
	req.hctx = handlerCtx{Context: req.svc.ctx, rel: rel}
	req.svc.handle(req)
}

// handlerCtx is the context of a handler that runs on the goroutine that
// received its request: the service's, carrying the Releaser of the
// connection it came on. It lives in the Request (no allocation); as its
// Done is the service context's own, contexts derived from it need no
// goroutine to follow it.
type handlerCtx struct {
	context.Context
	rel lnet.Releaser
}

type releaserKey struct{}

func (c *handlerCtx) Value(key any) any {
	if key == (releaserKey{}) {
		return c.rel
	}
	return c.Context.Value(key)
}

// Blocking is called with a handler's context (or one derived from it)
// by code that is about to wait for the network: the reply to an RPC, a
// lock that another request must give back. When the handler runs on the
// goroutine that received its request, that goroutine stops being the
// reader of the connection the request came on, which gets a new one
// now, so that what the wait is for can arrive on it. (Without the call
// it would arrive once socklnd's watchdog stepped in, a millisecond
// later.) Otherwise it does nothing; it is cheap, and may be called any
// number of times.
func Blocking(ctx context.Context) {
	if r, ok := ctx.Value(releaserKey{}).(lnet.Releaser); ok {
		r.Release()
	}
}

// moreWorkers starts a handler goroutine if requests wait that no idle
// one will take. Both sides call it when they see no handler idle:
// incoming after queueing, and a worker that just took a request, so that
// a request queued while the last idle worker was taking another is not
// left waiting for the next arrival — with handlers that block (a bulk
// waiting for a client gone quiet) it could wait until then. (Each side
// writes first — the queue, the idle count — and reads the other's after,
// so one of them sees both.)
func (s *Service) moreWorkers() {
	if int(s.threads.Load()) >= s.cfg.MaxThreads {
		return
	}
	if q := s.nrs.Len(); q > 0 && q > int(s.idle.Load()) {
		s.startWorker(true)
	}
}

// startWorker starts a handler goroutine; an extra one (beyond MinThreads)
// exits after a while without work.
func (s *Service) startWorker(extra bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if extra && int(s.threads.Load()) >= s.cfg.MaxThreads {
		return
	}
	s.threads.Add(1)
	s.workers.Go(func() { s.worker(extra) })
}

// workerIdle is how long an extra handler goroutine waits for work before
// it exits.
const workerIdle = 10 * time.Second

// worker runs handlers until the service closes.
func (s *Service) worker(extra bool) {
	defer s.threads.Add(-1)
	for {
		// Under load an extra worker finds work at once: only one about
		// to wait needs the context (and timer) of its idle timeout.
		var it *nrs.Item
		if extra {
			it = s.nrs.Poll()
		}
		if it == nil {
			ctx, cancel := s.ctx, context.CancelFunc(func() {})
			if extra {
				ctx, cancel = context.WithTimeout(s.ctx, workerIdle)
			}
			s.idle.Add(1)
			var err error
			it, err = s.nrs.Get(ctx)
			s.idle.Add(-1)
			cancel()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) && s.ctx.Err() == nil {
					if s.threads.Load() > int32(s.cfg.MinThreads) {
						return
					}
					continue
				}
				return
			}
		}
		if s.idle.Load() == 0 {
			s.moreWorkers()
		}
		s.handle(it.Value.(*Request))
	}
}

// handle runs one request's handler and replies.
func (s *Service) handle(req *Request) {
	t0 := time.Now()
	h := &req.Header
	if s.cfg.Faults.check(req.spec.FailID) {
		s.dropped.Add(1)
		s.log.Debug("ptlrpc: fault injection: dropping request", "xid", h.XID, "op", h.Opcode, "fail_id", req.spec.FailID)
		s.unwatchEarly(req)
		req.finishExport(nil)
		s.release(req.buf)
		return
	}
	ctx := s.ctx
	if req.hctx.rel != nil {
		ctx = &req.hctx
	}
	var replayOf *Target // counted in its handler for ReplaysDone
	if h.Flags&wire.MsgReplay != 0 && req.exp != nil {
		replayOf = req.exp.target
		replayOf.replaysIn.Add(1)
	}
	body, status := req.spec.Fn(ctx, req)
	if replayOf != nil {
		replayOf.replaysIn.Add(-1)
	}
	if req.spec.Flags&Modifying != 0 && req.exp != nil && req.transno == 0 && status == 0 {
		// The handler did not number its change itself (AssignTransno).
		req.transno = req.exp.target.takeTransno(req.replayTransno)
	}
	end := time.Now() // one reading for the statistics, the reply and the export
	d := end.Sub(t0)
	s.at.add(t0, end.Sub(req.Arrived))
	s.mu.Lock()
	st := s.ops[h.Opcode]
	st.Count++
	st.ServiceTime += d
	if st.Count == 1 || d < st.MinServiceTime {
		st.MinServiceTime = d
	}
	st.MaxServiceTime = max(st.MaxServiceTime, d)
	q := t0.Sub(req.Arrived)
	st.QueueTime += q
	if st.Count == 1 || q < st.MinQueueTime {
		st.MinQueueTime = q
	}
	st.MaxQueueTime = max(st.MaxQueueTime, q)
	if status != 0 {
		st.Errors++
	}
	s.ops[h.Opcode] = st
	s.mu.Unlock()
	// Observed before the reply goes: a client that saw the reply and
	// then reads the metrics finds its request counted.
	if fn := s.observer.Load(); fn != nil {
		(*fn)(h.Opcode, d, q)
	}

	if status > 0 {
		status = -status
	}
	if !wire.ErrnoValid(status) {
		status = -errnoEIO
	}
	if wire.HeaderSize+len(body) > maxMessage {
		s.log.Error("ptlrpc: reply body too big", "op", h.Opcode, "len", len(body))
		status, body = -errnoEMSGSIZE, nil
	}
	// The reply names the connection the request came on, so a client
	// that resent it on a newer one can tell a late reply to the old send.
	rh := wire.Header{Type: wire.TypeReply, Opcode: h.Opcode, XID: h.XID, Status: status, BodyLen: uint32(len(body)), ConnCount: h.ConnCount}
	if status == 0 && req.transno != 0 {
		rh.Transno = req.transno
	}
	if req.bulkMoved > 0 {
		rh.BulkLen = req.bulkMoved
		if req.cksumSet {
			rh.Flags |= flagChecksum(h.Flags).flags()
			rh.BulkCksum = req.replyCksum
		}
	}
	var save *savedReply
	if e := req.exp; e != nil {
		e.countOp(h.Opcode)
		rh.Handle = e.handle
		if req.transno != 0 && e.target.cfg.AutoCommit {
			e.target.Committed(req.transno)
		}
		rh.LastCommitted = e.replyCommitted()
		if req.spec.Flags&Modifying != 0 {
			save = &savedReply{hdr: rh, body: append([]byte(nil), body...)}
		}
	}
	s.unwatchEarly(req)
	if s.cfg.Faults.check(FailDropReply) {
		s.dropped.Add(1)
		s.log.Debug("ptlrpc: fault injection: dropping reply", "xid", h.XID, "op", h.Opcode)
	} else {
		s.sendReplyAt(req, &rh, body, replyOffset, end)
	}
	if save != nil && req.keepReply && rh.Transno != 0 {
		// After the reply went: the client waits for nothing here. The
		// change's own commit came first, so a restart that keeps this
		// reply keeps the change.
		req.exp.keepReply(h, rh.Transno, body)
	}
	req.finishExportAt(save, end)
	s.release(req.buf)
}

// finishExport ends an admitted request on its export, keeping save for
// reconstruction if it is not nil.
func (req *Request) finishExport(save *savedReply) { req.finishExportAt(save, time.Now()) }

// finishExportAt is finishExport at time now.
func (req *Request) finishExportAt(save *savedReply, now time.Time) {
	if req.admitted {
		req.admitted = false
		req.exp.finish(req.Header.XID, save, now)
	}
}

// errorReply answers req with a TypeError and releases its buffer.
func (s *Service) errorReply(req *Request, status int32) {
	defer s.release(req.buf)
	rh := wire.Header{Type: wire.TypeError, Opcode: req.Header.Opcode, XID: req.Header.XID, Status: status, ConnCount: req.Header.ConnCount}
	if req.exp != nil {
		rh.LastCommitted = req.exp.replyCommitted()
	}
	s.sendReply(req, &rh, nil, replyOffset)
}

// sendReply PUTs a reply header and body to the requester at off in its
// reply MD. The body is sent from the handler's buffer without copying.
func (s *Service) sendReply(req *Request, rh *wire.Header, body []byte, off uint32) {
	s.sendReplyAt(req, rh, body, off, time.Now())
}

// sendReplyAt is sendReply at time now.
func (s *Service) sendReplyAt(req *Request, rh *wire.Header, body []byte, off uint32, now time.Time) {
	rh.ServiceTime = uint32(min(now.Sub(req.Arrived)/time.Millisecond, 1<<31))
	if rh.Timeout == 0 {
		rh.Timeout = uint32(min(s.at.current()/time.Millisecond, 1<<31))
	}
	if rh.Type == wire.TypeReply && rh.Flags&wire.MsgEarlyReply == 0 {
		rh.BodyLen = uint32(len(body))
	}
	var own *msgBufs
	if rh.Flags&wire.MsgEarlyReply == 0 && !req.replyUsed {
		req.replyUsed = true
		own = &req.reply
	}
	msg, err := message(own, rh, body)
	if err != nil {
		s.log.Error("ptlrpc: marshal reply", "xid", rh.XID, "err", err)
		return
	}
	md, err := s.ln.Bind(lnet.MD{Buffers: msg, Threshold: 1})
	if err == nil {
		// The final reply is sent once, by the handler; early replies
		// (another goroutine, maybe at the same time) get contexts of
		// their own.
		var ctx *sendCtx
		if own != nil {
			ctx = &req.replyCtx
			ctx.timeout = replySendTimeout
		} else {
			ctx = &sendCtx{timeout: replySendTimeout}
		}
		err = s.ln.Put(ctx, md, lnet.NoAckReq, req.Peer, req.replyPortal, req.Header.XID, off, 0)
		ctx.stop()
		if err != nil {
			s.ln.Unlink(md)
		}
	}
	if err != nil {
		s.replyErrors.Add(1)
		s.log.Warn("ptlrpc: send reply", "to", req.Peer, "xid", req.Header.XID, "err", err)
	}
}

// sendCtx bounds a reply PUT's wait for LNet credits to timeout, counted
// from when it starts waiting: the timer is made only if Put waits (asks for
// Done), which almost no reply does. A context.WithTimeout per reply was
// four allocations and a timer for nothing.
type sendCtx struct {
	timeout time.Duration
	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
}

func (c *sendCtx) started() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		c.ctx, c.cancel = context.WithTimeout(context.Background(), c.timeout)
	}
	return c.ctx
}

func (c *sendCtx) Done() <-chan struct{}       { return c.started().Done() }
func (c *sendCtx) Value(key any) any           { return nil }
func (c *sendCtx) Deadline() (time.Time, bool) { return time.Time{}, false } // none until waiting starts

func (c *sendCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		return nil
	}
	return c.ctx.Err()
}

func (c *sendCtx) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
}

// SetObserver sets fn to be called after each request is handled, with
// its opcode, its service time and how long it waited for a handler (a
// metrics layer's histograms); nil removes it.
func (s *Service) SetObserver(fn func(op wire.Opcode, service, queue time.Duration)) {
	if fn == nil {
		s.observer.Store(nil)
		return
	}
	s.observer.Store(&fn)
}

// Stats returns a snapshot of the service's counters.
func (s *Service) Stats() ServiceStats {
	st := ServiceStats{
		Received: s.received.Load(), Malformed: s.malformed.Load(), Busy: s.busy.Load(), Direct: s.directRuns.Load(),
		Unsupported: s.unsupported.Load(), Oversize: s.oversize.Load(), NotConnected: s.notConn.Load(),
		Stale: s.stale.Load(), Reconstructed: s.reconstructed.Load(), EarlyReplies: s.early.Load(),
		Dropped: s.dropped.Load(), BulkChecksumErrors: s.cksumErrs.Load(), BulkBytes: s.bulkBytes.Load(),
		BulkCRC32: s.cksumCRC32.Load(), BulkCRC32C: s.cksumCRC32C.Load(),
		ReplyErrors: s.replyErrors.Load(), Reposts: s.reposts.Load(), Grown: s.grown.Load(),
		Threads: int(s.threads.Load()), Queued: s.nrs.Len(), ServiceEstimate: s.at.current(),
		Ops: make(map[wire.Opcode]OpStats),
	}
	if s.hp != nil {
		st.HPThreads, st.HPQueued = hpThreads, s.hp.Len()
	}
	s.mu.Lock()
	for k, v := range s.ops {
		st.Ops[k] = v
	}
	st.Buffers = len(s.bufs)
	s.mu.Unlock()
	return st
}

// Close unlinks the request buffers and waits for the handlers to finish
// the request they are running and for the buffers to be released; queued
// requests are dropped. If ctx ends first, it cancels the handlers' context
// and returns ctx's error.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("ptlrpc: service already closed")
	}
	s.closed = true
	var mds []lnet.MDHandle
	for _, b := range s.bufs {
		if !b.md.IsZero() && !b.unlinked {
			mds = append(mds, b.md)
		}
	}
	s.checkGoneLocked()
	s.mu.Unlock()
	if s.cfg.Targets != nil {
		for _, req := range s.cfg.Targets.unparkService(s) {
			s.unpark(req, true)
		}
	}
	s.nrs.Close()
	if s.hp != nil {
		s.hp.Close()
	}
	close(s.erDone)
	for _, h := range mds {
		s.ln.Unlink(h)
	}
	releasePortal(s.ln, s.cfg.RequestPortal)
	done := make(chan struct{})
	go func() {
		s.workers.Wait()
		s.unparked.Wait()
		// Requests still queued are dropped: their buffers go back.
		for _, head := range []*nrs.Head{s.nrs, s.hp} {
			for head != nil {
				it, ok := head.TryGet()
				if !ok {
					break
				}
				req := it.Value.(*Request)
				s.unwatchEarly(req)
				req.finishExport(nil)
				s.release(req.buf)
			}
		}
		<-s.allGone
		close(done)
	}()
	defer s.cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Early replies (Lustre's ptlrpc_at_send_early_reply): a request that is
// still queued or running when the client's deadline nears gets a
// header-only reply telling the client to wait longer.

// earlyMargin returns how long before the client's deadline to send the
// early reply for a request with timeout t: a quarter of it, so a slow
// network still gets it there in time.
func earlyMargin(t time.Duration) time.Duration { return t / 4 }

type erHeap []*Request

func (h erHeap) Len() int           { return len(h) }
func (h erHeap) Less(i, j int) bool { return h[i].erNext.Before(h[j].erNext) }
func (h erHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].erIdx, h[j].erIdx = i, j
}
func (h *erHeap) Push(x any) { r := x.(*Request); r.erIdx = len(*h); *h = append(*h, r) }
func (h *erHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	r.erIdx = -1
	return r
}

// watchEarly starts watching req for early replies, if its client takes
// them (MsgATSupport: its adaptive timeouts are on) and told a timeout.
// The heap holds at most MaxQueued+MaxThreads requests.
func (s *Service) watchEarly(req *Request) {
	if req.Header.Timeout == 0 || req.Header.Flags&wire.MsgATSupport == 0 {
		return
	}
	t := time.Duration(req.Header.Timeout) * time.Millisecond
	s.erMu.Lock()
	req.erTimeout = t
	req.erDeadline = req.Arrived.Add(t)
	req.erNext = req.erDeadline.Add(-earlyMargin(t))
	heap.Push(&s.erHeap, req)
	wake := s.erHeap[0] == req && req.erNext.Before(s.erTimerAt)
	if wake {
		s.erTimerAt = req.erNext
	}
	s.erMu.Unlock()
	if wake {
		select {
		case s.erWake <- struct{}{}:
		default:
		}
	}
}

// unwatchEarly stops watching req; after it no early reply is sent for it.
func (s *Service) unwatchEarly(req *Request) {
	s.erMu.Lock()
	if req.erIdx >= 0 {
		heap.Remove(&s.erHeap, req.erIdx)
	}
	s.erMu.Unlock()
}

// earlyReplier sends early replies when they fall due.
func (s *Service) earlyReplier() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.erMu.Lock()
		var due []*Request
		now := time.Now()
		for len(s.erHeap) > 0 && !s.erHeap[0].erNext.After(now) {
			r := s.erHeap[0]
			if ext := s.extendLocked(r, now); ext > 0 {
				due = append(due, r)
				heap.Fix(&s.erHeap, 0)
			} else {
				heap.Pop(&s.erHeap)
			}
		}
		wait := time.Hour
		if len(s.erHeap) > 0 {
			wait = max(time.Until(s.erHeap[0].erNext), time.Millisecond)
		}
		s.erTimerAt = now.Add(wait)
		// Send under erMu so that no early reply follows the final one
		// (handle unwatches before it replies).
		for _, r := range due {
			s.sendEarly(r)
		}
		s.erMu.Unlock()
		timer.Reset(wait)
		select {
		case <-s.erDone:
			return
		case <-s.erWake:
		case <-timer.C:
		}
	}
}

// extendLocked moves r's deadline out and returns by how much from now, or
// 0 if it may not be extended any more.
//
// at_max caps how long early replies keep a request going: no extension
// moves the deadline past r's arrival plus at_max, the last one is cut
// short to end there, and once there (or with at_max 0: adaptive timeouts
// off) none is sent, as Lustre's ptlrpc_at_send_early_reply ("couldn't
// add any time").
func (s *Service) extendLocked(r *Request, now time.Time) time.Duration {
	nt := NodeTimeouts()
	limit := r.Arrived.Add(nt.ATMax)
	ext := max(r.erTimeout, max(s.at.current(), nt.ATMin)*5/4)
	deadline := now.Add(ext)
	if deadline.After(limit) {
		deadline = limit
	}
	if !deadline.After(r.erDeadline) || !deadline.After(now) {
		return 0
	}
	ext = deadline.Sub(now)
	r.erDeadline = deadline
	r.erNext = r.erDeadline.Add(-earlyMargin(ext))
	r.erTimeout = ext
	return ext
}

// sendEarly sends r an early reply extending its deadline by r.erTimeout.
func (s *Service) sendEarly(r *Request) {
	if s.cfg.Faults.check(FailDropEarlyReply) {
		return
	}
	rh := wire.Header{Type: wire.TypeReply, Flags: wire.MsgEarlyReply, Opcode: r.Header.Opcode, XID: r.Header.XID,
		Timeout: uint32(min(r.erTimeout/time.Millisecond, 1<<31))}
	if r.exp != nil {
		rh.Handle = r.exp.handle
		rh.LastCommitted = r.exp.replyCommitted()
	}
	s.early.Add(1)
	s.sendReply(r, &rh, nil, earlyReplyOffset)
}

// replayDone are the flags of the request a client sends once it has
// replayed its requests and locks to a restarted target.
const replayDone = wire.MsgReqReplayDone | wire.MsgLockReplayDone
