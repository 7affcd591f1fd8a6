package ptlrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/iovec"
	"github.com/nacrefs/nacre/lnet"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// Portals of Nacre's clients and services, Lustre's numbers
// (lustre_idl.h) so that a Lustre engineer can read a trace.
const (
	ConnMgrRequestPortal  uint32 = 1  // CONNMGR_REQUEST_PORTAL
	ConnMgrReplyPortal    uint32 = 2  // CONNMGR_REPLY_PORTAL
	OSCReplyPortal        uint32 = 4  // OSC_REPLY_PORTAL: replies to OST requests
	OSTIOPortal           uint32 = 6  // OST_IO_PORTAL: OST_READ, OST_WRITE, ...
	OSTCreatePortal       uint32 = 7  // OST_CREATE_PORTAL: precreate from the MDS
	OSTBulkPortal         uint32 = 8  // OST_BULK_PORTAL: clients' bulk buffers for OST I/O
	MDCReplyPortal        uint32 = 10 // MDC_REPLY_PORTAL
	MDSRequestPortal      uint32 = 12 // MDS_REQUEST_PORTAL
	MDSBulkPortal         uint32 = 14 // MDS_BULK_PORTAL: readdir pages
	LDLMCBRequestPortal   uint32 = 15 // LDLM_CB_REQUEST_PORTAL: ASTs to clients
	LDLMCBReplyPortal     uint32 = 16 // LDLM_CB_REPLY_PORTAL
	LDLMCancelReqPortal   uint32 = 17 // LDLM_CANCEL_REQUEST_PORTAL
	LDLMCancelReplyPortal uint32 = 18 // LDLM_CANCEL_REPLY_PORTAL
	MGSRequestPortal      uint32 = 26 // MGS_REQUEST_PORTAL
)

// Reply offsets in the client's reply MD (MANAGE_REMOTE): early replies land
// at 0 and the final reply after room for one early reply, so a late early
// reply never overwrites the reply being decoded (Lustre keeps them apart
// the same way).
const (
	earlyReplyOffset = 0
	replyOffset      = wire.HeaderSize
)

// DefaultReplyCap is the largest reply body a request expects unless it
// says otherwise (Req.ReplyCap).
const DefaultReplyCap = 64 << 10

// replyPools recycle reply buffers in two sizes; a buffer goes back only
// after its MD's EventUnlink, when LNet no longer touches it.
var replyPools = [2]sync.Pool{
	{New: func() any { b := make([]byte, replyOffset+wire.HeaderSize+DefaultReplyCap); return &b }},
	{New: func() any { b := make([]byte, replyOffset+wire.HeaderSize+wire.MaxBodySize); return &b }},
}

func replyPool(replyCap int) *sync.Pool {
	if replyCap <= DefaultReplyCap {
		return &replyPools[0]
	}
	return &replyPools[1]
}

// lastXID is the node's XID counter, shared by every client in the process
// (Lustre's ptlrpc_last_xid): XIDs are unique per node, so clients sharing
// an LNet and its bulk portal never match each other's bulk MDs. XIDs step
// by maxFragments: a bulk's fragment i uses match bits XID+i.
var lastXID atomic.Uint64

func init() { lastXID.Store(uint64(time.Now().UnixNano()) &^ (maxFragments - 1)) }

// nextXID returns a fresh XID, a non-zero multiple of maxFragments.
func nextXID() uint64 {
	for {
		if x := lastXID.Add(maxFragments); x != 0 {
			return x
		}
	}
}

// RemoteError is a reply with a non-zero status: a TypeError (the service
// could not process the request) or a TypeReply whose operation failed.
// errors.Is(err, syscall.EAGAIN) and the like work on it.
type RemoteError struct {
	// Status is the negative network errno the service sent.
	Status int32
}

// Error implements error.
func (e *RemoteError) Error() string {
	return fmt.Sprintf("ptlrpc: remote error %d (%v)", e.Status, syscall.Errno(-e.Status))
}

// Unwrap returns the status as a syscall.Errno.
func (e *RemoteError) Unwrap() error { return syscall.Errno(-e.Status) }

// Errors a call may return besides a *RemoteError and ctx's error.
var (
	// ErrBadReply: the reply did not decode or did not fit its buffer.
	ErrBadReply = errors.New("ptlrpc: bad reply")
	// ErrTimeout: no reply came within the request's (adaptive) timeout.
	// Import calls resend instead of returning it.
	ErrTimeout = errors.New("ptlrpc: request timed out")
	// ErrEvicted: the server evicted the import while the request was in
	// flight or waiting; the request's effect is unknown.
	ErrEvicted = errors.New("ptlrpc: evicted by the server")
	// ErrClosed: the import or client is closed.
	ErrClosed = errors.New("ptlrpc: closed")
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// ReplyPortal is the portal replies are posted on. Several clients of
	// one LNet may share it: XIDs are unique per node and each reply MD
	// matches its XID only.
	ReplyPortal uint32
	// BulkPortal is the portal the client's bulk buffers are posted on; 0
	// means OSTBulkPortal.
	BulkPortal uint32
	// UUID names the client to servers across reconnections; "" means a
	// random one.
	UUID string
	// Faults are the client's armed fault-injection points; nil means none.
	Faults *Faults
	// Logger receives the client's logs; nil means slog.Default().
	Logger *slog.Logger
}

// ClientStats are a snapshot of a Client's counters, summed over its
// imports.
type ClientStats struct {
	// Sent counts request messages sent, resends included.
	Sent uint64
	// Resent counts resends (same XID, MSG_RESENT).
	Resent uint64
	// Timeouts counts requests whose timeout passed without a reply.
	Timeouts uint64
	// EarlyReplies counts early replies received.
	EarlyReplies uint64
	// BulkChecksumErrors counts bulk reads whose data did not match the
	// server's checksum.
	BulkChecksumErrors uint64
	// Reconnects counts successful CONNECTs after the first, per import.
	Reconnects uint64
	// Evictions counts the times an import found itself evicted.
	Evictions uint64
	// DroppedReplies counts replies ignored by fault injection.
	DroppedReplies uint64
}

// Client sends PtlRPC requests from one LNet: connectionless calls (Call,
// Do, CallSet) and, through imports (NewImport), connected ones. It is safe
// for concurrent use.
type Client struct {
	ln   *lnet.LNet
	cfg  ClientConfig
	log  *slog.Logger
	uuid string

	// closing is closed by Close: every wait ends with ErrClosed.
	closing chan struct{}
	mu      struct {
		sync.Mutex
		closed bool
		// live are the requests whose MDs are posted, a list through
		// rpc.prev and rpc.next (no allocation per request); n counts them.
		live *rpc
		n    int
		// drained is closed once closed and live is empty.
		drained chan struct{}
		// imports are the client's imports not closed yet.
		imports map[*Import]struct{}
	}

	sent, resent, timeouts, early, cksumErrs, reconnects, evictions, droppedReplies atomic.Uint64
}

// NewClient returns a client sending through ln.
func NewClient(ln *lnet.LNet, cfg ClientConfig) *Client {
	if cfg.BulkPortal == 0 {
		cfg.BulkPortal = OSTBulkPortal
	}
	if cfg.UUID == "" {
		cfg.UUID = uuid.NewString()
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	c := &Client{ln: ln, cfg: cfg, log: lg, uuid: cfg.UUID, closing: make(chan struct{})}
	c.mu.drained = make(chan struct{})
	c.mu.imports = make(map[*Import]struct{})
	return c
}

// Close ends everything the client has in flight, without touching the
// other users of its LNet (a client on a server's LNet cannot stop it to
// end requests to servers that do not answer): its imports close at once,
// without DISCONNECT; every request still waiting fails with ErrClosed;
// the reply and bulk MDs of every request are unlinked. New requests and
// imports fail with ErrClosed. Close then waits, within ctx, until the
// requests' callers have returned, with no MD of the client's left on
// LNet but a send LNet still holds (it ends with the send's transaction
// timeout at worst). Closing a closed client waits again.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	var rs []*rpc
	var imps []*Import
	if !c.mu.closed {
		c.mu.closed = true
		close(c.closing)
		for r := c.mu.live; r != nil; r = r.next {
			rs = append(rs, r)
		}
		for imp := range c.mu.imports {
			imps = append(imps, imp)
		}
		clear(c.mu.imports)
		if c.mu.n == 0 {
			close(c.mu.drained)
		}
	}
	drained := c.mu.drained
	c.mu.Unlock()
	for _, imp := range imps {
		imp.abort()
	}
	for _, r := range rs {
		// Their callers unlink them again in finish: ErrNoMD then.
		c.ln.Unlink(r.rmd)
		for _, h := range r.bulkMDs {
			c.ln.Unlink(h)
		}
	}
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ptlrpc: client %s: close: %w", c.uuid, ctx.Err())
	}
}

// Closed reports whether Close was called.
func (c *Client) Closed() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// InFlight returns the number of requests whose MDs the client has
// posted and whose callers have not returned yet.
func (c *Client) InFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.n
}

// track records r, whose MDs are posted, as live; it fails with ErrClosed
// once the client is closed.
func (c *Client) track(r *rpc) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return ErrClosed
	}
	r.next = c.mu.live
	if r.next != nil {
		r.next.prev = r
	}
	c.mu.live, r.tracked = r, true
	c.mu.n++
	return nil
}

// untrack takes r out of the live list.
func (c *Client) untrack(r *rpc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !r.tracked {
		return
	}
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		c.mu.live = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	}
	r.prev, r.next, r.tracked = nil, nil, false
	c.mu.n--
	if c.mu.n == 0 && c.mu.closed {
		close(c.mu.drained)
	}
}

// UUID returns the client's uuid.
func (c *Client) UUID() string { return c.uuid }

// Stats returns a snapshot of the client's counters.
func (c *Client) Stats() ClientStats {
	return ClientStats{
		Sent: c.sent.Load(), Resent: c.resent.Load(), Timeouts: c.timeouts.Load(), EarlyReplies: c.early.Load(),
		BulkChecksumErrors: c.cksumErrs.Load(), Reconnects: c.reconnects.Load(), Evictions: c.evictions.Load(),
		DroppedReplies: c.droppedReplies.Load(),
	}
}

// Req is one request.
type Req struct {
	// Opcode and Body are the request. The body is sent from this buffer
	// without copying; the caller must not change it until the call
	// returns.
	Opcode wire.Opcode
	Body   []byte
	// Bulk, if not nil, is the request's bulk buffer, which the server
	// GETs from or PUTs into before it replies.
	Bulk *Bulk
	// JobID names the job the request is for (NRS TBF rules, job stats);
	// at most wire.JobIDSize printable bytes.
	JobID string
	// ReplyCap is the largest reply body expected; 0 means
	// DefaultReplyCap. A longer reply fails the call with ErrBadReply.
	ReplyCap int
	// Transno is set by Import.Do (and Replay) to the transno of a
	// modifying request's successful reply: the request is durable once
	// the server reports it committed.
	Transno uint64
	// KeepBody, if not nil, gives the body a kept modifying request is
	// replayed with, from the request's body and its reply's: what the
	// server decided that a replay must make again (the objects a create
	// was given), in a slice of its own. The import keeps both bodies and
	// calls it only to replay; nil from it replays the request's.
	KeepBody func(req, reply []byte) []byte
}

// Call sends body as a request for op to the service on target's portal and
// waits for the reply or for ctx to end, without a connection: no export,
// no resend. A reply with a non-zero status is returned with a
// *RemoteError (and its body, if any). When ctx ends first, ctx's error is
// returned once LNet no longer touches body.
func (c *Client) Call(ctx context.Context, target lwire.ProcessID, portal uint32, op wire.Opcode, body []byte) ([]byte, error) {
	return c.Do(ctx, target, portal, &Req{Opcode: op, Body: body})
}

// Do is Call for a full Req, with bulk. A bulk read whose checksum does not
// match is sent again, up to three times, before ErrBulkChecksum.
func (c *Client) Do(ctx context.Context, target lwire.ProcessID, portal uint32, req *Req) ([]byte, error) {
	r, err := c.newRPC(req, target)
	if err != nil {
		return nil, err
	}
	defer r.finish()
	for try := 1; ; try++ {
		h := r.header(0, 0, 0, try > 1, 0)
		timeout := time.Duration(0)
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
		m, err := r.attempt(ctx, target, portal, &h, timeout, nil)
		if err != nil {
			return nil, err
		}
		if err := r.checkBulkReply(&m.hdr); err != nil {
			if errors.Is(err, errCksumRetry) && try < bulkVerifyTries {
				continue
			}
			return nil, err
		}
		return m.result()
	}
}

// Call is one connectionless request of a request set.
type Call struct {
	// Target is the service's process; Portal its request portal.
	Target lwire.ProcessID
	Portal uint32
	// Opcode and Body are the request; Req, if not nil, replaces them.
	Opcode wire.Opcode
	Body   []byte
	Req    *Req
}

// Result is the outcome of one request of a request set.
type Result struct {
	// Reply is the reply body (also with a *RemoteError when the service
	// sent a body with a failed status).
	Reply []byte
	// Err is the call's error: a *RemoteError, a send error, ErrEvicted,
	// or ctx's error.
	Err error
}

// CallSet sends every call without waiting, then collects their replies,
// all under ctx's one deadline. Results are in the order of calls.
func (c *Client) CallSet(ctx context.Context, calls []Call) []Result {
	res := make([]Result, len(calls))
	rs := make([]*rpc, len(calls))
	timeout := time.Duration(0)
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	for i, call := range calls {
		req := call.Req
		if req == nil {
			req = &Req{Opcode: call.Opcode, Body: call.Body}
		}
		r, err := c.newRPC(req, call.Target)
		if err == nil {
			h := r.header(0, 0, 0, false, 0)
			err = r.send(ctx, call.Target, call.Portal, &h, timeout)
			if err != nil {
				r.finish()
			}
		}
		if err != nil {
			res[i].Err = err
			continue
		}
		rs[i] = r
	}
	for i, r := range rs {
		if r == nil {
			continue
		}
		m, err := r.wait(ctx, timeout, nil)
		if err == nil {
			if err = r.checkBulkReply(&m.hdr); err == nil {
				res[i].Reply, res[i].Err = m.result()
			}
		}
		if err != nil {
			res[i].Err = err
		}
		r.finish()
	}
	return res
}

// rpc is one request in flight from the client's side (Lustre's
// ptlrpc_request): its XID, its reply MD and its bulk MDs, which stay
// posted across resends and are unlinked by finish.
type rpc struct {
	c      *Client
	req    *Req
	xid    uint64
	jobID  [wire.JobIDSize]byte
	hasJob bool

	// sendOpts are the options of its send MDs: MDFailUnreachable for a
	// CONNECT that has another server to go to.
	sendOpts lnet.MDOptions

	rmd     lnet.MDHandle
	bp      *[]byte
	pool    *sync.Pool
	bulkMDs []lnet.MDHandle
	bulkLen int
	// bulkSums are a checksummed read's sums, taken as its data lands.
	bulkSums *bulkSums
	// bulkGone gets one value per bulk MD unlinked.
	bulkGone chan struct{}

	// LNet's handlers (the reply MD's and the send MDs') record what
	// happened in ev and signal wake; the caller's goroutine takes it.
	// One channel: three (final reply, early reply, send outcomes) cost
	// five allocations per RPC and a select over all of them per wait.
	wake     chan struct{} // capacity 1
	evMu     sync.Mutex
	ev       rpcEvents
	sends    int // sends not yet seen completed; owned by the caller's goroutine
	nsent    int // sends in all
	gotReply bool
	// smds are the MDs of the sends made, which finish unlinks (LNet
	// cancels a send it has not made yet); smdBuf backs the usual one or
	// two. Owned by the caller's goroutine.
	smds   []lnet.MDHandle
	smdBuf [2]lnet.MDHandle
	sentAt time.Time
	// atSupport: the latest send told the server the client takes early
	// replies (MsgATSupport); owned by the caller's goroutine.
	atSupport bool

	// The reply MD's buffer list and the first send's message live here
	// rather than in allocations of their own: a null RPC made some fifty,
	// which cost more than the RPC's own work.
	replyBufs [1][]byte
	first     msgBufs
	ic        icall // the import's record of the call (Import.begin)

	// prev and next link the client's live requests (Client.mu.live),
	// while tracked.
	prev, next *rpc
	tracked    bool
}

// rpcEvents is what LNet's handlers told an rpc and its caller has not
// taken yet.
type rpcEvents struct {
	final    replyMsg // the final reply, if hasFinal
	hasFinal bool
	early    time.Duration // the latest early reply's extension, if hasEarly
	hasEarly bool
	sent     int     // sends completed
	failed   []error // the failures among them, oldest first
}

// signal wakes the caller's goroutine; the caller holds r.evMu.
func (r *rpc) signal() {
	select {
	case r.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// sendEvent records the outcome of one send.
func (r *rpc) sendEvent(err error) {
	r.evMu.Lock()
	r.ev.sent++
	if err != nil {
		r.ev.failed = append(r.ev.failed, err)
	}
	r.signal()
	r.evMu.Unlock()
}

// takeSends counts the sends seen completed and returns the oldest failure
// not yet reported, if any.
func (r *rpc) takeSends() error {
	r.evMu.Lock()
	defer r.evMu.Unlock()
	r.sends -= r.ev.sent
	r.ev.sent = 0
	if len(r.ev.failed) == 0 {
		return nil
	}
	err := r.ev.failed[0]
	r.ev.failed = r.ev.failed[1:]
	return err
}

// msgBufs holds a message's header bytes and buffer list, for the one send
// of a request or reply that may use them: another may overlap a send LNet
// still holds (a resend, an early reply), and allocates its own.
type msgBufs struct {
	hdr [wire.HeaderSize]byte
	vec [2][]byte
}

// message marshals h and returns the buffer list of h and body, in b's
// arrays, or in new ones if b is nil.
func message(b *msgBufs, h *wire.Header, body []byte) ([][]byte, error) {
	var hdr []byte
	var vec [][]byte
	if b != nil {
		hdr, vec = b.hdr[:], b.vec[:1]
	} else {
		hdr, vec = make([]byte, wire.HeaderSize), make([][]byte, 1, 2)
	}
	if err := h.Marshal(hdr); err != nil {
		return nil, err
	}
	vec[0] = hdr
	if len(body) > 0 {
		vec = append(vec, body)
	}
	return vec, nil
}

// replyMsg is a decoded final reply, with its body copied out of the
// reply buffer (RPC metadata, never file data), or a decoding error.
type replyMsg struct {
	hdr  wire.Header
	body []byte
	err  error
}

// result turns a reply into what the caller sees.
func (m replyMsg) result() ([]byte, error) {
	if m.hdr.Status != 0 {
		return m.body, &RemoteError{Status: m.hdr.Status}
	}
	return m.body, nil
}

// newRPC gives req an XID and posts its reply MD and bulk MDs. The caller
// must call finish.
func (c *Client) newRPC(req *Req, server lwire.ProcessID) (*rpc, error) {
	return c.newRPCAs(req, server, nextXID())
}

// newRPCAs is newRPC under a given XID: one of an earlier send of req
// whose answer was lost, so that the server knows it for a resend.
func (c *Client) newRPCAs(req *Req, server lwire.ProcessID, xid uint64) (*rpc, error) {
	r, err := c.allocRPC(req)
	if err != nil {
		return nil, err
	}
	r.xid = xid
	if err := r.post(server); err != nil {
		return nil, err
	}
	return r, nil
}

// allocRPC checks req and returns its rpc without an XID or MDs: the
// caller sets r.xid and calls post (an import takes the XID under its lock,
// as it records the request in flight).
func (c *Client) allocRPC(req *Req) (*rpc, error) {
	if len(req.Body) > wire.MaxBodySize || wire.HeaderSize+len(req.Body) > maxMessage {
		return nil, fmt.Errorf("ptlrpc: %v request body of %d bytes, at most %d", req.Opcode, len(req.Body), maxMessage-wire.HeaderSize)
	}
	replyCap := req.ReplyCap
	if replyCap <= 0 {
		replyCap = DefaultReplyCap
	}
	if replyCap > wire.MaxBodySize {
		return nil, fmt.Errorf("ptlrpc: %v reply cap %d over %d", req.Opcode, replyCap, wire.MaxBodySize)
	}
	r := &rpc{
		c: c, req: req,
		wake: make(chan struct{}, 1),
	}
	if req.JobID != "" {
		var h wire.Header
		if err := h.SetJobID(req.JobID); err != nil {
			return nil, fmt.Errorf("ptlrpc: %v: %w", req.Opcode, err)
		}
		r.hasJob = true
		copy(r.jobID[:], req.JobID)
	}
	if b := req.Bulk; b != nil {
		if b.Op != BulkRead && b.Op != BulkWrite {
			return nil, fmt.Errorf("ptlrpc: %v: bulk op %d", req.Opcode, b.Op)
		}
		r.bulkLen = iovec.Len(b.Buffers)
		if r.bulkLen == 0 || r.bulkLen > wire.MaxBulkSize {
			return nil, fmt.Errorf("ptlrpc: %v: bulk of %d bytes, want 1 to %d", req.Opcode, r.bulkLen, wire.MaxBulkSize)
		}
	}
	r.pool = replyPool(replyCap)
	return r, nil
}

// post posts r's reply MD and bulk MDs under r.xid, which is set. The
// caller must call finish once it succeeded.
func (r *rpc) post(server lwire.ProcessID) error {
	c, req := r.c, r.req
	r.bp = r.pool.Get().(*[]byte)
	r.replyBufs[0] = *r.bp
	rmd, err := c.ln.Attach(c.cfg.ReplyPortal, server, r.xid, 0, lnet.InsertLast, lnet.MD{
		Buffers: r.replyBufs[:], Threshold: lnet.ThresholdInfinite,
		Options: lnet.MDOpPut | lnet.MDManageRemote | lnet.MDTruncate,
		Handler: replyHandler, User: r,
	})
	if err != nil {
		r.pool.Put(r.bp)
		return fmt.Errorf("ptlrpc: post reply MD: %w", err)
	}
	r.rmd = rmd
	if req.Bulk != nil {
		r.bulkGone = make(chan struct{}, maxFragments)
		if b := req.Bulk; b.Op == BulkRead && b.Checksum {
			r.bulkSums = newBulkSums(b.ChecksumType)
		}
		mds, err := req.Bulk.register(c.ln, c.cfg.BulkPortal, server, r.xid, r.bulkGone, r.bulkSums)
		if err != nil {
			c.ln.Unlink(rmd)
			return err
		}
		r.bulkMDs = mds
	}
	if err := c.track(r); err != nil {
		// Closed meanwhile: nothing was sent, the MDs go.
		c.ln.Unlink(rmd)
		for _, h := range r.bulkMDs {
			c.ln.Unlink(h)
		}
		for range r.bulkMDs {
			<-r.bulkGone
		}
		return fmt.Errorf("ptlrpc: %v: %w", req.Opcode, err)
	}
	return nil
}

// header builds the request header for one send of r.
//
// agreed are the checksum algorithms of the connection the header goes on
// (0: no connection, any): a request built while another connection held,
// or resent on a new one to a target that agreed to fewer, falls back to
// CRC-32C, which every target takes (an older one drops a request naming
// CRC-32 as malformed).
func (r *rpc) header(handle uint64, connCount uint32, lastXID uint64, resend bool, agreed ChecksumType) wire.Header {
	h := wire.Header{
		Type: wire.TypeRequest, Opcode: r.req.Opcode, XID: r.xid, BodyLen: uint32(len(r.req.Body)),
		Handle: handle, ConnCount: connCount, LastXID: lastXID,
	}
	if resend {
		h.Flags |= wire.MsgResent
	}
	if r.hasJob {
		h.SetJobID(string(r.jobID[:len(r.req.JobID)]))
	}
	if b := r.req.Bulk; b != nil {
		h.BulkLen = uint32(r.bulkLen)
		if b.Checksum {
			t := b.ChecksumType
			if agreed != 0 && t&agreed == 0 {
				t = ChecksumCRC32C
			}
			h.Flags |= t.flags() // a read asks the server for one
			switch {
			case b.Op != BulkWrite:
			case b.Presummed && t == b.ChecksumType:
				h.BulkCksum = b.Presum
			default:
				h.BulkCksum = t.Sum(b.Buffers)
			}
		}
	}
	return h
}

// send PUTs the request to target's portal. timeout, if positive, is what
// the header tells the server the client will wait.
func (r *rpc) send(ctx context.Context, target lwire.ProcessID, portal uint32, h *wire.Header, timeout time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if timeout > 0 {
		h.Timeout = uint32(min(max(timeout/time.Millisecond, 1), 1<<31))
	}
	// Early replies are for clients running adaptive timeouts: with them
	// off (at_max 0) the request waits its timeout (obd_timeout for an
	// import) and says so, as Lustre's client leaves MSGHDR_AT_SUPPORT out.
	h.Flags &^= wire.MsgATSupport
	r.atSupport = timeout > 0 && NodeTimeouts().ATMax != 0
	if r.atSupport {
		h.Flags |= wire.MsgATSupport
	}
	var own *msgBufs
	if r.nsent == 0 {
		own = &r.first
	}
	msg, err := message(own, h, r.req.Body)
	if err != nil {
		return fmt.Errorf("ptlrpc: %v xid %d: %w", h.Opcode, h.XID, err)
	}
	c := r.c
	smd, err := c.ln.Bind(lnet.MD{Buffers: msg, Threshold: 1, Options: r.sendOpts, Handler: sendHandler, User: r})
	if err == nil {
		r.sends++
		r.nsent++
		r.sentAt = time.Now()
		if r.smds == nil {
			r.smds = r.smdBuf[:0]
		}
		r.smds = append(r.smds, smd)
		hdrData := uint64(c.cfg.BulkPortal)<<32 | uint64(c.cfg.ReplyPortal)
		if err = c.ln.Put(ctx, smd, lnet.NoAckReq, target, portal, r.xid, 0, hdrData); err != nil {
			// The MD was never used: no SEND event will come.
			r.sends--
			r.nsent--
			r.smds = r.smds[:len(r.smds)-1]
			c.ln.Unlink(smd)
		}
	}
	if err != nil {
		return fmt.Errorf("ptlrpc: send %v xid %d to %v: %w", h.Opcode, r.xid, target, err)
	}
	c.sent.Add(1)
	if h.Flags&wire.MsgResent != 0 {
		c.resent.Add(1)
	}
	return nil
}

// attempt sends r once and waits for its final reply; see wait.
func (r *rpc) attempt(ctx context.Context, target lwire.ProcessID, portal uint32, h *wire.Header, timeout time.Duration, abort <-chan struct{}) (replyMsg, error) {
	if err := r.send(ctx, target, portal, h, timeout); err != nil {
		return replyMsg{}, err
	}
	return r.wait(ctx, timeout, abort)
}

// waitTimers keeps stopped timers for wait: one per RPC was two
// allocations.
var waitTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// errSendFailed wraps a send that LNet reported failed after Put returned.
var errSendFailed = errors.New("ptlrpc: send failed")

// wait waits for r's final reply. timeout, if positive, is how long to
// wait from the last send; each early reply moves the deadline to its
// extension from now. It returns ErrTimeout when the deadline passes, an
// error wrapping errSendFailed when LNet could not send the request, ctx's
// error, ErrEvicted when abort closes, or the reply (whose decoding may
// have failed: then the error wraps ErrBadReply).
func (r *rpc) wait(ctx context.Context, timeout time.Duration, abort <-chan struct{}) (replyMsg, error) {
	Blocking(ctx) // a handler's RPC: its reply may come on the handler's connection
	var t *time.Timer
	var timer <-chan time.Time
	if timeout > 0 {
		t = waitTimers.Get().(*time.Timer)
		t.Reset(time.Until(r.sentAt.Add(timeout)))
		defer func() {
			t.Stop() // since Go 1.23 no stale expiry is received after Stop
			waitTimers.Put(t)
		}()
		timer = t.C
	}
	for {
		r.evMu.Lock()
		if r.ev.hasFinal {
			m := r.ev.final
			r.ev.final, r.ev.hasFinal = replyMsg{}, false
			r.evMu.Unlock()
			r.gotReply = true
			return m, m.err
		}
		if r.ev.hasEarly {
			r.ev.hasEarly = false
			switch {
			case !r.atSupport:
				// Not asked for (adaptive timeouts off here): the
				// request keeps the deadline it was sent with.
				r.c.log.Debug("ptlrpc: early reply ignored: adaptive timeouts off", "op", r.req.Opcode, "xid", r.xid, "extension", r.ev.early)
			case t != nil:
				r.c.early.Add(1)
				t.Reset(r.ev.early)
			default:
				r.c.early.Add(1)
			}
		}
		r.evMu.Unlock()
		if err := r.takeSends(); err != nil {
			return replyMsg{}, fmt.Errorf("%w: xid %d: %w", errSendFailed, r.xid, err)
		}
		select {
		case <-r.wake:
		case <-timer:
			r.c.timeouts.Add(1)
			return replyMsg{}, fmt.Errorf("%w: %v xid %d after %v", ErrTimeout, r.req.Opcode, r.xid, timeout)
		case <-abort:
			return replyMsg{}, ErrEvicted
		case <-r.c.closing:
			return replyMsg{}, fmt.Errorf("ptlrpc: %v xid %d: %w", r.req.Opcode, r.xid, ErrClosed)
		case <-ctx.Done():
			return replyMsg{}, ctx.Err()
		}
	}
}

// errCksumRetry says a bulk read's data did not match its checksum and the
// request should be sent again.
var errCksumRetry = errors.New("ptlrpc: bulk read checksum mismatch")

// checkBulkReply verifies a successful bulk read against the checksum the
// server sent. A mismatch is counted, logged and returned as an error
// wrapping errCksumRetry and ErrBulkChecksum.
func (r *rpc) checkBulkReply(h *wire.Header) error {
	b := r.req.Bulk
	if b == nil || b.Op != BulkRead || !b.Checksum || h.Status != 0 || h.Type != wire.TypeReply {
		return nil
	}
	if h.Flags&wire.MsgBulkCksum == 0 || int(h.BulkLen) > r.bulkLen {
		return fmt.Errorf("%w: %v xid %d: bulk read of %d bytes without a checksum", ErrBadReply, r.req.Opcode, r.xid, h.BulkLen)
	}
	// The server sums by the algorithm the request named, which the reply
	// names too (a late reply may answer an earlier send that named
	// another).
	t := flagChecksum(h.Flags)
	got := r.bulkSums.verify(t, b.Buffers, int(h.BulkLen), h.BulkCksum)
	if got == h.BulkCksum {
		return nil
	}
	r.c.cksumErrs.Add(1)
	r.c.log.Warn("ptlrpc: bulk read checksum mismatch", "op", r.req.Opcode, "xid", r.xid, "len", h.BulkLen, "type", t,
		"server_cksum", fmt.Sprintf("%#08x", h.BulkCksum), "client_cksum", fmt.Sprintf("%#08x", got))
	return fmt.Errorf("%w: %w: %v xid %d", ErrBulkChecksum, errCksumRetry, r.req.Opcode, r.xid)
}

// replyHandler and sendHandler are the handlers of every request's reply
// and send MDs, which carry their rpc as User: one function for all, not a
// closure per request.
func replyHandler(ev lnet.Event) { ev.User.(*rpc).replyEvent(ev) }

func sendHandler(ev lnet.Event) {
	if ev.Type == lnet.EventSend {
		ev.User.(*rpc).sendEvent(ev.Status)
	}
}

// replyEvent decodes what landed in the reply MD. It runs on LNet's event
// path, serialized for the MD.
func (r *rpc) replyEvent(ev lnet.Event) {
	buf := r.replyBufs[0]
	switch ev.Type {
	case lnet.EventUnlink:
		r.pool.Put(r.bp)
		return
	case lnet.EventPut:
		if ev.Status != nil {
			return
		}
	default:
		return
	}
	data := buf[ev.Offset : ev.Offset+ev.MLength]
	var h wire.Header
	if err := h.Unmarshal(data); err != nil {
		r.deliver(replyMsg{err: fmt.Errorf("%w: xid %d: %w", ErrBadReply, r.xid, err)})
		return
	}
	switch {
	case h.XID != r.xid:
		r.deliver(replyMsg{err: fmt.Errorf("%w: xid %d in the reply to xid %d", ErrBadReply, h.XID, r.xid)})
	case h.IsEarlyReply():
		r.evMu.Lock()
		r.ev.early, r.ev.hasEarly = time.Duration(h.Timeout)*time.Millisecond, true // only the latest counts
		r.signal()
		r.evMu.Unlock()
	case h.Type != wire.TypeReply && h.Type != wire.TypeError:
		r.deliver(replyMsg{err: fmt.Errorf("%w: xid %d: unexpected %v", ErrBadReply, r.xid, h.Type)})
	case ev.MLength < ev.RLength || int(h.BodyLen) > len(data)-wire.HeaderSize:
		r.deliver(replyMsg{hdr: h, err: fmt.Errorf("%w: xid %d: body of %d bytes truncated", ErrBadReply, r.xid, h.BodyLen)})
	default:
		if r.c.cfg.Faults.check(FailClientDropReply) {
			r.c.droppedReplies.Add(1)
			return
		}
		var body []byte
		if h.BodyLen > 0 {
			body = make([]byte, h.BodyLen)
			copy(body, data[wire.HeaderSize:])
		}
		r.deliver(replyMsg{hdr: h, body: body})
	}
}

// deliver hands a final reply to the waiter, dropping it if one is already
// waiting to be read (a duplicate reply to a resent request).
func (r *rpc) deliver(m replyMsg) {
	r.evMu.Lock()
	if !r.ev.hasFinal {
		r.ev.final, r.ev.hasFinal = m, true
		r.signal()
	}
	r.evMu.Unlock()
}

// finish unlinks r's MDs and returns once LNet no longer touches the
// caller's body and bulk buffers.
func (r *rpc) finish() {
	ln := r.c.ln
	defer r.c.untrack(r)
	ln.Unlink(r.rmd) // its buffer goes back to the pool on EventUnlink
	for _, h := range r.bulkMDs {
		ln.Unlink(h)
	}
	for range r.bulkMDs {
		<-r.bulkGone
	}
	// A reply to the only send means the server has the whole request, so
	// nothing reads the body any more. Otherwise a send may still be in
	// progress; one not started is canceled below, one started ends with
	// its connection at worst.
	if r.gotReply && r.nsent == 1 {
		return
	}
	// A send still queued (for a connection to a server that died, while
	// the request went to its failover partner) is canceled: LNet or the
	// LND ends it now, not at the transaction timeout, and it never
	// reaches a server later. One already ended errs here, harmlessly.
	for _, h := range r.smds {
		ln.Unlink(h)
	}
	for {
		for r.takeSends() != nil { // reported or not, a failure ends its send
		}
		if r.sends <= 0 {
			return
		}
		<-r.wake
	}
}
