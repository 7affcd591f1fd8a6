package mdc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

// Put-off closes: the close of an open that made its file and changed
// nothing since (no data written, no times, no size) tells the MDT only
// that the open ended. It need not cost an RPC of its own — a file made
// and closed costs an open and a close RPC, and the close was a third of a
// FUSE create's work — so CloseLater keeps it and the client's next MDT
// request (an intent or a reint) carries it (a handle and a FID, as early
// lock cancels ride); closeDelay after the first one, the closes still
// kept go by themselves. The MDT ends carried closes before anything else
// in the request, even one it refuses, so any reply means they were done;
// a request that got none gives them back to the queue. The open stays
// tracked (replayed to a restarted MDT) until its close is done.

const (
	// closeDelay is the longest a close waits for a request to ride on.
	closeDelay = 20 * time.Millisecond
	// maxLaterCloses bounds the closes CloseLater keeps, and those one
	// request carries (the MDT takes up to 64). Requests that got no reply
	// give theirs back whatever the count: at most one batch per request
	// in flight.
	maxLaterCloses = 32
	// closeTimeout bounds the MDS_CLOSE of a close the timer sends.
	closeTimeout = time.Minute
)

// laterClose is a put-off close.
type laterClose struct {
	cred   Cred
	handle uint64
	fid    fid.FID
}

type laterCloses struct {
	mu    sync.Mutex
	q     []laterClose
	timer *time.Timer
	armed bool // the timer will fire
	// flushing says the timer's goroutine sends closes now.
	flushing bool
}

// CloseLater puts off f's close, which changes nothing, for the next
// request to carry (or closeDelay), and reports whether it did; if not
// (too many kept) the caller closes now.
func (c *Client) CloseLater(cred Cred, f *File) bool {
	lc := &c.later
	lc.mu.Lock()
	if len(lc.q) >= maxLaterCloses {
		lc.mu.Unlock()
		return false
	}
	lc.q = append(lc.q, laterClose{cred: cred, handle: f.Handle, fid: f.FID})
	lc.armLocked()
	lc.mu.Unlock()
	if f.Lock != nil {
		f.Lock.Release()
		f.Lock = nil
	}
	return true
}

// armLocked arms the timer unless it is armed already (a close kept
// longer does not push back those kept before).
func (lc *laterCloses) armLocked() {
	if lc.armed || len(lc.q) == 0 {
		return
	}
	lc.armed = true
	lc.timer.Reset(closeDelay)
}

// PutOffCloses returns how many closes are kept.
func (c *Client) PutOffCloses() int {
	c.later.mu.Lock()
	defer c.later.mu.Unlock()
	return len(c.later.q)
}

// takeCloses returns up to maxLaterCloses kept closes.
func (c *Client) takeCloses() []laterClose {
	lc := &c.later
	lc.mu.Lock()
	defer lc.mu.Unlock()
	n := min(len(lc.q), maxLaterCloses)
	if n == 0 {
		return nil
	}
	qs := append([]laterClose(nil), lc.q[:n]...)
	lc.q = append(lc.q[:0], lc.q[n:]...)
	return qs
}

// takeCarried returns up to maxLaterCloses kept closes for a request to
// carry, and their wire form: the closer's uid and gid only, for the
// changelog (a close needs no groups, which could make the request too
// large). None ride on a request whose body (size, asked only when closes
// wait) is near the MDT's limit.
func (c *Client) takeCarried(size func() int) ([]laterClose, []*mdsv1.CloseRequest) {
	if c.PutOffCloses() == 0 || size() >= maxCarrierBody {
		return nil, nil
	}
	qs := c.takeCloses()
	if len(qs) == 0 {
		return nil, nil
	}
	ws := make([]*mdsv1.CloseRequest, len(qs))
	for i, q := range qs {
		ws[i] = &mdsv1.CloseRequest{Cred: &mdsv1.Cred{Uid: q.cred.UID, Gid: q.cred.GID}, Handle: q.handle, Fid: fidTo(q.fid)}
	}
	return qs, ws
}

// carried ends the closes a request that ended with err carried: if it
// succeeded their opens are forgotten; else they go back to the queue,
// whatever the error — the MDT may have done them (it ends them before
// anything else) or not (its request service refused the request: too
// big, too busy, an error status all the same), and a close of a handle
// no longer open is a no-op there. The queue grows by at most one batch
// per request in flight. Once the import is closed they are dropped: the
// MDT ends a departed client's opens itself.
func (c *Client) carried(qs []laterClose, err error) {
	if len(qs) == 0 {
		return
	}
	if err == nil || errors.Is(err, ptlrpc.ErrClosed) {
		c.opensMu.Lock()
		for _, q := range qs {
			delete(c.opens, q.handle)
		}
		c.opensMu.Unlock()
		return
	}
	lc := &c.later
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.q = append(qs, lc.q...)
	lc.armLocked()
}

// flushLater sends the kept closes, an MDS_CLOSE each: the timer's, when
// no request carried them in time.
func (c *Client) flushLater() {
	lc := &c.later
	lc.mu.Lock()
	lc.armed = false
	if lc.flushing {
		lc.mu.Unlock()
		return
	}
	lc.flushing = true
	lc.mu.Unlock()
	c.FlushCloses(context.Background()) // (what is left is tried again)
	lc.mu.Lock()
	lc.flushing = false
	lc.armLocked() // kept while this flush ran, or given back
	lc.mu.Unlock()
}

// FlushCloses sends every close put off, now (an unmount's, an HSM
// release's, the timer's), an MDS_CLOSE each, all of them within ctx:
// each gets closeTimeout at most, and none outlasts ctx (an unmount's
// deadline covers them together, not a minute each). It returns nil once
// every close got a reply. When ctx ends first, or a close gets no reply
// (the MDT is unreachable), the closes not done go back to the queue (the
// timer tries them again; an unmount's go with the import, and the MDT
// ends a departed client's opens itself) and the error says how many
// there are and names some.
func (c *Client) FlushCloses(ctx context.Context) error {
	for {
		qs := c.takeCloses()
		if len(qs) == 0 {
			return nil
		}
		for i, q := range qs {
			err := ctx.Err()
			if err == nil {
				cctx, cancel := context.WithTimeout(ctx, closeTimeout)
				err = c.call(cctx, wire.MDSClose, &mdsv1.CloseRequest{Cred: credTo(q.cred), Handle: q.handle, Fid: fidTo(q.fid)}, nil, 0)
				cancel()
				if replied(err) {
					c.carried(qs[i:i+1], nil)
					continue
				}
			}
			c.carried(qs[i:], err)
			return c.notClosed(err)
		}
	}
}

// notClosed describes the closes still put off after a flush that
// stopped with err.
func (c *Client) notClosed(err error) error {
	lc := &c.later
	lc.mu.Lock()
	n := len(lc.q)
	var fids []fid.FID
	for _, q := range lc.q[:min(n, 8)] {
		fids = append(fids, q.fid)
	}
	lc.mu.Unlock()
	if n == 0 { // dropped: the import is closed
		return nil
	}
	more := ""
	if n > len(fids) {
		more = ", ..."
	}
	return fmt.Errorf("mdc: %d put-off closes not sent (of %v%s): %w", n, fids, more, err)
}

// setupLater makes the timer (stopped) once.
func (c *Client) setupLater() {
	c.later.timer = time.AfterFunc(time.Hour, c.flushLater)
	c.later.timer.Stop()
}

// replied reports whether an MDS_CLOSE that failed with err got a reply
// from the MDT (a handle not open: EBADF, say), which needs no resend.
func replied(err error) bool {
	var re *ptlrpc.RemoteError
	return err == nil || errors.As(err, &re) || errors.Is(err, ErrBadReply)
}

// maxCarrierBody is the largest request body put-off closes ride on: a
// request near the MDT's limit (a large xattr) goes without them.
const maxCarrierBody = 32 << 10
