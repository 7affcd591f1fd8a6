package layout

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

func ostFID(i int) FID { return objs(i + 1)[i].Object }

func TestMap(t *testing.T) {
	c := func(comp, stripe int, objOff, ln, fileOff uint64) Chunk {
		return Chunk{Component: comp, Stripe: stripe, OSTIndex: uint32(stripe), Object: ostFID(stripe), ObjOffset: objOff, Len: ln, FileOffset: fileOff}
	}
	tests := []struct {
		name   string
		l      Layout
		off, n uint64
		want   []Chunk
	}{
		{"3x1M at 2.5M len 3M", plain(3, MiB), 2*MiB + MiB/2, 3 * MiB, []Chunk{
			c(0, 2, MiB/2, MiB/2, 2*MiB+MiB/2),
			c(0, 0, MiB, MiB, 3*MiB),
			c(0, 1, MiB, MiB, 4*MiB),
			c(0, 2, MiB, MiB/2, 5*MiB),
		}},
		{"inside one unit", plain(3, MiB), 10, 100, []Chunk{c(0, 0, 10, 100, 10)}},
		{"zero length", plain(3, MiB), 5, 0, nil},
		{"one stripe merges units", plain(1, MiB), MiB / 2, 2 * MiB, []Chunk{c(0, 0, MiB/2, 2*MiB, MiB/2)}},
		{"4x64K wraps twice", plain(4, 64*KiB), 0, 9 * 64 * KiB, []Chunk{
			c(0, 0, 0, 64*KiB, 0), c(0, 1, 0, 64*KiB, 64*KiB), c(0, 2, 0, 64*KiB, 128*KiB), c(0, 3, 0, 64*KiB, 192*KiB),
			c(0, 0, 64*KiB, 64*KiB, 256*KiB), c(0, 1, 64*KiB, 64*KiB, 320*KiB), c(0, 2, 64*KiB, 64*KiB, 384*KiB), c(0, 3, 64*KiB, 64*KiB, 448*KiB),
			c(0, 0, 128*KiB, 64*KiB, 512*KiB),
		}},
		{"pfl across all components", pfl(), MiB / 2, 4 * MiB, []Chunk{
			c(0, 0, MiB/2, MiB/2, MiB/2),
			c(1, 1, 0, MiB, MiB),     // unit 1 of 2 stripes: stripe 1, object offset 0
			c(1, 0, MiB, MiB, 2*MiB), // unit 2: stripe 0, offset 1M (sparse below the start)
			c(1, 1, MiB, MiB, 3*MiB),
			c(2, 0, MiB, MiB/2, 4*MiB), // unit 4 of 4 stripes: stripe 0, offset 1M
		}},
		{"near the top of the offset space", plain(2, MiB), 1<<62 + 5, 10, []Chunk{c(0, 0, 1<<61+5, 10, 1<<62+5)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.l.Map(tt.off, tt.n)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Map(%d, %d):\n got %+v\nwant %+v", tt.off, tt.n, got, tt.want)
			}
		})
	}
}

func TestMapErrors(t *testing.T) {
	short := pfl()
	short.Components = short.Components[:2] // ends at 4M
	uninst := pfl()
	uninst.Components[2].Objects = nil
	uninst.Components[2].StripeCount = AllStripes
	tests := []struct {
		name   string
		l      Layout
		off, n uint64
		want   error
	}{
		{"overflow", plain(1, MiB), EOF - 5, 10, ErrInvalid},
		{"to EOF", plain(1, MiB), EOF - 5, 5, ErrInvalid},
		{"past the last component", short, 3 * MiB, 2 * MiB, ErrBeyondLayout},
		{"uninstantiated", uninst, 3 * MiB, 2 * MiB, ErrUninstantiated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.l.Map(tt.off, tt.n)
			if !errors.Is(err, tt.want) || got != nil {
				t.Fatalf("Map = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	// Truncate and Map agree on what is unreachable.
	if _, err := uninst.Truncate(5 * MiB); !errors.Is(err, ErrUninstantiated) {
		t.Fatalf("Truncate into an uninstantiated component: %v", err)
	}
	if _, err := short.Truncate(4*MiB + 1); !errors.Is(err, ErrBeyondLayout) {
		t.Fatalf("Truncate past the layout: %v", err)
	}
	if got, err := uninst.Truncate(2 * MiB); err != nil || len(got) != 2 {
		t.Fatalf("Truncate below an uninstantiated component = %v, %v; want the 2 objects of component 1", got, err)
	}
}

func TestFileSize(t *testing.T) {
	tests := []struct {
		name  string
		l     Layout
		sizes [][]uint64
		want  uint64
	}{
		{"empty", plain(3, MiB), [][]uint64{{0, 0, 0}}, 0},
		{"one byte on stripe 0", plain(3, MiB), [][]uint64{{1, 0, 0}}, 1},
		{"one byte on stripe 2", plain(3, MiB), [][]uint64{{0, 0, 1}}, 2*MiB + 1},
		{"second round on stripe 0", plain(3, MiB), [][]uint64{{MiB + 1, MiB, 0}}, 3*MiB + 1},
		{"full units", plain(3, MiB), [][]uint64{{2 * MiB, 2 * MiB, 2 * MiB}}, 6 * MiB},
		{"pfl last component", pfl(), [][]uint64{{MiB}, {2 * MiB, 2 * MiB}, {0, 0, 0, MiB + 10}}, 7*MiB + 10},
		{"pfl middle", pfl(), [][]uint64{{MiB}, {MiB + 5, MiB}, nil}, 2*MiB + 5},
		{"saturates", plain(2, MiB), [][]uint64{{EOF, 0}}, EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.l
			if tt.sizes[len(tt.sizes)-1] == nil { // uninstantiated last component
				l.Components[len(l.Components)-1].Objects = nil
			}
			got, err := l.FileSize(tt.sizes)
			if err != nil || got != tt.want {
				t.Fatalf("FileSize = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
	if _, err := plain(3, MiB).FileSize([][]uint64{{1, 2}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("wrong shape: %v", err)
	}
}

func TestTruncate(t *testing.T) {
	sizes := func(l Layout, size uint64) map[[2]int]uint64 {
		out, err := l.Truncate(size)
		if err != nil {
			t.Fatal(err)
		}
		m := map[[2]int]uint64{}
		for _, o := range out {
			m[[2]int{o.Component, o.Stripe}] = o.Size
			if o.Object != l.Components[o.Component].Objects[o.Stripe].Object {
				t.Fatalf("object of %d/%d", o.Component, o.Stripe)
			}
		}
		return m
	}
	tests := []struct {
		name string
		l    Layout
		size uint64
		want map[[2]int]uint64
	}{
		{"to 0", plain(3, MiB), 0, map[[2]int]uint64{{0, 0}: 0, {0, 1}: 0, {0, 2}: 0}},
		{"to 2.5M", plain(3, MiB), 2*MiB + MiB/2, map[[2]int]uint64{{0, 0}: MiB, {0, 1}: MiB, {0, 2}: MiB / 2}},
		{"to 7M", plain(3, MiB), 7 * MiB, map[[2]int]uint64{{0, 0}: 3 * MiB, {0, 1}: 2 * MiB, {0, 2}: 2 * MiB}},
		{"to 1 byte", plain(3, MiB), 1, map[[2]int]uint64{{0, 0}: 1, {0, 1}: 0, {0, 2}: 0}},
		// 1.5M lies in component 1; component 0 ([0,1M)) is wholly below
		// and left alone; component 2, which starts past it, is emptied
		// (not extended to where 1.5M falls in its own geometry).
		{"pfl to 1.5M", pfl(), MiB + MiB/2, map[[2]int]uint64{
			{1, 0}: MiB, {1, 1}: MiB / 2, // stripe 0 is sparse below 1M
			{2, 0}: 0, {2, 1}: 0, {2, 2}: 0, {2, 3}: 0}},
		// 4M is the end of component 1: it holds byte 4M-1 and so the size.
		{"pfl to a boundary", pfl(), 4 * MiB, map[[2]int]uint64{
			{1, 0}: 2 * MiB, {1, 1}: 2 * MiB,
			{2, 0}: 0, {2, 1}: 0, {2, 2}: 0, {2, 3}: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sizes(tt.l, tt.size); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Truncate(%d) = %v, want %v", tt.size, got, tt.want)
			}
		})
	}
}

// naive deals every byte of [0, limit) to the stripes of component c one at
// a time, round robin in stripe-size units from file offset 0, and records
// where each byte of c's extent lands (index x-c.Start: stripe, object
// offset): the reference Map is checked against.
func naive(c *Component, limit uint64) [][2]uint64 {
	var at [][2]uint64
	n := len(c.Objects)
	next := make([]uint64, n) // next free offset on each object
	stripe, inUnit := 0, uint64(0)
	for x := range min(limit, c.End) {
		if x >= c.Start {
			at = append(at, [2]uint64{uint64(stripe), next[stripe]})
		}
		next[stripe]++
		if inUnit++; inUnit == uint64(c.StripeSize) {
			inUnit, stripe = 0, (stripe+1)%n
		}
	}
	return at
}

func randomLayout(r *rand.Rand) Layout {
	unit := func() uint32 { return uint32(1+r.IntN(3)) * StripeAlign }
	if r.IntN(3) == 0 {
		return plain(1+r.IntN(4), unit())
	}
	l := Layout{Composite: true}
	start := uint64(0)
	nc := 1 + r.IntN(3)
	for i := range nc {
		size := unit()
		end := EOF
		if i < nc-1 {
			end = start + uint64(1+r.IntN(4))*uint64(size)
			end = (end + uint64(size) - 1) / uint64(size) * uint64(size)
		}
		n := 1 + r.IntN(4)
		l.Components = append(l.Components, Component{ID: uint32(i + 1), Pattern: PatternRAID0, Start: start, End: end,
			RAID0: RAID0{StripeCount: int32(n), StripeSize: size, StripeOffset: AnyOffset, Objects: objs(n)}})
		start = end
	}
	if err := l.Validate(); err != nil {
		panic(err)
	}
	return l
}

// TestMapMatchesNaiveModel checks Map byte for byte against naive dealing,
// and FileSize and Truncate against a flat byte array: random writes and
// truncates go to both the flat file and to per-object byte slices through
// Map/Truncate; the size and every byte read back through Map must agree.
func TestMapMatchesNaiveModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const limit = 1200 * KiB
	rounds := 24
	noise := make([]byte, limit)
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	if testing.Short() || raceEnabled {
		rounds = 4
	}
	for round := range rounds {
		l := randomLayout(r)
		ref := make([][][2]uint64, len(l.Components))
		for i := range l.Components {
			ref[i] = naive(&l.Components[i], limit)
		}
		// Map against the naive dealing, on random ranges.
		for range 20 {
			off := uint64(r.IntN(limit))
			n := uint64(r.IntN(limit - int(off)))
			chunks, err := l.Map(off, n)
			if err != nil {
				t.Fatalf("round %d %v: Map(%d,%d): %v", round, l, off, n, err)
			}
			pos := off
			for _, c := range chunks {
				if c.FileOffset != pos || c.Len == 0 {
					t.Fatalf("round %d %v: Map(%d,%d): chunk %+v out of order", round, l, off, n, c)
				}
				for _, i := range []uint64{0, c.Len / 2, c.Len - 1} {
					want := ref[c.Component][c.FileOffset+i-l.Components[c.Component].Start]
					if got := [2]uint64{uint64(c.Stripe), c.ObjOffset + i}; got != want {
						t.Fatalf("round %d %v: byte %d at stripe/offset %v, naive %v", round, l, c.FileOffset+i, got, want)
					}
				}
				pos += c.Len
			}
			if pos != off+n {
				t.Fatalf("round %d: chunks cover [%d,%d), want [%d,%d)", round, off, pos, off, off+n)
			}
		}
		// Data and sizes against a flat file.
		flat := []byte{}
		objects := make([][][]byte, len(l.Components))
		for i := range objects {
			objects[i] = make([][]byte, len(l.Components[i].Objects))
		}
		for op := range 30 {
			if op%5 == 4 {
				size := uint64(r.IntN(limit))
				sizes, err := l.Truncate(size)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range sizes {
					o := &objects[s.Component][s.Stripe]
					*o = resize(*o, s.Size)
				}
				flat = resize(flat, size)
			} else {
				off := uint64(r.IntN(limit - 1))
				n := 1 + r.IntN(min(300*KiB, limit-int(off)-1))
				from := r.IntN(len(noise) - n)
				data := noise[from : from+n]
				chunks, err := l.Map(off, uint64(len(data)))
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range chunks {
					o := &objects[c.Component][c.Stripe]
					if end := c.ObjOffset + c.Len; uint64(len(*o)) < end {
						*o = resize(*o, end)
					}
					copy((*o)[c.ObjOffset:], data[c.FileOffset-off:][:c.Len])
				}
				if end := off + uint64(len(data)); uint64(len(flat)) < end {
					flat = resize(flat, end)
				}
				copy(flat[off:], data)
			}
			sizes := make([][]uint64, len(objects))
			for i := range objects {
				for _, o := range objects[i] {
					sizes[i] = append(sizes[i], uint64(len(o)))
				}
			}
			got, err := l.FileSize(sizes)
			if err != nil || got != uint64(len(flat)) {
				t.Fatalf("round %d op %d %v: FileSize = %d, %v; flat file has %d", round, op, l, got, err, len(flat))
			}
			back := make([]byte, len(flat))
			chunks, _ := l.Map(0, uint64(len(flat)))
			for _, c := range chunks {
				o := objects[c.Component][c.Stripe]
				if c.ObjOffset < uint64(len(o)) {
					copy(back[c.FileOffset:c.FileOffset+c.Len], o[c.ObjOffset:])
				}
			}
			if !bytes.Equal(back, flat) {
				t.Fatalf("round %d op %d %v: data read back through Map differs", round, op, l)
			}
		}
	}
}

func resize(b []byte, n uint64) []byte {
	if uint64(len(b)) >= n {
		return b[:n]
	}
	return append(b, make([]byte, n-uint64(len(b)))...)
}

func BenchmarkMap(b *testing.B) {
	l := pfl()
	var chunks []Chunk
	for b.Loop() {
		chunks, _ = l.AppendMap(chunks[:0], 3*MiB+5, 16*MiB)
	}
}
