package mdd

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/nacrefs/nacre/internal/errs"
)

// TestNameFilter: a directory made since the store opened answers "no
// such name" from its filter, as it grows stage by stage, and never for a
// name it holds: every name added by create, mkdir, symlink, link or rename is
// still refused with EEXIST, whatever filled the filter, and so are the
// names of a directory made before a restart, which has none.
func TestNameFilter(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Mkdir(root, RootFID, "d", Spec{Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Mkdir(root, RootFID, "other", Spec{Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	// Past two new stages (1024, 2048 and 4096 names).
	const n = 4*nameFilterMin + 10
	for i := range n {
		if _, err := s.Create(root, d.FID, fmt.Sprintf("f%d", i), Spec{Mode: 0o644}); err != nil {
			t.Fatalf("create f%d: %v", i, err)
		}
	}
	if s.names.skipped.Load() < n*9/10 { // 1% false positives go to Pebble
		t.Fatalf("the filter answered %d of %d lookups of new names", s.names.skipped.Load(), n)
	}
	if f := s.names.dirs[d.FID]; f == nil || f.total < n || len(f.stages) != 3 {
		t.Fatalf("filter of d: %+v, want three stages sized for %d names or more", f, n)
	}
	// Names that came other ways than create.
	src, err := s.Create(root, other.FID, "src", Spec{Mode: 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Link(root, src.FID, d.FID, "linked"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rename(root, other.FID, "src", d.FID, "moved", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Mkdir(root, d.FID, "sub", Spec{Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Symlink(root, d.FID, "sym", "f0", Spec{}); err != nil {
		t.Fatal(err)
	}
	names := []string{"linked", "moved", "sub", "sym"}
	for i := 0; i < n; i += 97 {
		names = append(names, fmt.Sprintf("f%d", i))
	}
	names = append(names, fmt.Sprintf("f%d", n-1))
	refused := func(s *Store, when string) {
		t.Helper()
		for _, name := range names {
			_, err := s.Create(root, d.FID, name, Spec{Mode: 0o644})
			wantErrno(t, fmt.Sprintf("%s: create of existing %s", when, name), err, syscall.EEXIST)
			_, err = s.Mkdir(root, d.FID, name, Spec{Mode: 0o755})
			wantErrno(t, fmt.Sprintf("%s: mkdir of existing %s", when, name), err, syscall.EEXIST)
		}
	}
	refused(s, "filtered")
	// Lookups (read transactions) ask the filter too: it answers for a
	// missing name, and every name held is still found.
	skipped := s.names.skipped.Load()
	for i := range 100 {
		_, err := s.Lookup(root, d.FID, fmt.Sprintf("nx%d", i))
		wantErrno(t, "lookup of a missing name", err, syscall.ENOENT)
		if errs.KindOf(err) != errs.NotExist || !strings.Contains(err.Error(), fmt.Sprintf("%q", fmt.Sprintf("nx%d", i))) {
			t.Fatalf("lookup of a missing name: %v (kind %v)", err, errs.KindOf(err))
		}
	}
	if got := s.names.skipped.Load() - skipped; got < 90 {
		t.Errorf("the filter answered %d of 100 lookups of missing names", got)
	}
	for _, name := range names {
		if _, err := s.Lookup(root, d.FID, name); err != nil {
			t.Errorf("lookup of %s: %v", name, err)
		}
	}
	// A name unlinked is free again (the filter still says "maybe").
	if _, err := s.Unlink(root, d.FID, "f1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(root, d.FID, "f1", Spec{Mode: 0o644}); err != nil {
		t.Fatalf("create of unlinked f1: %v", err)
	}
	check(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.names.dirs) != 0 {
		t.Fatalf("%d filters after a restart, want none", len(s.names.dirs))
	}
	refused(s, "after a restart")
	check(t, s)
}

// TestNameFilterBudget: filters beyond the budget are dropped to make
// room, never kept past it, and lookups in a directory without one still
// find its names.
func TestNameFilterBudget(t *testing.T) {
	s := newStore(t)
	dirs := nameFilterBudget/nameFilterMin + 8
	first, err := s.Mkdir(root, RootFID, "d0", Spec{Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(root, first.FID, "x", Spec{Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < dirs; i++ {
		if _, err := s.Mkdir(root, RootFID, fmt.Sprintf("d%d", i), Spec{Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	if s.names.names > nameFilterBudget || len(s.names.dirs) != nameFilterBudget/nameFilterMin {
		t.Fatalf("%d filters sized for %d names, budget %d", len(s.names.dirs), s.names.names, nameFilterBudget)
	}
	// d0 may have lost its filter or kept it: x is there either way.
	_, err = s.Create(root, first.FID, "x", Spec{Mode: 0o644})
	wantErrno(t, "create of existing x", err, syscall.EEXIST)
}
