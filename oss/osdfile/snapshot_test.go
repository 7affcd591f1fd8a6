package osdfile

import (
	"bytes"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/oss/osd"
)

// TestSnapshot: a device opened on a snapshot has every transaction
// committed before it — data, attributes, objects still lazy — and none
// after, while writers ran through it; the snapshot's directory must be
// new.
func TestSnapshot(t *testing.T) {
	d, _ := newTarget(t, 4<<20)
	defer d.Close()
	obj := func(oid uint32) fid.FID { return fid.FID{Seq: fid.SeqNormal, Oid: oid} }
	commit := func(tn uint64, fn func(tx osd.Tx)) {
		t.Helper()
		tx, err := d.Begin(bg)
		if err != nil {
			t.Fatal(err)
		}
		tx.SetTransno(tn)
		fn(tx)
		if err := tx.Commit(bg); err != nil {
			t.Fatal(err)
		}
	}
	before := bytes.Repeat([]byte("before the snapshot "), 1000)
	commit(1, func(tx osd.Tx) {
		tx.Create(obj(1), osd.Attr{Mode: 0o100644, Valid: osd.AttrMode})
		tx.WriteAt(obj(1), [][]byte{before}, 0)
		tx.Create(obj(2), osd.Attr{Mode: 0o100600, Valid: osd.AttrMode}) // lazy: no file yet
	})
	// Writers of another object run through the snapshot.
	var wg sync.WaitGroup
	commit(2, func(tx osd.Tx) { tx.Create(obj(9), osd.Attr{Mode: 0o100644, Valid: osd.AttrMode}) })
	wg.Go(func() {
		for i := range 50 {
			tx, err := d.Begin(bg)
			if err != nil {
				t.Error(err)
				return
			}
			tx.WriteAt(obj(9), [][]byte{bytes.Repeat([]byte{byte(i)}, 4096)}, int64(i)*4096)
			if err := tx.Commit(bg); err != nil {
				t.Error(err)
				return
			}
		}
	})
	snap := filepath.Join(t.TempDir(), "snap")
	if err := d.Snapshot(bg, snap); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := d.Snapshot(bg, snap); err == nil {
		t.Error("a snapshot over an existing directory succeeded")
	}
	commit(3, func(tx osd.Tx) {
		tx.WriteAt(obj(1), [][]byte{[]byte("after")}, 0)
		tx.Create(obj(3), osd.Attr{Mode: 0o100644, Valid: osd.AttrMode})
		tx.Destroy(obj(2))
	})
	if err := d.Sync(bg); err != nil {
		t.Fatal(err)
	}

	c, err := Open(bg, snap, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if lc := c.LastCommitted(); lc != 2 {
		t.Errorf("the snapshot's last committed %d, want 2", lc)
	}
	got := make([]byte, len(before)+10)
	if n, err := c.ReadAt(bg, obj(1), [][]byte{got}, 0); err != nil || !bytes.Equal(got[:n], before) {
		t.Errorf("object 1 in the snapshot: %d bytes, %v; equal %v", n, err, bytes.Equal(got[:n], before))
	}
	if a, err := c.GetAttr(bg, obj(2)); err != nil || a.Mode != 0o100600 {
		t.Errorf("object 2 (lazy) in the snapshot: %+v %v", a, err)
	}
	if _, err := c.GetAttr(bg, obj(3)); !errors.Is(err, osd.ErrNotExist) {
		t.Errorf("object 3, made after the snapshot: %v", err)
	}
	// The writer's object: whole 4 KiB writes, each there or not, in order.
	a, err := c.GetAttr(bg, obj(9))
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, a.Size)
	if _, err := c.ReadAt(bg, obj(9), [][]byte{data}, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(data); i += 4096 {
		if !bytes.Equal(data[i:i+4096], bytes.Repeat([]byte{byte(i / 4096)}, 4096)) {
			t.Fatalf("object 9 in the snapshot: block %d torn", i/4096)
		}
	}
}
