package mdd

import (
	"errors"
	"syscall"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
)

// SetAttr bits: which fields of a SetAttr to apply (Lustre's LA_* / the
// VFS's ATTR_*).
const (
	AttrMode     uint32 = 1 << 0
	AttrUID      uint32 = 1 << 1
	AttrGID      uint32 = 1 << 2
	AttrSize     uint32 = 1 << 3 // truncate: the LSOM size (and Blocks with AttrBlocks)
	AttrAtime    uint32 = 1 << 4 // an explicit atime
	AttrMtime    uint32 = 1 << 5 // an explicit mtime
	AttrCtime    uint32 = 1 << 6 // an explicit ctime (the client's clock)
	AttrAtimeNow uint32 = 1 << 7 // atime to the request's time (utimes(NULL))
	AttrMtimeNow uint32 = 1 << 8 // mtime to the request's time
	AttrFlags    uint32 = 1 << 9 // inode flags (chattr)
	AttrBlocks   uint32 = 1 << 10
	// AttrOpenWrite says the caller holds the file open for write, so a
	// truncate needs no write permission now (ftruncate on an fd opened
	// before a chmod; Lustre's MDS_OPEN_OWNEROVERRIDE).
	AttrOpenWrite uint32 = 1 << 11
	// AttrRestore says the HSM copytool puts a restored file's times
	// back (explicit atime, mtime, ctime, nothing else): see OpenRestore.
	AttrRestore uint32 = 1 << 12
)

// Inode flags that need CapLinuxImmutable (FS_IMMUTABLE_FL, FS_APPEND_FL).
const (
	FlagImmutable uint32 = 0x10
	FlagAppend    uint32 = 0x20
)

// FlagsKept are the inode flags (FS_*_FL) a chattr stores: the ones
// Lustre's MDT keeps (ldiskfs's osd_attr_set keeps what
// ll_ext_to_inode_flags maps to the inode's S_* flags, and
// PROJINHERIT), the rest of a chattr's bits being silently dropped, as
// there. Immutable and append-only are enforced here for every client;
// SYNC, NOATIME, DIRSYNC and PROJINHERIT are only carried (lsattr shows
// them back), which is harmless: each asks only for what Nacre does
// anyway (the MDT commits before it answers) or for nothing it offers
// (atime, projects). Flags such as NODUMP, COMPR, NOCOW, DAX, CASEFOLD,
// ENCRYPT or the ones ext4 reports but lets no one set (EXTENTS,
// INLINE_DATA, ...) would claim what Nacre does not do.
const FlagsKept = 0x00000008 | // FS_SYNC_FL
	FlagImmutable |
	FlagAppend |
	0x00000080 | // FS_NOATIME_FL
	0x00010000 | // FS_DIRSYNC_FL
	0x20000000 // FS_PROJINHERIT_FL

// SetAttr is a setattr request: Valid says which fields apply.
type SetAttr struct {
	Valid  uint32
	Mode   uint32 // PermMask bits; the type cannot change
	UID    uint32
	GID    uint32
	Size   uint64
	Blocks uint64
	Atime  int64
	Mtime  int64
	Ctime  int64
	Flags  uint32
}

// Setattr changes f's attributes with Linux's rules (setattr_prepare):
//
//   - chmod: only the owner or CapFowner (EPERM); setgid is dropped when
//     the caller is not in the file's group and lacks CapFsetid; an access
//     ACL follows the new mode.
//   - chown: changing the uid needs CapChown; changing the gid needs
//     CapChown, or ownership and membership of the new group (EPERM); it
//     clears setuid, and setgid when group-executable, on non-directories.
//   - times: explicit times need ownership or CapFowner (EPERM); "now"
//     needs ownership or write permission (EACCES).
//   - size: needs write permission (EACCES) unless AttrOpenWrite; EISDIR
//     on a directory, EINVAL on other non-regular files. It sets the LSOM
//     size.
//   - flags: owner or CapFowner; only FlagsKept are stored, other bits
//     are dropped without an error (as Lustre does); the immutable and
//     append-only flags need CapLinuxImmutable (EPERM); while
//     FlagImmutable stays set, no other flag may change (EPERM, as ext4
//     and ldiskfs refuse).
//
// Before all that, whoever asks (notify_change, do_truncate): an
// immutable or append-only f takes no chmod, chown, explicit times or size
// (EPERM, even with AttrOpenWrite); an immutable one no times set to now
// either, which an append-only one takes (touch). Only the flags change.
// Except with AttrRestore: the HSM copytool, with CapSysAdmin, puts the
// times of a released file it restored back, whatever its flags (EPERM
// without the capability, for a file not released, or with another
// attribute).
//
// ctime becomes the request's time (or Ctime with AttrCtime). The result
// is the new attributes; ENOENT if f does not exist; nothing changes on
// error. A TRUNC changelog record is written for a size change, SATTR
// otherwise.
func (s *Store) Setattr(r Req, f fid.FID, sa SetAttr) (Attr, error) {
	t := s.begin(&r)
	a, err := t.setattr(f, sa)
	if err = t.finish(err); err != nil {
		return Attr{}, err
	}
	return a, nil
}

func (t *tx) setattr(f fid.FID, sa SetAttr) (Attr, error) {
	c := &t.r.Cred
	n, err := t.inode(f)
	if err != nil {
		return Attr{}, err
	}
	if sa.Valid&AttrRestore != 0 {
		if sa.Valid&^(AttrRestore|AttrAtime|AttrMtime|AttrCtime) != 0 {
			return Attr{}, fail(syscall.EPERM, "restore setattr %v: valid %#x: only times", f, sa.Valid)
		}
		if err := t.restoring(n, "setattr"); err != nil {
			return Attr{}, err
		}
	} else if err := setattrFlags(n, sa); err != nil {
		return Attr{}, err
	}
	mode := n.Mode
	if sa.Valid&(AttrUID|AttrGID) != 0 {
		uid, gid := n.UID, n.GID
		if sa.Valid&AttrUID != 0 {
			uid = sa.UID
		}
		if sa.Valid&AttrGID != 0 {
			gid = sa.GID
		}
		if uid != n.UID && !c.Has(CapChown) {
			return Attr{}, fail(syscall.EPERM, "chown %v to uid %d by uid %d", f, uid, c.UID)
		}
		if gid != n.GID && !c.Has(CapChown) && !(c.UID == n.UID && c.InGroup(gid)) {
			return Attr{}, fail(syscall.EPERM, "chgrp %v to gid %d by uid %d", f, gid, c.UID)
		}
		if uid == n.UID && gid == n.GID && !c.Has(CapChown) && c.UID != n.UID {
			return Attr{}, fail(syscall.EPERM, "chown %v by uid %d: not the owner", f, c.UID)
		}
		if !isDir(mode) {
			mode &^= S_ISUID
			if mode&0o010 != 0 {
				mode &^= S_ISGID
			}
		}
		n.UID, n.GID = uid, gid
	}
	if sa.Valid&AttrMode != 0 {
		// A writer may clear a file's set-ID bits without owning it: its
		// write clears them (the kernel's file_remove_privs asks the file
		// system to, with the writer's credentials, when it does not
		// handle that itself, as a FUSE mount does not).
		was, now := n.Mode&PermMask, sa.Mode&PermMask
		kill := now&^was == 0 && was&^now != 0 && (was&^now)&^(S_ISUID|S_ISGID) == 0 &&
			n.Mode&S_IFMT == S_IFREG && sa.Valid&(AttrUID|AttrGID) == 0
		if !t.owner(n) && !(kill && t.may(n, MayWrite) == nil) {
			return Attr{}, fail(syscall.EPERM, "chmod %v by uid %d: not the owner", f, c.UID)
		}
		mode = mode&S_IFMT | sa.Mode&PermMask
		if mode&S_ISGID != 0 && !c.InGroup(n.GID) && !c.Has(CapFsetid) {
			mode &^= S_ISGID
		}
	}
	if mode&0o777 != n.Mode&0o777 && n.iflags&inoACL != 0 {
		a, err := t.acl(n, XattrACLAccess)
		if err != nil {
			return Attr{}, err
		}
		if a != nil {
			t.b.Set(xattrKey(f, XattrACLAccess), a.chmod(mode).Marshal(), nil)
		}
	}
	if sa.Valid&(AttrAtime|AttrMtime) != 0 && !t.owner(n) {
		return Attr{}, fail(syscall.EPERM, "utimes %v by uid %d: not the owner", f, c.UID)
	}
	if sa.Valid&(AttrAtimeNow|AttrMtimeNow) != 0 && !t.owner(n) {
		if err := t.may(n, MayWrite); err != nil {
			return Attr{}, err
		}
	}
	if sa.Valid&AttrFlags != 0 {
		sa.Flags &= FlagsKept
		if !t.owner(n) {
			return Attr{}, fail(syscall.EPERM, "chattr %v by uid %d: not the owner", f, c.UID)
		}
		if (sa.Flags^n.Flags)&(FlagImmutable|FlagAppend) != 0 && !c.Has(CapLinuxImmutable) {
			return Attr{}, fail(syscall.EPERM, "chattr %v: immutable or append-only without CAP_LINUX_IMMUTABLE", f)
		}
		if n.immutable() && sa.Flags&FlagImmutable != 0 && sa.Flags != n.Flags {
			return Attr{}, fail(syscall.EPERM, "chattr %v: flags %#x of an immutable inode", f, sa.Flags)
		}
		n.Flags = sa.Flags
	}
	var som *LSOM
	if sa.Valid&AttrSize != 0 {
		switch {
		case isDir(n.Mode):
			return Attr{}, fail(syscall.EISDIR, "truncate %v", f)
		case n.Mode&S_IFMT != S_IFREG:
			return Attr{}, fail(syscall.EINVAL, "truncate %v: not a regular file", f)
		}
		if sa.Valid&AttrOpenWrite == 0 {
			if err := t.may(n, MayWrite); err != nil {
				return Attr{}, err
			}
		}
		old, _, err := t.s.lsom(f)
		if err != nil {
			return Attr{}, err
		}
		som = &LSOM{Size: sa.Size, Blocks: old.Blocks, Flags: SOMLazy}
		if sa.Valid&AttrBlocks != 0 {
			som.Blocks = sa.Blocks
		}
		t.b.Set(fidKey(pfxLSOM, f), som.marshal(), nil)
	}
	switch {
	case sa.Valid&AttrAtime != 0:
		n.Atime = sa.Atime
	case sa.Valid&AttrAtimeNow != 0:
		n.Atime = t.now
	}
	switch {
	case sa.Valid&AttrMtime != 0:
		n.Mtime = sa.Mtime
	case sa.Valid&AttrMtimeNow != 0:
		n.Mtime = t.now
	}
	n.Ctime = t.now
	if sa.Valid&AttrCtime != 0 {
		n.Ctime = sa.Ctime
	}
	n.Mode = mode
	t.touch(n)
	typ := CLSetattr
	if sa.Valid&AttrSize != 0 {
		typ = CLTrunc
		// A released file's size is the archive's until it is restored:
		// changed here alone, the next restore would bring the archive's
		// data and size back over it. Its client restores it first, and
		// again if a release came in between (Lustre's truncate of a
		// released file restores it).
		if h, err := t.hsmOf(f); err != nil {
			return Attr{}, err
		} else if h.Flags&HSMReleased != 0 {
			return Attr{}, fail(syscall.ENODATA, "truncate %v: released: restore it first", f)
		}
		if err := t.dataChanged(f); err != nil {
			return Attr{}, err
		}
	}
	t.changelog(ChangelogRecord{Type: typ, TFID: f})
	if som == nil && n.Mode&S_IFMT == S_IFREG {
		if old, ok, err := t.s.lsom(f); err != nil {
			return Attr{}, err
		} else if ok {
			som = &old
		}
	}
	return n.attr(som), nil
}

// setattrFlags refuses (EPERM) what n's immutable and append-only flags
// forbid of sa, whoever asks: see Setattr.
func setattrFlags(n *inode, sa SetAttr) error {
	if sa.Valid&(AttrMode|AttrUID|AttrGID|AttrAtime|AttrMtime|AttrSize) != 0 {
		if err := n.fixed("setattr"); err != nil {
			return err
		}
	}
	if sa.Valid&(AttrAtimeNow|AttrMtimeNow) != 0 && n.immutable() {
		return fail(syscall.EPERM, "touch %v: immutable", n.FID)
	}
	return nil
}

// lsom returns f's LSOM record, ok false if it has none.
func (s *Store) lsom(f fid.FID) (LSOM, bool, error) {
	var kb fidKeyBuf // on the stack: a cache hit allocates nothing
	v, found, hit := s.cache.view(kb.key(pfxLSOM, f))
	var err error
	switch {
	case hit && !found:
		err = pebble.ErrNotFound
	case !hit:
		v, err = s.get(fidKey(pfxLSOM, f))
	}
	if errors.Is(err, pebble.ErrNotFound) {
		return LSOM{}, false, nil
	}
	if err != nil {
		return LSOM{}, false, ioError(err, "lsom of %v", f)
	}
	l, err := decodeLSOM(v)
	return l, err == nil, ioError(err, "lsom of %v", f)
}

// GetLSOM returns the lazy size of f; ok is false if it has none.
func (s *Store) GetLSOM(f fid.FID) (l LSOM, ok bool, err error) { return s.lsom(f) }

// Open flags the store looks at (Linux's O_* values, as the MDS open
// carries them; Lustre's MDS_OPEN_OWNEROVERRIDE).
const (
	OpenReadOnly      uint64 = 0
	OpenWriteOnly     uint64 = 1
	OpenReadWrite     uint64 = 2
	OpenAccMode       uint64 = 3
	OpenTrunc         uint64 = 0o1000
	OpenAppend        uint64 = 0o2000
	OpenOwnerOverride uint64 = 0x200000000000 // the owner may open regardless of mode (after create)
	// OpenReplay reopens a file that was open before a restart: an
	// orphan (no link left) too, and without permission checks, which
	// were made at the first open.
	OpenReplay uint64 = 0x400000000000
	// OpenRestore is the HSM copytool's open of a released file to write
	// its archived data back (Lustre's copytool writes a volatile file
	// whose layout the MDT swaps in; Nacre's writes the file's own new
	// objects): the immutable and append-only flags keep users from
	// changing the file, not its data from coming back. Only with
	// CapSysAdmin, of a released file (EPERM otherwise).
	OpenRestore uint64 = 0x800000000000
	// OpenTmpfile opens the file Tmpfile just made, an orphan.
	OpenTmpfile uint64 = 0x1000000000000
	// OpenInternal are the flags only the MDT itself may set.
	OpenInternal = OpenOwnerOverride | OpenReplay | OpenTmpfile
)

// restoring checks that the caller may restore n, a released file, past
// its immutable and append-only flags (OpenRestore, AttrRestore).
func (t *tx) restoring(n *inode, what string) error {
	if !t.r.Cred.Has(CapSysAdmin) {
		return fail(syscall.EPERM, "restore %s of %v by uid %d: not CAP_SYS_ADMIN", what, n.FID, t.r.Cred.UID)
	}
	h, err := t.hsmOf(n.FID)
	if err != nil {
		return err
	}
	if h.Flags&HSMReleased == 0 {
		return fail(syscall.EPERM, "restore %s of %v: not released", what, n.FID)
	}
	return nil
}

// OpenFile checks that the caller may open f with flags and counts the open,
// so that an Unlink of its last link keeps it as an orphan until CloseFile.
// Open counts live in memory: after a restart, recovery reopens files
// (replayed opens) and then DestroyOrphans removes the rest. Outcomes: f's
// attributes; ENOENT (no f, or f unlinked), EISDIR (a directory for
// write), ELOOP (a symlink), EACCES, EPERM (whoever asks, as may_open: an
// immutable f for write or with O_TRUNC; an append-only one for write
// without O_APPEND, or with O_TRUNC). OpenOwnerOverride skips the
// permission bits, not the flags; OpenReplay skips both.
func (s *Store) OpenFile(r Req, f fid.FID, flags uint64) (Attr, error) {
	t := s.begin(&r)
	defer t.abort()
	n, err := t.inode(f)
	if err != nil {
		return Attr{}, err
	}
	if n.Nlink == 0 && flags&(OpenReplay|OpenTmpfile) == 0 {
		return Attr{}, fail(syscall.ENOENT, "open %v: unlinked", f)
	}
	var want uint16
	switch flags & OpenAccMode {
	case OpenReadOnly:
		want = MayRead
	case OpenWriteOnly:
		want = MayWrite
	default:
		want = MayRead | MayWrite
	}
	if flags&OpenTrunc != 0 {
		want |= MayWrite
	}
	switch n.Mode & S_IFMT {
	case S_IFDIR:
		if want&MayWrite != 0 {
			return Attr{}, fail(syscall.EISDIR, "open %v for write", f)
		}
	case S_IFLNK:
		return Attr{}, fail(syscall.ELOOP, "open %v: a symlink", f)
	}
	restore := flags&OpenRestore != 0 && flags&OpenReplay == 0
	if restore {
		if err := t.restoring(n, "open"); err != nil {
			return Attr{}, err
		}
	}
	if flags&OpenReplay == 0 {
		if want&MayWrite != 0 && n.immutable() && !restore {
			return Attr{}, fail(syscall.EPERM, "open %v for write: immutable", f)
		}
		if !(flags&OpenOwnerOverride != 0 && r.Cred.UID == n.UID) {
			may := t.may
			if restore {
				may = t.mayPastFlags // the permission still holds
			}
			if err := may(n, want); err != nil {
				return Attr{}, err
			}
		}
		if n.appendOnly() && !restore && (flags&OpenAccMode != OpenReadOnly && flags&OpenAppend == 0 || flags&OpenTrunc != 0) {
			return Attr{}, fail(syscall.EPERM, "open %v with flags %#o: append-only", f, flags&(OpenAccMode|OpenTrunc|OpenAppend))
		}
	}
	som, _, err := s.lsom(f)
	if err != nil {
		return Attr{}, err // counted nothing: no close comes for it
	}
	s.mu.opens[f]++
	if flags&OpenAccMode != OpenReadOnly {
		s.mu.writers[f]++ // CloseFile's CloseInfo.Write says the same of this open
	}
	if n.Mode&S_IFMT == S_IFREG {
		return n.attr(&som), nil
	}
	return n.attr(nil), nil
}

// CloseInfo is what a client reports on its last close of a file.
type CloseInfo struct {
	// Write: the file was open for write; a CLOSE changelog record is
	// written.
	Write bool
	// LSOM, if set, becomes the file's lazy size (the client's size and
	// blocks at close).
	LSOM *LSOM
	// Mtime and Ctime, if not 0, become a regular file's mtime and ctime:
	// the times of the writes of an open for write, which the client
	// sends with the close unless the times were set explicitly since.
	Mtime, Ctime int64
	// Written: the open changed the file's data. A close with LSOM says
	// so too; one without (the client could not read the size) needs it,
	// or the data version would not move.
	Written bool
	// Departed: the open was for write and its client went away without
	// closing it (crashed, evicted). Its writes may have reached the
	// objects with no size to tell of them, so a regular file's data
	// count as changed (Lustre's mdt_export_cleanup marks it dirty):
	// else an archive copy made before them would let it be released.
	Departed bool
}

// olderThan says the close's times are older than n's ctime: a change
// since the writes (utime, chmod) made after them, whose times stand. A
// client's close reaches the MDT after its release, which the kernel
// sends after close(2) returns, so a utime right after the close can
// come first. Lustre's mdd_fix_attr drops such a setattr's mtime and
// ctime the same way.
func (ci CloseInfo) olderThan(n *inode) bool {
	c := ci.Ctime
	if c == 0 {
		c = ci.Mtime
	}
	return c < n.Ctime
}

// CloseFile ends one OpenFile of f. When it was the last open of an orphan, the
// orphan is destroyed (and its objects queued in the destroy log): the
// Removal says so. EBADF if f has no open.
func (s *Store) CloseFile(r Req, f fid.FID, ci CloseInfo) (Removal, error) {
	t := s.begin(&r)
	if s.mu.opens[f] == 0 {
		t.abort()
		return Removal{}, fail(syscall.EBADF, "close %v: not open", f)
	}
	rm, err := t.close(f, ci)
	// The open ends even if the close's changes fail: its caller has
	// forgotten the handle, and no other close comes for it (an orphan
	// whose destroy failed goes with DestroyOrphans at the next start).
	// Under the store's lock, which finish gives up.
	uncount(s.mu.opens, f)
	if ci.Write {
		uncount(s.mu.writers, f)
	}
	if err = t.finish(err); err != nil {
		return Removal{}, err
	}
	rm.fill(t)
	return rm, nil
}

func (t *tx) close(f fid.FID, ci CloseInfo) (Removal, error) {
	n, err := t.inode(f)
	if err != nil {
		return Removal{}, err
	}
	dt, _ := dtype(n.Mode)
	rm := Removal{FID: f, Type: dt, Nlink: n.Nlink}
	if n.Nlink == 0 && !t.s.mayBeOpenLocked(f, 1) {
		rm.Last = true
		if err := t.destroy(n, &rm); err != nil {
			return Removal{}, err
		}
	} else if err := t.closeAttrs(n, ci); err != nil {
		return Removal{}, err
	}
	if ci.Write && !rm.Last && n.Mode&S_IFMT == S_IFREG && (ci.Mtime != 0 || ci.Ctime != 0) && !ci.olderThan(n) {
		if ci.Mtime != 0 {
			n.Mtime = ci.Mtime
		}
		if ci.Ctime != 0 {
			n.Ctime = ci.Ctime
		}
		t.touch(n)
	}
	if ci.Write {
		t.changelog(ChangelogRecord{Type: CLClose, TFID: n.FID})
	}
	return rm, nil
}

// closeAttrs records the lazy size a close brings (the client sends it
// only when its open wrote).
func (t *tx) closeAttrs(n *inode, ci CloseInfo) error {
	if n.Mode&S_IFMT != S_IFREG {
		return nil
	}
	if ci.LSOM == nil {
		if ci.Departed || ci.Written {
			return t.dataChanged(n.FID)
		}
		return nil
	}
	som := *ci.LSOM
	som.Flags |= SOMLazy
	t.b.Set(fidKey(pfxLSOM, n.FID), som.marshal(), nil)
	return t.dataChanged(n.FID)
}

// ReplayedClose makes again what a close made, replayed by its client
// after a restart that lost it, when the open it ended is not open here:
// made and ended after the last commit, the open is not replayed (opens
// are replayed with the locks, after the requests, and only those still
// open). It records the file's lazy size and times, as the close did; the
// open counts are left alone, and a file unlinked meanwhile is left to
// DestroyOrphans.
func (s *Store) ReplayedClose(r Req, f fid.FID, ci CloseInfo) error {
	t := s.begin(&r)
	n, err := t.inode(f)
	if err == nil && n.Nlink > 0 {
		_, err = t.close(f, ci)
	}
	return t.finish(err)
}

// OpenCount returns how many opens of f are outstanding.
func (s *Store) OpenCount(f fid.FID) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.opens[f]
}

// Orphans lists the orphans: inodes whose last link went while open.
func (s *Store) Orphans() ([]fid.FID, error) {
	var out []fid.FID
	err := s.scan([]byte{pfxOrphan}, func(k, _ []byte) error {
		if len(k) != 1+fidLen {
			return errors.New("bad orphan key")
		}
		out = append(out, getFID(k[1:]))
		return nil
	})
	return out, ioError(err, "orphans")
}

// mayBeOpenLocked reports whether f may be open beyond the mine opens the
// caller knows of: its open count says so, or recovery may not have
// replayed every open yet (BeginRecovery). s.mu is held.
func (s *Store) mayBeOpenLocked(f fid.FID, mine int) bool {
	return s.mu.opens[f] > mine || s.mu.recovering
}

// uncount takes one from f's count in m, dropping it at zero.
func uncount(m map[fid.FID]int, f fid.FID) {
	if m[f]--; m[f] <= 0 {
		delete(m, f)
	}
}

// BeginRecovery says the open counts may miss opens clients have not
// replayed yet, as after a restart: until DestroyOrphans, an unlink or
// the last close of an orphan keeps the file as an orphan instead of
// destroying it, and SwapLayouts (but for a replay) and HSM release are
// refused with EBUSY, as if a file were open.
func (s *Store) BeginRecovery() {
	s.mu.Lock()
	s.mu.recovering = true
	s.mu.Unlock()
}

// testHookOrphansListed, if set (by tests), runs once DestroyOrphans has
// listed the orphans, before it destroys any.
var testHookOrphansListed func()

// DestroyOrphans ends recovery (BeginRecovery) and destroys every orphan
// that is not open now: after a restart, once recovery has replayed the
// opens that survive. It returns the Removals (with their destroy log
// records).
func (s *Store) DestroyOrphans(r Req) ([]Removal, error) {
	s.mu.Lock()
	s.mu.recovering = false // orphans made from now on are all open
	s.mu.Unlock()
	orphans, err := s.Orphans()
	if err != nil {
		return nil, err
	}
	if testHookOrphansListed != nil {
		testHookOrphansListed()
	}
	var out []Removal
	for _, f := range orphans {
		t := s.begin(&r)
		if s.mu.opens[f] > 0 {
			t.abort()
			continue
		}
		n, err := t.inode(f)
		if errors.Is(err, syscall.ENOENT) {
			// Gone since the listing: recovery has ended, so the last
			// close of an orphan open then destroyed it. The others must
			// still go.
			t.abort()
			continue
		}
		if err != nil {
			t.abort()
			return out, err
		}
		dt, _ := dtype(n.Mode)
		rm := Removal{FID: f, Type: dt, Last: true}
		err = t.destroy(n, &rm)
		if err = t.finish(err); err != nil {
			return out, err
		}
		rm.fill(t)
		out = append(out, rm)
	}
	return out, nil
}

// GetLayout returns f's layout (for a directory, its default layout);
// ENODATA if it has none, ENOENT if f does not exist.
func (s *Store) GetLayout(f fid.FID) (layout.Layout, error) {
	l, err := s.LayoutIfAny(f)
	if err != nil {
		return layout.Layout{}, err
	}
	if l == nil {
		return layout.Layout{}, fail(syscall.ENODATA, "layout of %v", f)
	}
	return *l, nil
}

// DefaultLayout returns the first default layout found on dirs, in order
// (a new file's directory, then the root), or nil: what every create asks,
// answered from the value cache under one read lock without reading the
// directories' inodes. A directory that does not exist has none; one whose
// layout does not decode is passed over, and the error returned if no
// other has one.
func (s *Store) DefaultLayout(dirs ...fid.FID) (*layout.Layout, error) {
	t := s.read(&Req{})
	defer t.done()
	var first error
	for _, d := range dirs {
		l, err := t.layoutOf(d)
		if l != nil {
			return l, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// LayoutIfAny is GetLayout for callers to whom no layout is an ordinary
// answer (nil, nil), such as the search for a directory's default layout
// on every create: it builds no error for it.
func (s *Store) LayoutIfAny(f fid.FID) (*layout.Layout, error) {
	t := s.read(&Req{})
	defer t.done()
	if _, err := t.inode(f); err != nil {
		return nil, err
	}
	return t.layoutOf(f)
}

// SetLayout sets f's layout: a regular file's (instantiating components,
// lfs setstripe on an empty file) or a directory's default layout (a
// template). The stored generation is one more than the old layout's
// (Gen of l is ignored). The caller needs write permission on f. EINVAL
// for an invalid layout or another file type, EACCES, ENOENT. A LYOUT
// changelog record is written. Returns the stored layout.
func (s *Store) SetLayout(r Req, f fid.FID, l layout.Layout) (layout.Layout, error) {
	return s.SetLayoutAlloc(r, f, func(*layout.Layout) (layout.Layout, error) { return l, nil })
}

// SetLayoutAlloc sets f's layout to what alloc returns, as SetLayout does,
// calling alloc with the store's lock held once the permission checks
// passed, with f's current layout (nil if none): so that the objects of a
// layout instantiated later (lfs setstripe on a file created without
// objects) are taken from the MDT's pools in apply order, as Spec.Alloc
// explains. alloc must not block; its error fails the change with nothing
// changed.
func (s *Store) SetLayoutAlloc(r Req, f fid.FID, alloc func(cur *layout.Layout) (layout.Layout, error)) (layout.Layout, error) {
	t := s.begin(&r)
	out, err := t.setLayout(f, alloc)
	if err = t.finish(err); err != nil {
		return layout.Layout{}, err
	}
	return out, nil
}

func (t *tx) setLayout(f fid.FID, alloc func(cur *layout.Layout) (layout.Layout, error)) (layout.Layout, error) {
	n, err := t.inode(f)
	if err != nil {
		return layout.Layout{}, err
	}
	if t := n.Mode & S_IFMT; t != S_IFREG && t != S_IFDIR {
		return layout.Layout{}, fail(syscall.EINVAL, "set layout of %v: not a file or directory", f)
	}
	if err := t.may(n, MayWrite); err != nil {
		if !t.r.Restore || t.restoring(n, "layout") != nil {
			return layout.Layout{}, err
		}
		// A restore gets past the flags, not the permission.
		if err := t.mayPastFlags(n, MayWrite); err != nil {
			return layout.Layout{}, err
		}
	}
	old, err := t.layoutOf(f)
	if err != nil {
		return layout.Layout{}, err
	}
	l, err := alloc(old)
	if err != nil {
		return layout.Layout{}, err
	}
	l = l.Clone()
	l.Gen = 0
	if old != nil {
		l.Gen = old.Gen + 1
	}
	b, err := l.Marshal()
	if err != nil {
		return layout.Layout{}, fail(syscall.EINVAL, "set layout of %v: %v", f, err)
	}
	t.b.Set(fidKey(pfxLayout, f), b, nil)
	t.noteObjects(&l)
	n.Ctime = t.now
	t.touch(n)
	t.changelog(ChangelogRecord{Type: CLLayout, TFID: f})
	return l, nil
}

// RemoveDefaultLayout drops directory dir's default layout (lfs
// setstripe -d): files made there later get the root's, else the file
// system's. The caller needs write permission on dir. ENOTDIR for
// another type, ENODATA if dir has none, EACCES, ENOENT. A LYOUT
// changelog record is written.
func (s *Store) RemoveDefaultLayout(r Req, dir fid.FID) error {
	t := s.begin(&r)
	return t.finish(t.removeDefaultLayout(dir))
}

func (t *tx) removeDefaultLayout(dir fid.FID) error {
	n, err := t.inode(dir)
	if err != nil {
		return err
	}
	if n.Mode&S_IFMT != S_IFDIR {
		return fail(syscall.ENOTDIR, "remove the default layout of %v: not a directory", dir)
	}
	if err := t.may(n, MayWrite); err != nil {
		return err
	}
	l, err := t.layoutOf(dir)
	if err != nil {
		return err
	}
	if l == nil {
		return fail(syscall.ENODATA, "remove the default layout of %v: it has none", dir)
	}
	t.b.Delete(fidKey(pfxLayout, dir), nil)
	n.Ctime = t.now
	t.touch(n)
	t.changelog(ChangelogRecord{Type: CLLayout, TFID: dir})
	return nil
}

// GetHSM returns f's HSM attributes (zero if never set); ENOENT if f does
// not exist.
func (s *Store) GetHSM(f fid.FID) (HSM, error) {
	t := s.read(&Req{})
	defer t.done()
	if _, err := t.inode(f); err != nil {
		return HSM{}, err
	}
	v, err := s.get(fidKey(pfxHSM, f))
	if errors.Is(err, pebble.ErrNotFound) {
		return HSM{}, nil
	}
	if err != nil {
		return HSM{}, ioError(err, "hsm of %v", f)
	}
	h, err := decodeHSM(v)
	return h, ioError(err, "hsm of %v", f)
}

// SetHSM stores f's HSM attributes. The owner or CapFowner may set them
// (EPERM); EINVAL for unknown flags or a non-regular file; ENOENT. An HSM
// changelog record is written.
func (s *Store) SetHSM(r Req, f fid.FID, h HSM) error {
	if h.Flags&^hsmAll != 0 {
		return fail(syscall.EINVAL, "hsm flags %#x", h.Flags)
	}
	t := s.begin(&r)
	n, err := t.inode(f)
	if err == nil {
		switch {
		case n.Mode&S_IFMT != S_IFREG:
			err = fail(syscall.EINVAL, "hsm state of %v: not a regular file", f)
		case !t.owner(n):
			err = fail(syscall.EPERM, "hsm state of %v by uid %d", f, r.Cred.UID)
		default:
			t.b.Set(fidKey(pfxHSM, f), h.marshal(), nil)
			t.changelog(ChangelogRecord{Type: CLHSM, TFID: f})
		}
	}
	return t.finish(err)
}
