package osdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/oss/osd"
)

// Harness tells the suite how to get devices of the backend under test.
type Harness struct {
	// New returns a new, empty, open device. Required. The suite closes it.
	New func(t *testing.T) osd.Device
	// Small returns a new, empty, open device on a store of at most 16
	// MiB, for the out-of-space test; nil, or a call to t.Skip, skips that
	// test.
	Small func(t *testing.T) osd.Device
	// Reopen closes d (with Close) and opens the same target again, for
	// the durability tests; nil skips them.
	Reopen func(t *testing.T, d osd.Device) osd.Device
}

// Run runs the suite against the backend h makes.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("osdtest: Harness.New is required")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"CreateGetAttrDestroy", testCreateGetAttrDestroy},
		{"ManyObjects", testManyObjects},
		{"Attributes", testAttributes},
		{"WriteReadModel", testWriteReadModel},
		{"ManyBuffers", testManyBuffers},
		{"Sparse", testSparse},
		{"PunchAndTruncate", testPunchAndTruncate},
		{"BlocksAfterPunch", testBlocksAfterPunch},
		{"Allocate", testAllocate},
		{"ReadPastEOF", testReadPastEOF},
		{"WriteRecord", testWriteRecord},
		{"TxAbort", testTxAbort},
		{"TxAllOrNothing", testTxAllOrNothing},
		{"TxOrderRules", testTxOrderRules},
		{"TxAtomicVisibility", testTxAtomicVisibility},
		{"Transno", testTransno},
		{"Statfs", testStatfs},
		{"BadInput", testBadInput},
		{"ConcurrentObjects", testConcurrentObjects},
		{"ConcurrentRanges", testConcurrentRanges},
		{"ConcurrentCreate", testConcurrentCreate},
		{"NoSpace", testNoSpace},
		{"Reopen", testReopen},
		{"Closed", testClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, h) })
	}
}

// F returns the FID of test object n in the normal sequence.
func F(n int) fid.FID { return fid.FID{Seq: fid.SeqNormal, Oid: uint32(n)} }

var ctx = context.Background()

func newDevice(t *testing.T, make func(*testing.T) osd.Device) osd.Device {
	t.Helper()
	d := make(t)
	t.Cleanup(func() {
		if err := d.Close(); err != nil && !errors.Is(err, osd.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// commit runs fn in a transaction and commits it, returning the first error.
func commit(d osd.Device, fn func(tx osd.Tx) error) error {
	tx, err := d.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Abort()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func mustCommit(t *testing.T, d osd.Device, fn func(tx osd.Tx) error) {
	t.Helper()
	if err := commit(d, fn); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

func create(t *testing.T, d osd.Device, f fid.FID, a osd.Attr) {
	t.Helper()
	mustCommit(t, d, func(tx osd.Tx) error { return tx.Create(f, a) })
}

func write(t *testing.T, d osd.Device, f fid.FID, off int64, bufs ...[]byte) {
	t.Helper()
	mustCommit(t, d, func(tx osd.Tx) error { return tx.WriteAt(f, bufs, off) })
}

func getattr(t *testing.T, d osd.Device, f fid.FID) osd.Attr {
	t.Helper()
	a, err := d.GetAttr(ctx, f)
	if err != nil {
		t.Fatalf("GetAttr %v: %v", f, err)
	}
	return a
}

// read reads n bytes at off into one buffer.
func read(t *testing.T, d osd.Device, f fid.FID, off int64, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	got, err := d.ReadAt(ctx, f, [][]byte{b}, off)
	if err != nil {
		t.Fatalf("ReadAt %v [%d,+%d): %v", f, off, n, err)
	}
	return b[:got]
}

// split cuts b into 1..5 pieces of random lengths, some possibly empty.
func split(r *rand.Rand, b []byte) [][]byte {
	var out [][]byte
	for k := r.IntN(5); k > 0 && len(b) > 0; k-- {
		n := r.IntN(len(b) + 1)
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

func pattern(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// checkContent checks f's size and every byte against model, reading with
// split buffers at odd boundaries.
func checkContent(t *testing.T, d osd.Device, f fid.FID, model []byte, r *rand.Rand) {
	t.Helper()
	a := getattr(t, d, f)
	if a.Size != uint64(len(model)) {
		t.Fatalf("%v: size %d, model %d", f, a.Size, len(model))
	}
	got := make([]byte, len(model)+int(r.IntN(100)))
	n, err := d.ReadAt(ctx, f, split(r, got), 0)
	if err != nil {
		t.Fatalf("ReadAt %v: %v", f, err)
	}
	if n != len(model) {
		t.Fatalf("ReadAt %v: %d bytes, want %d", f, n, len(model))
	}
	if i := firstDiff(got[:n], model); i >= 0 {
		t.Fatalf("%v: byte %d is %#x, model has %#x", f, i, got[i], model[i])
	}
	// A few reads at odd places.
	for range 4 {
		if len(model) == 0 {
			break
		}
		off := r.IntN(len(model))
		ln := r.IntN(len(model) - off + 10)
		b := make([]byte, ln)
		n, err := d.ReadAt(ctx, f, split(r, b), int64(off))
		if err != nil {
			t.Fatalf("ReadAt %v [%d,+%d): %v", f, off, ln, err)
		}
		want := model[off:min(off+ln, len(model))]
		if n != len(want) || !bytes.Equal(b[:n], want) {
			t.Fatalf("ReadAt %v [%d,+%d): %d bytes, differ at %d", f, off, ln, n, firstDiff(b[:n], want))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// modelWrite applies a write to a model.
func modelWrite(m []byte, off int, data []byte) []byte {
	if end := off + len(data); end > len(m) {
		m = append(m, make([]byte, end-len(m))...)
	}
	copy(m[off:], data)
	return m
}

var t0 = time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)

func fullAttr() osd.Attr {
	return osd.Attr{
		Mtime: t0, Atime: t0.Add(time.Second), Ctime: t0.Add(2 * time.Nanosecond),
		Mode: 0o100644, UID: 500, GID: 600,
		ParentFID: fid.FID{Seq: fid.SeqNormal + 7, Oid: 42}, StripeIndex: 3, LayoutVersion: 9,
		Valid: osd.AttrMtime | osd.AttrAtime | osd.AttrCtime | osd.AttrMode | osd.AttrUID | osd.AttrGID | osd.AttrParent | osd.AttrLayoutVersion,
	}
}

func sameAttr(t *testing.T, what string, got, want osd.Attr) {
	t.Helper()
	want.Valid |= osd.AttrSize | osd.AttrBlocks
	got.Blocks, want.Blocks = 0, 0
	if !got.Mtime.Equal(want.Mtime) || !got.Atime.Equal(want.Atime) || !got.Ctime.Equal(want.Ctime) {
		t.Fatalf("%s: times %v %v %v, want %v %v %v", what, got.Mtime, got.Atime, got.Ctime, want.Mtime, want.Atime, want.Ctime)
	}
	got.Mtime, got.Atime, got.Ctime = time.Time{}, time.Time{}, time.Time{}
	want.Mtime, want.Atime, want.Ctime = time.Time{}, time.Time{}, time.Time{}
	if got != want {
		t.Fatalf("%s: attributes\n got %+v\nwant %+v", what, got, want)
	}
}

func testCreateGetAttrDestroy(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	f := F(1)
	_, err := d.GetAttr(ctx, f)
	wantErr(t, "GetAttr before create", err, osd.ErrNotExist)

	a := fullAttr()
	create(t, d, f, a)
	sameAttr(t, "after create", getattr(t, d, f), a)

	err = commit(d, func(tx osd.Tx) error { return tx.Create(f, osd.Attr{UID: 1, Valid: osd.AttrUID}) })
	wantErr(t, "second create", err, osd.ErrExist)
	sameAttr(t, "after failed create", getattr(t, d, f), a)

	mustCommit(t, d, func(tx osd.Tx) error { return tx.Destroy(f) })
	_, err = d.GetAttr(ctx, f)
	wantErr(t, "GetAttr after destroy", err, osd.ErrNotExist)
	_, err = d.ReadAt(ctx, f, [][]byte{make([]byte, 10)}, 0)
	wantErr(t, "ReadAt after destroy", err, osd.ErrNotExist)
	for name, fn := range map[string]func(osd.Tx) error{
		"destroy": func(tx osd.Tx) error { return tx.Destroy(f) },
		"setattr": func(tx osd.Tx) error { return tx.SetAttr(f, osd.Attr{UID: 1, Valid: osd.AttrUID}) },
		"write":   func(tx osd.Tx) error { return tx.WriteAt(f, [][]byte{{1}}, 0) },
		"record":  func(tx osd.Tx) error { return tx.WriteRecord(f, []byte{1}, 0) },
		"punch":   func(tx osd.Tx) error { return tx.Punch(f, 0, 10) },
	} {
		wantErr(t, name+" of a destroyed object", commit(d, fn), osd.ErrNotExist)
	}

	// A new object of the same FID starts empty, with only what it is given.
	create(t, d, f, osd.Attr{Mode: 0o100600, Valid: osd.AttrMode})
	sameAttr(t, "recreated", getattr(t, d, f), osd.Attr{Mode: 0o100600, Valid: osd.AttrMode})
	if b := read(t, d, f, 0, 10); len(b) != 0 {
		t.Fatalf("recreated object reads %d bytes", len(b))
	}
	// Create, write and destroy, then create again, in quick succession.
	for i := range 5 {
		write(t, d, f, int64(i*100), bytes.Repeat([]byte{byte(i + 1)}, 50))
		mustCommit(t, d, func(tx osd.Tx) error { return tx.Destroy(f) })
		create(t, d, f, osd.Attr{})
		if a := getattr(t, d, f); a.Size != 0 {
			t.Fatalf("round %d: recreated object has size %d", i, a.Size)
		}
	}
}

func testManyObjects(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	idif, _ := fid.IDIF(0x123456789, 3)
	fids := []fid.FID{idif, {Seq: fid.SeqNormal, Oid: 0}, {Seq: 0x2c0000401, Oid: 0xffffffff}, {Seq: fid.SeqNormal, Oid: 5, Ver: 2}, {Seq: 1, Oid: 1}}
	for i := range 300 {
		fids = append(fids, fid.FID{Seq: fid.SeqNormal + uint64(i%3), Oid: uint32(i*7919 + 1)})
	}
	for i, f := range fids {
		create(t, d, f, osd.Attr{UID: uint32(i), Valid: osd.AttrUID})
		write(t, d, f, int64(i), []byte(f.String()))
	}
	for i, f := range fids {
		if a := getattr(t, d, f); a.UID != uint32(i) || a.Size != uint64(i+len(f.String())) {
			t.Fatalf("%v: uid %d size %d", f, a.UID, a.Size)
		}
		if got := read(t, d, f, int64(i), 100); string(got) != f.String() {
			t.Fatalf("%v: data %q", f, got)
		}
	}
	for i, f := range fids {
		if i%2 == 0 {
			mustCommit(t, d, func(tx osd.Tx) error { return tx.Destroy(f) })
		}
	}
	for i, f := range fids {
		_, err := d.GetAttr(ctx, f)
		if i%2 == 0 {
			wantErr(t, "destroyed "+f.String(), err, osd.ErrNotExist)
		} else if err != nil {
			t.Fatalf("%v: %v", f, err)
		}
	}
}

func testAttributes(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	f := F(1)
	create(t, d, f, osd.Attr{})
	sameAttr(t, "bare", getattr(t, d, f), osd.Attr{})

	a := fullAttr()
	mustCommit(t, d, func(tx osd.Tx) error { return tx.SetAttr(f, a) })
	sameAttr(t, "all set", getattr(t, d, f), a)

	// Only the named fields change; Blocks is ignored.
	a.UID = 7
	mustCommit(t, d, func(tx osd.Tx) error {
		return tx.SetAttr(f, osd.Attr{UID: 7, GID: 99, Blocks: 12345, Valid: osd.AttrUID | osd.AttrBlocks})
	})
	sameAttr(t, "uid only", getattr(t, d, f), a)

	// Times keep nanoseconds; the zero time and the extremes round-trip.
	for _, tm := range []time.Time{{}, time.Unix(0, 0), time.Unix(-1, 999999999), time.Date(1700, 1, 1, 0, 0, 0, 1, time.UTC), time.Date(2200, 12, 31, 23, 59, 59, 999999999, time.UTC)} {
		a.Mtime = tm
		mustCommit(t, d, func(tx osd.Tx) error { return tx.SetAttr(f, osd.Attr{Mtime: tm, Valid: osd.AttrMtime}) })
		sameAttr(t, fmt.Sprintf("mtime %v", tm), getattr(t, d, f), a)
	}
	tx, _ := d.Begin(ctx)
	wantErr(t, "mtime in year 1500", tx.SetAttr(f, osd.Attr{Mtime: time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC), Valid: osd.AttrMtime}), osd.ErrInvalid)
	wantErr(t, "unknown valid bits", tx.SetAttr(f, osd.Attr{Valid: 1 << 30}), osd.ErrInvalid)
	wantErr(t, "size past the maximum", tx.SetAttr(f, osd.Attr{Size: osd.MaxObjectSize + 1, Valid: osd.AttrSize}), osd.ErrTooLarge)
	tx.Abort()

	// Size through SetAttr truncates both ways.
	r := rand.New(rand.NewPCG(1, 2))
	data := pattern(r, 10000)
	write(t, d, f, 0, data)
	mustCommit(t, d, func(tx osd.Tx) error { return tx.SetAttr(f, osd.Attr{Size: 3000, Valid: osd.AttrSize}) })
	checkContent(t, d, f, data[:3000], r)
	mustCommit(t, d, func(tx osd.Tx) error { return tx.SetAttr(f, osd.Attr{Size: 20000, Valid: osd.AttrSize}) })
	checkContent(t, d, f, append(data[:3000:3000], make([]byte, 17000)...), r)
	sameAttr(t, "after size changes", getattr(t, d, f), func() osd.Attr { b := a; b.Size = 20000; return b }())

	// Create takes a size, as a hole.
	g := F(2)
	create(t, d, g, osd.Attr{Size: 5000, Valid: osd.AttrSize})
	checkContent(t, d, g, make([]byte, 5000), r)
}

func testWriteReadModel(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	r := rand.New(rand.NewPCG(3, 4))
	f := F(1)
	create(t, d, f, osd.Attr{})
	var model []byte
	for i := range 150 {
		// One to three writes per transaction, at odd offsets, from
		// vectors of buffers of odd lengths.
		nw := 1 + r.IntN(3)
		type w struct {
			off  int
			data []byte
		}
		var ws []w
		for range nw {
			ws = append(ws, w{r.IntN(300000), pattern(r, r.IntN(20000))})
		}
		mustCommit(t, d, func(tx osd.Tx) error {
			for _, w := range ws {
				if err := tx.WriteAt(f, split(r, w.data), int64(w.off)); err != nil {
					return err
				}
			}
			return nil
		})
		for _, w := range ws {
			model = modelWrite(model, w.off, w.data)
		}
		if i%10 == 0 {
			checkContent(t, d, f, model, r)
		}
	}
	checkContent(t, d, f, model, r)
}

func testManyBuffers(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	r := rand.New(rand.NewPCG(5, 6))
	f := F(1)
	create(t, d, f, osd.Attr{})
	// More buffers than one preadv/pwritev takes (IOV_MAX is 1024): 4 MiB
	// in 4 KiB pages, as a PtlRPC bulk arrives, then 3000 small pieces.
	data := pattern(r, 4<<20)
	var pages [][]byte
	for p := 0; p < len(data); p += 4096 {
		pages = append(pages, data[p:p+4096])
	}
	write(t, d, f, 12345, pages...)
	model := modelWrite(nil, 12345, data)
	small := pattern(r, 3000*3)
	var pieces [][]byte
	for p := 0; p < len(small); p += 3 {
		pieces = append(pieces, small[p:p+3])
	}
	write(t, d, f, 777, pieces...)
	model = modelWrite(model, 777, small)

	got := make([]byte, len(model))
	var rpages [][]byte
	for p := 0; p < len(got); p += 1000 {
		rpages = append(rpages, got[p:min(p+1000, len(got))])
	}
	n, err := d.ReadAt(ctx, f, rpages, 0)
	if err != nil || n != len(model) || !bytes.Equal(got, model) {
		t.Fatalf("ReadAt into %d buffers: %d, %v, differ at %d", len(rpages), n, err, firstDiff(got, model))
	}
}

func testSparse(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	f := F(1)
	create(t, d, f, osd.Attr{})
	const gib = 1 << 30
	data := bytes.Repeat([]byte("sparse!"), 600)
	write(t, d, f, gib, data)
	a := getattr(t, d, f)
	if a.Size != gib+uint64(len(data)) {
		t.Fatalf("size %d, want %d", a.Size, gib+len(data))
	}
	if a.Blocks*512 > 1<<20 {
		t.Fatalf("a 4 KiB write at 1 GiB occupies %d blocks of 512 bytes: the object is not sparse", a.Blocks)
	}
	if b := read(t, d, f, gib/2, 1<<16); !bytes.Equal(b, make([]byte, 1<<16)) {
		t.Fatal("a hole does not read as zeros")
	}
	b := read(t, d, f, gib-100, 200)
	if !bytes.Equal(b[:100], make([]byte, 100)) || !bytes.Equal(b[100:], data[:100]) {
		t.Fatal("the edge of the hole reads wrong")
	}
}

// testBlocksAfterPunch checks that GetAttr's Blocks drops as soon as a
// punch or truncate commits (the lock server hands them out right after),
// and that a write counts its blocks at once.
func testBlocksAfterPunch(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	f := F(1)
	create(t, d, f, osd.Attr{})
	const mib = 1 << 20
	write(t, d, f, 0, bytes.Repeat([]byte{7}, mib))
	if b := getattr(t, d, f).Blocks; b < mib/512 {
		t.Fatalf("1 MiB written occupies %d blocks of 512 bytes, want at least %d", b, mib/512)
	}
	// Up to 64 KiB of slack for the backing file system's metadata.
	const slack = 128
	mustCommit(t, d, func(tx osd.Tx) error { return tx.Punch(f, 0, mib/2) })
	if b := getattr(t, d, f).Blocks; b > mib/2/512+slack {
		t.Fatalf("after a punch of the first half of 1 MiB: %d blocks of 512 bytes, want at most %d", b, mib/2/512+slack)
	}
	mustCommit(t, d, func(tx osd.Tx) error { return tx.Punch(f, mib/2+4096, osd.EOF) })
	if b := getattr(t, d, f).Blocks; b > 4096/512+slack {
		t.Fatalf("after a truncate to 4 KiB of data: %d blocks of 512 bytes, want at most %d", b, 4096/512+slack)
	}
	mustCommit(t, d, func(tx osd.Tx) error { return tx.Punch(f, 10*mib, osd.EOF) })
	if b := getattr(t, d, f).Blocks; b > 4096/512+slack {
		t.Fatalf("a truncate up allocates: %d blocks of 512 bytes", b)
	}
}

// testAllocate reserves blocks (fallocate mode 0, with and without
// KEEP_SIZE): the size follows, the data already there stays, the rest
// reads as zeros and counts in Blocks; a failed Tx takes its allocation
// back, and bad ranges are refused.
func testAllocate(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	f, g := F(1), F(2)
	create(t, d, f, osd.Attr{})
	create(t, d, g, osd.Attr{})
	const mib = 1 << 20
	data := bytes.Repeat([]byte("keep me "), 512) // 4 KiB
	write(t, d, f, 8192, data)

	// Past the end, keeping the size: blocks, no size.
	mustCommit(t, d, func(tx osd.Tx) error { return tx.Allocate(f, 0, 2*mib, true) })
	a := getattr(t, d, f)
	if a.Size != 8192+4096 {
		t.Fatalf("size %d after an allocation keeping it, want %d", a.Size, 8192+4096)
	}
	if a.Blocks < 2*mib/512 {
		t.Fatalf("2 MiB allocated occupy %d blocks of 512 bytes", a.Blocks)
	}
	// Growing: the size is the end; what was never written reads as zeros.
	mustCommit(t, d, func(tx osd.Tx) error { return tx.Allocate(f, mib, 3*mib+5, false) })
	if a := getattr(t, d, f); a.Size != 3*mib+5 || a.Blocks < 3*mib/512 {
		t.Fatalf("after growing to 3 MiB + 5: %+v", a)
	}
	got := read(t, d, f, 0, 3*mib+5)
	want := make([]byte, 3*mib+5)
	copy(want[8192:], data)
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("allocated object reads wrong at %d", i)
	}
	// Inside the size, not growing: the size stays.
	mustCommit(t, d, func(tx osd.Tx) error { return tx.Allocate(f, 100, 200, false) })
	if a := getattr(t, d, f); a.Size != 3*mib+5 {
		t.Fatalf("an allocation inside the object moved its size to %d", a.Size)
	}
	// With a write of the same object in the same Tx.
	mustCommit(t, d, func(tx osd.Tx) error {
		return errors.Join(tx.Allocate(g, 0, mib, false), tx.WriteAt(g, [][]byte{[]byte("tail")}, mib))
	})
	if a := getattr(t, d, g); a.Size != mib+4 {
		t.Fatalf("allocate then write: size %d", a.Size)
	}

	// A failing Tx takes it back.
	before := getattr(t, d, g)
	err := commit(d, func(tx osd.Tx) error {
		return errors.Join(tx.Allocate(g, 0, 8*mib, false), tx.Create(f, osd.Attr{}))
	})
	wantErr(t, "allocation in a failing transaction", err, osd.ErrExist)
	if a := getattr(t, d, g); a.Size != before.Size || a.Blocks > before.Blocks+128 {
		t.Fatalf("a failed allocation left size %d blocks %d (was %d, %d)", a.Size, a.Blocks, before.Size, before.Blocks)
	}

	// Bad ranges and objects.
	err = commit(d, func(tx osd.Tx) error { return tx.Allocate(f, 10, 10, false) })
	wantErr(t, "empty allocation", err, osd.ErrInvalid)
	err = commit(d, func(tx osd.Tx) error { return tx.Allocate(f, 0, osd.MaxObjectSize+1, true) })
	wantErr(t, "allocation past the maximum size", err, osd.ErrTooLarge)
	err = commit(d, func(tx osd.Tx) error { return tx.Allocate(F(99), 0, 10, false) })
	wantErr(t, "allocation of a missing object", err, osd.ErrNotExist)
	err = commit(d, func(tx osd.Tx) error {
		return errors.Join(tx.Punch(f, 0, 10), tx.Allocate(f, 0, 10, false))
	})
	wantErr(t, "allocation after a punch in one transaction", err, osd.ErrInvalid)

	// Past the store's space: ErrNoSpace, and whatever the Tx allocated
	// is given back, so the space is there for the next.
	if h.Small == nil {
		return
	}
	sd := newDevice(t, h.Small)
	s := F(3)
	create(t, sd, s, osd.Attr{})
	write(t, sd, s, 0, []byte("x"))
	before = getattr(t, sd, s)
	err = commit(sd, func(tx osd.Tx) error {
		return errors.Join(tx.Allocate(s, 0, mib, false), tx.Allocate(s, mib, 64*mib, false))
	})
	wantErr(t, "allocation past the store's space", err, osd.ErrNoSpace)
	if a := getattr(t, sd, s); a.Size != 1 || a.Blocks > before.Blocks+128 {
		t.Fatalf("a failed allocation left size %d blocks %d (was %d, %d)", a.Size, a.Blocks, before.Size, before.Blocks)
	}
	mustCommit(t, sd, func(tx osd.Tx) error { return tx.Allocate(s, 0, 2*mib, true) })

	// What a failed Tx takes back is its own: the blocks an earlier
	// allocation reserved past the size stay reserved (fallocate(2)
	// promises the writes into them room), whichever range the failed
	// one shared with them.
	r := F(4)
	create(t, sd, r, osd.Attr{})
	mustCommit(t, sd, func(tx osd.Tx) error { return tx.Allocate(r, 0, mib, true) })
	reserved := getattr(t, sd, r)
	err = commit(sd, func(tx osd.Tx) error { return tx.Allocate(r, mib/2, 64*mib, true) })
	wantErr(t, "allocation past the store's space over an earlier one", err, osd.ErrNoSpace)
	if a := getattr(t, sd, r); a.Size != 0 || a.Blocks+128 < reserved.Blocks {
		t.Fatalf("a failed allocation left size %d blocks %d: the %d blocks reserved before are not", a.Size, a.Blocks, reserved.Blocks)
	}
}

func testPunchAndTruncate(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	r := rand.New(rand.NewPCG(7, 8))
	f := F(1)
	create(t, d, f, osd.Attr{})
	model := pattern(r, 256<<10)
	write(t, d, f, 0, model)
	before := getattr(t, d, f).Blocks

	mustCommit(t, d, func(tx osd.Tx) error { return tx.Punch(f, 10000, 150000) })
	clear(model[10000:150000])
	checkContent(t, d, f, model, r)
	// The hole may cost the backing file system one block of extent
	// metadata (ext4 splitting an extent, while delayed allocation has not
	// yet freed what the hole dropped), never more.
	if after := getattr(t, d, f).Blocks; after > before+8 {
		t.Fatalf("punching a hole grew the blocks from %d to %d", before, after)
	}
	// A punch past the end changes nothing, not even the size.
	mustCommit(t, d, func(tx osd.Tx) error { return tx.Punch(f, 200000, 1<<30) })
	clear(model[200000:])
	checkContent(t, d, f, model, r)
	mustCommit(t, d, func(tx osd.Tx) error { return tx.Punch(f, 1<<30, 1<<31) })
	checkContent(t, d, f, model, r)
	mustCommit(t, d, func(tx osd.Tx) error { return tx.Punch(f, 5, 5) })
	checkContent(t, d, f, model, r)

	// Truncate down; the old bytes must not come back when the object
	// grows again.
	mustCommit(t, d, func(tx osd.Tx) error { return tx.Punch(f, 100000, osd.EOF) })
	model = model[:100000]
	checkContent(t, d, f, model, r)
	if b := read(t, d, f, 100000, 10); len(b) != 0 {
		t.Fatalf("read past the new end: %d bytes", len(b))
	}
	tail := pattern(r, 1000)
	write(t, d, f, 200000, tail)
	model = modelWrite(model, 200000, tail)
	checkContent(t, d, f, model, r)

	// Truncate up: a hole.
	mustCommit(t, d, func(tx osd.Tx) error { return tx.Punch(f, 300000, osd.EOF) })
	model = append(model, make([]byte, 300000-len(model))...)
	checkContent(t, d, f, model, r)

	// Punch, then truncate, then write, in three transactions in a row.
	for i := range 5 {
		mustCommit(t, d, func(tx osd.Tx) error { return tx.Punch(f, uint64(i*1000), uint64(i*1000+500)) })
		clear(model[i*1000 : i*1000+500])
		mustCommit(t, d, func(tx osd.Tx) error { return tx.Punch(f, uint64(len(model)-100), osd.EOF) })
		model = model[:len(model)-100]
		data := pattern(r, 300)
		write(t, d, f, int64(len(model)+50), data)
		model = modelWrite(model, len(model)+50, data)
		checkContent(t, d, f, model, r)
	}

	// Punch and truncate in one transaction, after a write.
	data := pattern(r, 5000)
	mustCommit(t, d, func(tx osd.Tx) error {
		if err := tx.WriteAt(f, [][]byte{data}, 1000); err != nil {
			return err
		}
		if err := tx.Punch(f, 2000, 3000); err != nil {
			return err
		}
		return tx.Punch(f, 4000, osd.EOF)
	})
	model = modelWrite(model, 1000, data)
	clear(model[2000:3000])
	model = model[:4000]
	checkContent(t, d, f, model, r)

	mustCommit(t, d, func(tx osd.Tx) error { return tx.Punch(f, 0, osd.EOF) })
	checkContent(t, d, f, nil, r)

	tx, _ := d.Begin(ctx)
	defer tx.Abort()
	wantErr(t, "punch with start after end", tx.Punch(f, 10, 5), osd.ErrInvalid)
}

func testReadPastEOF(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	f := F(1)
	create(t, d, f, osd.Attr{})
	data := bytes.Repeat([]byte{0xab}, 1000)
	write(t, d, f, 0, data)
	for _, c := range []struct {
		off  int64
		bufs []int
		want int
	}{
		{1000, []int{10}, 0},
		{999, []int{10}, 1},
		{990, []int{5, 0, 3, 10}, 10},
		{0, []int{600, 600}, 1000},
		{1 << 40, []int{10}, 0},
		{math.MaxInt64 - 100, []int{50}, 0},
		{500, nil, 0},
	} {
		var bufs [][]byte
		for _, n := range c.bufs {
			bufs = append(bufs, make([]byte, n))
		}
		n, err := d.ReadAt(ctx, f, bufs, c.off)
		if err != nil || n != c.want {
			t.Fatalf("ReadAt at %d into %v: %d, %v; want %d, nil", c.off, c.bufs, n, err, c.want)
		}
	}
}

func testWriteRecord(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	r := rand.New(rand.NewPCG(9, 10))
	f := F(1)
	create(t, d, f, osd.Attr{})
	var model []byte
	for i := range 40 {
		off := r.IntN(20000)
		data := pattern(r, r.IntN(3000))
		if i%3 == 0 {
			// Bulk and journaled writes of the same object in turn.
			write(t, d, f, int64(off), data)
		} else {
			mustCommit(t, d, func(tx osd.Tx) error { return tx.WriteRecord(f, data, int64(off)) })
		}
		model = modelWrite(model, off, data)
		checkContent(t, d, f, model, r)
	}
	// A bulk write after a journaled one in another transaction, at once.
	mustCommit(t, d, func(tx osd.Tx) error { return tx.WriteRecord(f, []byte("record"), 100) })
	write(t, d, f, 102, []byte("BULK"))
	model = modelWrite(modelWrite(model, 100, []byte("record")), 102, []byte("BULK"))
	checkContent(t, d, f, model, r)
	// LAST_ID style: one 8-byte record rewritten in place, read back each time.
	g := F(2)
	create(t, d, g, osd.Attr{})
	for i := range 20 {
		b := []byte(fmt.Sprintf("%08d", i))
		mustCommit(t, d, func(tx osd.Tx) error { return tx.WriteRecord(g, b, 0) })
		if got := read(t, d, g, 0, 8); !bytes.Equal(got, b) {
			t.Fatalf("record %d reads %q", i, got)
		}
	}
	tx, _ := d.Begin(ctx)
	defer tx.Abort()
	wantErr(t, "oversized record", tx.WriteRecord(f, make([]byte, osd.MaxRecordSize+1), 0), osd.ErrInvalid)
}

func testTxAbort(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	f, g := F(1), F(2)
	create(t, d, g, osd.Attr{UID: 1, Valid: osd.AttrUID})
	write(t, d, g, 0, []byte("keep"))

	tx, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		tx.Create(f, osd.Attr{}),
		tx.WriteAt(f, [][]byte{[]byte("gone")}, 0),
		tx.SetAttr(g, osd.Attr{UID: 2, Valid: osd.AttrUID}),
		tx.Punch(g, 0, osd.EOF),
		tx.Destroy(g),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	tx.SetTransno(5)
	tx.Abort()
	tx.Abort() // twice is fine
	_, err = d.GetAttr(ctx, f)
	wantErr(t, "aborted create", err, osd.ErrNotExist)
	if a := getattr(t, d, g); a.UID != 1 || a.Size != 4 {
		t.Fatalf("aborted changes of g are visible: %+v", a)
	}
	wantErr(t, "Commit after Abort", tx.Commit(ctx), osd.ErrTxDone)
	wantErr(t, "step after Abort", tx.Create(f, osd.Attr{}), osd.ErrTxDone)
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if lc := d.LastCommitted(); lc >= 5 {
		t.Fatalf("an aborted transno counts as committed: %d", lc)
	}

	tx, _ = d.Begin(ctx)
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("empty commit: %v", err)
	}
	tx.Abort() // after Commit: nothing
	wantErr(t, "second Commit", tx.Commit(ctx), osd.ErrTxDone)
}

func testTxAllOrNothing(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	a, b, c := F(1), F(2), F(3)
	create(t, d, b, osd.Attr{UID: 1, Valid: osd.AttrUID})
	write(t, d, b, 0, []byte("bbbb"))
	create(t, d, c, osd.Attr{})

	// The last step fails: none of the others may show.
	err := commit(d, func(tx osd.Tx) error {
		return errors.Join(
			tx.Create(a, osd.Attr{}),
			tx.WriteAt(a, [][]byte{[]byte("aaaa")}, 0),
			tx.SetAttr(b, osd.Attr{UID: 99, Valid: osd.AttrUID}),
			tx.WriteAt(b, [][]byte{[]byte("XXXX")}, 100),
			tx.Destroy(c),
			tx.Create(b, osd.Attr{}),
		)
	})
	wantErr(t, "transaction with a failing create", err, osd.ErrExist)
	_, err = d.GetAttr(ctx, a)
	wantErr(t, "create of a failed transaction", err, osd.ErrNotExist)
	if at := getattr(t, d, b); at.UID != 1 || at.Size != 4 {
		t.Fatalf("b changed by a failed transaction: %+v", at)
	}
	if got := read(t, d, b, 0, 200); string(got) != "bbbb" {
		t.Fatalf("b reads %q", got)
	}
	getattr(t, d, c) // still there

	// The failed create left nothing behind.
	create(t, d, a, osd.Attr{})
	if at := getattr(t, d, a); at.Size != 0 {
		t.Fatalf("a recreated with size %d", at.Size)
	}
	// Several steps on several objects, seen at once after Commit.
	mustCommit(t, d, func(tx osd.Tx) error {
		return errors.Join(
			tx.WriteAt(a, [][]byte{[]byte("hello")}, 0),
			tx.SetAttr(a, osd.Attr{GID: 4, Valid: osd.AttrGID}),
			tx.Destroy(c),
			tx.Create(F(4), osd.Attr{}),
			tx.WriteAt(F(4), [][]byte{[]byte("new")}, 3),
			tx.Punch(b, 1, 3),
		)
	})
	if at := getattr(t, d, a); at.GID != 4 || at.Size != 5 {
		t.Fatalf("a: %+v", at)
	}
	if _, err := d.GetAttr(ctx, c); !errors.Is(err, osd.ErrNotExist) {
		t.Fatalf("c: %v", err)
	}
	if got := read(t, d, F(4), 0, 10); string(got) != "\x00\x00\x00new" {
		t.Fatalf("F(4) reads %q", got)
	}
	if got := read(t, d, b, 0, 10); string(got) != "b\x00\x00b" {
		t.Fatalf("b reads %q", got)
	}
}

func testTxOrderRules(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	f := F(1)
	create(t, d, f, osd.Attr{})
	write(t, d, f, 0, []byte("0123456789"))
	for name, fn := range map[string]func(tx osd.Tx) error{
		"write after punch": func(tx osd.Tx) error { return errors.Join(tx.Punch(f, 0, 5), tx.WriteAt(f, [][]byte{{1}}, 0)) },
		"write after record": func(tx osd.Tx) error {
			return errors.Join(tx.WriteRecord(f, []byte{1}, 0), tx.WriteAt(f, [][]byte{{1}}, 0))
		},
		"write after size": func(tx osd.Tx) error {
			return errors.Join(tx.SetAttr(f, osd.Attr{Valid: osd.AttrSize}), tx.WriteAt(f, [][]byte{{1}}, 0))
		},
		"setattr after destroy": func(tx osd.Tx) error {
			return errors.Join(tx.Destroy(f), tx.SetAttr(f, osd.Attr{UID: 1, Valid: osd.AttrUID}))
		},
		"create after destroy": func(tx osd.Tx) error { return errors.Join(tx.Destroy(f), tx.Create(f, osd.Attr{})) },
	} {
		wantErr(t, name, commit(d, fn), osd.ErrInvalid)
		if got := read(t, d, f, 0, 20); string(got) != "0123456789" {
			t.Fatalf("%s: object changed: %q", name, got)
		}
	}
	// The allowed orders.
	mustCommit(t, d, func(tx osd.Tx) error {
		return errors.Join(tx.WriteAt(f, [][]byte{[]byte("ab")}, 0), tx.Punch(f, 1, 2), tx.WriteRecord(f, []byte("Z"), 3), tx.Punch(f, 6, osd.EOF))
	})
	if got := read(t, d, f, 0, 20); string(got) != "a\x002Z45" {
		t.Fatalf("reads %q", got)
	}
	g := F(2)
	mustCommit(t, d, func(tx osd.Tx) error {
		return errors.Join(tx.Create(g, osd.Attr{}), tx.WriteAt(g, [][]byte{[]byte("x")}, 0), tx.Destroy(g))
	})
	_, err := d.GetAttr(ctx, g)
	wantErr(t, "created and destroyed in one transaction", err, osd.ErrNotExist)
}

func testTxAtomicVisibility(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	const n = 200
	var next atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Value
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			i := int(next.Load())
			// B before A: if B is there, A (created in the same
			// transaction) must be too.
			_, errB := d.GetAttr(ctx, F(2*i+2))
			_, errA := d.GetAttr(ctx, F(2*i+1))
			if errB == nil && errA != nil {
				bad.Store(fmt.Sprintf("pair %d: B exists, A: %v", i, errA))
			}
		}
	})
	for i := range n {
		mustCommit(t, d, func(tx osd.Tx) error {
			return errors.Join(
				tx.Create(F(2*i+1), osd.Attr{}), tx.WriteAt(F(2*i+1), [][]byte{{1, 2, 3}}, 0),
				tx.Create(F(2*i+2), osd.Attr{}), tx.SetAttr(F(2*i+2), osd.Attr{UID: 1, Valid: osd.AttrUID}),
			)
		})
		next.Store(int64(i + 1))
	}
	close(stop)
	wg.Wait()
	if s := bad.Load(); s != nil {
		t.Fatal(s)
	}
}

func testTransno(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	f := F(1)
	create(t, d, f, osd.Attr{})
	start := d.LastCommitted()
	tn := func(n uint64) uint64 { return start + n }
	syncNow := func() {
		t.Helper()
		if err := d.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mustCommit(t, d, func(tx osd.Tx) error { tx.SetTransno(tn(10)); return tx.WriteAt(f, [][]byte{{1}}, 0) })
	syncNow()
	if lc := d.LastCommitted(); lc < tn(10) {
		t.Fatalf("LastCommitted %d after Sync, want at least %d", lc, tn(10))
	}
	// An open transaction with transno 11 holds LastCommitted below 11,
	// whatever commits after it.
	open, _ := d.Begin(ctx)
	open.SetTransno(tn(11))
	mustCommit(t, d, func(tx osd.Tx) error { tx.SetTransno(tn(12)); return tx.WriteAt(f, [][]byte{{2}}, 1) })
	syncNow()
	if lc := d.LastCommitted(); lc != tn(10) {
		t.Fatalf("LastCommitted %d with transno %d open, want %d", lc, tn(11), tn(10))
	}
	if err := open.SetAttr(f, osd.Attr{UID: 3, Valid: osd.AttrUID}); err != nil {
		t.Fatal(err)
	}
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	syncNow()
	if lc := d.LastCommitted(); lc < tn(12) {
		t.Fatalf("LastCommitted %d, want at least %d", lc, tn(12))
	}
	// An aborted transno stops holding it back.
	ab, _ := d.Begin(ctx)
	ab.SetTransno(tn(13))
	mustCommit(t, d, func(tx osd.Tx) error { tx.SetTransno(tn(14)); return nil }) // a transno with no steps
	syncNow()
	if lc := d.LastCommitted(); lc != tn(12) {
		t.Fatalf("LastCommitted %d with %d open, want %d", lc, tn(13), tn(12))
	}
	ab.Abort()
	syncNow()
	if lc := d.LastCommitted(); lc < tn(14) {
		t.Fatalf("LastCommitted %d after the abort, want at least %d", lc, tn(14))
	}
	// A replaced transno, and a failed commit, release theirs.
	re, _ := d.Begin(ctx)
	re.SetTransno(tn(15))
	re.SetTransno(tn(16))
	if err := re.Create(f, osd.Attr{}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "failing commit", re.Commit(ctx), osd.ErrExist)
	mustCommit(t, d, func(tx osd.Tx) error { tx.SetTransno(tn(17)); return nil })
	syncNow()
	if lc := d.LastCommitted(); lc < tn(17) {
		t.Fatalf("LastCommitted %d, want at least %d", lc, tn(17))
	}

	// Under concurrent commits LastCommitted never goes down and ends at
	// the last transno.
	var mu sync.Mutex
	next := tn(100)
	var wg sync.WaitGroup
	var last atomic.Uint64
	done := make(chan struct{})
	wg.Go(func() {
		prev := d.LastCommitted()
		for {
			lc := d.LastCommitted()
			if lc < prev {
				t.Errorf("LastCommitted went down from %d to %d", prev, lc)
				return
			}
			prev = lc
			select {
			case <-done:
				return
			default:
			}
		}
	})
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Go(func() {
			for i := range 50 {
				err := commit(d, func(tx osd.Tx) error {
					mu.Lock()
					n := next
					next++
					tx.SetTransno(n)
					mu.Unlock()
					last.Store(max(last.Load(), n))
					return tx.SetAttr(f, osd.Attr{UID: uint32(w*1000 + i), Valid: osd.AttrUID})
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	writers.Wait()
	syncNow()
	close(done)
	wg.Wait()
	if lc := d.LastCommitted(); lc != next-1 {
		t.Fatalf("LastCommitted %d after all commits and Sync, want %d", lc, next-1)
	}
}

func testStatfs(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	s, err := d.Statfs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Blocks == 0 || s.BFree > s.Blocks || s.BAvail > s.BFree || s.BSize == 0 || s.FFree > s.Files ||
		s.NameLen == 0 || s.MaxBytes != osd.MaxObjectSize || s.ReadOnly {
		t.Fatalf("statfs not sane: %+v", s)
	}
}

func testBadInput(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	f := F(1)
	create(t, d, f, osd.Attr{})
	write(t, d, f, 0, []byte("data"))
	var zero fid.FID
	_, err := d.GetAttr(ctx, zero)
	wantErr(t, "GetAttr of the zero FID", err, osd.ErrInvalid)
	_, err = d.ReadAt(ctx, zero, [][]byte{make([]byte, 1)}, 0)
	wantErr(t, "ReadAt of the zero FID", err, osd.ErrInvalid)
	_, err = d.ReadAt(ctx, f, [][]byte{make([]byte, 1)}, -1)
	wantErr(t, "ReadAt at -1", err, osd.ErrInvalid)
	_, err = d.ReadAt(ctx, f, [][]byte{make([]byte, 10)}, math.MaxInt64-3)
	wantErr(t, "ReadAt overflowing", err, osd.ErrInvalid)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = d.ReadAt(cctx, f, [][]byte{make([]byte, 1)}, 0)
	wantErr(t, "ReadAt with a canceled context", err, context.Canceled)

	tx, _ := d.Begin(ctx)
	defer tx.Abort()
	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"Create of the zero FID", tx.Create(zero, osd.Attr{}), osd.ErrInvalid},
		{"Destroy of the zero FID", tx.Destroy(zero), osd.ErrInvalid},
		{"SetAttr of the zero FID", tx.SetAttr(zero, osd.Attr{}), osd.ErrInvalid},
		{"WriteAt of the zero FID", tx.WriteAt(zero, [][]byte{{1}}, 0), osd.ErrInvalid},
		{"Punch of the zero FID", tx.Punch(zero, 0, 1), osd.ErrInvalid},
		{"WriteAt at -1", tx.WriteAt(f, [][]byte{{1}}, -1), osd.ErrInvalid},
		{"WriteAt at MinInt64", tx.WriteAt(f, [][]byte{{1}}, math.MinInt64), osd.ErrInvalid},
		{"WriteAt past the maximum size", tx.WriteAt(f, [][]byte{make([]byte, 20)}, osd.MaxObjectSize-10), osd.ErrTooLarge},
		{"WriteAt at MaxInt64", tx.WriteAt(f, [][]byte{{1}}, math.MaxInt64), osd.ErrTooLarge},
		{"WriteRecord past the maximum size", tx.WriteRecord(f, []byte{1, 2}, osd.MaxObjectSize-1), osd.ErrTooLarge},
		{"WriteRecord at -5", tx.WriteRecord(f, []byte{1}, -5), osd.ErrInvalid},
		{"Punch past the maximum size", tx.Punch(f, 0, osd.MaxObjectSize+1), osd.ErrTooLarge},
		{"truncate past the maximum size", tx.Punch(f, osd.MaxObjectSize+1, osd.EOF), osd.ErrTooLarge},
		{"Punch from 2^63", tx.Punch(f, 1<<63, osd.EOF-1), osd.ErrTooLarge},
	} {
		wantErr(t, c.what, c.err, c.want)
	}
	// The bad steps were not added: the Tx commits as empty.
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := read(t, d, f, 0, 10); string(got) != "data" {
		t.Fatalf("object changed: %q", got)
	}
	// A write to an object that does not exist fails at Commit.
	wantErr(t, "WriteAt of a missing object", commit(d, func(tx osd.Tx) error { return tx.WriteAt(F(99), [][]byte{{1}}, 0) }), osd.ErrNotExist)
	_, err = d.GetAttr(ctx, F(99))
	wantErr(t, "GetAttr after a failed write", err, osd.ErrNotExist)
	// A write ending exactly at the maximum size works.
	write(t, d, f, osd.MaxObjectSize-3, []byte("end"))
	if a := getattr(t, d, f); a.Size != osd.MaxObjectSize {
		t.Fatalf("size %d, want %d", a.Size, uint64(osd.MaxObjectSize))
	}
	if got := read(t, d, f, osd.MaxObjectSize-3, 10); string(got) != "end" {
		t.Fatalf("reads %q at the maximum size", got)
	}
}

func testConcurrentObjects(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 11))
			models := map[fid.FID][]byte{}
			for i := range 4 {
				f := F(w*10 + i + 1)
				if err := commit(d, func(tx osd.Tx) error { return tx.Create(f, osd.Attr{}) }); err != nil {
					t.Error(err)
					return
				}
				models[f] = nil
			}
			for range 30 {
				f := F(w*10 + r.IntN(4) + 1)
				off, data := r.IntN(100000), pattern(r, r.IntN(10000))
				if err := commit(d, func(tx osd.Tx) error { return tx.WriteAt(f, split(r, data), int64(off)) }); err != nil {
					t.Error(err)
					return
				}
				models[f] = modelWrite(models[f], off, data)
				if r.IntN(5) == 0 {
					if err := commit(d, func(tx osd.Tx) error { return tx.SetAttr(f, osd.Attr{UID: uint32(off), Valid: osd.AttrUID}) }); err != nil {
						t.Error(err)
						return
					}
				}
			}
			for f, m := range models {
				got := make([]byte, len(m)+1)
				n, err := d.ReadAt(ctx, f, [][]byte{got}, 0)
				if err != nil || n != len(m) || !bytes.Equal(got[:n], m) {
					t.Errorf("%v: %d bytes, %v; want %d, differ at %d", f, n, err, len(m), firstDiff(got[:n], m))
				}
			}
		})
	}
	wg.Wait()
}

func testConcurrentRanges(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	f := F(1)
	create(t, d, f, osd.Attr{})
	const writers, stripe, rounds = 6, 8192, 12
	model := make([]byte, writers*stripe*rounds)
	r := rand.New(rand.NewPCG(12, 13))
	for i := range model {
		model[i] = byte(r.Uint32())
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		b := make([]byte, 3*stripe)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := d.ReadAt(ctx, f, [][]byte{b[:stripe], b[stripe:]}, int64(len(b))); err != nil {
				t.Error(err)
				return
			}
			if _, err := d.GetAttr(ctx, f); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for w := range writers {
		wg.Go(func() {
			// Writer w owns stripes w, w+writers, ...; later rounds
			// extend the object while others write below.
			for k := range rounds {
				off := (k*writers + w) * stripe
				data := model[off : off+stripe]
				if err := commit(d, func(tx osd.Tx) error {
					return tx.WriteAt(f, [][]byte{data[:1000], data[1000:]}, int64(off))
				}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	checkContent(t, d, f, model, r)
}

func testConcurrentCreate(t *testing.T, h Harness) {
	d := newDevice(t, h.New)
	for round := range 10 {
		f := F(round + 1)
		var ok, exist atomic.Int32
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				err := commit(d, func(tx osd.Tx) error {
					return errors.Join(tx.Create(f, osd.Attr{}), tx.WriteAt(f, [][]byte{[]byte("x")}, 0))
				})
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, osd.ErrExist):
					exist.Add(1)
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if ok.Load() != 1 || exist.Load() != 4 {
			t.Fatalf("round %d: %d creates succeeded, %d saw EEXIST", round, ok.Load(), exist.Load())
		}
	}
}

func testNoSpace(t *testing.T, h Harness) {
	if h.Small == nil {
		t.Skip("the harness has no small device")
	}
	d := newDevice(t, h.Small)
	r := rand.New(rand.NewPCG(14, 15))
	f := F(1)
	create(t, d, f, osd.Attr{})
	chunk := pattern(r, 1<<20)
	var written int
	var err error
	for i := 0; i < 64; i++ {
		err = commit(d, func(tx osd.Tx) error { return tx.WriteAt(f, [][]byte{chunk[:1000], chunk[1000:]}, int64(written)) })
		if err != nil {
			break
		}
		written += len(chunk)
	}
	wantErr(t, "writing until the store is full", err, osd.ErrNoSpace)
	if osd.Errno(err) != 28 {
		t.Fatalf("Errno(%v) = %d, want ENOSPC", err, osd.Errno(err))
	}
	if written == 0 {
		t.Fatal("not even one chunk fit")
	}
	// The failed write left the object as it was.
	a := getattr(t, d, f)
	if a.Size != uint64(written) {
		t.Fatalf("size %d after the failed write, want %d", a.Size, written)
	}
	b := read(t, d, f, int64(written-len(chunk)), len(chunk)+100)
	if !bytes.Equal(b, chunk) {
		t.Fatal("the last full chunk reads wrong")
	}
	// The device goes on: attributes still change, and destroying the
	// object gives the space back.
	mustCommit(t, d, func(tx osd.Tx) error { return tx.SetAttr(f, osd.Attr{UID: 1, Valid: osd.AttrUID}) })
	mustCommit(t, d, func(tx osd.Tx) error { return tx.Destroy(f) })
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	g := F(2)
	mustCommit(t, d, func(tx osd.Tx) error {
		return errors.Join(tx.Create(g, osd.Attr{}), tx.WriteAt(g, [][]byte{chunk}, 0))
	})
	checkContent(t, d, g, chunk, r)
}

func testReopen(t *testing.T, h Harness) {
	if h.Reopen == nil {
		t.Skip("the harness cannot reopen")
	}
	d := h.New(t)
	r := rand.New(rand.NewPCG(16, 17))
	a, b, c := F(1), F(2), F(3)
	attr := fullAttr()
	create(t, d, a, attr)
	da := pattern(r, 300000)
	write(t, d, a, 5, da)
	mustCommit(t, d, func(tx osd.Tx) error { return tx.Punch(a, 1000, 2000) })
	ma := modelWrite(nil, 5, da)
	clear(ma[1000:2000])
	create(t, d, b, osd.Attr{})
	mustCommit(t, d, func(tx osd.Tx) error { return tx.WriteRecord(b, []byte("LAST_ID=41"), 0) })
	create(t, d, c, osd.Attr{})
	mustCommit(t, d, func(tx osd.Tx) error { tx.SetTransno(77); return tx.Destroy(c) })

	d = h.Reopen(t, d)
	t.Cleanup(func() { d.Close() })
	if lc := d.LastCommitted(); lc < 77 {
		t.Fatalf("LastCommitted %d after reopen, want at least 77", lc)
	}
	attr.Size = uint64(len(ma))
	sameAttr(t, "a after reopen", getattr(t, d, a), attr)
	checkContent(t, d, a, ma, r)
	checkContent(t, d, b, []byte("LAST_ID=41"), r)
	_, err := d.GetAttr(ctx, c)
	wantErr(t, "destroyed object after reopen", err, osd.ErrNotExist)

	// Once more, with changes made after the reopen and no Sync.
	mustCommit(t, d, func(tx osd.Tx) error { tx.SetTransno(78); return tx.Punch(a, 100, osd.EOF) })
	d = h.Reopen(t, d)
	t.Cleanup(func() { d.Close() })
	checkContent(t, d, a, ma[:100], r)
	if lc := d.LastCommitted(); lc < 78 {
		t.Fatalf("LastCommitted %d after the second reopen, want at least 78", lc)
	}
}

func testClosed(t *testing.T, h Harness) {
	d := h.New(t)
	f := F(1)
	create(t, d, f, osd.Attr{})
	tx, _ := d.Begin(ctx)
	if err := tx.WriteAt(f, [][]byte{{1}}, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Commit after Close", tx.Commit(ctx), osd.ErrClosed)
	_, err := d.GetAttr(ctx, f)
	wantErr(t, "GetAttr after Close", err, osd.ErrClosed)
	_, err = d.ReadAt(ctx, f, [][]byte{{0}}, 0)
	wantErr(t, "ReadAt after Close", err, osd.ErrClosed)
	_, err = d.Begin(ctx)
	wantErr(t, "Begin after Close", err, osd.ErrClosed)
	_, err = d.Statfs(ctx)
	wantErr(t, "Statfs after Close", err, osd.ErrClosed)
	wantErr(t, "Sync after Close", d.Sync(ctx), osd.ErrClosed)
	wantErr(t, "second Close", d.Close(), osd.ErrClosed)
}
