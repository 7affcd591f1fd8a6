package mdd

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
)

const objSeq = 0x300000400

func plainOn(objs ...layout.Object) layout.Layout {
	return layout.Plain(layout.RAID0{StripeCount: int32(len(objs)), StripeSize: layout.DefaultStripeSize, StripeOffset: -1, Objects: objs})
}

func obj(ost, oid uint32) layout.Object {
	return layout.Object{OSTIndex: ost, Object: fid.FID{Seq: objSeq, Oid: oid}}
}

// TestAllocOrder: Spec.Alloc runs under the store's lock in apply order,
// before the transno is assigned, and LastObjects follows the highest
// object of each OST, across a reopen.
func TestAllocOrder(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	var next uint32 // guarded by the store's lock (Alloc runs under it)
	var tn uint64
	type pair struct {
		oid     uint32
		transno uint64
	}
	var mu sync.Mutex
	var pairs []pair
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 20 {
				var oid uint32
				r := root
				r.AssignTransno = func() uint64 { tn++; mu.Lock(); pairs = append(pairs, pair{oid, tn}); mu.Unlock(); return tn }
				_, err := s.Create(r, RootFID, fmt.Sprintf("f%d.%d", w, i), Spec{Mode: 0o644, Alloc: func() (layout.Layout, error) {
					next++
					oid = next
					return plainOn(obj(1, oid), obj(2, 1000+oid)), nil
				}})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i, p := range pairs {
		if p.oid != uint32(i+1) || p.transno != uint64(i+1) {
			t.Fatalf("create %d took object %d with transno %d: allocation out of apply order", i, p.oid, p.transno)
		}
	}
	want := map[uint32]fid.FID{1: {Seq: objSeq, Oid: 160}, 2: {Seq: objSeq, Oid: 1160}}
	if got := s.LastObjects(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("last objects %v, want %v", got, want)
	}
	f, err := s.Lookup(root, RootFID, "f3.7")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := s.GetLayout(f.FID); err != nil || len(l.Components[0].Objects) != 2 {
		t.Fatalf("layout %v: %v", l, err)
	}
	check(t, s)
	s.Close()
	if s, err = Open(testConfig(dir)); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.LastObjects(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("last objects after reopen %v, want %v", got, want)
	}
	check(t, s)
}

// TestAllocErrors: a failing Alloc, an invalid layout, and a create that
// fails before Alloc change nothing; Alloc is not called for a create
// that fails its checks.
func TestAllocErrors(t *testing.T) {
	s := newStore(t)
	boom := errors.New("no objects")
	called := 0
	_, err := s.Create(root, RootFID, "a", Spec{Alloc: func() (layout.Layout, error) { called++; return layout.Layout{}, boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("failing alloc: %v", err)
	}
	_, err = s.Create(root, RootFID, "a", Spec{Alloc: func() (layout.Layout, error) { called++; return layout.Layout{}, nil }})
	wantErrno(t, "invalid layout", err, syscall.EINVAL)
	if _, err := s.Lookup(root, RootFID, "a"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("a failed create left an entry: %v", err)
	}
	create(t, s, root, RootFID, "b", 0o644)
	_, err = s.Create(root, RootFID, "b", Spec{Alloc: func() (layout.Layout, error) { called++; return plainOn(obj(0, 1)), nil }})
	wantErrno(t, "existing name", err, syscall.EEXIST)
	_, err = s.Create(user(5, 5), RootFID, "c", Spec{Alloc: func() (layout.Layout, error) { called++; return plainOn(obj(0, 1)), nil }})
	wantErrno(t, "no permission", err, syscall.EACCES)
	if called != 2 || len(s.LastObjects()) != 0 {
		t.Fatalf("alloc called %d times; last objects %v", called, s.LastObjects())
	}
	// A directory takes no layout from Alloc.
	if _, err := s.Mkdir(root, RootFID, "d", Spec{Mode: 0o755, Alloc: func() (layout.Layout, error) { called++; return plainOn(obj(0, 1)), nil }}); err != nil || called != 2 {
		t.Fatalf("mkdir with alloc: %v, called %d", err, called)
	}
}

// TestSetLastObject: a new sequence is recorded durably and only forward;
// layouts given by the caller (Spec.Layout, SetLayout) raise the record
// too.
func TestSetLastObject(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetLastObject(3, fid.FID{Seq: objSeq}); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "backwards", s.SetLastObject(3, fid.FID{Seq: objSeq - 1, Oid: 7}), syscall.EINVAL)
	wantErrno(t, "same", s.SetLastObject(3, fid.FID{Seq: objSeq}), syscall.EINVAL)
	l := plainOn(obj(3, 5))
	if _, err := s.Create(root, RootFID, "x", Spec{Layout: &l}); err != nil {
		t.Fatal(err)
	}
	y := create(t, s, root, RootFID, "y", 0o644)
	if _, err := s.SetLayout(root, y, plainOn(obj(4, 9))); err != nil {
		t.Fatal(err)
	}
	s.Close() // no Sync: SetLastObject is durable by itself, the rest by Close
	if s, err = Open(testConfig(dir)); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := map[uint32]fid.FID{3: {Seq: objSeq, Oid: 5}, 4: {Seq: objSeq, Oid: 9}}
	if got := s.LastObjects(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("last objects %v, want %v", got, want)
	}
	check(t, s)
}

// TestSetLayoutAlloc: alloc sees the current layout, its error changes
// nothing, and its objects raise the OST's last object.
func TestSetLayoutAlloc(t *testing.T) {
	s := newStore(t)
	f := create(t, s, root, RootFID, "f", 0o644)
	boom := errors.New("has objects")
	var seen []*layout.Layout
	alloc := func(cur *layout.Layout) (layout.Layout, error) {
		seen = append(seen, cur)
		if cur != nil {
			return layout.Layout{}, boom
		}
		return plainOn(obj(2, 40)), nil
	}
	l, err := s.SetLayoutAlloc(root, f, alloc)
	if err != nil || len(l.Components[0].Objects) != 1 {
		t.Fatalf("first: %v %v", l, err)
	}
	if _, err := s.SetLayoutAlloc(root, f, alloc); !errors.Is(err, boom) {
		t.Fatalf("second: %v", err)
	}
	if len(seen) != 2 || seen[0] != nil || seen[1] == nil {
		t.Fatalf("alloc saw %v", seen)
	}
	if got := s.LastObjects()[2]; got.Oid != 40 {
		t.Fatalf("last object %v", got)
	}
	if _, err := s.SetLayoutAlloc(user(9, 9), f, alloc); !errors.Is(err, syscall.EACCES) || len(seen) != 2 {
		t.Fatalf("no permission: %v (alloc called %d times)", err, len(seen))
	}
}
