package client

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/mds/mdd"
)

// accessRead is R_OK, Access's mask for reading.
const accessRead = 4

// Access checks that cred may access f as mask asks (R_OK 4, W_OK 2,
// X_OK 1), as Linux's inode_permission does: by mode bits and
// capabilities, and for a caller other than the owner by f's access ACL
// when it has one. A write to an immutable file is refused to everyone.
// Most operations need no such check here: the MDT checks its own. This is
// for access(2), and for what the MDT deliberately leaves to the open, as
// Lustre does: reading a directory's pages (READDIR checks nothing, so
// that a directory opened by one who may read it can be read through the
// same descriptor by anyone it is passed to). Outcomes: nil; EACCES;
// EPERM (a write to an immutable file); the errors of Getattr and
// Getxattr.
func (fs *FS) Access(ctx context.Context, cred Cred, f FID, mask uint32) error {
	_, err := fs.access(ctx, cred, f, mask)
	return err
}

// access is Access returning f's attributes, which it gets.
func (fs *FS) access(ctx context.Context, cred Cred, f FID, mask uint32) (Attr, error) {
	a, err := fs.Getattr(ctx, cred, f)
	if err != nil {
		return a, err
	}
	if mask&2 != 0 && a.Flags&mdd.FlagImmutable != 0 {
		return a, fmt.Errorf("client: write access to immutable %v: %w", f, syscall.EPERM)
	}
	var acl mdd.ACL
	if a.UID != cred.UID && cred.Cap&mdc.CapDacOverride == 0 {
		// (Read alike by everyone: cached, and none at all costs no RPC
		// when the attributes say the file has no extended attributes.)
		v, err := fs.Getxattr(ctx, cred, f, xattrACLAccess)
		switch {
		case err == nil:
			if acl, err = mdd.ParseACL(v); err != nil {
				return a, fmt.Errorf("client: access: %s of %v: %v: %w", xattrACLAccess, f, err, syscall.EIO)
			}
		case !errors.Is(err, syscall.ENODATA):
			return a, err
		}
	}
	if !MayAccess(cred, a, acl, mask) {
		return a, fmt.Errorf("client: access %o to %v as uid %d: %w", mask&7, f, cred.UID, syscall.EACCES)
	}
	return a, nil
}

// MayAccess says whether cred may access a file with attributes a and
// access ACL acl (nil: none) as mask (R_OK 4, W_OK 2, X_OK 1) asks: as the
// MDT decides (mdd.Permits, Linux's generic_permission).
func MayAccess(cred Cred, a Attr, acl mdd.ACL, mask uint32) bool {
	c := mdd.Cred{UID: cred.UID, GID: cred.GID, Groups: cred.Groups, Cap: cred.Cap}
	return mdd.Permits(&c, a.UID, a.GID, a.Mode, acl, uint16(mask&7))
}
