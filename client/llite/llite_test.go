package llite_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/llite"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
)

// helperEnv, when set, makes the test binary run the POSIX suite as a
// child (unprivileged) instead of the tests.
const helperEnv = "NACRE_LLITE_HELPER"

type helperSpec struct {
	Dir      string // where to run the suite (the child's own directory)
	RootFile string // root's 0644 file
	RootDir  string // root's 0755 directory
	Secret   string // a 0644 file in root's 0700 directory, which root just read
	Secret2  string // the same, in a directory root just chmodded 0700
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(runHelper(spec))
	}
	clustertest.Main(m)
}

// publicDir makes a directory every user can reach (t.TempDir's are
// 0700 and under a 0700 parent).
func publicDir(t *testing.T, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

var logLevel = func() slog.Level {
	if os.Getenv("NACRE_LLITE_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}()

// mountT mounts the cluster as client i and unmounts it when the test
// ends.
func mountT(t *testing.T, c *clustertest.Cluster, i int) *llite.Server {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("these tests need FUSE: %v", err)
	}
	dir := publicDir(t, fmt.Sprintf("llite-mnt%d-", i))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel})).With("client", i)
	srv, err := llite.Mount(ctx, dir, c.ClientConfig(i), llite.Options{FSName: c.Source(), AllowOther: true, Logger: lg,
		Debug: os.Getenv("NACRE_LLITE_DEBUG") == "fuse"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Unmount(ctx); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
			srv.UnmountLazy()
			srv.Wait()
		}
	})
	return srv
}

func mkdir(t *testing.T, p string, mode os.FileMode) string {
	t.Helper()
	if err := os.Mkdir(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLlite runs everything on one file system with two mounts (two
// clients): the POSIX suite as root and as nobody, striped data checked
// byte by byte, coherence between the mounts (data, appends, locks,
// names), and the mount's own behaviour.
func TestLlite(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 4, Clients: 5})
	a := mountT(t, c, 0)
	b := mountT(t, c, 1)

	t.Run("mounts", func(t *testing.T) {
		mounts, err := os.ReadFile("/proc/self/mounts")
		if err != nil {
			t.Fatal(err)
		}
		want := c.Source() + " " + a.Dir() + " fuse.nacre "
		if !strings.Contains(string(mounts), want) {
			t.Fatalf("/proc/self/mounts lacks %q:\n%s", want, mounts)
		}
		// The kernel's readahead window: raised from its 128 KiB to a
		// full RPC (root can write sysfs; others keep the default).
		wantKB := 4096
		if os.Geteuid() != 0 {
			wantKB = 128
		}
		if kb, err := llite.KernelReadAheadKB(a.Dir()); err != nil || kb != wantKB {
			t.Errorf("kernel readahead of %s: %d KiB, %v; want %d", a.Dir(), kb, err, wantKB)
		}
	})
	t.Run("posix/root", func(t *testing.T) {
		base := mkdir(t, filepath.Join(a.Dir(), "root"), 0o755)
		for _, pc := range posixSuite {
			t.Run(pc.name, func(t *testing.T) {
				pc.fn(t, mkdir(t, filepath.Join(base, pc.name), 0o755))
			})
		}
	})
	t.Run("posix/nobody", func(t *testing.T) { testNobody(t, a) })
	t.Run("striped", func(t *testing.T) { testStriped(t, a, b) })
	t.Run("coherence", func(t *testing.T) { testCoherence(t, a, b) })
	t.Run("append", func(t *testing.T) { testAppend(t, a, b) })
	t.Run("locks", func(t *testing.T) { testLocks(t, a, b) })
	t.Run("names", func(t *testing.T) { testNames(t, a, b) })
	t.Run("negative", func(t *testing.T) { testNegative(t, a, b) })
	t.Run("namesets", func(t *testing.T) { testNameSets(t, a, b) })
	t.Run("newfilecaps", func(t *testing.T) { testNewFileCaps(t, a, b) })
	t.Run("statahead", func(t *testing.T) { testStatAhead(t, a, b) })
	t.Run("unmount", func(t *testing.T) { testUnmount(t, c) })
	t.Run("readonly", func(t *testing.T) { testReadOnly(t, c, a) })
}

// testReadOnly: a read-only mount reads and refuses every change.
func testReadOnly(t *testing.T, c *clustertest.Cluster, a *llite.Server) {
	if err := os.WriteFile(filepath.Join(a.Dir(), "ro-file"), []byte("ro"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := c.ClientConfig(4)
	cfg.ReadOnly = true
	dir := publicDir(t, "llite-ro-")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel})).With("client", 4)
	m, err := llite.Mount(ctx, dir, cfg, llite.Options{FSName: c.Source(), Logger: lg, Kernel: []string{"noexec", "nosuid", "sync", "dirsync", "default_permissions"}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmount(ctx)
	p := filepath.Join(dir, "ro-file")
	if b, err := os.ReadFile(p); err != nil || string(b) != "ro" {
		t.Fatalf("read: %q %v", b, err)
	}
	wantErr(t, os.WriteFile(p, nil, 0o644), syscall.EROFS, "write on a read-only mount")
	wantErr(t, os.Mkdir(filepath.Join(dir, "d"), 0o755), syscall.EROFS, "mkdir on a read-only mount")
	wantErr(t, os.Remove(p), syscall.EROFS, "unlink on a read-only mount")
	wantErr(t, syscall.Access(p, 2), syscall.EROFS, "access W_OK on a read-only mount")
	mounts, _ := os.ReadFile("/proc/self/mounts")
	if !strings.Contains(string(mounts), " "+dir+" fuse.nacre ro,sync,dirsync,nosuid,nodev,noexec,") {
		t.Fatalf("not mounted ro:\n%s", mounts)
	}
}

// testUnmount: what was written reaches the servers by the unmount; a
// busy mount refuses to unmount, and a lazy unmount ends it once its last
// file closes.
func testUnmount(t *testing.T, c *clustertest.Cluster) {
	m := mountT(t, c, 2)
	data := bytes.Repeat([]byte("unmount "), 300000)
	if err := os.WriteFile(filepath.Join(m.Dir(), "written"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(m.Dir(), "written"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Unmount(ctx); err == nil {
		t.Fatal("unmount with a file open succeeded")
	}
	if err := m.UnmountLazy(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Done():
		t.Fatal("lazily unmounted mount ended with a file open")
	case <-time.After(100 * time.Millisecond):
	}
	if b, err := io.ReadAll(f); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("read after lazy unmount: %d bytes %v", len(b), err)
	}
	f.Close()
	select {
	case <-m.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("lazily unmounted mount still serving 30s after its last close")
	}
	if err := m.Wait(); err != nil {
		t.Fatalf("close after unmount: %v", err)
	}
	// The data is there for a new mount.
	m2 := mountT(t, c, 3)
	if b, err := os.ReadFile(filepath.Join(m2.Dir(), "written")); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("after remount: %d bytes %v", len(b), err)
	}
}

// testNobody runs the POSIX suite as uid 65534 in a child process (the
// test binary again), in a directory it owns, then checks what it may not
// do to root's files.
func testNobody(t *testing.T, a *llite.Server) {
	if os.Geteuid() != 0 {
		t.Skip("running as another user needs root")
	}
	base := mkdir(t, filepath.Join(a.Dir(), "nobody"), 0o755)
	own := mkdir(t, filepath.Join(base, "own"), 0o755)
	if err := os.Chown(own, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	rootDir := mkdir(t, filepath.Join(base, "rootdir"), 0o755)
	rootFile := filepath.Join(rootDir, "file")
	if err := os.WriteFile(rootFile, []byte("root's"), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(mkdir(t, filepath.Join(base, "secret"), 0o700), "file")
	if err := os.WriteFile(secret, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // for the write's lock callbacks to settle
	for range 2 {
		if b, err := os.ReadFile(secret); err != nil || string(b) != "secret" {
			t.Fatalf("root reads %s: %q %v", secret, b, err)
		}
	}
	// And one that was open to all until root closed it just now.
	secret2 := filepath.Join(mkdir(t, filepath.Join(base, "closed"), 0o755), "file")
	if err := os.WriteFile(secret2, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.ReadFile(secret2); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(secret2), 0o700); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the entry invalidation is asynchronous
	spec, _ := json.Marshal(helperSpec{Dir: own, RootFile: rootFile, RootDir: rootDir, Secret: secret, Secret2: secret2})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helperBinary(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unprivileged suite: %v\n%s", err, out)
	}
	t.Logf("unprivileged suite:\n%s", out)
	// What it made is its own.
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(own, "file", "f"), &st); err != nil || st.Uid != 65534 || st.Gid != 65534 {
		t.Fatalf("owner of nobody's file: %d:%d %v", st.Uid, st.Gid, err)
	}
	if b, err := os.ReadFile(rootFile); err != nil || string(b) != "root's" {
		t.Fatalf("root's file after the suite: %q %v", b, err)
	}
}

// helperBinary copies the test binary where nobody may run it.
func helperBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := publicDir(t, "llite-helper-")
	dst := filepath.Join(dir, "llite.test")
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// childT is a tester for the child: failures go to stderr; Fatalf ends
// the case's goroutine.
type childT struct {
	name   string
	failed atomic.Bool
}

func (c *childT) Helper() {}

func (c *childT) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL %s: %s\n", c.name, fmt.Sprintf(format, args...))
	c.failed.Store(true)
}

func (c *childT) Fatalf(format string, args ...any) {
	c.Errorf(format, args...)
	runtime.Goexit()
}

func runHelper(s string) int {
	var spec helperSpec
	if err := json.Unmarshal([]byte(s), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	// perm first: it relies on what the kernel cached of root's walks just
	// before (see testNobody).
	cases := append([]posixCase{{"perm", func(t tester, _ string) { casePerm(t, spec) }}}, posixSuite...)
	failed := false
	for _, pc := range cases {
		ct := &childT{name: pc.name}
		done := make(chan struct{})
		go func() {
			defer close(done)
			dir := filepath.Join(spec.Dir, pc.name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				ct.Fatalf("mkdir: %v", err)
			}
			pc.fn(ct, dir)
		}()
		<-done
		if ct.failed.Load() {
			failed = true
		} else {
			fmt.Printf("ok   %s (uid %d)\n", pc.name, os.Getuid())
		}
	}
	if failed {
		return 1
	}
	return 0
}

// casePerm: an unprivileged user may read root's 0644 file but not write,
// cut, chmod, rename or remove it, nor create in root's 0755 directory.
func casePerm(t tester, spec helperSpec) {
	if os.Getuid() == 0 {
		t.Fatalf("perm runs unprivileged only")
	}
	if b, err := os.ReadFile(spec.RootFile); err != nil || string(b) != "root's" {
		t.Fatalf("read of root's file: %q %v", b, err)
	}
	_, err := os.OpenFile(spec.RootFile, os.O_WRONLY, 0)
	wantErr(t, err, syscall.EACCES, "open of root's 0644 file for writing")
	_, err = os.OpenFile(spec.RootFile, os.O_WRONLY|os.O_TRUNC, 0)
	wantErr(t, err, syscall.EACCES, "open O_TRUNC of root's file")
	wantErr(t, os.Truncate(spec.RootFile, 0), syscall.EACCES, "truncate of root's file")
	wantErr(t, os.Chmod(spec.RootFile, 0o666), syscall.EPERM, "chmod of root's file")
	wantErr(t, os.Remove(spec.RootFile), syscall.EACCES, "unlink in root's dir")
	wantErr(t, os.Rename(spec.RootFile, spec.RootFile+".x"), syscall.EACCES, "rename in root's dir")
	wantErr(t, os.WriteFile(filepath.Join(spec.RootDir, "mine"), nil, 0o644), syscall.EACCES, "create in root's dir")
	wantErr(t, os.Mkdir(filepath.Join(spec.RootDir, "mine"), 0o755), syscall.EACCES, "mkdir in root's dir")
	err = syscall.Setxattr(spec.RootFile, "user.x", []byte("y"), 0)
	if !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EPERM) {
		t.Fatalf("setxattr on root's file: %v", err)
	}
	wantErr(t, syscall.Access(spec.RootFile, 2), syscall.EACCES, "access W_OK of root's file")
	// The kernel has root's walk to the secret file cached: it must not
	// let this user through the directory it may not search.
	for range 2 {
		for _, p := range []string{spec.Secret, spec.Secret2} {
			_, err = os.ReadFile(p)
			wantErr(t, err, syscall.EACCES, "read of %s, in root's 0700 directory", p)
			_, err = os.Stat(p)
			wantErr(t, err, syscall.EACCES, "stat of %s, in root's 0700 directory", p)
		}
	}
	_, err = os.ReadDir(filepath.Dir(spec.Secret))
	wantErr(t, err, syscall.EACCES, "readdir of root's 0700 directory")
	if err := syscall.Access(spec.RootFile, 4); err != nil {
		t.Fatalf("access R_OK of root's file: %v", err)
	}
}

// testStriped writes a file striped over the 4 OSTs through the mount at
// random offsets, cuts and extends it and appends to it, checking it byte
// by byte against a local copy, from both mounts.
func testStriped(t *testing.T, a, b *llite.Server) {
	mkdir(t, filepath.Join(a.Dir(), "striped"), 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fsys := a.FS()
	cred := client.Root()
	d, err := fsys.Lookup(ctx, cred, fsys.Root(), "striped")
	if err != nil {
		t.Fatal(err)
	}
	lay := layout.Plain(layout.RAID0{StripeCount: 4, StripeSize: 64 << 10, StripeOffset: -1})
	f, _, err := fsys.Create(ctx, cred, d.FID, "f", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	if l := f.Layout(); l == nil || l.Components[0].StripeCount != 4 {
		t.Fatalf("layout %v", l)
	}
	f.Close(ctx)

	p := filepath.Join(a.Dir(), "striped", "f")
	w, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ap, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ap.Close()
	rng := rand.New(rand.NewPCG(7, 11))
	var want []byte
	fill := func(n int) []byte {
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		return buf
	}
	const span = 3 << 20
	for i := range 150 {
		switch k := rng.IntN(10); {
		case k < 7:
			off := rng.IntN(span)
			buf := fill(rng.IntN(300<<10) + 1)
			if _, err := w.WriteAt(buf, int64(off)); err != nil {
				t.Fatalf("op %d: pwrite at %d: %v", i, off, err)
			}
			if end := off + len(buf); end > len(want) {
				want = append(want, make([]byte, end-len(want))...)
			}
			copy(want[off:], buf)
		case k < 8:
			size := rng.IntN(span)
			if err := w.Truncate(int64(size)); err != nil {
				t.Fatalf("op %d: ftruncate to %d: %v", i, size, err)
			}
			if size < len(want) {
				want = want[:size]
			} else {
				want = append(want, make([]byte, size-len(want))...)
			}
		case k < 9:
			buf := fill(rng.IntN(100<<10) + 1)
			if _, err := ap.Write(buf); err != nil {
				t.Fatalf("op %d: append: %v", i, err)
			}
			want = append(want, buf...)
		default:
			off := rng.IntN(len(want) + 1)
			got := make([]byte, rng.IntN(200<<10)+1)
			n, err := w.ReadAt(got, int64(off))
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("op %d: pread at %d: %v", i, off, err)
			}
			if wantN := min(len(got), len(want)-off); n != wantN || !bytes.Equal(got[:n], want[off:off+n]) {
				t.Fatalf("op %d: pread at %d: %d bytes, want %d; equal %v", i, off, n, wantN, bytes.Equal(got[:n], want[off:off+wantN]))
			}
		}
	}
	check := func(dir string) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, "striped", "f"), &st); err != nil || st.Size != int64(len(want)) {
			t.Fatalf("%s: size %d %v, want %d", dir, st.Size, err, len(want))
		}
		got, err := os.ReadFile(filepath.Join(dir, "striped", "f"))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: read %d bytes, want %d", dir, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: byte %d is %#x, want %#x", dir, i, got[i], want[i])
			}
		}
	}
	check(a.Dir())
	check(b.Dir())
	// Writes on b are seen on a, whose handle is still open.
	bw, err := os.OpenFile(filepath.Join(b.Dir(), "striped", "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := fill(200 << 10)
	if _, err := bw.WriteAt(buf, 100000); err != nil {
		t.Fatal(err)
	}
	bw.Close()
	copy(want[100000:], buf)
	check(a.Dir())
}

// testCoherence: a write through one mount is read through the other at
// once, also by a handle that had read (and cached) the old data.
func testCoherence(t *testing.T, a, b *llite.Server) {
	pa, pb := filepath.Join(a.Dir(), "coh"), filepath.Join(b.Dir(), "coh")
	old := bytes.Repeat([]byte("o"), 300<<10)
	if err := os.WriteFile(pa, old, 0o644); err != nil {
		t.Fatal(err)
	}
	rb, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	wa, err := os.OpenFile(pa, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wa.Close()
	got := make([]byte, len(old))
	for round := range 20 {
		if n, err := rb.ReadAt(got, 0); n != len(old) {
			t.Fatalf("round %d: read on b: %d %v", round, n, err)
		}
		mark := []byte(fmt.Sprintf("<round %d>", round))
		off := int64(round * 10007)
		if _, err := wa.WriteAt(mark, off); err != nil {
			t.Fatal(err)
		}
		copy(old[off:], mark)
		if n, err := rb.ReadAt(got, 0); n != len(old) || !bytes.Equal(got, old) {
			i := 0
			for i < n && got[i] == old[i] {
				i++
			}
			t.Fatalf("round %d: b reads stale data at %d after a's write (%d bytes, %v)", round, i, n, err)
		}
	}
	// A truncate on a is seen on b: size and data.
	if err := wa.Truncate(1000); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(rb.Fd()), &st); err != nil || st.Size != 1000 {
		t.Fatalf("size on b after truncate on a: %d %v", st.Size, err)
	}
	if n, _ := rb.ReadAt(got, 0); n != 1000 || !bytes.Equal(got[:n], old[:1000]) {
		t.Fatalf("read on b after truncate on a: %d bytes", n)
	}
	// And b's write is read on a.
	if err := os.WriteFile(pb, []byte("from b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(pa); err != nil || string(b) != "from b" {
		t.Fatalf("a reads %q %v", b, err)
	}
}

// testAppend: both mounts append 100-byte records at once; every record
// lands exactly once and the size is exact.
func testAppend(t *testing.T, a, b *llite.Server) {
	const perMount, rec = 200, 100
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, dir := range []string{a.Dir(), b.Dir()} {
		wg.Go(func() {
			f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			for k := range perMount {
				r := fmt.Sprintf("mount %d record %04d ", i, k)
				r += strings.Repeat(".", rec-len(r)-1) + "\n"
				if n, err := f.Write([]byte(r)); err != nil || n != rec {
					errs <- fmt.Errorf("mount %d record %d: %d %v", i, k, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, dir := range []string{a.Dir(), b.Dir()} {
		data, err := os.ReadFile(filepath.Join(dir, "log"))
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != 2*perMount*rec {
			t.Fatalf("%s: log of %d bytes, want %d", dir, len(data), 2*perMount*rec)
		}
		seen := map[string]int{}
		for off := 0; off < len(data); off += rec {
			r := string(data[off : off+rec])
			var m, k int
			if _, err := fmt.Sscanf(r, "mount %d record %d ", &m, &k); err != nil || !strings.HasSuffix(r, ".\n") {
				t.Fatalf("%s: torn record at %d: %q", dir, off, r)
			}
			seen[fmt.Sprintf("%d/%d", m, k)]++
		}
		if len(seen) != 2*perMount {
			t.Fatalf("%s: %d distinct records, want %d", dir, len(seen), 2*perMount)
		}
	}
}

// testLocks: fcntl locks through one mount exclude the other's, F_GETLK
// names the holder, close drops a process's locks, flock() excludes too.
func testLocks(t *testing.T, a, b *llite.Server) {
	for _, name := range []string{"locked", "flocked"} {
		if err := os.WriteFile(filepath.Join(a.Dir(), name), make([]byte, 1000), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	openName := func(s *llite.Server, name string) *os.File {
		f, err := os.OpenFile(filepath.Join(s.Dir(), name), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	open := func(s *llite.Server) *os.File { return openName(s, "locked") }
	fa, fb := open(a), open(b)
	setlk := func(f *os.File, typ int16, start, n int64) error {
		lk := syscall.Flock_t{Type: typ, Whence: io.SeekStart, Start: start, Len: n}
		return syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk)
	}
	if err := setlk(fa, syscall.F_WRLCK, 0, 100); err != nil {
		t.Fatal(err)
	}
	if err := setlk(fb, syscall.F_WRLCK, 50, 10); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("F_SETLK on b over a's lock: %v", err)
	}
	if err := setlk(fb, syscall.F_RDLCK, 90, 20); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("read lock on b over a's write lock: %v", err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: 0, Len: 10}
	if err := syscall.FcntlFlock(fb.Fd(), syscall.F_GETLK, &lk); err != nil {
		t.Fatal(err)
	}
	if lk.Type != syscall.F_WRLCK || lk.Start != 0 || lk.Len != 100 || lk.Pid != int32(os.Getpid()) {
		t.Fatalf("F_GETLK on b: %+v, want a's write lock [0,100) of pid %d", lk, os.Getpid())
	}
	if err := setlk(fb, syscall.F_WRLCK, 200, 100); err != nil {
		t.Fatalf("a lock beside a's: %v", err)
	}
	if err := setlk(fa, syscall.F_UNLCK, 0, 100); err != nil {
		t.Fatal(err)
	}
	if err := setlk(fb, syscall.F_WRLCK, 50, 10); err != nil {
		t.Fatalf("F_SETLK on b after a unlocked: %v", err)
	}
	// A lock to the end of the file.
	if err := setlk(fa, syscall.F_RDLCK, 500, 0); err != nil {
		t.Fatal(err)
	}
	lk = syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: 1 << 40, Len: 1}
	if err := syscall.FcntlFlock(fb.Fd(), syscall.F_GETLK, &lk); err != nil || lk.Type != syscall.F_RDLCK || lk.Start != 500 || lk.Len != 0 {
		t.Fatalf("F_GETLK of a lock to EOF: %+v %v", lk, err)
	}
	// Closing any descriptor of the file drops the process's locks.
	fa2 := open(a)
	fa2.Close()
	if err := setlk(fb, syscall.F_WRLCK, 600, 10); err != nil {
		t.Fatalf("lock after a's close: %v", err)
	}
	// F_SETLKW waits for the holder on the other mount.
	fa = open(a)
	if err := setlk(fb, syscall.F_WRLCK, 700, 10); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	// setlkw takes a write lock on [start, start+1) of f with F_SETLKW
	// in the background, its result to got.
	setlkw := func(f *os.File, start int64) {
		go func() {
			lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: start, Len: 1}
			for {
				err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLKW, &lk)
				if !errors.Is(err, syscall.EINTR) {
					got <- err
					return
				}
			}
		}()
	}
	// granted waits for the lock setlkw asked for.
	granted := func() {
		t.Helper()
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("F_SETLKW after b unlocked: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("F_SETLKW still waiting 10s after b unlocked")
		}
	}
	setlkw(fa, 705)
	select {
	case err := <-got:
		t.Fatalf("F_SETLKW on a did not wait for b's lock: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := setlk(fb, syscall.F_UNLCK, 700, 10); err != nil {
		t.Fatal(err)
	}
	granted()
	if err := setlk(fb, syscall.F_WRLCK, 705, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("b over the lock a waited for: %v", err)
	}
	// A lock granted after another descriptor of the file was closed
	// during the wait still goes at the next close (the close dropped
	// what the process held then, not what it was waiting for).
	if err := setlk(fa, syscall.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := setlk(fb, syscall.F_WRLCK, 800, 10); err != nil {
		t.Fatal(err)
	}
	fa3 := open(a)
	setlkw(fa3, 805)
	time.Sleep(200 * time.Millisecond) // a waits
	fa4 := open(a)
	fa4.Close()
	if err := setlk(fb, syscall.F_UNLCK, 800, 10); err != nil {
		t.Fatal(err)
	}
	granted()
	fa3.Close()
	if err := setlk(fb, syscall.F_WRLCK, 805, 1); err != nil {
		t.Fatalf("b over the lock a held until its close: %v", err)
	}

	// flock() locks are whole-file locks, across mounts too, dropped at
	// the last close (released asynchronously: poll).
	ga, gb := openName(a, "flocked"), openName(b, "flocked")
	if err := syscall.Flock(int(ga.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(gb.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock on b while a holds it: %v", err)
	}
	ga.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Flock(int(gb.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			t.Fatalf("flock on b after a's close: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testNames: names changed through one mount change in the other (the
// kernel's entries there go when the library's locks are called back;
// that is asynchronous, so poll briefly).
// within fails t unless cond holds within d (what the other mount does
// reaches this one's kernel through notifications, which run apart from
// the changes).
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// testNameSets: two mounts make files in one directory at once, each
// looking up its next name and one the other mount makes later first (so
// both keep name sets and negative entries there); every file is then seen
// by both, with its bytes.
func testNameSets(t *testing.T, a, b *llite.Server) {
	mkdir(t, filepath.Join(a.Dir(), "sets"), 0o755)
	const n = 60
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, m := range []struct {
		s          *llite.Server
		mine, them string
	}{{a, "a", "b"}, {b, "b", "a"}} {
		wg.Go(func() {
			p := func(s string, i int) string { return filepath.Join(m.s.Dir(), "sets", fmt.Sprint(s, i)) }
			for i := range n {
				os.Stat(p(m.them, i+1)) // most often missing yet
				if _, err := os.Stat(p(m.mine, i)); !errors.Is(err, syscall.ENOENT) {
					errs <- fmt.Errorf("stat of %s before making it: %v", p(m.mine, i), err)
					return
				}
				if err := os.WriteFile(p(m.mine, i), []byte(p(m.mine, i)), 0o644); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, s := range []*llite.Server{a, b} {
		for _, who := range []string{"a", "b"} {
			for i := range n {
				p := filepath.Join(s.Dir(), "sets", fmt.Sprint(who, i))
				want := filepath.Join(map[string]*llite.Server{"a": a, "b": b}[who].Dir(), "sets", fmt.Sprint(who, i))
				within(t, 5*time.Second, "a file the other mount made", func() bool {
					d, err := os.ReadFile(p)
					return err == nil && string(d) == want
				})
			}
		}
	}
}

// testStatAhead: `ls -l` of a directory another mount filled: the
// entries of each page are looked up ahead of the kernel's READDIRPLUS
// lookups, and every entry is listed with its right attributes.
func testStatAhead(t *testing.T, a, b *llite.Server) {
	const n = 150
	mkdir(t, filepath.Join(b.Dir(), "sa"), 0o755)
	for i := range n {
		if err := os.WriteFile(filepath.Join(b.Dir(), "sa", fmt.Sprint("f", i)), bytes.Repeat([]byte{'x'}, i), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	before, gBefore := a.StatAheads(), a.GlimpsesAhead()
	out, err := exec.Command("ls", "-ln", filepath.Join(a.Dir(), "sa")).CombinedOutput()
	if err != nil {
		t.Fatalf("ls -l: %v: %s", err, out)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.HasPrefix(f[8], "f") {
			continue
		}
		i, err := strconv.Atoi(f[8][1:])
		if err != nil || f[0] != "-rw-r-----" || f[4] != strconv.Itoa(i) {
			t.Fatalf("ls -l line %q: want -rw-r----- and size %d", line, i)
		}
		seen++
	}
	if seen != n {
		t.Fatalf("ls -l listed %d of %d files:\n%s", seen, n, out)
	}
	if ahead := a.StatAheads() - before; ahead < n/2 {
		t.Errorf("%d of %d entries looked up ahead", ahead, n)
	}
	// b keeps its write locks: no glimpse of a's can be granted as a lock,
	// so the glimpses ahead stop after a probe (TestAGLWriterGone has the
	// case they help).
	if ahead := a.GlimpsesAhead() - gBefore; ahead > 16 {
		t.Errorf("%d of %d files glimpsed ahead though b holds their write locks", ahead, n)
	}
	// A plain ls stats nothing: no glimpses ahead.
	gBefore = a.GlimpsesAhead()
	if out, err := exec.Command("ls", "-f", filepath.Join(a.Dir(), "sa")).CombinedOutput(); err != nil {
		t.Fatalf("ls: %v: %s", err, out)
	}
	if g := a.GlimpsesAhead() - gBefore; g != 0 {
		t.Errorf("a plain ls glimpsed %d files ahead", g)
	}
}

// testNewFileCaps: a file a mount made has no file capabilities, which the
// kernel reads before the first write to it: the mount answers without an
// RPC. A file made elsewhere is asked about, and a capability set on it
// is seen.
func testNewFileCaps(t *testing.T, a, b *llite.Server) {
	dir := mkdir(t, filepath.Join(a.Dir(), "caps"), 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fidOf := func(s *llite.Server, name string) client.FID {
		t.Helper()
		d, err := s.FS().Lookup(ctx, client.Root(), s.FS().Root(), "caps")
		if err != nil {
			t.Fatal(err)
		}
		f, err := s.FS().Lookup(ctx, client.Root(), d.FID, name)
		if err != nil {
			t.Fatal(err)
		}
		return f.FID
	}
	f, err := os.OpenFile(filepath.Join(dir, "mine"), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// (Before the first write, which would ask.)
	if !a.KnownNoCap(fidOf(a, "mine")) {
		t.Error("a file the mount made is not known to have no capabilities")
	}
	if _, err := f.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// b makes one and gives it a capability (CAP_NET_RAW, effective).
	capv := []byte{1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	other := filepath.Join(b.Dir(), "caps", "theirs")
	if err := os.WriteFile(other, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(other, "security.capability", capv, 0); err != nil {
		t.Fatalf("setxattr security.capability: %v", err)
	}
	if a.KnownNoCap(fidOf(a, "theirs")) {
		t.Error("a file another mount made is taken to have no capabilities")
	}
	got := make([]byte, 64)
	n, err := unix.Getxattr(filepath.Join(dir, "theirs"), "security.capability", got)
	if err != nil || !bytes.Equal(got[:n], capv) {
		t.Fatalf("security.capability of the other mount's file: %x %v, want %x", got[:n], err, capv)
	}
	if _, err := unix.Getxattr(filepath.Join(dir, "mine"), "security.capability", got); !errors.Is(err, unix.ENODATA) {
		t.Fatalf("security.capability of a new file: %v, want ENODATA", err)
	}
}

// testNegative: a name looked up missing stays known missing (to the
// library and, as a negative entry, to the kernel) only until a name is
// made in its directory, by the other mount or by this one.
func testNegative(t *testing.T, a, b *llite.Server) {
	mkdir(t, filepath.Join(a.Dir(), "neg"), 0o755)
	pa := func(s string) string { return filepath.Join(a.Dir(), "neg", s) }
	pb := func(s string) string { return filepath.Join(b.Dir(), "neg", s) }
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := a.FS().Lookup(ctx, client.Root(), a.FS().Root(), "neg")
	if err != nil {
		t.Fatal(err)
	}
	missing := func(p string) bool { _, err := os.Stat(p); return errors.Is(err, syscall.ENOENT) }
	eventually := func(what string, cond func() bool) { t.Helper(); within(t, 5*time.Second, what, cond) }
	for range 3 {
		if !missing(pa("ghost")) {
			t.Fatal("stat of a missing name does not fail with ENOENT")
		}
	}
	if !a.FS().NegativeCached(dir.FID, "ghost") {
		t.Fatal("a name looked up missing is not known missing")
	}
	// b makes it: a sees it (the kernel's negative entry went with the
	// directory lock), file and directory alike.
	if err := os.WriteFile(pb("ghost"), []byte("boo"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually("a sees the file b made", func() bool { d, err := os.ReadFile(pa("ghost")); return err == nil && string(d) == "boo" })
	if !missing(pa("spook")) {
		t.Fatal("stat of spook")
	}
	if err := os.Mkdir(pb("spook"), 0o755); err != nil {
		t.Fatal(err)
	}
	eventually("a sees the directory b made", func() bool { st, err := os.Stat(pa("spook")); return err == nil && st.IsDir() })
	// Gone and back again.
	if err := os.Remove(pb("ghost")); err != nil {
		t.Fatal(err)
	}
	eventually("a sees ghost unlinked", func() bool { return missing(pa("ghost")) })
	if err := os.WriteFile(pb("ghost"), []byte("again"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually("a sees ghost made again", func() bool { d, err := os.ReadFile(pa("ghost")); return err == nil && string(d) == "again" })
	// a makes a name it found missing itself.
	if !missing(pa("mine")) {
		t.Fatal("stat of mine")
	}
	if err := os.WriteFile(pa("mine"), []byte("m"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := os.ReadFile(pa("mine")); err != nil || string(d) != "m" {
		t.Fatalf("a reads the file it made over its missing name: %q %v", d, err)
	}
	eventually("b sees mine", func() bool { d, err := os.ReadFile(pb("mine")); return err == nil && string(d) == "m" })
	// a's exclusive create of a name it found missing loses to b's: the
	// kernel must not keep its negative entry.
	for i := range 20 {
		name := fmt.Sprint("race", i)
		if !missing(pa(name)) {
			t.Fatalf("stat of %s", name)
		}
		if err := os.WriteFile(pb(name), []byte("b"), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(pa(name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			f.Close()
			t.Fatalf("a's O_EXCL create of %s, which b made, succeeded", name)
		}
		eventually("a sees "+name, func() bool { d, err := os.ReadFile(pa(name)); return err == nil && string(d) == "b" })
	}
}

func testNames(t *testing.T, a, b *llite.Server) {
	pa := func(s string) string { return filepath.Join(a.Dir(), "names", s) }
	pb := func(s string) string { return filepath.Join(b.Dir(), "names", s) }
	mkdir(t, filepath.Join(a.Dir(), "names"), 0o755)
	for _, n := range []string{"x", "y"} {
		if err := os.WriteFile(pa(n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"x", "y"} {
		if _, err := os.Stat(pb(n)); err != nil {
			t.Fatal(err)
		}
	}
	eventually := func(what string, cond func() bool) { t.Helper(); within(t, 5*time.Second, what, cond) }
	if err := os.Remove(pa("x")); err != nil {
		t.Fatal(err)
	}
	eventually("b sees x unlinked", func() bool { _, err := os.Stat(pb("x")); return errors.Is(err, syscall.ENOENT) })
	if err := os.Rename(pa("y"), pa("z")); err != nil {
		t.Fatal(err)
	}
	eventually("b sees y renamed", func() bool { _, err := os.Stat(pb("y")); return errors.Is(err, syscall.ENOENT) })
	if b, err := os.ReadFile(pb("z")); err != nil || string(b) != "y" {
		t.Fatalf("b reads z: %q %v", b, err)
	}
	// A name b moved itself is still followed.
	if err := os.Rename(pb("z"), pb("w")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(pa("w")); err != nil {
		t.Fatal(err)
	}
	eventually("b sees its renamed w unlinked", func() bool { _, err := os.Stat(pb("w")); return errors.Is(err, syscall.ENOENT) })
	if err := os.Chmod(filepath.Join(a.Dir(), "names"), 0o700); err != nil {
		t.Fatal(err)
	}
	eventually("b sees the chmod", func() bool {
		var st syscall.Stat_t
		return syscall.Stat(filepath.Join(b.Dir(), "names"), &st) == nil && st.Mode&0o777 == 0o700
	})
	// Something new made on a is found on b right away (no negative
	// entries are cached).
	if err := os.Mkdir(pa("new"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pb("new")); err != nil {
		t.Fatalf("b after a's mkdir: %v", err)
	}
	// Entries a's creates made, which its kernel caches under the opens'
	// locks, follow b's renames and unlinks: a finds the new names and
	// not the old, and a name b reused leads a to the new file.
	if err := os.Chmod(filepath.Join(a.Dir(), "names"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"c1", "c2", "c3"} {
		if err := os.WriteFile(pa(n), []byte("a's "+n), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(pa(n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(pb("c1"), pb("c1-moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(pb("c2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(pb("c3")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pb("c3"), []byte("b's c3"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually("a sees c1 renamed", func() bool { _, err := os.Stat(pa("c1")); return errors.Is(err, syscall.ENOENT) })
	if got, err := os.ReadFile(pa("c1-moved")); err != nil || string(got) != "a's c1" {
		t.Fatalf("a reads c1-moved: %q %v", got, err)
	}
	eventually("a sees c2 unlinked", func() bool { _, err := os.Stat(pa("c2")); return errors.Is(err, syscall.ENOENT) })
	eventually("a finds b's c3", func() bool { got, err := os.ReadFile(pa("c3")); return err == nil && string(got) == "b's c3" })
}
