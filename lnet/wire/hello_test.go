package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"reflect"
	"testing"
	"testing/iotest"
)

func sampleHello() Hello {
	return Hello{
		Version:        HelloVersion,
		SrcNID:         MustParseNID("10.0.0.1@tcp"),
		DstNID:         MustParseNID("10.0.0.2@tcp"),
		SrcPID:         PIDLustre,
		DstPID:         PIDLustre,
		SrcIncarnation: 0x0102030405060708,
		DstIncarnation: 0x1112131415161718,
		ConnType:       ConnBulkOut,
		IPs: []netip.Addr{
			netip.MustParseAddr("10.0.0.1"),
			netip.MustParseAddr("fd00::1"),
			netip.MustParseAddr("192.168.7.9"),
		},
	}
}

func mustAppendHello(t testing.TB, h Hello) []byte {
	t.Helper()
	b, err := h.AppendBinary(nil)
	if err != nil {
		t.Fatalf("AppendBinary(%+v): %v", h, err)
	}
	return b
}

func TestHelloRoundTrip(t *testing.T) {
	noIPs := sampleHello()
	noIPs.IPs = nil
	noIPs.ConnType = ConnAny
	noIPs.DstIncarnation = 0
	full := sampleHello()
	full.IPs = nil
	for i := range MaxHelloIPs {
		full.IPs = append(full.IPs, netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}))
	}
	for _, h := range []Hello{sampleHello(), noIPs, full} {
		b := mustAppendHello(t, h)
		if len(b) != h.Size() {
			t.Errorf("encoded %d bytes, Size() = %d", len(b), h.Size())
		}
		// The hello is followed by other traffic that ReadHello must not consume.
		r := bytes.NewReader(append(b, "next message"...))
		got, err := ReadHello(r)
		if err != nil {
			t.Fatalf("ReadHello: %v", err)
		}
		if !reflect.DeepEqual(got, h) {
			t.Errorf("round trip\n got %+v\nwant %+v", got, h)
		}
		if rest, _ := io.ReadAll(r); string(rest) != "next message" {
			t.Errorf("ReadHello consumed past the hello, left %q", rest)
		}
		// Byte by byte reads work too.
		if got, err := ReadHello(iotest.OneByteReader(bytes.NewReader(b))); err != nil || !reflect.DeepEqual(got, h) {
			t.Errorf("one-byte reader: %+v, %v", got, err)
		}
	}
}

func TestHelloGolden(t *testing.T) {
	b := mustAppendHello(t, sampleHello())
	tests := []struct {
		field string
		off   int
		want  []byte
	}{
		{"magic", 0, []byte("LNDh")},
		{"version", 4, []byte{1, 0, 0, 0}},
		{"src NID", 8, []byte{2, 0, 0, 0, 4, 0, 0, 0, 10, 0, 0, 1}},
		{"dst NID", 32, []byte{2, 0, 0, 0, 4, 0, 0, 0, 10, 0, 0, 2}},
		{"src pid", 56, []byte{0x39, 0x30, 0, 0}},
		{"dst pid", 60, []byte{0x39, 0x30, 0, 0}},
		{"src incarnation", 64, []byte{8, 7, 6, 5, 4, 3, 2, 1}},
		{"dst incarnation", 72, []byte{0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11}},
		{"conn type", 80, []byte{3, 0, 0, 0}},
		{"nips", 84, []byte{3, 0, 0, 0}},
		{"ip 0 (IPv4-mapped)", 88, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}},
		{"ip 1", 104, []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}},
		{"ip 2 tail", 132, []byte{192, 168, 7, 9}},
	}
	for _, tt := range tests {
		if got := b[tt.off : tt.off+len(tt.want)]; !bytes.Equal(got, tt.want) {
			t.Errorf("%s at %d = % x, want % x", tt.field, tt.off, got, tt.want)
		}
	}
	if len(b) != HelloFixedSize+3*16 {
		t.Errorf("len = %d", len(b))
	}
}

func TestHelloAppendKeepsPrefix(t *testing.T) {
	h := sampleHello()
	b, err := h.AppendBinary([]byte("prefix"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("prefix")) || !bytes.Equal(b[6:], mustAppendHello(t, h)) {
		t.Error("AppendBinary did not append")
	}
}

func TestReadHelloRejects(t *testing.T) {
	le := binary.LittleEndian
	tests := []struct {
		name string
		edit func(b []byte) []byte
		want []error
	}{
		{"empty", func(b []byte) []byte { return nil }, []error{ErrShort, io.ErrUnexpectedEOF}},
		{"in magic", func(b []byte) []byte { return b[:3] }, []error{ErrShort, io.ErrUnexpectedEOF}},
		{"in fixed part", func(b []byte) []byte { return b[:HelloFixedSize-1] }, []error{ErrShort, io.ErrUnexpectedEOF}},
		{"in address list", func(b []byte) []byte { return b[:len(b)-1] }, []error{ErrShort, io.ErrUnexpectedEOF}},
		{"no address list", func(b []byte) []byte { return b[:HelloFixedSize] }, []error{ErrShort, io.ErrUnexpectedEOF}},
		{"magic", func(b []byte) []byte { b[3] ^= 0x80; return b }, []error{ErrBadMagic}},
		{"header magic", func(b []byte) []byte { le.PutUint32(b, HeaderMagic); return b }, []error{ErrBadMagic}},
		{"swapped magic", func(b []byte) []byte { le.PutUint32(b, 0x4c4e4468); return b }, []error{ErrBadMagic, ErrOtherEndian}},
		{"version 0", func(b []byte) []byte { le.PutUint32(b[4:], 0); return b }, []error{ErrBadVersion}},
		{"version 2", func(b []byte) []byte { le.PutUint32(b[4:], 2); return b }, []error{ErrBadVersion}},
		{"src NID", func(b []byte) []byte { b[8] = 1; return b }, []error{ErrBadNID}},
		{"dst NID", func(b []byte) []byte { b[36] = 3; return b }, []error{ErrBadNID}},
		{"zero src", func(b []byte) []byte { clear(b[8:32]); return b }, []error{ErrBadNID}},
		{"zero dst", func(b []byte) []byte { clear(b[32:56]); return b }, []error{ErrBadNID}},
		{"conn type", func(b []byte) []byte { le.PutUint32(b[80:], 4); return b }, []error{ErrBadType}},
		{"too many IPs", func(b []byte) []byte { le.PutUint32(b[84:], MaxHelloIPs+1); return b }, []error{ErrTooLong}},
		{"huge IP count", func(b []byte) []byte { le.PutUint32(b[84:], 0xffffffff); return b }, []error{ErrTooLong}},
	}
	for _, tt := range tests {
		b := tt.edit(mustAppendHello(t, sampleHello()))
		h, err := ReadHello(bytes.NewReader(b))
		if err == nil {
			t.Errorf("%s: ReadHello accepted % x", tt.name, b)
			continue
		}
		for _, w := range tt.want {
			if !errors.Is(err, w) {
				t.Errorf("%s: error %q does not wrap %q", tt.name, err, w)
			}
		}
		if errors.Is(err, ErrBadVersion) {
			if h.Version != le.Uint32(b[4:]) || h.SrcNID != AnyNID {
				t.Errorf("%s: on ErrBadVersion got %+v, want only the peer's version", tt.name, h)
			}
		} else if !reflect.DeepEqual(h, Hello{}) {
			t.Errorf("%s: non-zero Hello on error: %+v", tt.name, h)
		}
	}
}

func TestReadHelloStopsAfterBadMagic(t *testing.T) {
	// A stranger (here, HTTP) is turned away after the first 8 bytes, without
	// waiting for the rest of a hello that will never come.
	r := bytes.NewReader([]byte("GET / HTTP/1.1\r\n"))
	if _, err := ReadHello(r); !errors.Is(err, ErrBadMagic) {
		t.Fatalf("err = %v", err)
	}
	if r.Len() != 16-8 {
		t.Errorf("ReadHello read %d bytes, want 8", 16-r.Len())
	}
}

func TestReadHelloReadError(t *testing.T) {
	boom := errors.New("connection reset")
	_, err := ReadHello(iotest.ErrReader(boom))
	if !errors.Is(err, boom) || errors.Is(err, ErrShort) {
		t.Errorf("err = %v, want the reader's error", err)
	}
	// An error part way through is passed on too.
	b := mustAppendHello(t, sampleHello())
	_, err = ReadHello(io.MultiReader(bytes.NewReader(b[:20]), iotest.ErrReader(boom)))
	if !errors.Is(err, boom) {
		t.Errorf("err = %v, want the reader's error", err)
	}
}

func TestHelloAppendRejects(t *testing.T) {
	tests := []struct {
		name string
		edit func(h *Hello)
		want error
	}{
		{"version 0", func(h *Hello) { h.Version = 0 }, ErrBadVersion},
		{"version 2", func(h *Hello) { h.Version = 2 }, ErrBadVersion},
		{"zero src", func(h *Hello) { h.SrcNID = AnyNID }, ErrBadNID},
		{"zero dst", func(h *Hello) { h.DstNID = AnyNID }, ErrBadNID},
		{"bad src", func(h *Hello) { h.SrcNID.Net.Num = 1; h.SrcNID.Net.Type = LO }, ErrBadNID},
		{"conn type", func(h *Hello) { h.ConnType = 9 }, ErrBadType},
		{"too many IPs", func(h *Hello) { h.IPs = make([]netip.Addr, MaxHelloIPs+1) }, ErrTooLong},
		{"zero IP", func(h *Hello) { h.IPs[1] = netip.Addr{} }, ErrBadField},
		{"zoned IP", func(h *Hello) { h.IPs[1] = netip.MustParseAddr("fe80::1%eth0") }, ErrBadField},
		{"mapped IP", func(h *Hello) { h.IPs[1] = netip.MustParseAddr("::ffff:10.0.0.1") }, ErrBadField},
	}
	for _, tt := range tests {
		h := sampleHello()
		tt.edit(&h)
		b, err := h.AppendBinary([]byte("x"))
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: AppendBinary error = %v, want %v", tt.name, err, tt.want)
		}
		if string(b) != "x" {
			t.Errorf("%s: AppendBinary changed b on error: %q", tt.name, b)
		}
	}
}

func TestConnTypeString(t *testing.T) {
	for c, want := range map[ConnType]string{
		ConnAny: "any", ConnControl: "control", ConnBulkIn: "bulk_in", ConnBulkOut: "bulk_out", 4: "ConnType(4)",
	} {
		if got := c.String(); got != want {
			t.Errorf("ConnType(%d).String() = %q, want %q", uint32(c), got, want)
		}
	}
}

func TestConnTypeInvert(t *testing.T) {
	for c, want := range map[ConnType]ConnType{
		ConnAny: ConnAny, ConnControl: ConnControl, ConnBulkIn: ConnBulkOut, ConnBulkOut: ConnBulkIn,
	} {
		if got := c.Invert(); got != want {
			t.Errorf("%v.Invert() = %v, want %v", c, got, want)
		}
		if c.Invert().Invert() != c {
			t.Errorf("%v.Invert() is not an involution", c)
		}
	}
}
