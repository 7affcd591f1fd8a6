package mdd

import (
	"encoding/binary"
	"fmt"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
)

// File types and mode bits, Linux's values (they cross the wire).
const (
	S_IFMT   = 0o170000
	S_IFSOCK = 0o140000
	S_IFLNK  = 0o120000
	S_IFREG  = 0o100000
	S_IFBLK  = 0o060000
	S_IFDIR  = 0o040000
	S_IFCHR  = 0o020000
	S_IFIFO  = 0o010000
	S_ISUID  = 0o4000
	S_ISGID  = 0o2000
	S_ISVTX  = 0o1000
	// PermMask is every bit a chmod may set.
	PermMask = 0o7777
)

// DType is a directory entry's file type, as readdir returns it (Linux's
// DT_* values).
type DType uint8

// The entry types.
const (
	DTFifo DType = 1
	DTChr  DType = 2
	DTDir  DType = 4
	DTBlk  DType = 6
	DTReg  DType = 8
	DTLnk  DType = 10
	DTSock DType = 12
)

// dtype returns the entry type of mode, and false for an unknown type.
func dtype(mode uint32) (DType, bool) {
	switch mode & S_IFMT {
	case S_IFREG:
		return DTReg, true
	case S_IFDIR:
		return DTDir, true
	case S_IFLNK:
		return DTLnk, true
	case S_IFIFO:
		return DTFifo, true
	case S_IFSOCK:
		return DTSock, true
	case S_IFCHR:
		return DTChr, true
	case S_IFBLK:
		return DTBlk, true
	}
	return 0, false
}

func isDir(mode uint32) bool { return mode&S_IFMT == S_IFDIR }

// Attr is an inode's attributes as the MDT keeps and returns them.
type Attr struct {
	FID    fid.FID
	Mode   uint32 // S_IFMT type and PermMask bits
	UID    uint32
	GID    uint32
	Nlink  uint32 // 0 for an orphan (unlinked, still open)
	Flags  uint32 // inode flags (chattr); immutable and append-only enforced here
	Rdev   uint64 // character and block devices
	Size   uint64 // directories (4096), symlinks (target length); regular files: the LSOM size
	Blocks uint64 // 512-byte blocks; regular files: the LSOM blocks
	Atime  int64  // nanoseconds since the epoch
	Mtime  int64
	Ctime  int64
	Crtime int64 // creation (birth) time
	// NoXattrs says the inode has no extended attributes at all (known
	// for inodes made since format 2; false when unknown). Not stored:
	// derived from the inode's flags.
	NoXattrs bool
}

// inode is the stored record: the attributes, internal flags and, for a
// symlink, its target.
type inode struct {
	Attr
	iflags uint8 // inoACL...
	target string
}

// Internal inode flags: they save a read of the ACL xattrs on every
// permission check of an inode that has none, and the search for its
// other extended attributes when it is destroyed.
const (
	inoACL        uint8 = 1 << 0 // has system.posix_acl_access
	inoDefaultACL uint8 = 1 << 1 // has system.posix_acl_default
	// inoXattrsTracked is set on the inodes made since inoXattrs exists
	// (older ones may have extended attributes without it).
	inoXattrsTracked uint8 = 1 << 2
	// inoXattrs: an extended attribute other than the ACLs was set (not
	// cleared when removed: it only says where to look).
	inoXattrs uint8 = 1 << 3
	// inoLinkable: an O_TMPFILE file made without O_EXCL, which a link
	// may give its first name although it has none (the kernel's
	// I_LINKABLE); cleared by that link.
	inoLinkable uint8 = 1 << 4
	inoAll            = inoACL | inoDefaultACL | inoXattrsTracked | inoXattrs | inoLinkable
)

// mayHaveXattrs reports whether n may have extended attribute records.
func (n *inode) mayHaveXattrs() bool {
	return n.iflags&inoXattrsTracked == 0 || n.iflags&(inoACL|inoDefaultACL|inoXattrs) != 0
}

const (
	recVersion     = 1
	inodeFixedSize = 2 + fid.Size + 5*4 + 2*8 + 4*8 + 2
	// DirSize is the size a directory reports (one ldiskfs block).
	DirSize = 4096
	// MaxSymlink bounds a symlink target (PATH_MAX less the NUL).
	MaxSymlink = 4095
)

func (n *inode) marshal() []byte {
	le := binary.LittleEndian
	b := make([]byte, 0, inodeFixedSize+len(n.target))
	b = append(b, recVersion, n.iflags)
	b, _ = n.FID.AppendBinary(b)
	b = le.AppendUint32(b, n.Mode)
	b = le.AppendUint32(b, n.UID)
	b = le.AppendUint32(b, n.GID)
	b = le.AppendUint32(b, n.Nlink)
	b = le.AppendUint32(b, n.Flags)
	b = le.AppendUint64(b, n.Rdev)
	b = le.AppendUint64(b, n.Size)
	b = le.AppendUint64(b, uint64(n.Atime))
	b = le.AppendUint64(b, uint64(n.Mtime))
	b = le.AppendUint64(b, uint64(n.Ctime))
	b = le.AppendUint64(b, uint64(n.Crtime))
	b = le.AppendUint16(b, uint16(len(n.target)))
	return append(b, n.target...)
}

// decodeInode reads an inode record. It is strict: a known version, a known
// file type, mode bits within S_IFMT|PermMask, a target exactly for
// symlinks, and no trailing bytes.
func decodeInode(b []byte) (inode, error) {
	le := binary.LittleEndian
	if len(b) < inodeFixedSize || b[0] != recVersion {
		return inode{}, fmt.Errorf("inode record: %d bytes, version %v", len(b), first(b))
	}
	n := inode{iflags: b[1]}
	n.FID, _ = fid.Get(b[2:])
	p := b[2+fid.Size:]
	n.Mode = le.Uint32(p)
	n.UID = le.Uint32(p[4:])
	n.GID = le.Uint32(p[8:])
	n.Nlink = le.Uint32(p[12:])
	n.Flags = le.Uint32(p[16:])
	n.Rdev = le.Uint64(p[20:])
	n.Size = le.Uint64(p[28:])
	n.Atime = int64(le.Uint64(p[36:]))
	n.Mtime = int64(le.Uint64(p[44:]))
	n.Ctime = int64(le.Uint64(p[52:]))
	n.Crtime = int64(le.Uint64(p[60:]))
	tl := int(le.Uint16(p[68:]))
	if len(b) != inodeFixedSize+tl {
		return inode{}, fmt.Errorf("inode record: %d bytes for a %d-byte target", len(b), tl)
	}
	n.target = string(b[inodeFixedSize:])
	if _, ok := dtype(n.Mode); !ok || n.Mode&^(S_IFMT|PermMask) != 0 || n.iflags&^inoAll != 0 {
		return inode{}, fmt.Errorf("inode record: mode %#o", n.Mode)
	}
	if (n.Mode&S_IFMT == S_IFLNK) != (tl > 0) || tl > MaxSymlink {
		return inode{}, fmt.Errorf("inode record: mode %#o with a %d-byte target", n.Mode, tl)
	}
	return n, nil
}

func first(b []byte) any {
	if len(b) == 0 {
		return "none"
	}
	return b[0]
}

// dirent value: the child FID and its type.
func marshalDirent(child fid.FID, t DType) []byte {
	b, _ := child.AppendBinary(make([]byte, 0, fid.Size+1))
	return append(b, byte(t))
}

func decodeDirent(b []byte) (fid.FID, DType, error) {
	if len(b) != fid.Size+1 {
		return fid.FID{}, 0, fmt.Errorf("dirent record: %d bytes", len(b))
	}
	f, _ := fid.Get(b)
	t := DType(b[fid.Size])
	switch t {
	case DTFifo, DTChr, DTDir, DTBlk, DTReg, DTLnk, DTSock:
	default:
		return fid.FID{}, 0, fmt.Errorf("dirent record: type %d", t)
	}
	return f, t, nil
}

// LSOM is the lazy size on MDT of a regular file: the size and blocks a
// client reported at its last close or truncate. It may be stale; Lustre
// tools use it where an exact size is not needed.
type LSOM struct {
	Size   uint64
	Blocks uint64
	Flags  uint8 // SOMStrict, SOMStale, SOMLazy
}

// LSOM flags (Lustre's SOM_FL_*).
const (
	SOMStrict uint8 = 0x1
	SOMStale  uint8 = 0x2
	SOMLazy   uint8 = 0x4
)

func (l LSOM) marshal() []byte {
	b := []byte{recVersion, l.Flags}
	b = binary.LittleEndian.AppendUint64(b, l.Size)
	return binary.LittleEndian.AppendUint64(b, l.Blocks)
}

func decodeLSOM(b []byte) (LSOM, error) {
	if len(b) != 18 || b[0] != recVersion || b[1]&^(SOMStrict|SOMStale|SOMLazy) != 0 {
		return LSOM{}, fmt.Errorf("lsom record: %d bytes, header % x", len(b), b[:min(2, len(b))])
	}
	return LSOM{Flags: b[1], Size: binary.LittleEndian.Uint64(b[2:]), Blocks: binary.LittleEndian.Uint64(b[10:])}, nil
}

// HSM is a file's hierarchical storage state (Lustre's HSM attributes):
// flags HSMExists... and the archive it lives in. Stored here; the HSM
// coordinator and copytools give it meaning.
type HSM struct {
	Flags     uint32
	ArchiveID uint32
	// DataVersion counts the changes of the file's data: a close after
	// writes and a truncate bump it. ArchivedVersion is the DataVersion
	// the archive copy holds (set when an archive completes): release
	// needs the two equal.
	DataVersion, ArchivedVersion uint64
}

// HSM flags (Lustre's HS_*).
const (
	HSMExists    uint32 = 0x01
	HSMDirty     uint32 = 0x02
	HSMReleased  uint32 = 0x04
	HSMArchived  uint32 = 0x08
	HSMNoRelease uint32 = 0x10
	HSMNoArchive uint32 = 0x20
	HSMLost      uint32 = 0x40
	hsmAll              = HSMExists | HSMDirty | HSMReleased | HSMArchived | HSMNoRelease | HSMNoArchive | HSMLost
)

func (h HSM) marshal() []byte {
	b := []byte{recVersion}
	b = binary.LittleEndian.AppendUint32(b, h.Flags)
	b = binary.LittleEndian.AppendUint32(b, h.ArchiveID)
	b = binary.LittleEndian.AppendUint64(b, h.DataVersion)
	return binary.LittleEndian.AppendUint64(b, h.ArchivedVersion)
}

func decodeHSM(b []byte) (HSM, error) {
	// 9 bytes: a record written before data versions (both 0).
	if (len(b) != 9 && len(b) != 25) || b[0] != recVersion {
		return HSM{}, fmt.Errorf("hsm record: %d bytes", len(b))
	}
	h := HSM{Flags: binary.LittleEndian.Uint32(b[1:]), ArchiveID: binary.LittleEndian.Uint32(b[5:])}
	if len(b) == 25 {
		h.DataVersion, h.ArchivedVersion = binary.LittleEndian.Uint64(b[9:]), binary.LittleEndian.Uint64(b[17:])
	}
	if h.Flags&^hsmAll != 0 {
		return HSM{}, fmt.Errorf("hsm record: flags %#x", h.Flags)
	}
	return h, nil
}

// DestroyRecord is an entry of the destroy log: a file whose last link and
// last open are gone, and the layout whose OST objects must be destroyed.
type DestroyRecord struct {
	ID     uint64 // increasing, never reused
	FID    fid.FID
	Layout layout.Layout
}

func (d *DestroyRecord) marshal() ([]byte, error) {
	b, _ := d.FID.AppendBinary([]byte{recVersion})
	lb, err := d.Layout.Marshal()
	if err != nil {
		return nil, err
	}
	return append(b, lb...), nil
}

func decodeDestroy(id uint64, b []byte) (DestroyRecord, error) {
	if len(b) < 1+fid.Size || b[0] != recVersion {
		return DestroyRecord{}, fmt.Errorf("destroy record %d: %d bytes", id, len(b))
	}
	f, _ := fid.Get(b[1:])
	l, err := layout.Unmarshal(b[1+fid.Size:])
	if err != nil {
		return DestroyRecord{}, fmt.Errorf("destroy record %d: %w", id, err)
	}
	return DestroyRecord{ID: id, FID: f, Layout: l}, nil
}

// FLDEntry is one range of the FID location database: sequences
// [Start, End) live on target Index of type Type.
type FLDEntry struct {
	Start, End uint64
	Index      uint32
	Type       TargetType
}

// TargetType says what kind of target a sequence range belongs to.
type TargetType uint8

// The target types (Lustre's LU_SEQ_RANGE_MDT / _OST).
const (
	TargetMDT TargetType = 0
	TargetOST TargetType = 1
)

func (e FLDEntry) marshal() []byte {
	b := []byte{recVersion, byte(e.Type)}
	b = binary.LittleEndian.AppendUint64(b, e.End)
	return binary.LittleEndian.AppendUint32(b, e.Index)
}

func decodeFLD(start uint64, b []byte) (FLDEntry, error) {
	if len(b) != 14 || b[0] != recVersion || b[1] > byte(TargetOST) {
		return FLDEntry{}, fmt.Errorf("fld record: %d bytes", len(b))
	}
	e := FLDEntry{Start: start, Type: TargetType(b[1]), End: binary.LittleEndian.Uint64(b[2:]), Index: binary.LittleEndian.Uint32(b[10:])}
	if e.End <= e.Start {
		return FLDEntry{}, fmt.Errorf("fld record: empty range [%#x, %#x)", e.Start, e.End)
	}
	return e, nil
}

func decodeU64(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("counter: %d bytes", len(b))
	}
	return binary.LittleEndian.Uint64(b), nil
}

// clampName keeps log messages short for names that are too long.
func clampName(s string) string {
	if len(s) > 64 {
		return s[:61] + "..."
	}
	return s
}
