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
	"github.com/nacrefs/nacre/lnet"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// loStats returns the 0@lo NI's counters of ln.
func loStats(t *testing.T, ln *lnet.LNet) lnet.NIStats {
	t.Helper()
	for _, ni := range ln.Stats().NIs {
		if ni.NID == lwire.LoNID {
			return ni
		}
	}
	t.Fatal("no 0@lo NI")
	return lnet.NIStats{}
}

// TestMountOnServersLNet: a client mounted on the servers' own LNet (as
// nacre up --mount does) sends its requests and bulk to the targets
// through 0@lo, not a socket; a second, ordinary client sees what it
// wrote; its unmount leaves the servers' LNet running.
func TestMountOnServersLNet(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	srv := c.Servers()
	if len(srv) == 0 || srv[0].LNet == nil {
		t.Fatal("no servers in this process")
	}
	ln := srv[0].LNet
	cfg := c.ClientConfig(0)
	cfg.LNet = ln
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := loStats(t, ln)
	fs, err := client.Mount(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if fs.NID() != ln.NIDs()[len(ln.NIDs())-1] {
		t.Fatalf("client NID %v on the servers' LNet %v", fs.NID(), ln.NIDs())
	}
	cred := client.Root()
	lay := layout.Plain(layout.RAID0{StripeCount: 2, StripeSize: 64 << 10, StripeOffset: -1})
	f, _, err := fs.Create(ctx, cred, fs.Root(), "f", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 3<<20+777)
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	if _, _, err := f.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	after := loStats(t, ln)
	if sent := after.SendBytes - before.SendBytes; sent < uint64(len(want)) {
		t.Fatalf("0@lo carried %d bytes for a %d-byte write: the client's data went another way", sent, len(want))
	}

	fs2 := c.Mount(1) // over the sockets
	a, err := fs2.Lookup(ctx, cred, fs2.Root(), "f")
	if err != nil || a.Size != uint64(len(want)) {
		t.Fatalf("lookup from client 2: %+v %v", a, err)
	}
	g, _, err := fs2.Open(ctx, cred, a.FID, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := g.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("client 2 reads: %v (equal %v)", err, bytes.Equal(got, want))
	}
	g.Close(ctx)

	if err := fs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ln.Ping(ctx, ln.NIDs()[len(ln.NIDs())-1]); err != nil {
		t.Fatalf("the servers' LNet after the unmount: %v", err)
	}
	if _, err := fs2.Lookup(ctx, cred, fs2.Root(), "f"); err != nil {
		t.Fatalf("the servers after the unmount: %v", err)
	}
}
