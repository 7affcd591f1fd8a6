package oss

import (
	"bytes"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/pagecache"
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
	// A store that takes no O_DIRECT (tmpfs) reads everything through the
	// page cache: then every page must be there after each read.
	probe := filepath.Join(e.dirs[0], ".direct-probe")
	fd, err := unix.Open(probe, unix.O_RDWR|unix.O_CREAT|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
	direct := err == nil
	if direct {
		unix.Close(fd)
		unix.Unlink(probe)
	}
	t.Logf("store takes O_DIRECT: %v", direct)
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
			n := mustCount(t, path, int64(at), int64(at)+1<<20)
			switch {
			case direct && n != 0:
				t.Fatalf("read at %d (summed %v) of 1 MiB with direct_read_min_kb=1024 left %d pages in the page cache: not a direct read", at, sum, n)
			case !direct && n != 256:
				t.Fatalf("read at %d (summed %v) through the page cache (no O_DIRECT) left %d of 256 pages there", at, sum, n)
			}
		}
	}
}

// evictFile writes back and drops path's pages from the page cache.
func evictFile(t *testing.T, path string) {
	t.Helper()
	if err := pagecache.Evict(path); err != nil {
		t.Fatal(err)
	}
}

// mustCount counts the pages of [from, to) of path in the page cache.
func mustCount(t *testing.T, path string, from, to int64) int {
	t.Helper()
	n, err := pagecache.Count(path, from, to)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
