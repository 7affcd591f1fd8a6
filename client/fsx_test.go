package client_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/fsx"
	"github.com/nacrefs/nacre/internal/layout"
)

// libFile adapts a library File to the exerciser.
type libFile struct {
	ctx context.Context
	f   *client.File
}

func (l libFile) ReadAt(p []byte, off int64) (int, error) { return l.f.ReadAt(l.ctx, p, off) }
func (l libFile) WriteAt(p []byte, off int64) (int, error) {
	n, _, err := l.f.WriteAt(l.ctx, p, off)
	return n, err
}
func (l libFile) Truncate(size int64) error { return l.f.Truncate(l.ctx, size) }
func (l libFile) Size() (int64, error)      { return l.f.Size(l.ctx) }

// TestFSX runs 100,000 random operations on a file striped over four
// OSTs in 64 KiB stripes, closing and reopening it every 5,000 (what a
// handle flushed, the next must read); every read is checked byte for
// byte against the exerciser's model. The seed is in any failure.
func TestFSX(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 4})
	fs := c.Mount(0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cred := client.Root()
	lay := layout.Plain(layout.RAID0{StripeCount: 4, StripeSize: 64 << 10, StripeOffset: -1})
	f, _, err := fs.Create(ctx, cred, fs.Root(), "fsx", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	fid := f.FID()
	ops := 100000
	if testing.Short() {
		ops = 10000
	}
	reopen := func(old fsx.File) (fsx.File, error) {
		if err := old.(libFile).f.Close(ctx); err != nil {
			return nil, err
		}
		nf, _, err := fs.Open(ctx, cred, fid, syscall.O_RDWR)
		return libFile{ctx, nf}, err
	}
	st, err := fsx.Run(ctx, libFile{ctx, f}, fsx.Config{Ops: ops, MaxSize: 1 << 20, MaxLen: 96 << 10, Seed: uint64(time.Now().UnixNano()),
		Reopen: reopen, ReopenEvery: 5000})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", st)
}
