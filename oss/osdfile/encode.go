package osdfile

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/oss/osd"
)

var (
	le     = binary.LittleEndian
	crcTab = crc32.MakeTable(crc32.Castagnoli)
)

// attrSize is the length of an encoded Attr (putAttr): size, three times,
// mode, uid, gid, stripe index, layout version, valid mask, parent FID.
// Blocks is not stored; it comes from the file.
const attrSize = 72

// storedBits are the Attr bits an object can carry.
const storedBits = osd.AttrAll

var (
	minTime = time.Unix(0, math.MinInt64+1)
	maxTime = time.Unix(0, math.MaxInt64)
)

// timeOK reports whether t can be stored: the zero time, or an instant a
// signed 64-bit count of nanoseconds since 1970 can hold.
func timeOK(t time.Time) bool {
	return t.IsZero() || !t.Before(minTime) && !t.After(maxTime)
}

func timeToNs(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixNano()
}

func nsToTime(ns int64) time.Time {
	if ns == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

func putAttr(b []byte, a *osd.Attr) {
	_ = b[attrSize-1]
	le.PutUint64(b[0:], a.Size)
	le.PutUint64(b[8:], uint64(timeToNs(a.Mtime)))
	le.PutUint64(b[16:], uint64(timeToNs(a.Atime)))
	le.PutUint64(b[24:], uint64(timeToNs(a.Ctime)))
	le.PutUint32(b[32:], a.Mode)
	le.PutUint32(b[36:], a.UID)
	le.PutUint32(b[40:], a.GID)
	le.PutUint32(b[44:], a.StripeIndex)
	le.PutUint32(b[48:], a.LayoutVersion)
	le.PutUint32(b[52:], uint32(a.Valid&^osd.AttrBlocks))
	a.ParentFID.Put(b[56:])
}

func getAttr(b []byte) (osd.Attr, error) {
	if len(b) < attrSize {
		return osd.Attr{}, fmt.Errorf("attributes: %d bytes, want %d", len(b), attrSize)
	}
	valid := osd.AttrMask(le.Uint32(b[52:]))
	if valid&^storedBits != 0 {
		return osd.Attr{}, fmt.Errorf("attributes: unknown valid bits %#x", uint32(valid&^storedBits))
	}
	parent, _ := fid.Get(b[56:])
	return osd.Attr{
		Size:          le.Uint64(b[0:]),
		Mtime:         nsToTime(int64(le.Uint64(b[8:]))),
		Atime:         nsToTime(int64(le.Uint64(b[16:]))),
		Ctime:         nsToTime(int64(le.Uint64(b[24:]))),
		Mode:          le.Uint32(b[32:]),
		UID:           le.Uint32(b[36:]),
		GID:           le.Uint32(b[40:]),
		StripeIndex:   le.Uint32(b[44:]),
		LayoutVersion: le.Uint32(b[48:]),
		Valid:         valid,
		ParentFID:     parent,
	}, nil
}

// mergeAttr sets in dst the fields a.Valid names, except Size and Blocks,
// which the caller handles (Size truncates; Blocks is derived).
func mergeAttr(dst *osd.Attr, a *osd.Attr) {
	v := a.Valid
	if v&osd.AttrMtime != 0 {
		dst.Mtime = a.Mtime
	}
	if v&osd.AttrAtime != 0 {
		dst.Atime = a.Atime
	}
	if v&osd.AttrCtime != 0 {
		dst.Ctime = a.Ctime
	}
	if v&osd.AttrMode != 0 {
		dst.Mode = a.Mode
	}
	if v&osd.AttrUID != 0 {
		dst.UID = a.UID
	}
	if v&osd.AttrGID != 0 {
		dst.GID = a.GID
	}
	if v&osd.AttrParent != 0 {
		dst.ParentFID = a.ParentFID
		dst.StripeIndex = a.StripeIndex
	}
	if v&osd.AttrLayoutVersion != 0 {
		dst.LayoutVersion = a.LayoutVersion
	}
	dst.Valid |= v &^ (osd.AttrSize | osd.AttrBlocks)
}

// The lma xattr: the object's identity and attributes, kept on its file.
//
//	0   u32 magic "NLMA"
//	4   u16 version (1)
//	6   u16 flags (0)
//	8   16  the object's own FID
//	24  u64 LSN of the last journal record applied to this file
//	32  72  attributes (putAttr)
//	104 u32 crc32c of bytes 0..103
const (
	lmaMagic   = 0x414d4c4e // "NLMA"
	lmaVersion = 1
	lmaSize    = 108
)

func encodeLMA(b []byte, f fid.FID, lsn uint64, a *osd.Attr) []byte {
	b = b[:lmaSize]
	clear(b)
	le.PutUint32(b[0:], lmaMagic)
	le.PutUint16(b[4:], lmaVersion)
	f.Put(b[8:])
	le.PutUint64(b[24:], lsn)
	putAttr(b[32:], a)
	le.PutUint32(b[104:], crc32.Checksum(b[:104], crcTab))
	return b
}

func decodeLMA(b []byte, want fid.FID) (lsn uint64, a osd.Attr, err error) {
	if len(b) != lmaSize {
		return 0, a, fmt.Errorf("lma: %d bytes, want %d", len(b), lmaSize)
	}
	if m := le.Uint32(b[0:]); m != lmaMagic {
		return 0, a, fmt.Errorf("lma: bad magic %#x", m)
	}
	if v := le.Uint16(b[4:]); v != lmaVersion {
		return 0, a, fmt.Errorf("lma: unknown version %d", v)
	}
	if got, want := le.Uint32(b[104:]), crc32.Checksum(b[:104], crcTab); got != want {
		return 0, a, fmt.Errorf("lma: checksum %#x, want %#x", got, want)
	}
	if self, _ := fid.Get(b[8:]); self != want {
		return 0, a, fmt.Errorf("lma: belongs to %v", self)
	}
	a, err = getAttr(b[32:])
	if err != nil {
		return 0, a, fmt.Errorf("lma: %w", err)
	}
	return le.Uint64(b[24:]), a, nil
}
