package osdfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nacrefs/nacre/oss/osd"
)

// TestFormatHeaderSlot: generation g's journal header lives in slot g%2
// and a checkpoint writes the next generation into the other slot, so a
// torn header write leaves the previous one in force. Format wrote
// generation 1 into slot 0, where the first checkpoint (the first Open's)
// writes generation 2: a torn write there left no valid header, and a
// target that never opened again.
func TestFormatHeaderSlot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ost")
	fc := DefaultFormatConfig("nacre-OST0000")
	fc.JournalSize = MinJournalSize
	if err := Format(bg, dir, fc); err != nil {
		t.Fatal(err)
	}
	jpath := filepath.Join(dir, journalName)
	j, err := os.ReadFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	h0, ok0 := decodeHeader(j[:slotSize])
	_, ok1 := decodeHeader(j[slotSize:areaStart])
	if ok0 || !ok1 {
		t.Errorf("after Format: slot 0 valid %v (generation %d), slot 1 valid %v; want generation 1 in slot 1 alone", ok0, h0.gen, ok1)
	}
	// The first Open's checkpoint writes generation 2 into slot 2%2 = 0:
	// simulate that write torn (its first half reached the disk).
	next := (&jheader{gen: 2, startLSN: 1, size: uint64(MinJournalSize)}).encode()
	f, err := os.OpenFile(jpath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(next[:24], int64(2%2)*slotSize); err != nil {
		t.Fatal(err)
	}
	f.Close()
	d, err := Open(bg, dir, testConfig(t))
	if errors.Is(err, osd.ErrCorrupt) {
		t.Fatalf("a torn first checkpoint leaves no valid journal header: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
}
