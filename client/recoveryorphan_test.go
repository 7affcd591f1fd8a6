package client_test

import (
	"bytes"
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
)

// TestUnlinkInRecoveryKeepsOpenFile: client a has a file open; the MDS
// restarts; client b, back first, unlinks the file before a, idle, has
// replayed its open. The MDT must keep the file as an orphan (it cannot
// know a has it open yet), so that a goes on reading and writing it; the
// orphan goes when a closes it. Before, the unlink destroyed the file
// and its objects at once, under a's open descriptor.
func TestUnlinkInRecoveryKeepsOpenFile(t *testing.T) {
	// Long, for margin: the test does not wait for its end, and a, which
	// replays its open only at its write after the sleep below, must do
	// so inside it.
	const window = 20 * time.Second
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, ChildMDS: true, RecoveryWindow: window})
	a, b := c.Mount(0), c.Mount(1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
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
	time.Sleep(1500 * time.Millisecond) // committed
	c.KillMDS()
	if err := c.StartMDS(); err != nil {
		t.Fatal(err)
	}
	// b reconnects and unlinks at once; a has not replayed its open.
	if err := b.Unlink(ctx, root, b.Root(), "kept"); err != nil {
		t.Fatal(err)
	}
	// Long enough for the unlink to commit and, had it destroyed the
	// file, for the MDT's destroy log to destroy the objects.
	time.Sleep(3 * time.Second)
	more := []byte("written after the unlink")
	if _, _, err := f.WriteAt(ctx, more, int64(len(data))); err != nil {
		t.Fatalf("write to the open file after another client unlinked it in recovery: %v", err)
	}
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
}
