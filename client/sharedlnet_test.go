package client_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
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
	randFill(rng, want)
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
	g, _, err := fs2.Open(ctx, cred, a.FID, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := g.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("client 2 reads: %v (equal %v)", err, bytes.Equal(got, want))
	}
	// Client 2 rewrites the middle (calling back the first client's
	// locks, so its cached pages go), and the first reads all of it back
	// from the OSTs, which write it in place into its pages: 0@lo takes
	// the bytes in without sending them.
	mid := want[1<<20 : 2<<20+333]
	randFill(rng, mid)
	if _, _, err := g.WriteAt(ctx, mid, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	g.Close(ctx)
	f, _, err = fs.Open(ctx, cred, a.FID, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	before = loStats(t, ln)
	clear(got)
	if n, err := f.ReadAt(ctx, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("the first client reads back: %d bytes, %v (equal %v)", n, err, bytes.Equal(got, want))
	}
	f.Close(ctx)
	after = loStats(t, ln)
	if in, out := after.RecvBytes-before.RecvBytes, after.SendBytes-before.SendBytes; in < uint64(len(mid)) || out >= uint64(len(mid)) {
		t.Fatalf("0@lo took in %d bytes and sent %d for a read of %d rewritten bytes: not read in place", in, out, len(mid))
	}

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

// clientPortalMDs counts the MDs on ln's portals that only a client
// posts to: reply MDs, bulk buffers, the lock callback service's request
// buffers.
func clientPortalMDs(ln *lnet.LNet) map[uint32]int {
	out := map[uint32]int{}
	for _, p := range []uint32{ptlrpc.MDCReplyPortal, ptlrpc.OSTBulkPortal, ptlrpc.MDSBulkPortal, ptlrpc.LDLMCBRequestPortal} {
		if n := ln.PortalMDs(p); n != 0 {
			out[p] = n
		}
	}
	return out
}

// TestCloseOnServersLNetHungOSS: a mount on the servers' LNet whose OSS
// hangs with a read in flight unmounts once its disconnect grace is over,
// not when its requests time out or at its deadline, and ends its own
// requests as it goes (it cannot stop the servers' LNet under them as it
// does its own): no MD of the client's stays on that LNet, which goes on
// serving.
func TestCloseOnServersLNetHungOSS(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, ChildOSS: true})
	srv := c.Servers()
	if len(srv) == 0 || srv[0].LNet == nil {
		t.Fatal("no servers in this process")
	}
	ln := srv[0].LNet
	if got := clientPortalMDs(ln); len(got) != 0 {
		t.Fatalf("MDs on the clients' portals before the mount: %v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data := bytes.Repeat([]byte("hung"), 1<<18)
	fid := writeSynced(ctx, t, c.Mount(1), "f", data) // over the sockets
	cfg := c.ClientConfig(0)
	cfg.LNet = ln
	fs, err := client.Mount(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Requests wait at least 30 s for their replies (a slow network):
	// the unmount's DISCONNECT to the hung OSS as long (the cluster
	// restores the node's timeouts).
	nt := ptlrpc.NodeTimeouts()
	if err := ptlrpc.UpdateNodeTimeouts(func(t *ptlrpc.Timeouts) { t.ATMin = 30 * time.Second }); err != nil {
		t.Fatal(err)
	}
	restore := func() { ptlrpc.UpdateNodeTimeouts(func(t *ptlrpc.Timeouts) { *t = nt }) }
	defer restore()
	c.PauseOSS()
	read := make(chan error, 1)
	go func() {
		_, err := readAll(ctx, fs, fid, len(data))
		read <- err
	}()
	for ln.PortalMDs(ptlrpc.MDCReplyPortal) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-read:
		t.Fatalf("read with the OSS hung: %v", err)
	case <-time.After(500 * time.Millisecond):
	}

	// Past the disconnect grace (5 s) the client gives up on the hung OSS
	// and ends its requests, well before the deadline.
	cctx, ccancel := context.WithTimeout(ctx, time.Minute)
	defer ccancel()
	start := time.Now()
	cerr := fs.Close(cctx)
	t.Logf("unmount: %v after %v", cerr, time.Since(start))
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("unmount with the OSS hung took %v", d)
	}
	if got := clientPortalMDs(ln); len(got) != 0 {
		t.Errorf("MDs left on the servers' LNet after the unmount, by portal: %v", got)
	}
	restore()
	c.KillOSS()
	select {
	case err := <-read:
		if err == nil {
			t.Error("read from the hung OSS succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Error("read from the hung OSS still waits after the unmount")
	}

	if _, _, err := ln.Ping(ctx, ln.NIDs()[len(ln.NIDs())-1]); err != nil {
		t.Fatalf("the servers' LNet after the unmount: %v", err)
	}
	fs2 := c.Mount(2)
	if _, err := fs2.Mkdir(ctx, client.Root(), fs2.Root(), "d", 0o755); err != nil {
		t.Fatalf("the MDT after the unmount: %v", err)
	}
}

// TestSecondMountOnServersLNet: a second mount on an LNet that has one
// fails at once, as the lock callback portal is the first one's (it would
// get some of the first mount's callbacks); once the first is unmounted,
// a mount on it works again.
func TestSecondMountOnServersLNet(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	ln := c.Servers()[0].LNet
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := c.ClientConfig(0)
	cfg.LNet = ln
	fs, err := client.Mount(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg2 := c.ClientConfig(1)
	cfg2.LNet = ln
	if fs2, err := client.Mount(ctx, cfg2); err == nil {
		fs2.Close(ctx)
		t.Fatal("a second mount on the servers' LNet")
	} else if !errors.Is(err, ptlrpc.ErrPortalTaken) {
		t.Fatalf("a second mount on the servers' LNet: %v, want ErrPortalTaken", err)
	}
	if ln.PortalMDs(ptlrpc.MDCReplyPortal) != 0 {
		t.Errorf("the failed mount left %d reply MDs", ln.PortalMDs(ptlrpc.MDCReplyPortal))
	}
	if _, err := fs.Mkdir(ctx, client.Root(), fs.Root(), "d", 0o755); err != nil {
		t.Fatalf("the first mount after the second failed: %v", err)
	}
	if err := fs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	fs2, err := client.Mount(ctx, cfg2)
	if err != nil {
		t.Fatalf("a mount after the first unmounted: %v", err)
	}
	if _, err := fs2.Lookup(ctx, client.Root(), fs2.Root(), "d"); err != nil {
		t.Fatal(err)
	}
	if err := fs2.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
