package mdd

import (
	"errors"
	"sort"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nacrefs/nacre/internal/fid"
)

// Xattr limits and flags (Linux's).
const (
	MaxXattrName  = 255
	MaxXattrValue = 65536
	XattrCreate   = 1 // fail with EEXIST if the attribute exists
	XattrReplace  = 2 // fail with ENODATA if it does not
)

type xattrNS int

const (
	nsUser xattrNS = iota
	nsTrusted
	nsSecurity
	nsACL
)

// xattrNamespace classifies name: EOPNOTSUPP for a namespace the MDT does
// not keep, ERANGE for a name too long, EINVAL for an empty one.
func xattrNamespace(name string) (xattrNS, error) {
	switch {
	case len(name) > MaxXattrName:
		return 0, fail(syscall.ERANGE, "xattr name of %d bytes", len(name))
	case name == "" || strings.IndexByte(name, 0) >= 0:
		return 0, fail(syscall.EINVAL, "xattr name %q", clampName(name))
	case name == XattrACLAccess || name == XattrACLDefault:
		return nsACL, nil
	}
	for _, p := range []struct {
		prefix string
		ns     xattrNS
	}{{"user.", nsUser}, {"trusted.", nsTrusted}, {"security.", nsSecurity}} {
		if strings.HasPrefix(name, p.prefix) {
			if len(name) == len(p.prefix) {
				return 0, fail(syscall.EINVAL, "xattr name %q", name)
			}
			return p.ns, nil
		}
	}
	return 0, fail(syscall.EOPNOTSUPP, "xattr name %q", clampName(name))
}

// xattrAccess applies Linux's xattr_permission for access want
// (MayRead or MayWrite) to name on n.
func (t *tx) xattrAccess(n *inode, name string, ns xattrNS, want uint16) error {
	c := &t.r.Cred
	deny := func(format string) error {
		if want&MayWrite != 0 {
			return fail(syscall.EPERM, format, name, n.FID)
		}
		return fail(syscall.ENODATA, format, name, n.FID)
	}
	switch ns {
	case nsTrusted:
		if !c.Has(CapSysAdmin) {
			return deny("xattr %q of %v: trusted without CAP_SYS_ADMIN")
		}
		return nil
	case nsSecurity:
		if want&MayWrite != 0 && !c.Has(CapSysAdmin) {
			return deny("xattr %q of %v: security without CAP_SYS_ADMIN")
		}
		return nil
	case nsACL:
		if want&MayWrite != 0 && !t.owner(n) {
			return fail(syscall.EPERM, "xattr %q of %v: not the owner", name, n.FID)
		}
		return nil
	}
	if typ := n.Mode & S_IFMT; typ != S_IFREG && typ != S_IFDIR {
		return deny("xattr %q of %v: user attributes only on files and directories")
	}
	if want&MayWrite != 0 && isDir(n.Mode) && n.Mode&S_ISVTX != 0 && !t.owner(n) {
		return fail(syscall.EPERM, "xattr %q of sticky %v: not the owner", name, n.FID)
	}
	return t.may(n, want)
}

// Getxattr returns the value of f's extended attribute name. Outcomes:
// the value; ENODATA (no such attribute, or trusted.* without
// CapSysAdmin), EACCES (user.* without read permission), EOPNOTSUPP
// (unknown namespace), ERANGE or EINVAL (bad name), ENOENT (no f).
func (s *Store) Getxattr(r Req, f fid.FID, name string) ([]byte, error) {
	ns, err := xattrNamespace(name)
	if err != nil {
		return nil, err
	}
	t := s.read(&r)
	defer t.done()
	n, err := t.inode(f)
	if err != nil {
		return nil, err
	}
	if err := t.xattrAccess(n, name, ns, MayRead); err != nil {
		return nil, err
	}
	v, err := s.get(xattrKey(f, name))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fail(syscall.ENODATA, "xattr %q of %v", clampName(name), f)
	}
	return v, ioError(err, "xattr %q of %v", clampName(name), f)
}

// Listxattr returns the names of f's extended attributes, sorted;
// trusted.* only for CapSysAdmin. ENOENT if f does not exist.
func (s *Store) Listxattr(r Req, f fid.FID) ([]string, error) {
	t := s.read(&r)
	defer t.done()
	if _, err := t.inode(f); err != nil {
		return nil, err
	}
	var out []string
	lo, hi := fidPrefix(pfxXattr, f)
	err := s.scanRange(lo, hi, func(k, _ []byte) error {
		name := string(k[1+fidLen:])
		if !strings.HasPrefix(name, "trusted.") || r.Cred.Has(CapSysAdmin) {
			out = append(out, name)
		}
		return nil
	})
	sort.Strings(out)
	return out, ioError(err, "listxattr %v", f)
}

// Setxattr sets f's extended attribute name to value. flags may hold
// XattrCreate or XattrReplace. Permissions are Linux's: user.* needs write
// permission on a regular file or directory (EPERM on others and, for a
// non-owner, on a sticky directory); trusted.* and security.* need
// CapSysAdmin (EPERM); the POSIX ACLs need ownership or CapFowner (EPERM),
// must parse (EINVAL), update the mode (the access ACL; dropped when the
// mode says it all) and take a default ACL only on directories (EACCES).
// No attribute of an immutable or append-only f changes (EPERM, whoever
// asks). The POSIX ACLs follow Linux's set_posix_acl: flags do not apply
// to them, an empty value removes the ACL (the mode stays), a symlink has
// none to set (EOPNOTSUPP), and setting a non-directory's default ACL to
// nothing does nothing, successfully.
// Outcomes: nil; EEXIST, ENODATA (by flags), E2BIG (value over
// MaxXattrValue), ERANGE, EINVAL, EOPNOTSUPP, EPERM, ENOENT. An XATTR
// changelog record is written.
func (s *Store) Setxattr(r Req, f fid.FID, name string, value []byte, flags int) error {
	ns, err := xattrNamespace(name)
	if err != nil {
		return err
	}
	if len(value) > MaxXattrValue {
		return fail(syscall.E2BIG, "xattr %q: %d bytes", clampName(name), len(value))
	}
	if flags&^(XattrCreate|XattrReplace) != 0 || flags == XattrCreate|XattrReplace {
		return fail(syscall.EINVAL, "xattr flags %#x", flags)
	}
	t := s.begin(&r)
	return t.finish(t.setxattr(f, name, ns, value, flags, false))
}

// Removexattr removes f's extended attribute name, with Setxattr's
// permissions. ENODATA if it does not exist, but for a POSIX ACL: removing
// one that is not there succeeds and changes nothing, as on Linux
// (set_posix_acl with no ACL), a non-directory's default ACL too.
func (s *Store) Removexattr(r Req, f fid.FID, name string) error {
	ns, err := xattrNamespace(name)
	if err != nil {
		return err
	}
	t := s.begin(&r)
	return t.finish(t.setxattr(f, name, ns, nil, XattrReplace, true))
}

func (t *tx) setxattr(f fid.FID, name string, ns xattrNS, value []byte, flags int, remove bool) error {
	n, err := t.inode(f)
	if err != nil {
		return err
	}
	if err := n.fixed("set xattrs of"); err != nil {
		return err
	}
	if ns == nsACL {
		// set_posix_acl: Linux hands it no flags, and an empty value is
		// no ACL.
		flags = 0
		if len(value) == 0 {
			remove = true
		}
		switch {
		case n.Mode&S_IFMT == S_IFLNK:
			return fail(syscall.EOPNOTSUPP, "xattr %q of %v: a symlink has no ACLs", name, f)
		case name == XattrACLDefault && !isDir(n.Mode):
			if remove {
				return nil
			}
			return fail(syscall.EACCES, "default ACL on non-directory %v", f)
		}
	}
	if err := t.xattrAccess(n, name, ns, MayWrite); err != nil {
		return err
	}
	_, err = t.s.get(xattrKey(f, name))
	exists := err == nil
	if err != nil && !errors.Is(err, pebble.ErrNotFound) {
		return ioError(err, "xattr %q of %v", clampName(name), f)
	}
	if ns == nsACL && remove && !exists {
		return nil
	}
	switch {
	case flags&XattrCreate != 0 && exists:
		return fail(syscall.EEXIST, "xattr %q of %v", clampName(name), f)
	case flags&XattrReplace != 0 && !exists:
		return fail(syscall.ENODATA, "xattr %q of %v", clampName(name), f)
	}
	if ns == nsACL && !remove {
		a, err := ParseACL(value)
		if err != nil {
			return fail(syscall.EINVAL, "xattr %q of %v: %v", name, f, err)
		}
		if name == XattrACLAccess && a != nil {
			perm, equiv := a.Equiv()
			n.Mode = n.Mode&^0o777 | perm
			if n.Mode&S_ISGID != 0 && !t.r.Cred.InGroup(n.GID) && !t.r.Cred.Has(CapFsetid) {
				n.Mode &^= S_ISGID
			}
			if equiv {
				a = nil
			}
		}
		if a == nil {
			remove = true
		} else {
			value = a.Marshal()
		}
	}
	bit := uint8(0)
	switch name {
	case XattrACLAccess:
		bit = inoACL
	case XattrACLDefault:
		bit = inoDefaultACL
	}
	if remove {
		t.b.Delete(xattrKey(f, name), nil)
		n.iflags &^= bit
	} else {
		t.b.Set(xattrKey(f, name), value, nil)
		n.iflags |= bit
		if bit == 0 {
			n.iflags |= inoXattrs
		}
	}
	n.Ctime = t.now
	t.touch(n)
	t.changelog(ChangelogRecord{Type: CLXattr, TFID: f, Name: name[:min(len(name), MaxName)]})
	return nil
}
