package mdt

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/mdc"
)

// TestReaddirLarge: a directory of 100,000 entries is read page by page
// (pages of the MDT's choosing and small ones) while another client
// creates and removes other entries in it: every entry present
// throughout appears exactly once, and no entry appears twice.
func TestReaddirLarge(t *testing.T) {
	const stable = 100000
	c := newCluster(t, 0, nil)
	a, b := c.client(), c.client()
	ctx := ctxT(t, 5*time.Minute)
	d, err := a.mdc.Mkdir(ctx, root, a.root, "big", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < stable; i += workers {
				if _, _, err := a.mdc.Create(ctx, root, d.FID, fmt.Sprintf("stable-%06d", i), 0o644, nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d creates in %v", stable, time.Since(start))

	// b churns: creates and unlinks names of its own.
	stop := make(chan struct{})
	var churned atomic.Int64
	var churn sync.WaitGroup
	for w := range 2 {
		churn.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("churn-%d-%d", w, i)
				if _, _, err := b.mdc.Create(ctx, root, d.FID, name, 0o644, nil); err != nil {
					t.Error(err)
					return
				}
				if i%2 == 1 {
					if err := b.mdc.Unlink(ctx, root, d.FID, fmt.Sprintf("churn-%d-%d", w, i-1)); err != nil {
						t.Error(err)
						return
					}
				}
				churned.Add(1)
			}
		})
	}
	read := func(pageSize int) {
		t.Helper()
		seen := map[string]int{}
		cookie, pages := uint64(0), 0
		for cookie != mdc.DirEnd {
			ents, next, err := a.mdc.ReadPage(ctx, root, d.FID, cookie, pageSize)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				seen[e.Name]++
			}
			cookie = next
			pages++
		}
		for name, n := range seen {
			if n != 1 {
				t.Fatalf("page size %d: %q seen %d times", pageSize, name, n)
			}
		}
		for i := range stable {
			if seen[fmt.Sprintf("stable-%06d", i)] != 1 {
				t.Fatalf("page size %d: stable-%06d missing (%d entries in %d pages)", pageSize, i, len(seen), pages)
			}
		}
		t.Logf("page size %d: %d entries in %d pages, %d churn operations so far", pageSize, len(seen), pages, churned.Load())
	}
	read(0)
	read(97)
	// And through the iterator.
	count := 0
	for e, err := range a.mdc.Readdir(ctx, root, d.FID) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Type == 0 {
			t.Fatalf("entry %q without a type", e.Name)
		}
		count++
	}
	close(stop)
	churn.Wait()
	if count < stable+2 || churned.Load() == 0 {
		t.Fatalf("iterator gave %d entries; churn ran %d operations", count, churned.Load())
	}
	c.check()
}
