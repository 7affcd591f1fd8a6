package mdd

import (
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
// Guarded by the store's write lock: only write transactions, which hold
// it, read the filters.
type nameFilters struct {
	dirs  map[fid.FID]*nameFilter
	names uint // names the filters are sized for, summed
	// skipped counts lookups a filter answered (tests).
	skipped uint64
}

type nameFilter struct {
	f     *bloom.BloomFilter
	n     uint // names added
	limit uint // names the filter was sized for
}

const (
	// nameFilterMin is the size of a new directory's filter, in names.
	nameFilterMin = 1 << 10
	// nameFilterBudget bounds the names all filters are sized for (at 1%
	// false positives, about 1.2 bytes a name: 5 MiB). Past it, filters
	// are dropped (whichever the map yields first) to make room; a
	// directory bigger than half of it has none.
	nameFilterBudget = 1 << 22
	nameFilterFP     = 0.01
)

// track starts an empty filter for directory d, just made.
func (nf *nameFilters) track(d fid.FID) {
	if nf.dirs == nil {
		nf.dirs = make(map[fid.FID]*nameFilter)
	}
	nf.put(d, nameFilterMin)
}

// put gives d an empty filter of limit names, making room in the budget.
func (nf *nameFilters) put(d fid.FID, limit uint) *nameFilter {
	nf.drop(d)
	for other := range nf.dirs {
		if nf.names+limit <= nameFilterBudget {
			break
		}
		nf.drop(other)
	}
	f := &nameFilter{f: bloom.NewWithEstimates(limit, nameFilterFP), limit: limit}
	nf.dirs[d] = f
	nf.names += limit
	return f
}

func (nf *nameFilters) drop(d fid.FID) {
	if f := nf.dirs[d]; f != nil {
		nf.names -= f.limit
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
	if f == nil || f.f.TestString(name) {
		return false
	}
	nf.skipped++
	return true
}

// added puts a committed entry of d in d's filter, if d has one, and
// reports whether the filter is now fuller than it was sized for (the
// caller regrows it).
func (nf *nameFilters) added(d fid.FID, name string) (full bool) {
	f := nf.dirs[d]
	if f == nil {
		return false
	}
	f.f.AddString(name)
	f.n++
	return f.n > f.limit
}

// regrowNamesLocked replaces d's full filter with one twice as big,
// filled from d's entries in Pebble (amortized over the names added since
// the last size, a few per create), or drops it if that is beyond the
// budget or the scan fails. The caller holds the write lock.
func (s *Store) regrowNamesLocked(d fid.FID) {
	nf := &s.names
	old := nf.dirs[d]
	if old == nil {
		return
	}
	limit := 2 * old.limit
	if limit > nameFilterBudget/2 {
		nf.drop(d)
		return
	}
	f := nf.put(d, limit)
	lo, _ := fidPrefix(pfxDirent, d)
	err := s.scan(lo, func(k, _ []byte) error {
		if _, _, name, ok := parseDirentKey(k); ok {
			f.f.AddString(name)
			f.n++
		}
		return nil
	})
	if err != nil {
		s.log.Warn("mdd: directory name filter dropped", "dir", d, "err", err)
		nf.drop(d)
	}
}
