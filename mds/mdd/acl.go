package mdd

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// POSIX ACL extended attributes, in Linux's binary xattr format.
const (
	XattrACLAccess  = "system.posix_acl_access"
	XattrACLDefault = "system.posix_acl_default"
	// ACLVersion is the version word of the xattr format.
	ACLVersion = 2
	// ACLUndefinedID is the id of entries that name no user or group.
	ACLUndefinedID = 0xffffffff
	aclHeaderSize  = 4
	aclEntrySize   = 8
	// MaxACLEntries bounds an ACL (what fits in a 64 KiB xattr).
	MaxACLEntries = (MaxXattrValue - aclHeaderSize) / aclEntrySize
)

// ACLTag is the kind of an ACL entry (Linux's ACL_* tag values).
type ACLTag uint16

// The tags, in the order entries must appear.
const (
	ACLUserObj  ACLTag = 0x01
	ACLUser     ACLTag = 0x02
	ACLGroupObj ACLTag = 0x04
	ACLGroup    ACLTag = 0x08
	ACLMask     ACLTag = 0x10
	ACLOther    ACLTag = 0x20
)

// Permission bits of an ACL entry and of access requests.
const (
	MayExec  = 1
	MayWrite = 2
	MayRead  = 4
)

// ACLEntry is one entry: a tag, rwx permission bits, and for ACLUser and
// ACLGroup the uid or gid (ACLUndefinedID otherwise).
type ACLEntry struct {
	Tag  ACLTag
	Perm uint16
	ID   uint32
}

// ACL is a POSIX.1e access control list, entries sorted by tag then id as
// Linux keeps them. The nil ACL is "no ACL".
type ACL []ACLEntry

// ParseACL decodes a system.posix_acl_* xattr value. It is strict: version
// 2, known tags, permissions within rwx, entries in order, exactly one of
// each *_OBJ and OTHER, a MASK when there are named entries, undefined ids
// on unnamed entries, unique ids, and nothing trailing. A header with no
// entries gives the nil ACL (setting it removes the ACL, as on Linux).
func ParseACL(b []byte) (ACL, error) {
	if len(b) < aclHeaderSize || (len(b)-aclHeaderSize)%aclEntrySize != 0 {
		return nil, fmt.Errorf("acl: %d bytes", len(b))
	}
	if v := binary.LittleEndian.Uint32(b); v != ACLVersion {
		return nil, fmt.Errorf("acl: version %d", v)
	}
	n := (len(b) - aclHeaderSize) / aclEntrySize
	if n == 0 {
		return nil, nil
	}
	if n > MaxACLEntries {
		return nil, fmt.Errorf("acl: %d entries", n)
	}
	a := make(ACL, n)
	for i := range a {
		e := b[aclHeaderSize+i*aclEntrySize:]
		a[i] = ACLEntry{Tag: ACLTag(binary.LittleEndian.Uint16(e)), Perm: binary.LittleEndian.Uint16(e[2:]), ID: binary.LittleEndian.Uint32(e[4:])}
	}
	if err := a.Valid(); err != nil {
		return nil, err
	}
	return a, nil
}

// Marshal encodes a in the xattr format.
func (a ACL) Marshal() []byte {
	b := make([]byte, 0, aclHeaderSize+len(a)*aclEntrySize)
	b = binary.LittleEndian.AppendUint32(b, ACLVersion)
	for _, e := range a {
		b = binary.LittleEndian.AppendUint16(b, uint16(e.Tag))
		b = binary.LittleEndian.AppendUint16(b, e.Perm)
		b = binary.LittleEndian.AppendUint32(b, e.ID)
	}
	return b
}

// Valid checks a as Linux's posix_acl_valid does, plus the undefined-id
// rule of the xattr format.
func (a ACL) Valid() error {
	var seen ACLTag
	var prevID uint32
	needMask := false
	for i, e := range a {
		if e.Perm&^7 != 0 {
			return fmt.Errorf("acl: entry %d: permissions %#o", i, e.Perm)
		}
		switch e.Tag {
		case ACLUserObj, ACLGroupObj, ACLMask, ACLOther:
			if seen >= e.Tag {
				return fmt.Errorf("acl: entry %d: tag %#x out of order or repeated", i, e.Tag)
			}
			if e.ID != ACLUndefinedID {
				return fmt.Errorf("acl: entry %d: tag %#x with id %d", i, e.Tag, e.ID)
			}
		case ACLUser, ACLGroup:
			if seen > e.Tag || seen == e.Tag && e.ID <= prevID || e.ID == ACLUndefinedID {
				return fmt.Errorf("acl: entry %d: tag %#x id %d out of order or repeated", i, e.Tag, e.ID)
			}
			needMask = true
		default:
			return fmt.Errorf("acl: entry %d: unknown tag %#x", i, e.Tag)
		}
		if e.Tag == ACLUser && seen < ACLUserObj || e.Tag == ACLGroup && seen < ACLGroupObj {
			return fmt.Errorf("acl: entry %d: tag %#x before its owner entry", i, e.Tag)
		}
		seen, prevID = e.Tag, e.ID
	}
	if len(a) > 0 && (a.find(ACLUserObj) < 0 || a.find(ACLGroupObj) < 0 || a.find(ACLOther) < 0) {
		return fmt.Errorf("acl: missing USER_OBJ, GROUP_OBJ or OTHER")
	}
	if needMask && a.find(ACLMask) < 0 {
		return fmt.Errorf("acl: named entries without a MASK")
	}
	return nil
}

func (a ACL) find(tag ACLTag) int {
	for i, e := range a {
		if e.Tag == tag {
			return i
		}
	}
	return -1
}

// ACLFromMode returns the minimal ACL equivalent to the permission bits of
// mode.
func ACLFromMode(mode uint32) ACL {
	return ACL{
		{Tag: ACLUserObj, Perm: uint16(mode>>6) & 7, ID: ACLUndefinedID},
		{Tag: ACLGroupObj, Perm: uint16(mode>>3) & 7, ID: ACLUndefinedID},
		{Tag: ACLOther, Perm: uint16(mode) & 7, ID: ACLUndefinedID},
	}
}

// Equiv returns the rwx bits an ACL implies for the mode (owner, group or
// mask, other), and whether the mode says everything the ACL does (no
// named entries and no mask), so that the ACL need not be stored
// (posix_acl_equiv_mode).
func (a ACL) Equiv() (perm uint32, equiv bool) {
	equiv = true
	var mask = -1
	var group uint32
	for _, e := range a {
		switch e.Tag {
		case ACLUserObj:
			perm |= uint32(e.Perm) << 6
		case ACLGroupObj:
			group = uint32(e.Perm)
		case ACLOther:
			perm |= uint32(e.Perm)
		case ACLMask:
			mask = int(e.Perm)
			equiv = false
		default:
			equiv = false
		}
	}
	if mask >= 0 {
		return perm | uint32(mask)<<3, equiv
	}
	return perm | group<<3, equiv
}

// chmod returns a copy of a updated for a new mode (posix_acl_chmod): the
// owner, mask (or group) and other entries take the mode's bits.
func (a ACL) chmod(mode uint32) ACL {
	c := append(ACL(nil), a...)
	groupTag := ACLGroupObj
	if c.find(ACLMask) >= 0 {
		groupTag = ACLMask
	}
	for i := range c {
		switch c[i].Tag {
		case ACLUserObj:
			c[i].Perm = uint16(mode>>6) & 7
		case groupTag:
			c[i].Perm = uint16(mode>>3) & 7
		case ACLOther:
			c[i].Perm = uint16(mode) & 7
		}
	}
	return c
}

// createMasq applies a new object's requested mode to the ACL it inherits
// (posix_acl_create_masq): owner, mask (or group) and other entries are
// and-ed with the mode's bits, and the mode takes the result. It returns
// the access ACL and the mode; the ACL is nil when the mode says it all.
func (a ACL) createMasq(mode uint32) (ACL, uint32) {
	c := append(ACL(nil), a...)
	groupTag := ACLGroupObj
	if c.find(ACLMask) >= 0 {
		groupTag = ACLMask
	}
	for i := range c {
		switch c[i].Tag {
		case ACLUserObj:
			c[i].Perm &= uint16(mode>>6) & 7
			mode = mode&^0o700 | uint32(c[i].Perm)<<6
		case groupTag:
			c[i].Perm &= uint16(mode>>3) & 7
			mode = mode&^0o070 | uint32(c[i].Perm)<<3
		case ACLOther:
			c[i].Perm &= uint16(mode) & 7
			mode = mode&^0o007 | uint32(c[i].Perm)
		}
	}
	if _, equiv := c.Equiv(); equiv {
		return nil, mode
	}
	return c, mode
}

// Permits evaluates the access check of POSIX.1e (posix_acl_permission)
// for c asking want (MayRead|MayWrite|MayExec) of an object owned by
// uid:gid, capabilities aside. The MDT checks every operation with it;
// a client answering access(2) itself must too.
func (a ACL) Permits(c *Cred, uid, gid uint32, want uint16) bool {
	mask := uint16(7)
	if i := a.find(ACLMask); i >= 0 {
		mask = a[i].Perm
	}
	groupFound := false
	for _, e := range a {
		switch e.Tag {
		case ACLUserObj:
			if c.UID == uid {
				return e.Perm&want == want
			}
		case ACLUser:
			if c.UID == e.ID {
				return e.Perm&mask&want == want
			}
		case ACLGroupObj:
			if c.InGroup(gid) {
				groupFound = true
				if e.Perm&mask&want == want {
					return true
				}
			}
		case ACLGroup:
			if c.InGroup(e.ID) {
				groupFound = true
				if e.Perm&mask&want == want {
					return true
				}
			}
		case ACLOther:
			if groupFound {
				return false
			}
			return e.Perm&want == want
		}
	}
	return false
}

// sortACL puts entries in the canonical order (tests and tools build ACLs
// by hand).
func sortACL(a ACL) {
	sort.Slice(a, func(i, j int) bool {
		if a[i].Tag != a[j].Tag {
			return a[i].Tag < a[j].Tag
		}
		return a[i].ID < a[j].ID
	})
}
