package mdt

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/mds/mdd"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

// The MDT's intent policy (Lustre's mdt_intent_policy): an LDLM_ENQUEUE
// carrying an IntentRequest runs a lookup, getattr, open or create and
// returns, in one RPC, the answer and a PR lock on the file found, taken
// before its attributes are read so that what the client caches under the
// lock is current. A lookup that finds nothing returns a PR UPDATE lock
// on the directory instead: the negative entry stays valid until an entry
// is made there (a create's CW UPDATE lock calls it back).

// Bits the intents grant (Lustre's MDS_INODELOCK_* choices).
const (
	lookupBits  = ldlm.BitLookup | ldlm.BitPerm
	getattrBits = ldlm.BitLookup | ldlm.BitUpdate | ldlm.BitPerm | ldlm.BitLayout
	openBits    = ldlm.BitLookup
)

// intentRetries bounds the attempts of a lookup whose name changed
// between the lookup and the lock.
const intentRetries = 8

func skip(err error) ldlm.IntentResult { return ldlm.IntentResult{Skip: true, Status: errno(err)} }

func (m *MDT) intent(ctx context.Context, r *ptlrpc.Request, _ ldlm.Request, body []byte) ldlm.IntentResult {
	q, err := parseIntent(body)
	m.carriedCloses(r, q.closes) // (even if the rest is refused)
	if err != nil {
		m.fail(r, err)
		return skip(err)
	}
	for _, f := range []fid.FID{q.parent, q.fid} {
		if !f.IsZero() {
			if err := m.checkFID(f); err != nil {
				return skip(err)
			}
		}
	}
	switch {
	case q.op&ItOpen != 0:
		m.countOp(r, "open")
		return m.intentOpen(ctx, r, &q)
	case q.op&ItCreat != 0:
		m.countOp(r, "mknod")
		return m.intentCreate(ctx, r, &q)
	default:
		m.countOp(r, "getattr")
		return m.intentLookup(ctx, r, &q)
	}
}

// granted builds the result of an intent that holds lock l.
func granted(l ldlm.Lock, rep *mdsv1.IntentReply, status int32) ldlm.IntentResult {
	b, err := ptlrpc.Marshal(rep)
	if err != nil {
		return ldlm.IntentResult{Skip: true, Status: -int32(syscall.EIO)}
	}
	return ldlm.IntentResult{Granted: &l, Reply: b, Status: status}
}

func noLock(rep *mdsv1.IntentReply) ldlm.IntentResult {
	b, err := ptlrpc.Marshal(rep)
	if err != nil {
		return ldlm.IntentResult{Skip: true, Status: -int32(syscall.EIO)}
	}
	return ldlm.IntentResult{Skip: true, Reply: b}
}

// lockFor takes the lock an intent grants on f for the requesting client.
func (m *MDT) lockFor(ctx context.Context, r *ptlrpc.Request, f fid.FID, bits ldlm.Bits) (ldlm.Lock, error) {
	return m.lockd.IntentLock(ctx, r, ldlm.Request{Resource: objRes(f), Mode: ldlm.PR, Policy: ldlm.Policy{Bits: bits}}, m.lockTimeout())
}

// intentLookup serves IT_LOOKUP and IT_GETATTR, by name or by FID.
func (m *MDT) intentLookup(ctx context.Context, r *ptlrpc.Request, q *intentReq) ldlm.IntentResult {
	bits := lookupBits
	if q.op&ItGetattr != 0 {
		bits = getattrBits
	}
	req := mdd.Req{Cred: q.cred}
	if q.parent.IsZero() {
		if _, err := m.store.Getattr(q.fid); err != nil {
			return skip(err)
		}
		l, err := m.lockFor(ctx, r, q.fid, bits)
		if err != nil {
			return skip(err)
		}
		rep, err := m.attrReply(q.fid, q.op&ItGetattr != 0)
		if err != nil {
			m.lockd.CancelIntentLock(r, l)
			return skip(err)
		}
		return granted(l, rep, 0)
	}
	for range intentRetries {
		a, err := m.store.Lookup(req, q.parent, q.name)
		if errors.Is(err, syscall.ENOENT) {
			if _, perr := m.store.Getattr(q.parent); perr != nil {
				return skip(perr)
			}
			// A negative entry, valid under the directory's UPDATE lock:
			// look again under it.
			l, err := m.lockFor(ctx, r, q.parent, ldlm.BitUpdate)
			if err != nil {
				return skip(err)
			}
			if _, err := m.store.Lookup(req, q.parent, q.name); !errors.Is(err, syscall.ENOENT) {
				m.lockd.CancelIntentLock(r, l)
				continue // made meanwhile
			}
			return granted(l, &mdsv1.IntentReply{Negative: true}, -int32(syscall.ENOENT))
		}
		if err != nil {
			return skip(err)
		}
		l, err := m.lockFor(ctx, r, a.FID, bits)
		if err != nil {
			return skip(err)
		}
		// The name must still lead to the file now locked: a rename or
		// unlink that ran before the lock was granted would make the
		// client cache a stale entry.
		if b, err := m.store.Lookup(req, q.parent, q.name); err != nil || b.FID != a.FID {
			m.lockd.CancelIntentLock(r, l)
			continue
		}
		rep, err := m.attrReply(a.FID, q.op&ItGetattr != 0)
		if err != nil {
			m.lockd.CancelIntentLock(r, l)
			return skip(err)
		}
		return granted(l, rep, 0)
	}
	return skip(fmt.Errorf("mdt: lookup of %q in %v: the name kept changing: %w", clamp(q.name), q.parent, syscall.ESTALE))
}

// attrReply reads f's attributes (and a regular file's layout) for an
// intent reply, under the lock just granted.
func (m *MDT) attrReply(f fid.FID, withLayout bool) (*mdsv1.IntentReply, error) {
	a, err := m.store.Getattr(f)
	if err != nil {
		return nil, err
	}
	rep := &mdsv1.IntentReply{Attr: attrTo(a)}
	if withLayout && a.Mode&sIFMT == sIFREG {
		if rep.Layout, err = m.layoutBytes(f); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// intentOpen serves IT_OPEN (with IT_CREAT, O_CREAT): the open, then a
// LOOKUP lock on the file (LOOKUP, UPDATE and PERM on one it made) with
// its attributes read under it.
func (m *MDT) intentOpen(ctx context.Context, r *ptlrpc.Request, q *intentReq) ldlm.IntentResult {
	// The layout is read once the LAYOUT lock is granted: read before,
	// it may have been swapped (lfs migrate, HSM release) meanwhile, and
	// the client would hold a lock on the new layout and use the old one,
	// whose objects are destroyed.
	q.open.layoutUnderLock = true
	res, err := m.open(ctx, r, q.cred, q.time, q.open)
	if err != nil {
		return skip(err)
	}
	rep := &mdsv1.IntentReply{OpenHandle: res.handle, Created: res.created, Released: res.released}
	reg := res.attr.Mode&sIFMT == sIFREG
	unlocked := func(a mdd.Attr) ldlm.IntentResult {
		// The file is open all the same: answered without a lock, with
		// the layout as it is now (the client reads it again, under a
		// lock, before its first I/O).
		rep.Attr, rep.Layout = attrTo(a), res.layout // (a new file's, or nil)
		if reg {
			if lb, err := m.layoutBytes(a.FID); err == nil {
				rep.Layout = lb
			}
		}
		return noLock(rep)
	}
	bits := openBits
	switch {
	case tmpfile(q.open.flags):
		bits = 0 // no name to cover
	case res.created:
		// A file this open made: nobody else can hold a lock on it yet,
		// so its attributes come with the lock, as a mknod's do, and a
		// stat that follows needs no getattr.
		bits = getattrBits
	}
	if reg {
		bits |= ldlm.BitLayout
	}
	l, err := m.lockFor(ctx, r, res.attr.FID, bits)
	if err != nil {
		return unlocked(res.attr)
	}
	a, err := m.store.Getattr(res.attr.FID)
	if err != nil {
		m.lockd.CancelIntentLock(r, l)
		return unlocked(res.attr)
	}
	rep.Attr = attrTo(a)
	if reg {
		if rep.Layout, err = m.layoutBytes(a.FID); err != nil {
			m.lockd.CancelIntentLock(r, l)
			return unlocked(a)
		}
	}
	if !q.open.parent.IsZero() && !tmpfile(q.open.flags) {
		// Give the LOOKUP lock only if the name still leads to the file.
		if b, err := m.store.Lookup(mdd.Req{Cred: q.cred}, q.open.parent, q.open.name); err != nil || b.FID != a.FID {
			m.lockd.CancelIntentLock(r, l)
			return unlocked(a)
		}
	}
	return granted(l, rep, 0)
}

// intentCreate serves IT_CREAT alone: a create (a regular file unless
// mode says otherwise) and a lock on the new file.
func (m *MDT) intentCreate(ctx context.Context, r *ptlrpc.Request, q *intentReq) ldlm.IntentResult {
	mode := q.mode
	if mode&sIFMT == 0 {
		mode |= sIFREG
	}
	o := &createOp{parent: q.parent, name: q.name, fid: q.newFID, mode: mode, layout: q.layout, delay: q.delay}
	release, err := m.lock(ctx, dirLock(o.parent), nameLock(o.parent, o.name))
	if err != nil {
		return skip(err)
	}
	a, lay, err := m.create(ctx, m.req(r, q.cred, q.time), o)
	release()
	if err != nil {
		return skip(err)
	}
	rep := &mdsv1.IntentReply{Created: true}
	if lay != nil {
		rep.Layout, _ = lay.Marshal()
	}
	l, err := m.lockFor(ctx, r, a.FID, getattrBits)
	if err != nil {
		rep.Attr = attrTo(a)
		return noLock(rep)
	}
	if a, err = m.store.Getattr(a.FID); err != nil {
		m.lockd.CancelIntentLock(r, l)
		return skip(err)
	}
	rep.Attr = attrTo(a)
	return granted(l, rep, 0)
}
