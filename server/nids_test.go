package server

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/etcdserver/etcdtest"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lnettest"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// TestNIDsFollowLNet: a net added to the server's LNet (lnetctl net add)
// is registered with the MGS as one of its targets' NIDs, and a net
// deleted is no longer: clients that mount later find the targets where
// they are served (Lustre needs lctl replace_nids for that).
func TestNIDsFollowLNet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ec := etcdtest.Start(t, 1)
	m := startMGS(t, ec.Endpoints())
	if _, err := m.Store().CreateFilesystem(ctx, "moving"); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ost0")
	if _, err := FormatOST(ctx, dir, TargetIdentity{FSName: "moving", MGSNodes: []string{m.GRPCAddr()}}); err != nil {
		t.Fatal(err)
	}
	port := lnettest.FreePort(t, "127.0.0.1", "127.0.0.62")
	st, err := StartServer(ctx, ServerConfig{Dirs: []string{dir}, LNet: lnettest.Config("127.0.0.1", port), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	nidsAre := func(want ...string) {
		t.Helper()
		var got []string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			targets, err := m.Store().ListTargets(ctx, "moving")
			if err != nil || len(targets) != 1 {
				t.Fatalf("targets %+v, %v", targets, err)
			}
			if got = targets[0].NIDs; slices.Equal(got, want) && targets[0].Up {
				return
			}
		}
		t.Fatalf("registered NIDs %v, want %v", got, want)
	}
	nidsAre("127.0.0.1@tcp")
	tcp1 := lwire.Net{Type: lwire.TCP, Num: 1}
	if _, err := st.LNet.AddNet(ctx, lnet.NetConfig{Net: tcp1, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.62")},
		Options: map[string]string{"port": strconv.Itoa(port)}}); err != nil {
		t.Fatal(err)
	}
	nidsAre("127.0.0.1@tcp", "127.0.0.62@tcp1")
	if _, err := st.LNet.DelNet(ctx, tcp1, nil); err != nil {
		t.Fatal(err)
	}
	nidsAre("127.0.0.1@tcp")
}
