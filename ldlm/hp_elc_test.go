package ldlm

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
)

// newBlockingCluster is newLockCluster with a service of few handler
// goroutines and an OST_DESTROY handler that, as OFD.destroy does, waits
// in LockLocal for a PW lock on the whole object.
func newBlockingCluster(t *testing.T, cbTimeout time.Duration) (*lockCluster, *atomic.Int32) {
	var done atomic.Int32
	lc := newLockClusterWith(t, 2, cbTimeout, func(lc *lockCluster, cfg *ptlrpc.ServiceConfig) {
		// The first LDLM_CANCEL takes a while to serve (a loaded server,
		// a slow network): the client's flusher, which sends its CANCELs
		// one RPC after another, is busy meanwhile.
		cancel := cfg.Handlers[wire.LDLMCancel]
		var slow atomic.Bool
		slow.Store(true)
		cfg.Handlers[wire.LDLMCancel] = ptlrpc.HandlerSpec{Flags: cancel.Flags, Fn: func(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
			if slow.Swap(false) {
				time.Sleep(300 * time.Millisecond)
			}
			return cancel.Fn(ctx, r)
		}}
		cfg.Handlers[wire.OSTDestroy] = ptlrpc.HandlerSpec{Flags: ptlrpc.Modifying, Fn: func(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
			release, err := lc.lockd.LockLocal(ctx, Request{Resource: objRes, Mode: PW, Policy: Policy{Extent: Whole}, Flags: NoExpansion | DiscardData}, time.Minute)
			if err != nil {
				return nil, ptlrpc.Errno(err)
			}
			release()
			done.Add(1)
			return nil, 0
		}}
		cfg.MinThreads, cfg.MaxThreads = 2, 2
	})
	return lc, &done
}

// TestBlockedCancelNotCarriedByNormalRequest: every handler goroutine of
// the service waits in LockLocal (destroys) for client a's lock. a gives
// the lock back; meanwhile a sends an enqueue (as any of its threads may,
// or an MDC reint with TakeCancels). The cancel the destroys wait for must
// go as an LDLM_CANCEL, which HighPriority serves at once; if the enqueue
// carries it instead (early lock cancel), it queues behind the very
// handlers that wait for it, and nothing moves until the callback timer
// evicts a.
func TestBlockedCancelNotCarriedByNormalRequest(t *testing.T) {
	const cbTimeout = 8 * time.Second
	lc, _ := newBlockingCluster(t, cbTimeout)
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, time.Minute)

	// a holds two read locks on the object, in use.
	var ls []*ClientLock
	for _, ext := range []Extent{{Start: 0, End: 4095}, {Start: 1 << 20, End: EOF}} {
		l, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: objRes, Mode: PR, Policy: Policy{Extent: ext}, Flags: NoExpansion,
			Hooks: Hooks{Blocking: func(context.Context, *ClientLock, bool) {}}})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	// More destroys than the service can run at once.
	const n = 6
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := b.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.OSTDestroy})
			errs <- err
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for !ls[0].cbPendingForTest() || !ls[1].cbPendingForTest() {
		if time.Now().After(deadline) {
			t.Fatal("no blocking ASTs reached a")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // all destroys in

	start := time.Now()
	// The first lock goes: the flusher sends its LDLM_CANCEL (slow).
	ls[0].Release()
	for a.lc.Stats().Locks != 1 { // given back: its handle queued
		time.Sleep(100 * time.Microsecond)
	}
	time.Sleep(50 * time.Millisecond) // and taken by the flusher
	// The second goes while the flusher waits for that reply; one of
	// a's threads takes a lock on another object of the target at the
	// same time, an ordinary enqueue, which carries what a has to give
	// back (early lock cancel).
	if a.lc.Stats().CancelRPCs != 0 {
		t.Fatal("the first CANCEL was answered already")
	}
	ls[1].Release()
	for a.lc.Stats().Locks != 0 { // given back: its handle queued
		time.Sleep(100 * time.Microsecond)
	}
	other := Resource{ID: ResIDOfFID(0x100000000, 2, 0), Type: TypeExtent}
	go func() {
		if l, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: other, Mode: PR, Policy: Policy{Extent: Whole}}); err == nil {
			l.Release()
		}
	}()
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("destroy: %v", err)
		}
	}
	d := time.Since(start)
	t.Logf("destroys done after %v; a: %d cancel RPCs, %d early cancels", d.Round(time.Millisecond), a.lc.Stats().CancelRPCs, a.lc.Stats().EarlyCancels)
	select {
	case u := <-lc.evicted:
		t.Errorf("%s evicted", u)
	default:
	}
	if d > 3*time.Second {
		t.Errorf("the destroys waited %v for a's cancel (callback timeout %v): it rode on an enqueue queued behind them",
			d.Round(time.Millisecond), cbTimeout)
	}
}

// cbPendingForTest reports whether a blocking AST came for l.
func (l *ClientLock) cbPendingForTest() bool {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.cbPending
}
