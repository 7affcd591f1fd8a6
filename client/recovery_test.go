package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
)

// TestSwapLayoutsRefusedInRecovery: the MDT counts opens for write in
// memory only, rebuilt by the clients' replayed opens. A client that
// holds a file open for write and is idle notices an MDS restart only
// at its next request, ping or word from the MGS, so for a while after
// the restart its open is not counted. A swap another client asks for
// then waits until the writer is back (recovery serves nothing new before
// every client has replayed), and is refused for its counted open: the
// writer's pages not yet written back belong to the old objects, which
// lfs migrate destroys with its copy.
func TestSwapLayoutsRefusedInRecovery(t *testing.T) {
	const window = 20 * time.Second
	c, a, b, ctx := restartable(t, 1, window)
	root := client.Root()
	w, _, err := a.Create(ctx, root, a.Root(), "written", syscall.O_CREAT|syscall.O_WRONLY, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.WriteAt(ctx, []byte("dirty"), 0); err != nil {
		t.Fatal(err)
	}
	cp, _, err := b.Create(ctx, root, b.Root(), "copy", syscall.O_CREAT|syscall.O_WRONLY, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wa, err := b.Lookup(ctx, root, b.Root(), "written")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := b.Lookup(ctx, root, b.Root(), "copy")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SwapLayouts(ctx, root, wa.FID, ca.FID, nil); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("swap with a writer, before the restart: %v, want EBUSY", err)
	}
	restartMDS(t, c)
	// b reconnects and asks at once; a, idle, may not have replayed its
	// open yet (the MGS tells it of the restart, so it is back soon): the
	// swap waits for it if so.
	if err := b.SwapLayouts(ctx, root, wa.FID, ca.FID, nil); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("swap with a writer, after the restart: %v, want EBUSY", err)
	}
	if err := <-backAfterRestart(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatalf("the writer's close: %v", err)
	}
	if err := b.SwapLayouts(ctx, root, wa.FID, ca.FID, nil); err != nil {
		t.Fatalf("swap once the writer closed, after recovery: %v", err)
	}
}

// TestSwapLayoutsReplayAfterWriterReplay: a swap the MDT made and did not
// commit before it stopped is replayed by its client, whichever client is
// back first: a writer that opened the file after the swap (and so writes
// to the objects the swap gave it) has its open replayed too. Its open
// waits for the swap (opens are replayed once every client has replayed
// its requests); were it replayed first, refusing the replayed swap for
// that writer would undo it, and the unlink of lfs migrate's copy,
// replayed next, would destroy the objects the writer writes to.
func TestSwapLayoutsReplayAfterWriterReplay(t *testing.T) {
	const window = 20 * time.Second
	c, a, b, ctx := restartable(t, 2, window)
	root := client.Root()
	file, cp := makeFile(ctx, t, b, "file", []byte("file")), makeFile(ctx, t, b, "copy", []byte("copy"))
	copyLayout, err := b.Layout(ctx, root, cp)
	if err != nil {
		t.Fatal(err)
	}
	want := copyLayout.Components[0].RAID0.Objects
	if err := c.ReplayBarrierMDS(ctx); err != nil { // the swap and the open are lost in the restart
		t.Fatal(err)
	}
	if err := b.SwapLayouts(ctx, root, file, cp, nil); err != nil {
		t.Fatal(err)
	}
	w, _, err := a.Open(ctx, root, file, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	client.SetNoImperativeRecovery(b) // b back only when it asks
	t.Cleanup(func() { client.SetNoImperativeRecovery(nil) })
	if err := c.FailMDS(); err != nil {
		t.Fatal(err)
	}
	// The writer is back first (its open, made after the swap, waits
	// for it), then the swapper.
	done := backAfterRestart(ctx, a)
	waitReplaying(t, a)
	if err := <-backAfterRestart(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, err := c.Mount(2).Layout(ctx, root, file)
	if err != nil {
		t.Fatal(err)
	}
	if objs := got.Components[0].RAID0.Objects; len(objs) != len(want) || objs[0] != want[0] {
		t.Errorf("after the restart the file has objects %v, want the copy's %v (the swap, replayed, lost)", objs, want)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatalf("the writer's close: %v", err)
	}
}

// TestUnlinkInRecoveryKeepsOpenFile: client a has a file open; client b
// unlinks it, and the MDS stops before that committed. After the restart
// b, back first, replays its unlink before a, idle, has replayed its
// open. The MDT must keep the file as an orphan (it cannot know a has it
// open yet), so that a goes on reading and writing it; the orphan goes
// when a closes it. Before, the unlink destroyed the file and its
// objects at once, under a's open descriptor.
func TestUnlinkInRecoveryKeepsOpenFile(t *testing.T) {
	const window = 20 * time.Second
	c, a, b, ctx := restartable(t, 1, window)
	root := client.Root()
	f, _, err := a.Create(ctx, root, a.Root(), "kept", syscall.O_CREAT|syscall.O_RDWR, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("nacre kept "), 10000)
	if _, _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ReplayBarrierMDS(ctx); err != nil { // the unlink is lost in the restart
		t.Fatal(err)
	}
	if err := b.Unlink(ctx, root, b.Root(), "kept"); err != nil {
		t.Fatal(err)
	}
	client.SetNoImperativeRecovery(a) // a back only at its write
	t.Cleanup(func() { client.SetNoImperativeRecovery(nil) })
	if err := c.FailMDS(); err != nil {
		t.Fatal(err)
	}
	done := backAfterRestart(ctx, b) // replays the unlink
	waitReplaying(t, b)
	more := []byte("written after the unlink")
	if _, _, err := f.WriteAt(ctx, more, int64(len(data))); err != nil {
		t.Fatalf("write to the open file after another client's unlink was replayed: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Long enough for the unlink to commit and, had it destroyed the
	// file, for the MDT's destroy log to destroy the objects.
	time.Sleep(3 * time.Second)
	if err := f.Sync(ctx); err != nil {
		t.Fatalf("sync: %v", err)
	}
	want := append(append([]byte(nil), data...), more...)
	got := make([]byte, len(want))
	if n, err := f.ReadAt(ctx, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("read back from the open file: %d bytes, %v; equal %v", n, err, bytes.Equal(got, want))
	}
	if err := f.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := b.Lookup(ctx, root, b.Root(), "kept"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("the replayed unlink lost: lookup %v", err)
	}
}

// backAfterRestart makes fs notice the MDS restart and recover, in the
// background: the channel gets the error of its request (one no cache
// answers), answered once recovery is over.
func backAfterRestart(ctx context.Context, fs *client.FS) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := fs.FID2Path(ctx, client.Root(), fs.Root())
		done <- err
	}()
	return done
}

// waitReplaying waits until fs's MDC import is back in the restarted
// MDT's recovery: replaying its requests (REPLAY: a replay may wait for
// another client's turn), or done with them and waiting for the other
// clients (REPLAY_LOCKS, REPLAY_WAIT).
func waitReplaying(t *testing.T, fs *client.FS) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		switch fs.MDCState() {
		case ptlrpc.StateReplay, ptlrpc.StateReplayLocks, ptlrpc.StateReplayWait:
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the MDC import is %v, not in recovery", fs.MDCState())
		}
	}
}

// TestRecoveryEndsWhenClientsAreBack: the MDT records its clients, and
// after a restart ends recovery as soon as all of them have reconnected
// and replayed, not when its window runs out: a swap of layouts, refused
// during recovery, goes through within seconds of a 60 s window.
func TestRecoveryEndsWhenClientsAreBack(t *testing.T) {
	const window = time.Minute
	c, a, b, ctx := restartable(t, 1, window)
	root := client.Root()
	fids := []client.FID{makeFile(ctx, t, a, "x", []byte("x")), makeFile(ctx, t, a, "y", []byte("y"))}
	if _, err := b.Getattr(ctx, root, b.Root()); err != nil {
		t.Fatal(err)
	}
	restartMDS(t, c)
	start := time.Now()
	// Each waits for the other to be back (recovery serves nothing new
	// before): both at once.
	for _, done := range []<-chan error{backAfterRestart(ctx, a), backAfterRestart(ctx, b)} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the clients' first requests after the restart took %v", d)
	}
	for {
		err := b.SwapLayouts(ctx, root, fids[0], fids[1], nil)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EBUSY) {
			t.Fatal(err)
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("swap still refused %v after the restart (window %v): recovery did not end with both clients back", time.Since(start).Round(time.Second), window)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("recovery over %v after the restart", time.Since(start).Round(time.Millisecond))
}

// restartable starts a cluster whose MDS runs in a process of its own,
// so that a test can kill it, with the recovery window given and two
// mounts.
func restartable(t *testing.T, osts int, window time.Duration) (*clustertest.Cluster, *client.FS, *client.FS, context.Context) {
	t.Helper()
	c := clustertest.Start(t, clustertest.Options{OSTs: osts, ChildMDS: true, RecoveryWindow: window})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c, c.Mount(0), c.Mount(1), ctx
}

// restartMDS kills the MDS once what it did has committed (its commit
// interval is a second) and starts it again.
func restartMDS(t *testing.T, c *clustertest.Cluster) {
	t.Helper()
	time.Sleep(1500 * time.Millisecond)
	c.KillMDS()
	if err := c.StartMDS(); err != nil {
		t.Fatal(err)
	}
}

// makeFile creates name in fs's root with data and closes it.
func makeFile(ctx context.Context, t *testing.T, fs *client.FS, name string, data []byte) client.FID {
	t.Helper()
	return makeFileIn(ctx, t, fs, fs.Root(), name, data)
}

// makeFileIn creates name in directory dir with data and closes it.
func makeFileIn(ctx context.Context, t *testing.T, fs *client.FS, dir client.FID, name string, data []byte) client.FID {
	t.Helper()
	f, attr, err := fs.Create(ctx, client.Root(), dir, name, syscall.O_CREAT|syscall.O_WRONLY, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return attr.FID
}

// TestImperativeRecovery: a client that is idle when the MDS restarts
// learns of it from the MGS (the MDT registering again) and reconnects
// and replays at once, as Lustre's imperative recovery has it, not at its
// next ping 25 s later: recovery, which holds the busy client until the
// idle one is back, is over in moments.
func TestImperativeRecovery(t *testing.T) {
	c, a, b, ctx := restartable(t, 1, time.Minute)
	makeFile(ctx, t, a, "x", []byte("x"))
	if _, err := b.FID2Path(ctx, client.Root(), b.Root()); err != nil { // b connected, then idle
		t.Fatal(err)
	}
	restartMDS(t, c)
	start := time.Now()
	if err := <-backAfterRestart(ctx, a); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("a's first request after the restart took %v: the idle client came back late", d)
	}
	for end := time.Now().Add(5 * time.Second); b.MDCState() != ptlrpc.StateFull; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the idle client's MDC is %v 5 s after recovery ended, want FULL", b.MDCState())
		}
	}
}

// TestMGSAwayNoPingStorm: while the MGS is away the client's
// configuration watch tries again every second; each try must not have
// every import ping its target (the word that targets may have restarted
// is for when the watch is back), or an idle client pings every target
// every second instead of every ping interval.
func TestMGSAwayNoPingStorm(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, Clients: 1})
	fs := c.Mount(0)
	time.Sleep(500 * time.Millisecond)
	c.StopMGS()
	time.Sleep(500 * time.Millisecond)
	before := fs.RPCsSent()
	time.Sleep(5 * time.Second)
	if n := fs.RPCsSent() - before; n > 3 {
		t.Errorf("an idle client sent %d RPCs in 5 s with the MGS away", n)
	}
}

// TestReplayAfterAnotherClientsReplay: client a makes a directory and
// client b a file in it, and the MDS stops before either committed. After
// the restart b is back first, a only later: b's replayed create must
// wait for a's mkdir (the MDT replays every client's requests in transno
// order). Run first, it found no directory, was refused, and b's file was
// lost.
func TestReplayAfterAnotherClientsReplay(t *testing.T) {
	c, a, b, ctx := restartable(t, 1, time.Minute)
	root := client.Root()
	if _, err := b.FID2Path(ctx, root, b.Root()); err != nil { // b connected
		t.Fatal(err)
	}
	if err := c.ReplayBarrierMDS(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := a.Mkdir(ctx, root, a.Root(), "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("b's file in a's directory")
	makeFileIn(ctx, t, b, d.FID, "f", data)
	client.SetNoImperativeRecovery(a) // a back only when it asks
	t.Cleanup(func() { client.SetNoImperativeRecovery(nil) })
	if err := c.FailMDS(); err != nil { // both lost: the clients replay them
		t.Fatal(err)
	}
	bDone := backAfterRestart(ctx, b)
	waitReplaying(t, b)
	time.Sleep(500 * time.Millisecond) // b's create waits for a
	if err := <-backAfterRestart(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	fa, err := b.Lookup(ctx, root, d.FID, "f")
	if err != nil {
		t.Fatalf("b's file after the restart: %v", err)
	}
	r, _, err := b.Open(ctx, root, fa.FID, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	got := make([]byte, 64)
	if n, err := r.ReadAt(ctx, got, 0); !bytes.Equal(got[:n], data) {
		t.Fatalf("b's file reads %q (%v), want %q", got[:n], err, data)
	}
}

// TestReplayedCreateKeepsItsObjects: a file created and written after
// the MDT's last commit, the MDS then failing: the client replays the
// create with the layout it was given, and the restarted MDT makes the
// file on those objects again, where its data is; another client reads
// it. Made anew, the file got new, empty objects, and its data was lost
// (and the OSTs' orphan cleanup, at the MDT's start, destroyed the old).
func TestReplayedCreateKeepsItsObjects(t *testing.T) {
	c, a, _, ctx := restartable(t, 2, time.Minute)
	root := client.Root()
	if err := c.ReplayBarrierMDS(ctx); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("data of a file made after the barrier "), 3000)
	f := makeFile(ctx, t, a, "after", data)
	before, err := a.Layout(ctx, root, f)
	if err != nil {
		t.Fatal(err)
	}
	g := failMDS(ctx, t, c, a)
	keptObjects(ctx, t, g, f, before, 0)
	readsBack(ctx, t, g, f, 0, data)
}

// failMDS has the MDS fail (losing what came after its replay barrier)
// and start again, waits until fs is back and has replayed, and returns
// another client's mount, new since.
func failMDS(ctx context.Context, t *testing.T, c *clustertest.Cluster, fs *client.FS) *client.FS {
	t.Helper()
	if err := c.FailMDS(); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.FID2Path(ctx, client.Root(), fs.Root()); err != nil { // back and replayed
		t.Fatal(err)
	}
	return c.Mount(2)
}

// keptObjects checks that component ci of f's layout, as fs sees it, has
// the objects it had in before.
func keptObjects(ctx context.Context, t *testing.T, fs *client.FS, f client.FID, before *layout.Layout, ci int) {
	t.Helper()
	after, err := fs.Layout(ctx, client.Root(), f)
	switch {
	case err != nil:
		t.Fatal(err)
	case after == nil || len(after.Components) <= ci:
		t.Fatalf("the file's layout after the replay %v has no component %d", after, ci)
	}
	if bo, ao := before.Components[ci].RAID0.Objects, after.Components[ci].RAID0.Objects; len(bo) == 0 || !slices.Equal(bo, ao) {
		t.Fatalf("component %d's objects after the replay %v, before %v", ci, ao, bo)
	}
}

// readsBack checks that fs reads want at off of f, and nothing after it.
func readsBack(ctx context.Context, t *testing.T, fs *client.FS, f client.FID, off int64, want []byte) {
	t.Helper()
	r, _, err := fs.Open(ctx, client.Root(), f, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	got := make([]byte, len(want)+100)
	if n, err := r.ReadAt(ctx, got, off); n != len(want) || !bytes.Equal(got[:n], want) {
		t.Fatalf("another client reads %d bytes (%v) at %d, not the %d written", n, err, off, len(want))
	}
}

// TestReplayedLayoutIntentKeepsItsObjects: a PFL component first written
// after the MDT's last commit, the MDS then failing: the replayed layout
// intent instantiates the component again on the objects the client wrote
// to. It was refused while the MDT recovered, and the data was lost in
// orphans.
func TestReplayedLayoutIntentKeepsItsObjects(t *testing.T) {
	c, a, _, ctx := restartable(t, 2, time.Minute)
	root := client.Root()
	tmpl := pfl()
	w, attr, err := a.Create(ctx, root, a.Root(), "pfl", syscall.O_RDWR|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &tmpl})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	head := []byte("in the first component, made with the file")
	if _, _, err := w.WriteAt(ctx, head, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ReplayBarrierMDS(ctx); err != nil {
		t.Fatal(err)
	}
	const at = 2 << 20 // in the second component
	data := bytes.Repeat([]byte("written after the barrier, in a component made for it "), 6000)
	if _, _, err := w.WriteAt(ctx, data, at); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := a.Layout(ctx, root, attr.FID)
	if err != nil {
		t.Fatal(err)
	}
	if !before.Components[1].Instantiated() {
		t.Fatalf("the write did not instantiate the second component: %+v", before.Components[1])
	}
	g := failMDS(ctx, t, c, a)
	keptObjects(ctx, t, g, attr.FID, before, 1)
	readsBack(ctx, t, g, attr.FID, at, data)
	got := make([]byte, len(head))
	r, _, err := g.Open(ctx, root, attr.FID, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if n, err := r.ReadAt(ctx, got, 0); n != len(head) || !bytes.Equal(got, head) {
		t.Fatalf("another client reads %d bytes (%v) of the first component, not the %d written", n, err, len(head))
	}
}

// TestReplayedSetLayoutKeepsItsObjects: a file made without objects
// before the MDT's last commit and given its layout after it (lfs
// setstripe, or cp -a setting lustre.lov), then written, the MDS then
// failing: the replayed set layout gives it back the objects the client
// wrote to, not new ones.
func TestReplayedSetLayoutKeepsItsObjects(t *testing.T) {
	c, a, _, ctx := restartable(t, 2, time.Minute)
	root := client.Root()
	w, attr, err := a.Create(ctx, root, a.Root(), "delayed", syscall.O_RDWR|syscall.O_CREAT, 0o644, &client.CreateOptions{Delay: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if err := c.ReplayBarrierMDS(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := a.SetLayout(ctx, root, attr.FID, layout.Plain(layout.RAID0{StripeCount: 2, StripeSize: 64 << 10, StripeOffset: -1}))
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("written to the objects a set layout gave "), 5000)
	if _, _, err := w.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	g := failMDS(ctx, t, c, a)
	keptObjects(ctx, t, g, attr.FID, before, 0)
	readsBack(ctx, t, g, attr.FID, 0, data)
}

// TestReplayedCloseRecordsItsSize: a file opened, written and closed after
// the MDT's last commit, the MDS then failing: the close is replayed
// before any open could be (opens are replayed with the locks), and must
// still record what it carried, the file's lazy size. It was refused
// (EBADF), and the size lost.
func TestReplayedCloseRecordsItsSize(t *testing.T) {
	c, a, _, ctx := restartable(t, 1, time.Minute)
	root := client.Root()
	f := makeFile(ctx, t, a, "closed", nil) // before the barrier: the file, empty
	if err := c.ReplayBarrierMDS(ctx); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("written and closed after the barrier "), 1000)
	w, _, err := a.Open(ctx, root, f, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.FailMDS(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.FID2Path(ctx, root, a.Root()); err != nil { // back and replayed
		t.Fatal(err)
	}
	v, err := c.Mount(2).Getxattr(ctx, root, f, client.XattrLSOM)
	if err != nil {
		t.Fatal(err)
	}
	var attr client.MDTAttr
	if err := json.Unmarshal(v, &attr); err != nil || attr.Size != uint64(len(data)) {
		t.Fatalf("the MDT's lazy size after the replayed close: %d (%v), want %d", attr.Size, err, len(data))
	}
}

// TestTmpfileSurvivesMDSRestart: an O_TMPFILE file made after the replay
// barrier is lost with the MDS and made again by its client's replays —
// the create, then the open of a file with no name — so that it keeps its
// bytes, stays open, and can still be linked into place afterwards.
func TestTmpfileSurvivesMDSRestart(t *testing.T) {
	const window = 20 * time.Second
	c, a, b, ctx := restartable(t, 1, window)
	root := client.Root()
	if err := c.ReplayBarrierMDS(ctx); err != nil { // the tmpfile is lost in the restart
		t.Fatal(err)
	}
	f, _, err := a.Tmpfile(ctx, root, a.Root(), unix.O_TMPFILE|syscall.O_RDWR, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("nacre tmpfile "), 10000)
	if _, _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.FailMDS(); err != nil {
		t.Fatal(err)
	}
	if err := <-backAfterRestart(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Link(ctx, root, f.FID(), a.Root(), "named"); err != nil {
		t.Fatalf("link of the tmpfile after the restart: %v", err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := b.Lookup(ctx, root, b.Root(), "named")
	if err != nil || n.FID != f.FID() {
		t.Fatalf("the other client finds %+v, %v", n, err)
	}
	if got, err := readAll(ctx, b, n.FID, len(data)+10); !bytes.Equal(got, data) {
		t.Fatalf("the other client reads %d bytes (%v), equal %v", len(got), err, bytes.Equal(got, data))
	}
}
