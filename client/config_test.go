package client_test

import (
	"bytes"
	"context"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
)

// TestNewOSTWithoutRemount: an OST added to the file system after the
// mount shows up in the client from the MGS's watch, and a file striped
// over every OST uses it.
func TestNewOSTWithoutRemount(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	fs := c.Mount(0)
	idx := c.AddOST()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for !slices.Contains(fs.OSTs(), idx) {
		if ctx.Err() != nil {
			t.Fatalf("the client never connected to OST%04x: %v", idx, fs.OSTs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	lay := layout.Plain(layout.RAID0{StripeCount: -1, StripeSize: 64 << 10, StripeOffset: -1})
	f, _, err := fs.Create(ctx, client.Root(), fs.Root(), "wide", syscall.O_RDWR|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.Layout().Components[0].Objects); n != 3 {
		t.Fatalf("a file over every OST has %d stripes: %v", n, f.Layout())
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 3*64<<10/16)
	if _, _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	g, _, err := c.Mount(1).Open(ctx, client.Root(), f.FID(), syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if n, err := g.ReadAt(ctx, got, 0); n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("read %d %v", n, err)
	}
}
