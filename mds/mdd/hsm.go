package mdd

import (
	"errors"
	"syscall"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nacrefs/nacre/internal/fid"
)

// HSM state changes. Each runs in one transaction under the store's lock:
// read the record, check, write it back (with the layout and the destroy
// log for a release), so that a data change and an HSM change never
// interleave. The rules are Lustre's (mdt_hsm.c, mdt_hsm_cdt_*):
//
//   - a data change (close after writes, truncate) bumps DataVersion and,
//     on an archived file, sets DIRTY;
//   - an archive completes with the DataVersion the copy was read at: the
//     file becomes EXISTS|ARCHIVED in that archive, and DIRTY unless the
//     data did not change since;
//   - release needs ARCHIVED, not DIRTY, not NORELEASE, not LOST, no open,
//     and the archive copy's version equal to the file's (EBUSY/EPERM);
//   - restore completion clears RELEASED (and DIRTY: the data are the
//     archive's again).

// HSM action kinds a copytool completes (HsmProgress).
const (
	HSMActionArchive uint32 = 1
	HSMActionRestore uint32 = 2
	HSMActionRemove  uint32 = 3
)

// hsmUserFlags are the flags lfs hsm_set/hsm_clear may change; RELEASED
// only changes through release and restore.
const hsmUserFlags = HSMExists | HSMDirty | HSMArchived | HSMNoRelease | HSMNoArchive | HSMLost

// hsmOf reads f's HSM record in t (zero if none).
func (t *tx) hsmOf(f fid.FID) (HSM, error) {
	v, err := t.s.get(fidKey(pfxHSM, f))
	if errors.Is(err, pebble.ErrNotFound) {
		return HSM{}, nil
	}
	if err != nil {
		return HSM{}, ioError(err, "hsm of %v", f)
	}
	h, err := decodeHSM(v)
	return h, ioError(err, "hsm of %v", f)
}

// dataChanged bumps f's data version and marks an archived file dirty.
func (t *tx) dataChanged(f fid.FID) error {
	h, err := t.hsmOf(f)
	if err != nil {
		return err
	}
	h.DataVersion++
	if h.Flags&HSMArchived != 0 {
		h.Flags |= HSMDirty
	}
	t.b.Set(fidKey(pfxHSM, f), h.marshal(), nil)
	return nil
}

// hsmFile returns f's inode if it is a regular file the caller may change
// the HSM state of: ENOENT, EINVAL (not a regular file: Lustre's hsm
// requests refuse directories), EPERM (neither owner nor CapFowner).
func (t *tx) hsmFile(f fid.FID) (*inode, error) {
	n, err := t.inode(f)
	if err != nil {
		return nil, err
	}
	if n.Mode&S_IFMT != S_IFREG {
		return nil, fail(syscall.EINVAL, "hsm on %v: not a regular file", f)
	}
	if !t.owner(n) {
		return nil, fail(syscall.EPERM, "hsm on %v by uid %d: not the owner", f, t.r.Cred.UID)
	}
	return n, nil
}

// HSMState returns f's HSM state like GetHSM, but EINVAL for a file that
// is not regular (the MDT's HSM_STATE_GET).
func (s *Store) HSMState(f fid.FID) (HSM, error) {
	t := s.read(&Req{})
	defer t.done()
	n, err := t.inode(f)
	if err != nil {
		return HSM{}, err
	}
	if n.Mode&S_IFMT != S_IFREG {
		return HSM{}, fail(syscall.EINVAL, "hsm state of %v: not a regular file", f)
	}
	return t.hsmOf(f)
}

// HSMSetFlags sets then clears flags of f (lfs hsm_set, hsm_clear) and,
// when archiveID is not 0, sets its archive. EINVAL for unknown flags,
// for RELEASED (only release and restore change it) and for ARCHIVED,
// DIRTY or RELEASED without EXISTS; the checks of hsmFile. Returns the new
// state.
func (s *Store) HSMSetFlags(r Req, f fid.FID, set, clear, archiveID uint32) (HSM, error) {
	if (set|clear)&^hsmUserFlags != 0 {
		return HSM{}, fail(syscall.EINVAL, "hsm flags set %#x clear %#x", set, clear)
	}
	t := s.begin(&r)
	var h HSM
	_, err := t.hsmFile(f)
	if err == nil {
		h, err = t.hsmOf(f)
	}
	if err == nil {
		h.Flags = (h.Flags | set) &^ clear
		if archiveID != 0 {
			h.ArchiveID = archiveID
		}
		// Lustre's hsm_state_set rules: ARCHIVED, DIRTY and RELEASED
		// need EXISTS.
		if h.Flags&(HSMArchived|HSMDirty|HSMReleased) != 0 && h.Flags&HSMExists == 0 {
			err = fail(syscall.EINVAL, "hsm state of %v: %#x without EXISTS", f, h.Flags)
		}
	}
	if err == nil {
		t.b.Set(fidKey(pfxHSM, f), h.marshal(), nil)
		t.changelog(ChangelogRecord{Type: CLHSM, TFID: f})
	}
	if err = t.finish(err); err != nil {
		return HSM{}, err
	}
	return h, nil
}

// HSMRelease releases f: its layout loses its objects (they go to the
// destroy log, Removal-like: the caller kicks the destroy worker), its
// LSOM becomes size (strict), and it becomes RELEASED. Outcomes: the new
// state; an already released file is left as it is (no error); EPERM if
// f is not archived, is NORELEASE or LOST; EBUSY if it is dirty, its
// data changed since the archive copy was made, or it is open; the checks
// of hsmFile. Nothing changes on error.
func (s *Store) HSMRelease(r Req, f fid.FID, size uint64) (HSM, bool, error) {
	t := s.begin(&r)
	h, destroyed, err := t.hsmRelease(f, size)
	if err = t.finish(err); err != nil {
		return HSM{}, false, err
	}
	return h, destroyed, nil
}

func (t *tx) hsmRelease(f fid.FID, size uint64) (HSM, bool, error) {
	n, err := t.hsmFile(f)
	if err != nil {
		return HSM{}, false, err
	}
	h, err := t.hsmOf(f)
	if err != nil {
		return HSM{}, false, err
	}
	switch {
	case h.Flags&HSMReleased != 0:
		return h, false, nil
	case h.Flags&HSMArchived == 0:
		return HSM{}, false, fail(syscall.EPERM, "release %v: not archived", f)
	case h.Flags&(HSMNoRelease|HSMLost) != 0:
		return HSM{}, false, fail(syscall.EPERM, "release %v: flags %#x forbid it", f, h.Flags)
	case h.Flags&HSMDirty != 0 || h.ArchivedVersion != h.DataVersion:
		return HSM{}, false, fail(syscall.EBUSY, "release %v: dirty (data version %d, archived %d)", f, h.DataVersion, h.ArchivedVersion)
	case !t.r.Replay && t.s.mayBeOpenLocked(f, 0):
		// Not for a replay: the release was made, and checked, before the
		// restart; in recovery the open counts lack the opens not
		// replayed yet (mayBeOpenLocked), and a replayed release refused
		// for them was lost.
		return HSM{}, false, fail(syscall.EBUSY, "release %v: open", f)
	}
	l, err := t.layoutOf(f)
	if err != nil {
		return HSM{}, false, err
	}
	destroyed := false
	if l != nil && hasObjects(l) {
		t.destroys = append(t.destroys, DestroyRecord{FID: f, Layout: *l})
		rel := l.Clone()
		rel.Gen++
		for i := range rel.Components {
			c := &rel.Components[i]
			if len(c.Objects) > 0 {
				c.StripeCount = int32(len(c.Objects))
			}
			c.Objects = nil
		}
		b, err := rel.Marshal()
		if err != nil {
			return HSM{}, false, fail(syscall.EINVAL, "release %v: layout: %v", f, err)
		}
		t.b.Set(fidKey(pfxLayout, f), b, nil)
		destroyed = true
	}
	t.b.Set(fidKey(pfxLSOM, f), LSOM{Flags: SOMStrict, Size: size, Blocks: (size + 511) / 512}.marshal(), nil)
	h.Flags |= HSMReleased
	t.b.Set(fidKey(pfxHSM, f), h.marshal(), nil)
	n.Ctime = t.now
	t.touch(n)
	t.changelog(ChangelogRecord{Type: CLHSM, TFID: f})
	return h, destroyed, nil
}

// HSMProgress records a copytool's completion of action on f:
//
//   - HSMActionArchive: EXISTS|ARCHIVED in archiveID, ArchivedVersion dv;
//     DIRTY unless dv is the file's DataVersion; EPERM on NOARCHIVE;
//     ESTALE for dv older than the ArchivedVersion recorded;
//   - HSMActionRestore: RELEASED and DIRTY cleared, DataVersion back to
//     the archive's (the copytool's writes were the archive's data);
//     EINVAL if f is not released or its layout has no objects;
//   - HSMActionRemove: EXISTS, ARCHIVED and DIRTY cleared; EBUSY on a
//     released file (its only copy).
//
// Only CapFowner callers (copytools run as root) may report: EPERM. The
// checks of hsmFile; EINVAL for an unknown action. Returns the new state.
func (s *Store) HSMProgress(r Req, f fid.FID, action, archiveID uint32, dv uint64) (HSM, error) {
	if !r.Cred.Has(CapFowner) {
		return HSM{}, fail(syscall.EPERM, "hsm progress on %v by uid %d", f, r.Cred.UID)
	}
	t := s.begin(&r)
	h, err := t.progress(f, action, archiveID, dv)
	if err = t.finish(err); err != nil {
		return HSM{}, err
	}
	return h, nil
}

func (t *tx) progress(f fid.FID, action, archiveID uint32, dv uint64) (HSM, error) {
	if _, err := t.hsmFile(f); err != nil {
		return HSM{}, err
	}
	h, err := t.hsmOf(f)
	if err != nil {
		return HSM{}, err
	}
	switch action {
	case HSMActionArchive:
		if h.Flags&HSMNoArchive != 0 {
			return HSM{}, fail(syscall.EPERM, "archive of %v: NOARCHIVE", f)
		}
		if archiveID == 0 {
			return HSM{}, fail(syscall.EINVAL, "archive of %v: archive id 0", f)
		}
		if h.Flags&HSMArchived != 0 && dv < h.ArchivedVersion {
			// A late report of an older copy (an attempt canceled and
			// then overtaken) does not pass for the current one.
			return HSM{}, fail(syscall.ESTALE, "archive of %v: data version %d, older than the archived %d", f, dv, h.ArchivedVersion)
		}
		h.Flags |= HSMExists | HSMArchived
		h.Flags &^= HSMLost
		h.ArchiveID, h.ArchivedVersion = archiveID, dv
		if dv == h.DataVersion {
			h.Flags &^= HSMDirty
		} else {
			h.Flags |= HSMDirty
		}
	case HSMActionRestore:
		if h.Flags&HSMReleased == 0 {
			return HSM{}, fail(syscall.EINVAL, "restore of %v: not released", f)
		}
		l, err := t.layoutOf(f)
		if err != nil {
			return HSM{}, err
		}
		if l == nil || !hasObjects(l) {
			return HSM{}, fail(syscall.EINVAL, "restore of %v: no objects yet", f)
		}
		h.Flags &^= HSMReleased | HSMDirty
		h.DataVersion = h.ArchivedVersion
	case HSMActionRemove:
		if h.Flags&HSMReleased != 0 {
			return HSM{}, fail(syscall.EBUSY, "remove of the archive copy of %v: released", f)
		}
		h.Flags &^= HSMExists | HSMArchived | HSMDirty
	default:
		return HSM{}, fail(syscall.EINVAL, "hsm progress on %v: action %d", f, action)
	}
	t.b.Set(fidKey(pfxHSM, f), h.marshal(), nil)
	t.changelog(ChangelogRecord{Type: CLHSM, TFID: f})
	return h, nil
}
