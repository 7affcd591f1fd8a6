package osc_test

import (
	"bytes"
	"testing"
	"time"
)

// TestAttrBlocks: an object's Attr tells the 512-byte blocks it occupies
// on the OST (Lustre's lvb_blocks), not its size: a sparse object counts
// its hole for nothing. The writer, which knows the size from its locks,
// counts its dirty pages only once written (as Lustre does), and the
// blocks a truncate frees at once; another client's glimpse agrees.
func TestAttrBlocks(t *testing.T) {
	_, _, _, _, oa, ob := twoClients(t)
	ctx := ctxT(t, 30*time.Second)
	const chunk, far = 64 << 10, 100 << 20
	const slack = 64 << 10 / 512 // the OST file system's own metadata
	data := bytes.Repeat([]byte("blocks!\n"), chunk/8)
	for _, off := range []uint64{0, far} {
		if _, err := oa.WriteAt(ctx, data, off); err != nil {
			t.Fatal(err)
		}
	}
	a, err := oa.Attr(ctx)
	if err != nil || a.Size != far+chunk || a.Blocks != 0 {
		t.Fatalf("dirty: %+v %v; want size %d and no blocks yet", a, err, far+chunk)
	}
	if err := oa.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	const written = 2 * chunk / 512
	if !oa.SizeKnown() {
		t.Fatal("the writer does not know the size from its locks")
	}
	check := func(what string, size, min, max uint64) {
		t.Helper()
		wa, err := oa.Attr(ctx)
		if err != nil || wa.Size != size || wa.Blocks < min || wa.Blocks > max {
			t.Fatalf("%s: writer: %+v %v; want size %d, blocks in [%d, %d]", what, wa, err, size, min, max)
		}
		ra, err := ob.Attr(ctx)
		if err != nil || ra.Size != size || ra.Blocks < min || ra.Blocks > max {
			t.Fatalf("%s: other client: %+v %v; want size %d, blocks in [%d, %d]", what, ra, err, size, min, max)
		}
	}
	check("written", far+chunk, written, written+slack)
	if err := oa.Truncate(ctx, chunk/2); err != nil {
		t.Fatal(err)
	}
	check("truncated", chunk/2, 0, chunk/2/512+slack)
}
