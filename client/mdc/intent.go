package mdc

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

// Intent is an operation that rides on a lock enqueue (Lustre's
// ldlm_intent): Op is ItLookup, ItGetattr, ItOpen or ItOpen|ItCreat
// (or ItCreat alone), on Name in Parent, or on FID alone (lookup, getattr
// and open). Flags, Mode and Create are an open's (Create for O_CREAT).
type Intent struct {
	Op     uint32
	Parent fid.FID
	Name   string
	FID    fid.FID
	Flags  uint64
	Mode   uint32
	Create *CreateOptions
	// KeepDirLock, on an O_CREAT open by name, is a PR lock on Parent
	// that the create does not call back (nor give back early with
	// Parent's other unused locks): the caller knows every name in Parent
	// under it and adds the one it makes itself. A blocking AST for
	// another client's sake still takes it.
	KeepDirLock *ldlm.ClientLock
}

// IntentReply is the MDT's answer to an intent: the file's attributes and
// (for getattr and open of a regular file) layout, an open's handle and
// whether it created the file, and the lock granted with it — a PR lock on
// the file with the bits the operation allows caching under, or, for a
// name that does not exist (Negative), a PR UPDATE lock on the directory.
// Lock is nil when the MDT granted none; release it after use.
type IntentReply struct {
	Attr     Attr
	Layout   *layout.Layout
	Handle   uint64
	Created  bool
	Negative bool
	// Released: the opened file is HSM released (its data are in the
	// archive only).
	Released bool
	Lock     *ldlm.ClientLock
}

// File returns the open file of an ItOpen reply, its lock included.
func (r *IntentReply) File() *File {
	return &File{FID: r.Attr.FID, Attr: r.Attr, Layout: r.Layout, Handle: r.Handle, Created: r.Created, Released: r.Released, Lock: r.Lock}
}

// intentReply decodes an intent's answer.
func intentReply(b []byte, status int32) (*mdsv1.IntentReply, error) {
	var rep mdsv1.IntentReply
	if err := ptlrpc.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%w: intent: %v", ErrBadReply, err)
	}
	if status > 0 || status < -4095 {
		return nil, fmt.Errorf("%w: intent status %d", ErrBadReply, status)
	}
	return &rep, nil
}

// Enqueue runs an intent through the lock client in one RPC
// (LDLM_ENQUEUE with the intent): hooks are the lock's (drop what was
// cached under it). A lookup of a name that does not exist returns the
// reply (Negative, with its lock on the directory) and an error wrapping
// ENOENT; other failures return a nil reply and the errno.
func (c *Client) Enqueue(ctx context.Context, cred Cred, it Intent, hooks ldlm.Hooks) (*IntentReply, error) {
	if c.locks == nil {
		return nil, fmt.Errorf("mdc: intent without a lock client: %w", syscall.EOPNOTSUPP)
	}
	req := &mdsv1.IntentRequest{Op: it.Op, Cred: credTo(cred), Parent: fidTo(it.Parent), Name: []byte(it.Name), Fid: fidTo(it.FID),
		Flags: it.Flags, Mode: it.Mode}
	if it.KeepDirLock != nil {
		req.KeepDirLock = uint64(it.KeepDirLock.Handle())
	}

	if it.Op&(ItOpen|ItCreat) != 0 {
		lb, delay, err := it.Create.wire()
		if err != nil {
			return nil, fmt.Errorf("mdc: intent: %w", err)
		}
		req.Layout, req.DelayLayout = lb, delay
		if it.Op&ItCreat != 0 || it.Flags&syscall.O_CREAT != 0 || it.Flags&unix.O_TMPFILE == unix.O_TMPFILE {
			f, err := c.NewFID(ctx)
			if err != nil {
				return nil, err
			}
			req.NewFid = fidTo(f)
		}
	}
	later, closes := c.takeCarried(req.SizeVT)
	req.Closes = closes
	body, err := ptlrpc.Marshal(req)
	if err != nil {
		c.carried(later, err)
		return nil, err
	}
	on := it.Parent
	if on.IsZero() {
		on = it.FID
	}
	res := ibitsRes(on)
	if it.Op&ItCreat != 0 && !it.Parent.IsZero() {
		// A create changes the directory: the MDT's CW UPDATE lock would
		// call back our own PR UPDATE locks on it (a negative lookup's,
		// a getattr's). Give their UPDATE back with this request instead
		// of on a blocking AST the create waits for.
		c.locks.GiveBackUnused(ctx, c.imp, ibitsRes(it.Parent), ldlm.BitUpdate, it.KeepDirLock)
	}
	enq := ldlm.Enqueue{Resource: res, Mode: ldlm.PR, Policy: ldlm.Policy{Bits: ldlm.BitLookup}, Intent: body, Hooks: hooks}
	if req.NewFid != nil {
		enq.KeepIntent = keepCreateIntent // it may create a file
	}
	l, rb, status, err := c.locks.Enqueue(ctx, c.imp, enq)
	c.carried(later, err)
	if err != nil {
		return nil, fmt.Errorf("mdc: intent %#x on %q in %v: %w", it.Op, it.Name, on, err)
	}
	rep, err := intentReply(rb, status)
	if err != nil {
		if l != nil {
			l.Release()
		}
		return nil, err
	}
	out := &IntentReply{Attr: attrFrom(rep.Attr), Handle: rep.OpenHandle, Created: rep.Created, Negative: rep.Negative, Released: rep.Released, Lock: l}
	if status != 0 {
		err := fmt.Errorf("mdc: intent %#x on %q in %v: %w", it.Op, it.Name, on, syscall.Errno(-status))
		if rep.Negative && errors.Is(err, syscall.ENOENT) {
			return out, err
		}
		if l != nil {
			l.Release()
		}
		return nil, err
	}
	if out.Layout, err = layoutFrom(rep.Layout); err == nil && !out.Attr.FID.IsSane() {
		err = fmt.Errorf("%w: intent attributes of FID %v", ErrBadReply, out.Attr.FID)
	}
	if err == nil && it.Op&ItOpen != 0 && out.Handle == 0 {
		err = fmt.Errorf("%w: open intent without a handle", ErrBadReply)
	}
	if err != nil {
		if l != nil {
			l.Release()
		}
		return nil, err
	}
	if it.Op&ItOpen != 0 {
		c.track(out.Attr.FID, out.Handle, it.Flags)
	}
	return out, nil
}
