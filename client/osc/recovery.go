package osc

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// Recovery of an OST that restarts (Lustre's unstable pages and replay).
//
// An OST acknowledges a write before its journal commits it; a kill -9
// of the OST loses what was acknowledged and not committed. The pages of
// such a write are kept in the cache, not evictable, tagged with the
// write's transno (unstable), until the OST reports the transno
// committed. If the OST restarts first and takes the client back within
// its recovery window, the import replays what the OST lost: the OSC's
// locks (ldlm.ReplayLocks), then the unstable pages, written again in
// transno order on the recovering connection (the bytes their writes
// sent, not past a later truncate, which the OST replays first), before
// the writes in flight are resent and new requests go out. Write requests
// are therefore not replayed from the import's list (NoReplay): their
// data is in the pages, not in the request. A lock that is called back
// first has its unstable pages committed (OST_SYNC) before they are
// dropped.

// unstableRPC is an acknowledged, uncommitted write: its transno and its
// pages.
type unstableRPC struct {
	transno uint64
	obj     *Object
	pages   []*page
}

// noReplay: writes are replayed from the pages.
func noReplay(op wire.Opcode) bool { return op == wire.OSTWrite }

// addUnstable records r's pages, which writeDone tagged with r.transno.
func (c *Client) addUnstable(r *brwRPC) {
	pages := make([]*page, 0, len(r.segs))
	for _, s := range r.segs {
		if len(pages) == 0 || pages[len(pages)-1] != s.p {
			pages = append(pages, s.p)
		}
	}
	c.mu.Lock()
	u := c.mu.unstable
	i := sort.Search(len(u), func(k int) bool { return u[k].transno > r.transno })
	c.mu.unstable = append(u, unstableRPC{})
	copy(c.mu.unstable[i+1:], c.mu.unstable[i:])
	c.mu.unstable[i] = unstableRPC{transno: r.transno, obj: r.obj, pages: pages}
	if len(c.mu.unstable) == 1 {
		c.mu.unstableSince = time.Now()
	}
	c.mu.Unlock()
}

// releaseCommitted untags the pages of the writes the OST has reported
// committed; they may be evicted again.
func (c *Client) releaseCommitted() {
	lc := c.imp.Info().LastCommitted
	c.mu.Lock()
	u := c.mu.unstable
	n := sort.Search(len(u), func(k int) bool { return u[k].transno > lc })
	if n == 0 {
		c.mu.Unlock()
		return
	}
	done := append([]unstableRPC(nil), u[:n]...)
	clear(u[:n])
	c.mu.unstable = u[n:]
	c.mu.unstableSince = time.Now()
	c.mu.Unlock()
	for _, e := range done {
		o := e.obj
		o.mu.Lock()
		var lru []*page
		for _, p := range e.pages {
			if p.unstable == e.transno {
				p.unstable = 0
				p.sent = span{}
				lru = append(lru, p)
			}
		}
		o.c.cache.lruUpdate(lru)
		o.mu.Unlock()
	}
}

// unstableStats returns how many writes wait for their commit and since
// when the oldest has.
func (c *Client) unstableStats() (int, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.unstable), c.mu.unstableSince
}

// pollCommit asks the OST what it committed (a ping) when writes have
// waited for their commit a while and nothing else told: an idle client
// would keep their pages pinned until the next ping otherwise.
func (c *Client) pollCommit(pinging *atomic.Bool) {
	n, since := c.unstableStats()
	if n == 0 || time.Since(since) < 100*time.Millisecond || !pinging.CompareAndSwap(false, true) {
		return
	}
	c.wg.Go(func() {
		defer pinging.Store(false)
		ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
		defer cancel()
		if err := c.imp.Ping(ctx); err == nil {
			c.releaseCommitted()
		}
	})
}

// hasUnstable reports whether pages in [first, last] wait for a commit.
func (o *Object) hasUnstable(first, last uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range o.pagesInLocked(first, last) {
		if p.unstable != 0 {
			return true
		}
	}
	return false
}

// recover is the import's OnRecover: replay the OSC's locks, take the
// restarted OST's grant, and write the unstable pages again.
func (c *Client) recover(ctx context.Context, imp *ptlrpc.Import) error {
	if err := c.locks.ReplayLocks(ctx, imp); err != nil {
		return err
	}
	var cd ostv1.ConnectData
	if err := ptlrpc.Unmarshal(imp.Info().TargetData, &cd); err == nil {
		c.mu.Lock()
		c.mu.grant.reset(cd.Grant)
		c.mu.grantKnown = true
		c.mu.Unlock()
	}
	c.mu.Lock()
	list := c.mu.unstable
	c.mu.unstable = nil
	c.mu.Unlock()
	rewritten := 0
	for i, e := range list {
		n, err := c.rewrite(ctx, imp, e)
		if err != nil {
			// What is not rewritten yet goes at the next try (the import
			// recovers again after its reconnect): dropped, it was lost.
			c.mu.Lock()
			c.mu.unstable = append(c.mu.unstable, list[i:]...)
			sort.Slice(c.mu.unstable, func(a, b int) bool { return c.mu.unstable[a].transno < c.mu.unstable[b].transno })
			c.mu.Unlock()
			return err
		}
		rewritten += n
	}
	c.log.Info("osc: recovered from an OST restart", "unstable_writes", len(list), "pages_rewritten", rewritten)
	return nil
}

// rewriteRPCsLocked builds the RPCs of rewrite from e's pages that are
// still cached, each page in one of them, up to a full RPC each, and marks
// the idle pages in writeback. copies maps the copies it made of pages an
// RPC in flight holds to the pages. e.obj.mu is held.
func (c *Client) rewriteRPCsLocked(e unstableRPC) (rpcs []*brwRPC, copies map[*page]*page) {
	o := e.obj
	r := &brwRPC{obj: o, write: true}
	// copies are the pages an RPC in flight holds (a write or a read sent
	// before the restart, resent only after this recovery): the rewrite
	// sends a copy of their sent bytes, which that RPC does not change (a
	// write sends its dirty bytes, a read fills the bytes not valid), and
	// which it alone would not write again (a write sends only its own).
	copies = map[*page]*page{}
	for _, p := range e.pages {
		if o.mu.pages.get(p.idx) != p || p.data == nil || p.unstable != e.transno || p.valid.empty() {
			continue
		}
		sp := p.sent.intersect(p.valid)
		if sp.empty() {
			p.unstable = 0
			continue
		}
		q := p
		if p.state != pageIdle {
			q = &page{obj: o, idx: p.idx, data: make([]byte, PageSize)}
			copy(q.data[sp.from:sp.to], p.data[sp.from:sp.to])
			copies[q] = p
		} else {
			p.unstable = 0
			p.state = pageWriteback
			o.mu.busy++
			o.mu.writeback++
		}
		p = q
		if !r.add(p, sp) {
			// Out of niobufs: the page starts the next RPC.
			rpcs = append(rpcs, r)
			r = &brwRPC{obj: o, write: true}
			r.add(p, sp)
		}
		if r.bytes >= c.rpcPages()*PageSize {
			// Full: the next page starts the next RPC. Added to it as well,
			// a page would go out twice, the second time after the first
			// RPC let it go idle, when a writer may be changing it: its
			// bytes would not be the ones summed as the RPC was built.
			rpcs = append(rpcs, r)
			r = &brwRPC{obj: o, write: true}
		}
	}
	if len(r.segs) > 0 {
		rpcs = append(rpcs, r)
	}
	return rpcs, copies
}

// rewrite writes e's pages that are still cached and idle again, on the
// recovering connection, and records them as unstable under the new
// transno.
func (c *Client) rewrite(ctx context.Context, imp *ptlrpc.Import, e unstableRPC) (int, error) {
	o := e.obj
	o.mu.Lock()
	rpcs, copies := c.rewriteRPCsLocked(e)
	o.mu.Unlock()
	pages := 0
	var firstErr error
	for _, r := range rpcs {
		if firstErr == nil {
			r.transno, firstErr = c.replayWrite(ctx, imp, r)
		}
		o.mu.Lock()
		for k, s := range r.segs {
			p := s.p
			if orig := copies[p]; orig != nil {
				r.segs[k].p = orig // recorded unstable, and released, as itself
				if firstErr == nil && orig.unstable == e.transno {
					orig.unstable = r.transno
				}
				continue
			}
			if p.state == pageWriteback {
				p.state = pageIdle
				o.mu.busy--
				o.mu.writeback--
				if firstErr == nil {
					p.unstable = r.transno
				} else {
					p.unstable = e.transno // to be written again (recover puts e back)
				}
			}
		}
		o.broadcastLocked()
		o.mu.Unlock()
		if firstErr == nil {
			pages += len(r.segs)
			if r.transno != 0 {
				c.addUnstable(r)
			}
		}
	}
	return pages, firstErr
}

// replayWrite sends r as OST_WRITE through imp.Replay.
func (c *Client) replayWrite(ctx context.Context, imp *ptlrpc.Import, r *brwRPC) (uint64, error) {
	req, err := c.brwReq(r)
	if err != nil {
		return 0, err
	}
	// Summed from the data, not joined from the pages' sums: a refused
	// rewrite ends the recovery, and nothing sends it again.
	req.Bulk.Presummed = false
	if _, err := imp.Replay(ctx, req); err != nil {
		return 0, fmt.Errorf("osc: ost%04x: rewrite of %v after the OST restarted: %w", c.index, r.obj.fid, err)
	}
	return req.Transno, nil
}
