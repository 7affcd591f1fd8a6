package mdt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/ldlm"
)

// astWatch counts the blocking callbacks of locks taken with its hooks.
type astWatch struct{ ch chan ldlm.Resource }

func newWatch() *astWatch { return &astWatch{ch: make(chan ldlm.Resource, 16)} }

func (w *astWatch) hooks() ldlm.Hooks {
	return ldlm.Hooks{Blocking: func(_ context.Context, l *ldlm.ClientLock, evicted bool) {
		if !evicted {
			w.ch <- l.Resource
		}
	}}
}

// wait waits for the callback of a lock on res.
func (w *astWatch) wait(t testing.TB, res ldlm.Resource, what string) {
	t.Helper()
	select {
	case got := <-w.ch:
		if got != res {
			t.Fatalf("%s: callback for %v, want %v", what, got, res)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no blocking AST", what)
	}
}

func (w *astWatch) none(t testing.TB, what string) {
	t.Helper()
	select {
	case got := <-w.ch:
		t.Fatalf("%s: unexpected callback for %v", what, got)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestIntentOpenCreate: IT_OPEN|O_CREAT creates the file and returns the
// lock and its attributes in one RPC (the getattr bits: nobody else can
// hold a lock on a new file); a lost reply is resent and answered
// from the saved reply, not run twice.
func TestIntentOpenCreate(t *testing.T) {
	c := newCluster(t, 2, nil)
	n := c.client()
	ctx := ctxT(t, time.Minute)
	if _, err := n.mdc.NewFID(ctx); err != nil { // the client's sequence, up front
		t.Fatal(err)
	}
	sent := n.pc.Stats().Sent
	w := newWatch()
	rep, err := n.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItOpen | mdc.ItCreat, Parent: n.root, Name: "f",
		Flags: syscall.O_CREAT | syscall.O_EXCL | syscall.O_RDWR, Mode: 0o640}, w.hooks())
	if err != nil {
		t.Fatal(err)
	}
	if d := n.pc.Stats().Sent - sent; d != 1 {
		t.Fatalf("the open-create took %d RPCs", d)
	}
	if !rep.Created || rep.Handle == 0 || rep.Attr.Mode != syscall.S_IFREG|0o640 || rep.Lock == nil || len(objectsOf(rep.Layout)) != 1 {
		t.Fatalf("reply %+v", rep)
	}
	if rep.Lock.Resource != objRes(rep.Attr.FID) || rep.Lock.Mode() != ldlm.PR || rep.Lock.Policy().Bits != getattrBits {
		t.Fatalf("lock on %v (want %v), mode %v, bits %v", rep.Lock.Resource, objRes(rep.Attr.FID), rep.Lock.Mode(), rep.Lock.Policy().Bits)
	}
	if a, err := n.mdc.Lookup(ctx, root, n.root, "f"); err != nil || a.FID != rep.Attr.FID {
		t.Fatalf("lookup of the created file: %+v %v", a, err)
	}
	if err := n.mdc.Close(ctx, root, rep.File(), nil); err != nil {
		t.Fatal(err)
	}

	// The reply is lost: the client resends, and the saved reply answers,
	// so O_EXCL does not fail the second time.
	c.faults.Arm(ptlrpc.FailDropReply, 1)
	rep, err = n.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItOpen | mdc.ItCreat, Parent: n.root, Name: "g",
		Flags: syscall.O_CREAT | syscall.O_EXCL | syscall.O_WRONLY, Mode: 0o600}, w.hooks())
	if err != nil || !rep.Created {
		t.Fatalf("resent open-create: %+v %v", rep, err)
	}
	if c.faults.Fired(ptlrpc.FailDropReply) != 1 || c.srv.Service().Stats().Reconstructed < 1 {
		t.Fatalf("fired %d, reconstructed %d", c.faults.Fired(ptlrpc.FailDropReply), c.srv.Service().Stats().Reconstructed)
	}
	if c.mdt.Stats().Opens != 1 {
		t.Fatalf("%d opens after a resent open", c.mdt.Stats().Opens)
	}
	if err := n.mdc.Close(ctx, root, rep.File(), nil); err != nil {
		t.Fatal(err)
	}
	// Errors ride in the intent status, with no lock.
	_, err = n.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItOpen, Parent: n.root, Name: "nope", Flags: syscall.O_RDONLY}, ldlm.Hooks{})
	wantErrno(t, "open intent of a missing file", err, syscall.ENOENT)
	_, err = n.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItOpen | mdc.ItCreat, Parent: n.root, Name: "f",
		Flags: syscall.O_CREAT | syscall.O_EXCL, Mode: 0o600}, ldlm.Hooks{})
	wantErrno(t, "O_EXCL intent of an existing file", err, syscall.EEXIST)
	_, err = n.mdc.Enqueue(ctx, user(5, 5), mdc.Intent{Op: mdc.ItOpen, Parent: n.root, Name: "f", Flags: syscall.O_RDWR}, ldlm.Hooks{})
	wantErrno(t, "open intent without permission", err, syscall.EACCES)
	// IT_CREAT alone makes a file and locks it.
	rep, err = n.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItCreat, Parent: n.root, Name: "h", Mode: 0o644}, ldlm.Hooks{})
	if err != nil || !rep.Created || rep.Lock == nil || rep.Handle != 0 {
		t.Fatalf("create intent: %+v %v", rep, err)
	}
	rep.Lock.Release()
	if c.mdt.Stats().Opens != 0 {
		t.Fatalf("opens left: %d", c.mdt.Stats().Opens)
	}
	c.check()
}

// TestIntentCallbacks: locks an intent grants are called back when what
// they protect changes: a negative lookup's directory lock by a create
// in the directory, a getattr lock on a directory by a create in it, a
// lookup lock on a file by its unlink, a getattr lock by a setattr.
func TestIntentCallbacks(t *testing.T) {
	c := newCluster(t, 0, nil)
	a, b := c.client(), c.client()
	ctx := ctxT(t, time.Minute)
	d, err := a.mdc.Mkdir(ctx, root, a.root, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	w := newWatch()

	// b looks up a name that does not exist in d: a negative entry under
	// a PR UPDATE lock on d.
	rep, err := b.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItLookup, Parent: d.FID, Name: "x"}, w.hooks())
	if !errors.Is(err, syscall.ENOENT) || rep == nil || !rep.Negative || rep.Lock == nil {
		t.Fatalf("negative lookup: %+v %v", rep, err)
	}
	if rep.Lock.Resource != objRes(d.FID) || rep.Lock.Policy().Bits != ldlm.BitUpdate {
		t.Fatalf("negative lookup lock on %v bits %v", rep.Lock.Resource, rep.Lock.Policy().Bits)
	}
	rep.Lock.Release()
	// a creates an entry in d: b is called back before the create is done.
	x, _, err := a.mdc.Create(ctx, root, d.FID, "x", 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.wait(t, objRes(d.FID), "create after a negative lookup")

	// b's getattr lock on d (LOOKUP|UPDATE|PERM|LAYOUT) is called back by a mkdir
	// in d.
	rep, err = b.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItGetattr, Parent: a.root, Name: "d"}, w.hooks())
	if err != nil || rep.Attr.FID != d.FID || rep.Lock.Policy().Bits != ldlm.BitLookup|ldlm.BitUpdate|ldlm.BitPerm|ldlm.BitLayout {
		t.Fatalf("getattr intent: %+v %v", rep, err)
	}
	rep.Lock.Release()
	if _, err := a.mdc.Mkdir(ctx, root, d.FID, "sub", 0o755); err != nil {
		t.Fatal(err)
	}
	w.wait(t, objRes(d.FID), "mkdir in a directory b holds a getattr lock on")
	// A lookup lock on d alone (LOOKUP|PERM) is not called back by a
	// create in d: its name in the root did not change.
	rep, err = b.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItLookup, Parent: a.root, Name: "d"}, w.hooks())
	if err != nil || rep.Lock.Policy().Bits != ldlm.BitLookup|ldlm.BitPerm {
		t.Fatalf("lookup intent: %+v %v", rep, err)
	}
	rep.Lock.Release()
	if _, _, err := a.mdc.Create(ctx, root, d.FID, "y", 0o644, nil); err != nil {
		t.Fatal(err)
	}
	w.none(t, "create under a LOOKUP lock")
	// ... but a rename of d is.
	if err := a.mdc.Rename(ctx, root, a.root, "d", a.root, "d2", 0); err != nil {
		t.Fatal(err)
	}
	w.wait(t, objRes(d.FID), "rename of a directory b holds a LOOKUP lock on")

	// A lookup lock on a file is called back by its unlink; a getattr lock
	// by setattr.
	rep, err = b.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItGetattr, FID: x.FID}, w.hooks())
	if err != nil || rep.Attr.FID != x.FID || rep.Lock.Resource != objRes(x.FID) {
		t.Fatalf("getattr intent by FID: %+v %v", rep, err)
	}
	rep.Lock.Release()
	if _, err := a.mdc.Setattr(ctx, root, x.FID, mdc.SetAttr{Valid: mdc.AttrMode, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	w.wait(t, objRes(x.FID), "chmod of a file b holds a getattr lock on")
	rep, err = b.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItLookup, Parent: d.FID, Name: "x"}, w.hooks())
	if err != nil || rep.Attr.FID != x.FID {
		t.Fatalf("lookup intent of x: %+v %v", rep, err)
	}
	rep.Lock.Release()
	if err := a.mdc.Unlink(ctx, root, d.FID, "x"); err != nil {
		t.Fatal(err)
	}
	w.wait(t, objRes(x.FID), "unlink of a file b holds a lookup lock on")

	// A lock still in use holds the change back until released.
	rep, err = b.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItLookup, Parent: d.FID, Name: "z"}, w.hooks())
	if !errors.Is(err, syscall.ENOENT) || rep.Lock == nil {
		t.Fatalf("negative lookup of z: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := a.mdc.Create(ctx, root, d.FID, "z", 0o644, nil)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the create did not wait for the lock in use: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	rep.Lock.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w.wait(t, objRes(d.FID), "create after the lock was released")
	if st := b.locks.Stats(); st.BlockingASTs < 6 {
		t.Fatalf("b's lock stats %+v", st)
	}
	c.check()
}

// TestCreateEarlyCancel: a client that looked a name up in a directory
// (and holds the negative entry's PR UPDATE lock on it) and cached the
// directory under a getattr lock, and then creates the name, gives the
// first lock back and converts the second to keep LOOKUP inside the
// create's enqueue: the MDT sends it no blocking AST.
func TestCreateEarlyCancel(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.client()
	ctx := ctxT(t, time.Minute)
	d, err := n.mdc.Mkdir(ctx, root, n.root, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	converted := 0
	dirHooks := ldlm.Hooks{Convert: func(context.Context, *ldlm.ClientLock, ldlm.Bits) bool { converted++; return true }}
	for i := range 5 {
		name := fmt.Sprint("f", i)
		rep, err := n.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItGetattr, FID: d.FID}, dirHooks)
		if err != nil || rep.Lock == nil {
			t.Fatalf("getattr of d: %v", err)
		}
		rep.Lock.Release()
		rep, err = n.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItGetattr, Parent: d.FID, Name: name}, ldlm.Hooks{})
		if !errors.Is(err, syscall.ENOENT) || rep == nil || rep.Lock == nil {
			t.Fatalf("negative lookup of %s: %v %v", name, rep, err)
		}
		rep.Lock.Release()
		before := c.mdt.LockServer().Stats()
		rep, err = n.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItOpen | mdc.ItCreat, Parent: d.FID, Name: name,
			Flags: syscall.O_CREAT | syscall.O_RDWR, Mode: 0o644}, ldlm.Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		after := c.mdt.LockServer().Stats()
		if after.BlockingASTs != before.BlockingASTs || after.EarlyCancels <= before.EarlyCancels || after.Converts <= before.Converts || converted != i+1 {
			t.Fatalf("create %s: %d blocking ASTs, %d early cancels, %d converts (%d by the client)", name, after.BlockingASTs-before.BlockingASTs,
				after.EarlyCancels-before.EarlyCancels, after.Converts-before.Converts, converted)
		}
		if err := n.mdc.Close(ctx, root, rep.File(), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUnlinkRenameEarlyCancel: a client holding getattr locks (LOOKUP,
// UPDATE, PERM, LAYOUT) on a directory and on files in it gives the files'
// back and converts the directory's to keep LOOKUP, inside its unlink and
// rename requests (GiveBack, GiveBackBits; the reint carries the handles
// and the conversions): the MDT applies them first and sends no blocking
// AST, and the changes are made.
func TestUnlinkRenameEarlyCancel(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.client()
	ctx := ctxT(t, time.Minute)
	d, err := n.mdc.Mkdir(ctx, root, n.root, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	// The directory's lock can keep LOOKUP, as the library's can.
	var dropped []ldlm.Bits
	dirHooks := ldlm.Hooks{Convert: func(_ context.Context, _ *ldlm.ClientLock, bits ldlm.Bits) bool {
		dropped = append(dropped, bits)
		return true
	}}
	// getattr caches d and name under locks, as a stat does.
	getattr := func(name string) fid.FID {
		t.Helper()
		rep, err := n.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItGetattr, FID: d.FID}, dirHooks)
		if err != nil || rep.Lock == nil {
			t.Fatalf("getattr of d: %v", err)
		}
		rep.Lock.Release()
		rep, err = n.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItGetattr, Parent: d.FID, Name: name}, ldlm.Hooks{})
		if err != nil || rep.Lock == nil {
			t.Fatalf("getattr of %s: %v", name, err)
		}
		rep.Lock.Release()
		return rep.Attr.FID
	}
	for _, name := range []string{"a", "b", "c"} {
		if _, err := n.mdc.Mknod(ctx, root, d.FID, name, syscall.S_IFREG|0o644, 0); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, before ldlm.ServerStats, gave int) {
		t.Helper()
		after := c.mdt.LockServer().Stats()
		early := after.EarlyCancels - before.EarlyCancels + after.Converts - before.Converts
		if gave < 2 || after.BlockingASTs != before.BlockingASTs || after.Converts == before.Converts || early != uint64(gave) {
			t.Fatalf("%s: gave back %d locks; %d blocking ASTs, %d early cancels, %d converts", what, gave,
				after.BlockingASTs-before.BlockingASTs, after.EarlyCancels-before.EarlyCancels, after.Converts-before.Converts)
		}
		if len(dropped) == 0 || dropped[len(dropped)-1] != ldlm.BitUpdate {
			t.Fatalf("%s: the directory's lock dropped %v", what, dropped)
		}
	}

	f := getattr("a")
	before := c.mdt.LockServer().Stats()
	gave := n.mdc.GiveBackBits(ctx, d.FID, ldlm.BitUpdate) + n.mdc.GiveBack(ctx, f)
	if err := n.mdc.Unlink(ctx, root, d.FID, "a"); err != nil {
		t.Fatal(err)
	}
	check("unlink", before, gave)

	g, h := getattr("b"), getattr("c")
	before = c.mdt.LockServer().Stats()
	gave = n.mdc.GiveBackBits(ctx, d.FID, ldlm.BitUpdate) + n.mdc.GiveBack(ctx, g) + n.mdc.GiveBack(ctx, h)
	if err := n.mdc.Rename(ctx, root, d.FID, "b", d.FID, "c", 0); err != nil {
		t.Fatal(err)
	}
	check("rename over c", before, gave)

	var names []string
	for e, err := range n.mdc.Readdir(ctx, root, d.FID) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, e.Name)
	}
	if fmt.Sprint(names) != "[. .. c]" {
		t.Fatalf("d holds %v, want . .. c", names)
	}
}

// TestDirLockConvert: a client caching a directory under a getattr lock
// (LOOKUP, UPDATE, PERM, LAYOUT) keeps the lock's LOOKUP bit when another
// client creates in the directory: the blocking AST for UPDATE is answered
// by a convert, not a cancel, what UPDATE protected is dropped, and later
// creates there send the first client no more blocking ASTs.
func TestDirLockConvert(t *testing.T) {
	c := newCluster(t, 1, nil)
	a, b := c.client(), c.client()
	ctx := ctxT(t, time.Minute)
	d, err := a.mdc.Mkdir(ctx, root, a.root, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	var dropped []ldlm.Bits
	var mu sync.Mutex
	hooks := ldlm.Hooks{
		Blocking: func(context.Context, *ldlm.ClientLock, bool) { t.Error("the directory's lock was given back whole") },
		Convert: func(_ context.Context, _ *ldlm.ClientLock, bits ldlm.Bits) bool {
			mu.Lock()
			dropped = append(dropped, bits)
			mu.Unlock()
			return true
		},
	}
	rep, err := a.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItGetattr, FID: d.FID}, hooks)
	if err != nil || rep.Lock == nil {
		t.Fatalf("getattr of the directory: %v %v", rep, err)
	}
	rep.Lock.Release()
	asts := c.mdt.LockServer().Stats().BlockingASTs
	for i := range 3 {
		if _, _, err := b.mdc.Create(ctx, root, d.FID, fmt.Sprint("f", i), 0o644, nil); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.locks.Stats().Converts == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	st := a.locks.Stats()
	mu.Lock()
	defer mu.Unlock()
	if st.Converts != 1 || len(dropped) != 1 || dropped[0]&ldlm.BitUpdate == 0 || dropped[0]&ldlm.BitLookup != 0 {
		t.Fatalf("converts %d, dropped %v", st.Converts, dropped)
	}
	if st.Locks != 1 || st.CancelRPCs != 0 {
		t.Fatalf("client A after the creates: %+v", st)
	}
	if n := c.mdt.LockServer().Stats().BlockingASTs - asts; n != 1 {
		t.Fatalf("%d blocking ASTs for three creates, want one (the first)", n)
	}
}
