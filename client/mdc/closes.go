package mdc

import (
	"context"
	"sync"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

// Put-off closes: the close of an open that changed nothing (no data
// written, no times, no size) tells the MDT only that the open ended. It
// need not cost an RPC of its own — a file made and closed costs an open
// and a close RPC, and the close was a third of a FUSE create's work — so
// CloseLater keeps it and the client's next MDT request (an intent or a
// reint) carries it, as early lock cancels ride; closeDelay after the
// first one, the closes still kept go by themselves. The open stays
// tracked (replayed to a restarted MDT) until its close is carried.

const (
	// closeDelay is the longest a close waits for a request to ride on.
	closeDelay = 20 * time.Millisecond
	// maxLaterCloses bounds the closes kept (and carried by one request).
	maxLaterCloses = 32
)

type laterCloses struct {
	mu    sync.Mutex
	q     []*mdsv1.CloseRequest
	timer *time.Timer
	// flushing says the timer's goroutine sends closes now.
	flushing bool
}

// CloseLater puts off f's close, which changes nothing, for the next
// request to carry (or closeDelay), and reports whether it did; if not
// (too many kept) the caller closes now.
func (c *Client) CloseLater(cred Cred, f *File) bool {
	lc := &c.later
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if len(lc.q) >= maxLaterCloses {
		return false
	}
	if f.Lock != nil {
		f.Lock.Release()
		f.Lock = nil
	}
	lc.q = append(lc.q, &mdsv1.CloseRequest{Cred: credTo(cred), Handle: f.Handle, Fid: fidTo(f.FID)})
	if lc.timer == nil {
		lc.timer = time.AfterFunc(closeDelay, c.flushLater)
	} else if len(lc.q) == 1 {
		lc.timer.Reset(closeDelay)
	}
	return true
}

// takeCloses returns the kept closes, for a request to carry.
func (c *Client) takeCloses() []*mdsv1.CloseRequest {
	lc := &c.later
	lc.mu.Lock()
	defer lc.mu.Unlock()
	q := lc.q
	lc.q = nil
	return q
}

// carried ends the closes a request carried: once it succeeded their
// opens are forgotten; otherwise (it may or may not have reached the MDT,
// or been refused before the closes were done) they are kept again, for
// another request or the timer (a close of a handle no longer open is a
// no-op at the MDT).
func (c *Client) carried(qs []*mdsv1.CloseRequest, err error) {
	if len(qs) == 0 {
		return
	}
	if err == nil {
		c.opensMu.Lock()
		for _, q := range qs {
			delete(c.opens, q.Handle)
		}
		c.opensMu.Unlock()
		return
	}
	lc := &c.later
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.q = append(qs, lc.q...)
	if lc.timer != nil {
		lc.timer.Reset(closeDelay)
	}
}

// flushLater sends the kept closes, an MDS_CLOSE each: the timer's, when
// no request carried them in time.
func (c *Client) flushLater() {
	lc := &c.later
	lc.mu.Lock()
	if lc.flushing {
		lc.mu.Unlock()
		return
	}
	lc.flushing = true
	lc.mu.Unlock()
	defer func() {
		lc.mu.Lock()
		lc.flushing = false
		if len(lc.q) > 0 { // kept while this flush ran
			lc.timer.Reset(closeDelay)
		}
		lc.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.FlushCloses(ctx)
}

// FlushCloses sends every close put off, now (an unmount's, the timer's).
func (c *Client) FlushCloses(ctx context.Context) {
	for _, q := range c.takeCloses() {
		err := c.call(ctx, wire.MDSClose, q, nil, 0)
		c.opensMu.Lock()
		delete(c.opens, q.Handle)
		c.opensMu.Unlock()
		if err != nil && ctx.Err() != nil {
			return
		}
	}
}
