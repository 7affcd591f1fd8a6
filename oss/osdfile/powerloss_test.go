package osdfile

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/nacrefs/nacre/internal/ext4img"
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
func TestRecordSurvivesPowerLoss(t *testing.T) {
	disk := ext4img.New(t, "128M", "-I", "512")
	dir := filepath.Join(disk.Dir(), "ost")
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
	crash := disk.Crash()
	abandon(t, d)
	disk.Unmount()

	after := ext4img.Mount(t, crash)
	d2, err := Open(bg, filepath.Join(after.Dir(), "ost"), testConfig(t))
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
