package llite

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/mdc"
)

func TestInoOf(t *testing.T) {
	root := client.FID{Seq: 0x200000007, Oid: 1}
	seen := map[uint64]client.FID{}
	add := func(f client.FID) {
		t.Helper()
		ino := inoOf(f)
		if ino == 0 || ino == 1 || ino == ^uint64(0) {
			t.Fatalf("inoOf(%v) = %#x: reserved", f, ino)
		}
		if g, ok := seen[ino]; ok && g != f {
			t.Fatalf("inoOf(%v) = inoOf(%v) = %#x", f, g, ino)
		}
		seen[ino] = f
		if inoOf(f) != ino {
			t.Fatalf("inoOf(%v) is not stable", f)
		}
	}
	for _, seq := range []uint64{1, 11, 0x200000007, 0x200000400, 0x200000401, 1<<39 - 1, 1 << 39, 1 << 63} {
		for _, oid := range []uint32{0, 1, 2, 0x1ffff, 1<<24 - 1, 1 << 24, ^uint32(0)} {
			for _, ver := range []uint32{0, 1} {
				add(client.FID{Seq: seq, Oid: oid, Ver: ver})
			}
		}
	}
	if got := inoOf(client.FID{Seq: 0x200000400, Oid: 5}); got != 0x200000400<<24|5 {
		t.Fatalf("a normal FID flattens to %#x", got)
	}
	if nodeID(root, root) != 1 || nodeID(root, client.FID{Seq: 0x200000400, Oid: 5}) == 1 {
		t.Fatal("node IDs: the root is 1, others are their inode numbers")
	}
}

func TestMayAccess(t *testing.T) {
	file := client.Attr{Mode: syscall.S_IFREG | 0o640, UID: 10, GID: 20}
	dir := client.Attr{Mode: syscall.S_IFDIR | 0o750, UID: 10, GID: 20}
	user := func(uid, gid uint32, groups ...uint32) client.Cred {
		return client.Cred{UID: uid, GID: gid, Groups: groups}
	}
	for _, tc := range []struct {
		cred client.Cred
		a    client.Attr
		mask uint32
		want bool
	}{
		{user(10, 1), file, 4 | 2, true},
		{user(10, 1), file, 1, false},
		{user(11, 20), file, 4, true},
		{user(11, 20), file, 2, false},
		{user(11, 1, 5, 20), file, 4, true},
		{user(11, 1), file, 4, false},
		{user(11, 1), file, 0, true},
		{client.Root(), file, 4 | 2, true},
		{client.Root(), file, 1, false}, // no x bit at all
		{client.Root(), dir, 1, true},
		{client.Cred{UID: 11, Cap: mdc.CapDacReadSearch}, file, 4, true},
		{client.Cred{UID: 11, Cap: mdc.CapDacReadSearch}, file, 2, false},
		{user(11, 20), dir, 1, true},
		{user(12, 21), dir, 1, false},
	} {
		if got := client.MayAccess(tc.cred, tc.a, nil, tc.mask); got != tc.want {
			t.Errorf("MayAccess(%+v, %o, %d) = %v", tc.cred, tc.a.Mode, tc.mask, got)
		}
	}
}

func TestReadStatus(t *testing.T) {
	pid := uint32(os.Getpid())
	groups, caps, ok := readStatus(pid, uint32(os.Geteuid()), uint32(os.Getegid()))
	if !ok {
		t.Fatal("readStatus of this process failed")
	}
	want, _ := os.Getgroups()
	if len(groups) != len(want) {
		t.Fatalf("groups %v, want %v", groups, want)
	}
	if os.Geteuid() == 0 && caps&mdc.CapRoot == 0 {
		t.Fatalf("root without capabilities: %#x", caps)
	}
	if _, _, ok := readStatus(pid, uint32(os.Geteuid())+1, uint32(os.Getegid())); ok {
		t.Fatal("readStatus accepted another uid")
	}
	if _, _, ok := readStatus(1<<30, 0, 0); ok {
		t.Fatal("readStatus of a missing process")
	}
}

// TestNotifierNeverBlocks: without a kernel to tell, and with queues
// overflowing, the notifier's methods return at once and stop ends it.
func TestNotifierNeverBlocks(t *testing.T) {
	n := newNotifier(slog.New(slog.NewTextHandler(io.Discard, nil)))
	start := time.Now()
	f := client.FID{Seq: 0x200000400, Oid: 1}
	for i := range 3 * queueLen {
		f.Oid = uint32(i)
		n.InvalidateAttr(f)
		n.InvalidateEntry(f, "x")
		n.InvalidateData(f, 0, 0)
	}
	n.beginIO(f)
	n.InvalidateData(f, 0, 0)
	n.endIO(f)
	n.stop()
	n.InvalidateAttr(f) // after stop: dropped
	n.InvalidateData(f, 0, 0)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestKernelReadAheadKB(t *testing.T) {
	for _, c := range []struct{ mb, kb int }{
		{0, 128}, // no library readahead: the kernel's default, never 0
		{1, 1024},
		{4, 4096},
		{64, 4096},
		{1 << 20, 4096},
	} {
		if got := kernelReadAheadKB(c.mb); got != c.kb {
			t.Errorf("max_read_ahead_mb %d: kernel window %d KiB, want %d", c.mb, got, c.kb)
		}
	}
}

// TestNotifierNegatives: the negative entries given to the kernel are
// bounded, and an overflow's invalidateAll takes them all (go-fuse's tree
// does not know them), after which there is room again.
func TestNotifierNegatives(t *testing.T) {
	n := newNotifier(slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer n.stop()
	for i := range maxKernelNegatives {
		if !n.keepNegative(1, fmt.Sprint("missing", i)) {
			t.Fatalf("negative %d refused below the bound", i)
		}
	}
	if !n.keepNegative(1, "missing0") {
		t.Fatal("a negative the kernel has already is refused")
	}
	if n.keepNegative(1, "one-more") {
		t.Fatal("a negative past the bound is allowed")
	}
	n.invalidateAll(false)
	if !n.keepNegative(1, "one-more") {
		t.Fatal("no room after an overflow took every negative")
	}
}

// TestStatAheadStarts: lookups ahead start once the first two entries of
// a page are looked up in order, not on a lookup of some other entry; a
// lookup of an entry in flight waits for it; the rest of the page goes
// ahead once, each entry once.
func TestStatAheadStarts(t *testing.T) {
	var ents []client.DirEntry
	for _, n := range []string{".", "..", "a", "b", "c", "d", "e"} {
		ents = append(ents, client.DirEntry{Name: n})
	}
	sa := newStatAhead(context.Background(), client.FID{}, ents)
	for _, step := range []struct {
		name  string
		start bool
	}{{"d", false}, {"zz", false}, {"a", false}, {"b", true}, {"c", false}} {
		if wait, start := sa.note(&sa.lookups, step.name); wait != nil || start != step.start {
			t.Fatalf("lookup of %q: wait %v, start %v; want start %v", step.name, wait, start, step.start)
		}
	}
	// Ahead: e (c and d were looked up by their callers).
	name, ch := sa.take(&sa.lookups)
	if name != "e" || ch == nil {
		t.Fatalf("first lookup ahead: %q", name)
	}
	if wait, _ := sa.note(&sa.lookups, "e"); wait != ch {
		t.Fatal("a lookup of an entry in flight does not wait for it")
	}
	if wait, _ := sa.note(&sa.glimpses, "e"); wait != nil {
		t.Fatal("a GETATTR waits for a lookup ahead")
	}
	sa.done(&sa.lookups, name, ch)
	select {
	case <-ch:
	default:
		t.Fatal("done did not end the wait")
	}
	if name, ch := sa.take(&sa.lookups); ch != nil {
		t.Fatalf("a second lookup ahead: %q", name)
	}
	// Another page's first two entries start its own.
	sa2 := newStatAhead(context.Background(), client.FID{}, ents[2:4])
	sa2.note(&sa2.lookups, "a")
	if _, start := sa2.note(&sa2.lookups, "b"); !start {
		t.Fatal("the next page did not start")
	}
	// Glimpses: two GETATTRs in page order, entries between them skipped
	// (not regular files), start them; the next is the one after.
	sa3 := newStatAhead(context.Background(), client.FID{}, ents)
	if _, start := sa3.note(&sa3.glimpses, "a"); start {
		t.Fatal("glimpses ahead after one GETATTR")
	}
	if _, start := sa3.note(&sa3.glimpses, "c"); !start {
		t.Fatal("GETATTRs of a and c in order did not start the glimpses ahead")
	}
	if name, _ := sa3.take(&sa3.glimpses); name != "d" {
		t.Fatalf("first glimpse ahead: %q, want d", name)
	}
	if name, _ := sa3.take(&sa3.lookups); name != "a" {
		t.Fatalf("the lookups ahead of the page moved with the glimpses: %q", name)
	}
}
