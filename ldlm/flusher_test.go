package ldlm

import (
	"context"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// TestCancelNotBehindStuckTarget: a client holds locks through two
// connections (two targets, as an OSC per OST). The LDLM_CANCEL it sends
// on one gets no answer (that target hangs). A blocking AST from the
// other must still be answered by a cancel at once, not after the stuck
// one gives up a minute later: that target would evict the client.
func TestCancelNotBehindStuckTarget(t *testing.T) {
	const stuckUUID = "client-0-stuck"
	entered, release := make(chan struct{}, 1), make(chan struct{})
	lc := newLockClusterWith(t, 2, 20*time.Second, func(lc *lockCluster, cfg *ptlrpc.ServiceConfig) {
		cancel := cfg.Handlers[wire.LDLMCancel]
		cfg.Handlers[wire.LDLMCancel] = ptlrpc.HandlerSpec{Flags: cancel.Flags, Fn: func(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
			if r.Export() != nil && r.Export().ClientUUID() == stuckUUID {
				select {
				case entered <- struct{}{}:
				default:
				}
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return cancel.Fn(ctx, r)
		}}
	})
	n, other := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, time.Minute)
	// n's second connection, whose cancels the server never answers.
	pc := ptlrpc.NewClient(n.ln, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.MDCReplyPortal, Logger: quiet, UUID: stuckUUID})
	stuck, err := pc.NewImport(ptlrpc.ImportConfig{Target: "nacre-OST0000", Servers: []lwire.ProcessID{lc.srvID}, Portal: svcPortal,
		PingInterval: -1, MinTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		stuck.Close(ctx)
	})
	t.Cleanup(func() { close(release) }) // (before the import closes)
	if err := stuck.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	resStuck := Resource{ID: ResIDOfFID(0x100000000, 2, 0), Type: TypeExtent}
	for _, e := range []struct {
		imp *ptlrpc.Import
		res Resource
	}{{stuck, resStuck}, {n.imp, objRes}} {
		l, _, _, err := n.lc.Enqueue(ctx, e.imp, Enqueue{Resource: e.res, Mode: PR, Policy: Policy{Extent: Whole}, Hooks: n.hooks()})
		if err != nil {
			t.Fatal(err)
		}
		l.Release() // unused: a blocking AST has it given back at once
	}
	// The other client's write lock calls n's lock back through the
	// stuck connection: n's cancel hangs in the server.
	go func() {
		if l, _, _, err := other.lc.Enqueue(ctx, other.imp, Enqueue{Resource: resStuck, Mode: PW, Policy: Policy{Extent: Whole}, Hooks: other.hooks()}); err == nil {
			l.Release()
		}
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the cancel on the stuck connection never came")
	}
	// Now a lock of the healthy connection is called back.
	start := time.Now()
	l, _, _, err := other.lc.Enqueue(ctx, other.imp, Enqueue{Resource: objRes, Mode: PW, Policy: Policy{Extent: Whole}, Hooks: other.hooks()})
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	d := time.Since(start)
	t.Logf("the healthy connection's lock came back after %v", d.Round(time.Millisecond))
	if d > 2*time.Second {
		t.Errorf("a lock given back on a healthy connection reached its server after %v: its cancel waited behind one to a stuck target", d.Round(time.Millisecond))
	}
}
