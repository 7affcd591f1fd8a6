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
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
)

// TestTmpfile: an O_TMPFILE file striped over 2 OSTs holds its bytes with
// no name; a link names it and a second client reads them through the
// name; one made with O_EXCL cannot be linked, nor can a file unlinked
// while open; one never linked is gone after its last close, objects and
// all; bad flags and a directory the caller may not write are refused.
func TestTmpfile(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fs, fs2 := c.Mount(0), c.Mount(1)
	cred := client.Root()
	d, err := fs.Mkdir(ctx, cred, fs.Root(), "d", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	lay := layout.Plain(layout.RAID0{StripeCount: 2, StripeSize: 64 << 10, StripeOffset: -1})
	f, a, err := fs.Tmpfile(ctx, cred, d.FID, unix.O_TMPFILE|syscall.O_RDWR, 0o640, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	if a.Nlink != 0 || a.Mode != syscall.S_IFREG|0o640 {
		t.Fatalf("tmpfile attributes %+v", a)
	}
	data := make([]byte, 300_001)
	randFill(rand.New(rand.NewPCG(7, 8)), data)
	if _, _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data)+10)
	if n, err := f.ReadAt(ctx, got, 0); n != len(data) || !bytes.Equal(got[:n], data) {
		t.Fatalf("read back %d bytes (%v), equal %v", n, err, bytes.Equal(got[:n], data))
	}
	if ents, _, err := fs2.ReadDir(ctx, cred, d.FID, 0, 100); err != nil || len(ents) != 2 {
		t.Fatalf("the directory holds %+v (%v), want . and .. only", ents, err)
	}
	if _, err := fs.Link(ctx, cred, f.FID(), d.FID, "named"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := fs2.Lookup(ctx, cred, d.FID, "named")
	if err != nil || n.FID != f.FID() || n.Nlink != 1 || n.Size != uint64(len(data)) {
		t.Fatalf("the second client finds %+v, %v", n, err)
	}
	if b, err := readAll(ctx, fs2, n.FID, len(data)+10); !bytes.Equal(b, data) {
		t.Fatalf("the second client reads %d bytes (%v), equal %v", len(b), err, bytes.Equal(b, data))
	}

	// O_EXCL: no link; written, closed, and gone with its objects.
	objects := c.OSTObjectBytes()
	x, _, err := fs.Tmpfile(ctx, cred, d.FID, unix.O_TMPFILE|syscall.O_WRONLY|syscall.O_EXCL, 0o600, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := x.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := x.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Link(ctx, cred, x.FID(), d.FID, "x"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("link of an O_EXCL tmpfile: %v, want ENOENT", err)
	}
	if err := x.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := fs2.Getattr(ctx, cred, x.FID())
		if errors.Is(err, syscall.ENOENT) && c.OSTObjectBytes() <= objects {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the closed tmpfile stays: getattr %v, %d object bytes, %d before it", err, c.OSTObjectBytes(), objects)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A file unlinked while open is no O_TMPFILE file.
	g, _, err := fs.Create(ctx, cred, d.FID, "g", syscall.O_RDWR|syscall.O_CREAT, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Unlink(ctx, cred, d.FID, "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Link(ctx, cred, g.FID(), d.FID, "g2"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("link of a file unlinked while open: %v, want ENOENT", err)
	}
	g.Close(ctx)

	// Refusals.
	for _, flags := range []uint64{unix.O_TMPFILE | syscall.O_RDONLY, unix.O_TMPFILE | syscall.O_RDWR | syscall.O_CREAT, syscall.O_RDWR} {
		if _, _, err := fs.Tmpfile(ctx, cred, d.FID, flags, 0o600, nil); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("tmpfile with flags %#o: %v, want EINVAL", flags, err)
		}
	}
	user := client.Cred{UID: 1000, GID: 1000}
	if _, _, err := fs.Tmpfile(ctx, user, fs.Root(), unix.O_TMPFILE|syscall.O_RDWR, 0o600, nil); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("tmpfile in a directory the caller may not write: %v, want EACCES", err)
	}
	if _, _, err := fs.Tmpfile(ctx, cred, n.FID, unix.O_TMPFILE|syscall.O_RDWR, 0o600, nil); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("tmpfile in a file: %v, want ENOTDIR", err)
	}
}
