package mdd

import (
	"errors"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
)

// acl returns n's ACL of the given xattr name, nil if it has none.
func (t *tx) acl(n *inode, name string) (ACL, error) {
	bit := inoACL
	if name == XattrACLDefault {
		bit = inoDefaultACL
	}
	if n.iflags&bit == 0 {
		return nil, nil
	}
	v, err := t.s.get(xattrKey(n.FID, name))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, ioError(err, "%s of %v", name, n.FID)
	}
	a, err := ParseACL(v)
	if err != nil {
		return nil, ioError(err, "%s of %v", name, n.FID)
	}
	return a, nil
}

// may checks that the caller may access n with want (MayRead, MayWrite,
// MayExec bits), as Linux's generic_permission does: the owner's bits for
// the owner, else the access ACL if there is one, else the group's bits for
// a member of the owning group, else the others'; then the DAC override
// capabilities. EACCES if denied; EPERM for write to an immutable inode,
// whoever asks (inode_permission refuses it before any DAC check).
func (t *tx) may(n *inode, want uint16) error {
	if want&MayWrite != 0 && n.immutable() {
		return fail(syscall.EPERM, "%v: write to an immutable inode", n.FID)
	}
	var acl ACL
	if n.iflags&inoACL != 0 && t.r.Cred.UID != n.UID {
		a, err := t.acl(n, XattrACLAccess)
		if err != nil {
			return err
		}
		acl = a
	}
	if Permits(&t.r.Cred, n.UID, n.GID, n.Mode, acl, want) {
		return nil
	}
	return fail(syscall.EACCES, "%v: access %s denied to uid %d", n.FID, perms(want), t.r.Cred.UID)
}

// Permits says whether c may access a file of owner uid, group gid, mode
// and access ACL acl (nil: none) as want (MayRead, MayWrite, MayExec bits)
// asks, as Linux's generic_permission decides: the owner's bits for the
// owner, else the ACL if there is one, else the group's bits for a member
// of the owning group, else the others'; then the DAC override
// capabilities. The MDT decides every operation so; a client decides
// access(2) the same way.
func Permits(c *Cred, uid, gid, mode uint32, acl ACL, want uint16) bool {
	var ok bool
	switch {
	case c.UID == uid:
		ok = uint16(mode>>6)&want == want
	case acl != nil:
		ok = acl.Permits(c, uid, gid, want)
	case c.InGroup(gid):
		ok = uint16(mode>>3)&want == want
	default:
		ok = uint16(mode)&want == want
	}
	switch {
	case ok:
		return true
	case isDir(mode):
		return c.Has(CapDacOverride) || want&MayWrite == 0 && c.Has(CapDacReadSearch)
	default:
		return c.Has(CapDacOverride) && (want&MayExec == 0 || mode&0o111 != 0) ||
			want == MayRead && c.Has(CapDacReadSearch)
	}
}

func perms(want uint16) string {
	b := []byte("---")
	if want&MayRead != 0 {
		b[0] = 'r'
	}
	if want&MayWrite != 0 {
		b[1] = 'w'
	}
	if want&MayExec != 0 {
		b[2] = 'x'
	}
	return string(b)
}

// owner reports whether the caller owns n or acts as its owner
// (inode_owner_or_capable).
func (t *tx) owner(n *inode) bool { return t.r.Cred.UID == n.UID || t.r.Cred.Has(CapFowner) }

// sticky refuses (EPERM) removing or renaming child from a sticky dir by a
// caller that owns neither (check_sticky).
func (t *tx) sticky(dir, child *inode) error {
	if dir.Mode&S_ISVTX == 0 || t.r.Cred.UID == child.UID || t.r.Cred.UID == dir.UID || t.r.Cred.Has(CapFowner) {
		return nil
	}
	return fail(syscall.EPERM, "%v: sticky directory %v: uid %d owns neither", child.FID, dir.FID, t.r.Cred.UID)
}

// immutable and appendOnly report n's FS_IMMUTABLE_FL and FS_APPEND_FL
// (Linux's IS_IMMUTABLE and IS_APPEND).
// mayPastFlags is may as if n had neither the immutable nor the
// append-only flag: for an HSM restore, which gets past those only.
func (t *tx) mayPastFlags(n *inode, want uint16) error {
	m := *n
	m.Flags &^= FlagImmutable | FlagAppend
	return t.may(&m, want)
}

func (n *inode) immutable() bool  { return n.Flags&FlagImmutable != 0 }
func (n *inode) appendOnly() bool { return n.Flags&FlagAppend != 0 }

// fixed refuses (EPERM) what neither an immutable nor an append-only
// inode allows, whoever asks: losing a link (may_delete), gaining one
// (vfs_link), a change of its xattrs or ACLs (may_write_xattr), of its
// mode, owner or explicit times (notify_change), or of its size
// (do_truncate). what names the operation for the error.
func (n *inode) fixed(what string) error {
	switch {
	case n.immutable():
		return fail(syscall.EPERM, "%s %v: immutable", what, n.FID)
	case n.appendOnly():
		return fail(syscall.EPERM, "%s %v: append-only", what, n.FID)
	}
	return nil
}

// keepsEntries refuses (EPERM) removing, renaming or replacing entry name
// of an append-only directory dir (may_delete's IS_APPEND(dir)); an
// immutable one was refused already by the write permission on it (may).
func keepsEntries(dir *inode, name string) error {
	if dir.appendOnly() {
		return fail(syscall.EPERM, "entry %q of %v: append-only directory", clampName(name), dir.FID)
	}
	return nil
}
