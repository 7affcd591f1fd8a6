package mdc

import (
	"github.com/nacrefs/nacre/internal/fid"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

// Cred is the caller of an operation, as every request carries it
// (Lustre's mdt_body fsuid, fsgid, suppgid, capability): the file system
// uid and gid, the supplementary groups, capabilities (Cap* bits), and the
// umask applied to new objects in directories without a default ACL.
type Cred struct {
	UID    uint32
	GID    uint32
	Groups []uint32
	Cap    uint64
	Umask  uint32
}

// Capabilities a credential may hold (Linux's capability numbers as
// bits), as the MDT checks them.
const (
	CapChown          uint64 = 1 << 0
	CapDacOverride    uint64 = 1 << 1
	CapDacReadSearch  uint64 = 1 << 2
	CapFowner         uint64 = 1 << 3
	CapFsetid         uint64 = 1 << 4
	CapLinuxImmutable uint64 = 1 << 9
	CapSysAdmin       uint64 = 1 << 21
	CapMknod          uint64 = 1 << 27
	// CapRoot is every capability root has.
	CapRoot = CapChown | CapDacOverride | CapDacReadSearch | CapFowner | CapFsetid | CapLinuxImmutable | CapSysAdmin | CapMknod
)

// Root is uid 0 with every capability.
func Root() Cred { return Cred{Cap: CapRoot} }

// Attr is a file's attributes as the MDT returns them. Times are
// nanoseconds since the epoch; a regular file's Size and Blocks are its
// lazy size (LSOM), which the OSTs' objects may have outgrown.
type Attr struct {
	FID    fid.FID
	Mode   uint32 // S_IFMT type and permission bits, Linux's values
	UID    uint32
	GID    uint32
	Nlink  uint32
	Flags  uint32
	Rdev   uint64
	Size   uint64
	Blocks uint64
	Atime  int64
	Mtime  int64
	Ctime  int64
	Crtime int64
	// NoXattrs: the MDT says the file has no extended attributes at all
	// (false when it does not know).
	NoXattrs bool
}

// SetAttr bits: which fields of a SetAttr apply (the MDT's values).
const (
	AttrMode     uint32 = 1 << 0
	AttrUID      uint32 = 1 << 1
	AttrGID      uint32 = 1 << 2
	AttrSize     uint32 = 1 << 3 // the size the client cut the objects to
	AttrAtime    uint32 = 1 << 4
	AttrMtime    uint32 = 1 << 5
	AttrCtime    uint32 = 1 << 6
	AttrAtimeNow uint32 = 1 << 7
	AttrMtimeNow uint32 = 1 << 8
	AttrFlags    uint32 = 1 << 9
	AttrBlocks   uint32 = 1 << 10
	// AttrOpenWrite: the caller holds the file open for write (ftruncate
	// after a chmod).
	AttrOpenWrite uint32 = 1 << 11
	// AttrRestore: the HSM copytool puts the times of a file it restored
	// back, whatever its immutable and append-only flags (CAP_SYS_ADMIN).
	AttrRestore uint32 = 1 << 12
)

// OpenRestore is the open flag of the HSM copytool's open of a released
// file to write its data back, whatever its immutable and append-only
// flags (CAP_SYS_ADMIN).
const OpenRestore = 0x800000000000

// SetAttr is a setattr request: Valid says which fields apply.
type SetAttr struct {
	Valid  uint32
	Mode   uint32
	UID    uint32
	GID    uint32
	Size   uint64
	Blocks uint64
	Atime  int64
	Mtime  int64
	Ctime  int64
	Flags  uint32
}

// DirEntry is one directory entry: Type is Linux's DT_* value; Cookie is
// the entry's own position (ReadPage from it starts with the entry).
type DirEntry struct {
	Name   string
	FID    fid.FID
	Type   uint8
	Cookie uint64
}

// DirEnd is the cookie after a directory's last entry (Lustre's
// MDS_DIR_END_OFF).
const DirEnd uint64 = 0xfffffffffffffffe

// Statfs is the MDT's inode counts and the space of the file system
// holding it. A file system's space is the OSTs': lfs df asks each OST
// (OST_STATFS through the OSC) and sums; this is the MDT's part.
type Statfs struct {
	Files, Ffree, Blocks, Bfree, Bavail uint64
	Bsize, Namelen                      uint32
}

// FLDEntry says which target holds a range of FID sequences: [Start, End)
// on the MDT (Type 0) or OST (Type 1) of Index.
type FLDEntry struct {
	Start, End uint64
	Index      uint32
	Type       uint8
}

// Rename flags (renameat2's).
const (
	RenameNoReplace uint32 = 1 << 0
	RenameExchange  uint32 = 1 << 1
)

// Xattr flags (setxattr's).
const (
	XattrCreate  = 1
	XattrReplace = 2
)

// Intent operations (Lustre's IT_* bits) for Client.Enqueue.
const (
	ItOpen    uint32 = 1 << 0
	ItCreat   uint32 = 1 << 1
	ItGetattr uint32 = 1 << 3
	ItLookup  uint32 = 1 << 4
)

func fidTo(f fid.FID) *mdsv1.FID {
	if f.IsZero() {
		return nil
	}
	return &mdsv1.FID{Seq: f.Seq, Oid: f.Oid, Ver: f.Ver}
}

func fidFrom(w *mdsv1.FID) fid.FID {
	if w == nil {
		return fid.FID{}
	}
	return fid.FID{Seq: w.Seq, Oid: w.Oid, Ver: w.Ver}
}

func credTo(c Cred) *mdsv1.Cred {
	return &mdsv1.Cred{Uid: c.UID, Gid: c.GID, Groups: c.Groups, Cap: c.Cap, Umask: c.Umask}
}

func attrFrom(w *mdsv1.Attr) Attr {
	if w == nil {
		return Attr{}
	}
	return Attr{FID: fidFrom(w.Fid), Mode: w.Mode, UID: w.Uid, GID: w.Gid, Nlink: w.Nlink, Flags: w.Flags, Rdev: w.Rdev,
		Size: w.Size, Blocks: w.Blocks, Atime: w.Atime, Mtime: w.Mtime, Ctime: w.Ctime, Crtime: w.Crtime, NoXattrs: w.NoXattrs}
}
