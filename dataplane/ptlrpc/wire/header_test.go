package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

// sample names for the sample headers, in a fixed order.
const (
	sRequest    = "request"
	sReplay     = "replay"
	sReply      = "reply"
	sEarlyReply = "early reply"
	sError      = "error"
)

// sampleHeaders returns one valid header of every kind, each field set to a
// distinct value so that a misplaced field shows in the golden bytes.
func sampleHeaders() map[string]Header {
	req := Header{
		Type:      TypeRequest,
		Opcode:    OSTWrite,
		Flags:     MsgResent | MsgBulkCksum,
		XID:       0x0102030405060708,
		LastXID:   0x0102030405060700,
		Handle:    0xa1a2a3a4a5a6a7a8,
		ConnCount: 3,
		Timeout:   100,
		BodyLen:   0x1234,
		BulkLen:   0x400000,
		BulkCksum: 0xc1c2c3c4,
	}
	if err := req.SetJobID("dd.1000"); err != nil {
		panic(err)
	}

	replay := Header{
		Type:      TypeRequest,
		Opcode:    MDSReint,
		Flags:     MsgReplay | MsgLastReplay,
		XID:       77,
		Transno:   0x1111111111111111,
		LastXID:   76,
		Handle:    9,
		ConnCount: 2,
		Timeout:   30,
		BodyLen:   200,
	}
	if err := replay.SetJobID(strings.Repeat("j", JobIDSize)); err != nil {
		panic(err)
	}

	reply := Header{
		Type:          TypeReply,
		Opcode:        OSTWrite,
		Status:        -28, // ENOSPC
		XID:           0x0102030405060708,
		Transno:       0x1122334455667788,
		LastCommitted: 0x1122334455667700,
		Handle:        0xa1a2a3a4a5a6a7a8,
		ConnCount:     3,
		Timeout:       45,
		ServiceTime:   7,
		BodyLen:       MaxBodySize,
		BulkLen:       MaxBulkSize,
	}

	early := Header{
		Type:          TypeReply,
		Opcode:        LDLMEnqueue,
		Flags:         MsgEarlyReply,
		XID:           5,
		LastCommitted: 4,
		Handle:        6,
		ConnCount:     1,
		Timeout:       120,
		ServiceTime:   60,
	}

	errh := Header{
		Type:          TypeError,
		Opcode:        Opcode(9999),
		Status:        -95, // EOPNOTSUPP
		XID:           8,
		LastCommitted: 3,
		Handle:        6,
		ConnCount:     1,
		BodyLen:       0,
	}
	return map[string]Header{sRequest: req, sReplay: replay, sReply: reply, sEarlyReply: early, sError: errh}
}

func mustMarshal(t testing.TB, h Header) []byte {
	t.Helper()
	b := make([]byte, HeaderSize)
	if err := h.Marshal(b); err != nil {
		t.Fatalf("Marshal(%+v): %v", h, err)
	}
	return b
}

func TestHeaderRoundTrip(t *testing.T) {
	for name, h := range sampleHeaders() {
		b := mustMarshal(t, h)
		// Trailing body bytes are ignored.
		b = append(b, "body"...)
		var got Header
		if err := got.Unmarshal(b); err != nil {
			t.Errorf("%s: Unmarshal: %v", name, err)
			continue
		}
		if got != h {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", name, got, h)
		}
		if again := mustMarshal(t, got); !bytes.Equal(again, b[:HeaderSize]) {
			t.Errorf("%s: re-encoding differs:\n% x\n% x", name, again, b[:HeaderSize])
		}
	}
}

// rawHeader spells out the documented layout as a Go struct, so that
// encoding/binary (which packs fields in order, without padding) gives an
// independent encoding to compare with.
type rawHeader struct {
	Magic, Version       uint32
	Type, Opcode         uint32
	Status               int32
	Flags                uint32
	XID, Transno         uint64
	LastCommitted        uint64
	LastXID              uint64
	Handle               uint64
	ConnCount            uint32
	Timeout, ServiceTime uint32
	BodyLen              uint32
	BulkLen, BulkCksum   uint32
	JobID                [JobIDSize]byte
}

func toRaw(h Header) rawHeader {
	return rawHeader{
		Magic: Magic, Version: Version, Type: uint32(h.Type), Opcode: uint32(h.Opcode),
		Status: h.Status, Flags: uint32(h.Flags), XID: h.XID, Transno: h.Transno,
		LastCommitted: h.LastCommitted, LastXID: h.LastXID, Handle: h.Handle,
		ConnCount: h.ConnCount, Timeout: h.Timeout, ServiceTime: h.ServiceTime,
		BodyLen: h.BodyLen, BulkLen: h.BulkLen, BulkCksum: h.BulkCksum, JobID: h.jobID,
	}
}

func TestHeaderLayoutMatchesReflection(t *testing.T) {
	if got := binary.Size(rawHeader{}); got != HeaderSize {
		t.Fatalf("documented layout is %d bytes, HeaderSize is %d", got, HeaderSize)
	}
	for name, h := range sampleHeaders() {
		want, err := binary.Append(nil, binary.LittleEndian, toRaw(h))
		if err != nil {
			t.Fatal(err)
		}
		if got := mustMarshal(t, h); !bytes.Equal(got, want) {
			t.Errorf("%s: Marshal differs from the documented layout:\n got % x\nwant % x", name, got, want)
		}
	}
}

// TestHeaderGoldenOffsets pins every field to its byte offset, so that any
// change to the layout fails here and is a deliberate, versioned change.
func TestHeaderGoldenOffsets(t *testing.T) {
	s := sampleHeaders()
	req := mustMarshal(t, s[sRequest])
	rep := mustMarshal(t, s[sReply])
	early := mustMarshal(t, s[sEarlyReply])
	errb := mustMarshal(t, s[sError])
	replay := mustMarshal(t, s[sReplay])
	jobid := func(s string) []byte { return append([]byte(s), make([]byte, JobIDSize-len(s))...) }
	tests := []struct {
		msg   string
		b     []byte
		field string
		off   int
		want  []byte
	}{
		{sRequest, req, "magic", 0, []byte("PRPC")},
		{sRequest, req, "version", 4, []byte{0, 0, 1, 0}},
		{sRequest, req, "type", 8, []byte{0x67, 0x12, 0, 0}}, // 4711
		{sReply, rep, "type", 8, []byte{0x69, 0x12, 0, 0}},   // 4713
		{sError, errb, "type", 8, []byte{0x68, 0x12, 0, 0}},  // 4712
		{sRequest, req, "opcode", 12, []byte{4, 0, 0, 0}},
		{sError, errb, "opcode", 12, []byte{0x0f, 0x27, 0, 0}},
		{sRequest, req, "status", 16, []byte{0, 0, 0, 0}},
		{sReply, rep, "status", 16, []byte{0xe4, 0xff, 0xff, 0xff}}, // -28
		{sRequest, req, "flags", 20, []byte{2, 2, 0, 0}},
		{sReplay, replay, "flags", 20, []byte{5, 0, 0, 0}},
		{sEarlyReply, early, "flags", 20, []byte{0, 1, 0, 0}},
		{sRequest, req, "xid", 24, []byte{8, 7, 6, 5, 4, 3, 2, 1}},
		{sReply, rep, "transno", 32, []byte{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11}},
		{sReply, rep, "last_committed", 40, []byte{0x00, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11}},
		{sRequest, req, "last_xid", 48, []byte{0, 7, 6, 5, 4, 3, 2, 1}},
		{sRequest, req, "handle", 56, []byte{0xa8, 0xa7, 0xa6, 0xa5, 0xa4, 0xa3, 0xa2, 0xa1}},
		{sRequest, req, "conn count", 64, []byte{3, 0, 0, 0}},
		{sRequest, req, "timeout", 68, []byte{100, 0, 0, 0}},
		{sReply, rep, "service time", 72, []byte{7, 0, 0, 0}},
		{sRequest, req, "body length", 76, []byte{0x34, 0x12, 0, 0}},
		{sReply, rep, "body length", 76, []byte{0, 0, 0x10, 0}},
		{sRequest, req, "bulk length", 80, []byte{0, 0, 0x40, 0}},
		{sReply, rep, "bulk length", 80, []byte{0, 0, 0, 1}},
		{sRequest, req, "bulk checksum", 84, []byte{0xc4, 0xc3, 0xc2, 0xc1}},
		{sRequest, req, "job id", 88, jobid("dd.1000")},
		{sReplay, replay, "job id", 88, bytes.Repeat([]byte("j"), JobIDSize)},
		{sReply, rep, "job id", 88, make([]byte, JobIDSize)},
	}
	for _, tt := range tests {
		if got := tt.b[tt.off : tt.off+len(tt.want)]; !bytes.Equal(got, tt.want) {
			t.Errorf("%s: %s at %d = % x, want % x", tt.msg, tt.field, tt.off, got, tt.want)
		}
	}
	if len(req) != 120 || 88+JobIDSize != HeaderSize {
		t.Errorf("job id does not end the %d-byte header", HeaderSize)
	}
}

func TestTypeString(t *testing.T) {
	for typ, want := range map[Type]string{
		TypeRequest: "REQUEST", TypeReply: "REPLY", TypeError: "ERROR", 0: "Type(0)", 4714: "Type(4714)",
	} {
		if got := typ.String(); got != want {
			t.Errorf("Type(%d).String() = %q, want %q", uint32(typ), got, want)
		}
		if got, want := typ.Known(), !strings.HasPrefix(want, "Type("); got != want {
			t.Errorf("Type(%d).Known() = %v", uint32(typ), got)
		}
	}
}

func TestOpcodeString(t *testing.T) {
	for op, want := range map[Opcode]string{
		1: "OST_GETATTR", 2: "OST_SETATTR", 3: "OST_READ", 4: "OST_WRITE", 5: "OST_CREATE",
		6: "OST_DESTROY", 8: "OST_CONNECT", 9: "OST_DISCONNECT", 10: "OST_PUNCH", 13: "OST_STATFS",
		16: "OST_SYNC", 17: "OST_SET_INFO", 21: "OST_LADVISE", 22: "OST_FALLOCATE", 33: "MDS_GETATTR", 34: "MDS_GETATTR_NAME", 35: "MDS_CLOSE", 36: "MDS_REINT",
		37: "MDS_READPAGE", 38: "MDS_CONNECT", 39: "MDS_DISCONNECT", 40: "MDS_GET_ROOT", 41: "MDS_STATFS", 44: "MDS_SYNC",
		49: "MDS_GETXATTR", 53: "MDS_GET_INFO", 54: "MDS_HSM_STATE_GET", 55: "MDS_HSM_STATE_SET",
		57: "MDS_HSM_PROGRESS", 61: "MDS_SWAP_LAYOUTS", 502: "LLOG_ORIGIN_HANDLE_NEXT_BLOCK", 520: "MDS_CHANGELOG_CLEAR", 700: "SEQ_QUERY", 900: "FLD_QUERY", 101: "LDLM_ENQUEUE",
		102: "LDLM_CONVERT", 103: "LDLM_CANCEL", 104: "LDLM_BL_CALLBACK", 105: "LDLM_CP_CALLBACK",
		106: "LDLM_GL_CALLBACK", 250: "MGS_CONNECT", 400: "OBD_PING",
		0: "0", 7: "7", 4294967295: "4294967295",
	} {
		if got := op.String(); got != want {
			t.Errorf("Opcode(%d).String() = %q, want %q", uint32(op), got, want)
		}
		if got, want := op.Known(), want[0] > '9'; got != want {
			t.Errorf("Opcode(%d).Known() = %v", uint32(op), got)
		}
	}
	if n := len(opcodeNames); n != 42 {
		t.Errorf("%d named opcodes, the test covers 42", n)
	}
}

func TestFlagsString(t *testing.T) {
	for f, want := range map[MsgFlags]string{
		0:                                    "0",
		MsgResent:                            "RESENT",
		MsgReplay | MsgLastReplay:            "LAST_REPLAY|REPLAY",
		MsgReqReplayDone | MsgLockReplayDone: "REQ_REPLAY_DONE|LOCK_REPLAY_DONE",
		MsgEarlyReply | 0x10:                 "EARLY_REPLY|0x10",
		0x8000_0000:                          "0x80000000",
	} {
		if got := f.String(); got != want {
			t.Errorf("MsgFlags(%#x).String() = %q, want %q", uint32(f), got, want)
		}
	}
}

func TestErrnoValid(t *testing.T) {
	for e, want := range map[int32]bool{
		0: true, -1: true, -28: true, -4095: true,
		1: false, -4096: false, 4095: false, -2147483648: false, 2147483647: false,
	} {
		if got := ErrnoValid(e); got != want {
			t.Errorf("ErrnoValid(%d) = %v, want %v", e, got, want)
		}
	}
}

func TestJobID(t *testing.T) {
	var h Header
	if got := h.JobID(); got != "" {
		t.Errorf("zero JobID() = %q", got)
	}
	for _, s := range []string{"dd.1000", " a b ", "~!@#", strings.Repeat("x", JobIDSize), "", "j"} {
		if err := h.SetJobID(s); err != nil {
			t.Errorf("SetJobID(%q): %v", s, err)
			continue
		}
		if got := h.JobID(); got != s {
			t.Errorf("JobID() = %q after SetJobID(%q)", got, s)
		}
	}
	if err := h.SetJobID("ok"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		s    string
		want error
	}{
		{strings.Repeat("x", JobIDSize+1), ErrTooLong},
		{"a\x00b", ErrBadField},
		{"tab\there", ErrBadField},
		{"del\x7f", ErrBadField},
		{"caf\xc3\xa9", ErrBadField},
	} {
		if err := h.SetJobID(tt.s); !errors.Is(err, tt.want) {
			t.Errorf("SetJobID(%q) = %v, want %v", tt.s, err, tt.want)
		}
		if got := h.JobID(); got != "ok" {
			t.Errorf("failed SetJobID(%q) changed the job id to %q", tt.s, got)
		}
	}
}

func TestIsEarlyReply(t *testing.T) {
	for name, h := range sampleHeaders() {
		if got, want := h.IsEarlyReply(), name == sEarlyReply; got != want {
			t.Errorf("%s: IsEarlyReply() = %v", name, got)
		}
	}
}

// TestHeaderRejects covers every rejection path of Unmarshal by mutating the
// bytes of a valid header.
func TestHeaderRejects(t *testing.T) {
	le := binary.LittleEndian
	put32 := func(off int, v uint32) func([]byte) []byte {
		return func(b []byte) []byte { le.PutUint32(b[off:], v); return b }
	}
	put64 := func(off int, v uint64) func([]byte) []byte {
		return func(b []byte) []byte { le.PutUint64(b[off:], v); return b }
	}
	tests := []struct {
		name string
		base string
		edit func(b []byte) []byte
		want []error
	}{
		{"short", sRequest, func(b []byte) []byte { return b[:HeaderSize-1] }, []error{ErrShort}},
		{"empty", sRequest, func(b []byte) []byte { return nil }, []error{ErrShort}},
		{"magic", sRequest, func(b []byte) []byte { b[0] ^= 1; return b }, []error{ErrBadMagic}},
		{"lnet magic", sRequest, func(b []byte) []byte { copy(b, "LNet"); return b }, []error{ErrBadMagic}},
		{"swapped magic", sRequest, func(b []byte) []byte { binary.BigEndian.PutUint32(b, Magic); return b }, []error{ErrBadMagic, ErrOtherEndian}},
		{"major", sRequest, put32(4, 2<<16), []error{ErrBadVersion}},
		{"minor", sRequest, put32(4, 1<<16|1), []error{ErrBadVersion}},
		{"swapped version", sRequest, put32(4, 1), []error{ErrBadVersion}},
		{"type 0", sRequest, put32(8, 0), []error{ErrBadType}},
		{"type 4710", sRequest, put32(8, 4710), []error{ErrBadType}},
		{"type 4714", sRequest, put32(8, 4714), []error{ErrBadType}},
		{"type high byte", sReply, func(b []byte) []byte { b[11] = 0x80; return b }, []error{ErrBadType}},
		{"body over max", sRequest, put32(76, MaxBodySize+1), []error{ErrTooLong}},
		{"body huge", sReply, put32(76, 0xffffffff), []error{ErrTooLong}},
		{"xid 0", sRequest, put64(24, 0), []error{ErrBadField}},
		{"unknown flag 0x8", sRequest, put32(20, 0x8), []error{ErrBadField}},
		{"unknown flag 0x10", sRequest, put32(20, 0x10), []error{ErrBadField}},
		{"unknown flag high", sReply, put32(20, 0x8000_0000), []error{ErrBadField}},
		{"request early reply flag", sRequest, put32(20, uint32(MsgEarlyReply)), []error{ErrBadField}},
		{"reply resent flag", sReply, put32(20, uint32(MsgResent)), []error{ErrBadField}},
		{"error replay flag", sError, put32(20, uint32(MsgReplay)), []error{ErrBadField}},
		{"error early reply flag", sError, put32(20, uint32(MsgEarlyReply)), []error{ErrBadField}},
		{"crc32 flag alone", sRequest, put32(20, uint32(MsgBulkCksumCRC32)), []error{ErrBadField}},
		{"unknown flag 0x1000", sReply, put32(20, 0x1000), []error{ErrBadField}},
		{"AT_SUPPORT on a reply", sReply, put32(20, uint32(MsgATSupport)), []error{ErrBadField}},
		{"request status", sRequest, put32(16, 0xffffffe4), []error{ErrBadField}},
		{"positive status", sReply, put32(16, 28), []error{ErrBadField}},
		{"status -4096", sReply, put32(16, 0xfffff000), []error{ErrBadField}},
		{"status min int32", sError, put32(16, 0x8000_0000), []error{ErrBadField}},
		{"error status 0", sError, put32(16, 0), []error{ErrBadField}},
		{"request transno without replay", sRequest, put64(32, 1), []error{ErrBadField}},
		{"request last_committed", sRequest, put64(40, 1), []error{ErrBadField}},
		{"request service time", sRequest, put32(72, 1), []error{ErrBadField}},
		{"reply last_xid", sReply, put64(48, 1), []error{ErrBadField}},
		{"error last_xid", sError, put64(48, 1), []error{ErrBadField}},
		{"reply job id", sReply, func(b []byte) []byte { b[88] = 'x'; return b }, []error{ErrBadField}},
		{"error job id", sError, func(b []byte) []byte { b[88] = 'x'; return b }, []error{ErrBadField}},
		{"error transno", sError, put64(32, 1), []error{ErrBadField}},
		{"early reply status", sEarlyReply, put32(16, 0xffffffff), []error{ErrBadField}},
		{"early reply transno", sEarlyReply, put64(32, 1), []error{ErrBadField}},
		{"early reply body", sEarlyReply, put32(76, 1), []error{ErrBadField}},
		{"bulk over max", sRequest, put32(80, MaxBulkSize+1), []error{ErrTooLong}},
		{"checksum without flag", sReply, put32(84, 1), []error{ErrBadField}},
		{"checksum flag without bulk", sRequest, put32(80, 0), []error{ErrBadField}},
		{"error bulk length", sError, put32(80, 1), []error{ErrBadField}},
		{"early reply bulk length", sEarlyReply, put32(80, 1), []error{ErrBadField}},
		{"early reply checksum flag", sEarlyReply, put32(20, uint32(MsgEarlyReply|MsgBulkCksum)), []error{ErrBadField}},
		{"job id non-printable", sRequest, func(b []byte) []byte { b[89] = 0x1f; return b }, []error{ErrBadField}},
		{"job id high bit", sRequest, func(b []byte) []byte { b[88] = 0xc3; return b }, []error{ErrBadField}},
		{"job id DEL", sRequest, func(b []byte) []byte { b[88] = 0x7f; return b }, []error{ErrBadField}},
		{"job id bytes after NUL", sRequest, func(b []byte) []byte { b[HeaderSize-1] = 'x'; return b }, []error{ErrBadField}},
		{"job id embedded NUL", sReplay, func(b []byte) []byte { b[98] = 0; return b }, []error{ErrBadField}},
		{"job id leading NUL", sRequest, func(b []byte) []byte { b[88] = 0; return b }, []error{ErrBadField}},
	}
	for _, tt := range tests {
		orig := sampleHeaders()[tt.base]
		b := tt.edit(mustMarshal(t, orig))
		h := orig
		h.Timeout = 0xdead // Unmarshal must leave h alone on error
		before := h
		err := h.Unmarshal(b)
		if err == nil {
			t.Errorf("%s: Unmarshal accepted % x", tt.name, b)
			continue
		}
		for _, w := range tt.want {
			if !errors.Is(err, w) {
				t.Errorf("%s: error %q does not wrap %q", tt.name, err, w)
			}
		}
		if !strings.HasPrefix(err.Error(), "ptlrpc: ") {
			t.Errorf("%s: error %q lacks the package prefix", tt.name, err)
		}
		if h != before {
			t.Errorf("%s: Unmarshal changed h on error", tt.name)
		}
	}
}

// TestHeaderAccepts covers the edges of the rules from the accepting side.
func TestHeaderAccepts(t *testing.T) {
	s := sampleHeaders()
	tests := []struct {
		name string
		base string
		edit func(h *Header)
	}{
		{"unknown opcode", sRequest, func(h *Header) { h.Opcode = 0xffffffff }},
		{"opcode 0", sReply, func(h *Header) { h.Opcode = 0 }},
		{"all request flags", sReplay, func(h *Header) { h.Flags, h.BulkLen = requestFlags, 1 }},
		{"reply checksum", sReply, func(h *Header) { h.Flags, h.BulkLen, h.BulkCksum = MsgBulkCksum, 4096, 0 }},
		{"reply crc32 checksum", sReply, func(h *Header) { h.Flags, h.BulkLen, h.BulkCksum = MsgBulkCksum|MsgBulkCksumCRC32, 4096, 7 }},
		{"status -4095", sReply, func(h *Header) { h.Status = -4095 }},
		{"status -1 error", sError, func(h *Header) { h.Status = -1 }},
		{"body at max", sRequest, func(h *Header) { h.BodyLen = MaxBodySize }},
		{"no job id", sRequest, func(h *Header) { _ = h.SetJobID("") }},
		{"max everything", sReply, func(h *Header) {
			h.XID, h.Transno, h.LastCommitted, h.Handle = ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)
			h.ConnCount, h.Timeout, h.ServiceTime = ^uint32(0), ^uint32(0), ^uint32(0)
		}},
		{"connect request without handle", sRequest, func(h *Header) { h.Opcode, h.Handle, h.ConnCount = OSTConnect, 0, 0 }},
	}
	for _, tt := range tests {
		h := s[tt.base]
		tt.edit(&h)
		b := mustMarshal(t, h)
		var got Header
		if err := got.Unmarshal(b); err != nil || got != h {
			t.Errorf("%s: Unmarshal = %+v, %v; want %+v", tt.name, got, err, h)
		}
	}
}

func TestHeaderMarshalRejects(t *testing.T) {
	tests := []struct {
		name string
		base string
		edit func(h *Header)
		want error
	}{
		{"zero header", sRequest, func(h *Header) { *h = Header{} }, ErrBadType},
		{"unknown type", sRequest, func(h *Header) { h.Type = 1 }, ErrBadType},
		{"body over max", sRequest, func(h *Header) { h.BodyLen = MaxBodySize + 1 }, ErrTooLong},
		{"xid 0", sRequest, func(h *Header) { h.XID = 0 }, ErrBadField},
		{"unknown flag", sRequest, func(h *Header) { h.Flags |= 0x1000 }, ErrBadField},
		{"crc32 without checksum", sRequest, func(h *Header) { h.Flags, h.BulkCksum = h.Flags&^MsgBulkCksum|MsgBulkCksumCRC32, 0 }, ErrBadField},
		{"crc32 on error", sError, func(h *Header) { h.Flags |= MsgBulkCksumCRC32 }, ErrBadField},
		{"early reply on request", sRequest, func(h *Header) { h.Flags |= MsgEarlyReply }, ErrBadField},
		{"request status", sRequest, func(h *Header) { h.Status = -1 }, ErrBadField},
		{"positive status", sReply, func(h *Header) { h.Status = 1 }, ErrBadField},
		{"error without status", sError, func(h *Header) { h.Status = 0 }, ErrBadField},
		{"request last_committed", sRequest, func(h *Header) { h.LastCommitted = 1 }, ErrBadField},
		{"request transno", sRequest, func(h *Header) { h.Transno = 1 }, ErrBadField},
		{"request service time", sRequest, func(h *Header) { h.ServiceTime = 1 }, ErrBadField},
		{"reply last_xid", sReply, func(h *Header) { h.LastXID = 1 }, ErrBadField},
		{"reply job id", sReply, func(h *Header) { _ = h.SetJobID("x") }, ErrBadField},
		{"early reply body", sEarlyReply, func(h *Header) { h.BodyLen = 1 }, ErrBadField},
		{"bad job id bytes", sRequest, func(h *Header) { h.jobID[10] = 'x' }, ErrBadField},
	}
	for _, tt := range tests {
		h := sampleHeaders()[tt.base]
		tt.edit(&h)
		b := bytes.Repeat([]byte{0xaa}, HeaderSize)
		if err := h.Marshal(b); !errors.Is(err, tt.want) {
			t.Errorf("%s: Marshal error = %v, want %v", tt.name, err, tt.want)
		}
		if !bytes.Equal(b, bytes.Repeat([]byte{0xaa}, HeaderSize)) {
			t.Errorf("%s: Marshal wrote into b on error", tt.name)
		}
	}
	h := sampleHeaders()[sRequest]
	if err := h.Marshal(make([]byte, HeaderSize-1)); !errors.Is(err, ErrShort) {
		t.Errorf("Marshal into short buffer: %v, want ErrShort", err)
	}
	// A longer buffer is fine and only its first HeaderSize bytes change.
	b := bytes.Repeat([]byte{0xaa}, HeaderSize+8)
	if err := h.Marshal(b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[HeaderSize:], bytes.Repeat([]byte{0xaa}, 8)) {
		t.Error("Marshal wrote past HeaderSize")
	}
}

func TestHeaderNoAllocs(t *testing.T) {
	h := sampleHeaders()[sRequest]
	b := make([]byte, HeaderSize)
	var d Header
	allocs := testing.AllocsPerRun(100, func() {
		if err := h.Marshal(b); err != nil {
			t.Fatal(err)
		}
		if err := d.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		_ = d.Opcode.String()
	})
	if allocs != 0 {
		t.Errorf("Marshal+Unmarshal allocate %v times per run", allocs)
	}
}

// The benchmarks report, next to their own speed, how many times faster
// they run than encoding/binary's reflection-driven codec on the same layout
// (rawHeader), over the same b.N in the same run: the obvious way to write
// this package, and the baseline it must beat.

func BenchmarkHeaderMarshal(b *testing.B) {
	h := sampleHeaders()[sRequest]
	raw := toRaw(h)
	buf := make([]byte, HeaderSize)
	base := timeBaseline(b, func() error {
		_, err := binary.Encode(buf, binary.LittleEndian, &raw)
		return err
	})
	b.ReportAllocs()
	b.SetBytes(HeaderSize)
	b.ResetTimer()
	for range b.N {
		if err := h.Marshal(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(base)/float64(b.Elapsed()), "x-vs-binary.Encode")
}

func BenchmarkHeaderUnmarshal(b *testing.B) {
	buf := mustMarshal(b, sampleHeaders()[sRequest])
	var raw rawHeader
	base := timeBaseline(b, func() error {
		_, err := binary.Decode(buf, binary.LittleEndian, &raw)
		return err
	})
	b.ReportAllocs()
	b.SetBytes(HeaderSize)
	b.ResetTimer()
	var d Header
	for range b.N {
		if err := d.Unmarshal(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(base)/float64(b.Elapsed()), "x-vs-binary.Decode")
}

// timeBaseline runs f b.N times outside the benchmark's timer and returns
// how long that took.
func timeBaseline(b *testing.B, f func() error) time.Duration {
	b.StopTimer()
	defer b.StartTimer()
	start := time.Now()
	for range b.N {
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}
