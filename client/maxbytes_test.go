package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/osc"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
)

// TestWriteAcrossMaxBytes: as Linux's generic_write_checks, a write that
// crosses the largest size a file's layout can hold writes the bytes below
// it and returns that short count, and a write at or past it fails with
// EFBIG; so does an O_APPEND write. With two stripes the limit is where
// stripe 0's object is full, although stripe 1's still has room for the
// next stripe unit: nothing past the limit may land there. The writes
// near 16 TiB are sparse on the OSTs (osd-file objects are sparse files).
func TestWriteAcrossMaxBytes(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	fs, other := c.Mount(0), c.Mount(1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cred := client.Root()
	const m = osc.MaxObjectSize
	tests := []struct {
		name  string
		count int32
		size  uint32
		limit int64
	}{
		{"1 stripe", 1, 1 << 20, m},
		// Stripe 0 holds 2^28-1 whole 64 KiB units and 60 KiB of the
		// next; the limit is there, 4 KiB short of the unit's end.
		{"2 stripes", 2, 64 << 10, (m/(64<<10))*2*(64<<10) + m%(64<<10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lay := layout.Plain(layout.RAID0{StripeCount: tt.count, StripeSize: tt.size, StripeOffset: layout.AnyOffset})
			f, _, err := fs.Create(ctx, cred, fs.Root(), "big-"+tt.name, syscall.O_RDWR|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &lay})
			if err != nil {
				t.Fatal(err)
			}
			if n := len(f.Layout().Components[0].Objects); n != int(tt.count) {
				t.Fatalf("%d objects, want %d", n, tt.count)
			}
			// 5000 bytes below the limit, 195000 past it: on two stripes
			// that reaches into the next units of both objects.
			const below = 5000
			p := make([]byte, 200_000)
			for i := range p {
				p[i] = byte(i*7 + 1)
			}
			n, at, err := f.WriteAt(ctx, p, tt.limit-below)
			if err != nil || n != below || at != tt.limit-below {
				t.Fatalf("write across the limit: %d bytes at %d, %v; want %d at %d and no error", n, at, err, below, tt.limit-below)
			}
			for _, off := range []int64{tt.limit, tt.limit + 1, tt.limit + 64<<10} {
				if n, _, err := f.WriteAt(ctx, p[:10], off); n != 0 || !errors.Is(err, syscall.EFBIG) {
					t.Fatalf("write at %d (limit %d): %d, %v; want EFBIG", off, tt.limit, n, err)
				}
			}
			if err := f.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			checkBig(ctx, t, f, p[:below], tt.limit)
			if err := f.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// Another client reads from the OSTs' objects.
			r, _, err := other.Open(ctx, cred, f.FID(), syscall.O_RDONLY)
			if err != nil {
				t.Fatal(err)
			}
			checkBig(ctx, t, r, p[:below], tt.limit)
			if err := r.Close(ctx); err != nil {
				t.Fatal(err)
			}
			g, _, err := fs.Open(ctx, cred, f.FID(), syscall.O_RDWR|syscall.O_APPEND)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close(ctx)
			// An append 100 bytes short of the limit is cut there; the
			// next one fails.
			if err := g.Truncate(ctx, tt.limit-100); err != nil {
				t.Fatal(err)
			}
			if n, at, err := g.WriteAt(ctx, p[:300], 0); err != nil || n != 100 || at != tt.limit-100 {
				t.Fatalf("append across the limit: %d bytes at %d, %v; want 100 at %d", n, at, err, tt.limit-100)
			}
			if n, _, err := g.WriteAt(ctx, p[:1], 0); n != 0 || !errors.Is(err, syscall.EFBIG) {
				t.Fatalf("append at the limit: %d, %v; want EFBIG", n, err)
			}
			want := append(bytes.Clone(p[:below-100]), p[:100]...)
			checkBig(ctx, t, g, want, tt.limit)
			// A truncate past the limit changes nothing; one to it is fine.
			for _, size := range []int64{tt.limit + 1, tt.limit + 64<<10, 1 << 62} {
				if err := g.Truncate(ctx, size); !errors.Is(err, syscall.EFBIG) {
					t.Fatalf("truncate to %d (limit %d): %v; want EFBIG", size, tt.limit, err)
				}
			}
			checkBig(ctx, t, g, want, tt.limit)
			if err := g.Truncate(ctx, tt.limit); err != nil {
				t.Fatalf("truncate to the limit: %v", err)
			}
			checkBig(ctx, t, g, want, tt.limit)
		})
	}
}

// checkBig checks that f is limit bytes long and that its last len(want)
// bytes are want, byte by byte, with nothing past the limit.
func checkBig(ctx context.Context, t *testing.T, f *client.File, want []byte, limit int64) {
	t.Helper()
	if size, err := f.Size(ctx); err != nil || size != limit {
		t.Fatalf("size %d, %v; want %d", size, err, limit)
	}
	start := limit - int64(len(want))
	got := make([]byte, len(want)+4096)
	n, err := f.ReadAt(ctx, got, start)
	if n != len(want) || !errors.Is(err, io.EOF) {
		t.Fatalf("read at %d: %d bytes, %v; want %d and EOF", start, n, err, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("byte %d (offset %d): %#x, want %#x", i, start+int64(i), got[i], want[i])
		}
	}
	// The units past the limit on the other stripes hold nothing.
	if n, err := f.ReadAt(ctx, got[:10], limit+64<<10); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("read past the limit: %d, %v", n, err)
	}
}
