package osc_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/internal/clienttest"
	"github.com/nacrefs/nacre/client/osc"
)

// TestDestroysDoNotStallIO: a client that does not give its locks back
// (hung, or its application holding them) holds read locks on many
// objects that the MDS's destroy log then destroys at once (an rm -rf:
// one round sends up to 256 OST_DESTROYs to an OST). Each destroy now
// waits in LockLocal on an OST handler goroutine until the callback timer
// evicts the client. Another client's I/O on an unrelated object must not
// wait for that.
func TestDestroysDoNotStallIO(t *testing.T) {
	const cbTimeout = 5 * time.Second
	c := startCluster(t, clienttest.Options{OSTs: 1, Nodes: 2, CallbackTimeout: cbTimeout})
	cfg := osc.DefaultConfig()
	hung, other := newNode(t, c, 0, cfg).OSCs[0], newNode(t, c, 1, cfg).OSCs[0]
	ctx := ctxT(t, time.Minute)
	const n = 140 // beyond the OSS's 64 handler goroutines and 64 direct runs
	fids, err := c.Precreate(ctx, 0, n+1)
	if err != nil {
		t.Fatal(err)
	}
	free := fids[n]
	var locks []*osc.Lock
	for _, f := range fids[:n] {
		lk, err := hung.Open(f).Lock(ctx, false, 0, 4095)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, lk)
	}
	defer func() {
		for _, lk := range locks {
			lk.Release()
		}
	}()
	var wg sync.WaitGroup
	for _, f := range fids[:n] {
		wg.Go(func() { c.Destroy(ctx, 0, f) })
	}
	defer wg.Wait()
	time.Sleep(time.Second) // the destroys are in, waiting

	start := time.Now()
	o := other.Open(free)
	defer o.Close()
	data := pattern(64<<10, 9)
	if _, err := o.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := o.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := o.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a write and sync of an unrelated object took %v behind destroys waiting for a client's locks (callback timeout %v)",
			d.Round(time.Millisecond), cbTimeout)
	}
	t.Logf("OSS service: %+v", c.OSS.Service().Stats().Threads)
}
