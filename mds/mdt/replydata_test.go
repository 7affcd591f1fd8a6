package mdt

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/mds/mdd"
)

// TestResendAfterRestartGetsKeptReply: a change's reply is lost and the
// MDS restarts before the client resends it. The restarted MDT answers
// the resend with the reply it kept on disk (Lustre's reply data) instead
// of making the change again, which would fail it: an unlink or a rename
// with ENOENT, a link with EEXIST. (A mkdir made again succeeds: its FID
// is the client's, and the name it finds taken is taken by that FID.)
func TestResendAfterRestartGetsKeptReply(t *testing.T) {
	c := newCluster(t, 0, func(cfg *Config) { cfg.RecoveryWindow = 30 * time.Second })
	n := c.client()
	ctx := ctxT(t, 2*time.Minute)
	file := func(name string) fid.FID {
		t.Helper()
		a, _, err := n.mdc.Create(ctx, root, n.root, name, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		return a.FID
	}
	lookup := func(name string) error {
		_, err := c.mdt.Store().Lookup(mdd.Req{Cred: mdd.Cred{}}, n.root, name)
		return err
	}
	var target, swapA, swapB fid.FID
	stripe := func(f fid.FID) uint32 {
		l, err := c.mdt.Store().GetLayout(f)
		if err != nil || len(l.Components) == 0 {
			return 0
		}
		return l.Components[0].StripeSize
	}
	tests := []struct {
		name  string
		setup func()
		op    func() error
		made  func() bool // the change is on the MDT
	}{
		{"mkdir", func() { file("first") }, func() error { _, err := n.mdc.Mkdir(ctx, root, n.root, "d", 0o755); return err },
			func() bool { return lookup("d") == nil }},
		{"unlink", func() { file("gone") }, func() error { return n.mdc.Unlink(ctx, root, n.root, "gone") },
			func() bool { return errors.Is(lookup("gone"), syscall.ENOENT) }},
		{"rename", func() { file("from") }, func() error { return n.mdc.Rename(ctx, root, n.root, "from", n.root, "to", 0) },
			func() bool { return lookup("to") == nil }},
		{"link", func() { target = file("target") }, func() error {
			_, err := n.mdc.Link(ctx, root, target, n.root, "second")
			return err
		}, func() bool { return lookup("second") == nil }},
		// Not idempotent: run again, it would swap the layouts back.
		{"swap layouts", func() {
			swapA, swapB = file("swap-a"), file("swap-b")
			for f, size := range map[fid.FID]uint32{swapA: 1 << 20, swapB: 4 << 20} {
				if _, err := c.mdt.Store().SetLayout(mdd.Req{Cred: mdd.Root()}, f,
					layout.Plain(layout.RAID0{StripeCount: 1, StripeSize: size, StripeOffset: -1})); err != nil {
					t.Fatal(err)
				}
			}
			// Not while the restart before recovers (until its orphans
			// are dealt with, a swap is refused: opens for write may not
			// all be replayed yet): swapped there and back once it may.
			for {
				err := c.mdt.Store().SwapLayouts(mdd.Req{Cred: mdd.Root()}, swapA, swapB, nil)
				if err == nil {
					if err := c.mdt.Store().SwapLayouts(mdd.Req{Cred: mdd.Root()}, swapA, swapB, nil); err != nil {
						t.Fatal(err)
					}
					break
				}
				if !errors.Is(err, syscall.EBUSY) || ctx.Err() != nil {
					t.Fatalf("swap layouts in the store: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}, func() error { return n.mdc.SwapLayouts(ctx, root, swapA, swapB, nil) },
			func() bool { return stripe(swapA) == 4<<20 && stripe(swapB) == 1<<20 }},
	}
	for _, tt := range tests {
		tt.setup()
		// The next reply, the change's, is lost.
		c.faults.Arm(ptlrpc.FailDropReply, 1)
		done := make(chan error, 1)
		go func() { done <- tt.op() }()
		for !tt.made() || c.faults.Fired(ptlrpc.FailDropReply) == 0 {
			select {
			case err := <-done:
				t.Fatalf("%s ended before the restart: %v (made %v)", tt.name, err, tt.made())
			default:
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: the change was never made (made %v, reply dropped %d times)", tt.name, tt.made(), c.faults.Fired(ptlrpc.FailDropReply))
			}
			time.Sleep(5 * time.Millisecond)
		}
		c.faults.Disarm(ptlrpc.FailDropReply)
		c.stop()
		c.start()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s resent after the restart: %v", tt.name, err)
			}
		case <-ctx.Done():
			t.Fatalf("%s: no answer after the restart", tt.name)
		}
		if st := c.srv.Service().Stats(); st.Reconstructed != 1 {
			t.Errorf("%s: %d replies reconstructed by the restarted MDS, want 1", tt.name, st.Reconstructed)
		}
	}
	if _, err := n.mdc.Lookup(ctx, root, n.root, "from"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("the renamed file's old name: %v", err)
	}
	if a, b := stripe(swapA), stripe(swapB); a != 4<<20 || b != 1<<20 {
		t.Fatalf("after the swap's resend: stripe sizes %d and %d, want 4 MiB and 1 MiB (swapped once)", a, b)
	}
	c.check()
}

// keptReplies returns how many replies the MDT keeps for client-0 once it
// keeps want, or when ctx ends: a reply is kept after it is sent, so the
// client may see it first.
func keptReplies(ctx context.Context, t *testing.T, c *cluster, want int) int {
	t.Helper()
	for {
		k, err := c.mdt.Store().KeptReplies("client-0")
		if err != nil {
			t.Fatal(err)
		}
		if k == want || ctx.Err() != nil {
			return k
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestKeptRepliesForgotten: the replies kept for a client go once its
// later requests say it has them, and all of them when it disconnects.
func TestKeptRepliesForgotten(t *testing.T) {
	c := newCluster(t, 0, nil)
	n := c.client()
	ctx := ctxT(t, time.Minute)
	for _, name := range []string{"a", "b", "c"} {
		if _, err := n.mdc.Mkdir(ctx, root, n.root, name, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Each mkdir's request told the MDT the client had every reply before
	// it: only the last is kept.
	if k := keptReplies(ctx, t, c, 1); k != 1 {
		t.Fatalf("%d replies kept after three mkdirs, want 1", k)
	}
	if err := n.imp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if k := keptReplies(ctx, t, c, 0); k != 0 {
		t.Fatalf("%d replies kept after the client disconnected", k)
	}
}

// TestKeptRepliesOfClientNotBackForgotten: a client that does not come
// back to a restarted MDT is forgotten when recovery ends, and so are the
// replies kept for it; they stayed in the store for good.
func TestKeptRepliesOfClientNotBackForgotten(t *testing.T) {
	c := newCluster(t, 0, func(cfg *Config) { cfg.RecoveryWindow = 30 * time.Second })
	n := c.client()
	ctx := ctxT(t, time.Minute)
	if _, err := n.mdc.Mkdir(ctx, root, n.root, "d", 0o755); err != nil {
		t.Fatal(err)
	}
	if k := keptReplies(ctx, t, c, 1); k != 1 {
		t.Fatalf("%d replies kept after a mkdir, want 1", k)
	}
	c.stop()
	// The client goes while the MDS is down: it never comes back.
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	n.imp.Close(cctx)
	cancel()
	c.start()
	if got := c.mdt.Target().EndRecovery(); got != 1 {
		t.Fatalf("recovery's end evicted %d clients, want 1", got)
	}
	if k, err := c.mdt.Store().KeptReplies("client-0"); err != nil || k != 0 {
		t.Fatalf("%d replies kept for a client recovery gave up on (%v)", k, err)
	}
}

// TestOpenCreateResentAfterRestart: an open(O_CREAT|O_EXCL) whose reply
// is lost, resent to the restarted MDS (which lost the saved reply, and
// cannot keep an open's: its handle and lock died with the restart),
// finds the file its first send made, of the FID the client gave it: it
// opens that file, where it failed with EEXIST.
func TestOpenCreateResentAfterRestart(t *testing.T) {
	c := newCluster(t, 0, func(cfg *Config) { cfg.RecoveryWindow = 30 * time.Second })
	n := c.client()
	ctx := ctxT(t, 30*time.Second)
	if _, _, err := n.mdc.Create(ctx, root, n.root, "first", 0o644, nil); err != nil { // (its FID sequence)
		t.Fatal(err)
	}
	c.faults.Arm(ptlrpc.FailDropReply, 1)
	type result struct {
		rep *mdc.IntentReply
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := n.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItOpen | mdc.ItCreat, Parent: n.root, Name: "g",
			Flags: syscall.O_CREAT | syscall.O_EXCL | syscall.O_WRONLY, Mode: 0o600}, ldlm.Hooks{})
		done <- result{rep, err}
	}()
	var made mdd.Attr
	for {
		a, err := c.mdt.Store().Lookup(mdd.Req{}, n.root, "g")
		if err == nil && c.faults.Fired(ptlrpc.FailDropReply) > 0 {
			made = a
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the create was never made")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.faults.Disarm(ptlrpc.FailDropReply)
	c.stop()
	c.start()
	r := <-done
	if r.err != nil {
		t.Fatalf("open-create resent after the restart: %v", r.err)
	}
	if r.rep.Attr.FID != made.FID || r.rep.Handle == 0 {
		t.Fatalf("resent open-create opened %v (handle %#x), the first send made %v", r.rep.Attr.FID, r.rep.Handle, made.FID)
	}
	if r.rep.Lock != nil {
		r.rep.Lock.Release()
	}
	if err := n.mdc.Close(ctx, root, r.rep.File(), nil); err != nil {
		t.Fatalf("close of the resent open: %v", err)
	}
	// O_EXCL still refuses a name another create made.
	_, err := n.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItOpen | mdc.ItCreat, Parent: n.root, Name: "g",
		Flags: syscall.O_CREAT | syscall.O_EXCL | syscall.O_WRONLY, Mode: 0o600}, ldlm.Hooks{})
	wantErrno(t, "a second O_EXCL create", err, syscall.EEXIST)
}
