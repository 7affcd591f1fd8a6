package client_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/internal/params"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// TestLibraryEndToEnd: a client mounted from the MGS creates a file
// striped over every OST, writes it at random offsets, reads it back byte
// for byte, and a second client sees the same bytes and size; namespace
// operations and their errors.
func TestLibraryEndToEnd(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 4})
	fs := c.Mount(0)
	if got := fs.OSTs(); len(got) != 4 {
		t.Fatalf("OSTs %v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cred := client.Root()
	root := fs.Root()
	dir, err := fs.Mkdir(ctx, cred, root, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	lay := layout.Plain(layout.RAID0{StripeCount: 4, StripeSize: 64 << 10, StripeOffset: -1})
	f, a, err := fs.Create(ctx, cred, dir.FID, "f", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Created() || a.Size != 0 || f.Layout() == nil || f.Layout().Components[0].StripeCount != 4 {
		t.Fatalf("create: %+v layout %v", a, f.Layout())
	}
	const size = 3<<20 + 12345
	want := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		off := rng.IntN(size - 1)
		n := min(rng.IntN(200<<10)+1, size-off)
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		if _, _, err := f.WriteAt(ctx, buf, int64(off)); err != nil {
			t.Fatal(err)
		}
		copy(want[off:], buf)
	}
	if _, _, err := f.WriteAt(ctx, want[size-1:], size-1); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}

	fs2 := c.Mount(1)
	a2, err := fs2.Lookup(ctx, cred, dir.FID, "f")
	if err != nil || a2.Size != size || a2.Mode != syscall.S_IFREG|0o644 {
		t.Fatalf("lookup from client 2: %+v %v", a2, err)
	}
	g, _, err := fs2.Open(ctx, cred, a2.FID, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size+100)
	n, err := g.ReadAt(ctx, got, 0)
	if n != size || !errors.Is(err, io.EOF) || !bytes.Equal(got[:n], want) {
		t.Fatalf("read %d %v, equal %v", n, err, bytes.Equal(got[:n], want))
	}
	// Client 1 truncates; client 2 sees it at once.
	if _, err := fs.Setattr(ctx, cred, a2.FID, client.SetAttr{Valid: 1 << 3, Size: 1000}); err != nil {
		t.Fatal(err)
	}
	if sz, err := g.Size(ctx); err != nil || sz != 1000 {
		t.Fatalf("size after truncate: %d %v", sz, err)
	}
	g.Close(ctx)

	// Errors.
	if _, err := fs.Lookup(ctx, cred, dir.FID, "nope"); client.Errno(err) != syscall.ENOENT {
		t.Fatalf("lookup of a missing name: %v", err)
	}
	if _, err := fs.Mkdir(ctx, cred, dir.FID, "f", 0o755); client.Errno(err) != syscall.EEXIST {
		t.Fatalf("mkdir over a file: %v", err)
	}
	if _, err := fs.Lookup(ctx, cred, dir.FID, string(bytes.Repeat([]byte("x"), 256))); client.Errno(err) != syscall.ENAMETOOLONG {
		t.Fatalf("long name: %v", err)
	}
	if err := fs.Rmdir(ctx, cred, root, "d"); client.Errno(err) != syscall.ENOTEMPTY {
		t.Fatalf("rmdir of a full directory: %v", err)
	}
	ents, _, err := fs.ReadDir(ctx, cred, dir.FID, 0, 0)
	if err != nil || len(ents) != 3 || ents[2].Name != "f" {
		t.Fatalf("readdir %+v %v", ents, err)
	}
	if err := fs.Unlink(ctx, cred, dir.FID, "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs2.Lookup(ctx, cred, dir.FID, "f"); client.Errno(err) != syscall.ENOENT {
		t.Fatalf("client 2 still sees the unlinked file: %v", err)
	}
	st, err := fs.Statfs(ctx)
	if err != nil || st.Blocks == 0 || st.Files == 0 {
		t.Fatalf("statfs %+v %v", st, err)
	}
}

// TestExplicitMtimeSurvivesClose: a writer's close sets the mtime, unless
// the times were set explicitly after its first write (touch -d, cp -p
// while the file is still open, or FUSE releasing after close(2)).
func TestExplicitMtimeSurvivesClose(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	fs := c.Mount(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cred := client.Root()
	f, _, err := fs.Create(ctx, cred, fs.Root(), "t", syscall.O_RDWR|syscall.O_CREAT, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.WriteAt(ctx, []byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	when := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC).UnixNano()
	if _, err := fs.Setattr(ctx, cred, f.FID(), client.SetAttr{Valid: 1<<4 | 1<<5, Atime: when, Mtime: when}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if a, err := fs.Getattr(ctx, cred, f.FID()); err != nil || a.Mtime != when {
		t.Fatalf("mtime after close %v (%v), want %v", time.Unix(0, a.Mtime), err, time.Unix(0, when))
	}
	// Without an explicit set, the close's mtime is the writes'.
	g, _, err := fs.Open(ctx, cred, f.FID(), syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second).UnixNano()
	g.WriteAt(ctx, []byte("more"), 4)
	// The mtime is the write's, not the close's (which carries it).
	time.Sleep(20 * time.Millisecond)
	closing := time.Now().UnixNano()
	g.Close(ctx)
	if a, err := fs.Getattr(ctx, cred, f.FID()); err != nil || a.Mtime < before || a.Mtime >= closing {
		t.Fatalf("mtime after a write %v (%v), want between %v and %v", time.Unix(0, a.Mtime), err, time.Unix(0, before), time.Unix(0, closing))
	}
}

// TestTimesAcrossClients: another client sees a write's mtime as soon as
// the write returns, while the writer still has the file open with the
// data in its cache (the glimpse brings the writer's time, as Lustre's
// LVB does), and an explicit older time set by one client (touch -d) wins
// everywhere over the writes before it, also over a writer's cached ones,
// until the next write.
func TestTimesAcrossClients(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	a, b := c.Mount(0), c.Mount(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cred := client.Root()
	lay := layout.Plain(layout.RAID0{StripeCount: 2, StripeSize: 1 << 16})
	f, _, err := a.Create(ctx, cred, a.Root(), "m", syscall.O_RDWR|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	if _, _, err := f.WriteAt(ctx, []byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	seen := func(fs *client.FS, who string) client.Attr {
		t.Helper()
		at, err := fs.Getattr(ctx, cred, f.FID())
		if err != nil {
			t.Fatalf("%s: getattr: %v", who, err)
		}
		return at
	}
	first := seen(b, "b")
	time.Sleep(20 * time.Millisecond)
	before := time.Now().UnixNano()
	// Past the first stripe: the second object gets the newer time.
	if _, _, err := f.WriteAt(ctx, []byte("more"), 1<<16+5); err != nil {
		t.Fatal(err)
	}
	for _, fs := range []*client.FS{b, a} {
		at := seen(fs, "after a write")
		if at.Size != 1<<16+9 || at.Mtime < before || at.Ctime < before || at.Mtime <= first.Mtime {
			t.Fatalf("after a write at %v: size %d mtime %v ctime %v (first mtime %v)", time.Unix(0, before), at.Size,
				time.Unix(0, at.Mtime), time.Unix(0, at.Ctime), time.Unix(0, first.Mtime))
		}
	}
	// b sets an old time while a holds the data in its cache.
	if _, _, err := f.WriteAt(ctx, []byte("cached"), 100); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC).UnixNano()
	if _, err := b.Setattr(ctx, cred, f.FID(), client.SetAttr{Valid: 1 << 5, Mtime: old}); err != nil {
		t.Fatal(err)
	}
	for _, fs := range []*client.FS{a, b} {
		if at := seen(fs, "after touch -d"); at.Mtime != old {
			t.Fatalf("mtime after an explicit set: %v, want %v", time.Unix(0, at.Mtime), time.Unix(0, old))
		}
	}
	got := make([]byte, 6)
	// The cached write reached the OST before the time was set.
	g, _, err := b.Open(ctx, cred, f.FID(), syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	if _, err := g.ReadAt(ctx, got, 100); err != nil || string(got) != "cached" {
		t.Fatalf("read %q, %v", got, err)
	}
	before = time.Now().UnixNano()
	if _, _, err := f.WriteAt(ctx, []byte("again"), 0); err != nil {
		t.Fatal(err)
	}
	for _, fs := range []*client.FS{b, a} {
		if at := seen(fs, "after the next write"); at.Mtime < before {
			t.Fatalf("mtime after the next write: %v, want at least %v", time.Unix(0, at.Mtime), time.Unix(0, before))
		}
	}
}

// LookupLazySize gives the MDT's lazy size (LSOM, as of the last close)
// without glimpsing the objects; Lookup gives the objects' size.
func TestLookupLazySize(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	a, b := c.Mount(0), c.Mount(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cred := client.Root()
	f, _, err := a.Create(ctx, cred, a.Root(), "lazy", syscall.O_RDWR|syscall.O_CREAT, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.WriteAt(ctx, []byte("some data"), 0); err != nil {
		t.Fatal(err)
	}
	full, err := b.Lookup(ctx, cred, b.Root(), "lazy")
	if err != nil {
		t.Fatal(err)
	}
	lazy, err := b.LookupLazySize(ctx, cred, b.Root(), "lazy")
	if err != nil {
		t.Fatal(err)
	}
	if full.Size != 9 || lazy.Size != 0 {
		t.Errorf("while open for writing: Lookup size %d, LookupLazySize %d; want 9 (the objects') and 0 (the MDT's)", full.Size, lazy.Size)
	}
	if lazy.FID != full.FID || lazy.Mode != full.Mode || lazy.Nlink != full.Nlink || lazy.UID != full.UID {
		t.Errorf("LookupLazySize %+v differs from Lookup %+v beyond the size", lazy, full)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The close told the MDT the size: a client that never looked finds it.
	if got, err := c.Mount(2).LookupLazySize(ctx, cred, b.Root(), "lazy"); err != nil || got.Size != 9 {
		t.Errorf("after close: LookupLazySize size %d, %v; want 9", got.Size, err)
	}
	if _, err := b.LookupLazySize(ctx, cred, b.Root(), "missing"); client.Errno(err) != syscall.ENOENT {
		t.Errorf("LookupLazySize of a missing name: %v, want ENOENT", err)
	}
}

// Unlinking, removing and renaming names the client looked up gives their
// files' locks back inside the change's request (early lock cancel): the
// MDT has no lock to call back, so no blocking AST and no CANCEL RPC.
func TestChangeGivesBackLocks(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	cfg := c.ClientConfig(0)
	cfg.LRUSize = 1000 // keep every lock the test takes
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fs, err := client.Mount(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close(ctx)
	cred := client.Root()
	d, err := fs.Mkdir(ctx, cred, fs.Root(), "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	for i := range n {
		f, _, err := fs.Create(ctx, cred, d.FID, fmt.Sprint("f", i), syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fs.Mkdir(ctx, cred, d.FID, "sub", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "sub"} {
		if _, err := fs.Lookup(ctx, cred, d.FID, name); err != nil {
			t.Fatal(err)
		}
	}
	before := fs.LockStats()
	for i := range n - 2 {
		if err := fs.Unlink(ctx, cred, d.FID, fmt.Sprint("f", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.Rename(ctx, cred, d.FID, "f6", d.FID, "f7", 0); err != nil {
		t.Fatal(err)
	}
	if err := fs.Rmdir(ctx, cred, d.FID, "sub"); err != nil {
		t.Fatal(err)
	}
	after := fs.LockStats()
	if got := after.BlockingASTs - before.BlockingASTs; got != 0 {
		t.Errorf("%d blocking ASTs for changes of names the client had looked up, want 0", got)
	}
	if after.EarlyCancels == before.EarlyCancels {
		t.Error("no lock was given back inside a change's request")
	}
	if _, err := fs.Lookup(ctx, cred, d.FID, "f0"); client.Errno(err) != syscall.ENOENT {
		t.Errorf("lookup of an unlinked name: %v, want ENOENT", err)
	}
	if a, err := fs.Lookup(ctx, cred, d.FID, "f7"); err != nil || a.Nlink != 1 {
		t.Errorf("lookup of the rename's target: %+v, %v", a, err)
	}
}

// twoInDir starts a cluster with two clients and makes directory d with
// the first, for the tests of missing names.
func twoInDir(t *testing.T) (ctx context.Context, a, b *client.FS, cred client.Cred, d client.Attr) {
	t.Helper()
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	a, b, cred = c.Mount(0), c.Mount(1), client.Root()
	d, err := a.Mkdir(ctx, cred, a.Root(), "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, a, b, cred, d
}

// madeFile makes the empty file name in dir through fs and returns its FID.
func madeFile(t *testing.T, fs *client.FS, cred client.Cred, dir client.FID, name string) client.FID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, _, err := fs.Create(ctx, cred, dir, name, syscall.O_RDWR|syscall.O_CREAT, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return f.FID()
}

// TestConvertedLocksDoNotPileUp: a change in a directory converts the
// directory lock a client holds (UPDATE goes, LOOKUP stays) and the next
// getattr is granted a new lock with every bit; the converted one, which
// the new lock covers, is given back, so that a client alternating the two
// keeps one lock on the directory, not one more per change (each was
// scanned by every enqueue on the directory until the LRU dropped it).
func TestConvertedLocksDoNotPileUp(t *testing.T) {
	ctx, a, b, cred, d := twoInDir(t)
	if _, err := a.Getattr(ctx, cred, d.FID); err != nil {
		t.Fatal(err)
	}
	before := a.LockStats()
	const n = 30
	mtime := d.Mtime
	for i := range n {
		madeFile(t, b, cred, d.FID, fmt.Sprint("f", i))
		got, err := a.Getattr(ctx, cred, d.FID)
		if err != nil {
			t.Fatal(err)
		}
		// Each create moved the directory's mtime: the getattr is not
		// answered from the lock given back.
		if got.Nlink != d.Nlink || got.Mtime <= mtime {
			t.Fatalf("getattr after create %d: nlink %d mtime %d, want nlink %d and an mtime after %d", i, got.Nlink, got.Mtime, d.Nlink, mtime)
		}
		mtime = got.Mtime
	}
	after := a.LockStats()
	if got := after.Enqueues - before.Enqueues; got < n {
		t.Fatalf("%d enqueues for %d getattrs of a directory changed before each, want one each", got, n)
	}
	if got := after.Served - before.Served; got < n-1 {
		t.Errorf("%d converted directory locks given back as served, want at least %d", got, n-1)
	}
	if after.Locks > before.Locks+1 {
		t.Errorf("the client holds %d locks after %d getattrs of a changing directory (%d before), want at most one more", after.Locks, n, before.Locks)
	}
}

// TestModeUnderPermLock: a directory's mode is answered from the cache
// while a lock with the PERM bit covers it, also after a change in the
// directory took its other attributes out of date (no RPC), and follows a
// chmod by either client at once.
func TestModeUnderPermLock(t *testing.T) {
	ctx, a, b, cred, d := twoInDir(t)
	if _, err := a.Getattr(ctx, cred, d.FID); err != nil {
		t.Fatal(err)
	}
	madeFile(t, b, cred, d.FID, "f") // converts a's lock: UPDATE goes, PERM stays
	before := a.LockStats()
	mode, err := a.Mode(ctx, cred, d.FID)
	if err != nil || mode != syscall.S_IFDIR|0o755 {
		t.Fatalf("mode %#o (%v), want %#o", mode, err, syscall.S_IFDIR|0o755)
	}
	if got := a.LockStats().Enqueues - before.Enqueues; got != 0 {
		t.Errorf("%d enqueues for the mode of a directory under a PERM lock, want 0", got)
	}
	for _, c := range []struct {
		who  string
		fs   *client.FS
		mode uint32
	}{{"the other client", b, 0o700}, {"this client", a, 0o751}} {
		if _, err := c.fs.Setattr(ctx, cred, d.FID, client.SetAttr{Valid: mdc.AttrMode, Mode: c.mode}); err != nil {
			t.Fatal(err)
		}
		if mode, err := a.Mode(ctx, cred, d.FID); err != nil || mode != syscall.S_IFDIR|c.mode {
			t.Errorf("after a chmod %#o by %s: mode %#o (%v)", c.mode, c.who, mode, err)
		}
	}
}

// TestCreateCachesAttributes: a file an open made comes with its
// attributes under a lock (the getattr bits), so that the stat that
// follows asks the MDT nothing; another client's chmod calls the lock
// back and the next stat sees it.
func TestCreateCachesAttributes(t *testing.T) {
	ctx, a, b, cred, d := twoInDir(t)
	f, made, err := a.Create(ctx, cred, d.FID, "f", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o640, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	before := a.LockStats()
	got, err := a.Getattr(ctx, cred, f.FID())
	if err != nil || got.Mode != syscall.S_IFREG|0o640 || got.Size != 0 || got.Ctime != made.Ctime {
		t.Fatalf("stat after create: %+v %v, created %+v", got, err, made)
	}
	if n := a.LockStats().Enqueues - before.Enqueues; n != 0 {
		t.Errorf("%d MDT enqueues for a stat of a file just made, want 0", n)
	}
	if _, err := b.Setattr(ctx, cred, f.FID(), client.SetAttr{Valid: mdc.AttrMode, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Getattr(ctx, cred, f.FID()); err != nil || got.Mode != syscall.S_IFREG|0o600 {
		t.Errorf("stat after another client's chmod: mode %#o (%v), want %#o", got.Mode, err, syscall.S_IFREG|0o600)
	}
}

// TestNegativeLookupsKeepOneLock: every lookup of a missing name is granted
// a PR UPDATE lock on the directory; the client keeps the one it holds and
// gives each new one back with its next request, and the kept lock still
// answers for the directory: a name another client makes is found.
func TestNegativeLookupsKeepOneLock(t *testing.T) {
	ctx, a, b, cred, d := twoInDir(t)
	before := a.LockStats()
	const n = 50
	for i := range n {
		if _, err := a.Lookup(ctx, cred, d.FID, fmt.Sprint("missing", i)); client.Errno(err) != syscall.ENOENT {
			t.Fatalf("lookup of a missing name: %v, want ENOENT", err)
		}
	}
	after := a.LockStats()
	// Looked up again, the missing names cost no RPC: the directory's lock
	// keeps them known missing.
	for i := range n {
		if _, err := a.Lookup(ctx, cred, d.FID, fmt.Sprint("missing", i)); client.Errno(err) != syscall.ENOENT || !a.NegativeCached(d.FID, fmt.Sprint("missing", i)) {
			t.Fatalf("second lookup of a missing name: %v", err)
		}
	}
	if again := a.LockStats(); again.Enqueues != after.Enqueues {
		t.Errorf("%d enqueues for lookups of names known missing, want 0", again.Enqueues-after.Enqueues)
	}
	// The first lookups go to the MDT (the second is served by the lock
	// the first was granted, given back at once); then the client reads
	// the directory's names and answers the rest itself (names.go).
	if got := after.Enqueues - before.Enqueues; got != 2 {
		t.Errorf("%d enqueues for %d negative lookups, want 2", got, n)
	}
	if got := after.Duplicates - before.Duplicates; got != 1 {
		t.Errorf("%d duplicate directory locks given back for %d negative lookups, want 1", got, n)
	}
	if after.Locks > before.Locks+1 {
		t.Errorf("the client holds %d locks after %d negative lookups (%d before), want at most one more", after.Locks, n, before.Locks)
	}
	f, _, err := b.Create(ctx, cred, d.FID, "missing7", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Lookup(ctx, cred, d.FID, "missing7"); err != nil || got.FID != f.FID() {
		t.Errorf("lookup of the name another client made: %+v, %v, want %v", got, err, f.FID())
	}
	if a.NegativeCached(d.FID, "missing8") {
		t.Error("names stay known missing after a create in their directory called the lock back")
	}
}

// TestNameSets: once a client has looked up a few missing names in a
// directory it knows all of its names under the directory's lock: missing
// names cost no RPC, its own creates there keep the lock (the MDT calls
// back everyone else's) and add their names, a name another client makes
// calls the lock back, and so does the client's own unlink.
func TestNameSets(t *testing.T) {
	ctx, a, b, cred, d := twoInDir(t)
	old, _, err := a.Create(ctx, cred, d.FID, "old", syscall.O_RDWR|syscall.O_CREAT, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	old.Close(ctx)
	// a caches d's attributes (under a lock the name set will share).
	if _, err := a.Getattr(ctx, cred, d.FID); err != nil {
		t.Fatal(err)
	}
	missing := func(fs *client.FS, name string) {
		t.Helper()
		if _, err := fs.Lookup(ctx, cred, d.FID, name); client.Errno(err) != syscall.ENOENT {
			t.Fatalf("lookup of %q: %v, want ENOENT", name, err)
		}
	}
	enqueues := func() uint64 { return a.LockStats().Enqueues }
	missing(a, "x0")
	missing(a, "x1") // the second miss reads the names
	e0 := enqueues()
	for i := range 20 {
		missing(a, fmt.Sprint("y", i))
	}
	if got, err := a.Lookup(ctx, cred, d.FID, "old"); err != nil || got.FID != old.FID() {
		t.Fatalf("lookup of a name the set has: %+v %v", got, err)
	}
	// b knows "shared" is missing: a's create of it must call b back.
	missing(b, "shared")
	if !b.NegativeCached(d.FID, "shared") {
		t.Fatal("b does not keep the missing name")
	}
	e1 := enqueues()
	if e1 != e0 { // ("old" a made: its entry came with its create's lock)
		t.Errorf("%d enqueues for 20 lookups of missing names and one of a name there, want 0", e1-e0)
	}
	// mdtest's pattern: look a new name up, make it. One RPC per file.
	for i := range 20 {
		name := fmt.Sprint("f", i)
		missing(a, name)
		f, _, err := a.Create(ctx, cred, d.FID, name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := enqueues() - e1; got != 20 {
		t.Errorf("%d enqueues for 20 lookups and creates of new names, want 20", got)
	}
	for i := range 20 {
		if _, err := a.Lookup(ctx, cred, d.FID, fmt.Sprint("f", i)); err != nil {
			t.Fatalf("lookup of a file a made: %v", err)
		}
	}
	// The directory's cached times follow a's creates.
	da, err := a.Getattr(ctx, cred, d.FID)
	if err != nil {
		t.Fatal(err)
	}
	db, err := b.Getattr(ctx, cred, d.FID)
	if err != nil {
		t.Fatal(err)
	}
	if da.Mtime != db.Mtime || da.Ctime != db.Ctime {
		t.Errorf("a's cached directory times %d/%d, the MDT's %d/%d", da.Mtime, da.Ctime, db.Mtime, db.Ctime)
	}
	// a makes "shared": b's negative entry goes, a's set stays.
	f, _, err := a.Create(ctx, cred, d.FID, "shared", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.Close(ctx)
	if got, err := b.Lookup(ctx, cred, d.FID, "shared"); err != nil || got.FID != f.FID() {
		t.Fatalf("b's lookup of the name a made: %+v %v, want %v", got, err, f.FID())
	}
	e2 := enqueues()
	missing(a, "z")
	if enqueues() != e2 {
		t.Error("a's set went with its own create")
	}
	// b makes "z": a's lock is called back with its set.
	g, _, err := b.Create(ctx, cred, d.FID, "z", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.Close(ctx)
	if got, err := a.Lookup(ctx, cred, d.FID, "z"); err != nil || got.FID != g.FID() {
		t.Fatalf("a's lookup of the name b made: %+v %v, want %v", got, err, g.FID())
	}
	// Read again, after twice as many misses as the first time (the set
	// was lost to another client's change); then a's own unlink drops it.
	for i := range 3 {
		missing(a, fmt.Sprint("w", i))
	}
	e3 := enqueues()
	missing(a, "w3")
	if enqueues() != e3+1 {
		t.Fatal("a set read again after three misses, want four")
	}
	e3 = enqueues()
	missing(a, "w4")
	if enqueues() != e3 {
		t.Fatal("no set after four misses")
	}
	if err := a.Unlink(ctx, cred, d.FID, "f3"); err != nil {
		t.Fatal(err)
	}
	missing(a, "f3")
	if enqueues() == e3 {
		t.Error("the set outlived the client's own unlink")
	}
	// Every name is where both clients say.
	for _, fs := range []*client.FS{a, b} {
		for i := range 20 {
			_, err := fs.Lookup(ctx, cred, d.FID, fmt.Sprint("f", i))
			if (i == 3) != (client.Errno(err) == syscall.ENOENT) || (i != 3 && err != nil) {
				t.Errorf("lookup of f%d: %v", i, err)
			}
		}
	}
}

// TestNameSetOwnCreateRace: a lookup of a name the client is making,
// while the create is in flight, does not leave the name known missing
// once the create is done (the create leaves the directory's lock alone).
func TestNameSetOwnCreateRace(t *testing.T) {
	ctx, a, b, cred, d := twoInDir(t)
	for _, n := range []string{"x0", "x1", "x2"} {
		if _, err := a.Lookup(ctx, cred, d.FID, n); client.Errno(err) != syscall.ENOENT {
			t.Fatal(err)
		}
	}
	// A lookup whose RPC found the name missing before the create's, and
	// that stores it after the create returned, stores nothing.
	reached, release, looked := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	client.SetBeforeStoreNegative(func(name string) {
		if name == "late" {
			close(reached)
			<-release
		}
	})
	client.SetBeforeCreate(func() {
		go func() {
			_, err := a.Lookup(ctx, cred, d.FID, "late")
			looked <- err
		}()
		<-reached
	})
	late, _, err := a.Create(ctx, cred, d.FID, "late", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
	client.SetBeforeCreate(nil)
	if err != nil {
		t.Fatal(err)
	}
	late.Close(ctx)
	close(release)
	if err := <-looked; client.Errno(err) != syscall.ENOENT {
		t.Fatalf("the lookup that raced the create: %v", err)
	}
	client.SetBeforeStoreNegative(nil)
	if got, err := a.Lookup(ctx, cred, d.FID, "late"); err != nil || got.FID != late.FID() || a.NegativeCached(d.FID, "late") {
		t.Fatalf("a's lookup of the file it made after a racing lookup stored it missing: %+v %v", got, err)
	}
	for i := range 10 {
		name := fmt.Sprint("n", i)
		client.SetBeforeCreate(func() {
			// A lookup of the name being made, before the create's RPC:
			// missing yet, from the set or from the MDT.
			if _, err := a.Lookup(ctx, cred, d.FID, name); client.Errno(err) != syscall.ENOENT {
				t.Error(err)
			}
		})
		f, _, err := a.Create(ctx, cred, d.FID, name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
		client.SetBeforeCreate(nil)
		if err != nil {
			t.Fatal(err)
		}
		f.Close(ctx)
		if _, err := b.Lookup(ctx, cred, d.FID, name); err != nil {
			t.Fatalf("b: %v", err)
		}
		if got, err := a.Lookup(ctx, cred, d.FID, name); err != nil || got.FID != f.FID() {
			t.Fatalf("a's lookup of the file it made: %+v %v", got, err)
		}
		if a.NegativeCached(d.FID, name) {
			t.Fatalf("%s known missing after a made it", name)
		}
	}
}

// TestNameSetsTwoCreators: two clients with name sets in one directory
// make files there at once; each create calls back the other's set lock
// (none waits for the other), and every name is found by both after.
func TestNameSetsTwoCreators(t *testing.T) {
	ctx, a, b, cred, d := twoInDir(t)
	fss := []*client.FS{a, b}
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, len(fss))
	for w, fs := range fss {
		wg.Go(func() {
			for i := range n {
				name := fmt.Sprintf("c%d-%d", w, i)
				fs.Lookup(ctx, cred, d.FID, fmt.Sprintf("c%d-%d", 1-w, i)) // the other's next, missing or not
				if _, err := fs.Lookup(ctx, cred, d.FID, name); client.Errno(err) != syscall.ENOENT {
					errs <- fmt.Errorf("lookup of %s before making it: %v", name, err)
					return
				}
				f, _, err := fs.Create(ctx, cred, d.FID, name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
				if err != nil {
					errs <- err
					return
				}
				f.Close(ctx)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, fs := range fss {
		for w := range fss {
			for i := range n {
				if _, err := fs.Lookup(ctx, cred, d.FID, fmt.Sprintf("c%d-%d", w, i)); err != nil {
					t.Fatalf("lookup of c%d-%d: %v", w, i, err)
				}
			}
		}
	}
}

// TestNameSetReadLetsGo: the client reads a directory's names without a
// reference on its lock, so another client's change there need not wait
// for the read, and a set read under a lock called back meanwhile is not
// kept.
func TestNameSetReadLetsGo(t *testing.T) {
	ctx, a, b, cred, d := twoInDir(t)
	if _, err := a.Lookup(ctx, cred, d.FID, "x0"); client.Errno(err) != syscall.ENOENT {
		t.Fatal(err)
	}
	made := make(chan error, 1)
	client.SetBeforeReadNames(func() {
		client.SetBeforeReadNames(nil)
		// b makes a name while a is about to read: b's create calls a's
		// lock back and must not wait for a's read.
		start := time.Now()
		f, _, err := b.Create(ctx, cred, d.FID, "b", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
		if err == nil {
			f.Close(ctx)
			if el := time.Since(start); el > 2*time.Second {
				err = fmt.Errorf("b's create waited %v for a's read", el)
			}
		}
		made <- err
	})
	defer client.SetBeforeReadNames(nil)
	if _, err := a.Lookup(ctx, cred, d.FID, "x1"); client.Errno(err) != syscall.ENOENT { // (reads the names)
		t.Fatal(err)
	}
	if err := <-made; err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lookup(ctx, cred, d.FID, "b"); err != nil {
		t.Fatalf("a's lookup of the name b made while a read the directory: %v", err)
	}
}

// TestNameSetUncertainCreate: a create whose outcome the client cannot
// know (its context ended) leaves nothing of the directory's set or
// missing names to be believed.
func TestNameSetUncertainCreate(t *testing.T) {
	ctx, a, _, cred, d := twoInDir(t)
	for _, n := range []string{"x0", "x1", "x2"} {
		if _, err := a.Lookup(ctx, cred, d.FID, n); client.Errno(err) != syscall.ENOENT {
			t.Fatal(err)
		}
	}
	e0 := a.LockStats().Enqueues
	if _, err := a.Lookup(ctx, cred, d.FID, "x3"); client.Errno(err) != syscall.ENOENT || a.LockStats().Enqueues != e0 {
		t.Fatalf("no set: %v", err)
	}
	// A lookup holds the set's lock meanwhile (so it cannot simply be
	// given back).
	reached, release, looked := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	client.SetBeforeStoreNegative(func(name string) {
		if name == "u" {
			client.SetBeforeStoreNegative(nil)
			close(reached)
			<-release
		}
	})
	defer client.SetBeforeStoreNegative(nil)
	client.SetBeforeCreate(func() {
		// After beginMaking: a lookup of the name being made goes to the
		// MDT, and is granted the set's lock.
		go func() {
			_, err := a.Lookup(ctx, cred, d.FID, "u")
			looked <- err
		}()
		<-reached
	})
	gone, stop := context.WithCancel(ctx)
	stop()
	_, _, err := a.Create(gone, cred, d.FID, "u", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
	client.SetBeforeCreate(nil)
	if err == nil {
		t.Fatal("a create with an ended context succeeded")
	}
	if a.NegativeCached(d.FID, "x3") {
		t.Error("a name stays known missing under the lock of an uncertain create")
	}
	e1 := a.LockStats().Enqueues
	if _, err := a.Lookup(ctx, cred, d.FID, "u"); client.Errno(err) != syscall.ENOENT || a.LockStats().Enqueues == e1 {
		t.Errorf("lookup after an uncertain create: %v, answered from the set: %v", err, a.LockStats().Enqueues == e1)
	}
	close(release)
	if err := <-looked; client.Errno(err) != syscall.ENOENT {
		t.Fatal(err)
	}
	if a.NegativeCached(d.FID, "u") {
		t.Error("a name stored missing under the lock of an uncertain create")
	}
}

// TestNameSetTaintsGo: a lock tainted after it left (another client made
// the name and called it back while the O_CREAT open was on its way) keeps
// no mark for the life of the mount.
func TestNameSetTaintsGo(t *testing.T) {
	ctx, a, b, cred, d := twoInDir(t)
	for i := range 5 {
		name := fmt.Sprint("x", i)
		for _, n := range []string{"m0", "m1", "m2", "m3"} {
			a.Lookup(ctx, cred, d.FID, n+name) // a set again
		}
		client.SetBeforeCreate(func() {
			client.SetBeforeCreate(nil)
			f, _, err := b.Create(ctx, cred, d.FID, name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
			if err != nil {
				t.Error(err)
				return
			}
			f.Close(ctx)
		})
		f, _, err := a.Create(ctx, cred, d.FID, name, syscall.O_RDWR|syscall.O_CREAT, 0o644, nil)
		client.SetBeforeCreate(nil)
		if err != nil {
			t.Fatal(err)
		}
		f.Close(ctx)
		if f.Created() {
			t.Fatal("a made the name b had made")
		}
	}
	if n := a.TaintedLen(); n > 1 {
		t.Errorf("%d locks marked tainted after 5 creates of names another client made first, want at most the last", n)
	}
}

// TestClosesPutOff: the close of a file that was made and not written
// costs no RPC of its own — the next create carries it, or the timer sends
// it — while a written file's close (its size and times) goes at once.
func TestClosesPutOff(t *testing.T) {
	ctx, a, b, cred, d := twoInDir(t)
	create := func(name string) *client.File {
		t.Helper()
		f, _, err := a.Create(ctx, cred, d.FID, name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := create("f")
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if a.OpenHandles() != 1 {
		t.Fatalf("%d opens tracked after the close of an unwritten file, want its put-off one", a.OpenHandles())
	}
	g := create("g") // carries f's close
	if a.OpenHandles() != 1 {
		t.Fatalf("%d opens tracked with g open, want 1", a.OpenHandles())
	}
	if _, _, err := g.WriteAt(ctx, []byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if a.OpenHandles() != 0 {
		t.Fatalf("%d opens tracked after a written file's close", a.OpenHandles())
	}
	if got, err := b.Lookup(ctx, cred, d.FID, "g"); err != nil || got.Size != 4 {
		t.Fatalf("b's lookup of the written file: %+v %v", got, err)
	}
	h := create("h")
	h.Close(ctx)
	within := time.Now().Add(10 * time.Second)
	for a.OpenHandles() != 0 {
		if time.Now().After(within) {
			t.Fatal("a put-off close never went")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// entryRecorder is a Notifier that records the entries it is told of.
type entryRecorder struct {
	mu      sync.Mutex
	entries map[string]int
}

func (r *entryRecorder) InvalidateAttr(client.FID)               {}
func (r *entryRecorder) InvalidateData(client.FID, int64, int64) {}
func (r *entryRecorder) InvalidateEntry(parent client.FID, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries[name]++
}

func (r *entryRecorder) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.entries[name]
}

// recordedMounts starts a cluster and mounts it twice: a, whose Notifier
// records the entries it is told of, and b; d is a directory a made.
func recordedMounts(ctx context.Context, t *testing.T) (a, b *client.FS, rec *entryRecorder, d client.Attr) {
	t.Helper()
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	rec = &entryRecorder{entries: map[string]int{}}
	cfg := c.ClientConfig(0)
	cfg.Notify = rec
	a, err := client.Mount(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	d, err = a.Mkdir(ctx, client.Root(), a.Root(), "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	return a, c.Mount(1), rec, d
}

// TestNegativeEntryNotifications: the kernel hears that a name known
// missing may exist when the directory's lock goes; not when this client
// makes the name itself (the kernel does), unless making it failed.
func TestNegativeEntryNotifications(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b, rec, d := recordedMounts(ctx, t)
	cred := client.Root()
	missing := func(name string) {
		t.Helper()
		if _, err := a.Lookup(ctx, cred, d.FID, name); client.Errno(err) != syscall.ENOENT || !a.NegativeCached(d.FID, name) {
			t.Fatalf("lookup of missing %s: %v", name, err)
		}
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5s", what)
			}
		}
	}
	bCreate := func(name string) {
		t.Helper()
		f, _, err := b.Create(ctx, cred, d.FID, name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Another client's create in the directory: x may exist now.
	missing("x")
	bCreate("y")
	eventually("x invalidated", func() bool { return rec.count("x") == 1 })
	// This client makes z, which it found missing: the kernel's own
	// create replaces its entry, nothing to tell.
	missing("z")
	f, _, err := a.Create(ctx, cred, d.FID, "z", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.Close(ctx)
	// This client's create of w loses to another's: w is told of once
	// the failure is known, though the lock that went no longer had it.
	missing("w")
	done := a.MakingName(d.FID, "w")
	bCreate("w")
	if n := rec.count("w"); n != 0 {
		t.Fatalf("w told of %d times while this client was making it", n)
	}
	done(fmt.Errorf("create: %w", syscall.EEXIST))
	if n := rec.count("w"); n != 1 {
		t.Fatalf("w told of %d times after this client failed to make it, want 1", n)
	}
	if n := rec.count("z"); n != 0 {
		t.Fatalf("z, which this client made, told of %d times", n)
	}
}

// TestCreateFindsNameTaken: an O_CREAT open of a name the client knew
// missing that another client made meanwhile (as a directory: the open
// finds it, without O_EXCL) tells the Notifier, whose kernel keeps its
// negative entry otherwise.
func TestCreateFindsNameTaken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b, rec, d := recordedMounts(ctx, t)
	cred := client.Root()
	if _, err := a.Lookup(ctx, cred, d.FID, "n"); client.Errno(err) != syscall.ENOENT {
		t.Fatal(err)
	}
	client.SetBeforeCreate(func() {
		if _, err := b.Mkdir(ctx, cred, d.FID, "n", 0o755); err != nil {
			t.Error(err)
		}
	})
	f, at, err := a.Create(ctx, cred, d.FID, "n", syscall.O_RDONLY|syscall.O_CREAT, 0o644, nil)
	client.SetBeforeCreate(nil)
	if err != nil || at.Mode&syscall.S_IFMT != syscall.S_IFDIR || f.Created() {
		t.Fatalf("O_CREAT open of the directory b made: mode %o, %v", at.Mode, err)
	}
	f.Close(ctx)
	if n := rec.count("n"); n != 1 {
		t.Fatalf("n told of %d times after the open found it made by another client, want 1", n)
	}
}

// TestEvictedClientSeesNewNames: after the MDT evicts a client, the locks
// it held are gone on both sides, so that a name found missing after the
// reconnection is kept under a lock the MDT will call back when another
// client makes it.
func TestEvictedClientSeesNewNames(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := c.Mount(0), c.Mount(1)
	cred := client.Root()
	d, err := a.Mkdir(ctx, cred, a.Root(), "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lookup(ctx, cred, d.FID, "x"); client.Errno(err) != syscall.ENOENT || !a.NegativeCached(d.FID, "x") {
		t.Fatalf("lookup of missing x: %v", err)
	}
	if _, err := params.Default.Set(params.SetOptions{Partial: true}, params.Assignment{Pattern: "mdt.*.evict_client", Value: "nid:" + clustertest.ClientAddr(0) + "@tcp"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := a.Getattr(ctx, cred, a.Root()); err == nil && !a.NegativeCached(d.FID, "x") {
			break // evicted, reconnected, caches dropped
		}
		if time.Now().After(deadline) {
			t.Fatal("the client does not notice its eviction")
		}
	}
	if st := a.LockStats(); st.Locks > 1 {
		t.Errorf("%d locks known after the eviction (the MDT forgot them)", st.Locks)
	}
	if _, err := a.Lookup(ctx, cred, d.FID, "x"); client.Errno(err) != syscall.ENOENT {
		t.Fatalf("lookup of missing x after the eviction: %v", err)
	}
	f, _, err := b.Create(ctx, cred, d.FID, "x", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.Close(ctx)
	if got, err := a.Lookup(ctx, cred, d.FID, "x"); err != nil || got.FID != f.FID() {
		t.Fatalf("lookup on the evicted client of x, which b made: %+v, %v", got, err)
	}
}

// TestOwnChangesCallNothingBack: a change this client makes gives back,
// with its request, the unused locks the MDT would otherwise call back
// (early lock cancel): the UPDATE bit of the directory an entry is made
// in, the file's UPDATE (and PERM and LOOKUP for a new mode) for a
// setattr, its XATTR for an extended attribute. Each lock called back
// instead cost the change a blocking AST and the client's answer to it
// (mkdir in a directory just looked in went from about 4000/s to 6000/s).
// The change is seen at once by the client that made it.
func TestOwnChangesCallNothingBack(t *testing.T) {
	ctx, a, _, cred, d := twoInDir(t)
	file := madeFile(t, a, cred, d.FID, "f")
	found := func(name string, mode uint32) error {
		got, err := a.Lookup(ctx, cred, d.FID, name)
		if err != nil {
			return err
		}
		if got.Mode&0o170000 != mode {
			return fmt.Errorf("%q has mode %#o, want type %#o", name, got.Mode, mode)
		}
		return nil
	}
	for _, tt := range []struct {
		name  string
		op    func(i int) error
		check func(i int) error // what a sees after the change
	}{
		{"mkdir", func(i int) error { _, err := a.Mkdir(ctx, cred, d.FID, fmt.Sprint("dir", i), 0o755); return err },
			func(i int) error { return found(fmt.Sprint("dir", i), syscall.S_IFDIR) }},
		{"symlink", func(i int) error { _, err := a.Symlink(ctx, cred, d.FID, fmt.Sprint("sl", i), "f"); return err },
			func(i int) error { return found(fmt.Sprint("sl", i), syscall.S_IFLNK) }},
		{"mkfifo", func(i int) error {
			_, err := a.Mknod(ctx, cred, d.FID, fmt.Sprint("fifo", i), syscall.S_IFIFO|0o644, 0)
			return err
		}, func(i int) error { return found(fmt.Sprint("fifo", i), syscall.S_IFIFO) }},
		{"mknod regular", func(i int) error {
			_, err := a.Mknod(ctx, cred, d.FID, fmt.Sprint("reg", i), syscall.S_IFREG|0o644, 0)
			return err
		}, func(i int) error { return found(fmt.Sprint("reg", i), syscall.S_IFREG) }},
		{"link", func(i int) error { _, err := a.Link(ctx, cred, file, d.FID, fmt.Sprint("ln", i)); return err },
			func(i int) error {
				at, err := a.Getattr(ctx, cred, file)
				if err == nil && at.Nlink != uint32(i+2) {
					err = fmt.Errorf("%d links after %d link calls", at.Nlink, i+1)
				}
				return err
			}},
		{"truncate", func(i int) error {
			_, err := a.Setattr(ctx, cred, file, client.SetAttr{Valid: 1 << 3, Size: uint64(100 + i)})
			return err
		}, func(i int) error {
			at, err := a.Getattr(ctx, cred, file)
			if err == nil && at.Size != uint64(100+i) {
				err = fmt.Errorf("size %d after a truncate to %d", at.Size, 100+i)
			}
			return err
		}},
		{"setxattr", func(i int) error { return a.Setxattr(ctx, cred, file, "user.x", []byte{byte(i)}, 0) },
			func(i int) error {
				v, err := a.Getxattr(ctx, cred, file, "user.x")
				if err == nil && !bytes.Equal(v, []byte{byte(i)}) {
					err = fmt.Errorf("user.x is %v after setting it to %v", v, []byte{byte(i)})
				}
				return err
			}},
		{"removexattr", func(i int) error {
			if err := a.Setxattr(ctx, cred, file, "user.y", []byte{1}, 0); err != nil {
				return err
			}
			if _, err := a.Getattr(ctx, cred, file); err != nil {
				return err
			}
			return a.Removexattr(ctx, cred, file, "user.y")
		}, func(int) error {
			if _, err := a.Getxattr(ctx, cred, file, "user.y"); client.Errno(err) != syscall.ENODATA {
				return fmt.Errorf("user.y after its removal: %v, want ENODATA", err)
			}
			return nil
		}},
		{"chmod", func(i int) error {
			_, err := a.Setattr(ctx, cred, file, client.SetAttr{Valid: 1 << 0, Mode: 0o600 | uint32(i)})
			return err
		}, func(i int) error {
			at, err := a.Getattr(ctx, cred, file)
			if err == nil && at.Mode&0o7777 != 0o600|uint32(i) {
				err = fmt.Errorf("mode %#o after chmod %#o", at.Mode, 0o600|i)
			}
			return err
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := a.LockStats()
			for i := range 5 {
				// The locks a lookup in the directory and a stat of
				// the directory and of the file are granted.
				if _, err := a.Lookup(ctx, cred, d.FID, fmt.Sprint("missing-", tt.name, i)); client.Errno(err) != syscall.ENOENT {
					t.Fatalf("lookup of a missing name: %v", err)
				}
				for _, f := range []client.FID{d.FID, file} {
					if _, err := a.Getattr(ctx, cred, f); err != nil {
						t.Fatal(err)
					}
				}
				if err := tt.op(i); err != nil {
					t.Fatal(err)
				}
				if err := tt.check(i); err != nil {
					t.Fatal(err)
				}
			}
			after := a.LockStats()
			if n := after.BlockingASTs - before.BlockingASTs; n != 0 {
				t.Errorf("%d blocking ASTs for 5 changes, want none", n)
			}
			if n := after.CancelRPCs - before.CancelRPCs; n != 0 {
				t.Errorf("%d LDLM_CANCELs for 5 changes, want none", n)
			}
		})
	}
}

// TestSharedXattrsCached: the extended attributes everyone reads alike
// (security.*, the POSIX ACLs), which `ls -l` reads for every file it
// lists, are read from the MDT once while the file's attributes are
// cached under a lock; a change by another client calls the lock back
// and the next read finds the new value, as does one by this client.
func TestSharedXattrsCached(t *testing.T) {
	ctx, a, b, cred, d := twoInDir(t)
	file := madeFile(t, a, cred, d.FID, "f")
	read := func(fs *client.FS, name string) ([]byte, uint64) {
		t.Helper()
		if _, err := fs.Getattr(ctx, cred, file); err != nil {
			t.Fatal(err)
		}
		before := fs.RPCsSent()
		v, err := fs.Getxattr(ctx, cred, file, name)
		if err != nil && client.Errno(err) != syscall.ENODATA {
			t.Fatalf("getxattr %s: %v", name, err)
		}
		if err != nil {
			v = nil
		}
		return v, fs.RPCsSent() - before
	}
	names := []string{"security.selinux", "system.posix_acl_access", "security.test"}
	for _, n := range names {
		// The MDT said with the attributes that the new file has none.
		if v, rpcs := read(a, n); v != nil || rpcs != 0 {
			t.Fatalf("%s of a new file: %q in %d RPCs, want nothing in none", n, v, rpcs)
		}
	}
	for _, n := range names {
		if v, rpcs := read(a, n); v != nil || rpcs != 0 {
			t.Fatalf("%s read again: %q in %d RPCs, want nothing in none", n, v, rpcs)
		}
	}
	// Many other names asked for do not keep a name read often out (after
	// a change of a's, which empties the cache).
	if err := a.Setxattr(ctx, cred, file, "security.tmp", []byte("t"), 0); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		read(a, fmt.Sprint("security.junk", i))
	}
	read(a, "system.posix_acl_access")
	if _, rpcs := read(a, "system.posix_acl_access"); rpcs != 0 {
		t.Fatalf("the ACL read again after 20 other names: %d RPCs, want none", rpcs)
	}
	// A bad name is the MDT's to refuse, cached attributes or not.
	if _, err := a.Getxattr(ctx, cred, file, "security."); client.Errno(err) != syscall.EINVAL {
		t.Fatalf("getxattr of a bare security.: %v, want EINVAL", err)
	}
	// b sets one: a's lock goes, and a reads the value.
	if err := b.Setxattr(ctx, cred, file, "security.test", []byte("from b"), 0); err != nil {
		t.Fatal(err)
	}
	if v, _ := read(a, "security.test"); string(v) != "from b" {
		t.Fatalf("security.test after b set it: %q, want %q", v, "from b")
	}
	if v, rpcs := read(a, "security.test"); string(v) != "from b" || rpcs != 0 {
		t.Fatalf("security.test read again: %q in %d RPCs", v, rpcs)
	}
	// a changes it and removes another's absence by setting it.
	if err := a.Setxattr(ctx, cred, file, "security.test", []byte("from a"), 0); err != nil {
		t.Fatal(err)
	}
	if v, _ := read(a, "security.test"); string(v) != "from a" {
		t.Fatalf("security.test after a set it: %q, want %q", v, "from a")
	}
	if err := a.Removexattr(ctx, cred, file, "security.test"); err != nil {
		t.Fatal(err)
	}
	if v, _ := read(a, "security.test"); v != nil {
		t.Fatalf("security.test after a removed it: %q", v)
	}
	// b removes what a cached as set.
	if err := b.Setxattr(ctx, cred, file, "security.x", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if v, _ := read(a, "security.x"); string(v) != "x" {
		t.Fatalf("security.x: %q", v)
	}
	if err := b.Removexattr(ctx, cred, file, "security.x"); err != nil {
		t.Fatal(err)
	}
	if v, _ := read(a, "security.x"); v != nil {
		t.Fatalf("security.x after b removed it: %q", v)
	}
}

// TestCachedEntriesHonourACLs: an entry cached under a lock is given to
// another caller only if the directory's permission bits allow that
// caller to search it and nothing else could say otherwise: with an ACL
// that denies a named user what the other bits allow, the MDT decides.
func TestCachedEntriesHonourACLs(t *testing.T) {
	ctx, a, _, cred, d := twoInDir(t)
	madeFile(t, a, cred, d.FID, "f")
	// user 1000: nothing; everyone else r-x.
	const undef = 0xffffffff
	acl := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, 7, undef}, {0x02, 0, 1000}, {0x04, 5, undef}, {0x10, 5, undef}, {0x20, 5, undef}} {
		acl = binary.LittleEndian.AppendUint16(acl, e.tag)
		acl = binary.LittleEndian.AppendUint16(acl, e.perm)
		acl = binary.LittleEndian.AppendUint32(acl, e.id)
	}
	if err := a.Setxattr(ctx, cred, d.FID, "system.posix_acl_access", acl, 0); err != nil {
		t.Fatal(err)
	}
	// Root caches the directory and the entry.
	if _, err := a.Getattr(ctx, cred, d.FID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lookup(ctx, cred, d.FID, "f"); err != nil {
		t.Fatal(err)
	}
	denied, other := client.Cred{UID: 1000, GID: 1000}, client.Cred{UID: 1001, GID: 1001}
	if _, err := a.Lookup(ctx, denied, d.FID, "f"); client.Errno(err) != syscall.EACCES {
		t.Fatalf("lookup by the user the ACL denies: %v, want EACCES", err)
	}
	if _, err := a.Lookup(ctx, other, d.FID, "f"); err != nil {
		t.Fatalf("lookup by another user: %v", err)
	}
}
