package llite_test

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/internal/clustertest"
)

// aclValue encodes a system.posix_acl_access value: entries of tag,
// permission bits and id (0xffffffff for the unnamed ones).
func aclValue(entries ...[3]uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
		b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
		b = binary.LittleEndian.AppendUint32(b, e[2])
	}
	return b
}

// TestAccessFollowsACLs: access(2) and chdir, which the kernel asks the
// mount about (no default_permissions), answer as the MDT decides, by
// the ACL too: nobody, whom only a named-user entry lets search root's
// 0700 directory and write root's 0600 file, may cd there and finds the
// file writable (test -w), and one whom a named entry denies what the
// other bits allow finds it not readable.
func TestAccessFollowsACLs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running as another user needs root")
	}
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	a := mountT(t, c, 0)
	const undef, nobody = 0xffffffff, 65534
	d := mkdir(t, filepath.Join(a.Dir(), "acl"), 0o700)
	f := filepath.Join(d, "f")
	if err := os.WriteFile(f, []byte("granted"), 0o600); err != nil {
		t.Fatal(err)
	}
	// user::rwx user:nobody:r-x group::--- mask::r-x other::---
	if err := unix.Setxattr(d, "system.posix_acl_access", aclValue([3]uint32{1, 7, undef}, [3]uint32{2, 5, nobody},
		[3]uint32{4, 0, undef}, [3]uint32{0x10, 5, undef}, [3]uint32{0x20, 0, undef}), 0); err != nil {
		t.Fatal(err)
	}
	// user::rw- user:nobody:rw- group::--- mask::rw- other::---
	if err := unix.Setxattr(f, "system.posix_acl_access", aclValue([3]uint32{1, 6, undef}, [3]uint32{2, 6, nobody},
		[3]uint32{4, 0, undef}, [3]uint32{0x10, 6, undef}, [3]uint32{0x20, 0, undef}), 0); err != nil {
		t.Fatal(err)
	}
	// A world-readable file that a named entry denies to nobody.
	g := filepath.Join(d, "g")
	if err := os.WriteFile(g, []byte("denied"), 0o644); err != nil {
		t.Fatal(err)
	}
	// user::rw- user:nobody:--- group::r-- mask::r-- other::r--
	if err := unix.Setxattr(g, "system.posix_acl_access", aclValue([3]uint32{1, 6, undef}, [3]uint32{2, 0, nobody},
		[3]uint32{4, 4, undef}, [3]uint32{0x10, 4, undef}, [3]uint32{0x20, 4, undef}), 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the write's lock callbacks
	if out, ok := asNobody(t, "cat", f); !ok || out != "granted" {
		t.Fatalf("nobody reads %s through the ACL: %q, ok %v", f, out, ok)
	}
	if out, ok := asNobody(t, "sh", "-c", "cd "+d+" && cat f"); !ok || out != "granted" {
		t.Errorf("nobody cds into the directory the ACL lets it search: %q, ok %v", out, ok)
	}
	if out, ok := asNobody(t, "sh", "-c", "test -w "+f+" && echo writable"); !ok || out != "writable" {
		t.Errorf("test -w of the file the ACL lets nobody write: %q, ok %v", out, ok)
	}
	if out, ok := asNobody(t, "sh", "-c", "test -r "+g+" || echo denied"); !ok || out != "denied" {
		t.Errorf("test -r of the file the ACL denies nobody: %q, ok %v", out, ok)
	}
	if out, ok := asNobody(t, "cat", g); ok {
		t.Errorf("nobody reads %s the ACL denies it: %q", g, out)
	}
}

// TestDefaultACLReplacesUmask: a new file, directory or fifo in a
// directory with a default ACL takes its permissions from the ACL and the
// mode asked for, the creator's umask left out (posix_acl_create); in a
// directory without one the umask applies.
func TestDefaultACLReplacesUmask(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	a := mountT(t, c, 0)
	const undef = 0xffffffff
	dacl := mkdir(t, filepath.Join(a.Dir(), "dacl"), 0o777)
	// default: user::rwx group::rwx other::r-x
	if err := unix.Setxattr(dacl, "system.posix_acl_default", aclValue([3]uint32{1, 7, undef}, [3]uint32{4, 7, undef},
		[3]uint32{0x20, 5, undef}), 0); err != nil {
		t.Fatal(err)
	}
	plain := mkdir(t, filepath.Join(a.Dir(), "plain"), 0o777)
	for _, tc := range []struct {
		dir                 string
		file, sub, fifo, ln os.FileMode
	}{
		{dacl, 0o664, 0o775, 0o664, 0o777},
		{plain, 0o600, 0o700, 0o600, 0o777},
	} {
		script := "umask 077 && cd " + tc.dir + " && touch f && mkdir sub && mkfifo p && ln -s f l"
		if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		for name, want := range map[string]os.FileMode{"f": tc.file, "sub": tc.sub, "p": tc.fifo, "l": tc.ln} {
			st, err := os.Lstat(filepath.Join(tc.dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Mode().Perm(); got != want {
				t.Errorf("%s made with umask 077 in %s: mode %#o, want %#o", name, filepath.Base(tc.dir), got, want)
			}
		}
	}
}
