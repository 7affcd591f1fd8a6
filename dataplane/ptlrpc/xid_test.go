package ptlrpc

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
)

// TestLastXIDWaitsForARequestNotYetInFlight: a request that has its XID
// but is not in flight yet still counts as unreplied. Another request's
// last_xid, made in that moment and reaching the server after the first
// ran and its reply was lost, must not let the server forget the saved
// reply: the resend is answered from it, not run a second time.
func TestLastXIDWaitsForARequestNotYetInFlight(t *testing.T) {
	te := newTgtEnv(t, loEnv, TargetConfig{AutoCommit: true})
	imp := te.newImport(t, te.importCfg())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var aXID uint64
	aHasXID, releaseA := make(chan struct{}), make(chan struct{})
	bHeader, releaseB := make(chan struct{}), make(chan struct{})
	var onceA, onceB sync.Once
	testHookXIDTaken = func(r *rpc) {
		if r.req.Opcode == opInc {
			onceA.Do(func() { aXID = r.xid; close(aHasXID); <-releaseA })
		}
	}
	testHookHeaderMade = func(r *rpc, h *wire.Header) {
		if r.req.Opcode == opEcho {
			onceB.Do(func() {
				if h.LastXID >= aXID {
					t.Logf("echo's last_xid %d covers the increment's xid %d, not yet in flight", h.LastXID, aXID)
				}
				close(bHeader)
				<-releaseB
			})
		}
	}
	t.Cleanup(func() { testHookXIDTaken, testHookHeaderMade = nil, nil })

	type result struct {
		reply []byte
		err   error
	}
	aDone, bDone := make(chan result, 1), make(chan result, 1)
	go func() {
		b, err := imp.Do(ctx, &Req{Opcode: opInc})
		aDone <- result{b, err}
	}()
	<-aHasXID
	go func() {
		b, err := imp.Do(ctx, &Req{Opcode: opEcho})
		bDone <- result{b, err}
	}()
	<-bHeader
	// The increment runs; its reply is lost; the server keeps it.
	te.faults.Arm(FailDropReply, 1)
	close(releaseA)
	waitFor(t, "the increment's reply saved", func() bool {
		ex := te.tgt.Exports()
		return te.svc.Stats().Dropped == 1 && len(ex) == 1 && ex[0].Saved == 1
	})
	// The echo, with the last_xid it was given before, reaches the server.
	close(releaseB)
	if r := <-bDone; r.err != nil {
		t.Fatal(r.err)
	}
	r := <-aDone
	if r.err != nil {
		t.Fatal(r.err)
	}
	if count(r.reply) != 1 || te.runs.Load() != 1 {
		t.Fatalf("reply count %d, handler ran %d times", count(r.reply), te.runs.Load())
	}
}

// eventually polls until cond holds or 10 s pass, and reports which: unlike
// waitFor it may run off the test's goroutine (in a hook).
func eventually(cond func() bool) bool {
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			return false
		}
	}
	return true
}

// failConnNow fails imp's current connection, as a timeout would, and
// reports whether it reconnected (FULL or RECOVER) within 10 s.
func failConnNow(imp *Import) bool {
	imp.mu.Lock()
	cn := imp.mu.conn
	imp.mu.Unlock()
	imp.failConn(cn, errors.New("test: connection failed"))
	return eventually(func() bool {
		imp.mu.Lock()
		defer imp.mu.Unlock()
		st := imp.mu.state
		return imp.mu.conn != cn && (st == StateFull || st == StateRecover)
	})
}

// TestSetResendsAcrossReconnect: the connection fails while a request set
// is being sent, after its first request went. The reconnect waits for
// that request's resend (RECOVER) before new requests go, so the set must
// not hold its resend behind the sending of the rest: it completes, each
// request run once, long before its deadline.
func TestSetResendsAcrossReconnect(t *testing.T) {
	te := newTgtEnv(t, loEnv, TargetConfig{AutoCommit: true})
	imp := te.newImport(t, te.importCfg())
	var n atomic.Int32
	testHookXIDTaken = func(r *rpc) {
		if r.req.Opcode == opInc && n.Add(1) == 2 {
			// The other one went on the connection that fails.
			if !eventually(func() bool { return te.runs.Load() == 1 }) || !failConnNow(imp) {
				t.Error("the first request did not run, or the import did not reconnect")
			}
		}
	}
	t.Cleanup(func() { testHookXIDTaken = nil })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	res := DoSet(ctx, []SetCall{{Import: imp, Req: &Req{Opcode: opInc}}, {Import: imp, Req: &Req{Opcode: opInc}}})
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("call %d after %v: %v", i, time.Since(start), r.Err)
		}
	}
	if got := te.runs.Load(); got != 2 {
		t.Fatalf("handler ran %d times, want 2", got)
	}
}
