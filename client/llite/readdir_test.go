package llite_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/mds/mdt"
)

// dirent is one linux_dirent64 getdents gave.
type dirent struct {
	name string
	off  int64 // d_off: the position after the entry (telldir)
}

// getdents reads the entries of fd from its position with buffers of
// size bytes, until the end or max entries (0: no bound).
func getdents(t *testing.T, fd int, size, max int) []dirent {
	t.Helper()
	var out []dirent
	buf := make([]byte, size)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatalf("getdents: %v", err)
		}
		if n == 0 {
			return out
		}
		for b := buf[:n]; len(b) > 0; {
			reclen := int(binary.NativeEndian.Uint16(b[16:]))
			name := b[19:reclen]
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			out = append(out, dirent{name: string(name), off: int64(binary.NativeEndian.Uint64(b[8:]))})
			b = b[reclen:]
		}
		if max > 0 && len(out) >= max {
			return out
		}
	}
}

// TestSeekdir: every position getdents gives (d_off, what telldir returns)
// is one lseek (seekdir) takes back, the one after the last entry
// included: reading from there gives exactly the entries after it, and
// nothing after the last. Lustre hands the kernel LL_DIR_END_OFF
// (0x7fffffffffffffff) for the end, never a negative offset, which lseek
// refuses (EINVAL) and seekdir ignores: a program going back to a saved
// end position read entries again.
func TestSeekdir(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, Clients: 2})
	a := mountT(t, c, 0)
	dir := mkdir(t, filepath.Join(a.Dir(), "seek"), 0o755)
	const n = 40
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("entry-%02d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	all := getdents(t, fd, 1<<16, 0)
	if len(all) != n+2 {
		t.Fatalf("getdents gave %d entries, want %d", len(all), n+2)
	}
	for i, e := range all {
		if e.off <= 0 {
			t.Fatalf("entry %d %q: d_off %#x, want a positive offset", i, e.name, uint64(e.off))
		}
	}
	for i, e := range all {
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			t.Fatalf("rewinddir: %v", err)
		}
		getdents(t, fd, 64, 1) // (somewhere else first)
		if _, err := unix.Seek(fd, e.off, 0); err != nil {
			t.Fatalf("seekdir to the position after entry %d %q (%#x): %v", i, e.name, uint64(e.off), err)
		}
		rest := getdents(t, fd, 1<<16, 0)
		if !slices.Equal(rest, all[i+1:]) {
			t.Fatalf("after seekdir past entry %d %q: %v, want %v", i, e.name, rest, all[i+1:])
		}
	}
}

// TestOpendirNeedsRead: opening a directory for reading (opendir, open
// O_RDONLY) needs read permission, as open(2) says: a user who may search
// a directory but not read it is refused at the open with EACCES, not
// given a handle that fails at the first getdents; one who may read it
// lists it.
func TestOpendirNeedsRead(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, Clients: 2})
	a := mountT(t, c, 0)
	closed := mkdir(t, filepath.Join(a.Dir(), "closed"), 0o711)
	open := mkdir(t, filepath.Join(a.Dir(), "open"), 0o755)
	for _, d := range []string{closed, open} {
		if err := os.WriteFile(filepath.Join(d, "f"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// As nobody: open(2) the directory, then list it.
	const script = `use Fcntl; sysopen(my $fh, $ARGV[0], O_RDONLY|O_DIRECTORY) or die "open: $!\n"; close $fh;
opendir(my $d, $ARGV[0]) or die "opendir: $!\n"; my @n = sort grep { !/^\.\.?$/ } readdir($d);
print "listed: @n\n"`
	run := func(dir string) string {
		cmd := exec.Command("perl", "-e", script, dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		out, _ := cmd.CombinedOutput()
		return strings.TrimSpace(string(out))
	}
	if got := run(closed); got != "open: Permission denied" {
		t.Fatalf("nobody opening a 0711 directory of root's: %q, want open: Permission denied", got)
	}
	if got := run(open); got != "listed: f" {
		t.Fatalf("nobody listing a 0755 directory of root's: %q, want listed: f", got)
	}
}

// TestDirHandleOutlivesCredentials: read permission on a directory is
// checked when it is opened, as Linux does, not on every page the handle
// reads: a descriptor root opened on its 0700 directory reads the whole
// directory (more than one READDIR page) from a thread that dropped to
// nobody afterwards, rewound to the start included; an open by nobody is
// still refused. The MDT checked every page with the getdents caller's
// credentials, and the second page failed with EACCES.
func TestDirHandleOutlivesCredentials(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, Clients: 1})
	a := mountT(t, c, 0)
	dir := mkdir(t, filepath.Join(a.Dir(), "private"), 0o700)
	const n = mdt.DefaultReaddirEntries + 200 // two pages and more
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("e%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(dir) // as root
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())

	type result struct {
		first, again int
		openErr      error
		err          error
	}
	res := make(chan result, 1)
	go func() {
		// This thread alone becomes nobody (raw system calls: Go's
		// wrappers change every thread), and dies with the goroutine,
		// never unlocked.
		runtime.LockOSThread()
		var r result
		defer func() { res <- r }()
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			r.err = fmt.Errorf("setgroups: %v", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, 65534, 65534, 65534); e != 0 {
			r.err = fmt.Errorf("setresgid: %v", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 65534, 65534, 65534); e != 0 {
			r.err = fmt.Errorf("setresuid: %v", e)
			return
		}
		count := func() (int, error) {
			buf := make([]byte, 1<<15)
			total := 0
			for {
				m, err := unix.Getdents(fd, buf)
				if err != nil {
					return total, fmt.Errorf("getdents after %d entries: %w", total, err)
				}
				if m == 0 {
					return total, nil
				}
				for b := buf[:m]; len(b) > 0; b = b[binary.NativeEndian.Uint16(b[16:]):] {
					total++
				}
			}
		}
		if r.first, r.err = count(); r.err != nil {
			return
		}
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			r.err = fmt.Errorf("rewind: %w", err)
			return
		}
		if r.again, r.err = count(); r.err != nil {
			return
		}
		fd2, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err == nil {
			unix.Close(fd2)
		}
		r.openErr = err
	}()
	r := <-res
	if r.err != nil {
		t.Fatalf("reading root's descriptor as nobody: %v", r.err)
	}
	if r.first != n+2 || r.again != n+2 {
		t.Fatalf("nobody read %d entries, then %d after rewinding; want %d", r.first, r.again, n+2)
	}
	if !errors.Is(r.openErr, syscall.EACCES) {
		t.Fatalf("nobody opening root's 0700 directory: %v, want EACCES", r.openErr)
	}
}
