package mdd

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"

	"github.com/nacrefs/nacre/internal/fid"
)

func TestSequenceController(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.SuperWidth = 4 // a new super range every 4 client sequences
	seen := map[uint64]string{}
	var supers []FLDEntry
	for round := range 3 {
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 6 {
					var seq uint64
					var what string
					if (g+i)%3 == 0 {
						e, err := s.AllocSuperSeq(TargetOST, uint32(g))
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						supers = append(supers, e)
						mu.Unlock()
						for q := e.Start; q < e.End; q++ {
							mu.Lock()
							if prev, dup := seen[q]; dup {
								t.Errorf("round %d: sequence %#x granted twice (%s, super)", round, q, prev)
							}
							seen[q] = "super"
							mu.Unlock()
						}
						continue
					}
					seq, err := s.AllocClientSeq()
					if err != nil {
						t.Error(err)
						return
					}
					what = "client"
					mu.Lock()
					if prev, dup := seen[seq]; dup {
						t.Errorf("round %d: sequence %#x granted twice (%s, %s)", round, seq, prev, what)
					}
					seen[seq] = what
					mu.Unlock()
					if e, err := s.FLDLookup(seq); err != nil || e.Type != TargetMDT || e.Index != 0 {
						t.Errorf("FLD of client sequence %#x = %+v, %v", seq, e, err)
					}
				}
			})
		}
		wg.Wait()
		for _, e := range supers {
			if got, err := s.FLDLookup(e.Start + 1); err != nil || got != e {
				t.Fatalf("FLD lookup in %+v = %+v, %v", e, got, err)
			}
		}
		check(t, s)
		s.Close() // a restart: nothing granted may come back
	}
	s, _ := Open(cfg)
	defer s.Close()
	if e, err := s.FLDLookup(fid.SeqRoot); err != nil || e.Index != 0 || e.Type != TargetMDT {
		t.Fatalf("FLD of the root sequence = %+v, %v", e, err)
	}
	_, err := s.FLDLookup(fid.SeqLOVDefault - 1)
	wantErrno(t, "FLD of an ungranted sequence", err, syscall.ENOENT)
}

func TestFIDAllocator(t *testing.T) {
	s := newStore(t)
	a := NewFIDAllocator(3, s.AllocClientSeq)
	seen := map[fid.FID]bool{}
	seqs := map[uint64]int{}
	for range 10 {
		f, err := a.Next()
		if err != nil || seen[f] || f.Oid == 0 || f.Oid > 3 {
			t.Fatalf("Next = %v, %v", f, err)
		}
		seen[f] = true
		seqs[f.Seq]++
	}
	if len(seqs) != 4 {
		t.Fatalf("10 FIDs of width 3 used %d sequences", len(seqs))
	}
	// A client-minted FID is accepted by Create.
	f, _ := a.Next()
	got, err := s.Create(root, RootFID, "x", Spec{FID: f})
	if err != nil || got.FID != f {
		t.Fatalf("create with a client FID = %v, %v", got.FID, err)
	}
	_, err = s.Create(root, RootFID, "y", Spec{FID: f})
	wantErrno(t, "create with a used FID", err, syscall.EEXIST)
}

// A FID already in use is refused whatever the order clients' FIDs come
// in, also after a restart, when the highest OID of each sequence is
// learned again from the store: FIDs above it skip the inode lookup, the
// others are looked up.
func TestCreateFIDInUse(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	seq, err := s.AllocClientSeq()
	if err != nil {
		t.Fatal(err)
	}
	at := func(oid uint32) fid.FID { return fid.FID{Seq: seq, Oid: oid} }
	mk := func(s *Store, name string, oid uint32, want syscall.Errno) {
		t.Helper()
		got, err := s.Create(root, RootFID, name, Spec{FID: at(oid)})
		if want != 0 {
			wantErrno(t, fmt.Sprintf("create %s with OID %d", name, oid), err, want)
			return
		}
		if err != nil || got.FID != at(oid) {
			t.Fatalf("create %s with OID %d = %v, %v", name, oid, got.FID, err)
		}
	}
	mk(s, "a", 10, 0)
	mk(s, "b", 4, 0) // below the highest: looked up, free
	mk(s, "c", 10, syscall.EEXIST)
	mk(s, "d", 4, syscall.EEXIST)
	mk(s, "e", 11, 0)
	mk(s, "f", 11, syscall.EEXIST)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mk(s, "g", 11, syscall.EEXIST)
	mk(s, "h", 10, syscall.EEXIST)
	mk(s, "i", 7, 0)
	mk(s, "j", 12, 0)
	mk(s, "k", 12, syscall.EEXIST)
	// A directory's FID counts as well.
	if _, err := s.Mkdir(root, RootFID, "dir", Spec{FID: at(20), Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	mk(s, "l", 20, syscall.EEXIST)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestOIDMark drives a sequence's OID mark with creates arriving out of
// order, as from many threads of one client, and checks it against the
// set of OIDs written: it never calls a written OID unused, and it calls
// unused every unwritten one in the window below the highest that it has
// watched since it was made (base 100: what it found at the start).
func TestOIDMark(t *testing.T) {
	m := &oidMark{high: 100, base: 100}
	written := map[uint32]bool{}
	for o := uint32(1); o <= 100; o++ { // in the store before: looked up
		written[o] = true
	}
	r := rand.New(rand.NewPCG(1, 2))
	next := uint32(101)
	var pending []uint32
	for range 20000 {
		// Mint a few, write them in a shuffled order, sometimes jumping.
		for range r.IntN(16) {
			pending = append(pending, next)
			next++
		}
		if r.IntN(500) == 0 {
			next += uint32(r.IntN(3 * oidWindow))
		}
		r.Shuffle(len(pending), func(i, j int) { pending[i], pending[j] = pending[j], pending[i] })
		k := r.IntN(len(pending) + 1)
		for _, o := range pending[:k] {
			m.note(o)
			written[o] = true
		}
		pending = pending[k:]
		lo := uint32(1)
		if m.high > 2*oidWindow {
			lo = m.high - 2*oidWindow
		}
		for o := lo; o <= m.high+8; o++ {
			unused := m.unused(o)
			if unused && written[o] {
				t.Fatalf("OID %d written, called unused (high %d)", o, m.high)
			}
			watched := o > 100 && (m.high < oidWindow || o > m.high-oidWindow)
			if watched && !written[o] && !unused {
				t.Fatalf("OID %d never written, not known unused (high %d)", o, m.high)
			}
		}
	}
}
