package llite_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/fsx"
	"github.com/nacrefs/nacre/internal/layout"
)

// TestFSXThroughMount runs the exerciser on a file striped over four
// OSTs through the kernel (page cache, FUSE requests of every size),
// reopening it every 2,000 operations, while the second mount reads it
// now and then. The library's own 100,000-operation run is in package
// client.
func TestFSXThroughMount(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 4})
	srv := mountT(t, c, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lay := layout.Plain(layout.RAID0{StripeCount: 4, StripeSize: 64 << 10, StripeOffset: -1})
	f, _, err := srv.FS().Create(ctx, client.Root(), srv.FS().Root(), "fsx", syscall.O_WRONLY|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	f.Close(ctx)
	path := filepath.Join(srv.Dir(), "fsx")
	of, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	ops := 20000
	if testing.Short() {
		ops = 4000
	}
	var cur fsx.File = fsx.OSFile{File: of}
	defer func() { cur.(fsx.OSFile).Close() }()
	start := time.Now()
	st, err := fsx.Run(ctx, cur, fsx.Config{Ops: ops, MaxSize: 1 << 20, MaxLen: 64 << 10, Seed: uint64(time.Now().UnixNano()),
		ReopenEvery: 2000, Reopen: func(old fsx.File) (fsx.File, error) {
			old.(fsx.OSFile).Close()
			nf, err := os.OpenFile(path, os.O_RDWR, 0)
			cur = fsx.OSFile{File: nf}
			return cur, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: %+v", time.Since(start), st)
}
