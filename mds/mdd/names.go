package mdd

import (
	"sync/atomic"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/nacrefs/nacre/internal/fid"
)

// nameFilters keeps a Bloom filter of the names in each directory made
// since the store opened, so that a create, mkdir, link or rename learns
// that its new name is free without asking Pebble. For a name that is
// nowhere — the name of every create that succeeds — Pebble answers only
// after searching its memtables and the tables of every level that may
// hold it, the costliest step of a create. A filter has no false
// negatives as long as it holds every name committed in its directory:
// a directory is filtered from the commit that makes it (empty), and
// every entry a commit adds (tx.addEntry is the only writer of entries)
// goes into its filter with the same lock held. A commit that fails
// drops every filter, as it empties the value cache.
//
// Changed under the store's write lock, read under its read lock too: a
// read transaction's lookup of a missing name (a negative lookup, as every
// create through FUSE makes first) is answered without Pebble as well.
type nameFilters struct {
	dirs  map[fid.FID]*nameFilter
	names uint // names the filters are sized for, summed
	// skipped counts lookups a filter answered (tests).
	skipped atomic.Uint64
}

// nameFilter is a scalable Bloom filter (Almeida et al.): when the last
// stage is full a new one twice its size takes the names that follow, with
// half its false-positive rate, so that the rate of the whole stays under
// twice the first stage's. A growing directory never has its names read
// back from Pebble, which would hold the store's write lock for as long.
type nameFilter struct {
	stages []*bloom.BloomFilter
	n      uint // names in the last stage
	limit  uint // names the last stage was sized for
	fp     float64
	total  uint // names the stages were sized for, summed
}

const (
	// nameFilterMin is the size of a new directory's filter, in names.
	nameFilterMin = 1 << 10
	// nameFilterBudget bounds the names all filters are sized for (about
	// 1.2 bytes a name at these rates: 5 MiB). Past it, filters are
	// dropped (whichever the map yields first) to make room; a directory
	// that would need more than half of it loses its filter.
	nameFilterBudget = 1 << 22
	nameFilterFP     = 0.01
)

// track starts an empty filter for directory d, just made.
func (nf *nameFilters) track(d fid.FID) {
	if nf.dirs == nil {
		nf.dirs = make(map[fid.FID]*nameFilter)
	}
	nf.drop(d)
	if !nf.room(nameFilterMin) {
		return
	}
	nf.dirs[d] = &nameFilter{stages: []*bloom.BloomFilter{bloom.NewWithEstimates(nameFilterMin, nameFilterFP)},
		limit: nameFilterMin, fp: nameFilterFP, total: nameFilterMin}
	nf.names += nameFilterMin
}

// room makes room for n more names in the budget, dropping other
// directories' filters, and reports whether it could.
func (nf *nameFilters) room(n uint) bool {
	for other := range nf.dirs {
		if nf.names+n <= nameFilterBudget {
			break
		}
		nf.drop(other)
	}
	return nf.names+n <= nameFilterBudget
}

func (nf *nameFilters) drop(d fid.FID) {
	if f := nf.dirs[d]; f != nil {
		nf.names -= f.total
		delete(nf.dirs, d)
	}
}

// reset forgets every filter.
func (nf *nameFilters) reset() {
	clear(nf.dirs)
	nf.names = 0
}

// absent reports whether name is known not to be in d.
func (nf *nameFilters) absent(d fid.FID, name string) bool {
	f := nf.dirs[d]
	if f == nil {
		return false
	}
	// Hashed once for every stage: a stage's k locations are the first k
	// of the same sequence, and later stages (lower rates) have more.
	locs := bloom.Locations([]byte(name), f.stages[len(f.stages)-1].K())
	for _, s := range f.stages {
		if s.TestLocations(locs[:s.K()]) {
			return false
		}
	}
	nf.skipped.Add(1)
	return true
}

// added puts a committed entry of d in d's filter, if d has one, first
// adding a stage if the last is full (or dropping the filter if that would
// go past the budget).
func (nf *nameFilters) added(d fid.FID, name string) {
	f := nf.dirs[d]
	if f == nil {
		return
	}
	if f.n >= f.limit {
		limit := 2 * f.limit
		if f.total+limit > nameFilterBudget/2 {
			nf.drop(d)
			return
		}
		delete(nf.dirs, d) // not a candidate for room's drops
		nf.names -= f.total
		ok := nf.room(f.total + limit)
		nf.dirs[d] = f
		nf.names += f.total
		if !ok {
			nf.drop(d)
			return
		}
		f.fp /= 2
		f.stages = append(f.stages, bloom.NewWithEstimates(limit, f.fp))
		f.limit, f.n, f.total = limit, 0, f.total+limit
		nf.names += limit
	}
	f.stages[len(f.stages)-1].AddString(name)
	f.n++
}
