package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// NiobufSize is the size of one encoded Niobuf. The layout, little-endian,
// the same as Lustre's struct niobuf_remote:
//
//	offset size field
//	     0    8 offset in the object, bytes
//	     8    4 length, bytes
//	    12    4 flags (NiobufFlags)
const NiobufSize = 16

// MaxBulkSize is the largest sum of lengths a niobuf vector may describe,
// 16 MiB: the largest bulk RPC Nacre allows (4 MiB is the default).
const MaxBulkSize = 16 << 20

// NiobufFlags qualify the transfer of one extent. The values are Lustre's
// OBD_BRW_* bits; the direction of the transfer is the opcode's (OSTRead,
// OSTWrite), not a flag, so that it has one encoding.
type NiobufFlags uint32

// The niobuf flags. Decoders reject any other bit.
const (
	// NiobufSync asks the server to commit the extent before replying
	// (OBD_BRW_SYNC).
	NiobufSync NiobufFlags = 0x08
	// NiobufFromGrant says the client wrote the extent against space the
	// server granted it (OBD_BRW_FROM_GRANT).
	NiobufFromGrant NiobufFlags = 0x20
	// NiobufGranted is set by the server on extents it accepted against
	// the client's grant (OBD_BRW_GRANTED).
	NiobufGranted NiobufFlags = 0x40
	// NiobufNoCache asks the server not to keep the extent in its cache
	// (OBD_BRW_NOCACHE).
	NiobufNoCache NiobufFlags = 0x80
	// NiobufNoQuota says the write is exempt from quota, as for root
	// (OBD_BRW_NOQUOTA).
	NiobufNoQuota NiobufFlags = 0x100
	// NiobufSrvLock asks the server to take the extent lock itself instead
	// of the client holding one (OBD_BRW_SRVLOCK).
	NiobufSrvLock NiobufFlags = 0x200

	niobufFlagsAll = NiobufSync | NiobufFromGrant | NiobufGranted | NiobufNoCache | NiobufNoQuota | NiobufSrvLock
)

// Niobuf is a remote niobuf: one extent of an object that a bulk RPC moves,
// Lustre's niobuf_remote. A bulk request carries a vector of them in its
// body; the server maps each to its storage and moves the bytes by LNet GET
// (write) or PUT (read) against the client's bulk MD, in vector order.
//
// A valid vector has extents of non-zero length, whose end (Offset+Len) fits
// in a uint64, sorted by offset and not overlapping (touching is allowed),
// with only the flags defined here and a total length of at most
// MaxBulkSize.
type Niobuf struct {
	Offset uint64      // byte offset in the object
	Len    uint32      // byte count, never 0
	Flags  NiobufFlags // only the NiobufFlags defined in this package
}

// End returns the offset just past the extent, Offset+Len. It does not
// check for overflow; a Niobuf from ParseNiobufs never overflows.
func (n Niobuf) End() uint64 { return n.Offset + uint64(n.Len) }

// AppendNiobufs appends the encoding of the vector n to b, NiobufSize bytes
// per niobuf, and returns the extended slice. It checks n by the rules
// ParseNiobufs applies (except the caller's count bound), so it never
// writes a vector its peer would reject. On error it returns b unchanged and
// an error wrapping ErrBadField or ErrTooLong that says which niobuf is
// wrong. It allocates only if b lacks the capacity.
func AppendNiobufs(b []byte, n []Niobuf) ([]byte, error) {
	if err := checkNiobufs(n); err != nil {
		return b, err
	}
	le := binary.LittleEndian
	for _, nb := range n {
		b = le.AppendUint64(b, nb.Offset)
		b = le.AppendUint32(b, nb.Len)
		b = le.AppendUint32(b, uint32(nb.Flags))
	}
	return b, nil
}

// ParseNiobufs decodes a vector of niobufs that takes exactly the whole of
// b. It allocates the returned slice, once, after checking the count; an
// empty b gives an empty vector (nil), which bulk handlers should refuse
// themselves. On error it returns nil and an error wrapping:
//
//   - ErrShort: len(b) is not a multiple of NiobufSize.
//   - ErrTooLong: more than maxCount niobufs, or a total length over MaxBulkSize.
//   - ErrBadField: a niobuf with zero length, an end past 2^64-1, or
//     unknown flags, or one that starts before the previous one (unsorted)
//     or before the previous one's end (overlapping).
func ParseNiobufs(b []byte, maxCount int) ([]Niobuf, error) {
	if len(b)%NiobufSize != 0 {
		return nil, fmt.Errorf("%w: niobuf vector of %d bytes is not a multiple of %d",
			ErrShort, len(b), NiobufSize)
	}
	count := len(b) / NiobufSize
	if count > maxCount {
		return nil, fmt.Errorf("%w: %d niobufs, at most %d", ErrTooLong, count, maxCount)
	}
	if count == 0 {
		return nil, nil
	}
	n := make([]Niobuf, count)
	le := binary.LittleEndian
	for i := range n {
		p := b[i*NiobufSize:]
		n[i] = Niobuf{
			Offset: le.Uint64(p),
			Len:    le.Uint32(p[8:]),
			Flags:  NiobufFlags(le.Uint32(p[12:])),
		}
	}
	if err := checkNiobufs(n); err != nil {
		return nil, err
	}
	return n, nil
}

// checkNiobufs applies the vector rules shared by AppendNiobufs and
// ParseNiobufs.
func checkNiobufs(n []Niobuf) error {
	var total uint64
	for i, nb := range n {
		switch {
		case nb.Len == 0:
			return fmt.Errorf("%w: niobuf %d at %d has length 0", ErrBadField, i, nb.Offset)
		case nb.Offset > math.MaxUint64-uint64(nb.Len):
			return fmt.Errorf("%w: niobuf %d at %d length %d ends past 2^64-1", ErrBadField, i, nb.Offset, nb.Len)
		case nb.Flags&^niobufFlagsAll != 0:
			return fmt.Errorf("%w: niobuf %d at %d has unknown flags %#x", ErrBadField, i, nb.Offset, uint32(nb.Flags&^niobufFlagsAll))
		}
		if i > 0 {
			prev := n[i-1]
			switch {
			case nb.Offset < prev.Offset:
				return fmt.Errorf("%w: niobuf %d at %d is unsorted: it starts before niobuf %d at %d",
					ErrBadField, i, nb.Offset, i-1, prev.Offset)
			case nb.Offset < prev.End():
				return fmt.Errorf("%w: niobuf %d [%d,%d) overlaps niobuf %d [%d,%d)",
					ErrBadField, i, nb.Offset, nb.End(), i-1, prev.Offset, prev.End())
			}
		}
		total += uint64(nb.Len)
		if total > MaxBulkSize {
			return fmt.Errorf("%w: niobufs 0..%d move %d bytes, at most %d", ErrTooLong, i, total, MaxBulkSize)
		}
	}
	return nil
}
