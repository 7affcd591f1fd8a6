package osdfile

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/oss/osd"
)

// replay redoes the journal's records of generation h.gen on the object
// files, idempotently, and returns the LSN after the last record and the last
// committed transno as of it.
//
// A step is skipped when the file already has it: the lma attribute of each
// file carries the LSN of the last record applied to it, and every change of
// a record reaches the file before the record's lma does. Two rules make the
// redo safe around destroy: steps on a FID before its last Destroy are dead
// (the object they changed is gone, and the file at the path may be a new
// one), and that Destroy is skipped when a Create of the FID follows it in
// the journal (a Create waits until an earlier unlink is applied, so the file
// there is the new object's).
func (d *Device) replay(ctx context.Context, h jheader, area []byte) (next, bound uint64, err error) {
	var recs []jrecord
	next, bound = h.startLSN, h.lastCommitted
	for off := 0; off < len(area); {
		rec, n, err := decodeRecord(area[off:], h.gen, next)
		if errors.Is(err, errJournalEnd) {
			break
		}
		if err != nil {
			return 0, 0, err
		}
		recs = append(recs, rec)
		off += n
		next++
		bound = max(bound, rec.bound)
	}
	if len(recs) == 0 {
		return next, bound, nil
	}
	d.log.Info("osd-file: replaying journal", "records", len(recs), "first_lsn", h.startLSN, "generation", h.gen)

	type pos struct{ r, s int }
	before := func(a, b pos) bool { return a.r < b.r || a.r == b.r && a.s < b.s }
	lastDestroy := map[fid.FID]pos{}
	for r := range recs {
		for s, st := range recs[r].steps {
			if st.op == opDestroy {
				lastDestroy[st.fid] = pos{r, s}
			}
		}
	}
	recreated := map[fid.FID]bool{}
	for r := range recs {
		for s, st := range recs[r].steps {
			if ld, ok := lastDestroy[st.fid]; ok && st.op == opCreate && before(ld, pos{r, s}) {
				recreated[st.fid] = true
			}
		}
	}
	applied := map[fid.FID]uint64{} // LSN in each file's lma
	lma := make([]byte, lmaSize)
	for r := range recs {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		rec := &recs[r]
		for s := range rec.steps {
			st := &rec.steps[s]
			if ld, ok := lastDestroy[st.fid]; ok && before(pos{r, s}, ld) {
				continue
			}
			path := objPath(d.dir, st.fid)
			if st.op == opDestroy {
				if !recreated[st.fid] {
					if err := unix.Unlink(path); err != nil && !errors.Is(err, unix.ENOENT) {
						return 0, 0, fmt.Errorf("replay record %d: destroy %v: %w", rec.lsn, st.fid, err)
					}
				}
				delete(applied, st.fid)
				continue
			}
			if err := d.ensureDir(st.fid); err != nil {
				return 0, 0, fmt.Errorf("replay record %d: directory of %v: %w", rec.lsn, st.fid, err)
			}
			fd, err := openFile(path, unix.O_CREAT)
			if err != nil {
				return 0, 0, fmt.Errorf("replay record %d: open %v: %w", rec.lsn, st.fid, err)
			}
			err = d.replayStep(fd, rec.lsn, st, applied, lma)
			unix.Close(fd)
			if err != nil {
				return 0, 0, fmt.Errorf("replay record %d: %v (%s): %w", rec.lsn, st.fid, path, err)
			}
		}
	}
	return next, bound, nil
}

func (d *Device) replayStep(fd int, lsn uint64, st *jstep, applied map[fid.FID]uint64, lma []byte) error {
	have, ok := applied[st.fid]
	if !ok {
		l, _, err := readLMA(fd, d.xattr, st.fid)
		switch {
		case err == nil:
			have = l
		case errors.Is(err, unix.ENODATA):
		case errors.Is(err, osd.ErrCorrupt):
			d.log.Warn("osd-file: replay overwrites corrupt attributes", "fid", st.fid, "err", err)
		default:
			return err
		}
		applied[st.fid] = have
	}
	if have >= lsn {
		return nil
	}
	switch st.op {
	case opCreate:
		// The file exists now; it keeps the data written into it.
	case opTruncate:
		return ignoreEINTR(func() error { return unix.Ftruncate(fd, int64(st.a)) })
	case opPunch:
		return punchFile(fd, st.a, st.b)
	case opRecord:
		return pwriteFull(fd, st.data, int64(st.a))
	case opAttr:
		if err := ignoreEINTR(func() error { return unix.Fsetxattr(fd, d.xattr, encodeLMA(lma, st.fid, lsn, &st.attr), 0) }); err != nil {
			return err
		}
		applied[st.fid] = lsn
	}
	return nil
}
