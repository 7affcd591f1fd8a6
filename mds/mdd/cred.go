package mdd

import "slices"

// Capabilities a credential may hold (Linux's capability numbers as bits).
const (
	CapChown          uint64 = 1 << 0  // chown to any uid, chgrp to any gid
	CapDacOverride    uint64 = 1 << 1  // bypass rwx checks (x on files needs some x bit)
	CapDacReadSearch  uint64 = 1 << 2  // bypass read and directory search checks
	CapFowner         uint64 = 1 << 3  // act as the owner: chmod, utimes, sticky, ACLs
	CapFsetid         uint64 = 1 << 4  // keep setgid when not in the group
	CapLinuxImmutable uint64 = 1 << 9  // set the immutable and append-only flags
	CapSysAdmin       uint64 = 1 << 21 // trusted.* xattrs
	CapMknod          uint64 = 1 << 27 // create device nodes
	// CapRoot is every capability root has.
	CapRoot = CapChown | CapDacOverride | CapDacReadSearch | CapFowner | CapFsetid | CapLinuxImmutable | CapSysAdmin | CapMknod
)

// Cred is the caller of an operation, as the client's request carries it
// (Lustre's lu_ucred): fsuid, fsgid, supplementary groups, capabilities,
// and the umask to apply to new objects in directories without a default
// ACL. The Store only reads it.
type Cred struct {
	UID    uint32
	GID    uint32
	Groups []uint32
	Cap    uint64
	Umask  uint32
}

// Root is a credential with uid 0 and every capability.
func Root() Cred { return Cred{Cap: CapRoot} }

// Has reports whether c holds capability cap.
func (c *Cred) Has(cap uint64) bool { return c.Cap&cap == cap }

// InGroup reports whether gid is c's fsgid or one of its groups.
func (c *Cred) InGroup(gid uint32) bool { return c.GID == gid || slices.Contains(c.Groups, gid) }
