package osdfile

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nacrefs/nacre/oss/osd"
)

// TestRecordSurvivesPowerLoss: a WriteRecord whose journal record is
// durable (Sync returned) survives a power loss on ext4. The committer
// applies it later: the bytes, then the attributes (lma) saying the
// record is applied, which replay trusts. Without the data synced first,
// the next fsync anywhere on the file system committed ext4's journal with
// the lma while the overwritten page stayed dirty (data=ordered orders
// only newly allocated blocks): after the crash replay skipped the record,
// and the object kept its old bytes.
//
// The disk is an ext4 image on a loop device; the power loss is a copy of
// the image taken while mounted, which ext4 recovers at the next mount.
func TestRecordSurvivesPowerLoss(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: it mounts an ext4 image on a loop device")
	}
	work := t.TempDir()
	img, crash := filepath.Join(work, "disk.img"), filepath.Join(work, "crash.img")
	run(t, "truncate", "-s", "128M", img)
	run(t, "mkfs.ext4", "-q", "-F", "-I", "512", img)
	mnt := filepath.Join(work, "mnt")
	umount := mountImage(t, img, mnt)
	defer umount()

	dir := filepath.Join(mnt, "ost")
	x, y := fidN(1), fidN(2)
	oldB, newB := bytes.Repeat([]byte("O"), 4096), bytes.Repeat([]byte("N"), 4096)
	d := formatOpen(t, dir, MinJournalSize)
	mustDo(t, d, func(tx osd.Tx) error {
		return errors.Join(tx.Create(x, osd.Attr{}), tx.WriteRecord(x, oldB, 0))
	})
	if err := d.Close(); err != nil { // a checkpoint: all of it on disk
		t.Fatal(err)
	}
	d = reopen(t, dir)
	// A LAST_ID-like update, acknowledged durable, then any other durable
	// change: its fsync commits ext4's journal.
	mustDo(t, d, func(tx osd.Tx) error { return tx.WriteRecord(x, newB, 0) })
	if err := d.Sync(bg); err != nil {
		t.Fatal(err)
	}
	mustDo(t, d, func(tx osd.Tx) error {
		return errors.Join(tx.Create(y, osd.Attr{}), tx.WriteAt(y, [][]byte{[]byte("y")}, 0))
	})
	if err := d.Sync(bg); err != nil {
		t.Fatal(err)
	}
	run(t, "cp", "--sparse=always", img, crash) // the power loss
	abandon(t, d)
	umount()

	umount2 := mountImage(t, crash, filepath.Join(work, "mnt2"))
	defer umount2()
	d2, err := Open(bg, filepath.Join(work, "mnt2", "ost"), testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	got := make([]byte, 4096)
	if _, err := d2.ReadAt(bg, x, [][]byte{got}, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, newB) {
		t.Fatalf("after the power loss the object reads %q..., want the record acknowledged durable (%q...)", got[:8], newB[:8])
	}
}

// run runs a command, failing the test if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// mountImage mounts the ext4 image img at mnt through a loop device, and
// returns what unmounts it (once).
func mountImage(t *testing.T, img, mnt string) (umount func()) {
	t.Helper()
	dev := run(t, "losetup", "-f", "--show", img)
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "ext4", dev, mnt).CombinedOutput(); err != nil {
		exec.Command("losetup", "-d", dev).Run()
		t.Fatalf("mount %s: %v: %s", dev, err, out)
	}
	done := false
	return func() {
		if !done {
			done = true
			exec.Command("umount", mnt).Run()
			exec.Command("losetup", "-d", dev).Run()
		}
	}
}
