package llite_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
)

// TestDDAcrossOSSRestart: the OSS (a process of its own) is killed with
// SIGKILL while dd streams a file striped over both its OSTs to the mount,
// and started again a few seconds later: dd completes, and the file's
// bytes, read back through a second mount, are the source's.
func TestDDAcrossOSSRestart(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, ChildOSS: true})
	srv := mountT(t, c, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Stripe the file over both OSTs through the library.
	lay := layout.Plain(layout.RAID0{StripeCount: 2, StripeSize: 1 << 20, StripeOffset: -1})
	f, _, err := srv.FS().Create(ctx, client.Root(), srv.FS().Root(), "dd.out", syscall.O_WRONLY|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	f.Close(ctx)

	const size = 96 << 20
	src := filepath.Join(t.TempDir(), "src")
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(srv.Dir(), "dd.out")
	dd := exec.CommandContext(ctx, "dd", "if="+src, "of="+dst, "bs=1M", "oflag=sync", "conv=notrunc,fsync", "status=none")
	var stderr bytes.Buffer
	dd.Stderr = &stderr
	if err := dd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- dd.Wait() }()
	// Kill the OSS once dd is well under way.
	for {
		st, err := os.Stat(dst)
		if err == nil && st.Size() >= 8<<20 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("dd ended before the kill: %v %s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	c.KillOSS()
	time.Sleep(2 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("dd ended while the OSS was down: %v %s", err, stderr.String())
	default:
	}
	if err := c.StartOSS(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("dd: %v %s", err, stderr.String())
	}
	other := mountT(t, c, 1)
	got, err := os.ReadFile(filepath.Join(other.Dir(), "dd.out"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != size || !bytes.Equal(got, data) {
		k := 0
		for k < min(len(got), size) && got[k] == data[k] {
			k++
		}
		t.Fatalf("the file has %d bytes, first difference at %d", len(got), k)
	}
}
