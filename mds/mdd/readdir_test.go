package mdd

import (
	"fmt"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nacrefs/nacre/internal/fid"
)

// readAll reads dir page by page.
func readAll(t testing.TB, s *Store, dir fid.FID, page int) []DirEntry {
	t.Helper()
	var out []DirEntry
	for cookie := uint64(0); cookie != DirEnd; {
		ents, next, err := s.Readdir(root, dir, cookie, page)
		if err != nil {
			t.Fatalf("readdir %v at %d: %v", dir, cookie, err)
		}
		if next != DirEnd && next <= cookie {
			t.Fatalf("cookie went from %d to %d", cookie, next)
		}
		out = append(out, ents...)
		cookie = next
	}
	return out
}

func TestReaddir(t *testing.T) {
	s := newStore(t)
	d := mkdir(t, s, root, RootFID, "d", 0o755)
	want := map[string]bool{}
	for i := range 50 {
		name := fmt.Sprintf("entry-%d", i)
		if i%7 == 0 {
			mkdir(t, s, root, d, name, 0o755)
		} else {
			create(t, s, root, d, name, 0o644)
		}
		want[name] = true
	}
	for _, page := range []int{1, 3, 64} {
		ents := readAll(t, s, d, page)
		if ents[0].Name != "." || ents[0].FID != d || ents[1].Name != ".." || ents[1].FID != RootFID {
			t.Fatalf("page %d: first entries %+v %+v", page, ents[0], ents[1])
		}
		got := map[string]bool{}
		for i, e := range ents[2:] {
			if got[e.Name] {
				t.Fatalf("page %d: %q twice", page, e.Name)
			}
			got[e.Name] = true
			if i > 0 && e.Cookie < ents[i+1].Cookie {
				t.Fatalf("page %d: not in hash order at %q", page, e.Name)
			}
			wantType := DTReg
			var k int
			fmt.Sscanf(e.Name, "entry-%d", &k)
			if k%7 == 0 {
				wantType = DTDir
			}
			if e.Type != wantType || e.Cookie != NameHash(e.Name) {
				t.Fatalf("entry %+v", e)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("page %d: %d names, want %d", page, len(got), len(want))
		}
	}
	// Resuming from an entry's cookie starts with that entry.
	ents, _, _ := s.Readdir(root, d, 0, 10)
	again, _, _ := s.Readdir(root, d, ents[5].Cookie, 2)
	if again[0].Name != ents[5].Name {
		t.Fatalf("resume at %d gave %q, want %q", ents[5].Cookie, again[0].Name, ents[5].Name)
	}
	if ents, next, err := s.Readdir(root, d, DirEnd, 10); err != nil || len(ents) != 0 || next != DirEnd {
		t.Fatalf("readdir at end = %v, %d, %v", ents, next, err)
	}
}

// TestReaddirHashCollision forces three entries onto one hash: a page
// never splits them, so the cookie stays exact.
func TestReaddirHashCollision(t *testing.T) {
	s := newStore(t)
	d := mkdir(t, s, root, RootFID, "d", 0o755)
	f := create(t, s, root, d, "real", 0o644)
	h := NameHash("real") - 1
	var keys [][]byte
	for _, name := range []string{"c1", "c2", "c3"} {
		k := direntHashKey(d, h)
		k = append(k, name...)
		keys = append(keys, k)
		if err := s.db.Set(k, marshalDirent(f, DTReg), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { // the fake entries would fail Check
		for _, k := range keys {
			s.db.Delete(k, pebble.NoSync)
		}
	}()
	ents, next, err := s.Readdir(root, d, 2, 1)
	if err != nil || len(ents) != 3 || next != NameHash("real") {
		t.Fatalf("page at a collision = %+v, next %d, %v", ents, next, err)
	}
	for _, e := range ents {
		if e.Cookie != h {
			t.Fatalf("entry %+v", e)
		}
	}
	ents, next, _ = s.Readdir(root, d, next, 1)
	if len(ents) != 1 || ents[0].Name != "real" || next != DirEnd {
		t.Fatalf("next page = %+v, %d", ents, next)
	}
}

// bulkCreate adds names as empty files in dir, many per batch: the
// 100,000-entry test needs a big directory fast. It keeps every invariant
// Check verifies.
func bulkCreate(t testing.TB, s *Store, dir fid.FID, names []string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.db.NewBatch()
	for i, name := range names {
		f, err := s.mintLocked()
		if err != nil {
			t.Fatal(err)
		}
		n := &inode{Attr: Attr{FID: f, Mode: S_IFREG | 0o644, Nlink: 1}}
		b.Set(fidKey(pfxInode, f), n.marshal(), nil)
		b.Set(direntKey(dir, name), marshalDirent(f, DTReg), nil)
		b.Set(linkKey(f, dir, name), nil, nil)
		if i%10000 == 9999 || i == len(names)-1 {
			s.mu.inodes += uint64(i%10000 + 1)
			b.Set(keyInodes, u64Val(s.mu.inodes), nil)
			if err := b.Commit(pebble.NoSync); err != nil {
				t.Fatal(err)
			}
			b.Close()
			b = s.db.NewBatch()
		}
	}
	b.Close()
}

// TestReaddirConcurrent reads a 100,000-entry directory page by page while
// another goroutine creates and unlinks other names in it: every name
// present throughout appears exactly once, the others at most once.
func TestReaddirConcurrent(t *testing.T) {
	s := newStore(t)
	d := mkdir(t, s, root, RootFID, "big", 0o755)
	n := 100000
	if testing.Short() {
		n = 10000
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("stable-%06d", i)
	}
	bulkCreate(t, s, d, names)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var churn atomic.Int64
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			name := fmt.Sprintf("churn-%d", i)
			if _, err := s.Create(root, d, name, Spec{Mode: 0o644}); err != nil {
				t.Error(err)
				return
			}
			if i%2 == 0 {
				if _, err := s.Unlink(root, d, name); err != nil {
					t.Error(err)
					return
				}
			}
			churn.Add(1)
		}
	})
	seen := map[string]int{}
	pages := 0
	for cookie := uint64(0); cookie != DirEnd; pages++ {
		ents, next, err := s.Readdir(root, d, cookie, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			seen[e.Name]++
		}
		cookie = next
	}
	stop.Store(true)
	wg.Wait()
	for _, name := range names {
		if seen[name] != 1 {
			t.Fatalf("%q seen %d times", name, seen[name])
		}
	}
	for name, c := range seen {
		if c != 1 {
			t.Fatalf("%q seen %d times", name, c)
		}
	}
	t.Logf("%d pages, %d entries seen, %d concurrent creates", pages, len(seen), churn.Load())
	if churn.Load() == 0 {
		t.Log("the writer made no change during the read")
	}
}

func TestFID2PathDeep(t *testing.T) {
	s := newStore(t)
	d := RootFID
	for _, name := range []string{"a", "b", "c"} {
		d = mkdir(t, s, root, d, name, 0o755)
	}
	f := create(t, s, root, d, "f", 0o644)
	s.Link(root, f, RootFID, "top")
	paths, err := s.FID2Path(f)
	if err != nil || !reflect.DeepEqual(paths, []string{"/a/b/c/f", "/top"}) {
		t.Fatalf("fid2path = %v, %v", paths, err)
	}
	if p, _ := s.FID2Path(RootFID); !reflect.DeepEqual(p, []string{"/"}) {
		t.Fatalf("fid2path of root = %v", p)
	}
	_, err = s.FID2Path(fid.FID{Seq: fid.SeqNormal, Oid: 999})
	wantErrno(t, "fid2path of nothing", err, syscall.ENOENT)
	sort.Strings(paths)
}
