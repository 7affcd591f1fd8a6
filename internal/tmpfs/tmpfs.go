// Package tmpfs mounts size-limited tmpfs file systems for tests: an OST
// small enough to fill up, or one held in memory.
package tmpfs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Mount mounts a tmpfs of size (mount(8)'s size option: "24m", "4g") on a
// new directory and returns it; it is unmounted (lazily) when the test
// ends. Mounting needs root, which CI has: elsewhere the test fails, it is
// not skipped.
func Mount(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts a tmpfs: run it as root (CI does)")
	}
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+size); err != nil {
		t.Fatalf("mount a tmpfs of %s on %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the tmpfs on %s: %v", dir, err)
		}
	})
	return dir
}
