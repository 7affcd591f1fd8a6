package mdt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"syscall"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/mds/mdd"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

func (m *MDT) handlerTable() map[wire.Opcode]ptlrpc.Handler {
	h := map[wire.Opcode]ptlrpc.Handler{
		wire.MDSGetattr: m.getattr, wire.MDSGetattrName: m.lookup, wire.MDSReint: m.reint, wire.MDSClose: m.closeFile,
		wire.MDSReadpage: m.readdir, wire.MDSStatfs: m.statfs, wire.MDSGetxattr: m.getxattr, wire.MDSGetRoot: m.getRoot,
		wire.MDSSync: m.sync, wire.MDSGetInfo: m.getInfo, wire.SEQQuery: m.seqQuery, wire.FLDQuery: m.fldQuery,
		wire.MDSHSMStateGet: m.hsmStateGet, wire.MDSHSMStateSet: m.hsmStateSet, wire.MDSHSMProgress: m.hsmProgress,
		wire.LLOGNextBlock: m.changelogRead, wire.MDSChangelogClear: m.changelogClear,
		wire.MDSSwapLayouts: m.swapLayouts,
	}
	// Job stats by Lustre's md_stats names; MDS_REINT and intents count
	// by what they do (reint, intent).
	for op, name := range map[wire.Opcode]string{wire.MDSGetattr: "getattr", wire.MDSGetattrName: "getattr",
		wire.MDSClose: "close", wire.MDSReadpage: "readdir", wire.MDSStatfs: "statfs", wire.MDSGetxattr: "getxattr",
		wire.MDSSync: "sync"} {
		h[op] = m.countJob(name, h[op])
	}
	for op, spec := range m.lockd.Handlers() {
		h[op] = spec.Fn
	}
	return h
}

// countOp counts one metadata operation of r: in the MDT's operation
// counts (OpStats) and under r's job id (JobStats).
func (m *MDT) countOp(r *ptlrpc.Request, name string) {
	m.opsMu.Lock()
	m.ops[name]++
	m.opsMu.Unlock()
	m.jobs.Add(r.Header.JobID(), name, "reqs", 1)
}

// OpStats returns how many metadata operations the MDT was asked for, by
// md_stats name ("open", "mkdir", "getattr"), errors included.
func (m *MDT) OpStats() map[string]uint64 {
	m.opsMu.Lock()
	defer m.opsMu.Unlock()
	return maps.Clone(m.ops)
}

// countJob wraps a handler to count its requests in the job stats under
// name.
func (m *MDT) countJob(name string, h ptlrpc.Handler) ptlrpc.Handler {
	return func(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
		m.countOp(r, name)
		return h(ctx, r)
	}
}

// reintJobOp is the md_stats name of a reint operation.
func reintJobOp(op any) string {
	switch o := op.(type) {
	case *createOp:
		if o.mode&sIFMT == sIFDIR {
			return "mkdir"
		}
		return "mknod"
	case *unlinkOp:
		if o.dir {
			return "rmdir"
		}
		return "unlink"
	case *renameOp:
		return "rename"
	case *linkOp:
		return "link"
	case *setattrOp:
		return "setattr"
	case *setxattrOp, *setLayoutOp:
		return "setxattr"
	case *layoutIntentOp:
		return "layout_intent"
	case *openOp:
		return "open"
	}
	return "reint"
}

// errno is the status a reply carries for err.
func errno(err error) int32 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errBadRequest):
		return -int32(syscall.EINVAL)
	case errors.Is(err, context.DeadlineExceeded):
		return -int32(syscall.ETIMEDOUT)
	case errors.Is(err, context.Canceled):
		return -int32(syscall.ECANCELED)
	}
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return -int32(e)
	}
	if n := ldlm.Errno(err); n != syscall.EIO {
		return -int32(n)
	}
	return -int32(mdd.Errno(err))
}

// fail answers a request with err's errno, logging requests that make no
// sense (bad input from the network gets an error and a log line) and
// failures of the MDT itself.
func (m *MDT) fail(r *ptlrpc.Request, err error) ([]byte, int32) {
	st := errno(err)
	switch {
	case errors.Is(err, errBadRequest):
		m.log.Info("mdt: refusing request", "op", r.Header.Opcode, "from", r.Peer, "err", err)
	case st == -int32(syscall.EIO):
		m.log.Error("mdt: request failed", "op", r.Header.Opcode, "from", r.Peer, "err", err)
	default:
		m.log.Debug("mdt: request failed", "op", r.Header.Opcode, "from", r.Peer, "err", err)
	}
	return nil, st
}

func marshal(msg proto.Message) ([]byte, int32) {
	b, err := ptlrpc.Marshal(msg)
	if err != nil {
		return nil, -int32(syscall.EIO)
	}
	return b, 0
}

// internalReq is the store request of a change the MDT makes on its own
// (closing a departed client's files, destroying orphans): numbered by
// the target like clients' changes (but not while clients replay theirs:
// ptlrpc.Target.InternalTransno), so that every change's durability
// follows from the target's last committed transno.
func (m *MDT) internalReq() mdd.Req {
	return mdd.Req{Cred: mdd.Root(), AssignTransno: m.tgt.InternalTransno}
}

// req is the store request of a change made by r: its caller, its time,
// and its transno, given in apply order.
func (m *MDT) req(r *ptlrpc.Request, cred mdd.Cred, time int64) mdd.Req {
	return mdd.Req{Cred: cred, Time: time, AssignTransno: func() uint64 { return r.AssignTransno(nil) }, Replay: r.Replayed()}
}

// checkFID refuses a FID that cannot name an object of this MDT: an OST
// object (EINVAL), an object of another MDT (EREMOTE), a sequence nobody
// was granted (ENOENT: nothing of it exists).
func (m *MDT) checkFID(f fid.FID) error {
	switch {
	case f.IsIDIF():
		return bad("%v is an OST object", f)
	case f.Seq < fid.SeqStart:
		return fmt.Errorf("mdt: %v: %w", f, syscall.ENOENT)
	}
	e, err := m.store.FLDLookup(f.Seq)
	switch {
	case err != nil:
		return fmt.Errorf("mdt: %v: no target has its sequence: %w", f, syscall.ENOENT)
	case e.Type != mdd.TargetMDT:
		return bad("%v is an object of OST%04x", f, e.Index)
	case e.Index != m.cfg.Index:
		return fmt.Errorf("mdt: %v lives on MDT%04x: %w", f, e.Index, syscall.EREMOTE)
	}
	return nil
}

// layoutBytes returns f's layout encoded, nil if it has none.
func (m *MDT) layoutBytes(f fid.FID) ([]byte, error) {
	l, err := m.store.GetLayout(f)
	if errors.Is(err, syscall.ENODATA) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return l.Marshal()
}

func (m *MDT) getattr(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	q, err := parseGetattr(r.Body)
	if err == nil {
		err = m.checkFID(q.fid)
	}
	if err != nil {
		return m.fail(r, err)
	}
	a, err := m.store.Getattr(q.fid)
	if err != nil {
		return m.fail(r, err)
	}
	rep := &mdsv1.GetattrReply{Attr: attrTo(a)}
	if q.wantLayout {
		if rep.Layout, err = m.layoutBytes(q.fid); err != nil {
			return m.fail(r, err)
		}
	}
	if q.wantLink {
		target, err := m.store.Readlink(q.fid)
		if err != nil {
			return m.fail(r, err)
		}
		rep.Link = []byte(target)
	}
	return marshal(rep)
}

func (m *MDT) lookup(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	q, err := parseLookup(r.Body)
	if err == nil {
		err = m.checkFID(q.parent)
	}
	if err != nil {
		return m.fail(r, err)
	}
	a, err := m.store.Lookup(mdd.Req{Cred: q.cred}, q.parent, q.name)
	if err != nil {
		return m.fail(r, err)
	}
	rep := mdsv1.GetattrReply{Attr: attrTo(a)} // on the stack, as parseLookup's request
	if q.wantLayout {
		if rep.Layout, err = m.layoutBytes(a.FID); err != nil {
			return m.fail(r, err)
		}
	}
	b, err := rep.MarshalVT()
	if err != nil {
		return nil, -int32(syscall.EIO)
	}
	return b, 0
}

func (m *MDT) reint(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	q, err := parseReint(r.Body)
	m.carriedCloses(r, q.closes) // (even if the rest is refused)
	if err != nil {
		return m.fail(r, err)
	}
	m.countOp(r, reintJobOp(q.op))
	// The client's early cancels go first, so that the change's own locks
	// find them gone instead of calling the client back.
	m.lockd.CancelFor(r, q.cancels)
	m.lockd.ConvertFor(r, q.converts)
	var rep *mdsv1.ReintReply
	switch o := q.op.(type) {
	case *createOp:
		rep, err = m.doCreate(ctx, r, q, o)
	case *unlinkOp:
		rep, err = m.doUnlink(ctx, r, q, o)
	case *renameOp:
		rep, err = m.doRename(ctx, r, q, o)
	case *linkOp:
		rep, err = m.doLink(ctx, r, q, o)
	case *setattrOp:
		rep, err = m.doSetattr(ctx, r, q, o)
	case *setxattrOp:
		rep, err = m.doSetxattr(ctx, r, q, o)
	case *setLayoutOp:
		rep, err = m.doSetLayout(ctx, r, q, o)
	case *layoutIntentOp:
		rep, err = m.doLayoutIntent(ctx, r, q, o)
	case *openOp:
		var res openResult
		if res, err = m.open(ctx, r, q.cred, q.time, o); err == nil {
			rep = res.reply()
		}
	}
	if err != nil {
		return m.fail(r, err)
	}
	if _, open := q.op.(*openOp); !open {
		// Its reply stays true after a restart (an open's names a handle
		// the restart loses): a resend after one gets it from the store.
		r.KeepReply()
	}
	return marshal(rep)
}

// Mode bits the MDT looks at.
const (
	sIFMT  = mdd.S_IFMT
	sIFREG = mdd.S_IFREG
	sIFDIR = mdd.S_IFDIR
	sIFLNK = mdd.S_IFLNK
)

func (m *MDT) doCreate(ctx context.Context, r *ptlrpc.Request, q reintReq, o *createOp) (*mdsv1.ReintReply, error) {
	if err := m.checkFID(o.parent); err != nil {
		return nil, err
	}
	release, err := m.lock(ctx, dirLock(o.parent), nameLock(o.parent, o.name))
	if err != nil {
		return nil, err
	}
	defer release()
	a, l, err := m.create(ctx, m.req(r, q.cred, q.time), o)
	if err != nil {
		return nil, err
	}
	rep := &mdsv1.ReintReply{Attr: attrTo(a)}
	if l != nil {
		rep.Layout, _ = l.Marshal()
	}
	return rep, nil
}

// create makes what o says, with the directory and name locks held, and
// returns its attributes and, for a regular file with objects, its
// layout.
func (m *MDT) create(ctx context.Context, req mdd.Req, o *createOp) (mdd.Attr, *layout.Layout, error) {
	sp := mdd.Spec{FID: o.fid, Mode: o.mode, Rdev: o.rdev}
	typ := o.mode & sIFMT
	if typ != sIFREG && typ != 0 && (o.layout != nil || o.delay) {
		return mdd.Attr{}, nil, bad("a layout for a file of type %#o", typ)
	}
	switch typ {
	case sIFDIR:
		// A new directory inherits its parent's default layout (the
		// root's applies everywhere anyway), in the mkdir's transaction:
		// one transno, one commit, nothing between them.
		if o.parent != mdd.RootFID {
			if def, err := m.store.LayoutIfAny(o.parent); err == nil && def != nil {
				sp.Layout = def
			}
		}
		a, err := m.store.Mkdir(req, o.parent, o.name, sp)
		return a, nil, err
	case sIFLNK:
		a, err := m.store.Symlink(req, o.parent, o.name, o.target, sp)
		return a, nil, err
	case sIFREG, 0:
		var p *plan
		switch {
		case o.layout != nil && hasObjects(o.layout):
			// The replay flag is the client's word: only while the
			// MDT recovers does a replay make what it did before.
			if !req.Replay || !m.tgt.Recovering() {
				return mdd.Attr{}, nil, bad("layout names objects; the MDT allocates them")
			}
			// A replayed create, with the objects the file was given
			// before the restart (its client may have written to them):
			// the store counts them used, and the OSTs' orphan cleanup
			// waits for the replays.
			sp.Layout = o.layout
		case !o.delay:
			tmpl := o.layout
			if tmpl == nil {
				d := m.defaultLayout(o.parent)
				tmpl = &d
			}
			var err error
			if p, err = m.allocate(ctx, *tmpl); err != nil {
				return mdd.Attr{}, nil, err
			}
			if p != nil {
				sp.Alloc = p.alloc
				defer p.release()
			}
		}
		sp.Mode &= mdd.PermMask
		var a mdd.Attr
		var err error
		if o.tmpfile {
			a, err = m.store.Tmpfile(req, o.parent, sp, o.linkable)
		} else {
			a, err = m.store.Create(req, o.parent, o.name, sp)
		}
		switch {
		case err != nil:
			return a, nil, err
		case sp.Layout != nil:
			return a, sp.Layout, nil
		case p == nil || !p.taken:
			return a, nil, nil
		}
		return a, &p.out, nil
	default:
		a, err := m.store.Mknod(req, o.parent, o.name, sp)
		return a, nil, err
	}
}

// dotName reports whether name is "." or "..", whose entries no change
// may touch: the store refuses them without the MDT looking them up.
func dotName(name string) bool { return name == "." || name == ".." }

// child looks up the object name names in dir, with the name lock held;
// found is false if there is none. The caller's search permission is
// checked.
func (m *MDT) child(cred mdd.Cred, dir fid.FID, name string) (a mdd.Attr, found bool, err error) {
	if dotName(name) {
		return mdd.Attr{}, false, nil
	}
	a, err = m.store.Lookup(mdd.Req{Cred: cred}, dir, name)
	if errors.Is(err, syscall.ENOENT) {
		if _, perr := m.store.Getattr(dir); perr != nil {
			return mdd.Attr{}, false, perr
		}
		return mdd.Attr{}, false, nil
	}
	return a, err == nil, err
}

// lockObjects takes the object locks of a change (its second phase),
// leaving out the resources its first phase holds: they only coincide in
// changes the store refuses (a directory into itself, over its own
// parent), and a second lock of one resource would wait for the first.
func (m *MDT) lockObjects(ctx context.Context, held []lockReq, objs ...lockReq) (func(), error) {
	var need []lockReq
	for _, o := range objs {
		dup := false
		for _, h := range held {
			dup = dup || h.res == o.res
		}
		if !dup {
			need = append(need, o)
		}
	}
	if len(need) == 0 {
		return func() {}, nil
	}
	return m.lock(ctx, need...)
}

func (m *MDT) doUnlink(ctx context.Context, r *ptlrpc.Request, q reintReq, o *unlinkOp) (*mdsv1.ReintReply, error) {
	if err := m.checkFID(o.parent); err != nil {
		return nil, err
	}
	first := []lockReq{dirLock(o.parent), nameLock(o.parent, o.name)}
	release, err := m.lock(ctx, first...)
	if err != nil {
		return nil, err
	}
	defer release()
	c, found, err := m.child(q.cred, o.parent, o.name)
	if err != nil {
		return nil, err
	}
	if found {
		rel, err := m.lockObjects(ctx, first, objLock(c.FID, fullBits))
		if err != nil {
			return nil, err
		}
		defer rel()
	}
	var rm mdd.Removal
	if o.dir {
		rm, err = m.store.Rmdir(m.req(r, q.cred, q.time), o.parent, o.name)
	} else {
		rm, err = m.store.Unlink(m.req(r, q.cred, q.time), o.parent, o.name)
	}
	if err != nil {
		return nil, err
	}
	m.removed(rm)
	c.Nlink = rm.Nlink
	return &mdsv1.ReintReply{Attr: attrTo(c), LastLink: rm.Last, Orphan: rm.Orphan}, nil
}

// removed starts the destroy of a removal's objects.
func (m *MDT) removed(rm mdd.Removal) {
	if rm.DestroyID != 0 {
		m.kickDestroy()
	}
}

// testHookRenameParentsLocked, if set (by tests), runs when a rename holds
// its directory and name locks, before it takes its object locks.
var testHookRenameParentsLocked func()

func (m *MDT) doRename(ctx context.Context, r *ptlrpc.Request, q reintReq, o *renameOp) (*mdsv1.ReintReply, error) {
	for _, p := range []fid.FID{o.sp, o.tp} {
		if err := m.checkFID(p); err != nil {
			return nil, err
		}
	}
	// A rename between two parents locks a directory it moves (or
	// replaces) after its parents, so that two of them can each hold
	// what the other waits for: rename d1/d2 → y/d2 holds d1 and waits
	// for d2 while rename /d1 → d2/x holds d2 and waits for d1, until
	// both time out. The rename lock, taken before any other, lets one
	// such rename run at a time; one that turns out to move no directory
	// gives it back before its object locks, and cannot be part of such
	// a cycle.
	renameLocked := false
	if o.sp != o.tp {
		select {
		case m.renameLock <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("mdt: rename lock: %w", syscall.ETIMEDOUT)
		}
		renameLocked = true
		defer func() {
			if renameLocked {
				<-m.renameLock
			}
		}()
	}
	first := []lockReq{dirLock(o.sp), dirLock(o.tp), nameLock(o.sp, o.sname), nameLock(o.tp, o.tname)}
	release, err := m.lock(ctx, first...)
	if err != nil {
		return nil, err
	}
	defer release()
	src, sfound, err := m.child(q.cred, o.sp, o.sname)
	if err != nil {
		return nil, err
	}
	tgt, tfound, err := m.child(q.cred, o.tp, o.tname)
	if err != nil {
		return nil, err
	}
	if renameLocked && !(sfound && src.Mode&sIFMT == sIFDIR) && !(tfound && tgt.Mode&sIFMT == sIFDIR) {
		<-m.renameLock
		renameLocked = false
	}
	if testHookRenameParentsLocked != nil {
		testHookRenameParentsLocked()
	}
	var objs []lockReq
	if sfound {
		objs = append(objs, objLock(src.FID, ldlm.BitLookup|ldlm.BitUpdate))
	}
	if tfound {
		objs = append(objs, objLock(tgt.FID, fullBits))
	}
	rel, err := m.lockObjects(ctx, first, objs...)
	if err != nil {
		return nil, err
	}
	defer rel()
	rm, err := m.store.Rename(m.req(r, q.cred, q.time), o.sp, o.sname, o.tp, o.tname, o.flags)
	if err != nil {
		return nil, err
	}
	rep := &mdsv1.ReintReply{Attr: attrTo(src)}
	if rm != nil {
		m.removed(*rm)
		rep.LastLink, rep.Orphan = rm.Last, rm.Orphan
	}
	return rep, nil
}

func (m *MDT) doLink(ctx context.Context, r *ptlrpc.Request, q reintReq, o *linkOp) (*mdsv1.ReintReply, error) {
	for _, f := range []fid.FID{o.fid, o.parent} {
		if err := m.checkFID(f); err != nil {
			return nil, err
		}
	}
	first := []lockReq{dirLock(o.parent), nameLock(o.parent, o.name)}
	release, err := m.lock(ctx, first...)
	if err != nil {
		return nil, err
	}
	defer release()
	rel, err := m.lockObjects(ctx, first, objLock(o.fid, ldlm.BitUpdate))
	if err != nil {
		return nil, err
	}
	defer rel()
	a, err := m.store.Link(m.req(r, q.cred, q.time), o.fid, o.parent, o.name)
	if err != nil {
		return nil, err
	}
	return &mdsv1.ReintReply{Attr: attrTo(a)}, nil
}

func (m *MDT) doSetattr(ctx context.Context, r *ptlrpc.Request, q reintReq, o *setattrOp) (*mdsv1.ReintReply, error) {
	if err := m.checkFID(o.fid); err != nil {
		return nil, err
	}
	bits := ldlm.BitUpdate
	if o.sa.Valid&(mdd.AttrMode|mdd.AttrUID|mdd.AttrGID) != 0 {
		bits |= ldlm.BitPerm | ldlm.BitLookup // Lustre: owner and mode are under LOOKUP too
	}
	release, err := m.lock(ctx, objLock(o.fid, bits))
	if err != nil {
		return nil, err
	}
	defer release()
	a, err := m.store.Setattr(m.req(r, q.cred, q.time), o.fid, o.sa)
	if err != nil {
		return nil, err
	}
	rep := &mdsv1.ReintReply{Attr: attrTo(a)}
	if a.Mode&sIFMT == sIFREG && o.sa.Valid&(mdd.AttrMtime|mdd.AttrSize) != 0 {
		// The client gives the objects the new mtime, or cuts them:
		// the layout saves it asking.
		if rep.Layout, err = m.layoutBytes(o.fid); err != nil {
			m.log.Warn("mdt: setattr: layout for the reply", "fid", o.fid, "err", err)
			rep.Layout = nil
		}
	}
	return rep, nil
}

func (m *MDT) doSetxattr(ctx context.Context, r *ptlrpc.Request, q reintReq, o *setxattrOp) (*mdsv1.ReintReply, error) {
	if err := m.checkFID(o.fid); err != nil {
		return nil, err
	}
	bits := ldlm.BitXAttr | ldlm.BitUpdate
	if o.name == mdd.XattrACLAccess || o.name == mdd.XattrACLDefault {
		bits |= ldlm.BitPerm | ldlm.BitLookup
	}
	release, err := m.lock(ctx, objLock(o.fid, bits))
	if err != nil {
		return nil, err
	}
	defer release()
	req := m.req(r, q.cred, q.time)
	if o.remove {
		err = m.store.Removexattr(req, o.fid, o.name)
	} else {
		err = m.store.Setxattr(req, o.fid, o.name, o.value, o.flags)
	}
	if err != nil {
		return nil, err
	}
	a, err := m.store.Getattr(o.fid)
	if err != nil {
		return nil, err
	}
	return &mdsv1.ReintReply{Attr: attrTo(a)}, nil
}

func (m *MDT) doSetLayout(ctx context.Context, r *ptlrpc.Request, q reintReq, o *setLayoutOp) (*mdsv1.ReintReply, error) {
	if err := m.checkFID(o.fid); err != nil {
		return nil, err
	}
	release, err := m.lock(ctx, objLock(o.fid, ldlm.BitLayout|ldlm.BitXAttr))
	if err != nil {
		return nil, err
	}
	defer release()
	a, err := m.store.Getattr(o.fid)
	if err != nil {
		return nil, err
	}
	// A layout with objects comes only in a replay while the MDT
	// recovers: the layout a file without objects was given before the
	// restart, which its client may have written to.
	replayed := hasObjects(&o.layout)
	if replayed && (!(r.Replayed() && m.tgt.Recovering()) || a.Mode&sIFMT != sIFREG) {
		return nil, bad("layout names objects; the MDT allocates them")
	}
	req := m.req(r, q.cred, q.time)
	if o.remove {
		if err := m.store.RemoveDefaultLayout(req, o.fid); err != nil {
			return nil, err
		}
		return &mdsv1.ReintReply{Attr: attrTo(a)}, nil
	}
	var out layout.Layout
	if a.Mode&sIFMT != sIFREG {
		// A directory's default layout is a template; the store refuses
		// other types.
		out, err = m.store.SetLayout(req, o.fid, o.layout)
	} else {
		var p *plan
		if !replayed {
			if p, err = m.allocate(ctx, o.layout); err != nil {
				return nil, err
			}
			defer p.release()
		}
		out, err = m.store.SetLayoutAlloc(req, o.fid, func(cur *layout.Layout) (layout.Layout, error) {
			if cur != nil && hasObjects(cur) {
				return layout.Layout{}, fmt.Errorf("mdt: %v already has objects: %w", o.fid, syscall.EEXIST)
			}
			if p == nil {
				return o.layout, nil
			}
			return p.alloc()
		})
	}
	if err != nil {
		return nil, err
	}
	rep := &mdsv1.ReintReply{Attr: attrTo(a)}
	rep.Layout, _ = out.Marshal()
	return rep, nil
}

// doLayoutIntent instantiates the components of a file's composite layout
// that cover [o.start, o.end) and are not instantiated yet, with objects
// from the pools, under an EX LAYOUT lock (clients caching the layout are
// called back first). The reply carries the layout.
//
// A replay while the MDT recovers brings the layout returned before the
// restart: a component the restart lost is instantiated again on the
// objects it had then, which the client may have written to (new ones
// would leave that data in orphans the cleanup destroys).
func (m *MDT) doLayoutIntent(ctx context.Context, r *ptlrpc.Request, q reintReq, o *layoutIntentOp) (*mdsv1.ReintReply, error) {
	if err := m.checkFID(o.fid); err != nil {
		return nil, err
	}
	if o.layout != nil && !(r.Replayed() && m.tgt.Recovering()) {
		return nil, bad("layout intent names a layout; only a replay in recovery does")
	}
	release, err := m.lock(ctx, objLock(o.fid, ldlm.BitLayout))
	if err != nil {
		return nil, err
	}
	defer release()
	a, err := m.store.Getattr(o.fid)
	if err != nil {
		return nil, err
	}
	if a.Mode&sIFMT != sIFREG {
		return nil, fmt.Errorf("mdt: layout intent on %v: not a regular file: %w", o.fid, syscall.EINVAL)
	}
	cur, err := m.store.GetLayout(o.fid)
	if err != nil {
		return nil, err
	}
	var plans []*plan
	defer func() {
		for _, p := range plans {
			p.release()
		}
	}()
	var replayed []int // components instantiated again from o.layout
	for ci, c := range cur.Components {
		if c.Instantiated() || c.Start >= o.end || (c.End != layout.EOF && c.End <= o.start) {
			continue
		}
		if o.layout != nil {
			if ci >= len(o.layout.Components) || !o.layout.Components[ci].Instantiated() ||
				o.layout.Components[ci].Start != c.Start || o.layout.Components[ci].End != c.End {
				return nil, bad("replayed layout intent on %v: component %d [%d, %d) is not in the layout it brings", o.fid, ci, c.Start, c.End)
			}
			replayed = append(replayed, ci)
			continue
		}
		p, err := m.allocateComp(ctx, cur, ci)
		if err != nil {
			return nil, err
		}
		plans = append(plans, p)
	}
	out := cur
	if len(plans) > 0 || len(replayed) > 0 {
		req := m.req(r, q.cred, q.time)
		req.Restore = m.restoreOpen(r.Export(), o.fid)
		out, err = m.store.SetLayoutAlloc(req, o.fid, func(now *layout.Layout) (layout.Layout, error) {
			if now == nil {
				return layout.Layout{}, fmt.Errorf("mdt: layout of %v went: %w", o.fid, syscall.EAGAIN)
			}
			l := *now
			for _, p := range plans {
				var err error
				if l, err = p.fill(l); err != nil {
					return layout.Layout{}, err
				}
			}
			if len(replayed) > 0 {
				l = l.Clone()
				for _, ci := range replayed {
					if ci >= len(l.Components) || l.Components[ci].Instantiated() {
						return layout.Layout{}, fmt.Errorf("mdt: component %d of %v changed meanwhile: %w", ci, o.fid, syscall.EAGAIN)
					}
					was := o.layout.Components[ci]
					c := &l.Components[ci]
					c.Objects = slices.Clone(was.Objects)
					c.StripeCount = was.StripeCount
					if !l.Composite {
						c.StripeOffset = was.StripeOffset // as plan.fill sets it
					}
				}
			}
			return l, nil
		})
		if err != nil {
			return nil, err
		}
	}
	rep := &mdsv1.ReintReply{Attr: attrTo(a)}
	rep.Layout, _ = out.Marshal()
	return rep, nil
}

func hasObjects(l *layout.Layout) bool {
	for _, c := range l.Components {
		if len(c.Objects) > 0 {
			return true
		}
	}
	return false
}

// openResult is what an open gives the client.
type openResult struct {
	attr     mdd.Attr
	layout   []byte
	handle   uint64
	created  bool
	released bool // HSM released: the data are in the archive only
}

func (o openResult) reply() *mdsv1.ReintReply {
	return &mdsv1.ReintReply{Attr: attrTo(o.attr), Layout: o.layout, OpenHandle: o.handle, Created: o.created}
}

// open opens (and with O_CREAT maybe creates) a file for r's export and
// returns its open handle. Without O_CREAT it needs no lock: the open
// counts in memory, and names do not change under the lookup's feet in
// any way an open could notice.
func (m *MDT) open(ctx context.Context, r *ptlrpc.Request, cred mdd.Cred, time int64, o *openOp) (openResult, error) {
	exp := r.Export()
	if exp == nil {
		return openResult{}, fmt.Errorf("mdt: open without a connection: %w", syscall.EPROTO)
	}
	var res openResult
	if o.replayHandle != 0 && !(r.Replayed() && m.tgt.Recovering()) {
		return res, fmt.Errorf("mdt: open of %v replaying handle %#x outside recovery: %w", o.fid, o.replayHandle, syscall.EPROTO)
	}
	target := o.fid
	if o.parent.IsZero() {
		if err := m.checkFID(target); err != nil {
			return res, err
		}
	} else {
		if err := m.checkFID(o.parent); err != nil {
			return res, err
		}
		if tmpfile(o.flags) || o.flags&oCreat != 0 {
			makeFile := m.openCreate
			if tmpfile(o.flags) {
				makeFile = m.openTmpfile
			}
			a, created, l, err := makeFile(ctx, r, cred, time, o)
			if err != nil {
				return res, err
			}
			target, res.created = a.FID, created
			if l != nil {
				res.layout, _ = l.Marshal()
			}
		} else {
			a, err := m.store.Lookup(mdd.Req{Cred: cred}, o.parent, o.name)
			if err != nil {
				return res, err
			}
			target = a.FID
		}
	}
	if r.Replayed() && r.Header.Transno != 0 && o.replayHandle == 0 {
		// A client replays an open the MDT had not committed when it
		// stopped: the create it made is redone, and the open itself comes
		// back with the client's open replays, under its old handle.
		res.attr.FID = target
		return res, nil
	}
	flags := o.flags &^ mdd.OpenInternal // (the MDT's own, not a client's to send)
	if res.created {
		flags |= mdd.OpenOwnerOverride // the creator opens what it made, whatever the mode says
	}
	if tmpfile(o.flags) {
		flags |= mdd.OpenTmpfile // an orphan from the start
	}
	if o.replayHandle != 0 {
		flags |= mdd.OpenReplay
	}
	a, err := m.store.OpenFile(mdd.Req{Cred: cred}, target, flags)
	if err != nil {
		return res, err
	}
	res.attr = a
	if a.Mode&sIFMT == sIFREG && !res.created {
		h, err := m.store.GetHSM(target)
		if err != nil {
			m.closeFID(target, flags)
			return res, err
		}
		res.released = h.Flags&mdd.HSMReleased != 0
	}
	if res.layout == nil && a.Mode&sIFMT == sIFREG && !o.layoutUnderLock {
		if res.layout, err = m.layoutBytes(target); err != nil {
			m.closeFID(target, flags)
			return res, err
		}
	}
	h, err := m.addOpen(exp, target, flags, o.replayHandle)
	if err != nil {
		m.closeFID(target, flags)
		return res, err
	}
	res.handle = h
	return res, nil
}

// openCreate finds or creates o's file under the directory and name
// locks.
func (m *MDT) openCreate(ctx context.Context, r *ptlrpc.Request, cred mdd.Cred, time int64, o *openOp) (mdd.Attr, bool, *layout.Layout, error) {
	dl := dirLock(o.parent)
	if exp := r.Export(); o.keepDirLock != 0 && exp != nil {
		// The client knows every name in parent under this PR lock and
		// adds this one itself: calling the lock back would make it
		// look every next name up again.
		dl.tolerate = ldlm.Tolerated{Owner: ldlm.OwnerOf(exp), Lock: o.keepDirLock}
	}
	release, err := m.lock(ctx, dl, nameLock(o.parent, o.name))
	if err != nil {
		return mdd.Attr{}, false, nil, err
	}
	defer release()
	c, found, err := m.child(cred, o.parent, o.name)
	if err != nil {
		return mdd.Attr{}, false, nil, err
	}
	if found {
		// A file of the FID the client gave this create, found by a
		// resend (or replay) of it, was made by its earlier send, whose
		// reply a restart lost: O_EXCL is satisfied.
		again := r.Header.Flags&(wire.MsgResent|wire.MsgReplay) != 0
		if o.flags&oExcl != 0 && (c.FID != o.newFID || !again) {
			return mdd.Attr{}, false, nil, fmt.Errorf("mdt: open O_EXCL of %q: %w", clamp(o.name), syscall.EEXIST)
		}
		return c, false, nil, nil
	}
	a, l, err := m.create(ctx, m.req(r, cred, time), &createOp{parent: o.parent, name: o.name, fid: o.newFID,
		mode: sIFREG | o.mode&mdd.PermMask, layout: o.layout, delay: o.delay})
	return a, err == nil, l, err
}

// openTmpfile makes o's O_TMPFILE file, or finds it made by an earlier
// send of the same request (a resend, or a replay after a restart): no
// lock, since no name changes.
func (m *MDT) openTmpfile(ctx context.Context, r *ptlrpc.Request, cred mdd.Cred, time int64, o *openOp) (mdd.Attr, bool, *layout.Layout, error) {
	if r.Header.Flags&(wire.MsgResent|wire.MsgReplay) != 0 {
		if a, err := m.store.Getattr(o.newFID); err == nil {
			return a, false, nil, nil
		}
	}
	a, l, err := m.create(ctx, m.req(r, cred, time), &createOp{parent: o.parent, fid: o.newFID,
		mode: sIFREG | o.mode&mdd.PermMask, layout: o.layout, delay: o.delay, tmpfile: true, linkable: o.flags&oExcl == 0})
	return a, err == nil, l, err
}

// addOpen records an open handle of exp, a new one or, for a replayed
// open, replay; ENOTCONN if the export went meanwhile (its handles were
// dropped already), EEXIST if replay is taken.
func (m *MDT) addOpen(exp *ptlrpc.Export, f fid.FID, flags, replay uint64) (uint64, error) {
	m.opensMu.Lock()
	defer m.opensMu.Unlock()
	if exp.Gone() {
		return 0, fmt.Errorf("mdt: open for a departed client: %w", syscall.ENOTCONN)
	}
	hs := m.opens[exp]
	if hs == nil {
		hs = map[uint64]openFile{}
		m.opens[exp] = hs
	}
	if replay != 0 {
		if o, dup := hs[replay]; dup {
			return 0, fmt.Errorf("mdt: replayed open of %v: handle %#x is open on %v: %w", f, replay, o.fid, syscall.EEXIST)
		}
		hs[replay] = openFile{fid: f, flags: flags}
		return replay, nil
	}
	for {
		m.nextHandle++
		if _, taken := hs[m.nextHandle]; !taken && m.nextHandle != 0 {
			break
		}
	}
	hs[m.nextHandle] = openFile{fid: f, flags: flags}
	return m.nextHandle, nil
}

// restoreOpen reports whether exp holds f open for an HSM restore
// (OpenRestore, which the store let through).
func (m *MDT) restoreOpen(exp *ptlrpc.Export, f fid.FID) bool {
	m.opensMu.Lock()
	defer m.opensMu.Unlock()
	for _, o := range m.opens[exp] {
		if o.fid == f && o.flags&mdd.OpenRestore != 0 {
			return true
		}
	}
	return false
}

// closeFID ends one open of f in the store, destroying an orphan whose
// last open it was.
func (m *MDT) closeFID(f fid.FID, flags uint64) { m.closeAs(m.internalReq(), f, flags) }

// closeAs is closeFID for the closer of req (a carried close's).
func (m *MDT) closeAs(req mdd.Req, f fid.FID, flags uint64) {
	m.closeWith(req, f, mdd.CloseInfo{Write: flags&mdd.OpenAccMode != mdd.OpenReadOnly})
}

// closeWith is closeAs with the close's info.
func (m *MDT) closeWith(req mdd.Req, f fid.FID, ci mdd.CloseInfo) {
	rm, err := m.store.CloseFile(req, f, ci)
	if err != nil {
		m.log.Info("mdt: close", "fid", f, "err", err)
		return
	}
	m.removed(rm)
}

// dropOpens closes every open handle of an export that went away.
func (m *MDT) dropOpens(exp *ptlrpc.Export) {
	m.opensMu.Lock()
	hs := m.opens[exp]
	delete(m.opens, exp)
	m.opensMu.Unlock()
	for _, o := range hs {
		// A writer gone without its close may have changed the data
		// (mdd.CloseInfo.Departed).
		w := o.flags&mdd.OpenAccMode != mdd.OpenReadOnly
		m.closeWith(m.internalReq(), o.fid, mdd.CloseInfo{Write: w, Departed: w})
	}
	if len(hs) > 0 {
		m.log.Info("mdt: closed the files of a departed client", "client", exp.ClientUUID(), "files", len(hs))
	}
}

// carriedCloses ends the opens whose closes ride on r (the client put
// them off: they change nothing but the open counts, so they need no
// transaction of r's). A handle that is not open, one closed before a
// resend of r, say, is skipped.
func (m *MDT) carriedCloses(r *ptlrpc.Request, qs []closeReq) {
	exp := r.Export()
	if exp == nil || len(qs) == 0 {
		return
	}
	for _, q := range qs {
		o, ok := m.takeOpen(exp, q.handle, q.fid)
		if !ok {
			m.log.Debug("mdt: carried close of a handle not open", "fid", q.fid, "handle", q.handle)
			continue
		}
		m.countOp(r, "close")
		m.closeAs(mdd.Req{Cred: q.cred, AssignTransno: m.tgt.InternalTransno}, o.fid, o.flags)
	}
}

// takeOpen takes exp's open handle of f out of its table, if it is open.
func (m *MDT) takeOpen(exp *ptlrpc.Export, handle uint64, f fid.FID) (openFile, bool) {
	m.opensMu.Lock()
	defer m.opensMu.Unlock()
	o, ok := m.opens[exp][handle]
	if !ok || o.fid != f {
		return openFile{}, false
	}
	delete(m.opens[exp], handle)
	return o, true
}

func (m *MDT) closeFile(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	q, err := parseClose(r.Body)
	if err != nil {
		return m.fail(r, err)
	}
	o, ok := m.takeOpen(r.Export(), q.handle, q.fid)
	if !ok && r.Replayed() && m.tgt.Recovering() {
		// A close replayed after a restart that lost its open too (made
		// and ended after the last commit: the open is not replayed):
		// what it recorded is made again, the lazy size and times.
		err := m.store.ReplayedClose(m.req(r, q.cred, 0), q.fid, mdd.CloseInfo{Write: q.lsom != nil || q.mtime != 0 || q.ctime != 0 || q.written,
			LSOM: q.lsom, Mtime: q.mtime, Ctime: q.ctime, Written: q.written})
		if err != nil {
			return m.fail(r, err)
		}
		return nil, 0
	}
	if !ok {
		return m.fail(r, fmt.Errorf("mdt: close of %v: handle %#x is not open: %w", q.fid, q.handle, syscall.EBADF))
	}
	rm, err := m.store.CloseFile(m.req(r, q.cred, 0), q.fid, mdd.CloseInfo{Write: o.flags&mdd.OpenAccMode != mdd.OpenReadOnly, LSOM: q.lsom,
		Mtime: q.mtime, Ctime: q.ctime, Written: q.written && o.flags&mdd.OpenAccMode != mdd.OpenReadOnly})
	if err != nil {
		return m.fail(r, err)
	}
	m.removed(rm)
	return nil, 0
}

// maxReaddirBody bounds a readdir reply's body below the 64 KiB a client
// expects by default.
const maxReaddirBody = 63 << 10

func (m *MDT) readdir(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	q, err := parseReaddir(r.Body)
	if err == nil {
		err = m.checkFID(q.fid)
	}
	if err != nil {
		return m.fail(r, err)
	}
	ents, next, err := m.store.Readdir(mdd.Req{Cred: q.cred}, q.fid, q.cookie, q.max)
	if err != nil {
		return m.fail(r, err)
	}
	rep := &mdsv1.ReaddirReply{Entries: make([]*mdsv1.DirEntry, 0, len(ents)), Next: next}
	size, cut := 16, -1
	for i, e := range ents {
		w := &mdsv1.DirEntry{Name: []byte(e.Name), Fid: fidTo(e.FID), Type: uint32(e.Type), Cookie: e.Cookie}
		size += proto.Size(w) + 4
		if size > maxReaddirBody && i > 0 && cut < 0 {
			cut = i
		}
		rep.Entries = append(rep.Entries, w)
	}
	if cut > 0 {
		// Cut at a cookie boundary: entries sharing a hash stay together,
		// so that the cookie of the first left out is exact.
		for cut > 0 && ents[cut].Cookie == ents[cut-1].Cookie {
			cut--
		}
		if cut > 0 {
			rep.Entries, rep.Next = rep.Entries[:cut], ents[cut].Cookie
		}
	}
	return marshal(rep)
}

func (m *MDT) statfs(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	st, err := m.store.Statfs()
	if err != nil {
		return m.fail(r, err)
	}
	return marshal(&mdsv1.StatfsReply{Files: st.Files, Ffree: st.Ffree, Blocks: st.Blocks, Bfree: st.Bfree, Bavail: st.Bavail,
		Bsize: st.Bsize, Namelen: st.Namelen})
}

func (m *MDT) getxattr(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	q, err := parseGetxattr(r.Body)
	if err == nil {
		err = m.checkFID(q.fid)
	}
	if err != nil {
		return m.fail(r, err)
	}
	req := mdd.Req{Cred: q.cred}
	if q.list {
		names, err := m.store.Listxattr(req, q.fid)
		if err != nil {
			return m.fail(r, err)
		}
		rep := &mdsv1.GetxattrReply{Names: make([][]byte, len(names))}
		for i, n := range names {
			rep.Names[i] = []byte(n)
		}
		return marshal(rep)
	}
	v, err := m.store.Getxattr(req, q.fid, q.name)
	if err != nil {
		return m.fail(r, err)
	}
	return marshal(&mdsv1.GetxattrReply{Value: v})
}

func (m *MDT) getRoot(context.Context, *ptlrpc.Request) ([]byte, int32) {
	return marshal(&mdsv1.GetRootReply{Fid: fidTo(mdd.RootFID)})
}

func (m *MDT) sync(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	if err := m.commit(); err != nil {
		return m.fail(r, err)
	}
	return nil, 0
}

func (m *MDT) getInfo(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	q, err := parseGetInfo(r.Body)
	if err == nil {
		err = m.checkFID(q.fid)
	}
	if err != nil {
		return m.fail(r, err)
	}
	// Paths reveal names the caller may have no right to search (Lustre
	// asks for CAP_DAC_READ_SEARCH).
	if !q.cred.Has(mdd.CapDacReadSearch) {
		return m.fail(r, fmt.Errorf("mdt: fid2path without CAP_DAC_READ_SEARCH: %w", syscall.EPERM))
	}
	paths, err := m.store.FID2Path(q.fid)
	if err != nil {
		return m.fail(r, err)
	}
	rep := &mdsv1.GetInfoReply{Paths: make([][]byte, len(paths))}
	for i, p := range paths {
		rep.Paths[i] = []byte(p)
	}
	return marshal(rep)
}

func (m *MDT) seqQuery(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	seq, err := m.store.AllocClientSeq()
	if err != nil {
		return m.fail(r, err)
	}
	return marshal(&mdsv1.SeqQueryReply{Seq: seq, Width: m.store.SeqWidth()})
}

func (m *MDT) fldQuery(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	seq, err := parseFLD(r.Body)
	if err != nil {
		return m.fail(r, err)
	}
	e, err := m.store.FLDLookup(seq)
	if err != nil {
		return m.fail(r, err)
	}
	return marshal(&mdsv1.FldQueryReply{Start: e.Start, End: e.End, Index: e.Index, Type: uint32(e.Type)})
}

// destroyOrphans removes the files unlinked while open before a restart
// that no client reopened.
func (m *MDT) destroyOrphans() {
	// Recovery is over: every client is recorded (OnNewClient) or evicted.
	if err := m.store.ClientsComplete(); err != nil {
		m.log.Warn("mdt: client records", "err", err)
	}
	rms, err := m.store.DestroyOrphans(m.internalReq())
	if err != nil {
		m.log.Warn("mdt: destroy orphans", "err", err)
	}
	for _, rm := range rms {
		m.removed(rm)
	}
	if len(rms) > 0 {
		m.log.Info("mdt: destroyed orphans of an earlier run", "count", len(rms))
	}
}

// swapLayouts serves MDS_SWAP_LAYOUTS under EX LAYOUT and UPDATE locks on
// both files: clients caching either layout (or size) get it again.
func (m *MDT) swapLayouts(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	var w mdsv1.SwapLayoutsRequest
	err := unmarshal(r.Body, &w)
	var cred mdd.Cred
	var a, b fid.FID
	if err == nil {
		cred, err = credFrom(w.Cred)
	}
	if err == nil {
		a, err = needFID("first", w.Fid1)
	}
	if err == nil {
		b, err = needFID("second", w.Fid2)
	}
	for _, f := range []fid.FID{a, b} {
		if err == nil {
			err = m.checkFID(f)
		}
	}
	if err != nil {
		return m.fail(r, err)
	}
	unlock, err := m.lock(ctx, objLock(a, ldlm.BitLayout|ldlm.BitUpdate), objLock(b, ldlm.BitLayout|ldlm.BitUpdate))
	if err != nil {
		return m.fail(r, err)
	}
	defer unlock()
	var dv *uint64
	if w.CheckDv1 {
		dv = &w.Dv1
	}
	if err := m.store.SwapLayouts(m.req(r, cred, w.Time), a, b, dv); err != nil {
		return m.fail(r, fmt.Errorf("mdt: swap layouts of %v and %v: %w", a, b, err))
	}
	// Not idempotent: a resend after a restart that lost the reply must
	// get it, not swap the layouts back (lfs migrate would then destroy
	// the objects the file had just been given).
	r.KeepReply()
	return nil, 0
}
