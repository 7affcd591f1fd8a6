package client_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/internal/clustertest"
)

// TestReadDirPermission: the library's stateless ReadDir needs read
// permission on the directory at every call, as the MDT's READDIR checks
// none; OpenDir checks it once, and the Dir it returns reads on after a
// chmod takes it away, as a Linux directory descriptor does.
func TestReadDirPermission(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	fs := c.Mount(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root, user := client.Root(), client.Cred{UID: 1000, GID: 1000}
	d, err := fs.Mkdir(ctx, root, fs.Root(), "private", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Mkdir(ctx, root, d.FID, "sub", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fs.ReadDir(ctx, user, d.FID, 0, 0); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("ReadDir without read permission: %v, want EACCES", err)
	}
	if _, err := fs.OpenDir(ctx, user, d.FID); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("OpenDir without read permission: %v, want EACCES", err)
	}
	f, _, err := fs.Create(ctx, root, fs.Root(), "file", syscall.O_RDWR|syscall.O_CREAT, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.Close(ctx)
	if _, err := fs.OpenDir(ctx, root, f.FID()); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("OpenDir of a file: %v, want ENOTDIR", err)
	}
	dir, err := fs.OpenDir(ctx, root, d.FID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Setattr(ctx, root, d.FID, client.SetAttr{Valid: mdc.AttrMode, Mode: 0}); err != nil {
		t.Fatal(err)
	}
	ents, _, err := dir.ReadDir(ctx, 0, 0)
	if err != nil || len(ents) != 3 {
		t.Fatalf("the open Dir after chmod 0: %v %v", ents, err)
	}
}
