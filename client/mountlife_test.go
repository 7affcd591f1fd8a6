package client_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
)

// writeSynced makes name in fs's root holding data, on the OSTs.
func writeSynced(ctx context.Context, t *testing.T, fs *client.FS, name string, data []byte) client.FID {
	t.Helper()
	f, _, err := fs.Create(ctx, client.Root(), fs.Root(), name, syscall.O_RDWR|syscall.O_CREAT, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return f.FID()
}

// readAll reads f's first n bytes through fs.
// randFill fills b with bytes from rng.
func randFill(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

func readAll(ctx context.Context, fs *client.FS, f client.FID, n int) ([]byte, error) {
	h, _, err := fs.Open(ctx, client.Root(), f, syscall.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer h.Close(ctx)
	buf := make([]byte, n)
	got, err := h.ReadAt(ctx, buf, 0)
	return buf[:got], err
}

// TestMountWithOSTDown: a mount while an OST is down succeeds at once,
// whether the MGS knows it is down yet (its lease still runs: the mount
// must not wait the whole timeout for it) or not (the client must still
// have an OSC for it), and reading a file on it waits for the OST to
// come back, then returns the file's bytes.
func TestMountWithOSTDown(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, ChildOSS: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	f := writeSynced(ctx, t, c.Mount(0), "f", data)
	c.KillOSS()

	mount := func(i int) *client.FS {
		t.Helper()
		cfg := c.ClientConfig(i)
		cfg.Timeout = time.Minute
		start := time.Now()
		fs, err := client.Mount(ctx, cfg)
		if err != nil {
			t.Fatalf("mount with the OSS down: %v", err)
		}
		t.Cleanup(func() { fs.Close(context.Background()) })
		if d := time.Since(start); d > 15*time.Second {
			t.Fatalf("mount with the OSS down took %v", d)
		}
		if got := fs.OSTs(); len(got) != 2 {
			t.Fatalf("mount with the OSS down has OSCs for %v, want both OSTs", got)
		}
		return fs
	}
	early := mount(1) // the MGS still takes the OSTs for up

	cc, err := grpc.NewClient(c.MGS, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for down := false; !down; {
		resp, err := mgsv1.NewMGSClient(cc).GetClientConfig(ctx, &mgsv1.GetClientConfigRequest{Fsname: c.FSName})
		if err != nil {
			t.Fatal(err)
		}
		down = true
		for _, tg := range resp.GetConfig().GetTargets() {
			if tg.GetKind() == mgsv1.TargetKind_TARGET_KIND_OST && tg.GetState() == mgsv1.TargetState_TARGET_STATE_UP {
				down = false
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the MGS never saw the OSTs go down")
		}
		time.Sleep(100 * time.Millisecond)
	}
	late := mount(2) // the MGS says they are down

	go func() {
		time.Sleep(2 * time.Second)
		if err := c.StartOSS(); err != nil {
			t.Error(err)
		}
	}()
	for _, fs := range []*client.FS{early, late} {
		b, err := readAll(ctx, fs, f, len(data))
		if err != nil || !bytes.Equal(b, data) {
			t.Fatalf("read across the OSS restart: %d bytes (equal %v), %v", len(b), bytes.Equal(b, data), err)
		}
	}
}

// TestServersGone: with every server gone for good, a mount fails within
// its timeout (and a few seconds), and unmounting a mount takes a few
// seconds too, however many OSTs, and leaves no goroutines behind.
func TestServersGone(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 4, ChildOSS: true, ChildMDS: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before := runtime.NumGoroutine()
	cfg := c.ClientConfig(0)
	fs, err := client.Mount(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("gone"), 1<<18)
	f := writeSynced(ctx, t, fs, "f", data)
	if b, err := readAll(ctx, fs, f, len(data)); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("read: %d bytes, %v", len(b), err)
	}
	c.KillOSS()
	c.KillMDS()

	cfg = c.ClientConfig(1)
	cfg.Timeout = 3 * time.Second
	start := time.Now()
	if other, err := client.Mount(ctx, cfg); err == nil {
		other.Close(ctx)
		t.Fatal("mounted with the MDT gone")
	} else if !strings.Contains(err.Error(), "MDT0000") {
		t.Errorf("mount with the MDT gone: %v, want it to name the MDT", err)
	}
	if d := time.Since(start); d > cfg.Timeout+10*time.Second {
		t.Errorf("mount with the MDT gone failed after %v, with a timeout of %v", d, cfg.Timeout)
	}

	cctx, ccancel := context.WithTimeout(ctx, time.Minute)
	defer ccancel()
	start = time.Now()
	if err := fs.Close(cctx); err != nil {
		t.Errorf("unmount with the servers gone: %v", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("unmount with the servers gone took %v", d)
	}
	for end := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before+2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after the unmount, %d before the mount:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
	}
}
