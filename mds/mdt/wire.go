package mdt

import (
	"errors"
	"fmt"
	"syscall"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/mds/mdd"
	ldlmv1 "github.com/nacrefs/nacre/proto/nacre/ldlm/v1"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

// The decoders of request bodies: each turns bytes from the network into
// Go types, or an error wrapping errBadRequest (EINVAL on the wire) that
// says what was wrong. They check shape (FIDs present and sane, sizes and
// counts bounded, layouts decodable templates); the store checks meaning
// (names, modes, permissions).

// errBadRequest marks requests that make no sense.
var errBadRequest = errors.New("mdt: bad request")

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errBadRequest}, args...)...)
}

// maxGroups bounds a credential's supplementary groups (NGROUPS_MAX).
const maxGroups = 65536

// Intent operations (Lustre's IT_* bits).
const (
	ItOpen    uint32 = 1 << 0
	ItCreat   uint32 = 1 << 1
	ItGetattr uint32 = 1 << 3
	ItLookup  uint32 = 1 << 4
	itAll            = ItOpen | ItCreat | ItGetattr | ItLookup
)

// Open flags the MDT looks at beyond mdd's (Linux's values).
const (
	oCreat = 0o100
	oExcl  = 0o200
	oTrunc = 0o1000
	// oTmpfile is O_TMPFILE: __O_TMPFILE with O_DIRECTORY.
	oTmpfile = 0o20200000
)

// tmpfile reports whether open flags ask for an O_TMPFILE file.
func tmpfile(flags uint64) bool { return flags&oTmpfile == oTmpfile }

// fidFrom converts a FID from the wire; absent is the zero FID.
func fidFrom(w *mdsv1.FID) fid.FID {
	if w == nil {
		return fid.FID{}
	}
	return fid.FID{Seq: w.Seq, Oid: w.Oid, Ver: w.Ver}
}

// needFID converts a FID that must be present and sane.
func needFID(what string, w *mdsv1.FID) (fid.FID, error) {
	f := fidFrom(w)
	if f.IsZero() {
		return f, bad("no %s FID", what)
	}
	if !f.IsSane() {
		return f, bad("%s FID %v is not sane", what, f)
	}
	return f, nil
}

// optFID converts a FID that may be absent (zero) but must be sane if
// present.
func optFID(what string, w *mdsv1.FID) (fid.FID, error) {
	if w == nil {
		return fid.FID{}, nil
	}
	return needFID(what, w)
}

func fidTo(f fid.FID) *mdsv1.FID {
	if f.IsZero() {
		return nil
	}
	return &mdsv1.FID{Seq: f.Seq, Oid: f.Oid, Ver: f.Ver}
}

func credFrom(w *mdsv1.Cred) (mdd.Cred, error) {
	if w == nil {
		return mdd.Cred{}, bad("no credential")
	}
	if len(w.Groups) > maxGroups {
		return mdd.Cred{}, bad("%d supplementary groups", len(w.Groups))
	}
	return mdd.Cred{UID: w.Uid, GID: w.Gid, Groups: w.Groups, Cap: w.Cap, Umask: w.Umask & 0o777}, nil
}

func attrTo(a mdd.Attr) *mdsv1.Attr {
	return &mdsv1.Attr{Fid: fidTo(a.FID), Mode: a.Mode, Uid: a.UID, Gid: a.GID, Nlink: a.Nlink, Flags: a.Flags,
		Rdev: a.Rdev, Size: a.Size, Blocks: a.Blocks, Atime: a.Atime, Mtime: a.Mtime, Ctime: a.Ctime, Crtime: a.Crtime, NoXattrs: a.NoXattrs}
}

// template decodes a layout the client asks for: a template with no
// objects (the MDT allocates them).
func template(b []byte) (*layout.Layout, error) {
	if len(b) == 0 {
		return nil, nil
	}
	l, err := layout.Unmarshal(b)
	if err != nil {
		return nil, bad("layout: %v", err)
	}
	for _, c := range l.Components {
		if len(c.Objects) > 0 {
			return nil, bad("layout names objects; the MDT allocates them")
		}
	}
	return &l, nil
}

// createLayout decodes the layout of a create, a set layout or a layout
// intent: a template, or, in a replay only (the handlers check), the
// layout the MDT gave the file before it restarted, objects and all.
func createLayout(b []byte) (*layout.Layout, error) {
	if len(b) == 0 {
		return nil, nil
	}
	l, err := layout.Unmarshal(b)
	if err != nil {
		return nil, bad("layout: %v", err)
	}
	return &l, nil
}

func unmarshal(b []byte, m proto.Message) error {
	if err := ptlrpc.Unmarshal(b, m); err != nil {
		return bad("%T: %v", m, err)
	}
	return nil
}

type getattrReq struct {
	cred                 mdd.Cred
	fid                  fid.FID
	wantLayout, wantLink bool
}

func parseGetattr(b []byte) (getattrReq, error) {
	var w mdsv1.GetattrRequest
	if err := unmarshal(b, &w); err != nil {
		return getattrReq{}, err
	}
	c, err := credFrom(w.Cred)
	if err != nil {
		return getattrReq{}, err
	}
	f, err := needFID("file", w.Fid)
	return getattrReq{cred: c, fid: f, wantLayout: w.WantLayout, wantLink: w.WantLink}, err
}

type lookupReq struct {
	cred       mdd.Cred
	parent     fid.FID
	name       string
	wantLayout bool
}

func parseLookup(b []byte) (lookupReq, error) {
	// Decoded by its own generated method, not through proto.Message, so
	// that it stays on the stack (a stat is this RPC and nothing else).
	var w mdsv1.LookupRequest
	if err := w.UnmarshalVT(b); err != nil {
		return lookupReq{}, bad("lookup request: %v", err)
	}
	c, err := credFrom(w.Cred)
	if err != nil {
		return lookupReq{}, err
	}
	p, err := needFID("parent", w.Parent)
	return lookupReq{cred: c, parent: p, name: string(w.Name), wantLayout: w.WantLayout}, err
}

// The reint operations.
type (
	createOp struct {
		parent fid.FID
		name   string
		fid    fid.FID
		mode   uint32
		rdev   uint64
		target string
		layout *layout.Layout
		delay  bool
		// tmpfile: an O_TMPFILE file, with no name (linkable: one
		// that a link may name, made without O_EXCL).
		tmpfile, linkable bool
	}
	unlinkOp struct {
		parent fid.FID
		name   string
		dir    bool
	}
	renameOp struct {
		sp, tp       fid.FID
		sname, tname string
		flags        uint
	}
	linkOp struct {
		fid, parent fid.FID
		name        string
	}
	setattrOp struct {
		fid fid.FID
		sa  mdd.SetAttr
	}
	setxattrOp struct {
		fid    fid.FID
		name   string
		value  []byte
		flags  int
		remove bool
	}
	setLayoutOp struct {
		fid    fid.FID
		layout layout.Layout
		remove bool // drop a directory's default
	}
	layoutIntentOp struct {
		fid        fid.FID
		start, end uint64
		// layout is a replay's: the layout returned before the restart.
		layout *layout.Layout
	}
	openOp struct {
		parent fid.FID // zero: open fid
		name   string
		fid    fid.FID
		flags  uint64
		mode   uint32
		newFID fid.FID
		layout *layout.Layout
		delay  bool
		// replayHandle: an open replayed after a restart, under the
		// handle it had before.
		replayHandle uint64
		// keepDirLock: a PR lock of the requester's on parent that the
		// create leaves alone (IntentRequest.keep_dir_lock); 0 for none.
		keepDirLock ldlm.Handle
		// layoutUnderLock: the caller reads an existing file's layout
		// itself, under the lock it takes (an open intent): open does not.
		layoutUnderLock bool
	}
)

type reintReq struct {
	cred     mdd.Cred
	time     int64
	op       any      // one of the *Op types above
	cancels  []uint64 // lock handles the client gave back with it
	converts []*ldlmv1.ConvertRequest
	closes   []closeReq // closes that ride on it (ReintRequest.closes)
}

// allAttrBits are the SetAttr bits a client may send.
const allAttrBits = mdd.AttrMode | mdd.AttrUID | mdd.AttrGID | mdd.AttrSize | mdd.AttrAtime | mdd.AttrMtime | mdd.AttrCtime |
	mdd.AttrAtimeNow | mdd.AttrMtimeNow | mdd.AttrFlags | mdd.AttrBlocks | mdd.AttrOpenWrite | mdd.AttrRestore

func parseReint(b []byte) (reintReq, error) {
	var w mdsv1.ReintRequest
	if err := unmarshal(b, &w); err != nil {
		return reintReq{}, err
	}
	closes, err := closesFrom(w.Closes)
	if err != nil {
		return reintReq{}, err
	}
	c, err := credFrom(w.Cred)
	if err != nil {
		return reintReq{closes: closes}, err
	}
	if w.Time < 0 {
		return reintReq{closes: closes}, bad("time %d", w.Time)
	}
	r := reintReq{cred: c, time: w.Time, cancels: w.Cancels, converts: w.Converts, closes: closes}
	switch op := w.Op.(type) {
	case *mdsv1.ReintRequest_Create:
		o := op.Create
		cr := &createOp{name: string(o.Name), mode: o.Mode, rdev: o.Rdev, target: string(o.Target), delay: o.DelayLayout}
		if cr.parent, err = needFID("parent", o.Parent); err != nil {
			return r, err
		}
		if cr.fid, err = optFID("new", o.Fid); err != nil {
			return r, err
		}
		if cr.layout, err = createLayout(o.Layout); err != nil {
			return r, err
		}
		r.op = cr
	case *mdsv1.ReintRequest_Unlink:
		o := op.Unlink
		u := &unlinkOp{name: string(o.Name), dir: o.Dir}
		if u.parent, err = needFID("parent", o.Parent); err != nil {
			return r, err
		}
		r.op = u
	case *mdsv1.ReintRequest_Rename:
		o := op.Rename
		rn := &renameOp{sname: string(o.SrcName), tname: string(o.TgtName), flags: uint(o.Flags)}
		if rn.sp, err = needFID("source parent", o.SrcParent); err != nil {
			return r, err
		}
		if rn.tp, err = needFID("target parent", o.TgtParent); err != nil {
			return r, err
		}
		r.op = rn
	case *mdsv1.ReintRequest_Link:
		o := op.Link
		l := &linkOp{name: string(o.Name)}
		if l.fid, err = needFID("file", o.Fid); err != nil {
			return r, err
		}
		if l.parent, err = needFID("parent", o.Parent); err != nil {
			return r, err
		}
		r.op = l
	case *mdsv1.ReintRequest_Setattr:
		o := op.Setattr
		if o.Valid == 0 || o.Valid&^allAttrBits != 0 {
			return r, bad("setattr valid bits %#x", o.Valid)
		}
		s := &setattrOp{sa: mdd.SetAttr{Valid: o.Valid, Mode: o.Mode, UID: o.Uid, GID: o.Gid, Size: o.Size, Blocks: o.Blocks,
			Atime: o.Atime, Mtime: o.Mtime, Ctime: o.Ctime, Flags: o.Flags}}
		if s.fid, err = needFID("file", o.Fid); err != nil {
			return r, err
		}
		r.op = s
	case *mdsv1.ReintRequest_Setxattr:
		o := op.Setxattr
		if o.Flags&^uint32(mdd.XattrCreate|mdd.XattrReplace) != 0 {
			return r, bad("setxattr flags %#x", o.Flags)
		}
		if len(o.Name) > mdd.MaxXattrName+1 {
			return r, fmt.Errorf("%w: xattr name of %d bytes", syscall.ERANGE, len(o.Name))
		}
		s := &setxattrOp{name: string(o.Name), value: o.Value, flags: int(o.Flags), remove: o.Remove}
		if s.fid, err = needFID("file", o.Fid); err != nil {
			return r, err
		}
		r.op = s
	case *mdsv1.ReintRequest_SetLayout:
		o := op.SetLayout
		s := &setLayoutOp{}
		if s.fid, err = needFID("file", o.Fid); err != nil {
			return r, err
		}
		if o.Remove {
			if len(o.Layout) > 0 {
				return r, bad("remove a default layout and set one at once")
			}
			s.remove = true
			r.op = s
			break
		}
		l, err := createLayout(o.Layout) // objects only in a replay: doSetLayout checks
		if err != nil {
			return r, err
		}
		if l == nil {
			return r, bad("set layout without a layout")
		}
		s.layout = *l
		r.op = s
	case *mdsv1.ReintRequest_LayoutIntent:
		o := op.LayoutIntent
		s := &layoutIntentOp{start: o.Start, end: o.End}
		if s.fid, err = needFID("file", o.Fid); err != nil {
			return r, err
		}
		if o.End <= o.Start {
			return r, bad("layout intent on [%d, %d)", o.Start, o.End)
		}
		if s.layout, err = createLayout(o.Layout); err != nil {
			return r, err
		}
		r.op = s
	case *mdsv1.ReintRequest_Open:
		o, err := openFrom(op.Open.Parent, op.Open.Name, op.Open.Fid, op.Open.Flags, op.Open.Mode, op.Open.NewFid, op.Open.Layout, op.Open.DelayLayout)
		if err == nil && op.Open.ReplayHandle != 0 {
			if !o.parent.IsZero() || o.flags&(oCreat|oExcl|oTrunc) != 0 {
				return r, bad("replayed open by name or with O_CREAT, O_EXCL or O_TRUNC")
			}
			o.replayHandle = op.Open.ReplayHandle
		}
		if err != nil {
			return r, err
		}
		r.op = o
	default:
		return r, bad("reint without an operation")
	}
	return r, nil
}

func openFrom(parent *mdsv1.FID, name []byte, f *mdsv1.FID, flags uint64, mode uint32, newFID *mdsv1.FID, lb []byte, delay bool) (*openOp, error) {
	o := &openOp{name: string(name), flags: flags, mode: mode, delay: delay}
	var err error
	if o.parent, err = optFID("parent", parent); err != nil {
		return nil, err
	}
	if o.fid, err = optFID("file", f); err != nil {
		return nil, err
	}
	if o.newFID, err = optFID("new", newFID); err != nil {
		return nil, err
	}
	if o.layout, err = createLayout(lb); err != nil {
		return nil, err
	}
	switch {
	case o.parent.IsZero() && o.fid.IsZero():
		return nil, bad("open of nothing: no parent and no FID")
	case o.parent.IsZero() && (len(name) > 0 || flags&oCreat != 0):
		return nil, bad("open by FID with a name or O_CREAT")
	case !o.parent.IsZero() && !o.fid.IsZero():
		return nil, bad("open by name and by FID at once")
	case tmpfile(flags) && (o.parent.IsZero() || len(name) > 0 || o.newFID.IsZero() || flags&oCreat != 0):
		return nil, bad("O_TMPFILE open: want a directory, a new FID, no name and no O_CREAT")
	case tmpfile(flags) && flags&mdd.OpenAccMode == mdd.OpenReadOnly:
		return nil, bad("O_TMPFILE open for read only")
	}
	return o, nil
}

type closeReq struct {
	cred         mdd.Cred
	handle       uint64
	fid          fid.FID
	lsom         *mdd.LSOM
	mtime, ctime int64
	written      bool
}

func parseClose(b []byte) (closeReq, error) {
	var w mdsv1.CloseRequest
	if err := unmarshal(b, &w); err != nil {
		return closeReq{}, err
	}
	return closeFrom(&w)
}

func closeFrom(w *mdsv1.CloseRequest) (closeReq, error) {
	c, err := credFrom(w.Cred)
	if err != nil {
		return closeReq{}, err
	}
	r := closeReq{cred: c, handle: w.Handle, mtime: w.Mtime, ctime: w.Ctime, written: w.Written}
	if r.fid, err = needFID("file", w.Fid); err != nil {
		return r, err
	}
	if w.Lsom {
		r.lsom = &mdd.LSOM{Size: w.Size, Blocks: w.Blocks, Flags: mdd.SOMLazy}
	}
	return r, nil
}

// maxCloses bounds the closes one request carries.
const maxCloses = 64

// closesFrom decodes the closes a request carries: a handle and a FID
// each and, for the changelog, the closer's uid and gid (a close needs no
// groups or capabilities), changing nothing (no LSOM, no times). The
// request's handler ends them first, whatever else it finds wrong in the
// request.
func closesFrom(ws []*mdsv1.CloseRequest) ([]closeReq, error) {
	if len(ws) > maxCloses {
		return nil, bad("%d closes, at most %d", len(ws), maxCloses)
	}
	var out []closeReq
	for _, w := range ws {
		if w.Lsom || w.Mtime != 0 || w.Ctime != 0 || w.Written {
			return nil, bad("a carried close sets LSOM or times, or says it wrote")
		}
		q, err := closeFrom(w)
		if err != nil {
			return nil, err
		}
		q.cred = mdd.Cred{UID: q.cred.UID, GID: q.cred.GID}
		out = append(out, q)
	}
	return out, nil
}

// maxReaddirEntries bounds the entries of one page.
const maxReaddirEntries = 4096

type readdirReq struct {
	cred   mdd.Cred
	fid    fid.FID
	cookie uint64
	max    int
}

// validCookie reports whether c is a position Readdir can hand out: ".",
// "..", a name hash (63 bits), or the end.
func validCookie(c uint64) bool { return c < 1<<63 || c == mdd.DirEnd }

func parseReaddir(b []byte) (readdirReq, error) {
	var w mdsv1.ReaddirRequest
	if err := unmarshal(b, &w); err != nil {
		return readdirReq{}, err
	}
	c, err := credFrom(w.Cred)
	if err != nil {
		return readdirReq{}, err
	}
	r := readdirReq{cred: c, cookie: w.Cookie, max: int(min(w.MaxEntries, maxReaddirEntries))}
	if w.MaxEntries == 0 {
		r.max = DefaultReaddirEntries
	}
	if r.fid, err = needFID("directory", w.Fid); err != nil {
		return r, err
	}
	if !validCookie(w.Cookie) {
		return r, bad("readdir cookie %#x was never issued", w.Cookie)
	}
	return r, nil
}

type getxattrReq struct {
	cred mdd.Cred
	fid  fid.FID
	name string
	list bool
}

func parseGetxattr(b []byte) (getxattrReq, error) {
	var w mdsv1.GetxattrRequest
	if err := unmarshal(b, &w); err != nil {
		return getxattrReq{}, err
	}
	c, err := credFrom(w.Cred)
	if err != nil {
		return getxattrReq{}, err
	}
	r := getxattrReq{cred: c, name: string(w.Name), list: w.List}
	if r.fid, err = needFID("file", w.Fid); err != nil {
		return r, err
	}
	if w.List && len(w.Name) > 0 {
		return r, bad("listxattr with a name")
	}
	return r, nil
}

// keyFID2Path is MDS_GET_INFO's fid2path key (Lustre's KEY_FID2PATH).
const keyFID2Path = "fid2path"

type getInfoReq struct {
	cred mdd.Cred
	key  string
	fid  fid.FID
}

func parseGetInfo(b []byte) (getInfoReq, error) {
	var w mdsv1.GetInfoRequest
	if err := unmarshal(b, &w); err != nil {
		return getInfoReq{}, err
	}
	c, err := credFrom(w.Cred)
	if err != nil {
		return getInfoReq{}, err
	}
	r := getInfoReq{cred: c, key: string(w.Key)}
	if r.key != keyFID2Path {
		return r, bad("get_info key %q", clamp(r.key))
	}
	r.fid, err = needFID("file", w.Fid)
	return r, err
}

func parseFLD(b []byte) (uint64, error) {
	var w mdsv1.FldQueryRequest
	if err := unmarshal(b, &w); err != nil {
		return 0, err
	}
	return w.Seq, nil
}

type intentReq struct {
	op     uint32
	cred   mdd.Cred
	time   int64
	parent fid.FID
	name   string
	fid    fid.FID
	open   *openOp // IT_OPEN
	mode   uint32  // IT_CREAT alone
	newFID fid.FID
	layout *layout.Layout
	delay  bool
	closes []closeReq
}

func parseIntent(b []byte) (intentReq, error) {
	var w mdsv1.IntentRequest
	if err := unmarshal(b, &w); err != nil {
		return intentReq{}, err
	}
	closes, err := closesFrom(w.Closes)
	if err != nil {
		return intentReq{}, err
	}
	c, err := credFrom(w.Cred)
	if err != nil {
		return intentReq{closes: closes}, err
	}
	r := intentReq{op: w.Op, cred: c, time: w.Time, name: string(w.Name), mode: w.Mode, delay: w.DelayLayout, closes: closes}
	if w.Time < 0 {
		return r, bad("time %d", w.Time)
	}
	if r.parent, err = optFID("parent", w.Parent); err != nil {
		return r, err
	}
	if r.fid, err = optFID("file", w.Fid); err != nil {
		return r, err
	}
	if r.newFID, err = optFID("new", w.NewFid); err != nil {
		return r, err
	}
	if r.layout, err = createLayout(w.Layout); err != nil {
		return r, err
	}
	switch {
	case r.op == 0 || r.op&^itAll != 0:
		return r, bad("intent op %#x", r.op)
	case r.op&ItOpen != 0:
		flags := w.Flags
		if r.op&ItCreat != 0 {
			flags |= oCreat
		}
		if r.open, err = openFrom(w.Parent, w.Name, w.Fid, flags, w.Mode, w.NewFid, w.Layout, w.DelayLayout); err != nil {
			return r, err
		}
		if w.KeepDirLock != 0 && (r.open.parent.IsZero() || flags&oCreat == 0) {
			return r, bad("keep_dir_lock without a create by name")
		}
		r.open.keepDirLock = ldlm.Handle(w.KeepDirLock)
	case r.op&ItCreat != 0:
		if r.parent.IsZero() {
			return r, bad("create intent without a parent")
		}
	case r.parent.IsZero() == r.fid.IsZero():
		return r, bad("lookup intent: want a parent and a name, or a FID")
	case r.parent.IsZero() && len(w.Name) > 0:
		return r, bad("lookup intent by FID with a name")
	}
	if w.KeepDirLock != 0 && r.open == nil {
		return r, bad("keep_dir_lock without a create by name")
	}
	return r, nil
}

// clamp shortens a name for a log line.
func clamp(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
