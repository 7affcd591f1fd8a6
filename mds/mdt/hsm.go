package mdt

import (
	"context"
	"fmt"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/mds/mdd"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

// The MDT's side of HSM (Lustre's mdt_hsm.c): a file's HSM state lives in
// the store; the coordinator (services/hsm) and its copytools change it
// through these requests. Release and restore completion change the
// layout, so they hold an EX LAYOUT lock: clients caching the old layout
// are called back first.

type hsmGetReq struct {
	cred mdd.Cred
	fid  fid.FID
}

func parseHSMGet(b []byte) (hsmGetReq, error) {
	var w mdsv1.HsmStateGetRequest
	if err := unmarshal(b, &w); err != nil {
		return hsmGetReq{}, err
	}
	c, err := credFrom(w.Cred)
	if err != nil {
		return hsmGetReq{}, err
	}
	f, err := needFID("file", w.Fid)
	return hsmGetReq{cred: c, fid: f}, err
}

type hsmSetReq struct {
	cred             mdd.Cred
	fid              fid.FID
	time             int64
	set, clear, arch uint32
	release          bool
	size             uint64
}

func parseHSMSet(b []byte) (hsmSetReq, error) {
	var w mdsv1.HsmStateSetRequest
	if err := unmarshal(b, &w); err != nil {
		return hsmSetReq{}, err
	}
	c, err := credFrom(w.Cred)
	if err != nil {
		return hsmSetReq{}, err
	}
	q := hsmSetReq{cred: c, time: w.Time, set: w.Set, clear: w.Clear, arch: w.ArchiveId, release: w.Release, size: w.Size}
	if q.fid, err = needFID("file", w.Fid); err != nil {
		return q, err
	}
	if q.release && (q.set != 0 || q.clear != 0) {
		return q, bad("hsm release with flags to set %#x or clear %#x", q.set, q.clear)
	}
	return q, nil
}

type hsmProgressReq struct {
	cred         mdd.Cred
	fid          fid.FID
	time         int64
	action, arch uint32
	dv           uint64
}

func parseHSMProgress(b []byte) (hsmProgressReq, error) {
	var w mdsv1.HsmProgressRequest
	if err := unmarshal(b, &w); err != nil {
		return hsmProgressReq{}, err
	}
	c, err := credFrom(w.Cred)
	if err != nil {
		return hsmProgressReq{}, err
	}
	q := hsmProgressReq{cred: c, time: w.Time, action: w.Action, arch: w.ArchiveId, dv: w.DataVersion}
	if q.fid, err = needFID("file", w.Fid); err != nil {
		return q, err
	}
	if q.action < mdd.HSMActionArchive || q.action > mdd.HSMActionRemove {
		return q, bad("hsm progress action %d", q.action)
	}
	return q, nil
}

func hsmTo(h mdd.HSM) *mdsv1.HsmState {
	return &mdsv1.HsmState{Flags: h.Flags, ArchiveId: h.ArchiveID, DataVersion: h.DataVersion, ArchivedVersion: h.ArchivedVersion}
}

// hsmStateGet serves MDS_HSM_STATE_GET.
func (m *MDT) hsmStateGet(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	q, err := parseHSMGet(r.Body)
	if err == nil {
		err = m.checkFID(q.fid)
	}
	if err != nil {
		return m.fail(r, err)
	}
	h, err := m.store.HSMState(q.fid)
	if err != nil {
		return m.fail(r, err)
	}
	return marshal(hsmTo(h))
}

// hsmStateSet serves MDS_HSM_STATE_SET: flags, or a release.
func (m *MDT) hsmStateSet(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	q, err := parseHSMSet(r.Body)
	if err == nil {
		err = m.checkFID(q.fid)
	}
	if err != nil {
		return m.fail(r, err)
	}
	req := m.req(r, q.cred, q.time)
	var h mdd.HSM
	if q.release {
		h, err = m.release(ctx, req, q.fid, q.size)
	} else {
		h, err = m.store.HSMSetFlags(req, q.fid, q.set, q.clear, q.arch)
	}
	if err != nil {
		return m.fail(r, err)
	}
	r.KeepReply() // (a release resent after a restart would fail: released already)
	return marshal(hsmTo(h))
}

// release frees f's objects under an EX LAYOUT lock (and UPDATE: the size
// cached by clients now comes from the MDT).
func (m *MDT) release(ctx context.Context, req mdd.Req, f fid.FID, size uint64) (mdd.HSM, error) {
	unlock, err := m.lock(ctx, objLock(f, ldlm.BitLayout|ldlm.BitUpdate))
	if err != nil {
		return mdd.HSM{}, err
	}
	defer unlock()
	h, destroyed, err := m.store.HSMRelease(req, f, size)
	if err != nil {
		return mdd.HSM{}, fmt.Errorf("mdt: hsm release of %v: %w", f, err)
	}
	if destroyed {
		m.kickDestroy()
	}
	return h, nil
}

// hsmProgress serves MDS_HSM_PROGRESS: a copytool's completion.
func (m *MDT) hsmProgress(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	q, err := parseHSMProgress(r.Body)
	if err == nil {
		err = m.checkFID(q.fid)
	}
	if err != nil {
		return m.fail(r, err)
	}
	if q.action == mdd.HSMActionRestore {
		// Clients that cached the released layout must fetch the new one.
		unlock, err := m.lock(ctx, objLock(q.fid, ldlm.BitLayout|ldlm.BitUpdate))
		if err != nil {
			return m.fail(r, err)
		}
		defer unlock()
	}
	h, err := m.store.HSMProgress(m.req(r, q.cred, q.time), q.fid, q.action, q.arch, q.dv)
	if err != nil {
		return m.fail(r, fmt.Errorf("mdt: hsm progress %d on %v: %w", q.action, q.fid, err))
	}
	// A restore's completion resent after a restart would fail (not
	// released any more): it gets the reply kept.
	r.KeepReply()
	return marshal(hsmTo(h))
}
