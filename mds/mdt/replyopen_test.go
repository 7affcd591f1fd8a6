package mdt

import (
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/mds/mdd"
)

// TestOpenCreateResentAfterRestart: an open(O_CREAT|O_EXCL) whose reply
// is lost, resent to the restarted MDS (which lost the saved reply, and
// cannot keep an open's: its handle and lock died with the restart),
// finds the file its first send made, of the FID the client gave it: it
// opens that file, where it failed with EEXIST.
func TestOpenCreateResentAfterRestart(t *testing.T) {
	c := newCluster(t, 0, func(cfg *Config) { cfg.RecoveryWindow = 30 * time.Second })
	n := c.client()
	ctx := ctxT(t, 2*time.Minute)
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
