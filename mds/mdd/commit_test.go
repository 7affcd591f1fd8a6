package mdd

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/fid"
)

func TestCommitTransnos(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SyncInterval = 5 * time.Millisecond
	var reported atomic.Uint64
	cfg.OnCommit = func(tn uint64) { reported.Store(tn) }
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var next atomic.Uint64
	assign := func() uint64 { return next.Add(1) }
	r := Req{Cred: Root(), AssignTransno: assign}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 25 {
				if _, err := s.Create(r, RootFID, fmt.Sprintf("g%d-%d", g, i), Spec{Mode: 0o644}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// A failed operation takes no transno.
	if _, err := s.Create(r, RootFID, "g0-0", Spec{}); err == nil {
		t.Fatal("create over an existing name succeeded")
	}
	if next.Load() != 100 || s.LastTransno() != 100 {
		t.Fatalf("assigned %d transnos, last %d; want 100", next.Load(), s.LastTransno())
	}
	// A change that writes nothing takes none either: the close of an
	// open that changed nothing (only the open counts move, in memory).
	// A close that brings a size writes it, and takes one.
	a, err := s.Lookup(r, RootFID, "g0-0")
	if err != nil {
		t.Fatal(err)
	}
	for _, ci := range []CloseInfo{{}, {Write: true, LSOM: &LSOM{Size: 10, Blocks: 1}}} {
		if _, err := s.OpenFile(r, a.FID, OpenReadWrite); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CloseFile(r, a.FID, ci); err != nil {
			t.Fatal(err)
		}
	}
	if next.Load() != 101 || s.LastTransno() != 101 {
		t.Fatalf("after two closes, one writing nothing: assigned %d transnos, last %d; want 101", next.Load(), s.LastTransno())
	}
	if got, err := s.Getattr(a.FID); err != nil || got.Size != 10 {
		t.Fatalf("the writing close's size: %+v %v", got, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for reported.Load() != 101 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // the background sync reports it
	}
	if reported.Load() != 101 || s.LastCommitted() != 101 {
		t.Fatalf("OnCommit reported %d, LastCommitted %d; want 101", reported.Load(), s.LastCommitted())
	}
	check(t, s)
}

// TestConcurrentStorm runs random namespace operations from several
// goroutines over a few shared directories, then checks the store.
func TestConcurrentStorm(t *testing.T) {
	s := newStore(t)
	dirs := []fid.FID{RootFID}
	for i := range 4 {
		dirs = append(dirs, mkdir(t, s, root, RootFID, fmt.Sprintf("d%d", i), 0o777))
	}
	var wg sync.WaitGroup
	var ok atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			u := user(uint32(1000+g%2), 100)
			for range 300 {
				pd, td := dirs[1+r.IntN(4)], dirs[1+r.IntN(4)]
				name := fmt.Sprintf("n%d", r.IntN(20))
				var err error
				switch r.IntN(6) {
				case 0:
					_, err = s.Create(u, pd, name, Spec{Mode: 0o644, Layout: striped(uint32(r.IntN(1000)))})
				case 1:
					_, err = s.Mkdir(u, pd, name, Spec{Mode: 0o777})
				case 2:
					_, err = s.Unlink(u, pd, name)
				case 3:
					_, err = s.Rmdir(u, pd, name)
				case 4:
					_, err = s.Rename(u, pd, name, td, fmt.Sprintf("n%d", r.IntN(20)), 0)
				case 5:
					var a Attr
					if a, err = s.Lookup(u, pd, name); err == nil && a.Mode&S_IFMT == S_IFREG {
						_, err = s.Link(u, a.FID, td, fmt.Sprintf("n%d", r.IntN(20)))
					}
				}
				if err == nil {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() < 300 {
		t.Fatalf("only %d of 1200 operations succeeded", ok.Load())
	}
	check(t, s)
}

// TestReplayBarrier: after a replay barrier the store works on, but
// reports nothing more committed; a store opened from the copy the
// barrier saved has every change before it and none after (LastTransno
// the barrier's), as after a crash that lost them.
func TestReplayBarrier(t *testing.T) {
	cfg := testConfig(t.TempDir())
	var reported atomic.Uint64
	cfg.OnCommit = func(tn uint64) { reported.Store(tn) }
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var next atomic.Uint64
	r := Req{Cred: Root(), AssignTransno: func() uint64 { return next.Add(1) }}
	for _, name := range []string{"before1", "before2"} {
		if _, err := s.Create(r, RootFID, name, Spec{Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	saved := filepath.Join(t.TempDir(), "barrier")
	if err := s.ReplayBarrier(saved); err != nil {
		t.Fatal(err)
	}
	if reported.Load() != 2 {
		t.Fatalf("the barrier's sync reported %d committed, want 2", reported.Load())
	}
	if _, err := s.Create(r, RootFID, "after", Spec{Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if reported.Load() != 2 || s.LastCommitted() != 2 || s.LastTransno() != 3 {
		t.Fatalf("after the barrier: reported %d, committed %d, last %d; want 2, 2, 3", reported.Load(), s.LastCommitted(), s.LastTransno())
	}
	if err := s.ReplayBarrier(saved); err == nil {
		t.Error("a second barrier over the first's copy succeeded")
	}
	c, err := Open(testConfig(saved))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.LastTransno() != 2 {
		t.Errorf("the copy's last transno %d, want 2", c.LastTransno())
	}
	for name, want := range map[string]bool{"before1": true, "before2": true, "after": false} {
		if _, err := c.Lookup(root, RootFID, name); (err == nil) != want {
			t.Errorf("the copy: lookup %s: %v", name, err)
		}
	}
	check(t, c)
}
