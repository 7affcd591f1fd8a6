package osc

import (
	"math/rand/v2"
	"testing"
)

// TestPageTable: the chunked table against a map, through sets, gets
// and deletes in runs (the last-used chunk) and at random, across chunk
// boundaries, including deletes that empty the chunk last used.
func TestPageTable(t *testing.T) {
	var tab pageTable
	ref := map[uint64]*page{}
	rng := rand.New(rand.NewPCG(7, 7))
	check := func(i uint64) {
		t.Helper()
		if got, want := tab.get(i), ref[i]; got != want {
			t.Fatalf("get(%d) = %p, want %p", i, got, want)
		}
	}
	for step := range 20000 {
		var i uint64
		if step%3 == 0 {
			i = uint64(rng.IntN(4096)) // scattered
		} else {
			i = uint64(step % 200) // runs through a few chunks
		}
		switch rng.IntN(3) {
		case 0, 1:
			p := &page{idx: i}
			tab.set(i, p)
			ref[i] = p
		case 2:
			tab.del(i)
			delete(ref, i)
		}
		check(i)
		check(i + 1)
		check(i - 1)
		if tab.len() != len(ref) {
			t.Fatalf("step %d: len %d, want %d", step, tab.len(), len(ref))
		}
	}
	seen := map[uint64]bool{}
	for p := range tab.all {
		if ref[p.idx] != p || seen[p.idx] {
			t.Fatalf("all yields page %d (%p), want each of the map's once", p.idx, p)
		}
		seen[p.idx] = true
		tab.del(p.idx) // dropping while walking
	}
	if len(seen) != len(ref) || tab.len() != 0 || len(tab.chunks) != 0 {
		t.Fatalf("walked %d of %d pages; %d left in %d chunks", len(seen), len(ref), tab.len(), len(tab.chunks))
	}
	for i := range uint64(300) {
		if tab.get(i) != nil {
			t.Fatalf("page %d after deleting all", i)
		}
	}
}
