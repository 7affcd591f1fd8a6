package mdc

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/jobstats"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

// Reply sizes: most replies fit the default 64 KiB; a layout may be
// larger (2000 stripes are 40 KB), and an xattr value is up to 64 KiB.
const (
	layoutReplyCap = 256 << 10
	xattrReplyCap  = 80 << 10
)

// ImportConfig returns the configuration of an import to the MDT named
// target served by servers (the primary first): the MDS request portal
// and MDS_CONNECT/MDS_DISCONNECT. The caller may tune the rest.
func ImportConfig(target string, servers ...lwire.ProcessID) ptlrpc.ImportConfig {
	return ptlrpc.ImportConfig{Target: target, Servers: servers, Portal: ptlrpc.MDSRequestPortal,
		ConnectOp: wire.MDSConnect, DisconnectOp: wire.MDSDisconnect, MaxRPCsInFlight: DefaultMaxRPCsInFlight}
}

// DefaultMaxRPCsInFlight is an MDC's mdc.*.max_rpcs_in_flight (Lustre's).
const DefaultMaxRPCsInFlight = 8

// Client is the client of one MDT (Lustre's MDC): typed methods over an
// import, each one RPC; intents through a lock client; and the FID
// allocator new files take their FIDs from. It caches nothing: attribute
// and entry caching under locks is the client library's. Errors wrap the
// errno the MDT sent (errors.Is(err, syscall.ENOENT)), or the import's
// error (ptlrpc.ErrEvicted, ctx's). Safe for concurrent use.
type Client struct {
	imp   *ptlrpc.Import
	locks *ldlm.Client

	fidMu sync.Mutex // guards seq, oid, width
	seq   uint64     // the granted sequence; 0: none yet
	oid   uint32     // the last object id minted in seq
	width uint32

	// opens are the open handles not closed yet, by handle: a restarted
	// MDT gets them again (ReplayOpens). As many as the files the client
	// has open.
	opensMu sync.Mutex
	opens   map[uint64]openRec
	// later are the closes put off (closes.go).
	later laterCloses
}

// openRec is what a replayed open needs.
type openRec struct {
	fid   fid.FID
	flags uint64
}

// New returns a client of the MDT imp is connected to (see ImportConfig).
// locks, if not nil, takes the locks of intents (Enqueue); its callback
// handlers must be served on the process's LDLM callback portal.
func New(imp *ptlrpc.Import, locks *ldlm.Client) *Client {
	c := &Client{imp: imp, locks: locks, opens: map[uint64]openRec{}}
	c.setupLater()
	return c
}

// Import returns the client's import.
func (c *Client) Import() *ptlrpc.Import { return c.imp }

// do sends one request and returns the reply body.
func (c *Client) do(ctx context.Context, op wire.Opcode, msg proto.Message, replyCap int) ([]byte, error) {
	return c.doKeep(ctx, op, msg, replyCap, nil)
}

// doKeep is do with the request's ptlrpc.Req.KeepBody.
func (c *Client) doKeep(ctx context.Context, op wire.Opcode, msg proto.Message, replyCap int, keep func(req, reply []byte) []byte) ([]byte, error) {
	var body []byte
	if msg != nil {
		var err error
		if body, err = ptlrpc.Marshal(msg); err != nil {
			return nil, err
		}
	}
	return c.imp.Do(ctx, &ptlrpc.Req{Opcode: op, Body: body, ReplyCap: replyCap, JobID: jobstats.JobOf(ctx), KeepBody: keep})
}

// send sends a request with body encoded already and returns the reply's.
func (c *Client) send(ctx context.Context, op wire.Opcode, body []byte, replyCap int) ([]byte, error) {
	return c.imp.Do(ctx, &ptlrpc.Req{Opcode: op, Body: body, ReplyCap: replyCap, JobID: jobstats.JobOf(ctx)})
}

// call sends a request and decodes its reply into rep.
func (c *Client) call(ctx context.Context, op wire.Opcode, msg, rep proto.Message, replyCap int) error {
	return c.callKeep(ctx, op, msg, rep, replyCap, nil)
}

// callKeep is call with the request's ptlrpc.Req.KeepBody.
func (c *Client) callKeep(ctx context.Context, op wire.Opcode, msg, rep proto.Message, replyCap int, keep func(req, reply []byte) []byte) error {
	b, err := c.doKeep(ctx, op, msg, replyCap, keep)
	if err != nil {
		return err
	}
	if rep != nil {
		if err := ptlrpc.Unmarshal(b, rep); err != nil {
			return fmt.Errorf("%w: %v reply: %v", ErrBadReply, op, err)
		}
	}
	return nil
}

// ErrBadReply: the MDT's reply did not decode or made no sense.
var ErrBadReply = errors.New("mdc: bad reply")

// GetRoot returns the root directory's FID.
func (c *Client) GetRoot(ctx context.Context) (fid.FID, error) {
	var rep mdsv1.GetRootReply
	if err := c.call(ctx, wire.MDSGetRoot, nil, &rep, 0); err != nil {
		return fid.FID{}, fmt.Errorf("mdc: get root: %w", err)
	}
	f := fidFrom(rep.Fid)
	if !f.IsSane() {
		return fid.FID{}, fmt.Errorf("%w: root FID %v", ErrBadReply, f)
	}
	return f, nil
}

// getattrReply decodes a getattr or lookup reply.
func getattrReply(b []byte) (Attr, *layout.Layout, string, error) {
	var rep mdsv1.GetattrReply // decoded on the stack (see parseLookup's twin on the MDT)
	if err := rep.UnmarshalVT(b); err != nil {
		return Attr{}, nil, "", fmt.Errorf("%w: %v", ErrBadReply, err)
	}
	a := attrFrom(rep.Attr)
	if !a.FID.IsSane() {
		return Attr{}, nil, "", fmt.Errorf("%w: attributes of FID %v", ErrBadReply, a.FID)
	}
	l, err := layoutFrom(rep.Layout)
	return a, l, string(rep.Link), err
}

func layoutFrom(b []byte) (*layout.Layout, error) {
	if len(b) == 0 {
		return nil, nil
	}
	l, err := layout.Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("%w: layout: %v", ErrBadReply, err)
	}
	return &l, nil
}

// Getattr returns f's attributes (MDS_GETATTR).
func (c *Client) Getattr(ctx context.Context, cred Cred, f fid.FID) (Attr, error) {
	b, err := c.do(ctx, wire.MDSGetattr, &mdsv1.GetattrRequest{Cred: credTo(cred), Fid: fidTo(f)}, 0)
	if err != nil {
		return Attr{}, fmt.Errorf("mdc: getattr %v: %w", f, err)
	}
	a, _, _, err := getattrReply(b)
	return a, err
}

// GetattrLayout returns f's attributes and layout (nil if it has none;
// a directory's is its default layout).
func (c *Client) GetattrLayout(ctx context.Context, cred Cred, f fid.FID) (Attr, *layout.Layout, error) {
	b, err := c.do(ctx, wire.MDSGetattr, &mdsv1.GetattrRequest{Cred: credTo(cred), Fid: fidTo(f), WantLayout: true}, layoutReplyCap)
	if err != nil {
		return Attr{}, nil, fmt.Errorf("mdc: getattr %v: %w", f, err)
	}
	a, l, _, err := getattrReply(b)
	return a, l, err
}

// Readlink returns a symlink's target; EINVAL for another type.
func (c *Client) Readlink(ctx context.Context, cred Cred, f fid.FID) (string, error) {
	b, err := c.do(ctx, wire.MDSGetattr, &mdsv1.GetattrRequest{Cred: credTo(cred), Fid: fidTo(f), WantLink: true}, 0)
	if err != nil {
		return "", fmt.Errorf("mdc: readlink %v: %w", f, err)
	}
	_, _, link, err := getattrReply(b)
	return link, err
}

// Lookup returns the attributes of name in directory parent
// (MDS_GETATTR_NAME): ENOENT, ENOTDIR, EACCES, ENAMETOOLONG, EINVAL as
// lookup(2) would fail.
func (c *Client) Lookup(ctx context.Context, cred Cred, parent fid.FID, name string) (Attr, error) {
	// Encoded by its own generated method, so that it stays on the stack.
	req := mdsv1.LookupRequest{Cred: credTo(cred), Parent: fidTo(parent), Name: []byte(name)}
	body, err := req.MarshalVT()
	if err != nil {
		return Attr{}, err
	}
	b, err := c.send(ctx, wire.MDSGetattrName, body, 0)
	if err != nil {
		return Attr{}, fmt.Errorf("mdc: lookup %q in %v: %w", name, parent, err)
	}
	a, _, _, err := getattrReply(b)
	return a, err
}

// reint sends one MDS_REINT.
// The error says what failed: format and args, formatted only then.
func (c *Client) reint(ctx context.Context, cred Cred, op isReintOp, format string, args ...any) (*mdsv1.ReintReply, error) {
	req := &mdsv1.ReintRequest{Cred: credTo(cred)}
	if c.locks != nil {
		// Locks given back or converted ahead of this change (GiveBack,
		// GiveBackBits) ride along.
		req.Cancels, req.Converts = c.locks.TakeCancels(c.imp), c.locks.TakeConverts(c.imp)
	}
	op.set(req)
	later, closes := c.takeCarried(req.SizeVT)
	req.Closes = closes
	var rep mdsv1.ReintReply
	var keep func(req, reply []byte) []byte
	switch o := op.(type) {
	case createOp:
		if o.Mode&syscall.S_IFMT == syscall.S_IFREG {
			keep = keepReintLayout
		}
	case openOp:
		if o.NewFid != nil {
			keep = keepReintLayout // it may create the file
		}
	case layoutIntentOp, setLayoutOp:
		keep = keepReintLayout
	}
	err := c.callKeep(ctx, wire.MDSReint, req, &rep, layoutReplyCap, keep)
	c.carried(later, err)
	if err != nil {
		return nil, fmt.Errorf("mdc: %s: %w", fmt.Sprintf(format, args...), err)
	}
	return &rep, nil
}

// isReintOp sets a ReintRequest's operation.
type isReintOp interface{ set(*mdsv1.ReintRequest) }

type (
	createOp       struct{ *mdsv1.CreateOp }
	unlinkOp       struct{ *mdsv1.UnlinkOp }
	renameOp       struct{ *mdsv1.RenameOp }
	linkOp         struct{ *mdsv1.LinkOp }
	setattrOp      struct{ *mdsv1.SetattrOp }
	setxattrOp     struct{ *mdsv1.SetxattrOp }
	openOp         struct{ *mdsv1.OpenOp }
	setLayoutOp    struct{ *mdsv1.SetLayoutOp }
	layoutIntentOp struct{ *mdsv1.LayoutIntentOp }
)

func (o createOp) set(r *mdsv1.ReintRequest) { r.Op = &mdsv1.ReintRequest_Create{Create: o.CreateOp} }
func (o unlinkOp) set(r *mdsv1.ReintRequest) { r.Op = &mdsv1.ReintRequest_Unlink{Unlink: o.UnlinkOp} }
func (o renameOp) set(r *mdsv1.ReintRequest) { r.Op = &mdsv1.ReintRequest_Rename{Rename: o.RenameOp} }
func (o linkOp) set(r *mdsv1.ReintRequest)   { r.Op = &mdsv1.ReintRequest_Link{Link: o.LinkOp} }
func (o setattrOp) set(r *mdsv1.ReintRequest) {
	r.Op = &mdsv1.ReintRequest_Setattr{Setattr: o.SetattrOp}
}
func (o setxattrOp) set(r *mdsv1.ReintRequest) {
	r.Op = &mdsv1.ReintRequest_Setxattr{Setxattr: o.SetxattrOp}
}
func (o openOp) set(r *mdsv1.ReintRequest) { r.Op = &mdsv1.ReintRequest_Open{Open: o.OpenOp} }
func (o layoutIntentOp) set(r *mdsv1.ReintRequest) {
	r.Op = &mdsv1.ReintRequest_LayoutIntent{LayoutIntent: o.LayoutIntentOp}
}
func (o setLayoutOp) set(r *mdsv1.ReintRequest) {
	r.Op = &mdsv1.ReintRequest_SetLayout{SetLayout: o.SetLayoutOp}
}

// reintAttr decodes the attributes a reint reply carries.
func reintAttr(rep *mdsv1.ReintReply) (Attr, error) {
	a := attrFrom(rep.Attr)
	if !a.FID.IsSane() {
		return Attr{}, fmt.Errorf("%w: attributes of FID %v", ErrBadReply, a.FID)
	}
	return a, nil
}

// CreateOptions are a new regular file's layout choices.
type CreateOptions struct {
	// Layout is a layout template (no objects: the MDT allocates them);
	// nil means the directory's default layout, else the file system's.
	Layout *layout.Layout
	// Delay creates the file without objects (O_LOV_DELAY_CREATE), for a
	// later SetLayout.
	Delay bool
}

func (o *CreateOptions) wire() ([]byte, bool, error) {
	if o == nil {
		return nil, false, nil
	}
	if o.Layout == nil {
		return nil, o.Delay, nil
	}
	b, err := o.Layout.Marshal()
	return b, o.Delay, err
}

// Create makes the regular file name in parent with permission bits mode
// (less the umask), a FID from the client's sequence, and objects on the
// OSTs as opts (or the inherited default) says. It returns the file's
// attributes and layout (nil without objects).
func (c *Client) Create(ctx context.Context, cred Cred, parent fid.FID, name string, mode uint32, opts *CreateOptions) (Attr, *layout.Layout, error) {
	lb, delay, err := opts.wire()
	if err != nil {
		return Attr{}, nil, fmt.Errorf("mdc: create %q: %w", name, err)
	}
	f, err := c.NewFID(ctx)
	if err != nil {
		return Attr{}, nil, err
	}
	c.GiveBackBits(ctx, parent, ldlm.BitUpdate)
	rep, err := c.reint(ctx, cred, createOp{&mdsv1.CreateOp{Parent: fidTo(parent), Name: []byte(name), Fid: fidTo(f),
		Mode: syscall.S_IFREG | mode&0o7777, Layout: lb, DelayLayout: delay}}, "create %q in %v", name, parent)
	if err != nil {
		return Attr{}, nil, err
	}
	a, err := reintAttr(rep)
	if err != nil {
		return Attr{}, nil, err
	}
	l, err := layoutFrom(rep.Layout)
	return a, l, err
}

// mknod makes a non-regular object (REINT_CREATE by type).
func (c *Client) mknod(ctx context.Context, cred Cred, parent fid.FID, name string, mode uint32, rdev uint64, target, what string) (Attr, error) {
	f, err := c.NewFID(ctx)
	if err != nil {
		return Attr{}, err
	}
	c.GiveBackBits(ctx, parent, ldlm.BitUpdate)
	rep, err := c.reint(ctx, cred, createOp{&mdsv1.CreateOp{Parent: fidTo(parent), Name: []byte(name), Fid: fidTo(f),
		Mode: mode, Rdev: rdev, Target: []byte(target)}}, "%s %q in %v", what, name, parent)
	if err != nil {
		return Attr{}, err
	}
	return reintAttr(rep)
}

// Mkdir makes directory name in parent with mode's permission bits.
func (c *Client) Mkdir(ctx context.Context, cred Cred, parent fid.FID, name string, mode uint32) (Attr, error) {
	return c.mknod(ctx, cred, parent, name, syscall.S_IFDIR|mode&0o7777, 0, "", "mkdir")
}

// Mknod makes a special file: mode carries its type (S_IFIFO, S_IFSOCK,
// S_IFCHR, S_IFBLK with rdev; S_IFREG makes a file without objects).
func (c *Client) Mknod(ctx context.Context, cred Cred, parent fid.FID, name string, mode uint32, rdev uint64) (Attr, error) {
	if mode&syscall.S_IFMT == syscall.S_IFREG {
		a, _, err := c.Create(ctx, cred, parent, name, mode, &CreateOptions{Delay: true})
		return a, err
	}
	if t := mode & syscall.S_IFMT; t == 0 || t == syscall.S_IFDIR || t == syscall.S_IFLNK {
		return Attr{}, fmt.Errorf("mdc: mknod %q: type %#o: %w", name, t, syscall.EINVAL)
	}
	return c.mknod(ctx, cred, parent, name, mode, rdev, "", "mknod")
}

// Symlink makes name in parent a symbolic link to target.
func (c *Client) Symlink(ctx context.Context, cred Cred, parent fid.FID, name, target string) (Attr, error) {
	return c.mknod(ctx, cred, parent, name, syscall.S_IFLNK|0o777, 0, target, "symlink")
}

// Unlink removes name, not a directory, from parent. The MDT destroys the
// file's objects once its last link and open are gone.
func (c *Client) Unlink(ctx context.Context, cred Cred, parent fid.FID, name string) error {
	_, err := c.reint(ctx, cred, unlinkOp{&mdsv1.UnlinkOp{Parent: fidTo(parent), Name: []byte(name)}}, "unlink %q in %v", name, parent)
	return err
}

// GiveBack gives back, ahead of a change of f that would call them back
// (an unlink, a rename), f's unused locks, whole (early lock cancel):
// their hooks run now, and their handles ride on the next request to the
// MDT, whose locks for the change then find nothing to call back. It
// returns how many it gave back.
func (c *Client) GiveBack(ctx context.Context, f fid.FID) int {
	if c.locks == nil {
		return 0
	}
	return c.locks.CancelUnusedWhole(ctx, c.imp, ibitsRes(f), ldlm.AllBits)
}

// GiveBackBits gives back bits of dir's unused locks ahead of a change
// that takes them (UPDATE, for an entry made or removed): a lock that
// can keep its LOOKUP bit is converted locally (so the kernel keeps the
// directory's entry and the entries under it), the others are given
// back; the next request to the MDT tells it of both. It returns how many
// locks it converted or gave back.
func (c *Client) GiveBackBits(ctx context.Context, dir fid.FID, bits ldlm.Bits) int {
	if c.locks == nil {
		return 0
	}
	return c.locks.GiveBackUnused(ctx, c.imp, ibitsRes(dir), bits, nil)
}

// setattrBits are the inode bits a setattr of valid takes at the MDT,
// which the client's unused locks give back with the request (early lock
// cancel, as Lustre's mdc_setattr) instead of on the blocking AST the MDT
// would send: UPDATE, and for a new mode or owner PERM and LOOKUP too.
// Creates, links and xattr changes give back theirs the same way.
func setattrBits(valid uint32) ldlm.Bits {
	if valid&(AttrMode|AttrUID|AttrGID) != 0 {
		return ldlm.BitUpdate | ldlm.BitPerm | ldlm.BitLookup
	}
	return ldlm.BitUpdate
}

// The POSIX ACLs' extended attributes.
const (
	XattrACLAccess  = "system.posix_acl_access"
	XattrACLDefault = "system.posix_acl_default"
)

// xattrBits are the inode bits a change of extended attribute name takes
// at the MDT: XATTR and UPDATE, and PERM and LOOKUP for an ACL.
func xattrBits(name string) ldlm.Bits {
	bits := ldlm.BitXAttr | ldlm.BitUpdate
	if name == XattrACLAccess || name == XattrACLDefault {
		bits |= ldlm.BitPerm | ldlm.BitLookup
	}
	return bits
}

func ibitsRes(f fid.FID) ldlm.Resource {
	return ldlm.Resource{ID: ldlm.ResIDOfFID(f.Seq, f.Oid, f.Ver), Type: ldlm.TypeIBits}
}

// Rmdir removes the empty directory name from parent.
func (c *Client) Rmdir(ctx context.Context, cred Cred, parent fid.FID, name string) error {
	_, err := c.reint(ctx, cred, unlinkOp{&mdsv1.UnlinkOp{Parent: fidTo(parent), Name: []byte(name), Dir: true}}, "rmdir %q in %v", name, parent)
	return err
}

// Rename moves sname of sp to tname of tp, replacing the target as
// rename(2) does (flags: RenameNoReplace, RenameExchange).
func (c *Client) Rename(ctx context.Context, cred Cred, sp fid.FID, sname string, tp fid.FID, tname string, flags uint32) error {
	_, err := c.reint(ctx, cred, renameOp{&mdsv1.RenameOp{SrcParent: fidTo(sp), SrcName: []byte(sname), TgtParent: fidTo(tp),
		TgtName: []byte(tname), Flags: flags}}, "rename %q in %v to %q in %v", sname, sp, tname, tp)
	return err
}

// Link makes name in parent a hard link to f and returns f's attributes.
func (c *Client) Link(ctx context.Context, cred Cred, f, parent fid.FID, name string) (Attr, error) {
	// The new entry changes parent, the new link count f.
	c.GiveBackBits(ctx, parent, ldlm.BitUpdate)
	c.GiveBackBits(ctx, f, ldlm.BitUpdate)
	rep, err := c.reint(ctx, cred, linkOp{&mdsv1.LinkOp{Fid: fidTo(f), Parent: fidTo(parent), Name: []byte(name)}}, "link %v as %q in %v", f, name, parent)
	if err != nil {
		return Attr{}, err
	}
	return reintAttr(rep)
}

// Setattr changes f's attributes and returns them. A size change records
// the size the caller already cut the objects to (OST_PUNCH).
func (c *Client) Setattr(ctx context.Context, cred Cred, f fid.FID, sa SetAttr) (Attr, error) {
	a, _, err := c.SetattrLayout(ctx, cred, f, sa)
	return a, err
}

// SetattrLayout is Setattr, and returns a regular file's layout too when
// the MDT sent it (it does for a change of mtime or size; nil otherwise,
// for a file without objects, and when the layout sent does not decode).
func (c *Client) SetattrLayout(ctx context.Context, cred Cred, f fid.FID, sa SetAttr) (Attr, *layout.Layout, error) {
	c.GiveBackBits(ctx, f, setattrBits(sa.Valid))
	rep, err := c.reint(ctx, cred, setattrOp{&mdsv1.SetattrOp{Fid: fidTo(f), Valid: sa.Valid, Mode: sa.Mode, Uid: sa.UID, Gid: sa.GID,
		Size: sa.Size, Blocks: sa.Blocks, Atime: sa.Atime, Mtime: sa.Mtime, Ctime: sa.Ctime, Flags: sa.Flags}}, "setattr %v", f)
	if err != nil {
		return Attr{}, nil, err
	}
	a, err := reintAttr(rep)
	if err != nil {
		return Attr{}, nil, err
	}
	l, err := layoutFrom(rep.Layout)
	if err != nil {
		// The change is made: the caller asks for the layout itself.
		slog.Warn("mdc: setattr reply with a bad layout", "fid", f, "err", err)
		l = nil
	}
	return a, l, nil
}

// SetLayout sets a directory's default layout, or gives a regular file
// without objects its layout (the MDT allocates the objects of l, a
// template); EEXIST for a file that has objects.
func (c *Client) SetLayout(ctx context.Context, cred Cred, f fid.FID, l layout.Layout) (*layout.Layout, error) {
	b, err := l.Marshal()
	if err != nil {
		return nil, fmt.Errorf("mdc: set layout of %v: %w", f, err)
	}
	rep, err := c.reint(ctx, cred, setLayoutOp{&mdsv1.SetLayoutOp{Fid: fidTo(f), Layout: b}}, "set layout of %v", f)
	if err != nil {
		return nil, err
	}
	return layoutFrom(rep.Layout)
}

// RemoveDefaultLayout drops directory dir's default layout (lfs
// setstripe -d); ENODATA if it has none.
func (c *Client) RemoveDefaultLayout(ctx context.Context, cred Cred, dir fid.FID) error {
	_, err := c.reint(ctx, cred, setLayoutOp{&mdsv1.SetLayoutOp{Fid: fidTo(dir), Remove: true}}, "remove the default layout of %v", dir)
	return err
}

// Setxattr sets f's extended attribute name (flags: XattrCreate,
// XattrReplace).
func (c *Client) Setxattr(ctx context.Context, cred Cred, f fid.FID, name string, value []byte, flags int) error {
	c.GiveBackBits(ctx, f, xattrBits(name))
	_, err := c.reint(ctx, cred, setxattrOp{&mdsv1.SetxattrOp{Fid: fidTo(f), Name: []byte(name), Value: value, Flags: uint32(flags)}}, "setxattr %q of %v", name, f)
	return err
}

// Removexattr removes f's extended attribute name; ENODATA if it has none.
func (c *Client) Removexattr(ctx context.Context, cred Cred, f fid.FID, name string) error {
	c.GiveBackBits(ctx, f, xattrBits(name))
	_, err := c.reint(ctx, cred, setxattrOp{&mdsv1.SetxattrOp{Fid: fidTo(f), Name: []byte(name), Remove: true}}, "removexattr %q of %v", name, f)
	return err
}

// Getxattr returns the value of f's extended attribute name; ENODATA if
// it has none.
func (c *Client) Getxattr(ctx context.Context, cred Cred, f fid.FID, name string) ([]byte, error) {
	var rep mdsv1.GetxattrReply
	if err := c.call(ctx, wire.MDSGetxattr, &mdsv1.GetxattrRequest{Cred: credTo(cred), Fid: fidTo(f), Name: []byte(name)}, &rep, xattrReplyCap); err != nil {
		return nil, fmt.Errorf("mdc: getxattr %q of %v: %w", name, f, err)
	}
	if rep.Value == nil {
		rep.Value = []byte{}
	}
	return rep.Value, nil
}

// Listxattr returns the names of f's extended attributes, sorted.
func (c *Client) Listxattr(ctx context.Context, cred Cred, f fid.FID) ([]string, error) {
	var rep mdsv1.GetxattrReply
	if err := c.call(ctx, wire.MDSGetxattr, &mdsv1.GetxattrRequest{Cred: credTo(cred), Fid: fidTo(f), List: true}, &rep, xattrReplyCap); err != nil {
		return nil, fmt.Errorf("mdc: listxattr of %v: %w", f, err)
	}
	out := make([]string, len(rep.Names))
	for i, n := range rep.Names {
		out[i] = string(n)
	}
	return out, nil
}

// File is an open file: its attributes and layout at open, the handle to
// close it with, whether the open created it, and the lock an intent open
// was granted (nil for Open and OpenFID, and when the MDT granted none).
type File struct {
	FID     fid.FID
	Attr    Attr
	Layout  *layout.Layout
	Handle  uint64
	Created bool
	// Released: HSM released when opened (an open intent says so).
	Released bool
	Lock     *ldlm.ClientLock
}

func openReply(rep *mdsv1.ReintReply) (*File, error) {
	a, err := reintAttr(rep)
	if err != nil {
		return nil, err
	}
	l, err := layoutFrom(rep.Layout)
	if err != nil {
		return nil, err
	}
	if rep.OpenHandle == 0 {
		return nil, fmt.Errorf("%w: open without a handle", ErrBadReply)
	}
	return &File{FID: a.FID, Attr: a, Layout: l, Handle: rep.OpenHandle, Created: rep.Created}, nil
}

// Open opens name in parent with Linux's open flags (REINT_OPEN, no lock).
// With O_CREAT a missing file is made with mode and opts as Create says;
// with O_EXCL too an existing one is EEXIST. Close it with Close.
func (c *Client) Open(ctx context.Context, cred Cred, parent fid.FID, name string, flags uint64, mode uint32, opts *CreateOptions) (*File, error) {
	lb, delay, err := opts.wire()
	if err != nil {
		return nil, fmt.Errorf("mdc: open %q: %w", name, err)
	}
	o := &mdsv1.OpenOp{Parent: fidTo(parent), Name: []byte(name), Flags: flags, Mode: mode & 0o7777, Layout: lb, DelayLayout: delay}
	if flags&syscall.O_CREAT != 0 {
		f, err := c.NewFID(ctx)
		if err != nil {
			return nil, err
		}
		o.NewFid = fidTo(f)
	}
	rep, err := c.reint(ctx, cred, openOp{o}, "open %q in %v", name, parent)
	if err != nil {
		return nil, err
	}
	f, err := openReply(rep)
	if err == nil {
		c.track(f.FID, f.Handle, flags)
	}
	return f, err
}

// OpenFID opens the file f (open by handle, NFS-export style).
func (c *Client) OpenFID(ctx context.Context, cred Cred, f fid.FID, flags uint64) (*File, error) {
	rep, err := c.reint(ctx, cred, openOp{&mdsv1.OpenOp{Fid: fidTo(f), Flags: flags}}, "open %v", f)
	if err != nil {
		return nil, err
	}
	of, err := openReply(rep)
	if err == nil {
		c.track(of.FID, of.Handle, flags)
	}
	return of, err
}

func (c *Client) track(f fid.FID, handle, flags uint64) {
	c.opensMu.Lock()
	c.opens[handle] = openRec{fid: f, flags: flags}
	c.opensMu.Unlock()
}

// OpenHandles returns how many open handles the client holds.
func (c *Client) OpenHandles() int {
	c.opensMu.Lock()
	defer c.opensMu.Unlock()
	return len(c.opens)
}

// ReplayOpens opens every file the client has open again on a restarted
// MDT that took the client back, under the same handles (Lustre's open
// replay), so that closes and the files unlinked while open survive the
// restart. It must run in the import's OnRecover. A file gone meanwhile
// is logged and skipped; a failure to talk to the MDT is returned.
func (c *Client) ReplayOpens(ctx context.Context) error {
	c.opensMu.Lock()
	recs := make(map[uint64]openRec, len(c.opens))
	maps.Copy(recs, c.opens)
	c.opensMu.Unlock()
	n := 0
	for h, o := range recs {
		req := &mdsv1.ReintRequest{Cred: credTo(Cred{})}
		openOp{&mdsv1.OpenOp{Fid: fidTo(o.fid), Flags: o.flags &^ (syscall.O_CREAT | syscall.O_EXCL | syscall.O_TRUNC | unix.O_TMPFILE),
			ReplayHandle: h}}.set(req)
		body, err := ptlrpc.Marshal(req)
		if err != nil {
			return err
		}
		_, err = c.imp.Replay(ctx, &ptlrpc.Req{Opcode: wire.MDSReint, Body: body, ReplyCap: layoutReplyCap})
		var re *ptlrpc.RemoteError
		switch {
		case err == nil, errors.Is(err, syscall.EEXIST): // replayed already, from the import's list
			n++
		case errors.As(err, &re):
			slog.Warn("mdc: open replay refused", "fid", o.fid, "handle", h, "err", err)
		default:
			return fmt.Errorf("mdc: replay the open of %v: %w", o.fid, err)
		}
	}
	if n > 0 {
		slog.Info("mdc: replayed opens", "files", n)
	}
	return nil
}

// LSOM is the size a client reports at its last close of a file (the
// lazy size on the MDT).
type LSOM struct{ Size, Blocks uint64 }

// Close ends f's open handle (MDS_CLOSE), recording lsom if not nil, and
// releases the lock an intent open left with it. The last close of an
// unlinked file has the MDT destroy its objects. EBADF for a handle the
// MDT does not know (closed, or lost in a restart of the MDT).
func (c *Client) Close(ctx context.Context, cred Cred, f *File, lsom *LSOM) error {
	return c.CloseWritten(ctx, cred, f, lsom, false, 0, 0)
}

// CloseWritten is Close for an open that wrote: the file's mtime and ctime
// become mtime and ctime (the times of its writes), if not 0, in the same
// RPC and transaction; written says the open changed the data, which
// moves the data version even without lsom (a size the client could not
// read).
//
// A close the MDT has not answered when ctx ends goes on by itself, as
// Lustre's close RPC is not given up: the open stays open on the MDT until
// it arrives (an unlinked file's objects, a writer's count that refuses
// swaps and releases), and a restarted MDT gets the open replayed until
// then; what it says of the writes (written, the size) must reach it.
func (c *Client) CloseWritten(ctx context.Context, cred Cred, f *File, lsom *LSOM, written bool, mtime, ctime int64) error {
	req := &mdsv1.CloseRequest{Cred: credTo(cred), Handle: f.Handle, Fid: fidTo(f.FID), Mtime: mtime, Ctime: ctime, Written: written}
	if lsom != nil {
		req.Lsom, req.Size, req.Blocks = true, lsom.Size, lsom.Blocks
	}
	if f.Lock != nil {
		f.Lock.Release()
		f.Lock = nil
	}
	done := make(chan error, 1)
	go func() { done <- c.closeUntilAnswered(ctx, req) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = fmt.Errorf("%w (the close goes on)", ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("mdc: close %v: %w", f.FID, err)
	}
	return nil
}

// closeUntilAnswered sends MDS_CLOSE req until the MDT answers it, or the
// import ends (closed, or evicted: the MDT ended the client's opens), and
// then forgets the open: a close cut by an MDT restart is resent after the
// open is replayed. Each try gets closeTimeout; it keeps ctx's values,
// not its end.
func (c *Client) closeUntilAnswered(ctx context.Context, req *mdsv1.CloseRequest) error {
	ctx = context.WithoutCancel(ctx)
	var err error
	for try := 0; ; try++ {
		if try > 0 {
			// (A closed import fails the next try at once.)
			time.Sleep(time.Second)
		}
		cctx, cancel := context.WithTimeout(ctx, closeTimeout)
		err = c.call(cctx, wire.MDSClose, req, nil, 0)
		cancel()
		if replied(err) || errors.Is(err, ptlrpc.ErrClosed) || errors.Is(err, ptlrpc.ErrEvicted) {
			break
		}
	}
	c.opensMu.Lock()
	delete(c.opens, req.Handle)
	c.opensMu.Unlock()
	return err
}

// readdirReply decodes a page.
// readdirReply decodes the page read from cookie from: its entries are at
// from or after, in cookie order, and the next cookie is past them and
// past from (or DirEnd). A page that went back would have a walk of the
// directory read the same pages for ever.
func readdirReply(b []byte, from uint64) ([]DirEntry, uint64, error) {
	var rep mdsv1.ReaddirReply
	if err := ptlrpc.Unmarshal(b, &rep); err != nil {
		return nil, 0, fmt.Errorf("%w: readdir: %v", ErrBadReply, err)
	}
	out := make([]DirEntry, len(rep.Entries))
	for i, e := range rep.Entries {
		f := fidFrom(e.Fid)
		if len(e.Name) == 0 || !f.IsSane() || e.Type > 15 || e.Cookie < from || (i > 0 && e.Cookie < out[i-1].Cookie) {
			return nil, 0, fmt.Errorf("%w: readdir entry %d: %q %v type %d cookie %#x", ErrBadReply, i, e.Name, f, e.Type, e.Cookie)
		}
		out[i] = DirEntry{Name: string(e.Name), FID: f, Type: uint8(e.Type), Cookie: e.Cookie}
	}
	if n := len(out); n > 0 && rep.Next != DirEnd && rep.Next <= out[n-1].Cookie {
		return nil, 0, fmt.Errorf("%w: readdir next cookie %#x after %#x", ErrBadReply, rep.Next, out[n-1].Cookie)
	}
	if rep.Next != DirEnd && rep.Next <= from {
		return nil, 0, fmt.Errorf("%w: readdir from %#x: next cookie %#x goes back", ErrBadReply, from, rep.Next)
	}
	return out, rep.Next, nil
}

// ReadPage returns up to max entries of dir from position cookie (0 to
// start: "." and ".." come first), in hash order, and the cookie to go on
// from (DirEnd when the directory is done). max 0 lets the MDT choose.
// Every entry present for a whole walk of ReadPages appears exactly once,
// whatever changes meanwhile.
func (c *Client) ReadPage(ctx context.Context, cred Cred, dir fid.FID, cookie uint64, max int) ([]DirEntry, uint64, error) {
	b, err := c.do(ctx, wire.MDSReadpage, &mdsv1.ReaddirRequest{Cred: credTo(cred), Fid: fidTo(dir), Cookie: cookie, MaxEntries: uint32(max)}, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("mdc: readdir %v at %#x: %w", dir, cookie, err)
	}
	return readdirReply(b, cookie)
}

// Readdir walks dir page by page from its start: each entry with a nil
// error, or one final error. Stopping the loop early is fine.
func (c *Client) Readdir(ctx context.Context, cred Cred, dir fid.FID) iter.Seq2[DirEntry, error] {
	return func(yield func(DirEntry, error) bool) {
		cookie := uint64(0)
		for cookie != DirEnd {
			ents, next, err := c.ReadPage(ctx, cred, dir, cookie, 0)
			if err != nil {
				yield(DirEntry{}, err)
				return
			}
			for _, e := range ents {
				if !yield(e, nil) {
					return
				}
			}
			if next == cookie && len(ents) == 0 {
				yield(DirEntry{}, fmt.Errorf("%w: readdir of %v stuck at %#x", ErrBadReply, dir, cookie))
				return
			}
			cookie = next
		}
	}
}

// Statfs returns the MDT's counts (MDS_STATFS).
func (c *Client) Statfs(ctx context.Context) (Statfs, error) {
	var rep mdsv1.StatfsReply
	if err := c.call(ctx, wire.MDSStatfs, nil, &rep, 0); err != nil {
		return Statfs{}, fmt.Errorf("mdc: statfs: %w", err)
	}
	return Statfs{Files: rep.Files, Ffree: rep.Ffree, Blocks: rep.Blocks, Bfree: rep.Bfree, Bavail: rep.Bavail, Bsize: rep.Bsize, Namelen: rep.Namelen}, nil
}

// Sync has the MDT commit every change so far (MDS_SYNC): the import then
// keeps none of them for replay.
func (c *Client) Sync(ctx context.Context) error {
	if err := c.call(ctx, wire.MDSSync, nil, nil, 0); err != nil {
		return fmt.Errorf("mdc: sync: %w", err)
	}
	return nil
}

// FID2Path returns every path of f from the file system's root (one per
// hard link); EPERM without CapDacReadSearch.
func (c *Client) FID2Path(ctx context.Context, cred Cred, f fid.FID) ([]string, error) {
	var rep mdsv1.GetInfoReply
	if err := c.call(ctx, wire.MDSGetInfo, &mdsv1.GetInfoRequest{Cred: credTo(cred), Key: []byte("fid2path"), Fid: fidTo(f)}, &rep, 0); err != nil {
		return nil, fmt.Errorf("mdc: fid2path %v: %w", f, err)
	}
	out := make([]string, len(rep.Paths))
	for i, p := range rep.Paths {
		out[i] = string(p)
	}
	return out, nil
}

// SeqQuery asks the MDT for a FID sequence of the client's own (SEQ_QUERY)
// and the number of object ids it holds.
func (c *Client) SeqQuery(ctx context.Context) (seq uint64, width uint32, err error) {
	var rep mdsv1.SeqQueryReply
	if err := c.call(ctx, wire.SEQQuery, nil, &rep, 0); err != nil {
		return 0, 0, fmt.Errorf("mdc: seq query: %w", err)
	}
	if !(fid.FID{Seq: rep.Seq, Oid: 1}).IsNormal() || rep.Width == 0 {
		return 0, 0, fmt.Errorf("%w: sequence %#x of width %d", ErrBadReply, rep.Seq, rep.Width)
	}
	return rep.Seq, rep.Width, nil
}

// NewFID mints a FID for a new file from the client's sequence, asking
// for a new sequence when it is used up (or on first use). FIDs are never
// reused: a restarted client gets a new sequence.
func (c *Client) NewFID(ctx context.Context) (fid.FID, error) {
	c.fidMu.Lock()
	defer c.fidMu.Unlock()
	if c.seq == 0 || c.oid >= c.width {
		seq, width, err := c.SeqQuery(ctx)
		if err != nil {
			return fid.FID{}, err
		}
		c.seq, c.oid, c.width = seq, 0, width
	}
	c.oid++
	return fid.FID{Seq: c.seq, Oid: c.oid}, nil
}

// FLDQuery returns the FLD range holding sequence seq (FLD_QUERY).
func (c *Client) FLDQuery(ctx context.Context, seq uint64) (FLDEntry, error) {
	var rep mdsv1.FldQueryReply
	if err := c.call(ctx, wire.FLDQuery, &mdsv1.FldQueryRequest{Seq: seq}, &rep, 0); err != nil {
		return FLDEntry{}, fmt.Errorf("mdc: fld query %#x: %w", seq, err)
	}
	if rep.Start > seq || seq >= rep.End || rep.Type > 1 {
		return FLDEntry{}, fmt.Errorf("%w: fld range [%#x, %#x) type %d for %#x", ErrBadReply, rep.Start, rep.End, rep.Type, seq)
	}
	return FLDEntry{Start: rep.Start, End: rep.End, Index: rep.Index, Type: uint8(rep.Type)}, nil
}

// LayoutIntent has the MDT instantiate the components of f's composite
// layout that cover [start, end) (a write is about to go there) and
// returns the layout (Lustre's IT_LAYOUT write intent).
func (c *Client) LayoutIntent(ctx context.Context, cred Cred, f fid.FID, start, end uint64) (*layout.Layout, error) {
	rep, err := c.reint(ctx, cred, layoutIntentOp{&mdsv1.LayoutIntentOp{Fid: fidTo(f), Start: start, End: end}},
		"layout intent on %v [%d, %d)", f, start, end)
	if err != nil {
		return nil, err
	}
	l, err := layoutFrom(rep.Layout)
	if err == nil && l == nil {
		err = fmt.Errorf("%w: layout intent on %v without a layout", ErrBadReply, f)
	}
	return l, err
}

// SwapLayouts has the MDT exchange the layouts (OST objects) and lazy
// sizes of the regular files a and b (MDS_SWAP_LAYOUTS): each keeps its
// FID, names and attributes. With dvA not nil the MDT refuses (EBUSY) if
// a's data version is no longer *dvA.
func (c *Client) SwapLayouts(ctx context.Context, cred Cred, a, b fid.FID, dvA *uint64) error {
	req := &mdsv1.SwapLayoutsRequest{Cred: credTo(cred), Fid1: fidTo(a), Fid2: fidTo(b), Time: time.Now().UnixNano()}
	if dvA != nil {
		req.CheckDv1, req.Dv1 = true, *dvA
	}
	if err := c.call(ctx, wire.MDSSwapLayouts, req, nil, 0); err != nil {
		return fmt.Errorf("mdc: swap layouts of %v and %v: %w", a, b, err)
	}
	return nil
}

// keepReintLayout is the body a change that gave a file objects is
// replayed with (ptlrpc.Req.KeepBody): a create, an open that may
// create, a layout intent (PFL components instantiated), a layout set on
// a file made without objects. It is the request with the layout the MDT
// returned, objects and all, for the replay to give the file those
// objects again (Lustre keeps the reply's layout with a replayed
// open-create). Given new ones, the file would lose what the client
// wrote to the old ones, left in orphans.
func keepReintLayout(req, reply []byte) []byte {
	var q mdsv1.ReintRequest
	var rep mdsv1.ReintReply
	return keepWithLayout(req, reply, &q, &rep, func() []byte { return rep.Layout }, func(l []byte) bool {
		switch {
		case q.GetCreate() != nil:
			q.GetCreate().Layout, q.GetCreate().DelayLayout = l, false
		case q.GetOpen() != nil && rep.Created:
			q.GetOpen().Layout, q.GetOpen().DelayLayout = l, false
		case q.GetLayoutIntent() != nil:
			q.GetLayoutIntent().Layout = l
		case q.GetSetLayout() != nil && !q.GetSetLayout().Remove:
			q.GetSetLayout().Layout = l
		default:
			return false
		}
		return true
	})
}

// keepCreateIntent is keepReintLayout for an open-create intent
// (ldlm.Enqueue.KeepIntent).
func keepCreateIntent(intent, reply []byte) []byte {
	var q mdsv1.IntentRequest
	var rep mdsv1.IntentReply
	return keepWithLayout(intent, reply, &q, &rep, func() []byte {
		if !rep.Created {
			return nil
		}
		return rep.Layout
	}, func(l []byte) bool { q.Layout, q.DelayLayout = l, false; return true })
}

// keepWithLayout decodes reply into rep and, if layout (read from rep)
// gives one, req into q, has set put it in, and returns q encoded; nil if
// any of that cannot be done.
func keepWithLayout(req, reply []byte, q, rep proto.Message, layout func() []byte, set func([]byte) bool) []byte {
	if ptlrpc.Unmarshal(reply, rep) != nil {
		return nil
	}
	l := layout()
	if len(l) == 0 || ptlrpc.Unmarshal(req, q) != nil || !set(l) {
		return nil
	}
	b, err := ptlrpc.Marshal(q)
	if err != nil {
		return nil
	}
	return b
}
