package client_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
)

// TestOSSRestartUnderWrite: the OSS is killed with SIGKILL while a client
// streams a file to it and started again a few seconds later; the writer
// waits, carries on, and every byte of the file is right.
func TestOSSRestartUnderWrite(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, ChildOSS: true})
	fs := c.Mount(0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lay := layout.Plain(layout.RAID0{StripeCount: 2, StripeSize: 1 << 20, StripeOffset: -1})
	f, _, err := fs.Create(ctx, client.Root(), fs.Root(), "big", syscall.O_RDWR|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	const chunk, chunks = 1 << 20, 48
	want := make([]byte, chunk*chunks)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	done := make(chan error, 1)
	progress := make(chan int, chunks)
	go func() {
		for i := range chunks {
			if _, _, err := f.WriteAt(ctx, want[i*chunk:(i+1)*chunk], int64(i*chunk)); err != nil {
				done <- err
				return
			}
			progress <- i
			time.Sleep(20 * time.Millisecond)
		}
		done <- f.Sync(ctx)
	}()
	for i := range 8 {
		select {
		case <-progress:
		case err := <-done:
			t.Fatalf("writer ended after %d chunks: %v", i, err)
		}
	}
	c.KillOSS()
	time.Sleep(2 * time.Second)
	if err := c.StartOSS(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("writer: %v", err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	g, _, err := c.Mount(1).Open(ctx, client.Root(), f.FID(), syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if n, err := g.ReadAt(ctx, got, 0); n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes (%v), equal %v", n, err, bytes.Equal(got[:n], want[:n]))
	}
}
