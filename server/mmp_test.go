package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/etcdserver/etcdtest"
	"github.com/nacrefs/nacre/internal/mmp"
	"github.com/nacrefs/nacre/internal/params"
)

// TestTargetMMP: an OST formatted for a failover pair (service nodes,
// multiple-mount protection) is refused by a server while another node's
// heartbeat runs in its MMP block — before anything touches its store,
// not even the replay barrier's restore; served once the other node has
// stopped, registered with its partner's NID as failover NID; and when a
// partner takes it over, the server reports the loss (Lost) and does not
// write the block again.
func TestTargetMMP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ec := etcdtest.Start(t, 1)
	m := startMGS(t, ec.Endpoints())
	if _, err := m.Store().CreateFilesystem(ctx, "pair"); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ost0")
	id := TargetIdentity{FSName: "pair", MGSNodes: []string{m.GRPCAddr()}, FailNodes: []string{"127.0.0.1@tcp0", "10.9.9.9@tcp"},
		MMP: true, MMPInterval: 200 * time.Millisecond}
	if _, err := FormatOST(ctx, filepath.Join(t.TempDir(), "bad"), TargetIdentity{FSName: "pair", MGSNodes: id.MGSNodes, FailNodes: []string{"nowhere"}}); err == nil {
		t.Fatal("mkfs took a failover node that is not a NID")
	}
	if _, err := FormatOST(ctx, filepath.Join(t.TempDir(), "fast"), TargetIdentity{FSName: "pair", MGSNodes: id.MGSNodes, MMP: true, MMPInterval: time.Millisecond}); err == nil {
		t.Fatal("mkfs took an MMP interval of 1ms")
	}
	// tcp0 is tcp: a server compares the failover nodes with its own NIDs.
	canon, err := FormatOST(ctx, filepath.Join(t.TempDir(), "canon"), TargetIdentity{FSName: "pair", MGSNodes: id.MGSNodes, FailNodes: []string{"10.0.0.1@tcp0"}})
	if err != nil || !slices.Equal(canon.FailNodes, []string{"10.0.0.1@tcp"}) {
		t.Fatalf("failover node 10.0.0.1@tcp0 recorded as %v (%v)", canon.FailNodes, err)
	}
	if _, err := FormatOST(ctx, dir, id); err != nil {
		t.Fatal(err)
	}
	read, err := ReadTarget(dir)
	if err != nil || !read.MMP || read.MMPInterval != 200*time.Millisecond || !slices.Equal(read.FailNodes, []string{"127.0.0.1@tcp", "10.9.9.9@tcp"}) {
		t.Fatalf("identity %+v, %v", read, err)
	}
	if b, err := mmp.Read(dir); err != nil || !b.Clean() {
		t.Fatalf("formatted MMP block %+v, %v: want clean", b, err)
	}

	// Another node serves it: its heartbeat runs.
	other, err := mmp.Start(ctx, mmp.Config{Dir: dir, Interval: 200 * time.Millisecond, Node: "partner", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	saved := filepath.Join(dir, replayBarrierDir)
	if err := os.MkdirAll(saved, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = StartServer(ctx, ServerConfig{Dirs: []string{dir}, LNet: testLNet(t), RestoreReplayBarrier: true, Logger: quiet})
	if !errors.Is(err, mmp.ErrInUse) || !strings.Contains(err.Error(), `"partner"`) || !strings.Contains(err.Error(), "pair-OST0000") {
		t.Fatalf("server on a target another node serves: %v, want ErrInUse naming the target and the node", err)
	}
	if _, err := os.Stat(saved); err != nil {
		t.Fatalf("the refused server restored the replay barrier (the other node's store): %v", err)
	}
	if err := os.Remove(saved); err != nil {
		t.Fatal(err)
	}
	if err := other.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	reg := params.New()
	st, err := StartServer(ctx, ServerConfig{Dirs: []string{dir}, LNet: testLNet(t), Logger: quiet, Params: reg})
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) string { t.Helper(); return paramValue(t, reg, name) }
	if v := get("obdfilter.pair-OST0000.mmp"); !strings.Contains(v, "lost: false") || !strings.Contains(v, "interval: 200ms") {
		t.Errorf("obdfilter.pair-OST0000.mmp = %q", v)
	}
	if v := get("obdfilter.pair-OST0000.failover_nids"); strings.TrimSpace(v) != "10.9.9.9@tcp" {
		t.Errorf("obdfilter.pair-OST0000.failover_nids = %q", v)
	}
	targets, err := m.Store().ListTargets(ctx, "pair")
	if err != nil || len(targets) != 1 {
		t.Fatalf("targets %+v, %v", targets, err)
	}
	if tg := targets[0]; !slices.Equal(tg.NIDs, []string{"127.0.0.1@tcp"}) || !slices.Equal(tg.FailoverNIDs, []string{"10.9.9.9@tcp"}) {
		t.Fatalf("registered with NIDs %v and failover NIDs %v, want [127.0.0.1@tcp] and [10.9.9.9@tcp]", tg.NIDs, tg.FailoverNIDs)
	}
	if b, err := mmp.Read(dir); err != nil || b.Clean() || b.Interval < 200*time.Millisecond { // (more if a write took long)
		t.Fatalf("MMP block of the served target %+v, %v", b, err)
	}

	// A partner takes it over (as after a stall of this server longer
	// than its wait): the block is no longer this server's (here a
	// clean one).
	// (Again until noticed: a write between the server's read and its
	// own write is overwritten, as a partner's would be.)
	var lostErr error
	for deadline := time.Now().Add(10 * time.Second); lostErr == nil; {
		if time.Now().After(deadline) {
			t.Fatal("the server did not notice the takeover")
		}
		if err := mmp.Format(dir, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		select {
		case lostErr = <-st.Lost():
		case <-time.After(time.Second):
		}
	}
	if !errors.Is(lostErr, mmp.ErrLost) || !strings.Contains(lostErr.Error(), "pair-OST0000") {
		t.Fatalf("loss: %v", lostErr)
	}
	// Not one more write to the store: the OST's device is read-only,
	// and Close says the target was lost and leaves the block alone.
	if sfs, err := st.devs[0].Statfs(ctx); err != nil || !sfs.ReadOnly {
		t.Fatalf("the lost OST's device: read-only %v (%v)", sfs.ReadOnly, err)
	}
	if v := get("obdfilter.pair-OST0000.mmp"); !strings.Contains(v, "lost: true") {
		t.Errorf("obdfilter.pair-OST0000.mmp after the loss = %q", v)
	}
	time.Sleep(200 * time.Millisecond)
	if err := st.Close(ctx); !errors.Is(err, mmp.ErrLost) {
		t.Errorf("Close after the loss: %v, want ErrLost", err)
	}
	if b, err := mmp.Read(dir); err != nil || !b.Clean() {
		t.Fatalf("the server wrote the MMP block after its loss: %+v, %v", b, err)
	}
}
