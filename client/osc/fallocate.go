package osc

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// fallocate(2) of an object's range (Lustre's osc_fallocate_base): the
// blocks are reserved with OST_FALLOCATE, a hole punched with OST_PUNCH,
// each under a write lock on the range.

// Allocate reserves the object's blocks in [start, end) on the OST, as
// fallocate(2) mode 0: bytes not written yet read as zeros, and the object
// grows to end unless keepSize. The lock must be a write lock covering the
// range. Cached pages stay as they are: their bytes are the object's.
func (l *Lock) Allocate(ctx context.Context, start, end uint64, keepSize bool) error {
	o := l.obj
	if err := l.checkRange("allocate", start, end); err != nil {
		return err
	}
	oa, transno, err := o.c.fallocate(ctx, o.fid, start, end, keepSize)
	if err != nil {
		return err
	}
	o.noteWritten(oa, transno)
	o.mu.Lock()
	if !keepSize {
		o.mu.sizeSeen = max(o.mu.sizeSeen, end)
	}
	o.mu.mtime = time.Now().UnixNano()
	o.mu.Unlock()
	return nil
}

// PunchHole frees the object's bytes in [start, end) on the OST
// (fallocate PUNCH_HOLE|KEEP_SIZE): they read as zeros and the size stays.
// The lock must be a write lock covering the range. The cached pages of
// the range go first, dirty ones unsent, except that what is dirty of the
// two pages the range covers only in part goes to the OST before (their
// other bytes are the object's), and what the OST has of the range and
// not committed is committed (an OST restart must not write it again
// over the hole); the object's writes and reads ahead wait until the OST
// has punched, as for a truncate.
func (l *Lock) PunchHole(ctx context.Context, start, end uint64) error {
	o := l.obj
	if err := l.checkRange("punch", start, end); err != nil {
		return err
	}
	defer o.cutting()()
	first, last := start/PageSize, (end-1)/PageSize
	if start%PageSize != 0 {
		if err := o.flushPages(ctx, first, first); err != nil {
			return err
		}
	}
	if end%PageSize != 0 {
		if err := o.flushPages(ctx, last, last); err != nil {
			return err
		}
	}
	// The range's last dirty page may hold the object's end, which the
	// OST has not seen: dropped unsent, it would take the size with it
	// (the OST keeps its own size, short of what this client wrote).
	if hi, ok := o.lastDirtyIn(first, last); ok {
		if err := o.flushPages(ctx, hi, hi); err != nil {
			return err
		}
	}
	if o.hasUnstable(first, last) {
		// Written and not committed, those pages would be written again
		// after an OST restart, and over the hole if it were replayed
		// first: they must be on disk before it is punched.
		if err := o.c.syncOST(ctx, o.fid); err != nil {
			return err
		}
		o.c.releaseCommitted()
	}
	if err := o.discardPages(ctx, first, last); err != nil {
		return err
	}
	oa, transno, err := o.c.punch(ctx, o.fid, start, end)
	if err != nil {
		return err
	}
	o.mu.Lock()
	if oa.GetValid()&uint32(ostv1.AttrValid_ATTR_VALID_BLOCKS) != 0 {
		o.mu.blocks, o.mu.cutTransno = oa.Blocks, transno
	}
	o.mu.mtime = time.Now().UnixNano()
	o.mu.Unlock()
	return nil
}

// checkRange checks an fallocate range against the object's limit and
// the lock.
func (l *Lock) checkRange(op string, start, end uint64) error {
	o := l.obj
	switch {
	case start >= end:
		return o.errorf("%s [%d,%d): %w", op, start, end, syscall.EINVAL)
	case end > MaxObjectSize:
		return o.errorf("%s [%d,%d): %w", op, start, end, syscall.EFBIG)
	case !l.covers(true, start, end):
		return o.errorf("%s [%d,%d) under %v %v: %w", op, start, end, l.info.mode, l.info.ext, ErrLockRange)
	}
	return nil
}

// discardPages takes the pages with index in [first, last] out of the
// cache once none of them is being filled or written: dirty ones with
// their grant given back, unsent.
func (o *Object) discardPages(ctx context.Context, first, last uint64) error {
	o.mu.Lock()
	ps, err := o.idlePagesLocked(ctx, first, last)
	if err != nil {
		o.mu.Unlock()
		return err
	}
	uncharged := o.removePagesLocked(ps)
	o.mu.Unlock()
	o.c.uncharge(uncharged)
	return nil
}

// fallocate sends OST_FALLOCATE for [start, end) of f and returns the
// object's attributes after it and the request's transno.
func (c *Client) fallocate(ctx context.Context, f fid.FID, start, end uint64, keepSize bool) (*ostv1.Attr, uint64, error) {
	now := time.Now().UnixNano()
	return c.objectRPC(ctx, wire.OSTFallocate, &ostv1.FallocateRequest{Fid: fidToWire(f), Start: start, End: end, KeepSize: keepSize, Mtime: now, Ctime: now},
		fmt.Sprintf("fallocate %v [%d,%d)", f, start, end))
}
