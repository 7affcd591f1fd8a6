package llite_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// tester is what the POSIX cases need of a test: a *testing.T in the
// test process, a childT in the unprivileged child.
type tester interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
}

// posixCase is one case of the POSIX suite, run in a fresh directory of
// the mount as root and as an unprivileged user.
type posixCase struct {
	name string
	fn   func(t tester, dir string)
}

var posixSuite = []posixCase{
	{"file", caseFile},
	{"dirs", caseDirs},
	{"rename", caseRename},
	{"links", caseLinks},
	{"attrs", caseAttrs},
	{"readdir", caseReaddir},
	{"xattr", caseXattr},
	{"special", caseSpecial},
	{"unlink-open", caseUnlinkOpen},
	{"flock", caseFlock},
	{"statfs", caseStatfs},
	{"fallocate", caseFallocate},
	{"tmpfile", caseTmpfile},
}

func ok(t tester, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}

// wantErr checks that err is errno.
func wantErr(t tester, err error, errno syscall.Errno, what string, args ...any) {
	t.Helper()
	if !errors.Is(err, errno) {
		t.Fatalf("%s: got %v, want %v", fmt.Sprintf(what, args...), err, errno)
	}
}

func stat(t tester, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	ok(t, syscall.Lstat(p, &st), "lstat %s", p)
	return &st
}

func caseFile(t tester, dir string) {
	p := filepath.Join(dir, "f")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	ok(t, err, "create")
	_, err = f.Write([]byte("hello, world"))
	ok(t, err, "write")
	ok(t, f.Sync(), "fsync")
	st := stat(t, p)
	if st.Size != 12 || st.Mode != syscall.S_IFREG|0o640 || st.Uid != uint32(os.Getuid()) || st.Gid != uint32(os.Getgid()) || st.Nlink != 1 {
		t.Fatalf("stat after write: %+v", st)
	}
	_, err = f.WriteAt([]byte("W"), 7)
	ok(t, err, "pwrite")
	buf := make([]byte, 64)
	n, err := f.ReadAt(buf, 0)
	if n != 12 || string(buf[:n]) != "hello, World" {
		t.Fatalf("pread: %q %v", buf[:n], err)
	}
	ok(t, f.Truncate(5), "ftruncate")
	ok(t, f.Close(), "close")
	if b, err := os.ReadFile(p); err != nil || string(b) != "hello" {
		t.Fatalf("after ftruncate: %q %v", b, err)
	}
	ok(t, os.Truncate(p, 8), "truncate")
	if b, err := os.ReadFile(p); err != nil || string(b) != "hello\x00\x00\x00" {
		t.Fatalf("after truncate up: %q %v", b, err)
	}

	_, err = os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	wantErr(t, err, syscall.EEXIST, "O_EXCL on an existing file")
	_, err = os.Open(filepath.Join(dir, "missing"))
	wantErr(t, err, syscall.ENOENT, "open of a missing file")

	// O_APPEND goes to the end whatever the offset.
	a, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	ok(t, err, "open O_APPEND")
	_, err = a.Write([]byte("++"))
	ok(t, err, "append")
	ok(t, a.Close(), "close")
	if b, err := os.ReadFile(p); err != nil || string(b) != "hello\x00\x00\x00++" {
		t.Fatalf("after append: %q %v", b, err)
	}
	// O_TRUNC empties.
	tr, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	ok(t, err, "open O_TRUNC")
	ok(t, tr.Close(), "close")
	if st := stat(t, p); st.Size != 0 {
		t.Fatalf("size after O_TRUNC: %d", st.Size)
	}
	// O_CREAT|O_TRUNC of an existing file empties it too.
	ok(t, os.WriteFile(p, []byte("again"), 0o640), "write file")
	ok(t, os.WriteFile(p, []byte("xy"), 0o640), "rewrite file")
	if b, err := os.ReadFile(p); err != nil || string(b) != "xy" {
		t.Fatalf("after O_CREAT|O_TRUNC: %q %v", b, err)
	}
	// A write to a file opened read-only fails.
	r, err := os.Open(p)
	ok(t, err, "open")
	_, err = r.Write([]byte("x"))
	wantErr(t, err, syscall.EBADF, "write to a read-only open")
	r.Close()
	ok(t, syscall.Access(p, unix.R_OK|unix.W_OK), "access rw")
	wantErr(t, syscall.Access(p, unix.X_OK), syscall.EACCES, "access x of a 0640 file")
}

// caseFallocate: blocks reserved keeping the size and growing it, a hole
// punched at odd offsets, through the kernel's page cache of the file;
// the modes Lustre lacks are EOPNOTSUPP.
func caseFallocate(t tester, dir string) {
	p := filepath.Join(dir, "falloc")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	ok(t, err, "create")
	defer f.Close()
	fd := int(f.Fd())
	model := make([]byte, 100_000)
	for i := range model {
		model[i] = byte(i*7 + i>>9)
	}
	_, err = f.Write(model)
	ok(t, err, "write")
	ok(t, f.Sync(), "fsync")
	blocks0 := stat(t, p).Blocks

	ok(t, unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, int64(len(model)), 1<<20), "fallocate KEEP_SIZE")
	if st := stat(t, p); st.Size != int64(len(model)) || st.Blocks < blocks0+(1<<20)/512 {
		t.Fatalf("after fallocate KEEP_SIZE of 1 MiB past the end: size %d blocks %d (were %d)", st.Size, st.Blocks, blocks0)
	}
	ok(t, unix.Fallocate(fd, 0, 50_000, 100_003), "fallocate")
	model = append(model, make([]byte, 150_003-len(model))...)
	if st := stat(t, p); st.Size != int64(len(model)) {
		t.Fatalf("after fallocate to 150003: size %d", st.Size)
	}
	// Read first, so the kernel caches pages the punch must drop.
	got := make([]byte, len(model)+10)
	n, _ := f.ReadAt(got, 0)
	if !bytes.Equal(got[:n], model) {
		t.Fatalf("after fallocate: %d bytes differ from the model", n)
	}
	ok(t, unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 10_003, 60_001), "punch")
	clear(model[10_003:70_004])
	n, _ = f.ReadAt(got, 0)
	if !bytes.Equal(got[:n], model) {
		t.Fatalf("after the punch: %d bytes differ from the model", n)
	}
	if st := stat(t, p); st.Size != int64(len(model)) {
		t.Fatalf("size %d after the punch", st.Size)
	}
	wantErr(t, unix.Fallocate(fd, unix.FALLOC_FL_ZERO_RANGE, 0, 10), syscall.EOPNOTSUPP, "fallocate ZERO_RANGE")
	wantErr(t, unix.Fallocate(fd, unix.FALLOC_FL_COLLAPSE_RANGE, 0, 4096), syscall.EOPNOTSUPP, "fallocate COLLAPSE_RANGE")
	ok(t, f.Close(), "close")
	if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, model) {
		t.Fatalf("reread after close: %d bytes, %v (equal %v)", len(b), err, bytes.Equal(b, model))
	}
	r, err := os.Open(p)
	ok(t, err, "open")
	wantErr(t, unix.Fallocate(int(r.Fd()), 0, 0, 10), syscall.EBADF, "fallocate of a read-only open")
	r.Close()
}

func caseDirs(t tester, dir string) {
	d := filepath.Join(dir, "d")
	ok(t, os.Mkdir(d, 0o750), "mkdir")
	if st := stat(t, d); st.Mode != syscall.S_IFDIR|0o750 || st.Uid != uint32(os.Getuid()) {
		t.Fatalf("stat of new dir: %+v", st)
	}
	wantErr(t, os.Mkdir(d, 0o750), syscall.EEXIST, "mkdir of an existing dir")
	f := filepath.Join(d, "f")
	ok(t, os.WriteFile(f, nil, 0o644), "create in dir")
	wantErr(t, syscall.Rmdir(d), syscall.ENOTEMPTY, "rmdir of a full dir")
	wantErr(t, syscall.Rmdir(f), syscall.ENOTDIR, "rmdir of a file")
	wantErr(t, syscall.Unlink(d), syscall.EISDIR, "unlink of a dir")
	_, err := os.Stat(filepath.Join(f, "x"))
	wantErr(t, err, syscall.ENOTDIR, "lookup through a file")
	wantErr(t, os.Mkdir(filepath.Join(d, "nope", "x"), 0o755), syscall.ENOENT, "mkdir under a missing dir")
	long := strings.Repeat("n", 256)
	_, err = os.Create(filepath.Join(d, long))
	wantErr(t, err, syscall.ENAMETOOLONG, "create of a 256-byte name")
	_, err = os.Stat(filepath.Join(d, long))
	wantErr(t, err, syscall.ENAMETOOLONG, "lookup of a 256-byte name")
	ok(t, os.WriteFile(filepath.Join(d, strings.Repeat("m", 255)), nil, 0o644), "create of a 255-byte name")
	ok(t, os.Remove(filepath.Join(d, strings.Repeat("m", 255))), "unlink of a 255-byte name")
	wantErr(t, syscall.Unlink(filepath.Join(d, "missing")), syscall.ENOENT, "unlink of a missing name")
	ok(t, os.Remove(f), "unlink")
	ok(t, syscall.Rmdir(d), "rmdir")
	_, err = os.Stat(d)
	wantErr(t, err, syscall.ENOENT, "stat after rmdir")
	ok(t, os.MkdirAll(filepath.Join(dir, "a", "b", "c"), 0o755), "mkdir -p")
	ok(t, os.RemoveAll(filepath.Join(dir, "a")), "rm -r")
}

func caseRename(t tester, dir string) {
	p := func(s string) string { return filepath.Join(dir, s) }
	ok(t, os.WriteFile(p("a"), []byte("A"), 0o644), "create a")
	ok(t, os.WriteFile(p("b"), []byte("B"), 0o644), "create b")
	ok(t, os.Rename(p("a"), p("c")), "rename a c")
	if _, err := os.Stat(p("a")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("a after rename: %v", err)
	}
	if b, err := os.ReadFile(p("c")); err != nil || string(b) != "A" {
		t.Fatalf("c after rename: %q %v", b, err)
	}
	wantErr(t, unix.Renameat2(unix.AT_FDCWD, p("c"), unix.AT_FDCWD, p("b"), unix.RENAME_NOREPLACE), syscall.EEXIST, "RENAME_NOREPLACE over b")
	ok(t, unix.Renameat2(unix.AT_FDCWD, p("c"), unix.AT_FDCWD, p("b"), unix.RENAME_EXCHANGE), "RENAME_EXCHANGE")
	if b, _ := os.ReadFile(p("b")); string(b) != "A" {
		t.Fatalf("b after exchange: %q", b)
	}
	if b, _ := os.ReadFile(p("c")); string(b) != "B" {
		t.Fatalf("c after exchange: %q", b)
	}
	ok(t, os.Rename(p("c"), p("b")), "rename over an existing file")
	if b, _ := os.ReadFile(p("b")); string(b) != "B" {
		t.Fatalf("b after rename over it: %q", b)
	}
	ok(t, unix.Renameat2(unix.AT_FDCWD, p("b"), unix.AT_FDCWD, p("e"), unix.RENAME_NOREPLACE), "RENAME_NOREPLACE to a free name")
	wantErr(t, os.Rename(p("missing"), p("x")), syscall.ENOENT, "rename of a missing name")

	ok(t, os.MkdirAll(p("d1/sub"), 0o755), "mkdir d1/sub")
	wantErr(t, os.Rename(p("d1"), p("d1/sub/in")), syscall.EINVAL, "rename of a dir into its own subtree")
	ok(t, os.Mkdir(p("d2"), 0o755), "mkdir d2")
	ok(t, os.WriteFile(p("d2/f"), nil, 0o644), "create d2/f")
	// (syscall.Rename: os.Rename answers EEXIST itself for a directory
	// target.)
	err := syscall.Rename(p("d1"), p("d2"))
	if !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("rename of a dir over a full dir: %v", err)
	}
	wantErr(t, syscall.Rename(p("e"), p("d2")), syscall.EISDIR, "rename of a file over a dir")
	wantErr(t, syscall.Rename(p("d1"), p("e")), syscall.ENOTDIR, "rename of a dir over a file")
	ok(t, os.Rename(p("d1"), p("d2/d1")), "rename of a dir into another")
	if _, err := os.Stat(p("d2/d1/sub")); err != nil {
		t.Fatalf("moved subtree: %v", err)
	}
	ok(t, os.Rename(p("e"), p("d2/d1/sub/e")), "rename of a file into a moved dir")
	if b, err := os.ReadFile(p("d2/d1/sub/e")); err != nil || string(b) != "B" {
		t.Fatalf("file moved: %q %v", b, err)
	}
}

func caseLinks(t tester, dir string) {
	p := func(s string) string { return filepath.Join(dir, s) }
	ok(t, os.WriteFile(p("f"), []byte("data"), 0o644), "create")
	ok(t, os.Link(p("f"), p("g")), "link")
	sf, sg := stat(t, p("f")), stat(t, p("g"))
	if sf.Ino != sg.Ino || sf.Nlink != 2 || sg.Nlink != 2 {
		t.Fatalf("link: %+v %+v", sf, sg)
	}
	wantErr(t, os.Link(p("f"), p("g")), syscall.EEXIST, "link over an existing name")
	ok(t, os.Mkdir(p("d"), 0o755), "mkdir")
	wantErr(t, os.Link(p("d"), p("dl")), syscall.EPERM, "link to a dir")
	ok(t, os.Remove(p("f")), "unlink f")
	if st := stat(t, p("g")); st.Nlink != 1 {
		t.Fatalf("nlink after unlink: %d", st.Nlink)
	}
	ok(t, os.Symlink("g", p("s")), "symlink")
	if st := stat(t, p("s")); st.Mode&syscall.S_IFMT != syscall.S_IFLNK || st.Size != 1 {
		t.Fatalf("symlink stat: %+v", st)
	}
	if l, err := os.Readlink(p("s")); err != nil || l != "g" {
		t.Fatalf("readlink: %q %v", l, err)
	}
	if b, err := os.ReadFile(p("s")); err != nil || string(b) != "data" {
		t.Fatalf("read through symlink: %q %v", b, err)
	}
	_, err := os.Readlink(p("g"))
	wantErr(t, err, syscall.EINVAL, "readlink of a file")
	long := strings.Repeat("t/", 1000)
	ok(t, os.Symlink(long, p("long")), "symlink with a 2000-byte target")
	if l, err := os.Readlink(p("long")); err != nil || l != long {
		t.Fatalf("readlink of a long target: %d bytes %v", len(l), err)
	}
	ok(t, os.Symlink("nowhere", p("dangling")), "dangling symlink")
	_, err = os.Stat(p("dangling"))
	wantErr(t, err, syscall.ENOENT, "stat through a dangling symlink")
}

func caseAttrs(t tester, dir string) {
	p := filepath.Join(dir, "f")
	ok(t, os.WriteFile(p, nil, 0o644), "create")
	ok(t, os.Chmod(p, 0o600), "chmod")
	if st := stat(t, p); st.Mode != syscall.S_IFREG|0o600 {
		t.Fatalf("mode after chmod: %o", st.Mode)
	}
	at := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
	mt := time.Date(2002, 3, 4, 5, 6, 7, 8000, time.UTC)
	ok(t, os.Chtimes(p, at, mt), "utimes")
	st := stat(t, p)
	if got := time.Unix(st.Mtim.Unix()); !got.Equal(mt) {
		t.Fatalf("mtime %v, want %v", got, mt)
	}
	if got := time.Unix(st.Atim.Unix()); !got.Equal(at) {
		t.Fatalf("atime %v, want %v", got, at)
	}
	before := time.Now().Add(-2 * time.Second)
	ok(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}, 0), "utimes UTIME_NOW")
	st = stat(t, p)
	if got := time.Unix(st.Mtim.Unix()); got.Before(before) || got.After(time.Now().Add(2*time.Second)) {
		t.Fatalf("mtime after UTIME_NOW: %v", got)
	}
	if os.Getuid() == 0 {
		ok(t, os.Chown(p, 1234, 5678), "chown")
		if st := stat(t, p); st.Uid != 1234 || st.Gid != 5678 {
			t.Fatalf("owner after chown: %d:%d", st.Uid, st.Gid)
		}
	} else {
		wantErr(t, os.Chown(p, 0, 0), syscall.EPERM, "chown to root by a user")
	}
	// Writing updates mtime.
	ok(t, os.Chtimes(p, at, mt), "utimes")
	ok(t, os.WriteFile(p, []byte("x"), 0), "write")
	if st := stat(t, p); time.Unix(st.Mtim.Unix()).Equal(mt) {
		t.Fatalf("mtime unchanged by a write")
	}
}

func caseReaddir(t tester, dir string) {
	const n = 300
	var want []string
	for i := range n {
		name := fmt.Sprintf("entry-%03d", i)
		want = append(want, name)
		if i%50 == 0 {
			ok(t, os.Mkdir(filepath.Join(dir, name), 0o755), "mkdir")
		} else {
			ok(t, os.WriteFile(filepath.Join(dir, name), nil, 0o644), "create")
		}
	}
	f, err := os.Open(dir)
	ok(t, err, "opendir")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	ok(t, err, "readdir")
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Fatalf("readdir: %d names, want %d", len(names), len(want))
	}
	// Again from the start (seekdir to 0), and in small steps.
	_, err = f.Seek(0, 0)
	ok(t, err, "rewinddir")
	var again []string
	for {
		part, err := f.Readdirnames(7)
		again = append(again, part...)
		if err != nil || len(part) == 0 {
			break
		}
	}
	slices.Sort(again)
	if !slices.Equal(again, want) {
		t.Fatalf("readdir again: %d names", len(again))
	}
	ents, err := os.ReadDir(dir)
	ok(t, err, "readdir with types")
	for _, e := range ents {
		var i int
		fmt.Sscanf(e.Name(), "entry-%03d", &i)
		if e.IsDir() != (i%50 == 0) {
			t.Fatalf("type of %s: dir %v", e.Name(), e.IsDir())
		}
	}
	_, err = os.ReadDir(filepath.Join(dir, "entry-001"))
	wantErr(t, err, syscall.ENOTDIR, "readdir of a file")
}

func caseXattr(t tester, dir string) {
	p := filepath.Join(dir, "f")
	ok(t, os.WriteFile(p, nil, 0o644), "create")
	ok(t, unix.Setxattr(p, "user.color", []byte("blue"), 0), "setxattr")
	ok(t, unix.Setxattr(p, "user.empty", nil, 0), "setxattr empty")
	buf := make([]byte, 64)
	n, err := unix.Getxattr(p, "user.color", buf)
	if err != nil || string(buf[:n]) != "blue" {
		t.Fatalf("getxattr: %q %v", buf[:n], err)
	}
	if n, err := unix.Getxattr(p, "user.color", nil); err != nil || n != 4 {
		t.Fatalf("getxattr size: %d %v", n, err)
	}
	_, err = unix.Getxattr(p, "user.color", make([]byte, 2))
	wantErr(t, err, syscall.ERANGE, "getxattr into a small buffer")
	_, err = unix.Getxattr(p, "user.missing", buf)
	wantErr(t, err, syscall.ENODATA, "getxattr of a missing name")
	wantErr(t, unix.Setxattr(p, "user.color", []byte("red"), unix.XATTR_CREATE), syscall.EEXIST, "XATTR_CREATE of an existing name")
	wantErr(t, unix.Setxattr(p, "user.none", []byte("red"), unix.XATTR_REPLACE), syscall.ENODATA, "XATTR_REPLACE of a missing name")
	ok(t, unix.Setxattr(p, "user.color", []byte("red"), unix.XATTR_REPLACE), "XATTR_REPLACE")
	n, err = unix.Listxattr(p, buf)
	ok(t, err, "listxattr")
	names := strings.Split(strings.TrimSuffix(string(buf[:n]), "\x00"), "\x00")
	if !slices.Contains(names, "user.color") || !slices.Contains(names, "user.empty") {
		t.Fatalf("listxattr: %q", names)
	}
	if sz, err := unix.Listxattr(p, nil); err != nil || sz != n {
		t.Fatalf("listxattr size: %d %v, want %d", sz, err, n)
	}
	_, err = unix.Listxattr(p, make([]byte, 3))
	wantErr(t, err, syscall.ERANGE, "listxattr into a small buffer")
	ok(t, unix.Removexattr(p, "user.color"), "removexattr")
	wantErr(t, unix.Removexattr(p, "user.color"), syscall.ENODATA, "removexattr of a missing name")
	_, err = unix.Getxattr(p, "user.color", buf)
	wantErr(t, err, syscall.ENODATA, "getxattr after removexattr")
	big := bytes.Repeat([]byte("v"), 60000)
	ok(t, unix.Setxattr(p, "user.big", big, 0), "setxattr of 60000 bytes")
	vb := make([]byte, 70000)
	if n, err := unix.Getxattr(p, "user.big", vb); err != nil || !bytes.Equal(vb[:n], big) {
		t.Fatalf("getxattr of 60000 bytes: %d %v", n, err)
	}
}

func caseSpecial(t tester, dir string) {
	p := func(s string) string { return filepath.Join(dir, s) }
	ok(t, unix.Mkfifo(p("fifo"), 0o644), "mkfifo")
	if st := stat(t, p("fifo")); st.Mode != syscall.S_IFIFO|0o644 {
		t.Fatalf("fifo mode %o", st.Mode)
	}
	ok(t, unix.Mknod(p("sock"), syscall.S_IFSOCK|0o600, 0), "mknod socket")
	if st := stat(t, p("sock")); st.Mode != syscall.S_IFSOCK|0o600 {
		t.Fatalf("socket mode %o", st.Mode)
	}
	ok(t, unix.Mknod(p("reg"), syscall.S_IFREG|0o600, 0), "mknod regular file")
	if st := stat(t, p("reg")); st.Mode != syscall.S_IFREG|0o600 || st.Size != 0 {
		t.Fatalf("regular file by mknod: %+v", st)
	}
	dev := int(unix.Mkdev(1, 3))
	if os.Getuid() == 0 {
		ok(t, unix.Mknod(p("null"), syscall.S_IFCHR|0o644, dev), "mknod char device")
		st := stat(t, p("null"))
		if st.Mode != syscall.S_IFCHR|0o644 || st.Rdev != uint64(dev) {
			t.Fatalf("char device: mode %o rdev %#x", st.Mode, st.Rdev)
		}
		ok(t, unix.Mknod(p("blk"), syscall.S_IFBLK|0o600, int(unix.Mkdev(7, 0))), "mknod block device")
	} else {
		wantErr(t, unix.Mknod(p("null"), syscall.S_IFCHR|0o666, dev), syscall.EPERM, "mknod of a device by a user")
	}
	wantErr(t, unix.Mkfifo(p("fifo"), 0o644), syscall.EEXIST, "mkfifo over an existing name")
}

func caseUnlinkOpen(t tester, dir string) {
	p := filepath.Join(dir, "f")
	data := bytes.Repeat([]byte("0123456789"), 100000)
	ok(t, os.WriteFile(p, data, 0o644), "write")
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	ok(t, err, "open")
	ok(t, os.Remove(p), "unlink of the open file")
	if _, err := os.Stat(p); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat after unlink: %v", err)
	}
	got := make([]byte, len(data)+10)
	n, _ := f.ReadAt(got, 0)
	if n != len(data) || !bytes.Equal(got[:n], data) {
		t.Fatalf("read of the unlinked file: %d bytes, equal %v", n, bytes.Equal(got[:n], data))
	}
	_, err = f.WriteAt([]byte("still here"), 5)
	ok(t, err, "write to the unlinked file")
	n, _ = f.ReadAt(got[:20], 0)
	if string(got[:n]) != "01234still here56789" {
		t.Fatalf("read back from the unlinked file: %q", got[:n])
	}
	var st syscall.Stat_t
	ok(t, syscall.Fstat(int(f.Fd()), &st), "fstat of the unlinked file")
	if st.Size != int64(len(data)) {
		t.Fatalf("fstat size %d", st.Size)
	}
	ok(t, f.Close(), "close")
	// The name is free again.
	ok(t, os.WriteFile(p, []byte("new"), 0o644), "create again")
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Fatalf("new file: %q", b)
	}
}

func caseFlock(t tester, dir string) {
	p := filepath.Join(dir, "f")
	ok(t, os.WriteFile(p, nil, 0o644), "create")
	f1, err := os.Open(p)
	ok(t, err, "open 1")
	defer f1.Close()
	f2, err := os.Open(p)
	ok(t, err, "open 2")
	defer f2.Close()
	ok(t, syscall.Flock(int(f1.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), "flock 1")
	wantErr(t, syscall.Flock(int(f2.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), syscall.EWOULDBLOCK, "flock 2 while 1 holds it")
	ok(t, syscall.Flock(int(f1.Fd()), syscall.LOCK_UN), "unlock 1")
	ok(t, syscall.Flock(int(f2.Fd()), syscall.LOCK_SH|syscall.LOCK_NB), "flock 2 shared")
	ok(t, syscall.Flock(int(f1.Fd()), syscall.LOCK_SH|syscall.LOCK_NB), "flock 1 shared")
	// flock() locks are whole-file locks of the lock server (as Lustre's):
	// they conflict with fcntl locks too.
	ok(t, syscall.Flock(int(f1.Fd()), syscall.LOCK_UN), "unlock 1")
	ok(t, syscall.Flock(int(f2.Fd()), syscall.LOCK_UN), "unlock 2")

	// fcntl locks of one process never conflict with each other.
	g, err := os.OpenFile(p, os.O_RDWR, 0)
	ok(t, err, "open rw")
	defer g.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 10}
	ok(t, syscall.FcntlFlock(g.Fd(), syscall.F_SETLK, &lk), "F_SETLK")
	lk = syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 5, Len: 10}
	ok(t, syscall.FcntlFlock(g.Fd(), syscall.F_GETLK, &lk), "F_GETLK")
	if lk.Type != syscall.F_UNLCK {
		t.Fatalf("F_GETLK of the own lock: %+v", lk)
	}
}

func caseStatfs(t tester, dir string) {
	var st unix.Statfs_t
	ok(t, unix.Statfs(dir, &st), "statfs")
	if st.Blocks == 0 || st.Bfree == 0 || st.Bavail == 0 || st.Files == 0 || st.Ffree == 0 || st.Namelen != 255 || st.Bsize == 0 {
		t.Fatalf("statfs: %+v", st)
	}
}

// caseTmpfile: open(2) with O_TMPFILE makes a file with no name whose
// bytes read back; linkat(2) through /proc/self/fd names it, and the name
// reads the same bytes; with O_EXCL the link is refused; a file never
// linked leaves nothing in the directory; O_TMPFILE for read only is
// EINVAL.
func caseTmpfile(t tester, dir string) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR, 0o640)
	ok(t, err, "open O_TMPFILE")
	data := bytes.Repeat([]byte("no name yet. "), 10_000)
	_, err = unix.Pwrite(fd, data, 0)
	ok(t, err, "pwrite")
	var st unix.Stat_t
	ok(t, unix.Fstat(fd, &st), "fstat")
	if st.Nlink != 0 || st.Size != int64(len(data)) || st.Mode != unix.S_IFREG|0o640 || st.Uid != uint32(os.Getuid()) {
		t.Fatalf("fstat of the tmpfile: %+v", st)
	}
	got := make([]byte, len(data))
	if n, err := unix.Pread(fd, got, 0); n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("pread: %d bytes, %v", n, err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Fatalf("the directory holds %v (%v)", ents, err)
	}
	named := filepath.Join(dir, "named")
	ok(t, unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, named, unix.AT_SYMLINK_FOLLOW), "linkat")
	ok(t, unix.Close(fd), "close")
	if b, err := os.ReadFile(named); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("read through the name: %d bytes, %v", len(b), err)
	}
	if st := stat(t, named); st.Nlink != 1 || st.Mode != syscall.S_IFREG|0o640 {
		t.Fatalf("stat of the name: %+v", st)
	}

	fd, err = unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_EXCL, 0o600)
	ok(t, err, "open O_TMPFILE|O_EXCL")
	_, err = unix.Write(fd, []byte("gone"))
	ok(t, err, "write")
	err = unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, filepath.Join(dir, "x"), unix.AT_SYMLINK_FOLLOW)
	wantErr(t, err, syscall.ENOENT, "linkat of an O_EXCL tmpfile")
	ok(t, unix.Close(fd), "close")
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 || ents[0].Name() != "named" {
		t.Fatalf("the directory holds %v (%v), want named only", ents, err)
	}
	_, err = unix.Open(dir, unix.O_TMPFILE|unix.O_RDONLY, 0o600)
	wantErr(t, err, syscall.EINVAL, "O_TMPFILE for read only")
}
