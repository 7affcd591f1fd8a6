package ldlm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
)

// TestLockLocal: a server-local lock calls back a client's conflicting
// lock and waits for it, holds off clients until released, and a wait
// abandoned through ctx leaves nothing behind.
func TestLockLocal(t *testing.T) {
	lc := newLockCluster(t, 2, 5*time.Second)
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 20*time.Second)
	if err := a.access(ctx, PW, func(obj []byte) bool { copy(obj, "dirty"); return true }); err != nil {
		t.Fatal(err)
	}
	release, err := lc.lockd.LockLocal(ctx, Request{Resource: objRes, Mode: PW, Policy: Policy{Extent: Whole}, Flags: NoExpansion}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// a gave its lock back (flushing first) before the local lock was granted.
	if a.flushes.Load() != 1 || lc.lockd.Stats().BlockingASTs != 1 {
		t.Fatalf("flushes %d, blocking ASTs %d", a.flushes.Load(), lc.lockd.Stats().BlockingASTs)
	}
	if ls := lc.lockd.Locks(objRes); len(ls) != 1 || ls[0].Owner != LocalOwner || ls[0].State != Granted {
		t.Fatalf("locks %+v", ls)
	}
	// b waits behind the local lock until it is released.
	got := make(chan error, 1)
	go func() {
		got <- b.access(ctx, PR, func([]byte) bool { return false })
	}()
	select {
	case err := <-got:
		t.Fatalf("b got a lock under the local one: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	release() // idempotent
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	// b's PR is granted and unused in its LRU; a local PW times out
	// waiting if b stalls, and leaves no lock behind.
	b.stall.Store(true)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := lc.lockd.LockLocal(short, Request{Resource: objRes, Mode: PW, Policy: Policy{Extent: Whole}}, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("local lock behind a stalled holder: %v", err)
	}
	// The same bounded by wait instead of the context's deadline.
	if _, err := lc.lockd.LockLocal(ctx, Request{Resource: objRes, Mode: PW, Policy: Policy{Extent: Whole}}, 100*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("local lock behind a stalled holder, waiting 100ms: %v", err)
	}
	for _, l := range lc.lockd.Locks(objRes) {
		if l.Owner == LocalOwner {
			t.Fatalf("an abandoned local lock stayed: %+v", l)
		}
	}
	if _, err := lc.lockd.LockLocal(ctx, Request{Resource: objRes, Mode: 0}, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid local lock: %v", err)
	}
}

// TestIntentLock: an intent policy takes the lock for the client on
// another resource (the child it found) and reads under it; the client
// files the lock under the granted resource, a local lock on the child
// calls it back, and an intent waits for a conflicting local lock.
func TestIntentLock(t *testing.T) {
	lc := newLockCluster(t, 1, 5*time.Second)
	parent := Resource{ID: ResIDOfFID(0x200000007, 1, 0), Type: TypeIBits}
	child := func(n int) Resource { return Resource{ID: ResIDOfFID(0x200000400, uint32(n), 0), Type: TypeIBits} }
	var reads atomic.Int64
	lc.lockd.cfg.Intent = func(ctx context.Context, r *ptlrpc.Request, lock Request, intent []byte) IntentResult {
		n, err := strconv.Atoi(strings.TrimPrefix(string(intent), "child:"))
		if err != nil {
			return IntentResult{Skip: true, Status: -22}
		}
		if lock.Resource != parent {
			return IntentResult{Skip: true, Status: -71}
		}
		l, err := lc.lockd.IntentLock(ctx, r, Request{Resource: child(n), Mode: PR, Policy: Policy{Bits: BitLookup | BitUpdate}}, 0)
		if err != nil {
			return IntentResult{Skip: true, Status: -int32(Errno(err))}
		}
		reads.Add(1) // what the lock protects is read here, under it
		return IntentResult{Granted: &l, Reply: []byte(fmt.Sprintf("attrs of %d", n))}
	}
	a := lc.node(0, ClientConfig{})
	ctx := ctxT(t, 20*time.Second)
	var called atomic.Int64
	hooks := Hooks{Blocking: func(context.Context, *ClientLock, bool) { called.Add(1) }}
	enq := func(n int) (*ClientLock, string, int32, error) {
		l, rep, st, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: parent, Mode: PR, Policy: Policy{Bits: BitLookup}, Intent: []byte("child:" + strconv.Itoa(n)), Hooks: hooks})
		return l, string(rep), st, err
	}
	l, rep, st, err := enq(1)
	if err != nil || st != 0 || rep != "attrs of 1" || l == nil {
		t.Fatalf("intent: %v %d %q %v", err, st, rep, l)
	}
	if l.Resource != child(1) || l.Policy().Bits != BitLookup|BitUpdate || l.Mode() != PR {
		t.Fatalf("lock on %v bits %v mode %v", l.Resource, l.Policy().Bits, l.Mode())
	}
	l.Release()
	// A plain enqueue on the child matches the lock now filed there.
	m, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: child(1), Mode: PR, Policy: Policy{Bits: BitLookup}})
	if err != nil || m != l {
		t.Fatalf("match on the child: %v (%p vs %p)", err, m, l)
	}
	m.Release()
	// A local EX on the child calls the client's lock back.
	release, err := lc.lockd.LockLocal(ctx, Request{Resource: child(1), Mode: EX, Policy: Policy{Bits: BitLookup}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if called.Load() != 1 {
		t.Fatalf("blocking hook ran %d times", called.Load())
	}
	// An intent on the locked child waits for the local lock.
	type res struct {
		rep string
		err error
	}
	done := make(chan res, 1)
	go func() {
		l, rep, _, err := enq(1)
		if l != nil {
			l.Release()
		}
		done <- res{rep, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("the intent did not wait for the local lock: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	if reads.Load() != 1 {
		t.Fatalf("the policy read %d times under no lock", reads.Load())
	}
	release()
	if r := <-done; r.err != nil || r.rep != "attrs of 1" {
		t.Fatalf("after release: %+v", r)
	}
	// An intent that fails takes no lock.
	if l, _, st, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: parent, Mode: PR, Policy: Policy{Bits: BitLookup}, Intent: []byte("bad")}); err != nil || l != nil || st != -22 {
		t.Fatalf("failed intent: %v %v %d", err, l, st)
	}
}
