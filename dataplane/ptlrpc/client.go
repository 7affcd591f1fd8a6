package ptlrpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/lnet"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// replyBufSize is the size of a reply MD.
const replyBufSize = wire.HeaderSize + wire.MaxBodySize

// replyBufs recycles reply buffers; a buffer goes back only after its MD's
// EventUnlink, when LNet no longer touches it.
var replyBufs = sync.Pool{New: func() any { b := make([]byte, replyBufSize); return &b }}

// RemoteError is a TypeError reply: the service could not or would not
// perform the request. errors.Is(err, syscall.EAGAIN) and the like work on
// it.
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

// ErrBadReply is wrapped by the error of a call whose reply did not decode
// or did not fit its MD.
var ErrBadReply = errors.New("ptlrpc: bad reply")

// ClientConfig configures a Client.
type ClientConfig struct {
	// ReplyPortal is the portal replies are posted on. Several clients of
	// one LNet may share it: XIDs are unique per client and seeded from
	// time, and each reply MD matches its XID only.
	ReplyPortal uint32
}

// Client sends requests and waits for their replies. It is safe for
// concurrent use.
type Client struct {
	ln  *lnet.LNet
	cfg ClientConfig
	xid atomic.Uint64
}

// NewClient returns a client sending through ln.
func NewClient(ln *lnet.LNet, cfg ClientConfig) *Client {
	c := &Client{ln: ln, cfg: cfg}
	c.xid.Store(uint64(time.Now().UnixNano()))
	return c
}

// nextXID returns a fresh XID, never 0.
func (c *Client) nextXID() uint64 {
	for {
		if x := c.xid.Add(1); x != 0 {
			return x
		}
	}
}

// Call is one request of a request set.
type Call struct {
	// Target is the service's process; Portal its request portal.
	Target lwire.ProcessID
	Portal uint32
	// Opcode and Body are the request.
	Opcode wire.Opcode
	Body   []byte
}

// Result is the outcome of one Call of a request set.
type Result struct {
	// Reply is the reply body when Err is nil.
	Reply []byte
	// Err is the call's error: a *RemoteError, a send error, or ctx's error.
	Err error
}

// pending is one request in flight.
type pending struct {
	c     *Client
	xid   uint64
	reply lnet.MDHandle
	done  chan Result // capacity 2: the reply and a send failure
}

// Call sends body as a request for op to the service on target's portal and
// waits for the reply or for ctx to end. A TypeError reply is returned as a
// *RemoteError. When ctx ends first the reply MD is unlinked and ctx's error
// returned.
func (c *Client) Call(ctx context.Context, target lwire.ProcessID, portal uint32, op wire.Opcode, body []byte) ([]byte, error) {
	p, err := c.start(ctx, Call{Target: target, Portal: portal, Opcode: op, Body: body})
	if err != nil {
		return nil, err
	}
	r := p.wait(ctx)
	return r.Reply, r.Err
}

// CallSet sends every call without waiting, then collects their replies,
// all under ctx's one deadline. Results are in the order of calls.
func (c *Client) CallSet(ctx context.Context, calls []Call) []Result {
	res := make([]Result, len(calls))
	ps := make([]*pending, len(calls))
	for i, call := range calls {
		p, err := c.start(ctx, call)
		if err != nil {
			res[i].Err = err
			continue
		}
		ps[i] = p
	}
	for i, p := range ps {
		if p != nil {
			res[i] = p.wait(ctx)
		}
	}
	return res
}

// start posts the reply MD and sends the request.
func (c *Client) start(ctx context.Context, call Call) (*pending, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if wire.HeaderSize+len(call.Body) > maxMessage || len(call.Body) > wire.MaxBodySize {
		return nil, fmt.Errorf("ptlrpc: request body of %d bytes, at most %d", len(call.Body), maxMessage-wire.HeaderSize)
	}
	p := &pending{c: c, xid: c.nextXID(), done: make(chan Result, 2)}
	h := wire.Header{Type: wire.TypeRequest, Opcode: call.Opcode, XID: p.xid, BodyLen: uint32(len(call.Body))}
	if dl, ok := ctx.Deadline(); ok {
		h.Timeout = uint32(max(time.Until(dl)/time.Second, 1))
	}
	hdr := make([]byte, wire.HeaderSize)
	if err := h.Marshal(hdr); err != nil {
		return nil, err
	}
	// Header and body go out as one iovec: the body is sent from the
	// caller's buffer, which Call does not return before the reply (so
	// after the bytes have left).
	msg := [][]byte{hdr}
	if len(call.Body) > 0 {
		msg = append(msg, call.Body)
	}

	bp := replyBufs.Get().(*[]byte)
	rmd, err := c.ln.Attach(c.cfg.ReplyPortal, lnet.AnyProcess, p.xid, 0, lnet.InsertLast, lnet.MD{
		Buffers: [][]byte{*bp}, Threshold: 1, Options: lnet.MDOpPut | lnet.MDTruncate,
		Handler: func(ev lnet.Event) { p.replyEvent(ev, *bp, bp) },
	})
	if err != nil {
		replyBufs.Put(bp)
		return nil, fmt.Errorf("ptlrpc: post reply MD: %w", err)
	}
	p.reply = rmd
	smd, err := c.ln.Bind(lnet.MD{Buffers: msg, Threshold: 1, Handler: func(ev lnet.Event) {
		if ev.Type == lnet.EventSend && ev.Status != nil {
			p.done <- Result{Err: fmt.Errorf("ptlrpc: send xid %d to %v: %w", p.xid, call.Target, ev.Status)}
		}
	}})
	if err == nil {
		err = c.ln.Put(ctx, smd, lnet.NoAckReq, call.Target, call.Portal, p.xid, 0, uint64(c.cfg.ReplyPortal))
		if err != nil {
			c.ln.Unlink(smd)
		}
	}
	if err != nil {
		c.ln.Unlink(rmd)
		return nil, fmt.Errorf("ptlrpc: send xid %d to %v: %w", p.xid, call.Target, err)
	}
	return p, nil
}

// replyEvent decodes the reply that landed in the reply MD.
func (p *pending) replyEvent(ev lnet.Event, buf []byte, bp *[]byte) {
	switch ev.Type {
	case lnet.EventUnlink:
		replyBufs.Put(bp)
		return
	case lnet.EventPut:
	default:
		return
	}
	data := buf[ev.Offset : ev.Offset+ev.MLength]
	var h wire.Header
	if err := h.Unmarshal(data); err != nil {
		p.done <- Result{Err: fmt.Errorf("%w: xid %d: %w", ErrBadReply, p.xid, err)}
		return
	}
	switch {
	case h.XID != p.xid:
		p.done <- Result{Err: fmt.Errorf("%w: xid %d in the reply to xid %d", ErrBadReply, h.XID, p.xid)}
	case h.Type == wire.TypeError:
		p.done <- Result{Err: &RemoteError{Status: h.Status}}
	case h.Type != wire.TypeReply || h.IsEarlyReply():
		p.done <- Result{Err: fmt.Errorf("%w: xid %d: unexpected %v", ErrBadReply, p.xid, h.Type)}
	case ev.MLength < ev.RLength || int(h.BodyLen) > len(data)-wire.HeaderSize:
		p.done <- Result{Err: fmt.Errorf("%w: xid %d: body of %d bytes truncated", ErrBadReply, p.xid, h.BodyLen)}
	default:
		body := make([]byte, h.BodyLen)
		copy(body, data[wire.HeaderSize:])
		p.done <- Result{Reply: body}
	}
}

// wait waits for the reply or ctx, unlinking the reply MD if ctx wins.
func (p *pending) wait(ctx context.Context) Result {
	select {
	case r := <-p.done:
		if r.Reply == nil && r.Err != nil {
			p.c.ln.Unlink(p.reply) // a send failure: no reply will come
		}
		return r
	case <-ctx.Done():
		p.c.ln.Unlink(p.reply)
		return Result{Err: ctx.Err()}
	}
}
