package fid

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// FID is a Lustre File IDentifier (struct lu_fid). The zero FID names nothing.
//
// Its fields are those of internal/layout.FID, in the same order, so a FID is
// assignable to and from that type without conversion.
type FID struct {
	Seq uint64 // sequence: which server minted it and from which range
	Oid uint32 // object id within the sequence
	Ver uint32 // version; zero for every FID Nacre mints (IDIF FIDs use it for id bits 48..63)
}

// Size is the length of the binary form of a FID.
const Size = 16

// Reserved sequences (enum fid_seq in Lustre's lustre_idl.h). Only the ranges
// an object storage target meets are listed.
const (
	// SeqOSTMDT0 is the legacy sequence ("group 0") of objects created on
	// OSTs for MDT0 before OSTs had FIDs. Such objects are named by their
	// IDIF FID in memory.
	SeqOSTMDT0 uint64 = 0
	// SeqIDIF..SeqIDIFMax are the IDIF sequences: a legacy OST object id
	// (48 bits) and the OST index packed into a FID, see IDIF.
	SeqIDIF    uint64 = 0x100000000
	SeqIDIFMax uint64 = 0x1ffffffff
	// SeqStart is the first sequence of the normal FID space (1<<33); the
	// sequences just above it are reserved for local files and the root.
	SeqStart uint64 = 0x200000000
	// SeqRoot holds the root directory's FID on MDT0 ([0x200000007:0x1:0x0]).
	SeqRoot uint64 = 0x200000007
	// SeqNormal is the first sequence the sequence controller hands out to
	// servers and clients; ordinary files and OST objects live at or above it.
	SeqNormal uint64 = 0x200000400
	// SeqLOVDefault is the all-ones sequence Lustre uses to mean "the
	// default layout"; it names no object.
	SeqLOVDefault uint64 = 0xffffffffffffffff
)

// MaxIDIFObjectID bounds the legacy object ids an IDIF FID can carry (48 bits).
const MaxIDIFObjectID = 1<<48 - 1

// ErrSyntax is wrapped by every error from Parse, UnmarshalText,
// UnmarshalBinary and Get.
var ErrSyntax = errors.New("fid: invalid FID")

// IsZero reports whether f is the zero FID, which names nothing.
func (f FID) IsZero() bool { return f == FID{} }

// IsIDIF reports whether f is an IDIF FID: a legacy OST object mapped into the
// FID space (Lustre's fid_is_idif).
func (f FID) IsIDIF() bool { return f.Seq >= SeqIDIF && f.Seq <= SeqIDIFMax }

// IsNormal reports whether f lives in the normal FID space handed out by the
// sequence controller (Lustre's fid_is_norm).
func (f FID) IsNormal() bool { return f.Seq >= SeqNormal && f.Seq != SeqLOVDefault }

// IsSane reports whether f can name an object at all (Lustre's fid_is_sane,
// without IGIF, which Nacre never uses): an IDIF FID, or a FID at or above
// SeqStart with version 0, or one of the small reserved sequences 1..11.
func (f FID) IsSane() bool {
	switch {
	case f.IsIDIF():
		return true
	case f.Seq >= SeqStart:
		return f.Ver == 0 && f.Seq != SeqLOVDefault
	default:
		return f.Seq > SeqOSTMDT0 && f.Seq <= 11
	}
}

// IDIF returns the IDIF FID of legacy object id on OST ostIdx (Lustre's
// fid_idif_seq and ostid_to_fid). It fails if id needs more than 48 bits or
// ostIdx more than 16.
func IDIF(id uint64, ostIdx uint32) (FID, error) {
	if id > MaxIDIFObjectID || ostIdx > 0xffff {
		return FID{}, fmt.Errorf("%w: IDIF of object %#x on OST index %#x: out of range", ErrSyntax, id, ostIdx)
	}
	return FID{Seq: SeqIDIF | uint64(ostIdx)<<16 | (id>>32)&0xffff, Oid: uint32(id), Ver: uint32(id >> 48)}, nil
}

// Compare orders FIDs by sequence, then object id, then version (Lustre's
// lu_fid_cmp). It returns -1, 0 or +1.
func Compare(a, b FID) int {
	switch {
	case a.Seq != b.Seq:
		return cmp3(a.Seq < b.Seq)
	case a.Oid != b.Oid:
		return cmp3(a.Oid < b.Oid)
	case a.Ver != b.Ver:
		return cmp3(a.Ver < b.Ver)
	}
	return 0
}

func cmp3(less bool) int {
	if less {
		return -1
	}
	return 1
}

// String prints f as Lustre's DFID does: "[0x200000400:0x1:0x0]".
func (f FID) String() string {
	b := make([]byte, 0, 40)
	return string(f.appendText(b))
}

func (f FID) appendText(b []byte) []byte {
	b = append(b, "[0x"...)
	b = strconv.AppendUint(b, f.Seq, 16)
	b = append(b, ":0x"...)
	b = strconv.AppendUint(b, uint64(f.Oid), 16)
	b = append(b, ":0x"...)
	b = strconv.AppendUint(b, uint64(f.Ver), 16)
	return append(b, ']')
}

// AppendText appends f as String prints it (encoding.TextAppender).
func (f FID) AppendText(b []byte) ([]byte, error) { return f.appendText(b), nil }

// MarshalText returns f as String prints it (encoding.TextMarshaler).
func (f FID) MarshalText() ([]byte, error) { return f.appendText(nil), nil }

// UnmarshalText parses text as Parse does (encoding.TextUnmarshaler). On
// error *f is unchanged.
func (f *FID) UnmarshalText(text []byte) error {
	g, err := Parse(string(text))
	if err != nil {
		return err
	}
	*f = g
	return nil
}

// Parse reads a FID in the form Lustre prints and lfs accepts:
// "[0x200000400:0x1:0x0]" or the same without the brackets. Each field is
// hexadecimal with a 0x (or 0X) prefix, or decimal without one; object id and
// version must fit in 32 bits. Nothing else is accepted: no spaces, signs,
// underscores, empty fields or unbalanced brackets. The zero FID parses (it
// is well formed); callers that need an object check IsZero.
func Parse(s string) (FID, error) {
	f, reason := parse(s)
	if reason != "" {
		if len(s) > 64 {
			s = s[:64] + "..."
		}
		return FID{}, fmt.Errorf("%w %q: %s", ErrSyntax, s, reason)
	}
	return f, nil
}

// MustParse is Parse for constants in tests and examples: it panics if s does
// not parse.
func MustParse(s string) FID {
	f, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return f
}

func parse(s string) (FID, string) {
	if inner, ok := strings.CutPrefix(s, "["); ok {
		if s, ok = strings.CutSuffix(inner, "]"); !ok {
			return FID{}, "'[' without ']'"
		}
	} else if strings.HasSuffix(s, "]") {
		return FID{}, "']' without '['"
	}
	seqS, rest, ok1 := strings.Cut(s, ":")
	oidS, verS, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return FID{}, "want three fields seq:oid:ver"
	}
	seq, reason := parseField(seqS, 64)
	if reason != "" {
		return FID{}, "sequence: " + reason
	}
	oid, reason := parseField(oidS, 32)
	if reason != "" {
		return FID{}, "object id: " + reason
	}
	ver, reason := parseField(verS, 32)
	if reason != "" {
		return FID{}, "version: " + reason
	}
	return FID{Seq: seq, Oid: uint32(oid), Ver: uint32(ver)}, ""
}

func parseField(s string, bits int) (uint64, string) {
	base := 10
	if h, ok := strings.CutPrefix(s, "0x"); ok {
		s, base = h, 16
	} else if h, ok := strings.CutPrefix(s, "0X"); ok {
		s, base = h, 16
	}
	if s == "" {
		return 0, "empty"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		isDigit := c >= '0' && c <= '9'
		isHex := base == 16 && (c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F')
		if !isDigit && !isHex {
			return 0, fmt.Sprintf("bad digit %q", c)
		}
	}
	v, err := strconv.ParseUint(s, base, bits)
	if err != nil {
		return 0, fmt.Sprintf("does not fit in %d bits", bits)
	}
	return v, ""
}

// Put writes f into b[:Size] in the wire and disk form: sequence, object id,
// version, each little-endian. It panics if len(b) < Size, as
// binary.LittleEndian.PutUint64 does.
func (f FID) Put(b []byte) {
	_ = b[Size-1]
	binary.LittleEndian.PutUint64(b, f.Seq)
	binary.LittleEndian.PutUint32(b[8:], f.Oid)
	binary.LittleEndian.PutUint32(b[12:], f.Ver)
}

// Get reads a FID from b[:Size] as Put wrote it. It fails only if b is
// shorter than Size; every 16 bytes are some FID.
func Get(b []byte) (FID, error) {
	if len(b) < Size {
		return FID{}, fmt.Errorf("%w: %d bytes, want %d", ErrSyntax, len(b), Size)
	}
	return FID{
		Seq: binary.LittleEndian.Uint64(b),
		Oid: binary.LittleEndian.Uint32(b[8:]),
		Ver: binary.LittleEndian.Uint32(b[12:]),
	}, nil
}

// AppendBinary appends the Size bytes Put writes (encoding.BinaryAppender).
func (f FID) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, make([]byte, Size)...)
	f.Put(b[len(b)-Size:])
	return b, nil
}

// MarshalBinary returns the Size bytes Put writes (encoding.BinaryMarshaler).
func (f FID) MarshalBinary() ([]byte, error) { return f.AppendBinary(make([]byte, 0, Size)) }

// UnmarshalBinary reads b, which must be exactly Size bytes
// (encoding.BinaryUnmarshaler). On error *f is unchanged.
func (f *FID) UnmarshalBinary(b []byte) error {
	if len(b) != Size {
		return fmt.Errorf("%w: %d bytes, want exactly %d", ErrSyntax, len(b), Size)
	}
	g, _ := Get(b)
	*f = g
	return nil
}
