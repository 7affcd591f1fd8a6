package client_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/internal/mmp"
	"github.com/nacrefs/nacre/internal/params"
)

// TestOSSRestartUnderWrite: the OSS is killed with SIGKILL while a client
// streams a file to it and started again a few seconds later; the writer
// waits, carries on, and every byte of the file is right.
func TestOSSRestartUnderWrite(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, ChildOSS: true})
	ossDiesUnderWrite(t, c, func() error {
		c.KillOSS()
		time.Sleep(2 * time.Second)
		return c.StartOSS()
	})
}

// TestOSSFailoverToPartner: the OSS of a failover pair (OSTs formatted with
// both NIDs as service nodes, and multiple-mount protection) is killed
// while a client streams a file to it; its partner, at another NID, takes
// the OSTs over once their MMP blocks have stood still for the wait; the
// writer's imports fail over to it and every byte is right, read by a
// client that mounted after (and found the partner's NID first).
func TestOSSFailoverToPartner(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, ChildOSS: true, Failover: true})
	ossDiesUnderWrite(t, c, func() error {
		start := time.Now()
		if err := c.FailOverOSS(); err != nil {
			return err
		}
		// The blocks were not clean (a crash): the partner watched them
		// for a wait, wrote its own and watched again.
		if el, want := time.Since(start), 4*clustertest.PartnerMMPInterval; el < want {
			t.Errorf("the partner served the OSTs after %v, before the MMP waits (%v)", el, want)
		}
		for _, d := range c.OSTDirs {
			if b, err := mmp.Read(d); err != nil || b.Clean() {
				t.Errorf("%s: MMP block %+v, %v: want the partner's heartbeat", d, b, err)
			}
		}
		return nil
	})
}

// ossDiesUnderWrite streams a striped file from client 0 and has fail
// take the OSS down (and bring it or a partner back) after the first
// chunks; the write must complete, and client 1, mounted after, read back
// every byte.
func ossDiesUnderWrite(t *testing.T, c *clustertest.Cluster, fail func() error) {
	t.Helper()
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
	if err := fail(); err != nil {
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

// TestOSSLosesWritesUnderReplayBarrier: the OSTs lose every change after
// a replay barrier in a restart of the OSS, as in a crash that lost the
// disk's cache: writes acknowledged (their pages kept, not committed), an
// overwrite, and a truncate. The client rewrites the pages and replays
// the truncate, and a second client reads exactly what was written.
func TestOSSLosesWritesUnderReplayBarrier(t *testing.T) {
	c, fs, f, ctx := ossFile(t, 2, 0)
	const chunk, chunks = 1 << 20, 12
	want := make([]byte, chunk*chunks)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	write := func(b []byte, off int) {
		t.Helper()
		if _, _, err := f.WriteAt(ctx, b, int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	write(want[:4*chunk], 0)
	if err := f.Sync(ctx); err != nil { // committed: kept through the restart
		t.Fatal(err)
	}
	if err := c.ReplayBarrierOSS(ctx); err != nil {
		t.Fatal(err)
	}
	write(want[4*chunk:], 4*chunk)
	if err := f.Flush(ctx); err != nil { // written, acknowledged, not committed
		t.Fatal(err)
	}
	over := bytes.Repeat([]byte("overwritten after the barrier "), 1000)
	copy(want[chunk+100:], over)
	write(over, chunk+100)
	const size = 10*chunk + 12345
	if _, err := fs.Setattr(ctx, client.Root(), f.FID(), client.SetAttr{Valid: 1 << 3, Size: size}); err != nil {
		t.Fatal(err)
	}
	want = want[:size]
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.FailOSS(); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(ctx); err != nil { // after recovery: all committed now
		t.Fatalf("sync after the OSS restart: %v", err)
	}
	readBack(ctx, t, c, f, want)
}

// TestOSSFailsAgainInRecovery: the OSS loses the writes after a replay
// barrier, and fails again while its clients rewrite them (a barrier set
// as it came back: the second restart loses the rewrites too, or what of
// them it had made). The writer rewrites them all again, from what it
// kept, and a second client reads exactly what was written.
func TestOSSFailsAgainInRecovery(t *testing.T) {
	c, _, f, ctx := ossFile(t, 2, 0)
	want := make([]byte, 24<<20+777)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	if err := c.ReplayBarrierOSS(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil { // written, acknowledged, not committed
		t.Fatal(err)
	}
	c.KillOSS()
	if err := c.RestoreOSS(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartOSS(); err != nil {
		t.Fatal(err)
	}
	if err := c.ReplayBarrierOSS(ctx); err != nil { // as it came back: the rewrites are lost too
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the writer reconnects and rewrites
	if err := c.FailOSS(); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatalf("sync after the OSS restarts: %v", err)
	}
	// The MDS, idle, heard of the restart from the MGS as the clients do,
	// and came back at once: the OSTs' recovery did not wait for its next
	// ping (25 s) to end.
	for _, ost := range []string{"nacre-OST0000", "nacre-OST0001"} {
		st, err := c.OSSParam(ctx, "obdfilter."+ost+".recovery_status")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(st, "status: COMPLETE\n") || !strings.Contains(st, "\nrecovery_duration: 0\n") && !strings.Contains(st, "\nrecovery_duration: 1\n") {
			t.Errorf("%s after the writer's sync:\n%s", ost, st)
		}
	}
	readBack(ctx, t, c, f, want)
}

// TestOSSKeepsSeparateWritesToOnePage: two small writes to one page, far
// apart, each acknowledged and not committed when the OSS restarts under
// a replay barrier. A page holds one piece of partial data: the second
// write sent the first, then started a new piece. The rewrite still
// writes both, and a second client reads them.
func TestOSSKeepsSeparateWritesToOnePage(t *testing.T) {
	// A file longer than the page, the page not cached: the writes make
	// pieces of partial data, not pages of zeros around them.
	const size = 3 * 4096
	c, _, f, ctx := ossFile(t, 1, size)
	if err := c.ReplayBarrierOSS(ctx); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	for _, w := range []struct {
		off int
		b   string
	}{{10, "first piece"}, {1500, "second piece"}, {1990, "end piece!"}} {
		copy(want[w.off:], w.b)
		if _, _, err := f.WriteAt(ctx, []byte(w.b), int64(w.off)); err != nil {
			t.Fatal(err)
		}
		if err := f.Flush(ctx); err != nil { // acknowledged, not committed
			t.Fatal(err)
		}
	}
	if err := c.FailOSS(); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatalf("sync after the OSS restart: %v", err)
	}
	readBack(ctx, t, c, f, want)
}

// TestOSSKeepsWritesOfAPageInFlight: a page's write is acknowledged, not
// committed, and the next write of the page is in flight when the OSS
// restarts under a replay barrier. The rewrite cannot take the page (the
// write in flight holds it, and is resent after), and the resend sends
// only its own bytes: the page's earlier bytes are written again all the
// same, and a second client reads both writes.
func TestOSSKeepsWritesOfAPageInFlight(t *testing.T) {
	const size = 3 * 4096 // longer than the page: pieces, not pages of zeros
	c, _, f, ctx := ossFile(t, 1, size)
	if err := c.ReplayBarrierOSS(ctx); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	first, second := []byte("acknowledged before the restart"), []byte("in flight at the restart")
	copy(want[100:], first)
	copy(want[100+len(first):], second)
	if _, _, err := f.WriteAt(ctx, first, 100); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil { // acknowledged, not committed
		t.Fatal(err)
	}
	c.KillOSS()
	done := make(chan error, 1)
	go func() {
		if _, _, err := f.WriteAt(ctx, second, int64(100+len(first))); err != nil {
			done <- err
			return
		}
		done <- f.Flush(ctx) // in flight until the OSS is back
	}()
	time.Sleep(300 * time.Millisecond)
	if err := c.RestoreOSS(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartOSS(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatalf("sync after the OSS restart: %v", err)
	}
	readBack(ctx, t, c, f, want)
}

// TestSyncAcrossOSSRestart: a Sync begins while the OSS is down, with
// writes acknowledged and not committed; the OSS comes back having lost
// them (a replay barrier), and the client rewrites them under new
// transnos, in fewer than before (one page). The Sync ends once the
// rewrite is committed: it waited for the old transnos, which the
// restarted OST, idle, never reached.
func TestSyncAcrossOSSRestart(t *testing.T) {
	c, _, f, ctx := ossFile(t, 1, 0)
	if err := c.ReplayBarrierOSS(ctx); err != nil {
		t.Fatal(err)
	}
	want := []byte("three writes to one page, rewritten in one")
	for i := range 3 {
		part := want[i*len(want)/3 : (i+1)*len(want)/3]
		if _, _, err := f.WriteAt(ctx, part, int64(i*len(want)/3)); err != nil {
			t.Fatal(err)
		}
		if err := f.Flush(ctx); err != nil { // acknowledged, not committed
			t.Fatal(err)
		}
	}
	c.KillOSS()
	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		done <- f.Sync(sctx)
	}()
	time.Sleep(300 * time.Millisecond) // the Sync waits for the OSS
	if err := c.RestoreOSS(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartOSS(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("sync across the OSS restart: %v", err)
	}
	readBack(ctx, t, c, f, want)
}

// ossFile starts a cluster whose OSS (osts OSTs) runs in a child
// process, mounts it (client 0), and creates a file striped over every
// OST in 1 MiB stripes, size bytes long (a hole) and synced if size is
// not 0.
func ossFile(t *testing.T, osts int, size uint64) (*clustertest.Cluster, *client.FS, *client.File, context.Context) {
	t.Helper()
	c := clustertest.Start(t, clustertest.Options{OSTs: osts, ChildOSS: true})
	fs := c.Mount(0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	lay := layout.Plain(layout.RAID0{StripeCount: int32(osts), StripeSize: 1 << 20, StripeOffset: -1})
	f, _, err := fs.Create(ctx, client.Root(), fs.Root(), t.Name(), syscall.O_RDWR|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	if size > 0 {
		if _, err := fs.Setattr(ctx, client.Root(), f.FID(), client.SetAttr{Valid: 1 << 3, Size: size}); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return c, fs, f, ctx
}

// readBack closes f and checks that another client (client 1) reads
// exactly want from it.
func readBack(ctx context.Context, t *testing.T, c *clustertest.Cluster, f *client.File, want []byte) {
	t.Helper()
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	g, _, err := c.Mount(1).Open(ctx, client.Root(), f.FID(), syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	got := make([]byte, len(want)+4096)
	n, err := g.ReadAt(ctx, got, 0)
	if n == len(want) && bytes.Equal(got[:n], want) {
		return
	}
	i := 0
	for i < min(n, len(want)) && got[i] == want[i] {
		i++
	}
	t.Fatalf("another client reads %d bytes (%v), want %d; the first difference at %d", n, err, len(want), i)
}

// TestMountFollowsMovedOSS: OSTs that had one server are made a failover
// pair's and served by the partner while a client is mounted. The
// client's imports and the MDT's learn of the partner from the
// configuration it registers there (they knew only the first server):
// the client reads what it wrote before, overwrites it, and makes a new
// file, whose objects the MDT precreates on the partner; a second client
// reads every byte.
func TestMountFollowsMovedOSS(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, Clients: 2, ChildOSS: true})
	fs, other := c.Mount(0), c.Mount(1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lay := layout.Plain(layout.RAID0{StripeCount: 2, StripeSize: 1 << 16, StripeOffset: -1})
	rng := rand.New(rand.NewPCG(5, 6))
	data := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	write := func(name string, b []byte) *client.File {
		t.Helper()
		f, _, err := fs.Create(ctx, client.Root(), fs.Root(), name, syscall.O_RDWR|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &lay})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.WriteAt(ctx, b, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		return f
	}
	stored := c.OSTObjectBytes() // (the OSTs' own records: their clients')
	before := data(1 << 20)
	f := write("before", before)
	for _, o := range fs.OSTs() {
		osc, _ := fs.OSC(o)
		if got := osc.Import().Info().Servers; len(got) != 1 || got[0].NID.String() != clustertest.ChildOSSAddr+"@tcp" {
			t.Fatalf("OST%04x: servers %v before the move", o, got)
		}
	}

	if err := c.MoveOSS(ctx); err != nil {
		t.Fatal(err)
	}
	// The overwrite's sync reaches the OSTs where they are served now.
	over := data(1 << 20)
	if _, _, err := f.WriteAt(ctx, over, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, o := range fs.OSTs() {
		osc, _ := fs.OSC(o)
		if got := osc.Import().Info().Server.NID.String(); got != clustertest.PartnerOSSAddr+"@tcp" {
			t.Fatalf("OST%04x served by %s after the move, want the partner", o, got)
		}
	}
	// lctl get_param osc.*.import shows the servers, as Lustre's
	// failover_nids.
	vs, err := params.Default.Get(false, "osc.*-osc-"+fs.Instance()+".import")
	if err != nil || len(vs) != 2 {
		t.Fatalf("osc.*.import: %v, %v", vs, err)
	}
	for _, v := range vs {
		want := "failover_nids: [" + clustertest.PartnerOSSAddr + "@tcp, " + clustertest.ChildOSSAddr + "@tcp]"
		if !strings.Contains(v.Value, want) || !strings.Contains(v.Value, "current_connection: "+clustertest.PartnerOSSAddr+"@tcp") {
			t.Errorf("%s:\n%s\nwant %q and the partner current", v.Name, v.Value, want)
		}
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	after := data(1 << 20)
	g := write("after", after)
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}

	for name, want := range map[string][]byte{"before": over, "after": after} {
		a, err := other.Lookup(ctx, client.Root(), other.Root(), name)
		if err != nil {
			t.Fatal(err)
		}
		h, _, err := other.Open(ctx, client.Root(), a.FID, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want))
		if n, err := h.ReadAt(ctx, got, 0); n != len(want) || !bytes.Equal(got, want) {
			t.Fatalf("%s: read back %d bytes (%v), equal %v", name, n, err, bytes.Equal(got[:n], want[:n]))
		}
		h.Close(ctx)
	}
	// The MDT destroys the objects of unlinked files on the OSTs where
	// they are served now.
	for _, name := range []string{"before", "after"} {
		if err := other.Unlink(ctx, client.Root(), other.Root(), name); err != nil {
			t.Fatal(err)
		}
	}
	for c.OSTObjectBytes() > stored {
		if ctx.Err() != nil {
			t.Fatalf("%d bytes of objects on the OSTs, %d before the files: the MDT's destroys never reached the partner", c.OSTObjectBytes(), stored)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
