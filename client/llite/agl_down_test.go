package llite_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/llite"
	"github.com/nacrefs/nacre/internal/clustertest"
)

// mountTimeout is mountT with the library's operation timeout set.
func mountTimeout(t *testing.T, c *clustertest.Cluster, i int, timeout time.Duration) *llite.Server {
	t.Helper()
	dir := publicDir(t, fmt.Sprintf("llite-mnt%d-", i))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := c.ClientConfig(i)
	cfg.Timeout = timeout
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel})).With("client", i)
	srv, err := llite.Mount(ctx, dir, cfg, llite.Options{FSName: c.Source(), AllowOther: true, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		select {
		case <-srv.Done():
			return // (unmounted by the test; the library's close may have failed with the OSS down)
		default:
		}
		if err := srv.Unmount(ctx); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
			srv.UnmountLazy()
			srv.Wait()
		}
	})
	return srv
}

// aglDownDir makes dir d on a with n files, the first two in page order
// without objects (their GETATTRs need no OST), and returns the names in
// page order.
func aglDownDir(t *testing.T, a *llite.Server, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fsys, cred := a.FS(), client.Root()
	d, err := fsys.Mkdir(ctx, cred, fsys.Root(), "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		f, _, err := fsys.Create(ctx, cred, d.FID, fmt.Sprint("f", i), syscall.O_WRONLY|syscall.O_CREAT, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.Close(ctx)
	}
	dh, err := os.Open(filepath.Join(a.Dir(), "d"))
	if err != nil {
		t.Fatal(err)
	}
	names, err := dh.Readdirnames(-1)
	dh.Close()
	if err != nil || len(names) != n {
		t.Fatalf("readdir: %d names, %v", len(names), err)
	}
	for _, name := range names[:2] {
		if err := fsys.Unlink(ctx, cred, d.FID, name); err != nil {
			t.Fatal(err)
		}
		f, _, err := fsys.Create(ctx, cred, d.FID, name, syscall.O_WRONLY|syscall.O_CREAT, 0o644, &client.CreateOptions{Delay: true})
		if err != nil {
			t.Fatal(err)
		}
		f.Close(ctx)
	}
	return names
}

// TestAGLOSTDown: with the OSS down, GETATTRs of the first two files of a
// page (no objects) start the glimpses ahead, which wait for the OSS; the
// directory closed, they must end at once (their context ends) and give
// their tokens back, and the mount unmount as fast as it did before AGL
// (LNet holds the ones already sent until the library's close ends them:
// the unmount waits for them only a moment).
func TestAGLOSTDown(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, ChildOSS: true, Clients: 3})
	a := mountTimeout(t, c, 0, 5*time.Second)
	names := aglDownDir(t, a, 20)
	c.KillOSS()
	defer c.StartOSS()

	dir := filepath.Join(a.Dir(), "d")
	dh, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dh.Readdirnames(-1); err != nil {
		t.Fatal(err)
	}
	for _, name := range names[:2] {
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("stat %s (no objects): %v", name, err)
		}
	}
	time.Sleep(time.Second)
	t.Logf("workers ahead with the OSS down: %d", a.WorkersAhead())
	for _, i := range a.FS().OSTs() {
		o, _ := a.FS().OSC(i)
		t.Logf("OST%d import state %v", i, o.Import().State())
	}
	dh.Close()
	closed := time.Now()
	for a.WorkersAhead() > 0 && time.Since(closed) < 2*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("2s after the directory was closed: %d workers ahead left", a.WorkersAhead())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	err = a.Unmount(ctx)
	took := time.Since(start)
	t.Logf("unmount with the OSS down: %v after %v", err, took)
	// Before AGL: 35 s, the library's close giving up on the OSS; with
	// the glimpses ahead waited for, 48 s and more.
	if took > 45*time.Second {
		t.Errorf("unmount with the OSS down took %v (35 s before AGL)", took)
	}
}
