package mdc

import (
	"context"
	"fmt"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

// HSMState is a file's HSM state as the MDT keeps it: Flags (HS_* bits),
// its archive, and the data versions of the file and of its archive copy.
type HSMState struct {
	Flags           uint32
	ArchiveID       uint32
	DataVersion     uint64
	ArchivedVersion uint64
}

// HSM flags (Lustre's HS_*).
const (
	HSMExists    uint32 = 0x01
	HSMDirty     uint32 = 0x02
	HSMReleased  uint32 = 0x04
	HSMArchived  uint32 = 0x08
	HSMNoRelease uint32 = 0x10
	HSMNoArchive uint32 = 0x20
	HSMLost      uint32 = 0x40
)

// HSM actions a copytool completes (HSMProgress).
const (
	HSMActionArchive uint32 = 1
	HSMActionRestore uint32 = 2
	HSMActionRemove  uint32 = 3
)

func hsmFrom(w *mdsv1.HsmState) HSMState {
	return HSMState{Flags: w.GetFlags(), ArchiveID: w.GetArchiveId(), DataVersion: w.GetDataVersion(), ArchivedVersion: w.GetArchivedVersion()}
}

// HSMState returns f's HSM state (MDS_HSM_STATE_GET): ENOENT, EINVAL for
// a file that is not regular.
func (c *Client) HSMState(ctx context.Context, cred Cred, f fid.FID) (HSMState, error) {
	var rep mdsv1.HsmState
	if err := c.call(ctx, wire.MDSHSMStateGet, &mdsv1.HsmStateGetRequest{Cred: credTo(cred), Fid: fidTo(f)}, &rep, 0); err != nil {
		return HSMState{}, fmt.Errorf("mdc: hsm state of %v: %w", f, err)
	}
	return hsmFrom(&rep), nil
}

// HSMSetFlags sets then clears f's HSM flags and, if archiveID is not 0,
// its archive (MDS_HSM_STATE_SET); returns the new state.
func (c *Client) HSMSetFlags(ctx context.Context, cred Cred, f fid.FID, set, clear, archiveID uint32) (HSMState, error) {
	var rep mdsv1.HsmState
	req := &mdsv1.HsmStateSetRequest{Cred: credTo(cred), Fid: fidTo(f), Time: time.Now().UnixNano(), Set: set, Clear: clear, ArchiveId: archiveID}
	if err := c.call(ctx, wire.MDSHSMStateSet, req, &rep, 0); err != nil {
		return HSMState{}, fmt.Errorf("mdc: hsm set %#x clear %#x on %v: %w", set, clear, f, err)
	}
	return hsmFrom(&rep), nil
}

// HSMRelease has the MDT release f, whose size is size: EPERM (not
// archived, NORELEASE, LOST), EBUSY (dirty, open, changed since archived).
func (c *Client) HSMRelease(ctx context.Context, cred Cred, f fid.FID, size uint64) (HSMState, error) {
	// A release wants no open, this client's put-off ones included (one
	// not closed makes it EBUSY).
	_ = c.FlushCloses(ctx)
	var rep mdsv1.HsmState
	req := &mdsv1.HsmStateSetRequest{Cred: credTo(cred), Fid: fidTo(f), Time: time.Now().UnixNano(), Release: true, Size: size}
	if err := c.call(ctx, wire.MDSHSMStateSet, req, &rep, 0); err != nil {
		return HSMState{}, fmt.Errorf("mdc: hsm release of %v: %w", f, err)
	}
	return hsmFrom(&rep), nil
}

// HSMProgress reports a copytool's completion of action on f
// (MDS_HSM_PROGRESS): dv is the data version an archive copied.
func (c *Client) HSMProgress(ctx context.Context, cred Cred, f fid.FID, action, archiveID uint32, dv uint64) (HSMState, error) {
	var rep mdsv1.HsmState
	req := &mdsv1.HsmProgressRequest{Cred: credTo(cred), Fid: fidTo(f), Time: time.Now().UnixNano(), Action: action, ArchiveId: archiveID, DataVersion: dv}
	if err := c.call(ctx, wire.MDSHSMProgress, req, &rep, 0); err != nil {
		return HSMState{}, fmt.Errorf("mdc: hsm progress %d on %v: %w", action, f, err)
	}
	return hsmFrom(&rep), nil
}
