package mdc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/lnet"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	"github.com/nacrefs/nacre/mds/mdd"
	"github.com/nacrefs/nacre/mds/mdt"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// loopback starts an MDT with sequences of width seqWidth and a client of
// it on one LNet's loopback.
func loopback(t *testing.T, seqWidth uint32) (*mdc.Client, *mdt.MDT, *ptlrpc.Client) {
	c, m, pc, _ := loopbackServer(t, seqWidth)
	return c, m, pc
}

// loopbackServer is loopback, with the MDT's server (to stop it).
func loopbackServer(t *testing.T, seqWidth uint32) (*mdc.Client, *mdt.MDT, *ptlrpc.Client, *mdt.Server) {
	return loopbackFaults(t, seqWidth, nil)
}

// loopbackFaults is loopbackServer whose MDT service has faults armed,
// and whose import resends after 500 ms at most.
func loopbackFaults(t *testing.T, seqWidth uint32, faults *ptlrpc.Faults) (*mdc.Client, *mdt.MDT, *ptlrpc.Client, *mdt.Server) {
	ctx := context.Background()
	lcfg := lnet.DefaultConfig()
	lcfg.Logger = quiet
	ln, err := lnet.New(ctx, lcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(ctx) })
	srv, err := mdt.NewServer(mdt.ServerConfig{LNet: ln, Logger: quiet, Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(ctx) })
	m, err := srv.AddMDT(mdt.Config{Name: "nacre-MDT0000", Store: mdd.Config{Dir: filepath.Join(t.TempDir(), "mdt"), SeqWidth: seqWidth}})
	if err != nil {
		t.Fatal(err)
	}
	c := ptlrpc.NewClient(ln, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.MDCReplyPortal, Logger: quiet})
	icfg := mdc.ImportConfig("nacre-MDT0000", lwire.ProcessID{NID: lwire.LoNID, PID: ln.PID()})
	icfg.PingInterval = -1
	if faults != nil {
		icfg.MinTimeout, icfg.InitialTimeout, icfg.MaxTimeout = 200*time.Millisecond, 200*time.Millisecond, 500*time.Millisecond
	}
	imp, err := c.NewImport(icfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { imp.Close(ctx) })
	return mdc.New(imp, nil), m, c, srv
}

// TestFIDAllocator: FIDs come from the granted sequence, object ids 1 to
// its width, then a new sequence by SEQ_QUERY; creates use them.
func TestFIDAllocator(t *testing.T) {
	c, m, _ := loopback(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := map[fid.FID]bool{}
	seqs := map[uint64]bool{}
	for range 10 {
		f, err := c.NewFID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[f] || f.Oid < 1 || f.Oid > 4 || !f.IsNormal() {
			t.Fatalf("FID %v (seen %v)", f, seen[f])
		}
		seen[f] = true
		seqs[f.Seq] = true
	}
	if len(seqs) != 3 {
		t.Fatalf("10 FIDs of width 4 from %d sequences", len(seqs))
	}
	root, err := c.GetRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := c.Create(ctx, mdc.Root(), root, "f", 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if seen[a.FID] || !a.FID.IsNormal() {
		t.Fatalf("create took FID %v", a.FID)
	}
	if got, err := m.Store().Getattr(a.FID); err != nil || got.FID != a.FID {
		t.Fatalf("the MDT has %+v: %v", got, err)
	}
	// The MDT checks the FID is from a sequence it granted.
	e, err := c.FLDQuery(ctx, a.FID.Seq)
	if err != nil || e.Type != 0 {
		t.Fatalf("fld %+v %v", e, err)
	}
	if _, err := c.Enqueue(ctx, mdc.Root(), mdc.Intent{Op: mdc.ItLookup, Parent: root, Name: "f"}, ldlm.Hooks{}); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("intent without a lock client: %v", err)
	}
}

// TestFlushClosesWithinDeadline: put-off closes flushed for an unmount
// whose MDT is gone take the unmount's deadline, all of them together, not
// a minute each (closeTimeout, which they got whatever the caller's
// context said), and the error counts and names those not sent.
func TestFlushClosesWithinDeadline(t *testing.T) {
	c, _, _, srv := loopbackServer(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root, err := c.GetRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		if !c.CloseLater(mdc.Root(), &mdc.File{Handle: uint64(i + 1), FID: root}) {
			t.Fatal("close not put off")
		}
	}
	const deadline = time.Second
	dctx, dcancel := context.WithTimeout(context.Background(), deadline)
	defer dcancel()
	start := time.Now()
	err = c.FlushCloses(dctx)
	took := time.Since(start)
	if took > deadline+2*time.Second {
		t.Fatalf("flush of %d closes to a stopped MDT took %v, deadline %v", n, took, deadline)
	}
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d put-off closes not sent", n)) || !strings.Contains(err.Error(), root.String()) {
		t.Fatalf("flush past its deadline: %v, want the %d closes left named", err, n)
	}
}

// TestCloseGoesOn: a close the MDT has not answered when its caller gives
// up goes on by itself: the MDT ends the open (with what the close says of
// the writes), and only then does the client forget it (it would be
// replayed to a restarted MDT meanwhile).
func TestCloseGoesOn(t *testing.T) {
	faults := &ptlrpc.Faults{}
	c, m, _, _ := loopbackFaults(t, 0, faults)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root, err := c.GetRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.Open(ctx, mdc.Root(), root, "f", syscall.O_CREAT|syscall.O_WRONLY, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	faults.Arm(ptlrpc.FailDropRequest, 1)
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	if err := c.CloseWritten(short, mdc.Root(), f, &mdc.LSOM{Size: 12345, Blocks: 32}, true, 0, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close whose request was lost, within 100 ms: %v", err)
	}
	if n := c.OpenHandles(); n != 1 {
		t.Errorf("the open was forgotten before the MDT ended it: %d opens kept", n)
	}
	for m.Store().OpenCount(f.FID) != 0 || c.OpenHandles() != 0 {
		if ctx.Err() != nil {
			t.Fatalf("the close did not go on: the MDT counts %d opens, the client keeps %d", m.Store().OpenCount(f.FID), c.OpenHandles())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if a, err := m.Store().Getattr(f.FID); err != nil || a.Size != 12345 {
		t.Fatalf("after the close: size %d (%v), want the close's 12345", a.Size, err)
	}
}
