package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func samplePing() PingInfo {
	return PingInfo{
		Features: PingFeatBase | PingFeatNIStatus | PingFeatMultiRail | 1<<20, // unknown bit kept
		PID:      PIDLustre,
		NIDs: []NIDStatus{
			{LoNID, NIStatusUp},
			{MustParseNID("192.168.1.5@tcp"), NIStatusUp},
			{MustParseNID("[fd00::5]@o2ib1"), NIStatusDown},
		},
	}
}

func mustAppendPing(t testing.TB, p PingInfo) []byte {
	t.Helper()
	b, err := p.AppendBinary(nil)
	if err != nil {
		t.Fatalf("AppendBinary(%+v): %v", p, err)
	}
	return b
}

func TestPingRoundTrip(t *testing.T) {
	full := PingInfo{PID: 1}
	for i := range MaxPingNIDs {
		full.NIDs = append(full.NIDs, NIDStatus{MustParseNID(fmt.Sprintf("10.0.%d.%d@tcp%d", i/256, i%256, i)), NIStatusUp})
	}
	for _, p := range []PingInfo{samplePing(), {}, {Features: PingFeatBase, PID: 7}, full} {
		b := mustAppendPing(t, p)
		if len(b) != p.Size() {
			t.Errorf("encoded %d bytes, Size() = %d", len(b), p.Size())
		}
		var got PingInfo
		if err := got.Unmarshal(b); err != nil {
			t.Fatalf("Unmarshal: %v", err)
		}
		if !reflect.DeepEqual(got, p) {
			t.Errorf("round trip\n got %+v\nwant %+v", got, p)
		}
	}
	if got := full.Size(); got != MaxPingInfoSize {
		t.Errorf("largest ping is %d bytes, MaxPingInfoSize = %d", got, MaxPingInfoSize)
	}
}

func TestPingGolden(t *testing.T) {
	b := mustAppendPing(t, samplePing())
	tests := []struct {
		field string
		off   int
		want  []byte
	}{
		{"magic", 0, []byte("Ping")},
		{"features", 4, []byte{0x0b, 0, 0x10, 0}},
		{"pid", 8, []byte{0x39, 0x30, 0, 0}},
		{"count", 12, []byte{3, 0, 0, 0}},
		{"NID 0", 16, []byte{9, 0, 0, 0, 0, 0, 0, 0}},
		{"status 0", 40, []byte{0xde, 0xc0, 0xaa, 0x15}},
		{"NID 1", 44, []byte{2, 0, 0, 0, 4, 0, 0, 0, 192, 168, 1, 5}},
		{"NID 2", 72, []byte{5, 0, 1, 0, 16, 0, 0, 0, 0xfd}},
		{"status 2", 96, []byte{0xce, 0xfa, 0xad, 0xde}},
	}
	for _, tt := range tests {
		if got := b[tt.off : tt.off+len(tt.want)]; !bytes.Equal(got, tt.want) {
			t.Errorf("%s at %d = % x, want % x", tt.field, tt.off, got, tt.want)
		}
	}
	if len(b) != 100 {
		t.Errorf("len = %d, want 100", len(b))
	}
}

func TestPingUnmarshalRejects(t *testing.T) {
	le := binary.LittleEndian
	tests := []struct {
		name string
		edit func(b []byte) []byte
		want []error
	}{
		{"empty", func(b []byte) []byte { return nil }, []error{ErrShort}},
		{"in fixed part", func(b []byte) []byte { return b[:PingInfoFixedSize-1] }, []error{ErrShort}},
		{"in NID list", func(b []byte) []byte { return b[:len(b)-1] }, []error{ErrShort}},
		{"trailing byte", func(b []byte) []byte { return append(b, 0) }, []error{ErrTooLong}},
		{"magic", func(b []byte) []byte { b[0]++; return b }, []error{ErrBadMagic}},
		{"swapped magic", func(b []byte) []byte { le.PutUint32(b, 0x50696e67); return b }, []error{ErrBadMagic, ErrOtherEndian}},
		{"too many NIDs", func(b []byte) []byte { le.PutUint32(b[12:], MaxPingNIDs+1); return b }, []error{ErrTooLong}},
		{"huge count", func(b []byte) []byte { le.PutUint32(b[12:], 0xffffffff); return b }, []error{ErrTooLong}},
		{"count above data", func(b []byte) []byte { le.PutUint32(b[12:], 4); return b }, []error{ErrShort}},
		{"bad NID", func(b []byte) []byte { b[44] = 200; return b }, []error{ErrBadNID}},
		{"zero NID", func(b []byte) []byte { clear(b[44:68]); return b }, []error{ErrBadNID}},
		{"status 0", func(b []byte) []byte { le.PutUint32(b[68:], 0); return b }, []error{ErrBadField}},
		{"status junk", func(b []byte) []byte { le.PutUint32(b[96:], 1); return b }, []error{ErrBadField}},
	}
	for _, tt := range tests {
		b := tt.edit(mustAppendPing(t, samplePing()))
		p := PingInfo{PID: 99}
		err := p.Unmarshal(b)
		if err == nil {
			t.Errorf("%s: Unmarshal accepted % x", tt.name, b)
			continue
		}
		for _, w := range tt.want {
			if !errors.Is(err, w) {
				t.Errorf("%s: error %q does not wrap %q", tt.name, err, w)
			}
		}
		if !reflect.DeepEqual(p, PingInfo{PID: 99}) {
			t.Errorf("%s: Unmarshal changed p on error: %+v", tt.name, p)
		}
	}
}

func TestPingAppendRejects(t *testing.T) {
	tests := []struct {
		name string
		edit func(p *PingInfo)
		want error
	}{
		{"too many", func(p *PingInfo) { p.NIDs = make([]NIDStatus, MaxPingNIDs+1) }, ErrTooLong},
		{"zero NID", func(p *PingInfo) { p.NIDs[1].NID = AnyNID }, ErrBadNID},
		{"invalid NID", func(p *PingInfo) { p.NIDs[1].NID.Net.Type = 1 }, ErrBadNID},
		{"status", func(p *PingInfo) { p.NIDs[2].Status = 0 }, ErrBadField},
	}
	for _, tt := range tests {
		p := samplePing()
		tt.edit(&p)
		b, err := p.AppendBinary([]byte("x"))
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: error = %v, want %v", tt.name, err, tt.want)
		}
		if string(b) != "x" {
			t.Errorf("%s: AppendBinary changed b on error", tt.name)
		}
	}
}

func TestNIStatusString(t *testing.T) {
	for s, want := range map[NIStatus]string{NIStatusUp: "up", NIStatusDown: "down", 0: "NIStatus(0x0)", 0xabc: "NIStatus(0xabc)"} {
		if got := s.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}
