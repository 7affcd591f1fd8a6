package llite_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/internal/clustertest"
)

// asNobody runs cmd args as uid and gid 65534 and returns its output and
// whether it succeeded.
func asNobody(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err == nil
}

// TestKernelEntriesFollowSearchPermission: the kernel's entries in a
// directory not everyone may search are not cached, whichever way they
// got there: a rename into it from a public directory (the kernel moves
// the entry it had), a chmod here that takes search from the group only,
// a create in one whose group may not search, or a chmod on another
// mount.
func TestKernelEntriesFollowSearchPermission(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running as another user needs root")
	}
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, Clients: 2})
	a := mountT(t, c, 0)
	b := mountT(t, c, 1)
	denied := func(t *testing.T, p, what string) {
		t.Helper()
		if out, ok := asNobody(t, "cat", p); ok || !strings.Contains(out, "Permission denied") {
			t.Errorf("%s: nobody reads %s: %q, ok %v; want Permission denied", what, p, out, ok)
		}
	}
	write := func(p string) {
		t.Helper()
		if err := os.WriteFile(p, []byte("secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the write's lock callbacks
		for range 2 {
			if _, err := os.ReadFile(p); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("rename", func(t *testing.T) {
		pub := mkdir(t, filepath.Join(a.Dir(), "pub"), 0o755)
		priv := mkdir(t, filepath.Join(a.Dir(), "priv"), 0o700)
		write(filepath.Join(pub, "f"))
		if err := os.Rename(filepath.Join(pub, "f"), filepath.Join(priv, "f")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // (invalidations are asynchronous)
		denied(t, filepath.Join(priv, "f"), "after a rename into root's 0700 directory")
	})
	t.Run("chmod-group", func(t *testing.T) {
		d := mkdir(t, filepath.Join(a.Dir(), "grp"), 0o755)
		if err := os.Chown(d, 0, 65534); err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(d, "f"))
		if err := os.Chmod(d, 0o705); err != nil { // the group (nobody's) may not search
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		denied(t, filepath.Join(d, "f"), "after a chmod 0705 of a directory of nobody's group")
	})
	t.Run("create-in-group-denied", func(t *testing.T) {
		// A file created in a directory whose group (nobody's) may not
		// search, where others may: its new entry is not cached either.
		d := mkdir(t, filepath.Join(a.Dir(), "grp-create"), 0o755)
		if err := os.Chown(d, 0, 65534); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o705); err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(d, "f"))
		denied(t, filepath.Join(d, "f"), "a file created in a 0705 directory of nobody's group")
	})
	t.Run("chmod-other-mount", func(t *testing.T) {
		d := mkdir(t, filepath.Join(a.Dir(), "other"), 0o755)
		write(filepath.Join(d, "f"))
		if err := os.Chmod(filepath.Join(b.Dir(), "other"), 0o700); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		denied(t, filepath.Join(d, "f"), "after another mount's chmod 0700")
	})
}

// TestOtherMountNames: namespace changes on b are seen on a, whose
// kernel had the entries and attributes cached.
func TestOtherMountNames(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, Clients: 2})
	a := mountT(t, c, 0)
	b := mountT(t, c, 1)
	pa := func(s ...string) string { return filepath.Join(append([]string{a.Dir()}, s...)...) }
	pb := func(s ...string) string { return filepath.Join(append([]string{b.Dir()}, s...)...) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	eventually := func(what string, cond func() bool) { t.Helper(); within(t, 2*time.Second, what, cond) }
	gone := func(p string) bool { _, err := os.Lstat(p); return errors.Is(err, syscall.ENOENT) }
	statAll := func(ps ...string) {
		t.Helper()
		for range 2 {
			for _, p := range ps {
				os.Lstat(p)
			}
		}
	}
	must(os.Mkdir(pa("d1"), 0o755))
	must(os.Mkdir(pa("d2"), 0o755))
	must(os.Mkdir(pa("d1", "sub"), 0o755))
	must(os.WriteFile(pa("d1", "f"), []byte("f"), 0o644))
	must(os.Link(pa("d1", "f"), pa("d2", "g")))
	must(os.Symlink("target1", pa("d1", "sl")))
	statAll(pb("d1"), pb("d2"), pb("d1", "sub"), pb("d1", "f"), pb("d2", "g"), pb("d1", "sl"), pb("d1", "new"), pb("d2", "f"))

	// Cross-directory rename on a.
	must(os.Rename(pa("d1", "f"), pa("d2", "f")))
	eventually("b sees d1/f gone", func() bool { return gone(pb("d1", "f")) })
	eventually("b sees d2/f", func() bool { d, err := os.ReadFile(pb("d2", "f")); return err == nil && string(d) == "f" })
	// Hard links: one name removed, the other stays with nlink 1 ...
	must(os.Remove(pa("d2", "f")))
	eventually("b sees d2/f gone", func() bool { return gone(pb("d2", "f")) })
	eventually("b sees g's nlink 1", func() bool {
		var st syscall.Stat_t
		return syscall.Stat(pb("d2", "g"), &st) == nil && st.Nlink == 1
	})
	// A directory removed and a file made under its name.
	must(os.Remove(pa("d1", "sub")))
	must(os.WriteFile(pa("d1", "sub"), []byte("file"), 0o600))
	eventually("b sees sub a file", func() bool {
		st, err := os.Lstat(pb("d1", "sub"))
		return err == nil && st.Mode().IsRegular() && st.Mode().Perm() == 0o600
	})
	// A symlink replaced by another (rename over it).
	must(os.Symlink("target2", pa("d1", "sl2")))
	must(os.Rename(pa("d1", "sl2"), pa("d1", "sl")))
	eventually("b reads the new link", func() bool { s, err := os.Readlink(pb("d1", "sl")); return err == nil && s == "target2" })
	// A directory's attributes.
	must(os.Chmod(pa("d2"), 0o711))
	must(os.Chown(pa("d2"), 12, 34))
	eventually("b sees d2's mode and owner", func() bool {
		var st syscall.Stat_t
		return syscall.Stat(pb("d2"), &st) == nil && st.Mode&0o777 == 0o711 && st.Uid == 12 && st.Gid == 34
	})
	// A symlink's owner.
	must(os.Lchown(pa("d1", "sl"), 56, 78))
	eventually("b sees sl's owner", func() bool {
		var st syscall.Stat_t
		return syscall.Lstat(pb("d1", "sl"), &st) == nil && st.Uid == 56 && st.Gid == 78
	})
	// Rename of a directory across directories.
	must(os.Mkdir(pa("d1", "m"), 0o755))
	must(os.WriteFile(pa("d1", "m", "in"), []byte("in"), 0o644))
	statAll(pb("d1", "m"), pb("d1", "m", "in"), pb("d2", "m"))
	must(os.Rename(pa("d1", "m"), pa("d2", "m")))
	eventually("b sees d1/m gone", func() bool { return gone(pb("d1", "m")) })
	eventually("b reads d2/m/in", func() bool { d, err := os.ReadFile(pb("d2", "m", "in")); return err == nil && string(d) == "in" })
	// Exchange.
	must(os.WriteFile(pa("d1", "x"), []byte("x"), 0o644))
	must(os.Mkdir(pa("d2", "y"), 0o755))
	statAll(pb("d1", "x"), pb("d2", "y"))
	must(unix.Renameat2(unix.AT_FDCWD, pa("d1", "x"), unix.AT_FDCWD, pa("d2", "y"), unix.RENAME_EXCHANGE))
	eventually("b sees the exchange", func() bool {
		sx, err1 := os.Lstat(pb("d1", "x"))
		sy, err2 := os.Lstat(pb("d2", "y"))
		return err1 == nil && err2 == nil && sx.IsDir() && sy.Mode().IsRegular()
	})
	// Data and xattrs.
	must(os.WriteFile(pa("d1", "data"), []byte("one"), 0o644))
	must(unix.Setxattr(pa("d1", "data"), "security.test", []byte("v1"), 0))
	for range 2 {
		os.ReadFile(pb("d1", "data"))
		unix.Getxattr(pb("d1", "data"), "security.test", make([]byte, 16))
	}
	must(os.WriteFile(pa("d1", "data"), []byte("two"), 0o644))
	must(unix.Setxattr(pa("d1", "data"), "security.test", []byte("v2"), 0))
	if d, err := os.ReadFile(pb("d1", "data")); err != nil || string(d) != "two" {
		t.Errorf("b reads %q %v", d, err)
	}
	eventually("b sees the xattr", func() bool {
		buf := make([]byte, 16)
		n, err := unix.Getxattr(pb("d1", "data"), "security.test", buf)
		return err == nil && string(buf[:n]) == "v2"
	})
}

// TestMadeNamesLeaveNoNegatives: a name the mount makes after a lookup
// found it missing replaces the kernel's negative entry (no invalidation
// comes for it): it must not stay counted against maxKernelNegatives, or
// after that many names made no missing name is cached by the kernel
// again.
func TestMadeNamesLeaveNoNegatives(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, Clients: 1})
	a := mountT(t, c, 0)
	d := mkdir(t, filepath.Join(a.Dir(), "d"), 0o755)
	var st syscall.Stat_t
	if err := syscall.Stat(d, &st); err != nil {
		t.Fatal(err)
	}
	p := func(s string) string { return filepath.Join(d, s) }
	for _, mk := range []struct {
		name string
		fn   func(string) error
	}{
		{"create", func(s string) error { return os.WriteFile(s, nil, 0o644) }},
		{"mkdir", func(s string) error { return os.Mkdir(s, 0o755) }},
		{"mknod", func(s string) error { return syscall.Mknod(s, syscall.S_IFIFO|0o644, 0) }},
		{"symlink", func(s string) error { return os.Symlink("x", s) }},
		{"link", func(s string) error { return os.Link(p("create"), s) }},
		{"rename", func(s string) error { return os.Rename(p("mkdir"), s) }},
	} {
		os.Stat(d) // (the directory's attributes, which the last change dropped)
		for range 2 {
			if _, err := os.Lstat(p(mk.name)); !errors.Is(err, syscall.ENOENT) {
				t.Fatalf("stat of missing %s: %v", mk.name, err)
			}
		}
		if !a.KernelNegative(st.Ino, mk.name) {
			t.Fatalf("missing %s is not given to the kernel as a negative entry", mk.name)
		}
		if err := mk.fn(p(mk.name)); err != nil {
			t.Fatalf("%s: %v", mk.name, err)
		}
		if a.KernelNegative(st.Ino, mk.name) {
			t.Errorf("%s: the name made is still counted as a negative entry of the kernel's", mk.name)
		}
	}
}
