package ldlm

import (
	"context"
	"fmt"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	ldlmv1 "github.com/nacrefs/nacre/proto/nacre/ldlm/v1"
)

// ReplayLocks re-establishes on a restarted server the locks the client
// holds through imp (Lustre's lock replay), from the import's OnRecover
// hook: each granted lock is enqueued again with Replay, which the server
// grants as it was, and takes the server's new handle; a lock still
// waiting for its grant is enqueued again as a normal request. A lock in
// the middle of a conversion is replayed with the bits it has until the
// conversion ends (the conversion then tells the server, under the new
// handle; if it fails the lock is given back whole). Handles given back
// locally and conversions not yet told to the server are forgotten: the
// server has no such locks any more, and its new handles may be the old
// ones of other locks. FLOCK locks are kept by the server only and are
// not replayed.
func (c *Client) ReplayLocks(ctx context.Context, imp *ptlrpc.Import) error {
	c.mu.Lock()
	ns := c.mu.ns[imp]
	if ns == nil {
		c.mu.Unlock()
		return nil
	}
	ns.pending, ns.blocked, ns.converted = nil, nil, nil
	var locks []*ClientLock
	for _, first := range ns.byRes {
		for l := first; l != nil; l = l.resNext {
			if ok, _ := l.replayableLocked(); ok {
				locks = append(locks, l)
			}
		}
	}
	c.mu.Unlock()
	for _, l := range locks {
		c.mu.Lock()
		// Looked at again: a lock given back since the list was made (a
		// conversion that failed) is not to be enqueued again.
		ok, granted := l.replayableLocked()
		if !ok {
			c.mu.Unlock()
			continue
		}
		er := &ldlmv1.EnqueueRequest{Resource: resourceToWire(l.Resource), Mode: uint32(l.mode), Policy: policyToWire(l.policy),
			ClientHandle: l.handle}
		if granted {
			er.Flags = wireReplay
		}
		c.mu.Unlock()
		body, err := ptlrpc.Marshal(er)
		if err != nil {
			return err
		}
		repBody, err := imp.Replay(ctx, &ptlrpc.Req{Opcode: wire.LDLMEnqueue, Body: body})
		if err != nil {
			return fmt.Errorf("ldlm: replay of lock %v on %s: %w", l.Resource, imp.Target(), err)
		}
		var rep ldlmv1.EnqueueReply
		if err := ptlrpc.Unmarshal(repBody, &rep); err != nil || rep.Handle == 0 {
			return fmt.Errorf("ldlm: replay of lock %v on %s: bad reply (%v)", l.Resource, imp.Target(), err)
		}
		c.mu.Lock()
		switch l.state {
		case lockGranted, lockConverting, lockWaiting:
			l.remote = Handle(rep.Handle)
			if !granted && rep.Granted {
				l.grantLocked(Mode(rep.Mode), policyFromWire(rep.Policy), lvbFromWire(rep.Lvb), rep.CallbackPending)
			}
		default:
			// Given back while its replay was out (under its old
			// handle): the server's new lock goes back too.
			ns.queueHandleLocked(Handle(rep.Handle))
		}
		c.mu.Unlock()
	}
	return nil
}
