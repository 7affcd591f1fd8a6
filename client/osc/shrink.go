package osc

import (
	"context"
	"fmt"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// Grant shrink (Lustre's osc_shrink_grant and KEY_GRANT_SHRINK). The OST
// sets a client's grant aside whether the client writes or not, and takes
// it back on its own only from a client that writes (oss/ofd moreGrant,
// as the target fills). An OSC that has not written for
// grant_shrink_interval gives back what it holds beyond a pipeline of
// RPCs (max_rpcs_in_flight + 1 of them), and at the next interval beyond
// one RPC, so that the space serves the clients that write.
//
// In the grant accounting a shrink is a write from grant without data:
// its bytes are charged and sent (grant.charge, grant.send), and its reply
// reports the grant left, as a write's does. So every guarantee of
// grant.go holds across a shrink (TestGrantNeverOvercommits has shrinks
// among its writes). A shrink gives back only what the OSC may still
// charge (avail), which is a lower bound of the OST's figure: after
// replies that came out of order it may leave more than asked, and the
// next shrink, once the reply to this one made avail exact, the rest. The
// OST gives each shrink back once (SetInfoRequest.shrink_seq), however
// often it is resent; a shrink whose reply never comes counts as given
// back, until a reply says otherwise.

// DefaultGrantShrinkInterval is Lustre's osc.*.grant_shrink_interval.
const DefaultGrantShrinkInterval = 1200 * time.Second

// ShrinkGrant gives back to the OST the grant the OSC holds beyond target
// bytes (at least one RPC's worth is kept, as Lustre keeps it), as lctl
// set_param osc.*.cur_grant_bytes does. Dirty pages and RPCs in flight
// keep what they charged. It returns the grant the OST reports after it,
// and the OST's error if a request failed; while an idle shrink is on its
// way it sends nothing and returns the grant as it is.
func (c *Client) ShrinkGrant(ctx context.Context, target uint64) (uint64, error) {
	if err := c.Connect(ctx); err != nil {
		return 0, err
	}
	target = max(target, uint64(c.rpcPages())*PageSize)
	// A second request gives back what the first could not know was
	// there (see above).
	var total uint64
	for range 2 {
		c.mu.Lock()
		total = c.mu.grant.total
		held := uint64(c.mu.grant.held())
		if c.mu.shrinking || held <= target {
			c.mu.Unlock()
			break
		}
		var err error
		if total, err = c.shrinkLocked(ctx, min(held-target, uint64(c.mu.grant.avail))); err != nil {
			return total, err
		}
	}
	return total, nil
}

// shrinkLocked gives back n bytes (rounded down to pages) of what avail
// holds, and waits for the reply. It is called with c.mu held and returns
// with it released.
func (c *Client) shrinkLocked(ctx context.Context, n uint64) (uint64, error) {
	n &^= PageSize - 1
	if n == 0 || !c.mu.grant.charge(int64(n)) {
		total := c.mu.grant.total
		c.mu.Unlock()
		return total, nil
	}
	t := c.mu.grant.send(int64(n))
	c.mu.shrinking = true
	c.mu.shrinkSeq++
	seq := c.mu.shrinkSeq
	c.mu.lastWrite = time.Now() // the next idle shrink is an interval away
	c.mu.Unlock()

	body, err := ptlrpc.Marshal(&ostv1.SetInfoRequest{GrantShrink: n, ShrinkSeq: seq})
	var rep ostv1.SetInfoReply
	if err == nil {
		var b []byte
		if b, err = c.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.OSTSetInfo, Body: body}); err == nil {
			err = ptlrpc.Unmarshal(b, &rep)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.shrinking = false
	if err != nil {
		c.mu.grant.failed(t, false)
		c.broadcastLocked()
		return c.mu.grant.total, fmt.Errorf("osc: ost%04x: grant shrink of %d bytes: %w", c.index, n, err)
	}
	c.mu.grant.reply(t, rep.Grant)
	c.broadcastLocked()
	c.st.grantShrinks.Add(1)
	c.log.Debug("osc: grant given back", "bytes", n, "grant", rep.Grant)
	return rep.Grant, nil
}

// idleShrink gives back grant if the OSC has not written for
// grant_shrink_interval and holds more than one RPC's worth unused
// (Lustre's osc_should_shrink_grant). The engine calls it on its tick; the
// RPC goes on a goroutine of its own.
func (c *Client) idleShrink(now time.Time) {
	if !c.tun.grantShrink.Load() {
		return
	}
	c.mu.Lock()
	_, ok := c.idleShrinkLocked(now)
	if ok {
		c.mu.shrinking = true // for the goroutine, which looks again
	}
	c.mu.Unlock()
	if !ok {
		return
	}
	c.wg.Go(func() {
		ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
		defer cancel()
		c.mu.Lock()
		c.mu.shrinking = false
		n, ok := c.idleShrinkLocked(time.Now())
		if !ok {
			c.mu.Unlock()
			return
		}
		if _, err := c.shrinkLocked(ctx, n); err != nil {
			c.log.Info("osc: idle grant shrink failed", "err", err)
		}
	})
}

// idleShrinkLocked says whether the OSC is idle at now (no write RPC sent
// for grant_shrink_interval, nothing dirty or in flight) with more than
// one RPC's worth of grant, and what to give back: down to a pipeline of
// RPCs, or to one RPC if it holds no more than a pipeline.
func (c *Client) idleShrinkLocked(now time.Time) (uint64, bool) {
	rpc := uint64(c.rpcPages()) * PageSize
	avail := uint64(max(c.mu.grant.avail, 0))
	// Dirty pages, or RPCs in flight, hold grant: not idle, whenever
	// the last RPC went.
	busy := c.mu.grant.unsent != 0 || c.mu.grant.inflight() != 0
	idle := !busy && now.Sub(c.mu.lastWrite) >= time.Duration(c.tun.shrinkInterval.Load())
	if !idle || c.mu.shrinking || c.mu.closed || !c.mu.grantKnown || avail <= rpc || c.imp.State() != ptlrpc.StateFull {
		return 0, false
	}
	keep := uint64(c.maxRPCs()+1) * rpc
	if avail <= keep {
		keep = rpc
	}
	return avail - keep, true
}
