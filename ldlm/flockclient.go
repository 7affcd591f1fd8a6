package ldlm

import (
	"context"
	"fmt"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	ldlmv1 "github.com/nacrefs/nacre/proto/nacre/ldlm/v1"
)

// Flock sets a POSIX record lock (fcntl F_SETLK/F_SETLKW, flock) of the
// lock owner pol.FlockOwner on res through imp: mode PR (read), PW
// (write) or NL (unlock), over pol.Extent. Without wait a conflict fails
// at once with an error wrapping ErrWouldBlock (EAGAIN); with wait it
// waits until granted, ctx ends (the waiting lock is given back), or the
// server finds a deadlock (EDEADLK).
//
// The server is the only keeper of FLOCK locks: it merges, splits and
// replaces an owner's locks as POSIX says, so a granted lock is not kept
// in the client's tables (it matches nothing and is never called back);
// the owner's locks go when it unlocks them or the client's export goes.
func (c *Client) Flock(ctx context.Context, imp *ptlrpc.Import, res Resource, mode Mode, pol Policy, wait bool) error {
	if res.Type != TypeFlock {
		return fmt.Errorf("ldlm: flock on %v: %w", res, ErrInvalid)
	}
	var flags Flags
	if !wait {
		flags = BlockNoWait
	}
	l, _, _, err := c.Enqueue(ctx, imp, Enqueue{Resource: res, Mode: mode, Policy: pol, Flags: flags})
	if err != nil {
		return err
	}
	if l != nil {
		c.forget(l)
	}
	return nil
}

// TestFlock reports the first lock of another owner that keeps a FLOCK
// lock of mode (PR or PW) over pol.Extent from being granted (F_GETLK):
// its mode, range, owner and pid; found false when none does.
func (c *Client) TestFlock(ctx context.Context, imp *ptlrpc.Import, res Resource, mode Mode, pol Policy) (conflict Policy, cmode Mode, found bool, err error) {
	body, err := ptlrpc.Marshal(&ldlmv1.EnqueueRequest{Resource: resourceToWire(res), Mode: uint32(mode),
		Policy: policyToWire(pol), Flags: wireTestLock})
	if err != nil {
		return Policy{}, 0, false, err
	}
	repBody, err := imp.Do(ctx, &ptlrpc.Req{Opcode: wire.LDLMEnqueue, Body: body})
	if err != nil {
		return Policy{}, 0, false, fmt.Errorf("ldlm: test flock %v on %s: %w", res, imp.Target(), err)
	}
	var rep ldlmv1.EnqueueReply
	if err := ptlrpc.Unmarshal(repBody, &rep); err != nil {
		return Policy{}, 0, false, fmt.Errorf("ldlm: test flock reply from %s: %w", imp.Target(), err)
	}
	m, err := modeFromWire(rep.Mode)
	if err != nil {
		return Policy{}, 0, false, fmt.Errorf("ldlm: test flock reply from %s: %w", imp.Target(), err)
	}
	if m == NL {
		return Policy{}, NL, false, nil
	}
	return policyFromWire(rep.Policy), m, true, nil
}
