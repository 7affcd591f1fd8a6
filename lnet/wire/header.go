package wire

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
)

// MTU is the largest payload one LNet message carries, 1 MiB as in Lustre.
// Larger transfers are split by lnet into several messages.
const MTU = 1 << 20

// MaxPayload is the largest PayloadLen a Header may carry.
const MaxPayload = MTU

// HeaderMagic starts every LNet message header; its bytes on the wire spell
// "LNet". A big-endian peer would send 0x4c4e6574, which Unmarshal reports as
// ErrOtherEndian.
const HeaderMagic uint32 = 0x74654e4c

// The header layout version this build writes and accepts. Both sides
// must match exactly: the fixed layout leaves no room for optional parts, so
// any change to it is a new version, negotiated by the LND's hello before
// any header is sent.
const (
	HeaderVersionMajor uint16 = 1
	HeaderVersionMinor uint16 = 0
)

// MsgType is the kind of an LNet message. The values are Lustre's
// (lnet_msg_type), so ACK is 0.
type MsgType uint32

// The LNet message types.
const (
	// MsgAck acknowledges a PUT that asked for one: it carries the PUT's
	// match bits and the length the target accepted, and no payload.
	MsgAck MsgType = 0
	// MsgPut moves its payload into a matching MD on the target's portal.
	MsgPut MsgType = 1
	// MsgGet asks the target to send data from a matching MD back in a
	// REPLY; it carries no payload.
	MsgGet MsgType = 2
	// MsgReply answers a GET with the data.
	MsgReply MsgType = 3
	// MsgHello frames an LND handshake as an LNet message. It uses no
	// type-specific field; its payload, if any, belongs to the LND.
	MsgHello MsgType = 4
)

var msgTypeNames = [...]string{
	MsgAck:   "ACK",
	MsgPut:   "PUT",
	MsgGet:   "GET",
	MsgReply: "REPLY",
	MsgHello: "HELLO",
}

// String returns the type's name as Lustre prints it ("PUT", "GET", "ACK",
// "REPLY", "HELLO"), or "MsgType(N)" for an unknown value.
func (t MsgType) String() string {
	if t.Known() {
		return msgTypeNames[t]
	}
	return "MsgType(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// Known reports whether t is one of the five message types.
func (t MsgType) Known() bool { return t <= MsgHello }

// WireHandle names a memory descriptor on the node that sent it, so the peer
// can address an ACK or REPLY to it: Lustre's lnet_handle_wire. The peer
// treats both cookies as opaque and echoes them back.
type WireHandle struct {
	Interface uint64 // identifies the sender's LNet instance, so stale handles are caught
	Object    uint64 // identifies the MD within it
}

// WireHandleNone is the handle a PUT carries when it wants no ACK
// (LNET_WIRE_HANDLE_COOKIE_NONE in both cookies).
var WireHandleNone = WireHandle{Interface: ^uint64(0), Object: ^uint64(0)}

// IsNone reports whether h is WireHandleNone.
func (h WireHandle) IsNone() bool { return h == WireHandleNone }

// HeaderSize is the size of an encoded Header. The layout, all integers
// little-endian:
//
//	offset size field
//	     0    4 magic, HeaderMagic
//	     4    2 version major, HeaderVersionMajor
//	     6    2 version minor, HeaderVersionMinor
//	     8    4 type (MsgType)
//	    12   24 source NID (see NIDSize)
//	    36   24 destination NID
//	    60    4 source pid
//	    64    4 destination pid
//	    68    4 payload length
//	    72    8 WMD interface cookie
//	    80    8 WMD object cookie
//	    88    8 match bits
//	    96    8 hdr data
//	   104    4 portal index
//	   108    4 offset
//	   112    4 sink length
//	   116    4 mlength
const HeaderSize = 120

// Byte offsets of the header fields; see HeaderSize.
const (
	offMagic      = 0
	offMajor      = 4
	offMinor      = 6
	offType       = 8
	offSrcNID     = 12
	offDstNID     = 36
	offSrcPID     = 60
	offDstPID     = 64
	offPayloadLen = 68
	offWMDIface   = 72
	offWMDObject  = 80
	offMatchBits  = 88
	offHdrData    = 96
	offPortal     = 104
	offOffset     = 108
	offSinkLength = 112
	offMLength    = 116
)

// Header is the fixed header at the front of every LNet message. One struct
// serves every type: the fields after PayloadLen are used only by the types
// listed on them and must be zero for the others, so the encoding has a single
// layout and a single code path, and every header has one encoding.
//
// A Header is a plain value; it owns no memory and may be copied freely.
type Header struct {
	Type           MsgType
	SrcNID, DstNID NID    // both valid and non-zero
	SrcPID, DstPID uint32 // any value
	// PayloadLen is the number of payload bytes that follow the header: at
	// most MaxPayload for PUT, REPLY and HELLO, and 0 for GET and ACK.
	PayloadLen uint32

	// WMD is the handle of an MD on the node that will receive the answer.
	// PUT: where to send the ACK, or WireHandleNone for no ACK.
	// GET: the MD the REPLY goes to. ACK, REPLY: the initiator's MD, echoed.
	WMD WireHandle
	// MatchBits select the match entry on the target's portal (PUT, GET),
	// or echo the PUT's match bits (ACK).
	MatchBits uint64
	// HdrData is 64 bits the PUT initiator passes to the target's event
	// (PUT only).
	HdrData uint64
	// Portal is the target portal index (PUT, GET).
	Portal uint32
	// Offset is the offset in the target MD to write at (PUT) or read from
	// (GET, Lustre's src_offset); the target may override it with its own
	// locally managed offset.
	Offset uint32
	// SinkLength is the number of bytes the GET initiator can take, at most
	// MTU (GET only).
	SinkLength uint32
	// MLength is the number of bytes the PUT's target accepted, at most MTU
	// (ACK only).
	MLength uint32
}

// Src returns the sender's process id.
func (h *Header) Src() ProcessID { return ProcessID{NID: h.SrcNID, PID: h.SrcPID} }

// Dst returns the destination's process id.
func (h *Header) Dst() ProcessID { return ProcessID{NID: h.DstNID, PID: h.DstPID} }

// Bits naming the type-specific fields, for the table of which type uses
// which.
const (
	fieldWMD = 1 << iota
	fieldMatchBits
	fieldHdrData
	fieldPortal
	fieldOffset
	fieldSinkLength
	fieldMLength
)

// headerRules gives, per message type, the type-specific fields it uses and
// the largest payload it may carry.
var headerRules = [...]struct {
	fields     uint8
	maxPayload uint32
}{
	MsgAck:   {fieldWMD | fieldMatchBits | fieldMLength, 0},
	MsgPut:   {fieldWMD | fieldMatchBits | fieldHdrData | fieldPortal | fieldOffset, MaxPayload},
	MsgGet:   {fieldWMD | fieldMatchBits | fieldPortal | fieldOffset | fieldSinkLength, 0},
	MsgReply: {fieldWMD, MaxPayload},
	MsgHello: {0, MaxPayload},
}

// Marshal encodes h into b[:HeaderSize] without allocating. It checks h by
// the rules Unmarshal applies, so it never writes a header its peer would
// reject. It returns an error wrapping ErrShort if len(b) < HeaderSize, and
// one wrapping ErrBadType, ErrBadNID, ErrTooLong or ErrBadField if h breaks a
// rule; on error b is left untouched.
func (h *Header) Marshal(b []byte) error {
	if len(b) < HeaderSize {
		return fmt.Errorf("%w: header needs %d bytes, have %d", ErrShort, HeaderSize, len(b))
	}
	if err := h.validate(); err != nil {
		return err
	}
	b = b[:HeaderSize]
	le := binary.LittleEndian
	le.PutUint32(b[offMagic:], HeaderMagic)
	le.PutUint16(b[offMajor:], HeaderVersionMajor)
	le.PutUint16(b[offMinor:], HeaderVersionMinor)
	le.PutUint32(b[offType:], uint32(h.Type))
	PutNID(b[offSrcNID:], h.SrcNID)
	PutNID(b[offDstNID:], h.DstNID)
	le.PutUint32(b[offSrcPID:], h.SrcPID)
	le.PutUint32(b[offDstPID:], h.DstPID)
	le.PutUint32(b[offPayloadLen:], h.PayloadLen)
	le.PutUint64(b[offWMDIface:], h.WMD.Interface)
	le.PutUint64(b[offWMDObject:], h.WMD.Object)
	le.PutUint64(b[offMatchBits:], h.MatchBits)
	le.PutUint64(b[offHdrData:], h.HdrData)
	le.PutUint32(b[offPortal:], h.Portal)
	le.PutUint32(b[offOffset:], h.Offset)
	le.PutUint32(b[offSinkLength:], h.SinkLength)
	le.PutUint32(b[offMLength:], h.MLength)
	return nil
}

// Unmarshal decodes the header in b[:HeaderSize] into h; bytes past
// HeaderSize (the payload) are not looked at. It does not allocate unless it
// fails. On error h is left unchanged and the error wraps one of:
//
//   - ErrShort: len(b) < HeaderSize.
//   - ErrBadMagic: b does not start with HeaderMagic; together with
//     ErrOtherEndian if it starts with HeaderMagic byte-swapped.
//   - ErrBadVersion: the version is not HeaderVersionMajor.HeaderVersionMinor.
//   - ErrBadType: an unknown message type.
//   - ErrBadNID: a NID that does not decode, or a zero source or destination.
//   - ErrTooLong: a payload over MaxPayload, a payload on GET or ACK, or a
//     SinkLength or MLength over MTU.
//   - ErrBadField: a type-specific field the message type does not use is
//     non-zero.
func (h *Header) Unmarshal(b []byte) error {
	if len(b) < HeaderSize {
		return fmt.Errorf("%w: header needs %d bytes, have %d", ErrShort, HeaderSize, len(b))
	}
	b = b[:HeaderSize]
	le := binary.LittleEndian
	if err := checkMagic("header", le.Uint32(b[offMagic:]), HeaderMagic); err != nil {
		return err
	}
	if major, minor := le.Uint16(b[offMajor:]), le.Uint16(b[offMinor:]); major != HeaderVersionMajor || minor != HeaderVersionMinor {
		return fmt.Errorf("%w: header version %d.%d, want %d.%d",
			ErrBadVersion, major, minor, HeaderVersionMajor, HeaderVersionMinor)
	}
	if t := MsgType(le.Uint32(b[offType:])); !t.Known() {
		return fmt.Errorf("%w: header type %d", ErrBadType, uint32(t))
	}
	src, reason := getNID(b[offSrcNID:])
	if reason != "" {
		return fmt.Errorf("%w: header source: %s", ErrBadNID, reason)
	}
	dst, reason := getNID(b[offDstNID:])
	if reason != "" {
		return fmt.Errorf("%w: header destination: %s", ErrBadNID, reason)
	}
	d := Header{
		Type:       MsgType(le.Uint32(b[offType:])),
		SrcNID:     src,
		DstNID:     dst,
		SrcPID:     le.Uint32(b[offSrcPID:]),
		DstPID:     le.Uint32(b[offDstPID:]),
		PayloadLen: le.Uint32(b[offPayloadLen:]),
		WMD: WireHandle{
			Interface: le.Uint64(b[offWMDIface:]),
			Object:    le.Uint64(b[offWMDObject:]),
		},
		MatchBits:  le.Uint64(b[offMatchBits:]),
		HdrData:    le.Uint64(b[offHdrData:]),
		Portal:     le.Uint32(b[offPortal:]),
		Offset:     le.Uint32(b[offOffset:]),
		SinkLength: le.Uint32(b[offSinkLength:]),
		MLength:    le.Uint32(b[offMLength:]),
	}
	if err := d.validate(); err != nil {
		return err
	}
	*h = d
	return nil
}

// validate applies the rules shared by Marshal and Unmarshal.
func (h *Header) validate() error {
	if !h.Type.Known() {
		return fmt.Errorf("%w: header type %d", ErrBadType, uint32(h.Type))
	}
	if reason := h.SrcNID.problem(); reason != "" {
		return fmt.Errorf("%w: %v header source %v: %s", ErrBadNID, h.Type, h.SrcNID, reason)
	}
	if reason := h.DstNID.problem(); reason != "" {
		return fmt.Errorf("%w: %v header destination %v: %s", ErrBadNID, h.Type, h.DstNID, reason)
	}
	rule := headerRules[h.Type]
	if h.PayloadLen > rule.maxPayload {
		return fmt.Errorf("%w: %v header payload length %d, at most %d",
			ErrTooLong, h.Type, h.PayloadLen, rule.maxPayload)
	}
	if unused := h.setFields() &^ rule.fields; unused != 0 {
		return fmt.Errorf("%w: %v header sets %s, which %v does not use",
			ErrBadField, h.Type, fieldName(unused), h.Type)
	}
	if h.SinkLength > MTU {
		return fmt.Errorf("%w: GET sink length %d over MTU %d", ErrTooLong, h.SinkLength, MTU)
	}
	if h.MLength > MTU {
		return fmt.Errorf("%w: ACK mlength %d over MTU %d", ErrTooLong, h.MLength, MTU)
	}
	return nil
}

// setFields returns the bits of the type-specific fields that are non-zero.
func (h *Header) setFields() uint8 {
	var f uint8
	if h.WMD != (WireHandle{}) {
		f |= fieldWMD
	}
	if h.MatchBits != 0 {
		f |= fieldMatchBits
	}
	if h.HdrData != 0 {
		f |= fieldHdrData
	}
	if h.Portal != 0 {
		f |= fieldPortal
	}
	if h.Offset != 0 {
		f |= fieldOffset
	}
	if h.SinkLength != 0 {
		f |= fieldSinkLength
	}
	if h.MLength != 0 {
		f |= fieldMLength
	}
	return f
}

// fieldName names the lowest field bit set in f.
func fieldName(f uint8) string {
	return [...]string{"wmd", "match bits", "hdr data", "portal", "offset", "sink length", "mlength"}[bits.TrailingZeros8(f)]
}

// checkMagic compares a decoded magic with the expected one, telling a
// byte-swapped peer apart from a stranger.
func checkMagic(what string, got, want uint32) error {
	switch got {
	case want:
		return nil
	case bits.ReverseBytes32(want):
		return fmt.Errorf("%w: %w: %s magic %#08x is %#08x byte-swapped", ErrBadMagic, ErrOtherEndian, what, got, want)
	}
	return fmt.Errorf("%w: %s magic %#08x, want %#08x", ErrBadMagic, what, got, want)
}
