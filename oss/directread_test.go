package oss

import (
	"bytes"
	"io/fs"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/oss/osdfile"
)

// TestDirectBulkReadsWhole: with osd-file.*.direct_read_min_kb at 1024, a
// bulk read of a 1 MiB extent of data the page cache holds none of reads
// around it (it leaves no page of the object in the page cache), summed or
// not: the OFD's read in pieces (to sum each while it is in the processor's
// cache) must not cut an extent below the direct read size.
func TestDirectBulkReadsWhole(t *testing.T) {
	e := newOSSEnv(t, 1, 1)
	dev := e.devs[0].(*osdfile.Device)
	probe := filepath.Join(e.dirs[0], ".direct-probe")
	fd, err := unix.Open(probe, unix.O_RDWR|unix.O_CREAT|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Skipf("the store takes no O_DIRECT: %v", err)
	}
	unix.Close(fd)
	unix.Unlink(probe)
	oc := e.client(0)
	ctx := ctxT(t, 30*time.Second)
	f := oc.precreate(ctx, 0, 1)[0]
	const size = 4 << 20
	data := pattern(size, 9)
	if _, err := oc.imps[0].Do(ctx, oc.writeReq(f, []wire.Niobuf{{Offset: 0, Len: size}}, [][]byte{data}, false)); err != nil {
		t.Fatal(err)
	}
	// The object's file: the only one of its size.
	var path string
	filepath.WalkDir(e.dirs[0], func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil && fi.Size() == size {
				path = p
			}
		}
		return nil
	})
	if path == "" {
		t.Fatal("no object file of the size written")
	}
	if err := dev.SetDirectReadMin(1 << 20); err != nil {
		t.Fatal(err)
	}
	for _, sum := range []bool{false, true} {
		for at := 0; at < size; at += 1 << 20 {
			evictFile(t, path)
			buf := make([]byte, 1<<20)
			if _, err := oc.imps[0].Do(ctx, oc.readReq(f, []wire.Niobuf{{Offset: uint64(at), Len: 1 << 20}}, [][]byte{buf}, sum)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, data[at:at+1<<20]) {
				t.Fatalf("read at %d (summed %v): wrong bytes", at, sum)
			}
			if n := residentPages(t, path, int64(at), int64(at)+1<<20); n != 0 {
				t.Fatalf("read at %d (summed %v) of 1 MiB with direct_read_min_kb=1024 left %d pages in the page cache: not a direct read", at, sum, n)
			}
		}
	}
}

// evictFile writes back and drops path's pages from the page cache.
func evictFile(t *testing.T, path string) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// residentPages counts the pages of [from, to) of path in the page cache.
func residentPages(t *testing.T, path string, from, to int64) int {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	mem, err := unix.Mmap(fd, from, int(to-from), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	vec := make([]byte, (to-from+4095)/4096)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
