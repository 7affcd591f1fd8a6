package client_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/client/osc"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/mds/mdd"
)

// TestFallocate: fallocate of a file striped over 4 OSTs, against a model
// of its bytes. Blocks reserved keeping the size and growing it; a hole
// punched across stripes at odd offsets, with writes not yet sent on both
// sides of it, which survive; a second client sees every byte and the
// size; st_blocks follows; the modes Lustre lacks, bad ranges, a
// read-only open and the immutable and append-only flags are refused.
func TestFallocate(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fs, fs2 := c.Mount(0), c.Mount(1)
	cred := client.Root()
	const stripe = 64 << 10
	lay := layout.Plain(layout.RAID0{StripeCount: 4, StripeSize: stripe, StripeOffset: -1})
	f, _, err := fs.Create(ctx, cred, fs.Root(), "f", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	maxBytes := int64(lay.MaxFileSize(osc.MaxObjectSize))
	rng := rand.New(rand.NewPCG(5, 6))
	model := make([]byte, 700_001)
	randFill(rng, model)
	if _, _, err := f.WriteAt(ctx, model, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(what string, wantBlocksAtLeast, wantBlocksAtMost uint64) {
		t.Helper()
		a, err := fs2.Getattr(ctx, cred, f.FID())
		if err != nil {
			t.Fatalf("%s: getattr from the second client: %v", what, err)
		}
		if a.Size != uint64(len(model)) {
			t.Fatalf("%s: size %d, want %d", what, a.Size, len(model))
		}
		if a.Blocks < wantBlocksAtLeast || (wantBlocksAtMost > 0 && a.Blocks > wantBlocksAtMost) {
			t.Fatalf("%s: %d blocks of 512 bytes, want [%d, %d]", what, a.Blocks, wantBlocksAtLeast, wantBlocksAtMost)
		}
		got, err := readAll(ctx, fs2, f.FID(), len(model)+4096)
		if err != nil && len(got) != len(model) {
			t.Fatalf("%s: read from the second client: %d bytes, %v", what, len(got), err)
		}
		if !bytes.Equal(got, model) {
			i := 0
			for i < len(got) && i < len(model) && got[i] == model[i] {
				i++
			}
			t.Fatalf("%s: the second client reads %d bytes differing from the model at %d", what, len(got), i)
		}
	}
	check("written", uint64(len(model))/512, 0)

	// Blocks past the end, keeping the size.
	if err := f.Fallocate(ctx, unix.FALLOC_FL_KEEP_SIZE, int64(len(model)), 4<<20); err != nil {
		t.Fatal(err)
	}
	check("allocated past the end, size kept", (uint64(len(model))+4<<20)/512, 0)

	// Growing: the new bytes read as zeros.
	grown := len(model) + 300_007
	if err := f.Fallocate(ctx, 0, int64(len(model)-5), int64(grown-len(model)+5)); err != nil {
		t.Fatal(err)
	}
	model = append(model, make([]byte, grown-len(model))...)
	check("grown", uint64(len(model))/512, 0)

	// A hole across stripes, at odd offsets, with unsent writes on both
	// sides and inside.
	const from, to = 100_003, 400_011
	for _, w := range []struct {
		off int
		n   int
	}{{from - 10, 20}, {to - 7, 30}, {250_000, 100}} {
		b := make([]byte, w.n)
		randFill(rng, b)
		if _, _, err := f.WriteAt(ctx, b, int64(w.off)); err != nil {
			t.Fatal(err)
		}
		copy(model[w.off:], b)
	}
	before, err := fs2.Getattr(ctx, cred, f.FID())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Fallocate(ctx, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, from, to-from); err != nil {
		t.Fatal(err)
	}
	clear(model[from:to])
	// The first client's own reads agree before anything is flushed.
	got := make([]byte, len(model))
	if n, err := f.ReadAt(ctx, got, 0); n != len(model) || !bytes.Equal(got, model) {
		t.Fatalf("the punching client reads %d bytes (%v), equal %v", n, err, bytes.Equal(got, model))
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	freed := uint64(to-from-2*stripe) / 512 // the hole's whole blocks, and then some
	check("punched", 0, before.Blocks-freed)

	// Refused.
	for _, tc := range []struct {
		mode   uint32
		off, n int64
		want   error
	}{
		{unix.FALLOC_FL_ZERO_RANGE, 0, 10, syscall.EOPNOTSUPP},
		{unix.FALLOC_FL_COLLAPSE_RANGE, 0, stripe, syscall.EOPNOTSUPP},
		{unix.FALLOC_FL_PUNCH_HOLE, 0, 10, syscall.EOPNOTSUPP}, // without KEEP_SIZE
		{0, 0, 0, syscall.EINVAL},
		{0, -1, 10, syscall.EINVAL},
		{0, 1 << 62, 1 << 62, syscall.EFBIG},
		{unix.FALLOC_FL_KEEP_SIZE, maxBytes - 10, 20, syscall.EFBIG}, // past what 4 objects hold
		{unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, maxBytes - 10, 20, syscall.EFBIG},
	} {
		if err := f.Fallocate(ctx, tc.mode, tc.off, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("fallocate mode %#x [%d,+%d): %v, want %v", tc.mode, tc.off, tc.n, err, tc.want)
		}
	}
	check("after the refusals", 0, 0)
	r, _, err := fs.Open(ctx, cred, f.FID(), syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Fallocate(ctx, 0, 0, 10); !errors.Is(err, syscall.EBADF) {
		t.Errorf("fallocate of a read-only open: %v", err)
	}
	r.Close(ctx)
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Append-only: blocks yes, holes no; immutable: neither.
	if _, err := fs.Setattr(ctx, cred, f.FID(), client.SetAttr{Valid: mdc.AttrFlags, Flags: mdd.FlagAppend}); err != nil {
		t.Fatal(err)
	}
	a, _, err := fs.Open(ctx, cred, f.FID(), syscall.O_WRONLY|syscall.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Fallocate(ctx, unix.FALLOC_FL_KEEP_SIZE, 0, 10); err != nil {
		t.Errorf("blocks for an append-only file: %v", err)
	}
	if err := a.Fallocate(ctx, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 10); !errors.Is(err, syscall.EPERM) {
		t.Errorf("a hole in an append-only file: %v", err)
	}
	a.Close(ctx)
	if _, err := fs.Setattr(ctx, cred, f.FID(), client.SetAttr{Valid: mdc.AttrFlags, Flags: mdd.FlagImmutable}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fs.Open(ctx, cred, f.FID(), syscall.O_WRONLY); !errors.Is(err, syscall.EPERM) {
		t.Errorf("open for writing of an immutable file: %v", err)
	}
	check("after the flags", 0, 0)
}
