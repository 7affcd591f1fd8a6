package llite_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/internal/clustertest"
)

const (
	fsImmutableFL = 0x10 // FS_IMMUTABLE_FL
	fsAppendFL    = 0x20 // FS_APPEND_FL
)

// getFlags reads p's inode flags with FS_IOC_GETFLAGS, as lsattr does.
func getFlags(t *testing.T, p string) uint32 {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("open %s: %v", p, err)
	}
	defer unix.Close(fd)
	v, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatalf("FS_IOC_GETFLAGS %s: %v", p, err)
	}
	return v
}

// chattr runs chattr(1) on p.
func chattr(t *testing.T, how, p string) {
	t.Helper()
	if out, err := exec.Command("chattr", how, p).CombinedOutput(); err != nil {
		t.Fatalf("chattr %s %s: %v: %s", how, p, err, out)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

// TestChattr: chattr +i and +a through the mount (FS_IOC_SETFLAGS, which
// the kernel hands to the mount as a FUSE ioctl) and their effects, on
// this mount and on a second client's: an immutable file refuses every
// change, root's too, and keeps its bytes; an append-only one takes
// writes with O_APPEND only; an append-only directory keeps its entries.
func TestChattr(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chattr +i needs CAP_LINUX_IMMUTABLE")
	}
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("no chattr(1)")
	}
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, Clients: 2})
	a := mountT(t, c, 0)
	b := mountT(t, c, 1)
	d := mkdir(t, filepath.Join(a.Dir(), "flags"), 0o777)
	bd := filepath.Join(b.Dir(), "flags")
	f := filepath.Join(d, "f")
	if err := os.WriteFile(f, []byte("hello"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(f, "user.a", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	chattr(t, "+i", f)
	t.Cleanup(func() { exec.Command("chattr", "-i", "-a", f).Run() })
	if fl := getFlags(t, f); fl&(fsImmutableFL|fsAppendFL) != fsImmutableFL {
		t.Fatalf("flags after chattr +i: %#x", fl)
	}
	if out, err := exec.Command("lsattr", f).Output(); err != nil || !strings.Contains(strings.Fields(string(out))[0], "i") {
		t.Fatalf("lsattr: %q, %v", out, err)
	}
	before := stat(t, f)
	for _, p := range []string{f, filepath.Join(bd, "f")} {
		if fl := getFlags(t, p); fl&fsImmutableFL == 0 {
			t.Fatalf("%s: flags %#x", p, fl)
		}
		dir := filepath.Dir(p)
		for _, tt := range []struct {
			name string
			op   func() error
		}{
			{"open O_WRONLY", func() error { return openClose(p, os.O_WRONLY) }},
			{"open O_WRONLY|O_APPEND", func() error { return openClose(p, os.O_WRONLY|os.O_APPEND) }},
			{"open O_RDWR", func() error { return openClose(p, os.O_RDWR) }},
			{"open O_WRONLY|O_TRUNC", func() error { return openClose(p, os.O_WRONLY|os.O_TRUNC) }},
			{"truncate", func() error { return os.Truncate(p, 0) }},
			{"chmod", func() error { return os.Chmod(p, 0o600) }},
			{"chown", func() error { return os.Chown(p, 0, 0) }},
			{"utimes", func() error { return os.Chtimes(p, time.Unix(1, 0), time.Unix(1, 0)) }},
			{"touch", func() error { return unix.UtimesNano(p, nil) }},
			{"setxattr", func() error { return unix.Setxattr(p, "user.a", []byte("2"), 0) }},
			{"removexattr", func() error { return unix.Removexattr(p, "user.a") }},
			{"unlink", func() error { return os.Remove(p) }},
			{"rename", func() error { return os.Rename(p, filepath.Join(dir, "g")) }},
			{"link", func() error { return os.Link(p, filepath.Join(dir, "h")) }},
			{"access W_OK", func() error { return unix.Access(p, unix.W_OK) }},
		} {
			wantErr(t, tt.op(), syscall.EPERM, "%s: %s of an immutable file", p, tt.name)
		}
		if got := readFile(t, p); got != "hello" {
			t.Fatalf("%s: %q after the refused changes, want %q", p, got, "hello")
		}
	}
	after := stat(t, f)
	if after.Size != 5 || after.Mode != before.Mode || after.Uid != before.Uid || after.Mtim != before.Mtim || after.Ctim != before.Ctim || after.Nlink != 1 {
		t.Fatalf("stat after the refused changes %+v, was %+v", after, before)
	}
	if v, err := unix.Getxattr(f, "user.a", make([]byte, 8)); err != nil || v != 1 {
		t.Fatalf("user.a after the refused changes: %d bytes, %v", v, err)
	}
	if names := ls(t, d); !slices.Equal(names, []string{"f"}) {
		t.Fatalf("entries %q", names)
	}

	// chattr -i +a: appends only.
	chattr(t, "-i", f)
	chattr(t, "+a", f)
	if fl := getFlags(t, filepath.Join(bd, "f")); fl&(fsImmutableFL|fsAppendFL) != fsAppendFL {
		t.Fatalf("the other client's flags after chattr -i +a: %#x", fl)
	}
	wantErr(t, openClose(f, os.O_WRONLY), syscall.EPERM, "open O_WRONLY of an append-only file")
	wantErr(t, openClose(f, os.O_WRONLY|os.O_APPEND|os.O_TRUNC), syscall.EPERM, "open O_APPEND|O_TRUNC of an append-only file")
	wantErr(t, os.Truncate(f, 1), syscall.EPERM, "truncate of an append-only file")
	wantErr(t, os.Remove(filepath.Join(bd, "f")), syscall.EPERM, "unlink of an append-only file from the other client")
	wantErr(t, os.Chmod(f, 0o600), syscall.EPERM, "chmod of an append-only file")
	if err := unix.Access(f, unix.W_OK); err != nil {
		t.Fatalf("access W_OK of an append-only file: %v (Linux allows it: O_APPEND opens may write)", err)
	}
	w, err := os.OpenFile(filepath.Join(bd, "f"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("open O_APPEND of an append-only file: %v", err)
	}
	if _, err := w.Write([]byte(", world")); err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, f); got != "hello, world" {
		t.Fatalf("after an append: %q", got)
	}
	if err := unix.UtimesNano(f, nil); err != nil {
		t.Fatalf("touch of an append-only file: %v", err)
	}

	// An append-only directory takes new entries and keeps them.
	ad := mkdir(t, filepath.Join(d, "log"), 0o777)
	chattr(t, "+a", ad)
	t.Cleanup(func() { exec.Command("chattr", "-a", ad).Run() })
	if err := os.WriteFile(filepath.Join(ad, "1"), []byte("one"), 0o644); err != nil {
		t.Fatalf("create in an append-only directory: %v", err)
	}
	wantErr(t, os.Remove(filepath.Join(ad, "1")), syscall.EPERM, "unlink in an append-only directory")
	wantErr(t, os.Rename(filepath.Join(ad, "1"), filepath.Join(d, "1")), syscall.EPERM, "rename out of an append-only directory")
	if names := ls(t, filepath.Join(bd, "log")); !slices.Equal(names, []string{"1"}) {
		t.Fatalf("entries of the append-only directory %q", names)
	}
	if got := readFile(t, filepath.Join(ad, "1")); got != "one" {
		t.Fatalf("the entry's data %q", got)
	}

	// Root clears the flags; everything is ordinary again.
	chattr(t, "-a", ad)
	chattr(t, "-a", f)
	if err := os.Truncate(f, 5); err != nil {
		t.Fatalf("truncate after chattr -a: %v", err)
	}
	if got := readFile(t, f); got != "hello" {
		t.Fatalf("after the truncate: %q", got)
	}
	if err := os.RemoveAll(d); err != nil {
		t.Fatalf("remove after chattr -a: %v", err)
	}
}

func openClose(p string, flags int) error {
	f, err := os.OpenFile(p, flags, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

func ls(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("readdir %s: %v", dir, err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestChattrDropsUnknownFlags: FS_IOC_SETFLAGS through the mount stores
// only the flags Nacre keeps (mdd.FlagsKept, Lustre's set): chattr +dA
// leaves the file with A alone, on this client and another, and no error;
// lsattr never shows a flag that nothing honours.
func TestChattrDropsUnknownFlags(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, Clients: 2})
	a, b := mountT(t, c, 0), mountT(t, c, 1)
	p := filepath.Join(a.Dir(), "f")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	const (
		nodump  = 0x00000040 // FS_NODUMP_FL, d
		noatime = 0x00000080 // FS_NOATIME_FL, A
		nocow   = 0x00800000 // FS_NOCOW_FL, C
	)
	fd, err := unix.Open(p, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, nodump|noatime|nocow)
	unix.Close(fd)
	if err != nil {
		t.Fatalf("FS_IOC_SETFLAGS d|A|C: %v", err)
	}
	if got := getFlags(t, p); got != noatime {
		t.Fatalf("flags after setting d|A|C: %#x, want %#x (A)", got, noatime)
	}
	if got := getFlags(t, filepath.Join(b.Dir(), "f")); got != noatime {
		t.Fatalf("flags on the other client: %#x, want %#x (A)", got, noatime)
	}
}
