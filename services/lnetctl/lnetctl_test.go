package lnetctl

import (
	"context"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	_ "github.com/nacrefs/nacre/lnd/lolnd"
	_ "github.com/nacrefs/nacre/lnd/socklnd"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lnettest"
	"github.com/nacrefs/nacre/lnet/wire"
	lnetv1 "github.com/nacrefs/nacre/proto/nacre/lnet/v1"
)

func startNode(t *testing.T, nets string, port int, mod func(*lnet.Config)) *lnet.LNet {
	t.Helper()
	cfg := lnet.DefaultConfig()
	cfg.Logger = lnettest.Quiet
	nc, err := lnet.ParseNetworks(nets)
	if err != nil {
		t.Fatal(err)
	}
	for i := range nc {
		nc[i].Options = map[string]string{"port": strconv.Itoa(port), "backoff_min": "20ms", "backoff_max": "100ms"}
	}
	cfg.Networks = nc
	mod(&cfg)
	return lnettest.StartConfig(t, cfg)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestShowStatsDropsOnce: lnetctl stats show counts each message a router
// dropped once, whether it was dropped as it came in (a dead next hop) or
// after its onward send failed.
func TestShowStatsDropsOnce(t *testing.T) {
	port := lnettest.FreePort(t, "127.0.1.1", "127.0.1.2", "127.0.2.2")
	r := startNode(t, "tcp1(127.0.1.2),tcp2(127.0.2.2)", port, func(c *lnet.Config) {
		c.Routing = true
		c.TransactionTimeout = 300 * time.Millisecond
	})
	a := startNode(t, "tcp1(127.0.1.1)", port, func(c *lnet.Config) {
		c.Routes = []lnet.Route{{Net: wire.Net{Type: wire.TCP, Num: 2}, Gateway: wire.MustParseNID("127.0.1.2@tcp1"), Hops: 1}}
		c.DisableDiscovery = true
		c.TransactionTimeout = time.Second
	})
	// Nothing is on 127.0.2.1: R's forward of the first PUT waits for a
	// connection until its transaction timeout and fails; by then B's NID
	// is dead to R, which drops the second PUT as it comes in.
	b := wire.ProcessID{NID: wire.MustParseNID("127.0.2.1@tcp2"), PID: wire.PIDLustre}
	for i, size := range []int{64, 100} {
		h, err := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, size)}, Threshold: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Put(context.Background(), h, lnet.NoAckReq, b, 5, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "R to drop PUT "+strconv.Itoa(i), func() bool { return r.Stats().Router.DropCount == uint64(i+1) })
	}
	resp, err := New(r).ShowStats(context.Background(), &lnetv1.ShowStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.GetStatistics()
	if st.GetDropCount() != 2 || st.GetDropLength() != 164 || st.GetRouteCount() != 0 {
		t.Fatalf("stats show on the router: drop_count %d drop_length %d route_count %d, want 2, 164, 0",
			st.GetDropCount(), st.GetDropLength(), st.GetRouteCount())
	}
}

// TestSetGlobals: a request changes the globals it holds and no others;
// a value out of range, or a time that is not a positive number of
// seconds, is INVALID_ARGUMENT and changes nothing.
func TestSetGlobals(t *testing.T) {
	port := lnettest.FreePort(t, "127.0.1.1")
	ln := startNode(t, "tcp1(127.0.1.1)", port, func(*lnet.Config) {})
	s := New(ln)
	ctx := context.Background()
	before := ln.Globals()
	half := 0.5
	r, err := s.SetGlobals(ctx, &lnetv1.SetGlobalsRequest{RecoveryInterval: &half})
	if err != nil {
		t.Fatal(err)
	}
	want := before
	want.RecoveryInterval = 500 * time.Millisecond
	if got := ln.Globals(); got != want || r.GetGlobals().GetRecoveryInterval() != 0.5 || r.GetGlobals().GetRetryCount() != int32(before.RetryCount) {
		t.Fatalf("after setting recovery_interval: %+v (reply %v), want %+v", got, r.GetGlobals(), want)
	}
	off, big, nan, zero := false, int32(1001), math.NaN(), 0.0
	for _, req := range []*lnetv1.SetGlobalsRequest{
		{Discovery: &off, HealthSensitivity: &big},
		{Discovery: &off, TransactionTimeout: &nan},
		{Discovery: &off, RecoveryInterval: &zero},
	} {
		if _, err := s.SetGlobals(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("SetGlobals(%v): %v, want INVALID_ARGUMENT", req, err)
		}
		if got := ln.Globals(); got != want {
			t.Fatalf("after a refused SetGlobals(%v): %+v, want %+v", req, got, want)
		}
	}
}

// TestAddDeleteNet: net add and del through the service, and the gRPC
// codes of their refusals, which lnetctl shows as the node's word.
func TestAddDeleteNet(t *testing.T) {
	port := lnettest.FreePort(t, "127.0.3.1", "127.0.3.2")
	ln := startNode(t, "tcp(127.0.3.1)", port, func(*lnet.Config) {})
	s := New(ln)
	ctx := context.Background()
	code := func(err error) codes.Code { return status.Code(err) }

	r, err := s.AddNet(ctx, &lnetv1.AddNetRequest{Net: "tcp3", Addresses: []string{"127.0.3.2"}, PeerCredits: 4, Credits: 32})
	if err != nil || len(r.GetNids()) != 1 || r.GetNids()[0] != "127.0.3.2@tcp3" {
		t.Fatalf("add: %v %v", r, err)
	}
	sh, err := s.ShowNets(ctx, &lnetv1.ShowNetsRequest{Verbose: true})
	if err != nil || len(sh.GetNets()) != 3 {
		t.Fatalf("show after add: %v %v", sh, err)
	}
	if tun := sh.GetNets()[2].GetLocalNis()[0].GetTunables(); sh.GetNets()[2].GetNetType() != "tcp3" || tun.GetPeerCredits() != 4 || tun.GetCredits() != 32 {
		t.Fatalf("the added net: %v", sh.GetNets()[2])
	}
	for _, c := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"add twice", second(s.AddNet(ctx, &lnetv1.AddNetRequest{Net: "tcp3", Addresses: []string{"127.0.3.2"}})), codes.AlreadyExists},
		{"add a bad net", second(s.AddNet(ctx, &lnetv1.AddNetRequest{Net: "tcpx", Addresses: []string{"127.0.3.2"}})), codes.InvalidArgument},
		{"add a bad address", second(s.AddNet(ctx, &lnetv1.AddNetRequest{Net: "tcp4", Addresses: []string{"127.0.3"}})), codes.InvalidArgument},
		{"add negative credits", second(s.AddNet(ctx, &lnetv1.AddNetRequest{Net: "tcp4", Addresses: []string{"127.0.3.2"}, Credits: -1})), codes.InvalidArgument},
		{"add lo", second(s.AddNet(ctx, &lnetv1.AddNetRequest{Net: "lo"})), codes.InvalidArgument},
		{"delete lo", second(s.DeleteNet(ctx, &lnetv1.DeleteNetRequest{Net: "lo"})), codes.InvalidArgument},
		{"delete a net not there", second(s.DeleteNet(ctx, &lnetv1.DeleteNetRequest{Net: "tcp4"})), codes.NotFound},
		{"delete an interface not there", second(s.DeleteNet(ctx, &lnetv1.DeleteNetRequest{Net: "tcp3", Interfaces: []string{"eth9"}})), codes.NotFound},
	} {
		if code(c.err) != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if err := ln.AddRoute(lnet.Route{Net: wire.Net{Type: wire.TCP, Num: 9}, Gateway: wire.MustParseNID("127.0.3.9@tcp3")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteNet(ctx, &lnetv1.DeleteNetRequest{Net: "tcp3"}); code(err) != codes.FailedPrecondition {
		t.Fatalf("delete the net of a gateway: %v", err)
	}
	if err := ln.DelRoute(wire.Net{Type: wire.TCP, Num: 9}, wire.NID{}); err != nil {
		t.Fatal(err)
	}
	d, err := s.DeleteNet(ctx, &lnetv1.DeleteNetRequest{Net: "tcp3", Interfaces: []string{"127.0.3.2"}})
	if err != nil || len(d.GetNids()) != 1 || d.GetNids()[0] != "127.0.3.2@tcp3" {
		t.Fatalf("delete: %v %v", d, err)
	}
	if sh, _ := s.ShowNets(ctx, &lnetv1.ShowNetsRequest{}); len(sh.GetNets()) != 2 {
		t.Fatalf("show after delete: %v", sh)
	}
}

func second[T any](_ T, err error) error { return err }

// TestListenKeepsOtherFiles: Listen replaces a stale socket but refuses a
// path that holds anything else (a mistyped path must not lose a file).
func TestListenKeepsOtherFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(file, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if l, err := Listen(file, New(nil), slog.New(slog.DiscardHandler)); err == nil {
		l.Close()
		t.Fatal("Listen took a regular file's path")
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Fatalf("the file after Listen: %q, %v", b, err)
	}
	stale := filepath.Join(dir, "stale.sock")
	ul, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ul.(*net.UnixListener).SetUnlinkOnClose(false)
	ul.Close() // the socket file stays, nobody listening
	l, err := Listen(stale, New(nil), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	l.Close()
}
