// Package ext4img mounts ext4 images on loop devices for tests of what
// survives a power loss: a test writes to a mounted image, copies it as
// the disk holds it at that instant (Crash), and mounts the copy, which
// ext4 recovers as after a crash. It needs root and mkfs.ext4, losetup
// and mount, which CI has (.ci/run installs them): elsewhere the test
// fails, it is not skipped.
package ext4img

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Image is an ext4 image file mounted on a loop device.
type Image struct {
	t       testing.TB
	path    string
	dir     string
	dev     string
	mounted bool
}

// New makes an ext4 image of size (truncate(1)'s: "64M") with mkfs.ext4's
// extra arguments, and mounts it; it is unmounted when the test ends.
func New(t testing.TB, size string, mkfsArgs ...string) *Image {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts an ext4 image on a loop device: run it as root (CI does)")
	}
	img := filepath.Join(t.TempDir(), "disk.img")
	run(t, "truncate", "-s", size, img)
	run(t, "mkfs.ext4", append(append([]string{"-q", "-F"}, mkfsArgs...), img)...)
	return Mount(t, img)
}

// Mount mounts the image file path (ext4 replays its journal, as after a
// crash); it is unmounted when the test ends.
func Mount(t testing.TB, path string) *Image {
	t.Helper()
	im := &Image{t: t, path: path, dir: filepath.Join(t.TempDir(), "mnt")}
	im.dev = run(t, "losetup", "-f", "--show", path)
	if err := os.MkdirAll(im.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "ext4", im.dev, im.dir).CombinedOutput(); err != nil {
		exec.Command("losetup", "-d", im.dev).Run()
		t.Fatalf("mount %s on %s: %v: %s", path, im.dev, err, out)
	}
	im.mounted = true
	t.Cleanup(im.Unmount)
	return im
}

// Dir is where the image is mounted.
func (im *Image) Dir() string { return im.dir }

// Crash copies the image as its disk holds it now, what a power loss
// would leave, and returns the copy's path (Mount it to recover it).
func (im *Image) Crash() string {
	im.t.Helper()
	crash := filepath.Join(im.t.TempDir(), "crash.img")
	run(im.t, "cp", "--sparse=always", im.path, crash)
	return crash
}

// Unmount unmounts the image and frees its loop device (once).
func (im *Image) Unmount() {
	if !im.mounted {
		return
	}
	im.mounted = false
	exec.Command("umount", im.dir).Run()
	exec.Command("losetup", "-d", im.dev).Run()
}

// run runs a command, failing the test if it fails, and returns its
// output.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
	return strings.TrimSpace(string(out))
}
