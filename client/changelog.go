package client

import (
	"context"
	"fmt"

	"github.com/nacrefs/nacre/mds/mdd"
)

// ChangelogRecord is one namespace change the MDT recorded.
type ChangelogRecord = mdd.ChangelogRecord

// ChangelogRead returns up to max changelog records of the MDT from index
// from on, and the index of the last record written (root, or
// CapSysAdmin).
func (fs *FS) ChangelogRead(ctx context.Context, cred Cred, from uint64, max int) ([]ChangelogRecord, uint64, error) {
	ctx, cancel := fs.op(ctx)
	defer cancel()
	raw, last, err := fs.mdc.ChangelogRead(ctx, cred, from, max)
	if err != nil {
		return nil, 0, err
	}
	out := make([]ChangelogRecord, len(raw))
	for i, b := range raw {
		if out[i], err = mdd.DecodeChangelogRecord(b); err != nil {
			return nil, 0, fmt.Errorf("changelog record from the MDT: %w", err)
		}
	}
	return out, last, nil
}

// ChangelogClear records that changelog user id (clID) has consumed every
// record up to endrec (0: all).
func (fs *FS) ChangelogClear(ctx context.Context, cred Cred, id uint32, endrec uint64) error {
	ctx, cancel := fs.op(ctx)
	defer cancel()
	return fs.mdc.ChangelogClear(ctx, cred, id, endrec)
}
