package mdt

import (
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestCrossRenamesDoNotDeadlock: two renames that move directories between
// parents, each moving a directory whose parent the other changes, must
// not wait for each other. rename d1/d2 → y/d2 locks d1 (its source
// parent) and then d2 (what it moves); rename /d1 → d2/x locks d2 (its
// target parent) and then d1. Run one after the other they both make sense
// (the first succeeds; the second too, or is refused with EINVAL if it
// would move d1 below itself); neither may wait out the lock timeout and
// fail with ETIMEDOUT.
func TestCrossRenamesDoNotDeadlock(t *testing.T) {
	c := newCluster(t, 0, func(cfg *Config) { cfg.CallbackTimeout = time.Second })
	n1, n2 := c.client(), c.client()
	ctx := ctxT(t, time.Minute)
	r := n1.root
	d1, err := n1.mdc.Mkdir(ctx, root, r, "d1", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := n1.mdc.Mkdir(ctx, root, d1.FID, "d2", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	y, err := n1.mdc.Mkdir(ctx, root, r, "y", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	// Each rename, once it holds its directory locks, waits (a while) for
	// the other to get as far: as when both arrive together.
	var mu sync.Mutex
	arrived := 0
	testHookRenameParentsLocked = func() {
		mu.Lock()
		arrived++
		mu.Unlock()
		for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			mu.Lock()
			both := arrived >= 2
			mu.Unlock()
			if both {
				return
			}
		}
	}
	t.Cleanup(func() { testHookRenameParentsLocked = nil })
	errs := make(chan error, 2)
	go func() { errs <- n1.mdc.Rename(ctx, root, d1.FID, "d2", y.FID, "d2", 0) }()
	go func() { errs <- n2.mdc.Rename(ctx, root, r, "d1", d2.FID, "x", 0) }()
	start := time.Now()
	for range 2 {
		if err := <-errs; err != nil && !errors.Is(err, syscall.EINVAL) {
			t.Errorf("rename: %v (after %v)", err, time.Since(start))
		}
	}
	c.check()
}
