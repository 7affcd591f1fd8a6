package client_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
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
	const n = 30
	for i := range n {
		if _, err := fs.Mknod(ctx, root, d.FID, fmt.Sprint("f", i), syscall.S_IFREG|0o644, 0); err != nil {
			t.Fatal(err)
		}
	}
	c.KillMDS() // within the MDT's 1 s commit interval of most creates
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
