package layout

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nacrefs/nacre/internal/errs"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
)

func objs(n int) []Object {
	o := make([]Object, n)
	for i := range o {
		o[i] = Object{OSTIndex: uint32(i), Object: FID{Seq: 0x100000000 + uint64(i), Oid: uint32(10 + i)}}
	}
	return o
}

func plain(count int, size uint32) Layout {
	return Plain(RAID0{StripeCount: int32(count), StripeSize: size, StripeOffset: 0, Objects: objs(count)})
}

// pfl is the layout the tests use for composite cases:
// [0,1M) 1 stripe; [1M,4M) 2 stripes; [4M,EOF) 4 stripes; all 1 MiB units.
func pfl() Layout {
	return Layout{Gen: 3, Composite: true, Components: []Component{
		{ID: 1, Pattern: PatternRAID0, Start: 0, End: 1 * MiB, RAID0: RAID0{StripeCount: 1, StripeSize: MiB, StripeOffset: AnyOffset, Objects: objs(1)}},
		{ID: 2, Pattern: PatternRAID0, Start: 1 * MiB, End: 4 * MiB, RAID0: RAID0{StripeCount: 2, StripeSize: MiB, StripeOffset: AnyOffset, Objects: objs(2)}},
		{ID: 3, Pattern: PatternRAID0, Start: 4 * MiB, End: EOF, RAID0: RAID0{StripeCount: 4, StripeSize: MiB, StripeOffset: AnyOffset, Pool: "flash", Objects: objs(4)}},
	}}
}

func TestValidate(t *testing.T) {
	ok := pfl()
	tests := []struct {
		name   string
		mutate func(l *Layout)
		want   string // substring of the error, "" for valid
	}{
		{"plain", func(l *Layout) { *l = plain(3, MiB) }, ""},
		{"pfl", func(l *Layout) {}, ""},
		{"template all stripes", func(l *Layout) { *l = Plain(RAID0{StripeCount: AllStripes, StripeSize: MiB, StripeOffset: AnyOffset}) }, ""},
		{"no components", func(l *Layout) { l.Components = nil }, "no components"},
		{"plain with two", func(l *Layout) { l.Composite = false }, "plain layout"},
		{"plain not from 0", func(l *Layout) { *l = plain(1, MiB); l.Components[0].Start = MiB }, "plain layout"},
		{"zero id", func(l *Layout) { l.Components[1].ID = 0 }, "id 0"},
		{"repeated id", func(l *Layout) { l.Components[2].ID = 1 }, "repeated"},
		{"gap", func(l *Layout) { l.Components[1].Start = 2 * MiB }, "starts at"},
		{"empty extent", func(l *Layout) { l.Components[1].End = MiB }, "empty extent"},
		{"eof not last", func(l *Layout) { l.Components[1].End = EOF }, "not the last"},
		{"stripe size 0", func(l *Layout) { l.Components[0].StripeSize = 0 }, "stripe size"},
		{"stripe size unaligned", func(l *Layout) { l.Components[2].StripeSize = 100 * KiB }, "stripe size"},
		{"end unaligned", func(l *Layout) { l.Components[1].StripeSize = 3 * 64 * KiB }, "not a multiple"},
		{"bad pattern", func(l *Layout) { l.Components[0].Pattern = 7 }, "pattern"},
		{"bad offset", func(l *Layout) { l.Components[0].StripeOffset = -2 }, "stripe offset"},
		{"count mismatch", func(l *Layout) { l.Components[1].StripeCount = 3 }, "with 2 objects"},
		{"template count 0", func(l *Layout) { l.Components[2].Objects = nil; l.Components[2].StripeCount = 0 }, "stripe count 0"},
		{"template too many", func(l *Layout) { l.Components[2].Objects = nil; l.Components[2].StripeCount = MaxStripeCount + 1 }, "stripe count"},
		{"pool too long", func(l *Layout) { l.Components[0].Pool = strings.Repeat("p", 16) }, "longer"},
		{"pool bad char", func(l *Layout) { l.Components[0].Pool = "a/b" }, "bad character"},
		{"ost index", func(l *Layout) { l.Components[0].Objects[0].OSTIndex = 0xffff }, "OST index"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := ok.Clone()
			tt.mutate(&l)
			err := l.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalid) || !errs.Is(err, errs.Invalid) {
				t.Fatalf("Validate = %v, want ErrInvalid containing %q", err, tt.want)
			}
			if _, err := l.Marshal(); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Marshal of an invalid layout = %v", err)
			}
		})
	}
}

func TestCodecRoundTrip(t *testing.T) {
	for _, l := range []Layout{plain(1, MiB), plain(3, 4*MiB), pfl(),
		Plain(RAID0{StripeCount: AllStripes, StripeSize: MiB, StripeOffset: 7, Pool: "p.1"}),
	} {
		b, err := l.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != l.EncodedSize() {
			t.Fatalf("encoded %d bytes, EncodedSize %d", len(b), l.EncodedSize())
		}
		got, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("Unmarshal(%v): %v", l, err)
		}
		if !reflect.DeepEqual(got, l) {
			t.Fatalf("round trip:\n got %v\nwant %v", got, l)
		}
		b2, _ := got.Marshal()
		if !bytes.Equal(b, b2) {
			t.Fatal("re-encoding differs")
		}
	}
}

func TestUnmarshalRejects(t *testing.T) {
	good, _ := plain(2, MiB).Marshal()
	tests := []struct {
		name   string
		mutate func(b []byte) []byte
		want   string
	}{
		{"empty", func(b []byte) []byte { return nil }, "header"},
		{"magic", func(b []byte) []byte { b[0] ^= 1; return b }, "magic"},
		{"version", func(b []byte) []byte { b[4] = 2; return b }, "version"},
		{"flags", func(b []byte) []byte { b[5] = 0x80; return b }, "flags"},
		{"no components", func(b []byte) []byte { b[6], b[7] = 0, 0; return b }, "0 components"},
		{"header pad", func(b []byte) []byte { b[15] = 1; return b }, "padding"},
		{"component pad", func(b []byte) []byte { b[headerSize+39] = 1; return b }, "padding"},
		{"short", func(b []byte) []byte { return b[:len(b)-1] }, "too long"},
		{"trailing", func(b []byte) []byte { return append(b, 0) }, "trailing"},
		{"invalid layout", func(b []byte) []byte { b[headerSize+24] = 1; return b }, "stripe size"},
		{"composite flag on plain", func(b []byte) []byte { b[5] = 1; return b }, "id 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.mutate(append([]byte(nil), good...))
			_, err := Unmarshal(b)
			if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Unmarshal = %v, want ErrCorrupt containing %q", err, tt.want)
			}
			if Errno(err) != 71 { // EPROTO
				t.Fatalf("Errno = %v", Errno(err))
			}
		})
	}
}
