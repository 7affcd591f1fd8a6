package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// sampleNiobufs returns valid vectors: empty, one, and several with gaps,
// touching extents and every flag.
func sampleNiobufs() [][]Niobuf {
	return [][]Niobuf{
		nil,
		{{Offset: 0, Len: 4096}},
		{
			{Offset: 0x0102030405060708, Len: 0x1000, Flags: NiobufSync | NiobufFromGrant},
			{Offset: 0x0102030405061708, Len: 0x2000, Flags: NiobufGranted}, // touches the previous
			{Offset: 0x0102030405070000, Len: 1, Flags: NiobufNoCache | NiobufNoQuota | NiobufSrvLock},
		},
		{{Offset: math.MaxUint64 - 10, Len: 10}}, // ends exactly at 2^64-1
		{{Offset: 0, Len: MaxBulkSize}},
	}
}

func TestNiobufRoundTrip(t *testing.T) {
	for _, n := range sampleNiobufs() {
		prefix := []byte("body")
		b, err := AppendNiobufs(prefix, n)
		if err != nil {
			t.Fatalf("AppendNiobufs(%v): %v", n, err)
		}
		if !bytes.Equal(b[:4], prefix) || len(b) != 4+NiobufSize*len(n) {
			t.Fatalf("AppendNiobufs(%v) = % x", n, b)
		}
		got, err := ParseNiobufs(b[4:], len(n))
		if err != nil {
			t.Fatalf("ParseNiobufs(%v): %v", n, err)
		}
		if !reflect.DeepEqual(got, n) {
			t.Errorf("round trip: got %v, want %v", got, n)
		}
		again, _ := AppendNiobufs(nil, got)
		if !bytes.Equal(again, b[4:]) {
			t.Errorf("re-encoding differs:\n% x\n% x", again, b[4:])
		}
	}
}

// TestNiobufLayout pins the layout to Lustre's niobuf_remote.
func TestNiobufLayout(t *testing.T) {
	type rawNiobuf struct {
		Offset uint64
		Len    uint32
		Flags  uint32
	}
	if got := binary.Size(rawNiobuf{}); got != NiobufSize {
		t.Fatalf("documented layout is %d bytes, NiobufSize is %d", got, NiobufSize)
	}
	n := sampleNiobufs()[2]
	b, err := AppendNiobufs(nil, n)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for _, nb := range n {
		want, _ = binary.Append(want, binary.LittleEndian, rawNiobuf{nb.Offset, nb.Len, uint32(nb.Flags)})
	}
	if !bytes.Equal(b, want) {
		t.Errorf("encoding differs from the documented layout:\n got % x\nwant % x", b, want)
	}
	golden := []struct {
		field string
		off   int
		want  []byte
	}{
		{"offset", 0, []byte{8, 7, 6, 5, 4, 3, 2, 1}},
		{"length", 8, []byte{0, 0x10, 0, 0}},
		{"flags", 12, []byte{0x28, 0, 0, 0}},
		{"second offset", 16, []byte{8, 0x17, 6, 5, 4, 3, 2, 1}},
		{"second length", 24, []byte{0, 0x20, 0, 0}},
		{"second flags", 28, []byte{0x40, 0, 0, 0}},
		{"third flags", 44, []byte{0x80, 0x03, 0, 0}},
	}
	for _, g := range golden {
		if got := b[g.off : g.off+len(g.want)]; !bytes.Equal(got, g.want) {
			t.Errorf("%s at %d = % x, want % x", g.field, g.off, got, g.want)
		}
	}
	// Lustre's OBD_BRW_* values.
	for f, want := range map[NiobufFlags]uint32{
		NiobufSync: 0x08, NiobufFromGrant: 0x20, NiobufGranted: 0x40,
		NiobufNoCache: 0x80, NiobufNoQuota: 0x100, NiobufSrvLock: 0x200,
	} {
		if uint32(f) != want {
			t.Errorf("flag %#x, want %#x", uint32(f), want)
		}
	}
}

func TestNiobufRejects(t *testing.T) {
	nb := func(off uint64, l uint32, f NiobufFlags) Niobuf { return Niobuf{Offset: off, Len: l, Flags: f} }
	tests := []struct {
		name   string
		n      []Niobuf
		want   error
		detail string
	}{
		{"zero length", []Niobuf{nb(0, 0, 0)}, ErrBadField, "length 0"},
		{"zero length later", []Niobuf{nb(0, 1, 0), nb(10, 0, 0)}, ErrBadField, "niobuf 1"},
		{"overflow", []Niobuf{nb(math.MaxUint64, 1, 0)}, ErrBadField, "ends past"},
		{"overflow to 2^64", []Niobuf{nb(math.MaxUint64-9, 10, 0)}, ErrBadField, "ends past"},
		{"unknown flag read", []Niobuf{nb(0, 1, 0x01)}, ErrBadField, "unknown flags 0x1"},
		{"unknown flag high", []Niobuf{nb(0, 1, NiobufSync|0x8000_0000)}, ErrBadField, "unknown flags 0x80000000"},
		{"unsorted", []Niobuf{nb(4096, 4096, 0), nb(0, 4096, 0)}, ErrBadField, "unsorted"},
		{"same offset", []Niobuf{nb(0, 4096, 0), nb(0, 4096, 0)}, ErrBadField, "overlaps"},
		{"overlapping", []Niobuf{nb(0, 4096, 0), nb(4095, 4096, 0)}, ErrBadField, "overlaps"},
		{"total over max", []Niobuf{nb(0, MaxBulkSize, 0), nb(MaxBulkSize, 1, 0)}, ErrTooLong, "at most"},
		{"one over max", []Niobuf{nb(0, MaxBulkSize+1, 0)}, ErrTooLong, "at most"},
	}
	for _, tt := range tests {
		prefix := []byte("keep")
		b, err := AppendNiobufs(prefix, tt.n)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.detail) {
			t.Errorf("%s: AppendNiobufs error = %v, want %v with %q", tt.name, err, tt.want, tt.detail)
		}
		if !bytes.Equal(b, prefix) {
			t.Errorf("%s: AppendNiobufs changed b on error: %q", tt.name, b)
		}
		// Encode without checks and feed the decoder.
		var raw []byte
		for _, x := range tt.n {
			raw = binary.LittleEndian.AppendUint64(raw, x.Offset)
			raw = binary.LittleEndian.AppendUint32(raw, x.Len)
			raw = binary.LittleEndian.AppendUint32(raw, uint32(x.Flags))
		}
		got, err := ParseNiobufs(raw, 100)
		if got != nil || !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.detail) {
			t.Errorf("%s: ParseNiobufs = %v, %v; want nil, %v with %q", tt.name, got, err, tt.want, tt.detail)
		}
	}

	valid, err := AppendNiobufs(nil, sampleNiobufs()[2])
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		b    []byte
		max  int
		want error
	}{
		{"partial niobuf", valid[:len(valid)-1], 10, ErrShort},
		{"trailing byte", append(valid[:len(valid):len(valid)], 0), 10, ErrShort},
		{"short single", valid[:NiobufSize-1], 10, ErrShort},
		{"more than max", valid, 2, ErrTooLong},
		{"max zero", valid[:NiobufSize], 0, ErrTooLong},
		{"max negative", nil, -1, ErrTooLong},
	} {
		if got, err := ParseNiobufs(tt.b, tt.max); got != nil || !errors.Is(err, tt.want) {
			t.Errorf("%s: ParseNiobufs = %v, %v; want nil, %v", tt.name, got, err, tt.want)
		}
	}
	if got, err := ParseNiobufs(valid, 3); err != nil || len(got) != 3 {
		t.Errorf("ParseNiobufs at exactly max = %v, %v", got, err)
	}
	if got, err := ParseNiobufs(nil, 0); err != nil || got != nil {
		t.Errorf("ParseNiobufs(empty) = %v, %v; want nil, nil", got, err)
	}
}

func TestNiobufEnd(t *testing.T) {
	if got := (Niobuf{Offset: 4096, Len: 100}).End(); got != 4196 {
		t.Errorf("End() = %d", got)
	}
}

func TestNiobufAllocs(t *testing.T) {
	n := sampleNiobufs()[2]
	buf := make([]byte, 0, NiobufSize*len(n))
	if a := testing.AllocsPerRun(100, func() {
		if _, err := AppendNiobufs(buf[:0], n); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("AppendNiobufs into a big enough buffer allocates %v times", a)
	}
	b, _ := AppendNiobufs(nil, n)
	if a := testing.AllocsPerRun(100, func() {
		if _, err := ParseNiobufs(b, 10); err != nil {
			t.Fatal(err)
		}
	}); a != 1 {
		t.Errorf("ParseNiobufs allocates %v times, want 1 (the result)", a)
	}
}

// bulkVector is a 4 MiB write of 256 16 KiB extents, the shape of a default
// striped write RPC.
func bulkVector() []Niobuf {
	n := make([]Niobuf, 256)
	for i := range n {
		n[i] = Niobuf{Offset: uint64(i) * 32 << 10, Len: 16 << 10, Flags: NiobufFromGrant}
	}
	return n
}

func BenchmarkAppendNiobufs(b *testing.B) {
	n := bulkVector()
	buf := make([]byte, 0, NiobufSize*len(n))
	b.ReportAllocs()
	b.SetBytes(int64(NiobufSize * len(n)))
	for b.Loop() {
		if _, err := AppendNiobufs(buf[:0], n); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseNiobufs(b *testing.B) {
	enc, err := AppendNiobufs(nil, bulkVector())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if _, err := ParseNiobufs(enc, 1024); err != nil {
			b.Fatal(err)
		}
	}
}
