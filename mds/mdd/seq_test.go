package mdd

import (
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
