package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/etcdserver/etcdtest"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lnettest"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	"github.com/nacrefs/nacre/mgs"

	_ "github.com/nacrefs/nacre/lnd/lolnd"
	_ "github.com/nacrefs/nacre/lnd/socklnd"
)

// TestStorageMDT: mkfs of an MDT and two OSTs, one `nacre server` process
// serving all three; the MDT learns the OSTs from its registration, and a
// client creates a file whose objects land on them.
func TestStorageMDT(t *testing.T) {
	ec := etcdtest.Start(t, 1)
	m := startMGS(t, ec.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := m.Store().CreateFilesystem(ctx, "nacre"); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	var dirs []string
	for i := range 2 {
		dir := filepath.Join(root, "ost"+strconv.Itoa(i))
		if _, err := FormatOST(ctx, dir, TargetIdentity{FSName: "nacre", Index: uint32(i), MGSNodes: []string{m.GRPCAddr()}}); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	mdtDir := filepath.Join(root, "mdt0")
	id, err := FormatMDT(ctx, mdtDir, TargetIdentity{FSName: "nacre", MGSNodes: []string{m.GRPCAddr()}})
	if err != nil || id.Label != "nacre-MDT0000" || id.Kind != mgs.KindMDT || id.Backend != "pebble" {
		t.Fatalf("mkfs: %+v %v", id, err)
	}
	if _, err := FormatMDT(ctx, mdtDir, TargetIdentity{FSName: "nacre", MGSNodes: []string{m.GRPCAddr()}}); err == nil {
		t.Fatal("a second mkfs of the MDT succeeded")
	}
	if _, err := FormatMDT(ctx, filepath.Join(root, "mdt1"), TargetIdentity{FSName: "nacre", Index: 1, MGSNodes: []string{m.GRPCAddr()}}); err == nil {
		t.Fatal("mkfs of MDT1 succeeded")
	}
	dirs = append([]string{mdtDir}, dirs...) // the MDT first: StartServer registers OSTs first anyway

	port := lnettest.FreePort(t, "127.0.0.1", "127.0.0.61")
	lcfg := lnet.DefaultConfig()
	nets, err := lnet.ParseNetworks("tcp(127.0.0.1)")
	if err != nil {
		t.Fatal(err)
	}
	nets[0].Options = map[string]string{"port": strconv.Itoa(port)}
	lcfg.Networks = nets
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := StartServer(ctx, ServerConfig{Dirs: dirs, LNet: lcfg, Logger: quiet, ConfigInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	if got := st.Targets(); len(got) != 3 || got[0] != "nacre-MDT0000" {
		t.Fatalf("targets %v", got)
	}

	// A client on its own LNet.
	ccfg := lnet.DefaultConfig()
	ccfg.Logger = quiet
	cnets, _ := lnet.ParseNetworks("tcp(127.0.0.61)")
	cnets[0].Options = map[string]string{"port": strconv.Itoa(port)}
	ccfg.Networks = cnets
	cln, err := lnet.New(ctx, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cln.Close(context.Background())
	pc := ptlrpc.NewClient(cln, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.MDCReplyPortal, Logger: quiet})
	srv := lwire.ProcessID{NID: st.LNet.NIDs()[len(st.LNet.NIDs())-1], PID: st.LNet.PID()}
	imp, err := pc.NewImport(mdc.ImportConfig("nacre-MDT0000", srv))
	if err != nil {
		t.Fatal(err)
	}
	defer imp.Close(context.Background())
	c := mdc.New(imp, nil)
	r, err := c.GetRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all := layout.Plain(layout.RAID0{StripeCount: -1, StripeSize: 1 << 20, StripeOffset: -1})
	var l *layout.Layout
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var err error
		_, l, err = c.Create(ctx, mdc.Root(), r, "f", 0o644, &mdc.CreateOptions{Layout: &all})
		if err == nil && l != nil && len(l.Components[0].Objects) == 2 {
			break
		}
		if err == nil {
			c.Unlink(ctx, mdc.Root(), r, "f") // made before the MDT knew both OSTs
		}
		if time.Now().After(deadline) {
			t.Fatalf("create over both OSTs: %v %v", l, err)
		}
	}
	for _, o := range l.Components[0].Objects {
		dev := st.devs[o.OSTIndex]
		if _, err := dev.GetAttr(ctx, o.Object); err != nil {
			t.Fatalf("object %v on OST%d: %v", o.Object, o.OSTIndex, err)
		}
	}
	if _, err := c.Lookup(ctx, mdc.Root(), r, "nope"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("lookup: %v", err)
	}

	// Restarted with its client gone silent (its LNet closed, no
	// DISCONNECT): the MDT waits for it; abort_recovery ends the wait.
	cln.Close(context.Background())
	st.Close(context.Background())
	st, err = StartServer(ctx, ServerConfig{Dirs: dirs, LNet: lcfg, Logger: quiet, ConfigInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	status := func() string {
		t.Helper()
		v, err := st.params.reg.Get(false, "mdt.nacre-MDT0000.recovery_status")
		if err != nil || len(v) != 1 {
			t.Fatalf("recovery_status: %v %v", v, err)
		}
		return v[0].Value
	}
	if s := status(); !strings.HasPrefix(s, "status: RECOVERING\n") || !strings.Contains(s, "connected_clients: 0/1\nreq_replay_clients: 0\nlock_repay_clients: 0\ncompleted_clients: 0") {
		t.Fatalf("after the restart:\n%s", s)
	}
	if _, err := st.params.reg.Set(params.SetOptions{}, params.Assignment{Pattern: "mdt.nacre-MDT0000.abort_recovery", Value: "1"}); err != nil {
		t.Fatal(err)
	}
	if s := status(); !strings.HasPrefix(s, "status: COMPLETE\n") || !strings.Contains(s, "\nevicted_clients: 1\n") {
		t.Fatalf("after abort_recovery (the silent client evicted):\n%s", s)
	}
	// The OSTs' one client, the MDS, disconnected when the server stopped:
	// they wait for nobody (TestLctlBinaryUp kills the servers instead).
	for _, ost := range []string{"nacre-OST0000", "nacre-OST0001"} {
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			v, err := st.params.reg.Get(false, "obdfilter."+ost+".recovery_status")
			if err != nil || len(v) != 1 {
				t.Fatalf("%s recovery_status: %v %v", ost, v, err)
			}
			if strings.HasPrefix(v[0].Value, "status: COMPLETE\n") {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("%s still recovering with the MDS back:\n%s", ost, v[0].Value)
			}
		}
	}
	if _, err := st.params.reg.Set(params.SetOptions{}, params.Assignment{Pattern: "obdfilter.*.abort_recovery", Value: "1"}); err != nil {
		t.Fatal(err)
	}
}
