package llite_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
)

// TestBlocks checks st_blocks through the mount: the sum of the blocks
// the file's objects occupy on the OSTs (Lustre's ll_merge_attr), not its
// size, so that a sparse file counts its holes for nothing (du), on the
// writer's mount and another alike.
func TestBlocks(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, Clients: 2})
	a := mountT(t, c, 0)
	b := mountT(t, c, 1)
	blocks := func(t *testing.T, p string) (size int64, blocks int64) {
		t.Helper()
		st := stat(t, p)
		return st.Size, st.Blocks
	}
	// slack is what the OSTs' file systems may add of their own (extent
	// metadata): 64 KiB.
	const slack = 64 << 10 / 512

	t.Run("sparse", func(t *testing.T) {
		const chunk, far = 64 << 10, 100 << 20
		pa := filepath.Join(a.Dir(), "sparse")
		f, err := os.Create(pa)
		ok(t, err, "create")
		defer f.Close()
		data := bytes.Repeat([]byte("sparse!\n"), chunk/8)
		_, err = f.WriteAt(data, 0)
		ok(t, err, "write at 0")
		_, err = f.WriteAt(data, far)
		ok(t, err, "write at 100 MiB")
		ok(t, f.Sync(), "fsync")
		pb := filepath.Join(b.Dir(), "sparse")
		check := func(t *testing.T, what string, wantSize, min, max int64) {
			t.Helper()
			for _, p := range []string{pa, pb} {
				size, n := blocks(t, p)
				if size != wantSize || n < min || n > max {
					t.Fatalf("%s: %s: size %d, %d blocks of 512 bytes; want size %d, blocks in [%d, %d] (size/512 = %d)",
						what, p, size, n, wantSize, min, max, size/512)
				}
			}
		}
		written := int64(2 * chunk / 512)
		check(t, "written at 0 and 100 MiB", far+chunk, written, written+2*slack)
		_, before := blocks(t, pa)

		// Truncate up: a hole, nothing allocated.
		ok(t, f.Truncate(2*far), "truncate up")
		check(t, "truncated up", 2*far, before, before)

		// Truncate down: the data at 100 MiB goes, and its blocks.
		ok(t, f.Truncate(chunk/2), "truncate down")
		check(t, "truncated down", chunk/2, 0, chunk/2/512+slack)
		if _, n := blocks(t, pa); n >= before {
			t.Fatalf("truncating down left %d blocks, as many as the %d before", n, before)
		}
	})

	t.Run("striped", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		fsys := a.FS()
		lay := layout.Plain(layout.RAID0{StripeCount: 2, StripeSize: 64 << 10, StripeOffset: -1})
		cf, _, err := fsys.Create(ctx, client.Root(), fsys.Root(), "striped", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644,
			&client.CreateOptions{Layout: &lay})
		ok(t, err, "create striped")
		cf.Close(ctx)
		const size = 4 << 20
		pa := filepath.Join(a.Dir(), "striped")
		ok(t, os.WriteFile(pa, bytes.Repeat([]byte{0x5a}, size), 0o644), "write")
		f, err := os.Open(pa)
		ok(t, err, "open")
		ok(t, f.Sync(), "fsync")
		f.Close()
		for _, p := range []string{pa, filepath.Join(b.Dir(), "striped")} {
			if sz, n := blocks(t, p); sz != size || n < size/512 || n > size/512+2*slack {
				t.Fatalf("%s: size %d, %d blocks of 512 bytes; want %d, and at least %d", p, sz, n, size, size/512)
			}
		}
	})
}
