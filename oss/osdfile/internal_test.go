package osdfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/tmpfs"
	"github.com/nacrefs/nacre/oss/osd"
)

func fidN(n int) fid.FID { return fid.FID{Seq: fid.SeqNormal, Oid: uint32(n)} }

func mustDo(t testing.TB, d osd.Device, fn func(tx osd.Tx) error) {
	t.Helper()
	tx, err := d.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Abort()
	if err := fn(tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(bg); err != nil {
		t.Fatal(err)
	}
}

func readAll(t testing.TB, d osd.Device, f fid.FID) []byte {
	t.Helper()
	a, err := d.GetAttr(bg, f)
	if err != nil {
		t.Fatalf("GetAttr %v: %v", f, err)
	}
	b := make([]byte, a.Size)
	n, err := d.ReadAt(bg, f, [][]byte{b}, 0)
	if err != nil || n != len(b) {
		t.Fatalf("ReadAt %v: %d, %v", f, n, err)
	}
	return b
}

// abandon stops d as a crash would: the committer finishes what is queued
// (so Sync'd records are in the journal) but no checkpoint is taken, and the
// files are closed without further ado.
func abandon(t *testing.T, d *Device) {
	t.Helper()
	d.closing.Store(true)
	d.life.Lock()
	d.jmu.Lock()
	d.jmu.closed = true
	d.jmu.Unlock()
	close(d.stop)
	<-d.done
	for _, o := range d.mu.objects {
		if o.mu.fd >= 0 {
			unix.Close(o.mu.fd)
		}
	}
	d.closeFiles()
	d.life.Unlock()
}

func reopen(t *testing.T, dir string) *Device {
	t.Helper()
	d, err := Open(bg, dir, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestFormatAndOpenErrors(t *testing.T) {
	root := t.TempDir()
	if err := Format(bg, root+"/x", FormatConfig{Label: "bad label!"}); !errors.Is(err, osd.ErrInvalid) {
		t.Fatalf("bad label: %v", err)
	}
	if err := Format(bg, root+"/x", FormatConfig{Label: "ok", JournalSize: 1000}); !errors.Is(err, osd.ErrInvalid) {
		t.Fatalf("tiny journal: %v", err)
	}
	os.WriteFile(filepath.Join(root, "junk"), nil, 0o644)
	if err := Format(bg, root, DefaultFormatConfig("ok")); !errors.Is(err, osd.ErrInvalid) {
		t.Fatalf("format of a non-empty directory: %v", err)
	}
	if _, err := Open(bg, t.TempDir(), DefaultConfig()); !errors.Is(err, osd.ErrInvalid) {
		t.Fatalf("open of an unformatted directory: %v", err)
	}
	if _, err := Open(bg, root, Config{}); !errors.Is(err, osd.ErrInvalid) {
		t.Fatalf("open with a zero Config: %v", err)
	}

	d, dir := newTarget(t, MinJournalSize)
	if _, err := Open(bg, dir, DefaultConfig()); !errors.Is(err, osd.ErrBusy) {
		t.Fatalf("second open: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// A damaged identity or journal is corruption.
	conf := filepath.Join(dir, confName)
	good, _ := os.ReadFile(conf)
	os.WriteFile(conf, bytes.Replace(good, []byte(confMagic), []byte("something-else"), 1), 0o644)
	if _, err := Open(bg, dir, DefaultConfig()); !errors.Is(err, osd.ErrCorrupt) {
		t.Fatalf("open with a bad identity: %v", err)
	}
	os.WriteFile(conf, good, 0o644)
	jf, _ := os.OpenFile(filepath.Join(dir, journalName), os.O_RDWR, 0)
	jf.WriteAt(make([]byte, areaStart), 0) // both header slots
	jf.Close()
	if _, err := Open(bg, dir, DefaultConfig()); !errors.Is(err, osd.ErrCorrupt) {
		t.Fatalf("open with both journal headers gone: %v", err)
	}
}

func TestAutoJournalSize(t *testing.T) {
	mnt := tmpfs.Mount(t, "24m")
	if err := Format(bg, mnt+"/ost", DefaultFormatConfig("small")); err != nil {
		t.Fatal(err)
	}
	c, err := readConf(mnt + "/ost")
	if err != nil || c.JournalSize != MinJournalSize {
		t.Fatalf("journal on a 24 MiB store: %d, %v", c.JournalSize, err)
	}
}

func TestCorruptAttributes(t *testing.T) {
	d, _ := newTarget(t, MinJournalSize)
	defer d.Close()
	a, b := fidN(1), fidN(2)
	mustDo(t, d, func(tx osd.Tx) error { return errors.Join(tx.Create(a, osd.Attr{}), tx.Create(b, osd.Attr{})) })
	d.Close() // the checkpoint gives the lazy objects their files
	d = reopen(t, d.dir)
	// Damage a's lma and give b a copy of a's: both must be refused once
	// read from disk.
	lmaA := make([]byte, lmaSize)
	if _, err := unix.Getxattr(objPath(d.dir, a), d.xattr, lmaA); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(objPath(d.dir, b), d.xattr, lmaA, 0); err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(lmaA)
	bad[40] ^= 1
	if err := unix.Setxattr(objPath(d.dir, a), d.xattr, bad, 0); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d = reopen(t, d.dir)
	defer d.Close()
	for _, f := range []fid.FID{a, b} {
		if _, err := d.GetAttr(bg, f); !errors.Is(err, osd.ErrCorrupt) {
			t.Fatalf("GetAttr of %v with a bad lma: %v", f, err)
		}
		if _, err := d.ReadAt(bg, f, [][]byte{make([]byte, 1)}, 0); !errors.Is(err, osd.ErrCorrupt) {
			t.Fatalf("ReadAt of %v with a bad lma: %v", f, err)
		}
		tx, _ := d.Begin(bg)
		tx.WriteAt(f, [][]byte{{1}}, 0)
		if err := tx.Commit(bg); !errors.Is(err, osd.ErrCorrupt) {
			t.Fatalf("write to %v with a bad lma: %v", f, err)
		}
	}
	if osd.Errno(osd.ErrCorrupt) != unix.EIO {
		t.Fatal("ErrCorrupt does not map to EIO")
	}
}

// TestReplay leaves records in the journal (no checkpoint), then reopens:
// the replay must rebuild everything, including a destroy followed by a
// create of the same FID, and replaying the same journal a second time over
// the result must change nothing.
func TestReplay(t *testing.T) {
	d, dir := newTarget(t, MinJournalSize)
	a, b, c := fidN(1), fidN(2), fidN(3)
	mustDo(t, d, func(tx osd.Tx) error {
		return errors.Join(tx.Create(a, osd.Attr{UID: 1, Valid: osd.AttrUID}), tx.WriteAt(a, [][]byte{[]byte("first life of a")}, 0))
	})
	mustDo(t, d, func(tx osd.Tx) error { return tx.Punch(a, 0, 6) })
	mustDo(t, d, func(tx osd.Tx) error { return tx.Destroy(a) })
	mustDo(t, d, func(tx osd.Tx) error {
		tx.SetTransno(9)
		return errors.Join(tx.Create(a, osd.Attr{UID: 2, Valid: osd.AttrUID}), tx.WriteAt(a, [][]byte{[]byte("second")}, 3))
	})
	mustDo(t, d, func(tx osd.Tx) error {
		return errors.Join(tx.Create(b, osd.Attr{}), tx.Create(c, osd.Attr{}), tx.WriteAt(b, [][]byte{bytes.Repeat([]byte("b"), 10000)}, 0))
	})
	mustDo(t, d, func(tx osd.Tx) error { return errors.Join(tx.Punch(b, 100, 200), tx.WriteRecord(c, []byte("rec"), 5)) })
	mustDo(t, d, func(tx osd.Tx) error { return tx.Punch(b, 5000, osd.EOF) })
	mustDo(t, d, func(tx osd.Tx) error { return tx.WriteAt(b, [][]byte{[]byte("tail")}, 6000) })
	if err := d.Sync(bg); err != nil {
		t.Fatal(err)
	}
	abandon(t, d)
	saved, err := os.ReadFile(filepath.Join(dir, journalName))
	if err != nil {
		t.Fatal(err)
	}
	wantB := bytes.Repeat([]byte("b"), 5000)
	clear(wantB[100:200])
	wantB = append(wantB, make([]byte, 1000)...)
	wantB = append(wantB, "tail"...)
	check := func(d *Device) {
		t.Helper()
		if got := readAll(t, d, a); string(got) != "\x00\x00\x00second" {
			t.Fatalf("a: %q", got)
		}
		if at, _ := d.GetAttr(bg, a); at.UID != 2 {
			t.Fatalf("a's uid: %d", at.UID)
		}
		if got := readAll(t, d, b); !bytes.Equal(got, wantB) {
			t.Fatalf("b differs at %d", firstDifference(got, wantB))
		}
		if got := readAll(t, d, c); string(got) != "\x00\x00\x00\x00\x00rec" {
			t.Fatalf("c: %q", got)
		}
		if lc := d.LastCommitted(); lc != 9 {
			t.Fatalf("LastCommitted %d, want 9", lc)
		}
	}
	for pass := range 3 {
		d = reopen(t, dir)
		check(d)
		abandon(t, d)
		if pass == 0 {
			// Put the journal back as it was before the first replay:
			// the same records again, over files that have them.
			if err := os.WriteFile(filepath.Join(dir, journalName), saved, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestTornJournal damages the journal after a few records: replay stops at
// the damage (a torn write looks just like that), and a record whose
// checksum holds but whose contents do not parse is corruption.
func TestTornJournal(t *testing.T) {
	d, dir := newTarget(t, MinJournalSize)
	f := fidN(1)
	mustDo(t, d, func(tx osd.Tx) error { return tx.Create(f, osd.Attr{}) })
	var offs []int64
	for i := range 5 {
		if err := d.Sync(bg); err != nil {
			t.Fatal(err)
		}
		offs = append(offs, d.tail)
		mustDo(t, d, func(tx osd.Tx) error {
			tx.SetTransno(uint64(i + 1))
			return tx.WriteRecord(f, []byte{byte('a' + i)}, int64(i))
		})
	}
	if err := d.Sync(bg); err != nil {
		t.Fatal(err)
	}
	abandon(t, d)
	jpath := filepath.Join(dir, journalName)
	saved, _ := os.ReadFile(jpath)

	// Flip a byte inside the fourth write's record: the create and the
	// first three writes survive. The file goes too, as if none of the
	// records had reached it: replay must build it from the journal alone.
	torn := bytes.Clone(saved)
	torn[offs[3]+recHdrLen+3] ^= 0xff
	os.WriteFile(jpath, torn, 0o600)
	if err := os.Remove(objPath(dir, f)); err != nil {
		t.Fatal(err)
	}
	d = reopen(t, dir)
	if got := readAll(t, d, f); string(got) != "abc" {
		t.Fatalf("after a torn fourth record: %q", got)
	}
	if lc := d.LastCommitted(); lc != 3 {
		t.Fatalf("LastCommitted %d, want 3", lc)
	}
	abandon(t, d)

	// A record with a good checksum and a bad step is corruption.
	bad := bytes.Clone(saved)
	rec := bad[offs[2]:offs[3]]
	rec[recHdrLen] = 99 // unknown op
	le.PutUint32(rec[len(rec)-4:], crc32c(rec[:len(rec)-4]))
	os.WriteFile(jpath, bad, 0o600)
	if _, err := Open(bg, dir, testConfig(t)); !errors.Is(err, osd.ErrCorrupt) || !strings.Contains(err.Error(), "unknown op") {
		t.Fatalf("open with a corrupt record: %v", err)
	}
}

func crc32c(b []byte) uint32 {
	var h [4]byte
	sealRecordCRC(h[:], b)
	return le.Uint32(h[:])
}

// TestStaleTailAndOrphan leaves bytes past an object's size and a file for an
// object that never committed, as a crash in the eager phase would.
func TestStaleTailAndOrphan(t *testing.T) {
	d, dir := newTarget(t, MinJournalSize)
	f, orphan := fidN(1), fidN(2)
	mustDo(t, d, func(tx osd.Tx) error {
		return errors.Join(tx.Create(f, osd.Attr{}), tx.WriteAt(f, [][]byte{[]byte("committed")}, 0))
	})
	if err := d.Sync(bg); err != nil {
		t.Fatal(err)
	}
	abandon(t, d)
	fh, err := os.OpenFile(objPath(dir, f), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteAt([]byte("GARBAGE"), 20)
	fh.Close()
	os.MkdirAll(bucketDir(dir, orphan), 0o755)
	os.WriteFile(objPath(dir, orphan), []byte("orphan data"), 0o644)

	d = reopen(t, dir)
	defer d.Close()
	if _, err := d.GetAttr(bg, orphan); !errors.Is(err, osd.ErrNotExist) {
		t.Fatalf("an orphan file is an object: %v", err)
	}
	mustDo(t, d, func(tx osd.Tx) error { return tx.Create(orphan, osd.Attr{}) })
	if got := readAll(t, d, orphan); len(got) != 0 {
		t.Fatalf("created over an orphan: %q", got)
	}
	if got := readAll(t, d, f); string(got) != "committed" {
		t.Fatalf("f: %q", got)
	}
	mustDo(t, d, func(tx osd.Tx) error { return tx.WriteAt(f, [][]byte{[]byte("!")}, 40) })
	want := append([]byte("committed"), make([]byte, 31)...)
	want = append(want, '!')
	if got := readAll(t, d, f); !bytes.Equal(got, want) {
		t.Fatalf("the stale tail came back: %q", got)
	}
}

func TestReadOnlyAfterFailure(t *testing.T) {
	d, dir := newTarget(t, MinJournalSize)
	f := fidN(1)
	mustDo(t, d, func(tx osd.Tx) error {
		return errors.Join(tx.Create(f, osd.Attr{}), tx.WriteAt(f, [][]byte{[]byte("kept")}, 0))
	})
	if err := d.Sync(bg); err != nil {
		t.Fatal(err)
	}
	tx, _ := d.Begin(bg)
	tx.WriteAt(f, [][]byte{[]byte("X")}, 10)
	d.fail(errors.New("injected I/O error"))
	if err := tx.Commit(bg); !errors.Is(err, osd.ErrReadOnly) {
		t.Fatalf("Commit on a failed device: %v", err)
	}
	if _, err := d.Begin(bg); !errors.Is(err, osd.ErrReadOnly) || osd.Errno(err) != unix.EROFS {
		t.Fatalf("Begin on a failed device: %v", err)
	}
	if err := d.Sync(bg); !errors.Is(err, osd.ErrReadOnly) {
		t.Fatalf("Sync on a failed device: %v", err)
	}
	if got := readAll(t, d, f); string(got) != "kept" {
		t.Fatalf("read on a failed device: %q", got)
	}
	if s, err := d.Statfs(bg); err != nil || !s.ReadOnly {
		t.Fatalf("statfs on a failed device: %+v, %v", s, err)
	}
	if err := d.Close(); !errors.Is(err, osd.ErrReadOnly) {
		t.Fatalf("Close of a failed device: %v", err)
	}
	d = reopen(t, dir)
	defer d.Close()
	if got := readAll(t, d, f); string(got) != "kept" {
		t.Fatalf("after restart: %q", got)
	}
}

func TestEviction(t *testing.T) {
	fc := DefaultFormatConfig("evict")
	dir := t.TempDir() + "/ost"
	if err := Format(bg, dir, fc); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.MaxCachedObjects = 5
	d, err := Open(bg, dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i := 1; i <= 100; i++ {
		mustDo(t, d, func(tx osd.Tx) error {
			return errors.Join(tx.Create(fidN(i), osd.Attr{UID: uint32(i), Valid: osd.AttrUID}), tx.WriteAt(fidN(i), [][]byte{{byte(i)}}, int64(i)))
		})
	}
	if err := d.Sync(bg); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 100; i++ {
		got := readAll(t, d, fidN(i))
		if len(got) != i+1 || got[i] != byte(i) {
			t.Fatalf("object %d reads %v", i, got)
		}
	}
	d.mu.Lock()
	n := len(d.mu.objects)
	d.mu.Unlock()
	if n > cfg.MaxCachedObjects {
		d.mu.Lock()
		refs := map[int]int{}
		for _, o := range d.mu.objects {
			refs[o.refs]++
		}
		t.Logf("refs histogram %v lru %d", refs, d.mu.lru.Len())
		d.mu.Unlock()
		t.Fatalf("%d objects cached, limit %d", n, cfg.MaxCachedObjects)
	}
}

func TestRegistry(t *testing.T) {
	dir := t.TempDir() + "/ost"
	if err := osd.Format(bg, Name, dir, osd.FormatOptions{Label: "nacre-OST0007"}); err != nil {
		t.Fatal(err)
	}
	d, err := osd.Open(bg, Name, dir, osd.OpenOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Label() != "nacre-OST0007" {
		t.Fatalf("label %q", d.Label())
	}
}

// TestLazyObjects: an object only created has no file (lazy.go) and reads
// as zeros up to its size; a write or a setattr gives it its file (with
// its attributes once its create is durable), a destroy leaves nothing,
// and neither a checkpoint that drops its create record nor a crash
// before one loses it. The bound makes files past it.
func TestLazyObjects(t *testing.T) {
	d, dir := newTarget(t, MinJournalSize)
	a, b, c, e := fidN(1), fidN(2), fidN(3), fidN(4)
	fileless := func(d *Device, f fid.FID) bool {
		t.Helper()
		_, err := os.Stat(objPath(d.dir, f))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return err != nil
	}
	sync := func(d *Device) {
		t.Helper()
		if err := d.Sync(bg); err != nil {
			t.Fatal(err)
		}
	}
	mustDo(t, d, func(tx osd.Tx) error {
		return errors.Join(tx.Create(a, osd.Attr{}), tx.Create(b, osd.Attr{Size: 100, Valid: osd.AttrSize}),
			tx.Create(c, osd.Attr{}), tx.Create(e, osd.Attr{UID: 5, Valid: osd.AttrUID}))
	})
	sync(d)
	for _, f := range []fid.FID{a, b, c, e} {
		if !fileless(d, f) {
			t.Fatalf("%v has a file after its create alone", f)
		}
	}
	if n := d.lazyCount.Load(); n != 4 {
		t.Fatalf("%d lazy objects, want 4", n)
	}
	// A create that fails gives its reservation back.
	tx, _ := d.Begin(bg)
	tx.Create(a, osd.Attr{})
	if err := tx.Commit(bg); !errors.Is(err, osd.ErrExist) {
		t.Fatalf("create of an existing lazy object: %v", err)
	}
	if n := d.lazyCount.Load(); n != 4 {
		t.Fatalf("%d lazy objects after a failed create, want 4", n)
	}
	if at, err := d.GetAttr(bg, b); err != nil || at.Size != 100 || at.Blocks != 0 {
		t.Fatalf("GetAttr of a lazy object: %+v, %v", at, err)
	}
	buf := bytes.Repeat([]byte{0xff}, 150)
	if n, err := d.ReadAt(bg, b, [][]byte{buf}, 0); err != nil || n != 100 || !bytes.Equal(buf[:100], make([]byte, 100)) {
		t.Fatalf("read of a lazy object of 100 bytes: %d, %v, %q", n, err, buf[:n])
	}

	// A write and a setattr make the files.
	mustDo(t, d, func(tx osd.Tx) error { return tx.WriteAt(a, [][]byte{[]byte("hello")}, 10) })
	mustDo(t, d, func(tx osd.Tx) error { return tx.SetAttr(c, osd.Attr{UID: 7, Valid: osd.AttrUID}) })
	sync(d)
	if fileless(d, a) || fileless(d, c) {
		t.Fatal("a write or setattr left a lazy object without its file")
	}
	if got := readAll(t, d, a); string(got) != "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00hello" {
		t.Fatalf("a: %q", got)
	}
	for _, f := range []fid.FID{a, c} {
		if _, err := unix.Getxattr(objPath(d.dir, f), d.xattr, make([]byte, lmaSize)); err != nil {
			t.Fatalf("the file of %v has no attributes once durable: %v", f, err)
		}
	}
	// A destroy leaves no file.
	mustDo(t, d, func(tx osd.Tx) error { return tx.Destroy(b) })
	sync(d)
	if _, err := d.GetAttr(bg, b); !errors.Is(err, osd.ErrNotExist) || !fileless(d, b) {
		t.Fatalf("a destroyed lazy object: %v", err)
	}
	if n := d.lazyCount.Load(); n != 1 {
		t.Fatalf("%d lazy objects, want 1 (e)", n)
	}

	// Fill the journal until a checkpoint drops e's create record: e must
	// have its file then, with its attributes, and survive a crash.
	rec := bytes.Repeat([]byte("r"), 64<<10)
	for i := 0; fileless(d, e); i++ {
		if i == 100 {
			t.Fatal("no checkpoint after 6 MiB of records in a 1 MiB journal")
		}
		mustDo(t, d, func(tx osd.Tx) error { return tx.WriteRecord(a, rec, 1<<20) })
		sync(d)
	}
	// And one made after it is in the new generation's records.
	f := fidN(5)
	mustDo(t, d, func(tx osd.Tx) error { return tx.Create(f, osd.Attr{Size: 3, Valid: osd.AttrSize}) })
	sync(d)
	abandon(t, d)
	d = reopen(t, dir)
	if at, err := d.GetAttr(bg, e); err != nil || at.UID != 5 {
		t.Fatalf("e after a checkpoint and a crash: %+v, %v", at, err)
	}
	if at, err := d.GetAttr(bg, f); err != nil || at.Size != 3 || fileless(d, f) {
		t.Fatalf("f after a crash (replayed): %+v, %v, file %v", at, err, !fileless(d, f))
	}
	if at, err := d.GetAttr(bg, c); err != nil || at.UID != 7 {
		t.Fatalf("c after a crash: %+v, %v", at, err)
	}
	if got := readAll(t, d, a); len(got) != 1<<20+len(rec) || string(got[10:15]) != "hello" {
		t.Fatalf("a after a crash: %d bytes, %q at 10", len(got), got[10:15])
	}
	if _, err := d.GetAttr(bg, b); !errors.Is(err, osd.ErrNotExist) {
		t.Fatalf("b after a crash: %v", err)
	}
	d.Close()

	// The bound: past it, creates make their files.
	cfg := testConfig(t)
	cfg.LazyObjects = 1
	d, err := Open(bg, dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	g, h := fidN(6), fidN(7)
	mustDo(t, d, func(tx osd.Tx) error { return errors.Join(tx.Create(g, osd.Attr{}), tx.Create(h, osd.Attr{})) })
	sync(d)
	if fileless(d, g) == fileless(d, h) {
		t.Fatalf("with room for one lazy object, g fileless %v, h fileless %v", fileless(d, g), fileless(d, h))
	}
}

// TestLazyCreateOverStaleFile: a file a create that never committed left
// at an object's path makes the next create of that FID make its file at
// once, truncating it, so that no replay can show its bytes as the new
// object's.
func TestLazyCreateOverStaleFile(t *testing.T) {
	d, dir := newTarget(t, MinJournalSize)
	f := fidN(8)
	if err := d.ensureDir(f); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(objPath(d.dir, f), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustDo(t, d, func(tx osd.Tx) error { return tx.Create(f, osd.Attr{Size: 4, Valid: osd.AttrSize}) })
	if n := d.lazyCount.Load(); n != 0 {
		t.Fatalf("a create over a stale file made a lazy object (%d)", n)
	}
	if err := d.Sync(bg); err != nil {
		t.Fatal(err)
	}
	abandon(t, d)
	d = reopen(t, dir)
	defer d.Close()
	if got := readAll(t, d, f); !bytes.Equal(got, make([]byte, 4)) {
		t.Fatalf("the new object reads %q, want four zeros", got)
	}
}

// TestLazyObjectsNeedInodes: lazy objects count as used inodes in Statfs,
// and creates make their files at once when the store has no more inodes
// for them than a margin, so that a checkpoint can always give every lazy
// object its file.
func TestLazyObjectsNeedInodes(t *testing.T) {
	mnt := tmpfs.Mount(t, "16m,nr_inodes=1200")
	dir := mnt + "/ost"
	d := formatOpen(t, dir, MinJournalSize)
	t.Cleanup(func() { d.Close() }) // before the unmount, whatever happens
	var raw unix.Statfs_t
	lazy := 0
	for i := 1; ; i++ {
		if i > 1200 {
			t.Fatal("creates never stopped being lazy on a store of 1200 inodes")
		}
		f := fidN(i)
		mustDo(t, d, func(tx osd.Tx) error { return tx.Create(f, osd.Attr{}) })
		if _, err := os.Stat(objPath(d.dir, f)); err == nil {
			break // made its file: no inodes to spare
		}
		lazy++
	}
	if err := unix.Statfs(dir, &raw); err != nil {
		t.Fatal(err)
	}
	st, err := d.Statfs(bg)
	if err != nil {
		t.Fatal(err)
	}
	// (The committer may take an inode between the two looks: a bucket
	// directory, say.)
	var after unix.Statfs_t
	if err := unix.Statfs(dir, &after); err != nil {
		t.Fatal(err)
	}
	// It stopped when the store had fewer free inodes than the lazy
	// objects and the margin (the eager create then took one), and every
	// lazy object still has one.
	if lazy == 0 || int64(lazy) != d.lazyCount.Load() || st.FFree > raw.Ffree-uint64(lazy) || st.FFree < after.Ffree-uint64(lazy) ||
		raw.Ffree+1 >= uint64(lazy)+lazyInodeMargin || raw.Ffree < uint64(lazy) {
		t.Fatalf("%d lazy objects (count %d), Statfs FFree %d, store's %d", lazy, d.lazyCount.Load(), st.FFree, raw.Ffree)
	}
	if err := d.Close(); err != nil { // the checkpoint makes every file
		t.Fatalf("close with %d lazy objects: %v", lazy, err)
	}
	d = reopen(t, dir)
	for i := 1; i <= lazy; i++ {
		if _, err := os.Stat(objPath(d.dir, fidN(i))); err != nil {
			t.Fatalf("object %d has no file after close: %v", i, err)
		}
	}
}

// TestAbortStopsTheBatchInFlight: a batch the committer took before Abort
// is not written after it (multiple-mount protection: another node serves
// the store now): neither its journal record nor its changes (an unlink)
// reach the store, and it is durable for nobody. Before, only the next
// batch checked, so Abort's promise that no write would follow was false.
func TestAbortStopsTheBatchInFlight(t *testing.T) {
	d, dir := newTarget(t, 8<<20)
	keep, victim := fidN(1), fidN(2)
	mustDo(t, d, func(tx osd.Tx) error {
		return errors.Join(tx.Create(keep, osd.Attr{}), tx.Create(victim, osd.Attr{}),
			tx.WriteAt(victim, [][]byte{[]byte("victim")}, 0))
	})
	if err := d.Sync(bg); err != nil {
		t.Fatal(err)
	}
	d.jmu.Lock()
	before := d.jmu.durableLSN
	d.jmu.Unlock()
	aborted := make(chan struct{})
	var early atomic.Bool
	testHookSynced = func(d *Device) {
		// The batch's data is synced; Abort comes now, and must wait
		// for this step rather than return while it goes on.
		go func() {
			d.Abort(errors.New("multiple-mount protection: another node serves the target"))
			close(aborted)
		}()
		for d.writable() == nil {
			time.Sleep(time.Millisecond)
		}
		select {
		case <-aborted:
			early.Store(true)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Cleanup(func() { testHookSynced = nil })
	tx, err := d.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(tx.WriteAt(keep, [][]byte{[]byte("data")}, 0), tx.Destroy(victim)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(bg); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(bg); err == nil {
		t.Error("the batch in flight at Abort was made durable")
	}
	<-aborted
	d.Close() // the committer is done with the batch
	if early.Load() {
		t.Error("Abort returned while the committer was writing a batch")
	}
	if _, err := os.Stat(objPath(dir, victim)); err != nil {
		t.Errorf("the batch in flight at Abort reached the store: the destroyed object's file: %v", err)
	}
	d.jmu.Lock()
	after := d.jmu.durableLSN
	d.jmu.Unlock()
	if after != before {
		t.Errorf("durable LSN moved from %d to %d after Abort", before, after)
	}
}
