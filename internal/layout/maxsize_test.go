package layout

import (
	"fmt"
	"testing"
)

// objMax is the OSTs' largest object (osd.MaxObjectSize, 16 TiB - 4 KiB),
// which this package cannot import.
const objMax = 1<<44 - 1<<12

// TestMaxFileSize: the first file offset a layout cannot store with
// objects of at most objMax bytes. The odd cases' values were worked out
// apart from the code (q*S*N + r with objMax = q*S + r); every case is
// also checked against Map: the byte before the limit lies below objMax
// in its object, the byte at it does not (or lies past the layout).
func TestMaxFileSize(t *testing.T) {
	uninst := Plain(RAID0{StripeCount: AllStripes, StripeSize: MiB, StripeOffset: AnyOffset})
	asked := Plain(RAID0{StripeCount: 3, StripeSize: MiB, StripeOffset: AnyOffset})
	comp := func(id uint32, start, end uint64, count int, size uint32) Component {
		return Component{ID: id, Pattern: PatternRAID0, Start: start, End: end,
			RAID0: RAID0{StripeCount: int32(count), StripeSize: size, StripeOffset: AnyOffset, Objects: objs(count)}}
	}
	// The first component fills before it ends: it bounds the file.
	fullFirst := Layout{Composite: true, Components: []Component{comp(1, 0, 1<<45, 1, MiB), comp(2, 1<<45, EOF, 4, MiB)}}
	// The last component can hold none of its bytes (it stripes the file
	// from offset 0, so a single object is full long before its start).
	fullLast := Layout{Composite: true, Components: []Component{comp(1, 0, 1<<45, 4, MiB), comp(2, 1<<45, EOF, 1, MiB)}}
	short := pfl()
	short.Components = short.Components[:2] // ends at 4M
	tests := []struct {
		name string
		l    Layout
		want uint64
	}{
		{"1 stripe 1M", plain(1, MiB), objMax},
		{"1 stripe 64K", plain(1, 64*KiB), objMax},
		{"1 stripe 192K", plain(1, 192*KiB), objMax},
		{"2 stripes 1M", plain(2, MiB), 1<<45 - 1<<20 - 1<<12},
		{"2 stripes 192K", plain(2, 192*KiB), 35184372019200},
		{"2 stripes largest size", plain(2, MaxStripeSize), 35184103649280},
		{"3 stripes 448K", plain(3, 448*KiB), 52776557867008},
		{"4 stripes 64K", plain(4, 64*KiB), 1<<46 - 1<<18 + 1<<16 - 1<<12},
		{"4 stripes 1M", plain(4, MiB), 1<<46 - 1<<22 + 1<<20 - 1<<12},
		{"pfl: the last component decides", pfl(), 1<<46 - 1<<22 + 1<<20 - 1<<12},
		{"pfl: first component full", fullFirst, objMax},
		{"pfl: last component full before its start", fullLast, 1 << 45},
		{"pfl ending before EOF", short, 4 * MiB},
		{"uninstantiated, stripe count asked", asked, 3*(1<<44-1<<20) + 1<<20 - 1<<12},
		{"uninstantiated, all stripes", uninst, MaxStripeCount*(1<<44-1<<20) + 1<<20 - 1<<12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.l.MaxFileSize(objMax)
			if got != tt.want {
				t.Fatalf("MaxFileSize = %d (%#x), want %d (%#x)", got, got, tt.want, tt.want)
			}
			if !tt.l.Instantiated() {
				return
			}
			ch, err := tt.l.Map(got-1, 1)
			if err != nil || ch[0].ObjOffset >= objMax {
				t.Fatalf("byte %d before the limit: %+v %v", got-1, ch, err)
			}
			if ch, err = tt.l.Map(got, 1); err == nil && ch[0].ObjOffset < objMax {
				t.Fatalf("byte %d at the limit is storable: %+v", got, ch)
			}
		})
	}
}

// TestMaxFileSizeBrute checks MaxFileSize against a byte-by-byte search
// for the first unstorable offset, with small object limits so that every
// offset below the limit can be tried: plain layouts of 1 to 4 stripes and
// PFL layouts, limits on and off stripe boundaries.
func TestMaxFileSizeBrute(t *testing.T) {
	comp := func(id uint32, start, end uint64, count int, size uint32) Component {
		return Component{ID: id, Pattern: PatternRAID0, Start: start, End: end,
			RAID0: RAID0{StripeCount: int32(count), StripeSize: size, StripeOffset: AnyOffset, Objects: objs(count)}}
	}
	layouts := map[string]Layout{
		"pfl 1/2/3 x64K": {Composite: true, Components: []Component{
			comp(1, 0, 128*KiB, 1, 64*KiB), comp(2, 128*KiB, 512*KiB, 2, 64*KiB), comp(3, 512*KiB, EOF, 3, 64*KiB)}},
		"pfl 4/1 x64K": {Composite: true, Components: []Component{
			comp(1, 0, 256*KiB, 4, 64*KiB), comp(2, 256*KiB, EOF, 1, 64*KiB)}},
		"pfl 1x192K/2x64K": {Composite: true, Components: []Component{
			comp(1, 0, 192*KiB, 1, 192*KiB), comp(2, 192*KiB, EOF, 2, 64*KiB)}},
	}
	for _, n := range []int{1, 2, 3, 4} {
		for _, s := range []uint32{64 * KiB, 192 * KiB} {
			layouts[fmt.Sprintf("%dx%dK", n, s/KiB)] = plain(n, s)
		}
	}
	for name, l := range layouts {
		for _, lim := range []uint64{0, 1, 4 * KiB, 64*KiB - 1, 64 * KiB, 64*KiB + 1, 200*KiB + 5, 384 * KiB} {
			want := uint64(0)
			for ; ; want++ {
				ci := l.ComponentAt(want)
				if ci < 0 {
					break
				}
				if _, off := l.Components[ci].locate(want); off >= lim {
					break
				}
			}
			if got := l.MaxFileSize(lim); got != want {
				t.Errorf("%s, objects of at most %d bytes: MaxFileSize = %d, first unstorable byte %d", name, lim, got, want)
			}
		}
	}
}

// TestMaxBytesSaturates: a limit past 64 bits is EOF, no limit.
func TestMaxBytesSaturates(t *testing.T) {
	l := plain(MaxStripeCount, MaxStripeSize)
	if got := l.MaxFileSize(1 << 62); got != EOF {
		t.Fatalf("MaxFileSize = %d, want EOF", got)
	}
}
