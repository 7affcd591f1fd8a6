package llite_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/llite"
	"github.com/nacrefs/nacre/internal/clustertest"
)

// mountCfg mounts cfg on dir and unmounts it when the test ends.
func mountCfg(t *testing.T, c *clustertest.Cluster, dir string, cfg client.Config) (*llite.Server, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel}))
	srv, err := llite.Mount(ctx, dir, cfg, llite.Options{FSName: c.Source(), AllowOther: true, Logger: lg})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Unmount(ctx); err != nil {
			srv.UnmountLazy()
			srv.Wait()
		}
	})
	return srv, nil
}

// TestNoflock: on a noflock mount (Lustre's), fcntl and flock locks fail
// with ENOSYS, as the library's do, rather than being taken by the kernel
// for this client alone, where another client's conflicting lock is
// granted as well.
func TestNoflock(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, Clients: 2})
	var files [2]*os.File
	for i := range files {
		cfg := c.ClientConfig(i)
		cfg.Flock = false
		m, err := mountCfg(t, c, publicDir(t, "llite-noflock-"), cfg)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(m.Dir(), "locked")
		if i == 0 {
			if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	for i, f := range files {
		lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 0}
		wantErr(t, syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk), syscall.ENOSYS, "fcntl F_SETLK on noflock mount %d", i)
		wantErr(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), syscall.ENOSYS, "flock on noflock mount %d", i)
	}
	b := make([]byte, 4)
	if n, err := files[1].ReadAt(b, 0); err != nil || string(b[:n]) != "data" {
		t.Fatalf("read on the noflock mount: %q %v", b[:n], err)
	}
}

// TestMountTwiceOnOneDir: mounting the file system again on the directory
// it is mounted on fails (as mount.lustre refuses what mtab says is
// mounted) instead of stacking a second mount, which one umount would
// leave behind; the first mount goes on serving. Another directory takes
// a second mount, which sees the same files.
func TestMountTwiceOnOneDir(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, Clients: 3})
	dir := publicDir(t, "llite-twice-")
	a, err := mountCfg(t, c, dir, c.ClientConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := mountCfg(t, c, dir, c.ClientConfig(1)); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("second mount on %s: %v, want EBUSY", dir, err)
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	if n := strings.Count(string(mounts), " "+dir+" fuse.nacre "); n != 1 {
		t.Fatalf("%s mounted %d times:\n%s", dir, n, mounts)
	}
	if b, err := os.ReadFile(filepath.Join(a.Dir(), "f")); err != nil || string(b) != "first" {
		t.Fatalf("first mount after the refused one: %q %v", b, err)
	}
	b, err := mountCfg(t, c, publicDir(t, "llite-twice-"), c.ClientConfig(2))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(b.Dir(), "f")); err != nil || string(got) != "first" {
		t.Fatalf("second mount elsewhere reads %q %v", got, err)
	}
}

// TestLocalflock: a localflock mount keeps its locks in its kernel, as
// Lustre's localflock: they exclude the opens of this client (flock on two
// open files), and not another client's, whose own lock is granted too;
// fcntl locks work instead of ENOSYS.
func TestLocalflock(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, Clients: 2})
	var dirs [2]string
	for i := range dirs {
		cfg := c.ClientConfig(i)
		if _, err := cfg.ParseOptions("localflock"); err != nil {
			t.Fatal(err)
		}
		m, err := mountCfg(t, c, publicDir(t, "llite-localflock-"), cfg)
		if err != nil {
			t.Fatal(err)
		}
		dirs[i] = m.Dir()
	}
	p := filepath.Join(dirs[0], "locked")
	if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	open := func(p string) *os.File {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	a1, a2, b := open(p), open(p), open(filepath.Join(dirs[1], "locked"))
	if err := syscall.Flock(int(a1.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("flock on a localflock mount: %v", err)
	}
	wantErr(t, syscall.Flock(int(a2.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), syscall.EWOULDBLOCK, "second flock on the same localflock mount")
	if err := syscall.Flock(int(b.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("flock on the other client's localflock mount: %v (its locks are its own)", err)
	}
	lk := syscall.Flock_t{Type: syscall.F_RDLCK}
	if err := syscall.FcntlFlock(b.Fd(), syscall.F_SETLK, &lk); err != nil {
		t.Fatalf("fcntl F_SETLK on a localflock mount: %v", err)
	}
	buf := make([]byte, 4)
	if n, err := b.ReadAt(buf, 0); err != nil || string(buf[:n]) != "data" {
		t.Fatalf("read on the other localflock mount: %q %v", buf[:n], err)
	}
}
