package wire

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Magic starts every PtlRPC message header; its bytes on the wire spell
// "PRPC". It is Nacre's own, not Lustre's lustre_msg magic, because the
// layout is Nacre's own: a Lustre peer is told apart from a byte-swapped
// Nacre peer. A big-endian peer would send 0x50525043, which Unmarshal
// reports as ErrOtherEndian.
const Magic uint32 = 0x43505250

// The header layout version this build writes and accepts, and its encoding
// in the header's version field (major<<16 | minor). Both sides must match
// exactly: the fixed layout leaves no room for optional parts, so any change
// to it is a new version. Protocol features above the header are negotiated
// by the CONNECT RPC's body, not here.
const (
	VersionMajor uint16 = 1
	VersionMinor uint16 = 0
	Version      uint32 = uint32(VersionMajor)<<16 | uint32(VersionMinor)
)

// MaxBodySize is the largest BodyLen a Header may carry, 1 MiB. Bodies carry
// metadata and niobuf vectors, never file data, so this is generous; a body
// that needs more is a protocol bug, not a big request.
const MaxBodySize = 1 << 20

// JobIDSize is the size of the job id field, Lustre's LUSTRE_JOBID_SIZE.
const JobIDSize = 32

// Type is the kind of a PtlRPC message. The values are Lustre's
// PTL_RPC_MSG_* numbers. There is no separate early-reply type: an early
// reply is a TypeReply with MsgEarlyReply set (see Header.IsEarlyReply), so
// that every message has one encoding.
type Type uint32

// The PtlRPC message types.
const (
	// TypeRequest asks a service to perform Opcode. It carries status 0.
	TypeRequest Type = 4711
	// TypeError answers a request the service could not process at all
	// (it did not unpack, no handler, the export is gone): the status is a
	// non-zero network errno and the body, if any, is not the opcode's
	// reply body.
	TypeError Type = 4712
	// TypeReply answers a request the service handled; its status is the
	// operation's outcome, 0 or a network errno.
	TypeReply Type = 4713
)

// String returns "REQUEST", "REPLY" or "ERROR", or "Type(N)" for an unknown
// value.
func (t Type) String() string {
	switch t {
	case TypeRequest:
		return "REQUEST"
	case TypeError:
		return "ERROR"
	case TypeReply:
		return "REPLY"
	}
	return "Type(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// Known reports whether t is one of the three message types.
func (t Type) Known() bool { return t >= TypeRequest && t <= TypeReply }

// MsgFlags is the header's flag word. The values of the replay and resend
// flags are Lustre's (MSG_* in lustre_idl.h, the ptlrpc_body pb_flags
// word); MsgEarlyReply is Nacre's. A flag is valid only on the message types
// listed on it, and decoders reject any bit not defined here.
type MsgFlags uint32

// The header flags.
const (
	// MsgLastReplay marks the client's last replayed request in a server's
	// recovery window: after it the server may move on to lock replay
	// (MSG_LAST_REPLAY). Requests only.
	MsgLastReplay MsgFlags = 0x1
	// MsgResent marks a request sent again, with the same XID, after its
	// reply did not arrive in time; the server reconstructs the saved reply
	// of a non-idempotent request instead of executing it twice
	// (MSG_RESENT). Requests only.
	MsgResent MsgFlags = 0x2
	// MsgReplay marks a request replayed to a restarted server during
	// recovery; it carries the transno of its original reply in Transno
	// (MSG_REPLAY). Requests only.
	MsgReplay MsgFlags = 0x4
	// MsgReqReplayDone tells a recovering server the client has replayed
	// all its requests (MSG_REQ_REPLAY_DONE). Requests only.
	MsgReqReplayDone MsgFlags = 0x40
	// MsgLockReplayDone tells a recovering server the client has replayed
	// all its locks (MSG_LOCK_REPLAY_DONE). Requests only.
	MsgLockReplayDone MsgFlags = 0x80
	// MsgEarlyReply marks a reply sent before the request is handled, to
	// push the client's deadline out by the new Timeout (adaptive
	// timeouts). It carries no body, status 0 and no transno; the real reply
	// follows with the same XID. Nacre's own flag: Lustre tells early
	// replies apart by their offset in the reply buffer. Replies only.
	MsgEarlyReply MsgFlags = 0x100
	// MsgBulkCksum says BulkCksum holds the CRC-32C (Castagnoli), or with
	// MsgBulkCksumCRC32 the CRC-32, of the bulk data the sender offers: on a request, of the bytes the server
	// will GET (a write); on a reply, of the bytes the server PUT (a read).
	// The receiver verifies it and never accepts data that does not match.
	// Nacre's own flag (Lustre carries o_cksum in the obdo). Requests and
	// replies, not early replies.
	MsgBulkCksum MsgFlags = 0x200
	// MsgBulkCksumCRC32 says, with MsgBulkCksum, that the checksum is the
	// CRC-32 (IEEE) of the data, not its CRC-32C: on a request the
	// algorithm the client chose, which a read's reply then uses too
	// (Lustre's OBD_FL_CKSUM_CRC32 in the obdo). Requests and replies.
	MsgBulkCksumCRC32 MsgFlags = 0x400
	// MsgATSupport says the client runs adaptive timeouts and takes early
	// replies: a server sends early replies only to requests that carry
	// it, and a client sets it only while its node's at_max is not 0.
	// Lustre's MSGHDR_AT_SUPPORT (a bit of lm_flags, where Nacre has one
	// flag word: the value is Nacre's). Requests only.
	MsgATSupport MsgFlags = 0x800
)

// Flags each message type may carry.
const (
	requestFlags = MsgLastReplay | MsgResent | MsgReplay | MsgReqReplayDone | MsgLockReplayDone | MsgBulkCksum | MsgBulkCksumCRC32 | MsgATSupport
	replyFlags   = MsgEarlyReply | MsgBulkCksum | MsgBulkCksumCRC32
	errorFlags   = MsgFlags(0)
)

var flagNames = [...]struct {
	f    MsgFlags
	name string
}{
	{MsgLastReplay, "LAST_REPLAY"},
	{MsgResent, "RESENT"},
	{MsgReplay, "REPLAY"},
	{MsgReqReplayDone, "REQ_REPLAY_DONE"},
	{MsgLockReplayDone, "LOCK_REPLAY_DONE"},
	{MsgEarlyReply, "EARLY_REPLY"},
	{MsgBulkCksum, "BULK_CKSUM"},
	{MsgBulkCksumCRC32, "CKSUM_CRC32"},
	{MsgATSupport, "AT_SUPPORT"},
}

// String lists the set flags by Lustre's names joined with "|"
// ("RESENT|REPLAY"), unknown bits as one hex number, and "0" for none.
func (f MsgFlags) String() string {
	if f == 0 {
		return "0"
	}
	var parts []string
	for _, n := range flagNames {
		if f&n.f != 0 {
			parts = append(parts, n.name)
			f &^= n.f
		}
	}
	if f != 0 {
		parts = append(parts, "0x"+strconv.FormatUint(uint64(f), 16))
	}
	return strings.Join(parts, "|")
}

// ErrnoValid reports whether e may travel as a status: 0, or a negated
// Linux errno in -1..-4095. Lustre allows only "network errnos" on the wire
// (lustre_errno.h), which all lie in that range; callers map a host errno to
// its network value before encoding. ErrnoValid does not say whether a type
// may carry e: requests carry 0 only, errors a non-zero status.
func ErrnoValid(e int32) bool { return e <= 0 && e >= -4095 }

// HeaderSize is the size of an encoded Header. The layout, all integers
// little-endian, every 8-byte field 8-byte aligned:
//
//	offset size field
//	     0    4 magic, Magic
//	     4    4 version, Version (major<<16 | minor)
//	     8    4 type (Type)
//	    12    4 opcode (Opcode)
//	    16    4 status (int32, 0 or a negative network errno)
//	    20    4 flags (MsgFlags)
//	    24    8 xid
//	    32    8 transno
//	    40    8 last_committed
//	    48    8 last_xid
//	    56    8 connection handle cookie
//	    64    4 connection count
//	    68    4 timeout, milliseconds
//	    72    4 service time, milliseconds
//	    76    4 body length
//	    80    4 bulk length
//	    84    4 bulk checksum (CRC-32C, or CRC-32 with CKSUM_CRC32)
//	    88   32 job id, printable ASCII, NUL-padded
const HeaderSize = 120

// Byte offsets of the header fields; see HeaderSize.
const (
	offMagic         = 0
	offVersion       = 4
	offType          = 8
	offOpcode        = 12
	offStatus        = 16
	offFlags         = 20
	offXID           = 24
	offTransno       = 32
	offLastCommitted = 40
	offLastXID       = 48
	offHandle        = 56
	offConnCount     = 64
	offTimeout       = 68
	offServiceTime   = 72
	offBodyLen       = 76
	offBulkLen       = 80
	offBulkCksum     = 84
	offJobID         = 88
)

// Header is the fixed header at the front of every PtlRPC request and reply.
// One struct serves every type; the fields a type does not use must be zero
// (the rules are listed on each field), so the encoding has one layout and
// every header one encoding.
//
// A Header is a plain comparable value; it owns no memory and may be copied
// freely. The job id is set only through SetJobID, which keeps it valid.
type Header struct {
	Type   Type
	Opcode Opcode // any value; a reply echoes its request's
	// Status is the outcome of the operation: 0 or a negative network errno
	// (see ErrnoValid). Requests and early replies carry 0, TypeError a
	// non-zero value.
	Status int32
	Flags  MsgFlags // only the flags valid for Type
	// XID names the request on its import and is echoed by its replies; a
	// resend keeps it, and bulk match bits derive from it. Never 0.
	XID uint64
	// Transno is the transaction number the server gave a modifying
	// request, in its reply; a replayed request (MsgReplay) carries it back.
	// Zero on other requests, on early replies and on errors.
	Transno uint64
	// LastCommitted is the highest transno the server has committed to
	// stable storage, so the client can drop its saved requests up to it.
	// Replies and errors only.
	LastCommitted uint64
	// LastXID is the highest XID for which the client has received a reply
	// and every lower XID too, so the server can prune the saved replies it
	// keeps for reconstruction. Requests only.
	LastXID uint64
	// Handle is the connection handle cookie the server gave at CONNECT,
	// naming the export; 0 on the CONNECT request itself.
	Handle uint64
	// ConnCount counts the import's (re)connections, so a server can drop
	// messages of an older connection.
	ConnCount uint32
	// Timeout is, on a request, how many milliseconds the client will wait
	// for the reply from the moment it sent it; on a reply, the server's
	// current estimate of the service time (on an early reply, how much
	// longer from now the client should wait). Milliseconds, not Lustre's
	// seconds: Nacre's services answer in microseconds and its tests run
	// timeouts well under a second.
	Timeout uint32
	// ServiceTime is how many milliseconds the server spent on the request,
	// for the client's adaptive timeout estimates. Replies and errors only.
	ServiceTime uint32
	// BodyLen is the number of body bytes after the header, at most
	// MaxBodySize; 0 on early replies.
	BodyLen uint32
	// BulkLen is, on a request, the length of the bulk buffer the client
	// registered for the server to GET from or PUT into (0: no bulk); on a
	// reply, how many bulk bytes the server moved. At most MaxBulkSize; 0 on
	// errors and early replies.
	BulkLen uint32
	// BulkCksum is the checksum of the bulk data when MsgBulkCksum is set
	// (by the algorithm the flags name), and 0 otherwise.
	BulkCksum uint32
	// jobID is the job the request was sent for, printable ASCII padded
	// with NULs (Lustre's pb_jobid), for NRS TBF rules and job stats.
	// Requests only. Kept unexported so that it is always valid.
	jobID [JobIDSize]byte
}

// JobID returns the job id the request was sent for, without its NUL
// padding; "" if there is none. It allocates for a non-empty id.
func (h *Header) JobID() string {
	n := 0
	for n < JobIDSize && h.jobID[n] != 0 {
		n++
	}
	return string(h.jobID[:n])
}

// SetJobID sets the job id. It returns an error wrapping ErrTooLong if s is
// longer than JobIDSize bytes, or ErrBadField if s has a byte outside
// printable ASCII (0x20-0x7e); on error h is left unchanged. "" clears it.
func (h *Header) SetJobID(s string) error {
	if len(s) > JobIDSize {
		return fmt.Errorf("%w: job id %q is %d bytes, at most %d", ErrTooLong, s, len(s), JobIDSize)
	}
	for i := 0; i < len(s); i++ {
		if !printable(s[i]) {
			return fmt.Errorf("%w: job id %q has non-printable byte %#02x at %d", ErrBadField, s, s[i], i)
		}
	}
	var j [JobIDSize]byte
	copy(j[:], s)
	h.jobID = j
	return nil
}

// IsEarlyReply reports whether h is an early reply: a TypeReply with
// MsgEarlyReply set.
func (h *Header) IsEarlyReply() bool {
	return h.Type == TypeReply && h.Flags&MsgEarlyReply != 0
}

// Marshal encodes h into b[:HeaderSize] without allocating. It checks h by
// the rules Unmarshal applies, so it never writes a header its peer would
// reject. It returns an error wrapping ErrShort if len(b) < HeaderSize, and
// one wrapping ErrBadType, ErrBadField or ErrTooLong if h breaks a rule; on
// error b is left untouched.
func (h *Header) Marshal(b []byte) error {
	if len(b) < HeaderSize {
		return fmt.Errorf("%w: header needs %d bytes, have %d", ErrShort, HeaderSize, len(b))
	}
	if err := h.validate(); err != nil {
		return err
	}
	b = b[:HeaderSize]
	le := binary.LittleEndian
	le.PutUint32(b[offMagic:], Magic)
	le.PutUint32(b[offVersion:], Version)
	le.PutUint32(b[offType:], uint32(h.Type))
	le.PutUint32(b[offOpcode:], uint32(h.Opcode))
	le.PutUint32(b[offStatus:], uint32(h.Status))
	le.PutUint32(b[offFlags:], uint32(h.Flags))
	le.PutUint64(b[offXID:], h.XID)
	le.PutUint64(b[offTransno:], h.Transno)
	le.PutUint64(b[offLastCommitted:], h.LastCommitted)
	le.PutUint64(b[offLastXID:], h.LastXID)
	le.PutUint64(b[offHandle:], h.Handle)
	le.PutUint32(b[offConnCount:], h.ConnCount)
	le.PutUint32(b[offTimeout:], h.Timeout)
	le.PutUint32(b[offServiceTime:], h.ServiceTime)
	le.PutUint32(b[offBodyLen:], h.BodyLen)
	le.PutUint32(b[offBulkLen:], h.BulkLen)
	le.PutUint32(b[offBulkCksum:], h.BulkCksum)
	copy(b[offJobID:offJobID+JobIDSize], h.jobID[:])
	return nil
}

// Unmarshal decodes the header in b[:HeaderSize] into h; bytes past
// HeaderSize (the body) are not looked at. It does not allocate unless it
// fails. On error h is left unchanged and the error wraps one of:
//
//   - ErrShort: len(b) < HeaderSize.
//   - ErrBadMagic: b does not start with Magic; together with
//     ErrOtherEndian if it starts with Magic byte-swapped.
//   - ErrBadVersion: the version is not Version.
//   - ErrBadType: an unknown message type.
//   - ErrTooLong: a body length over MaxBodySize.
//   - ErrBadField: any other rule on Header's fields is broken: unknown
//     flag bits or a flag the type may not carry, a status that is not a
//     network errno or that the type may not carry, a zero XID, a field the
//     type does not use, a job id that is not printable ASCII followed only
//     by NULs.
func (h *Header) Unmarshal(b []byte) error {
	if len(b) < HeaderSize {
		return fmt.Errorf("%w: header needs %d bytes, have %d", ErrShort, HeaderSize, len(b))
	}
	b = b[:HeaderSize]
	le := binary.LittleEndian
	switch m := le.Uint32(b[offMagic:]); m {
	case Magic:
	case bits.ReverseBytes32(Magic):
		return fmt.Errorf("%w: %w: header magic %#08x is %#08x byte-swapped", ErrBadMagic, ErrOtherEndian, m, Magic)
	default:
		return fmt.Errorf("%w: header magic %#08x, want %#08x", ErrBadMagic, m, Magic)
	}
	if v := le.Uint32(b[offVersion:]); v != Version {
		return fmt.Errorf("%w: header version %d.%d, want %d.%d",
			ErrBadVersion, v>>16, v&0xffff, VersionMajor, VersionMinor)
	}
	d := Header{
		Type:          Type(le.Uint32(b[offType:])),
		Opcode:        Opcode(le.Uint32(b[offOpcode:])),
		Status:        int32(le.Uint32(b[offStatus:])),
		Flags:         MsgFlags(le.Uint32(b[offFlags:])),
		XID:           le.Uint64(b[offXID:]),
		Transno:       le.Uint64(b[offTransno:]),
		LastCommitted: le.Uint64(b[offLastCommitted:]),
		LastXID:       le.Uint64(b[offLastXID:]),
		Handle:        le.Uint64(b[offHandle:]),
		ConnCount:     le.Uint32(b[offConnCount:]),
		Timeout:       le.Uint32(b[offTimeout:]),
		ServiceTime:   le.Uint32(b[offServiceTime:]),
		BodyLen:       le.Uint32(b[offBodyLen:]),
		BulkLen:       le.Uint32(b[offBulkLen:]),
		BulkCksum:     le.Uint32(b[offBulkCksum:]),
	}
	copy(d.jobID[:], b[offJobID:offJobID+JobIDSize])
	if err := d.validate(); err != nil {
		return err
	}
	*h = d
	return nil
}

// validate applies the rules shared by Marshal and Unmarshal. Its errors
// name the message by type, opcode and XID so a person can find it in a
// trace.
func (h *Header) validate() error {
	var allowed MsgFlags
	switch h.Type {
	case TypeRequest:
		allowed = requestFlags
	case TypeReply:
		allowed = replyFlags
	case TypeError:
		allowed = errorFlags
	default:
		return fmt.Errorf("%w: header type %d", ErrBadType, uint32(h.Type))
	}
	if h.BodyLen > MaxBodySize {
		return fmt.Errorf("%w: %v %v xid %d: body length %d, at most %d",
			ErrTooLong, h.Type, h.Opcode, h.XID, h.BodyLen, MaxBodySize)
	}
	if h.BulkLen > MaxBulkSize {
		return fmt.Errorf("%w: %v %v xid %d: bulk length %d, at most %d",
			ErrTooLong, h.Type, h.Opcode, h.XID, h.BulkLen, MaxBulkSize)
	}
	if reason := h.problem(allowed); reason != "" {
		return fmt.Errorf("%w: %v %v xid %d: %s", ErrBadField, h.Type, h.Opcode, h.XID, reason)
	}
	return nil
}

// problem returns why h breaks a field rule, or "" if it does not. The
// reasons are constant strings, so a valid header costs no allocation.
func (h *Header) problem(allowed MsgFlags) string {
	if h.XID == 0 {
		return "xid 0"
	}
	if h.Flags&^(requestFlags|replyFlags) != 0 {
		return "unknown flag bits"
	}
	if h.Flags&^allowed != 0 {
		return "flag the type may not carry"
	}
	if !ErrnoValid(h.Status) {
		return "status is not a network errno"
	}
	if reason := jobIDProblem(&h.jobID); reason != "" {
		return reason
	}
	if h.Flags&MsgBulkCksum == 0 && h.BulkCksum != 0 {
		return "bulk checksum without BULK_CKSUM"
	}
	if h.Flags&MsgBulkCksum != 0 && h.BulkLen == 0 {
		return "BULK_CKSUM without bulk"
	}
	if h.Flags&(MsgBulkCksum|MsgBulkCksumCRC32) == MsgBulkCksumCRC32 {
		return "CKSUM_CRC32 without BULK_CKSUM"
	}
	switch h.Type {
	case TypeRequest:
		switch {
		case h.Status != 0:
			return "request with non-zero status"
		case h.Transno != 0 && h.Flags&MsgReplay == 0:
			return "transno on a request that is not a replay"
		case h.LastCommitted != 0:
			return "last_committed on a request"
		case h.ServiceTime != 0:
			return "service time on a request"
		}
	default: // TypeReply, TypeError
		switch {
		case h.LastXID != 0:
			return "last_xid on a reply"
		case h.jobID[0] != 0:
			return "job id on a reply"
		case h.Type == TypeError && h.Status == 0:
			return "error with status 0"
		case h.Type == TypeError && h.Transno != 0:
			return "transno on an error"
		case h.Type == TypeError && h.BulkLen != 0:
			return "bulk length on an error"
		case h.Flags&MsgEarlyReply != 0 && h.Status != 0:
			return "early reply with non-zero status"
		case h.Flags&MsgEarlyReply != 0 && h.Transno != 0:
			return "transno on an early reply"
		case h.Flags&MsgEarlyReply != 0 && h.BodyLen != 0:
			return "body on an early reply"
		case h.Flags&MsgEarlyReply != 0 && h.BulkLen != 0:
			return "bulk length on an early reply"
		}
	}
	return ""
}

// jobIDProblem checks that j is printable ASCII followed only by NULs.
func jobIDProblem(j *[JobIDSize]byte) string {
	n := 0
	for n < JobIDSize && j[n] != 0 {
		if !printable(j[n]) {
			return "job id has a non-printable byte"
		}
		n++
	}
	for _, c := range j[n:] {
		if c != 0 {
			return "job id has bytes after its NUL padding"
		}
	}
	return ""
}

// printable reports whether c is printable ASCII, space included.
func printable(c byte) bool { return c >= 0x20 && c <= 0x7e }
