package client_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
)

// TestMDSRestartReplay: the MDS (a process of its own) is killed with
// SIGKILL right after a burst of creates it had answered but not yet
// committed, and started again: the client reconnects within the
// recovery window, replays its locks and the uncommitted creates, and
// every file it was told exists does exist; the mount goes on working.
func TestMDSRestartReplay(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, ChildMDS: true})
	fs := c.Mount(0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := client.Root()
	d, err := fs.Mkdir(ctx, root, fs.Root(), "burst", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	// Cached under a lock: its attributes survive through the lock replay.
	if _, err := fs.Getattr(ctx, root, d.FID); err != nil {
		t.Fatal(err)
	}
	if err := c.ReplayBarrierMDS(ctx); err != nil { // the creates are lost in the restart
		t.Fatal(err)
	}
	const n = 30
	for i := range n {
		if _, err := fs.Mknod(ctx, root, d.FID, fmt.Sprint("f", i), syscall.S_IFREG|0o644, 0); err != nil {
			t.Fatal(err)
		}
	}
	c.KillMDS()
	if err := c.RestoreMDS(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		// Made while the MDS is down: waits, then goes through.
		_, err := fs.Mkdir(ctx, root, d.FID, "during", 0o755)
		done <- err
	}()
	time.Sleep(time.Second)
	if err := c.StartMDS(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("mkdir across the restart: %v", err)
	}
	names := map[string]bool{}
	for cookie := uint64(0); cookie != client.DirEnd; {
		ents, next, err := fs.ReadDir(ctx, root, d.FID, cookie, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			names[e.Name] = true
		}
		cookie = next
	}
	for i := range n {
		if !names[fmt.Sprint("f", i)] {
			t.Fatalf("f%d lost in the MDS restart; the directory holds %d entries", i, len(names))
		}
	}
	if !names["during"] {
		t.Fatal("the mkdir made during the outage is missing")
	}
	// A client mounted afterwards sees the same namespace.
	other := c.Mount(1)
	if _, err := other.Lookup(ctx, root, d.FID, fmt.Sprint("f", n-1)); err != nil {
		t.Fatal(err)
	}
}

// TestMDSRestartOpenReplay: files open when the MDS is killed stay open
// after it restarts (the client replays its opens in the recovery window):
// a file unlinked while open keeps its objects past the end of the window
// and reads back byte for byte; closes after the restart succeed (the
// handles are known again), and the last close of the orphan destroys its
// objects.
func TestMDSRestartOpenReplay(t *testing.T) {
	const window = 3 * time.Second
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, ChildMDS: true, RecoveryWindow: window})
	fs := c.Mount(0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := client.Root()
	data := make([]byte, 300<<10)
	for i := range data {
		data[i] = byte(i*13 + i>>10)
	}
	orphan, _, err := fs.Create(ctx, root, fs.Root(), "orphan", syscall.O_CREAT|syscall.O_RDWR, 0o644,
		&client.CreateOptions{Layout: new(layout.Plain(layout.RAID0{StripeCount: 2, StripeSize: 64 << 10, StripeOffset: layout.AnyOffset}))})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := orphan.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := orphan.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	kept, _, err := fs.Create(ctx, root, fs.Root(), "kept", syscall.O_CREAT|syscall.O_WRONLY, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Unlink(ctx, root, fs.Root(), "orphan"); err != nil {
		t.Fatal(err)
	}
	objs := orphan.Layout().Components[0].RAID0.Objects
	if len(objs) != 2 {
		t.Fatalf("orphan objects %v", objs)
	}
	time.Sleep(1500 * time.Millisecond) // the unlink is committed: only the open keeps the file
	c.KillMDS()
	if err := c.StartMDS(); err != nil {
		t.Fatal(err)
	}
	// A request makes the client notice the restart and recover.
	if _, err := fs.Getattr(ctx, root, fs.Root()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(window + time.Second) // past the window: unopened orphans are gone by now
	exists := func(o layout.Object) bool {
		for _, s := range c.Servers() {
			if s.OSS == nil {
				continue
			}
			for _, ost := range s.OSS.OSTs() {
				if ost.Target().Name() == fmt.Sprintf("%s-OST%04x", c.FSName, o.OSTIndex) {
					_, err := ost.Device().GetAttr(ctx, o.Object)
					return err == nil
				}
			}
		}
		t.Fatalf("no OST %d in the test's process", o.OSTIndex)
		return false
	}
	for _, o := range objs {
		if !exists(o) {
			t.Fatalf("object %v of the open orphan destroyed after the MDS restart", o)
		}
	}
	got := make([]byte, len(data))
	if n, err := orphan.ReadAt(ctx, got, 0); err != nil || n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("orphan read after the restart: n=%d err=%v, bytes equal %v", n, err, bytes.Equal(got, data))
	}
	if _, _, err := kept.WriteAt(ctx, []byte("after the restart"), 0); err != nil {
		t.Fatal(err)
	}
	if err := kept.Close(ctx); err != nil {
		t.Fatalf("close of a file opened before the restart: %v", err)
	}
	if err := orphan.Close(ctx); err != nil {
		t.Fatalf("close of the orphan: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, o := range objs {
		for exists(o) {
			if time.Now().After(deadline) {
				t.Fatalf("object %v of the closed orphan never destroyed", o)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if a, err := fs.Lookup(ctx, root, fs.Root(), "kept"); err != nil || a.Size != uint64(len("after the restart")) {
		t.Fatalf("kept after close: %+v %v", a, err)
	}
}

// TestMDSRestartDuringConversion: the MDS restarts while the client is
// converting a lock (giving back its UPDATE bit for a mkdir, keeping
// LOOKUP). The lock is replayed as it stands and the conversion reaches
// the new MDS under the lock's new handle, so that the MDS still calls
// the client back when another client changes what the kept bit covers.
// (Replay skipped such locks: the MDS did not know the client held the
// name, and never told it of a change.)
func TestMDSRestartDuringConversion(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, ChildMDS: true})
	a, b := c.Mount(0), c.Mount(1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := client.Root()
	d, err := a.Mkdir(ctx, root, a.Root(), "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	// a knows "d" and its attributes under a lock with LOOKUP and UPDATE.
	if _, err := a.Lookup(ctx, root, a.Root(), "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Getattr(ctx, root, d.FID); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	client.SetInConvert(func(*ldlm.ClientLock) {
		once.Do(func() { close(entered) })
		<-release
	})
	defer client.SetInConvert(nil)
	made := make(chan error, 1)
	go func() {
		// Gives back d's UPDATE bit first: the conversion waits in the hook.
		_, err := a.Mkdir(ctx, root, d.FID, "x", 0o755)
		made <- err
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("no conversion")
	}
	c.KillMDS()
	if err := c.StartMDS(); err != nil {
		t.Fatal(err)
	}
	// a's next request goes once it has reconnected and replayed its locks.
	if _, _, err := a.ReadDir(ctx, root, a.Root(), 0, 0); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-made; err != nil {
		t.Fatalf("mkdir: %v", err)
	}
	// b changes d's mode, which takes d's LOOKUP bit: the MDT calls back
	// the lock a kept, whose conversion it must know of.
	before := a.LockStats()
	if _, err := b.Setattr(ctx, root, d.FID, client.SetAttr{Valid: 1 << 0, Mode: 0o700}); err != nil {
		t.Fatal(err)
	}
	after := a.LockStats()
	if after.BlockingASTs == before.BlockingASTs {
		t.Errorf("no blocking AST reached a for the lock it kept through the restart (locks %d before, %d after)", before.Locks, after.Locks)
	}
	if got, err := a.Getattr(ctx, root, d.FID); err != nil || got.Mode&0o7777 != 0o700 {
		t.Fatalf("a's getattr after b's chmod: %#o %v, want 0700", got.Mode, err)
	}
}
