package mdc

import (
	"context"
	"fmt"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

// ChangelogRead returns up to max changelog records from index from on,
// each in the MDT's encoding (mdd.DecodeChangelogRecord), and the index of
// the last record written (LLOG_ORIGIN_HANDLE_NEXT_BLOCK). EPERM without
// CapSysAdmin.
func (c *Client) ChangelogRead(ctx context.Context, cred Cred, from uint64, max int) ([][]byte, uint64, error) {
	var rep mdsv1.ChangelogReadReply
	if err := c.call(ctx, wire.LLOGNextBlock, &mdsv1.ChangelogReadRequest{Cred: credTo(cred), From: from, Max: uint32(max)}, &rep, 0); err != nil {
		return nil, 0, fmt.Errorf("mdc: changelog read from %d: %w", from, err)
	}
	return rep.Records, rep.Last, nil
}

// ChangelogClear tells the MDT that changelog user id has consumed every
// record up to endrec (0: all there are), so they can be purged once every
// user has (MDS_CHANGELOG_CLEAR). EPERM without CapSysAdmin.
func (c *Client) ChangelogClear(ctx context.Context, cred Cred, id uint32, endrec uint64) error {
	if err := c.call(ctx, wire.MDSChangelogClear, &mdsv1.ChangelogClearRequest{Cred: credTo(cred), User: id, Endrec: endrec}, nil, 0); err != nil {
		return fmt.Errorf("mdc: changelog clear of cl%d to %d: %w", id, endrec, err)
	}
	return nil
}
