package client_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
)

// TestPOSIXLocks: record locks of two clients exclude each other through
// the MDT's lock server; F_GETLK names the holder; a waiting lock is
// granted when the holder unlocks; locks of one owner merge and split.
func TestPOSIXLocks(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	a, b := c.Mount(0), c.Mount(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, _, err := a.Create(ctx, client.Root(), a.Root(), "locked", syscall.O_RDWR|syscall.O_CREAT, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	id := f.FID()
	if err := a.SetLock(ctx, id, 1, client.LockRange{Type: client.LockWrite, Start: 0, End: 99, PID: 11}, false); err != nil {
		t.Fatal(err)
	}
	// Another client's lock on an overlapping range: EAGAIN; elsewhere: fine.
	if err := b.SetLock(ctx, id, 1, client.LockRange{Type: client.LockRead, Start: 50, End: 60, PID: 22}, false); client.Errno(err) != syscall.EAGAIN {
		t.Fatalf("conflicting lock: %v", err)
	}
	if err := b.SetLock(ctx, id, 1, client.LockRange{Type: client.LockWrite, Start: 100, End: 199, PID: 22}, false); err != nil {
		t.Fatal(err)
	}
	got, err := b.GetLock(ctx, id, 7, client.LockRange{Type: client.LockRead, Start: 0, End: client.EOF})
	if err != nil || got.Type != client.LockWrite || got.Start != 0 || got.End != 99 || got.PID != 11 {
		t.Fatalf("F_GETLK: %+v %v", got, err)
	}
	// The same owner's lock never conflicts with itself: a read lock
	// inside its write lock splits it.
	if err := a.SetLock(ctx, id, 1, client.LockRange{Type: client.LockRead, Start: 10, End: 19, PID: 11}, false); err != nil {
		t.Fatal(err)
	}
	// A waiter is granted once the holder unlocks.
	granted := make(chan error, 1)
	go func() {
		granted <- b.SetLock(ctx, id, 2, client.LockRange{Type: client.LockWrite, Start: 0, End: 9, PID: 23}, true)
	}()
	select {
	case err := <-granted:
		t.Fatalf("the waiter did not wait: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := a.SetLock(ctx, id, 1, client.LockRange{Type: client.LockUnlock, Start: 0, End: client.EOF}, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was never granted")
	}
	got, err = a.GetLock(ctx, id, 1, client.LockRange{Type: client.LockWrite, Start: 0, End: client.EOF})
	if err != nil || got.Type != client.LockWrite || got.PID != 23 && got.PID != 22 {
		t.Fatalf("F_GETLK after the hand-over: %+v %v", got, err)
	}
	// An interrupted wait gives its lock back.
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer wcancel()
	if err := a.SetLock(wctx, id, 1, client.LockRange{Type: client.LockWrite, Start: 0, End: 9}, true); client.Errno(err) != syscall.EINTR && client.Errno(err) != syscall.EIO {
		t.Fatalf("interrupted wait: %v", err)
	}
}
