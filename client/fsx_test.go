package client_test

import (
	"context"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/fsx"
	"github.com/nacrefs/nacre/internal/layout"
)

// libFile adapts a library File to the exerciser.
type libFile struct {
	ctx context.Context
	f   *client.File
}

func (l libFile) ReadAt(p []byte, off int64) (int, error) { return l.f.ReadAt(l.ctx, p, off) }
func (l libFile) WriteAt(p []byte, off int64) (int, error) {
	n, _, err := l.f.WriteAt(l.ctx, p, off)
	return n, err
}
func (l libFile) Truncate(size int64) error { return l.f.Truncate(l.ctx, size) }
func (l libFile) Size() (int64, error)      { return l.f.Size(l.ctx) }

// fsxFile makes the exerciser's file, striped over stripes OSTs in 64
// KiB stripes, on client 0 of c.
func fsxFile(ctx context.Context, t *testing.T, c *clustertest.Cluster, stripes int32) (*client.FS, *client.File) {
	t.Helper()
	fs := c.Mount(0)
	lay := layout.Plain(layout.RAID0{StripeCount: stripes, StripeSize: 64 << 10, StripeOffset: -1})
	f, _, err := fs.Create(ctx, client.Root(), fs.Root(), "fsx", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	return fs, f
}

// TestFSX runs 100,000 random operations on a file striped over four
// OSTs in 64 KiB stripes, closing and reopening it every 5,000 (what a
// handle flushed, the next must read); every read is checked byte for
// byte against the exerciser's model. The seed is in any failure.
func TestFSX(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cred := client.Root()
	fs, f := fsxFile(ctx, t, c, 4)
	fid := f.FID()
	ops := 100000
	if testing.Short() {
		ops = 10000
	}
	reopen := func(old fsx.File) (fsx.File, error) {
		if err := old.(libFile).f.Close(ctx); err != nil {
			return nil, err
		}
		nf, _, err := fs.Open(ctx, cred, fid, syscall.O_RDWR)
		return libFile{ctx, nf}, err
	}
	st, err := fsx.Run(ctx, libFile{ctx, f}, fsx.Config{Ops: ops, MaxSize: 1 << 20, MaxLen: 96 << 10, Seed: uint64(time.Now().UnixNano()),
		Reopen: reopen, ReopenEvery: 5000})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", st)
}

// TestFSXAcrossOSSFailures runs the exerciser on a file striped over the
// OSTs of an OSS that fails every 1,000 operations and comes back having
// lost every change since the failure before (a replay barrier set then):
// the writes its clients had acknowledged and not seen committed, dirty
// pages not sent yet, truncates. The client rewrites and replays them,
// and every read after is checked byte for byte against the model.
func TestFSXAcrossOSSFailures(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, ChildOSS: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cred := client.Root()
	fs, f := fsxFile(ctx, t, c, 2)
	fid := f.FID()
	if err := c.ReplayBarrierOSS(ctx); err != nil {
		t.Fatal(err)
	}
	failures := 0
	reopen := func(old fsx.File) (fsx.File, error) {
		// The OSS fails under the open file (dirty pages, writes not
		// committed), losing what it did since the last barrier.
		if err := c.FailOSS(); err != nil {
			return nil, err
		}
		failures++
		if err := old.(libFile).f.Close(ctx); err != nil {
			return nil, err
		}
		if err := c.ReplayBarrierOSS(ctx); err != nil {
			return nil, err
		}
		nf, _, err := fs.Open(ctx, cred, fid, syscall.O_RDWR)
		return libFile{ctx, nf}, err
	}
	seed := uint64(time.Now().UnixNano())
	st, err := fsx.Run(ctx, libFile{ctx, f}, fsx.Config{Ops: 6000, MaxSize: 1 << 20, MaxLen: 96 << 10, Seed: seed,
		Reopen: reopen, ReopenEvery: 1000})
	if err != nil {
		t.Fatalf("seed %d, after %d OSS failures: %v", seed, failures, err)
	}
	t.Logf("%d OSS failures: %+v", failures, st)
}

// TestFSXUnderServerFailures is TestFSXAcrossOSSFailures with the servers
// failing at any moment, not between operations — the OSS, then the MDS
// (truncates change the file's size there too), in turn, each losing what
// it did since its last failure: a write, read or truncate of the
// exerciser may be in flight, or waiting for its lock, as one goes.
func TestFSXUnderServerFailures(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, ChildOSS: true, ChildMDS: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, f := fsxFile(ctx, t, c, 2)
	if err := c.ReplayBarrierOSS(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ReplayBarrierMDS(ctx); err != nil {
		t.Fatal(err)
	}
	// Every 1,000 operations (the exerciser's reopen, as a clock) a
	// server fails a moment later, in the middle of what follows.
	tick, failed := make(chan struct{}, 1), make(chan int, 1)
	go func() {
		n := 0
		defer func() { failed <- n }()
		for range tick {
			time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
			fail, barrier := c.FailOSS, c.ReplayBarrierOSS
			if n%2 == 1 {
				fail, barrier = c.FailMDS, c.ReplayBarrierMDS
			}
			if err := fail(); err != nil {
				t.Error(err)
				return
			}
			n++
			if err := barrier(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	ticked := func(f fsx.File) (fsx.File, error) {
		select {
		case tick <- struct{}{}:
		default: // the last failure is still on
		}
		return f, nil
	}
	seed := uint64(time.Now().UnixNano())
	st, err := fsx.Run(ctx, libFile{ctx, f}, fsx.Config{Ops: 8000, MaxSize: 1 << 20, MaxLen: 96 << 10, Seed: seed,
		Reopen: ticked, ReopenEvery: 1000})
	close(tick)
	n := <-failed
	if err != nil {
		t.Fatalf("seed %d, after %d server failures: %v", seed, n, err)
	}
	if n < 4 {
		t.Errorf("only %d server failures during the run", n)
	}
	t.Logf("%d server failures: %+v", n, st)
}
