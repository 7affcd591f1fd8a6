package client

import (
	"log/slog"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/internal/timeouts"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
)

// TestPersistentATMinBeforeATMax: a client applies persistent at_min and
// at_max that are valid together whatever order the MGS's log holds them
// in (server.TestPersistentATMinBeforeATMax for servers). at_min=100
// before at_max=200, on a node whose at_max was 60, was refused and never
// applied again.
func TestPersistentATMinBeforeATMax(t *testing.T) {
	atMin := &mgsv1.Param{Name: "nacre.sys.at_min", Value: "100", Revision: 3}
	atMax := &mgsv1.Param{Name: "nacre.sys.at_max", Value: "200", Revision: 4}
	for _, tc := range []struct {
		name    string
		configs [][]*mgsv1.Param
	}{
		{"one configuration", [][]*mgsv1.Param{{atMin, atMax}}},
		{"at_max in the next", [][]*mgsv1.Param{{atMin}, {atMin, atMax}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := ptlrpc.NodeTimeouts()
			t.Cleanup(func() { ptlrpc.UpdateNodeTimeouts(func(t *ptlrpc.Timeouts) { *t = old }) })
			if err := ptlrpc.UpdateNodeTimeouts(func(t *ptlrpc.Timeouts) { t.ATMin, t.ATMax = 0, time.Minute }); err != nil {
				t.Fatal(err)
			}
			lg := slog.New(slog.DiscardHandler)
			fs := &FS{cfg: Config{FSName: "nacre", Params: params.New()}, log: lg,
				rpc: ptlrpc.NewClient(nil, ptlrpc.ClientConfig{Logger: lg})}
			fs.share(timeouts.Params()...)
			for _, ps := range tc.configs {
				fs.applyParams(&mgsv1.ClientConfig{Params: ps})
			}
			if nt := ptlrpc.NodeTimeouts(); nt.ATMin != 100*time.Second || nt.ATMax != 200*time.Second {
				t.Fatalf("at_min %v, at_max %v; the MGS says 100s and 200s", nt.ATMin, nt.ATMax)
			}
		})
	}
}
