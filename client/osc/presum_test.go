package osc_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/osc"
)

// TestPresummedWrites: a checksummed write sends the checksum joined from
// its pages' sums, taken as the data was written in, and the OST takes it
// (no mismatch) whatever shape the writes took: whole pages, appends to a
// page a bit at a time, rewrites inside a dirty page, a second piece away
// from the first, a truncate through dirty pages. The other client reads
// back every byte. A phase of whole-page writes is presummed in every RPC.
func TestPresummedWrites(t *testing.T) {
	c, a, _, _, oa, ob := twoClients(t)
	ctx := ctxT(t, 60*time.Second)
	model := make([]byte, 0, 4<<20)
	write := func(off int, b []byte) {
		t.Helper()
		if n, err := oa.WriteAt(ctx, b, uint64(off)); err != nil || n != len(b) {
			t.Fatalf("write %d at %d: %d %v", len(b), off, n, err)
		}
		if end := off + len(b); end > len(model) {
			model = append(model, make([]byte, end-len(model))...)
		}
		copy(model[off:], b)
	}
	check := func(what string) {
		t.Helper()
		if err := oa.Flush(ctx); err != nil {
			t.Fatalf("%s: flush: %v", what, err)
		}
		got := make([]byte, len(model))
		if _, err := ob.ReadAt(ctx, got, 0); err != nil {
			t.Fatalf("%s: read: %v", what, err)
		}
		if !bytes.Equal(got, model) {
			t.Fatalf("%s: the other client reads %d bytes that differ from those written", what, len(got))
		}
	}

	// Whole pages, in writes of 256 KiB: every RPC presummed.
	for i := range 8 {
		write(i<<18, pattern(1<<18, uint64(i+1)))
	}
	check("whole pages")
	st := a.OSCs[0].Stats()
	if st.WriteRPCs == 0 || st.PresummedWrites != st.WriteRPCs {
		t.Fatalf("whole pages: %d write RPCs, %d presummed", st.WriteRPCs, st.PresummedWrites)
	}

	// Appends of 100 bytes (the page's sum goes on from where it was),
	// a rewrite inside what they made, and a piece away from it in the
	// same page.
	base := len(model)
	for i := range 100 {
		write(base+100*i, pattern(100, uint64(100+i)))
	}
	write(base+333, pattern(1000, 7))
	write(base+10000+50, pattern(20, 8))
	write(base+10000+3000, pattern(30, 9))
	check("appends and rewrites")

	// A truncate through dirty pages, then writes across the cut.
	base = len(model)
	write(base, pattern(64<<10, 10))
	cut := base + 20000 + 17
	if err := oa.Truncate(ctx, uint64(cut)); err != nil {
		t.Fatal(err)
	}
	model = model[:cut]
	check("truncate through dirty pages")
	write(cut-5, pattern(9000, 11))
	check("writes across the cut")

	st = a.OSCs[0].Stats()
	if st.PresumMisses != 0 {
		t.Fatalf("%d presummed writes refused", st.PresumMisses)
	}
	if n := c.OSS.Service().Stats().BulkChecksumErrors; n != 0 {
		t.Fatalf("the OST saw %d checksum mismatches", n)
	}
	t.Logf("%d write RPCs, %d presummed", st.WriteRPCs, st.PresummedWrites)
}

// TestPresumMissSentAgain: a write whose pages' sums are wrong (as a
// page changed without its sum would make it) is refused by the OST,
// which checks every checksum, and sent again summed from the data: it
// succeeds, and the other client reads the bytes written.
func TestPresumMissSentAgain(t *testing.T) {
	c, a, _, _, oa, ob := twoClients(t)
	ctx := ctxT(t, 60*time.Second)
	data := pattern(1<<20, 3)
	if _, err := oa.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if n := osc.SpoilPageSums(oa); n != 256 {
		t.Fatalf("spoiled %d pages' sums, want 256", n)
	}
	if err := oa.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if err := oa.Sync(ctx); err != nil {
		t.Fatalf("sync: %v (a write failed)", err)
	}
	st := a.OSCs[0].Stats()
	if st.PresumMisses == 0 || st.WriteErrors != 0 || st.LostPages != 0 {
		t.Fatalf("stats %+v: want a presum miss, no write error, no lost page", st)
	}
	if n := c.OSS.Service().Stats().BulkChecksumErrors; n == 0 {
		t.Fatal("the OST saw no checksum mismatch")
	}
	got := make([]byte, len(data))
	if _, err := ob.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v (equal %v)", err, bytes.Equal(got, data))
	}
}
