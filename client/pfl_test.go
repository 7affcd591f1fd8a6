package client_test

import (
	"bytes"
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
)

// pfl is lfs setstripe -E 1M -c 1 -E 8M -c 2 -E -1 -c 4 (64 KiB stripes).
func pfl() layout.Layout {
	comp := func(id uint32, start, end uint64, count int32) layout.Component {
		return layout.Component{ID: id, Pattern: layout.PatternRAID0, Start: start, End: end,
			RAID0: layout.RAID0{StripeCount: count, StripeSize: 64 << 10, StripeOffset: -1}}
	}
	return layout.Layout{Composite: true, Components: []layout.Component{
		comp(1, 0, 1<<20, 1), comp(2, 1<<20, 8<<20, 2), comp(3, 8<<20, layout.EOF, 4)}}
}

// TestPFLInstantiation: a file with a composite layout gets objects for
// its first component at create; a write past it has the MDT instantiate
// the component it lands in (and only that); another client that had the
// file open sees the new layout (its layout lock is called back) and reads
// the bytes, not a hole.
func TestPFLInstantiation(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 4})
	a, b := c.Mount(0), c.Mount(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cred := client.Root()
	tmpl := pfl()
	f, _, err := a.Create(ctx, cred, a.Root(), "pfl", syscall.O_RDWR|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &tmpl})
	if err != nil {
		t.Fatal(err)
	}
	inst := func(l *layout.Layout) []bool {
		var out []bool
		for _, c := range l.Components {
			out = append(out, c.Instantiated())
		}
		return out
	}
	if got := inst(f.Layout()); !got[0] || got[1] || got[2] {
		t.Fatalf("after create: instantiated %v", got)
	}
	// Client b opens the file now: it holds the layout of the create.
	g, _, err := b.Open(ctx, cred, f.FID(), syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	head := bytes.Repeat([]byte("h"), 4096)
	tail := bytes.Repeat([]byte("t"), 200<<10)
	if _, _, err := f.WriteAt(ctx, head, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.WriteAt(ctx, tail, 20<<20); err != nil {
		t.Fatalf("write into the third component: %v", err)
	}
	lay, err := a.Layout(ctx, cred, f.FID())
	if err != nil {
		t.Fatal(err)
	}
	if got := inst(lay); !got[0] || got[1] || !got[2] || len(lay.Components[2].Objects) != 4 {
		t.Fatalf("after a write at 20 MiB: instantiated %v, %d objects in the last", got, len(lay.Components[2].Objects))
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(tail))
	if n, err := g.ReadAt(ctx, got, 20<<20); n != len(tail) || !bytes.Equal(got, tail) {
		t.Fatalf("client b read %d bytes (%v) of the third component, equal %v", n, err, bytes.Equal(got[:n], tail[:n]))
	}
	hole := make([]byte, 4096)
	if n, err := g.ReadAt(ctx, hole, 4<<20); n != 4096 || !bytes.Equal(hole, make([]byte, 4096)) {
		t.Fatalf("hole in the second component: %d %v", n, err)
	}
	if sz, err := g.Size(ctx); err != nil || sz != 20<<20+200<<10 {
		t.Fatalf("size %d %v", sz, err)
	}
	g.Close(ctx)
	// O_APPEND at the end of the third component's data.
	h, _, err := b.Open(ctx, cred, f.FID(), syscall.O_WRONLY|syscall.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	if _, at, err := h.WriteAt(ctx, []byte("end"), 0); err != nil || at != 20<<20+200<<10 {
		t.Fatalf("append at %d: %v", at, err)
	}
	h.Close(ctx)
}

// TestPFLAppendAndTruncate: on a file whose later components have no
// objects yet, an O_APPEND write (which locks the file from its size to
// the end) and a truncate into a component not written yet work: the
// components get their objects first. The bytes and the size are right.
func TestPFLAppendAndTruncate(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 4})
	a := c.Mount(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cred := client.Root()
	tmpl := pfl()
	f, _, err := a.Create(ctx, cred, a.Root(), "pfl-append", syscall.O_RDWR|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &tmpl})
	if err != nil {
		t.Fatal(err)
	}
	head := bytes.Repeat([]byte("h"), 4096)
	if _, _, err := f.WriteAt(ctx, head, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	g, _, err := a.Open(ctx, cred, f.FID(), syscall.O_WRONLY|syscall.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	if n, at, err := g.WriteAt(ctx, []byte("abc"), 0); err != nil || n != 3 || at != 4096 {
		t.Fatalf("append to a file whose later components have no objects: %d bytes at %d, %v", n, at, err)
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The truncate on a file of its own: the append gave every component
	// its objects.
	h, _, err := a.Create(ctx, cred, a.Root(), "pfl-truncate", syscall.O_RDWR|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &tmpl})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.WriteAt(ctx, append(bytes.Clone(head), "abc"...), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Truncate(ctx, 2<<20); err != nil {
		t.Fatalf("truncate into the second component, not written yet: %v", err)
	}
	if l := h.Layout(); l == nil {
		t.Fatal("no layout")
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for fid, want := range map[client.FID][]byte{
		f.FID(): append(bytes.Clone(head), "abc"...),
		h.FID(): append(append(bytes.Clone(head), "abc"...), make([]byte, 2<<20-4099)...),
	} {
		r, attr, err := a.Open(ctx, cred, fid, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		if attr.Size != uint64(len(want)) {
			t.Fatalf("%v: size %d, want %d", fid, attr.Size, len(want))
		}
		got := make([]byte, len(want))
		if n, err := r.ReadAt(ctx, got, 0); n != len(want) || !bytes.Equal(got, want) {
			t.Fatalf("%v: read back %d bytes (%v), equal %v", fid, n, err, bytes.Equal(got[:n], want[:n]))
		}
		r.Close(ctx)
	}
}
