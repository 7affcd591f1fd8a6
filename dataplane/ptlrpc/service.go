package ptlrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
// an errno (negative, or positive and then negated) sent back as a
// TypeError reply without a body. ctx ends when the service closes.
// req.Body stays valid after the handler returns only if the handler copied
// it; the buffer is reused.
type Handler func(ctx context.Context, req *Request) (body []byte, status int32)

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

	replyPortal uint32
	buf         *rqbd
}

// ServiceConfig configures a Service.
type ServiceConfig struct {
	// Name names the service in logs.
	Name string
	// RequestPortal is the LNet portal requests arrive on.
	RequestPortal uint32
	// Handlers serve the opcodes the service knows.
	Handlers map[wire.Opcode]Handler
	// Threads is the number of handler goroutines; 0 means 4.
	Threads int
	// BufferSize is the size of each request buffer; 0 means 1 MiB. It is
	// raised to HeaderSize+MaxBodySize if smaller.
	BufferSize int
	// Buffers is the number of request buffers; 0 means 4.
	Buffers int
	// MaxBodySize is the largest request body accepted; 0 means 64 KiB. It
	// is capped so that header and body fit one LNet message.
	MaxBodySize int
	// Logger receives the service's logs; nil means slog.Default().
	Logger *slog.Logger
}

// OpStats are the counters of one opcode.
type OpStats struct {
	// Count is how many requests were handled.
	Count uint64
	// Errors is how many of them got a non-zero status.
	Errors uint64
	// ServiceTime is the total time spent in the handler.
	ServiceTime time.Duration
}

// ServiceStats are a snapshot of a Service's counters.
type ServiceStats struct {
	// Received counts every request that landed, valid or not.
	Received uint64
	// Malformed counts requests dropped because their header did not decode.
	Malformed uint64
	// Busy counts requests answered -EAGAIN because the queue was full.
	Busy uint64
	// Unsupported counts requests for opcodes without a handler.
	Unsupported uint64
	// Oversize counts requests answered -EMSGSIZE.
	Oversize uint64
	// ReplyErrors counts replies LNet refused to send.
	ReplyErrors uint64
	// Reposts counts request buffers posted again after filling up.
	Reposts uint64
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
}

// Service serves requests on one portal. Its methods are safe for
// concurrent use.
type Service struct {
	ln      *lnet.LNet
	cfg     ServiceConfig
	log     *slog.Logger
	maxReq  int
	ctx     context.Context
	cancel  context.CancelFunc
	queue   chan *Request
	workers sync.WaitGroup

	mu      sync.Mutex // guards bufs, closed, ops and the rqbds
	bufs    []*rqbd
	closed  bool
	ops     map[wire.Opcode]OpStats
	allGone chan struct{} // closed when every rqbd is unlinked after Close

	received, malformed, busy, unsupported, oversize, replyErrors, reposts atomic.Uint64
}

// NewService starts a service: it posts the request buffers and starts the
// handler goroutines. Close stops it.
func NewService(ln *lnet.LNet, cfg ServiceConfig) (*Service, error) {
	if cfg.Threads <= 0 {
		cfg.Threads = 4
	}
	if cfg.BufferSize <= 0 {
		cfg.BufferSize = 1 << 20
	}
	if cfg.Buffers <= 0 {
		cfg.Buffers = 4
	}
	if cfg.MaxBodySize <= 0 {
		cfg.MaxBodySize = 64 << 10
	}
	cfg.MaxBodySize = min(cfg.MaxBodySize, wire.MaxBodySize, maxMessage-wire.HeaderSize)
	maxReq := wire.HeaderSize + cfg.MaxBodySize
	cfg.BufferSize = max(cfg.BufferSize, maxReq)
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{
		ln: ln, cfg: cfg, log: lg.With("service", cfg.Name), maxReq: maxReq,
		ctx: ctx, cancel: cancel, queue: make(chan *Request, cfg.Threads*8),
		ops: make(map[wire.Opcode]OpStats), allGone: make(chan struct{}),
	}
	for range cfg.Buffers {
		b := &rqbd{mem: make([]byte, cfg.BufferSize)}
		s.bufs = append(s.bufs, b)
		if err := s.post(b); err != nil {
			s.Close(context.Background())
			return nil, err
		}
	}
	for range cfg.Threads {
		s.workers.Go(s.worker)
	}
	return s, nil
}

// post attaches b to the request portal, accepting any match bits.
func (s *Service) post(b *rqbd) error {
	s.mu.Lock()
	if s.closed {
		s.checkGoneLocked()
		s.mu.Unlock()
		return nil
	}
	b.refs, b.full, b.unlinked = 0, false, false
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
		if unlink {
			b.full = true
		}
		s.mu.Unlock()
		if unlink {
			s.ln.Unlink(ev.MD)
		}
		s.incoming(b, ev, b.mem[ev.Offset:end:end])
	}
}

// release marks one request of b done.
func (s *Service) release(b *rqbd) {
	s.mu.Lock()
	b.refs--
	s.mu.Unlock()
	s.maybeRepost(b)
}

// maybeRepost posts b again once it is unlinked and every request in it is
// done, or, after Close, reports when every buffer is gone.
func (s *Service) maybeRepost(b *rqbd) {
	s.mu.Lock()
	if !b.unlinked || b.refs > 0 {
		s.mu.Unlock()
		return
	}
	if s.closed {
		s.checkGoneLocked()
		s.mu.Unlock()
		return
	}
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
	req := &Request{Header: h, Peer: ev.Initiator, Arrived: time.Now(), replyPortal: uint32(ev.HdrData), buf: b}
	if ev.MLength < ev.RLength || int(h.BodyLen) > len(data)-wire.HeaderSize || int(h.BodyLen) > s.cfg.MaxBodySize {
		s.oversize.Add(1)
		s.replyDone(req, nil, -errnoEMSGSIZE)
		return
	}
	req.Body = data[wire.HeaderSize : wire.HeaderSize+int(h.BodyLen) : wire.HeaderSize+int(h.BodyLen)]
	if _, ok := s.cfg.Handlers[h.Opcode]; !ok {
		s.unsupported.Add(1)
		s.replyDone(req, nil, -errnoEOPNOTSUPP)
		return
	}
	s.mu.Lock()
	queued := false
	if !s.closed {
		select {
		case s.queue <- req:
			queued = true
		default:
		}
	}
	s.mu.Unlock()
	if !queued {
		s.busy.Add(1)
		s.replyDone(req, nil, -errnoEAGAIN)
	}
}

// worker runs handlers until the queue is closed.
func (s *Service) worker() {
	for req := range s.queue {
		t0 := time.Now()
		body, status := s.cfg.Handlers[req.Header.Opcode](s.ctx, req)
		d := time.Since(t0)
		s.mu.Lock()
		st := s.ops[req.Header.Opcode]
		st.Count++
		st.ServiceTime += d
		if status != 0 {
			st.Errors++
		}
		s.ops[req.Header.Opcode] = st
		s.mu.Unlock()
		s.replyDone(req, body, status)
	}
}

// replyDone sends the reply to req and releases its buffer.
func (s *Service) replyDone(req *Request, body []byte, status int32) {
	defer s.release(req.buf)
	if status > 0 {
		status = -status
	}
	if status != 0 && !wire.ErrnoValid(status) {
		status = -errnoEIO
	}
	if status == 0 && wire.HeaderSize+len(body) > maxMessage {
		s.log.Error("ptlrpc: reply body too big", "op", req.Header.Opcode, "len", len(body))
		status, body = -errnoEMSGSIZE, nil
	}
	h := wire.Header{Type: wire.TypeReply, Opcode: req.Header.Opcode, XID: req.Header.XID,
		ServiceTime: uint32(time.Since(req.Arrived) / time.Second)}
	if status != 0 {
		h.Type, h.Status, body = wire.TypeError, status, nil
	}
	h.BodyLen = uint32(len(body))
	hdr := make([]byte, wire.HeaderSize)
	if err := h.Marshal(hdr); err != nil {
		s.log.Error("ptlrpc: marshal reply", "err", err)
		return
	}
	msg := [][]byte{hdr} // header and body as one iovec, the body not copied
	if len(body) > 0 {
		msg = append(msg, body)
	}
	md, err := s.ln.Bind(lnet.MD{Buffers: msg, Threshold: 1})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), replySendTimeout)
		err = s.ln.Put(ctx, md, lnet.NoAckReq, req.Peer, req.replyPortal, req.Header.XID, 0, 0)
		cancel()
		if err != nil {
			s.ln.Unlink(md)
		}
	}
	if err != nil {
		s.replyErrors.Add(1)
		s.log.Warn("ptlrpc: send reply", "to", req.Peer, "xid", req.Header.XID, "err", err)
	}
}

// Stats returns a snapshot of the service's counters.
func (s *Service) Stats() ServiceStats {
	st := ServiceStats{
		Received: s.received.Load(), Malformed: s.malformed.Load(), Busy: s.busy.Load(),
		Unsupported: s.unsupported.Load(), Oversize: s.oversize.Load(),
		ReplyErrors: s.replyErrors.Load(), Reposts: s.reposts.Load(),
		Ops: make(map[wire.Opcode]OpStats),
	}
	s.mu.Lock()
	for k, v := range s.ops {
		st.Ops[k] = v
	}
	s.mu.Unlock()
	return st
}

// Close unlinks the request buffers and waits for the handlers to finish
// the requests already queued and for the buffers to be released. If ctx
// ends first, it cancels the handlers' context and returns ctx's error.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("ptlrpc: service already closed")
	}
	s.closed = true
	close(s.queue)
	var mds []lnet.MDHandle
	for _, b := range s.bufs {
		if !b.md.IsZero() && !b.unlinked {
			mds = append(mds, b.md)
		}
	}
	s.checkGoneLocked()
	s.mu.Unlock()
	for _, h := range mds {
		s.ln.Unlink(h)
	}
	done := make(chan struct{})
	go func() {
		s.workers.Wait()
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
