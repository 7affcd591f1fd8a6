package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"
)

var (
	testSrc = MustParseNID("192.168.1.5@tcp")
	testDst = MustParseNID("[fd00::7]@tcp1")
)

// sampleHeaders returns one valid header of every type, each field set to a
// distinct value so that a misplaced field shows in the golden bytes.
func sampleHeaders() map[MsgType]Header {
	base := Header{SrcNID: testSrc, DstNID: testDst, SrcPID: PIDLustre, DstPID: 0x01020304}
	put := base
	put.Type = MsgPut
	put.PayloadLen = 4096
	put.WMD = WireHandle{Interface: 0x1111111111111111, Object: 0x2222222222222222}
	put.MatchBits = 0x0123456789abcdef
	put.HdrData = 0xfedcba9876543210
	put.Portal = 7
	put.Offset = 0x1000

	get := base
	get.Type = MsgGet
	get.WMD = WireHandle{Interface: 3, Object: 4}
	get.MatchBits = 0x55
	get.Portal = 8
	get.Offset = 512
	get.SinkLength = MTU

	ack := base
	ack.Type = MsgAck
	ack.WMD = WireHandle{Interface: 5, Object: 6}
	ack.MatchBits = 0x66
	ack.MLength = 4096

	reply := base
	reply.Type = MsgReply
	reply.PayloadLen = MTU
	reply.WMD = WireHandle{Interface: 7, Object: 8}

	hello := base
	hello.Type = MsgHello
	hello.PayloadLen = 100

	return map[MsgType]Header{MsgPut: put, MsgGet: get, MsgAck: ack, MsgReply: reply, MsgHello: hello}
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
	for typ, h := range sampleHeaders() {
		b := mustMarshal(t, h)
		// Trailing payload bytes are ignored.
		b = append(b, "payload"...)
		var got Header
		if err := got.Unmarshal(b); err != nil {
			t.Errorf("%v: Unmarshal: %v", typ, err)
			continue
		}
		if got != h {
			t.Errorf("%v: round trip\n got %+v\nwant %+v", typ, got, h)
		}
		again := mustMarshal(t, got)
		if !bytes.Equal(again, b[:HeaderSize]) {
			t.Errorf("%v: re-encoding differs:\n% x\n% x", typ, again, b[:HeaderSize])
		}
	}
}

// rawNID and rawHeader spell out the documented layout as Go structs, so
// that encoding/binary (which packs fields in order, without padding) gives
// an independent encoding to compare with.
type rawNID struct {
	Type, Num uint16
	Len       uint8
	Pad       [3]uint8
	Addr      [16]byte
}

type rawHeader struct {
	Magic               uint32
	Major, Minor        uint16
	Type                uint32
	Src, Dst            rawNID
	SrcPID, DstPID      uint32
	PayloadLen          uint32
	WMDIface, WMDObject uint64
	MatchBits, HdrData  uint64
	Portal, Offset      uint32
	SinkLength, MLength uint32
}

func toRawNID(n NID) rawNID {
	r := rawNID{Type: uint16(n.Net.Type), Num: n.Net.Num}
	switch {
	case n.Addr.Is4():
		r.Len = 4
		a := n.Addr.As4()
		copy(r.Addr[:], a[:])
	case n.Addr.Is6():
		r.Len = 16
		r.Addr = n.Addr.As16()
	}
	return r
}

func toRaw(h Header) rawHeader {
	return rawHeader{
		Magic: HeaderMagic, Major: HeaderVersionMajor, Minor: HeaderVersionMinor,
		Type: uint32(h.Type), Src: toRawNID(h.SrcNID), Dst: toRawNID(h.DstNID),
		SrcPID: h.SrcPID, DstPID: h.DstPID, PayloadLen: h.PayloadLen,
		WMDIface: h.WMD.Interface, WMDObject: h.WMD.Object,
		MatchBits: h.MatchBits, HdrData: h.HdrData,
		Portal: h.Portal, Offset: h.Offset, SinkLength: h.SinkLength, MLength: h.MLength,
	}
}

func TestHeaderLayoutMatchesReflection(t *testing.T) {
	if got := binary.Size(rawHeader{}); got != HeaderSize {
		t.Fatalf("documented layout is %d bytes, HeaderSize is %d", got, HeaderSize)
	}
	if got := binary.Size(rawNID{}); got != NIDSize {
		t.Fatalf("documented NID layout is %d bytes, NIDSize is %d", got, NIDSize)
	}
	for typ, h := range sampleHeaders() {
		want, err := binary.Append(nil, binary.LittleEndian, toRaw(h))
		if err != nil {
			t.Fatal(err)
		}
		if got := mustMarshal(t, h); !bytes.Equal(got, want) {
			t.Errorf("%v: Marshal differs from the documented layout:\n got % x\nwant % x", typ, got, want)
		}
	}
}

// TestHeaderGoldenOffsets pins a few fields to their byte offsets, so that any
// change to the layout fails here and is a deliberate, versioned change.
func TestHeaderGoldenOffsets(t *testing.T) {
	b := mustMarshal(t, sampleHeaders()[MsgPut])
	tests := []struct {
		field string
		off   int
		want  []byte
	}{
		{"magic", 0, []byte("LNet")},
		{"version", 4, []byte{1, 0, 0, 0}},
		{"type", 8, []byte{1, 0, 0, 0}},
		{"src NID", 12, []byte{2, 0, 0, 0, 4, 0, 0, 0, 192, 168, 1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"dst NID type/num/len", 36, []byte{2, 0, 1, 0, 16, 0, 0, 0, 0xfd, 0x00}},
		{"dst NID last addr byte", 59, []byte{7}},
		{"src pid", 60, []byte{0x39, 0x30, 0, 0}},
		{"dst pid", 64, []byte{4, 3, 2, 1}},
		{"payload length", 68, []byte{0, 0x10, 0, 0}},
		{"wmd interface", 72, bytes.Repeat([]byte{0x11}, 8)},
		{"wmd object", 80, bytes.Repeat([]byte{0x22}, 8)},
		{"match bits", 88, []byte{0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01}},
		{"hdr data", 96, []byte{0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe}},
		{"portal", 104, []byte{7, 0, 0, 0}},
		{"offset", 108, []byte{0, 0x10, 0, 0}},
		{"sink length", 112, []byte{0, 0, 0, 0}},
		{"mlength", 116, []byte{0, 0, 0, 0}},
	}
	for _, tt := range tests {
		if got := b[tt.off : tt.off+len(tt.want)]; !bytes.Equal(got, tt.want) {
			t.Errorf("%s at %d = % x, want % x", tt.field, tt.off, got, tt.want)
		}
	}
	g := mustMarshal(t, sampleHeaders()[MsgGet])
	if got, want := g[112:116], []byte{0, 0, 0x10, 0}; !bytes.Equal(got, want) {
		t.Errorf("GET sink length at 112 = % x, want % x", got, want)
	}
	a := mustMarshal(t, sampleHeaders()[MsgAck])
	if got, want := a[116:120], []byte{0, 0x10, 0, 0}; !bytes.Equal(got, want) {
		t.Errorf("ACK mlength at 116 = % x, want % x", got, want)
	}
	if got := a[8]; got != 0 {
		t.Errorf("ACK type byte = %d, want 0 (Lustre numbering)", got)
	}
}

func TestMsgTypeString(t *testing.T) {
	for typ, want := range map[MsgType]string{
		MsgPut: "PUT", MsgGet: "GET", MsgAck: "ACK", MsgReply: "REPLY", MsgHello: "HELLO", 5: "MsgType(5)",
	} {
		if got := typ.String(); got != want {
			t.Errorf("MsgType(%d).String() = %q, want %q", uint32(typ), got, want)
		}
	}
}

func TestWireHandleNone(t *testing.T) {
	if !WireHandleNone.IsNone() || (WireHandle{}).IsNone() || (WireHandle{Interface: ^uint64(0)}).IsNone() {
		t.Error("IsNone wrong")
	}
	h := sampleHeaders()[MsgPut]
	h.WMD = WireHandleNone
	b := mustMarshal(t, h)
	if !bytes.Equal(b[72:88], bytes.Repeat([]byte{0xff}, 16)) {
		t.Errorf("WireHandleNone encodes as % x", b[72:88])
	}
}

// TestHeaderRejects covers every rejection path of Unmarshal, by mutating
// the bytes of a valid header, and of Marshal where the same rule applies.
func TestHeaderRejects(t *testing.T) {
	le := binary.LittleEndian
	type mut struct {
		name string
		base MsgType
		edit func(b []byte) []byte
		want []error
	}
	tests := []mut{
		{"short", MsgPut, func(b []byte) []byte { return b[:HeaderSize-1] }, []error{ErrShort}},
		{"empty", MsgPut, func(b []byte) []byte { return nil }, []error{ErrShort}},
		{"magic", MsgPut, func(b []byte) []byte { b[0] ^= 1; return b }, []error{ErrBadMagic}},
		{"swapped magic", MsgPut, func(b []byte) []byte { le.PutUint32(b, 0x4c4e6574); return b }, []error{ErrBadMagic, ErrOtherEndian}},
		{"major", MsgPut, func(b []byte) []byte { b[4] = 2; return b }, []error{ErrBadVersion}},
		{"minor", MsgPut, func(b []byte) []byte { b[6] = 1; return b }, []error{ErrBadVersion}},
		{"type 5", MsgPut, func(b []byte) []byte { b[8] = 5; return b }, []error{ErrBadType}},
		{"type high", MsgPut, func(b []byte) []byte { b[11] = 0x80; return b }, []error{ErrBadType}},
		{"src net type", MsgPut, func(b []byte) []byte { b[12] = 77; return b }, []error{ErrBadNID}},
		{"src addr len", MsgPut, func(b []byte) []byte { b[16] = 5; return b }, []error{ErrBadNID}},
		{"dst pad", MsgPut, func(b []byte) []byte { b[41] = 1; return b }, []error{ErrBadNID}},
		{"src zero", MsgPut, func(b []byte) []byte { clear(b[12:36]); return b }, []error{ErrBadNID}},
		{"dst zero", MsgPut, func(b []byte) []byte { clear(b[36:60]); return b }, []error{ErrBadNID}},
		{"put payload over MTU", MsgPut, func(b []byte) []byte { le.PutUint32(b[68:], MTU+1); return b }, []error{ErrTooLong}},
		{"reply payload huge", MsgReply, func(b []byte) []byte { le.PutUint32(b[68:], 0xffffffff); return b }, []error{ErrTooLong}},
		{"hello payload over MTU", MsgHello, func(b []byte) []byte { le.PutUint32(b[68:], MTU+1); return b }, []error{ErrTooLong}},
		{"get with payload", MsgGet, func(b []byte) []byte { le.PutUint32(b[68:], 1); return b }, []error{ErrTooLong}},
		{"ack with payload", MsgAck, func(b []byte) []byte { le.PutUint32(b[68:], 1); return b }, []error{ErrTooLong}},
		{"get sink over MTU", MsgGet, func(b []byte) []byte { le.PutUint32(b[112:], MTU+1); return b }, []error{ErrTooLong}},
		{"ack mlength over MTU", MsgAck, func(b []byte) []byte { le.PutUint32(b[116:], MTU+1); return b }, []error{ErrTooLong}},
		{"put sets sink length", MsgPut, func(b []byte) []byte { b[112] = 1; return b }, []error{ErrBadField}},
		{"put sets mlength", MsgPut, func(b []byte) []byte { b[116] = 1; return b }, []error{ErrBadField}},
		{"get sets hdr data", MsgGet, func(b []byte) []byte { b[96] = 1; return b }, []error{ErrBadField}},
		{"get sets mlength", MsgGet, func(b []byte) []byte { b[116] = 1; return b }, []error{ErrBadField}},
		{"ack sets portal", MsgAck, func(b []byte) []byte { b[104] = 1; return b }, []error{ErrBadField}},
		{"ack sets offset", MsgAck, func(b []byte) []byte { b[108] = 1; return b }, []error{ErrBadField}},
		{"reply sets match bits", MsgReply, func(b []byte) []byte { b[88] = 1; return b }, []error{ErrBadField}},
		{"hello sets wmd", MsgHello, func(b []byte) []byte { b[80] = 1; return b }, []error{ErrBadField}},
	}
	for _, tt := range tests {
		orig := sampleHeaders()[tt.base]
		b := tt.edit(mustMarshal(t, orig))
		h := orig
		h.Portal = 0xdead // Unmarshal must leave h alone on error
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
		if h != before {
			t.Errorf("%s: Unmarshal changed h on error", tt.name)
		}
	}
}

func TestHeaderMarshalRejects(t *testing.T) {
	tests := []struct {
		name string
		edit func(h *Header)
		want error
	}{
		{"unknown type", func(h *Header) { h.Type = 9 }, ErrBadType},
		{"zero src", func(h *Header) { h.SrcNID = AnyNID }, ErrBadNID},
		{"zero dst", func(h *Header) { h.DstNID = NID{} }, ErrBadNID},
		{"invalid dst", func(h *Header) { h.DstNID.Net.Type = 3 }, ErrBadNID},
		{"mapped src", func(h *Header) { h.SrcNID.Addr = netip.AddrFrom16(h.SrcNID.Addr.As16()) }, ErrBadNID},
		{"payload over MTU", func(h *Header) { h.PayloadLen = MaxPayload + 1 }, ErrTooLong},
		{"field unused by PUT", func(h *Header) { h.MLength = 1 }, ErrBadField},
	}
	for _, tt := range tests {
		h := sampleHeaders()[MsgPut]
		tt.edit(&h)
		b := bytes.Repeat([]byte{0xaa}, HeaderSize)
		if err := h.Marshal(b); !errors.Is(err, tt.want) {
			t.Errorf("%s: Marshal error = %v, want %v", tt.name, err, tt.want)
		}
		if !bytes.Equal(b, bytes.Repeat([]byte{0xaa}, HeaderSize)) {
			t.Errorf("%s: Marshal wrote into b on error", tt.name)
		}
	}
	h := sampleHeaders()[MsgPut]
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

func TestHeaderSrcDst(t *testing.T) {
	h := sampleHeaders()[MsgPut]
	if got, want := h.Src().String(), "12345-192.168.1.5@tcp"; got != want {
		t.Errorf("Src() = %q, want %q", got, want)
	}
	if got, want := h.Dst().String(), "16909060-[fd00::7]@tcp1"; got != want {
		t.Errorf("Dst() = %q, want %q", got, want)
	}
}

func TestHeaderNoAllocs(t *testing.T) {
	h := sampleHeaders()[MsgPut]
	b := make([]byte, HeaderSize)
	var d Header
	allocs := testing.AllocsPerRun(100, func() {
		if err := h.Marshal(b); err != nil {
			t.Fatal(err)
		}
		if err := d.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Marshal+Unmarshal allocate %v times per run", allocs)
	}
}

// The benchmarks report, next to their own speed, how many times faster
// they run than encoding/binary's reflection-driven codec on the same layout
// (rawHeader), measured over the same b.N in the same run: the obvious way to
// write this package, and the baseline it must beat.

func BenchmarkHeaderMarshal(b *testing.B) {
	h := sampleHeaders()[MsgPut]
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
	h := sampleHeaders()[MsgPut]
	buf := mustMarshal(b, h)
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
