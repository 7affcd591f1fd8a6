package client

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
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

// TestPersistentRefusedOnce: a persistent parameter other than the node's
// timeouts that the mount refuses is logged once and not tried again at
// every configuration (only the node's timeouts, which depend on each
// other, are).
func TestPersistentRefusedOnce(t *testing.T) {
	var warnings atomic.Int32
	lg := slog.New(countHandler{&warnings})
	fs := &FS{cfg: Config{FSName: "nacre", Params: params.New()}, log: lg,
		rpc: ptlrpc.NewClient(nil, ptlrpc.ClientConfig{Logger: lg})}
	var sets atomic.Int32
	fs.register(params.Int("llite.nacre-"+fs.Instance()+".max_read_ahead_mb", "refuses everything",
		func() int64 { return 0 }, func(int64) error { sets.Add(1); return errors.New("no") }, 0, 1<<20, nil))
	p := &mgsv1.Param{Name: "nacre.client.llite.max_read_ahead_mb", Value: "64", Revision: 5}
	for range 3 {
		fs.applyParams(&mgsv1.ClientConfig{Params: []*mgsv1.Param{p}})
	}
	if n, w := sets.Load(), warnings.Load(); n != 1 || w != 1 {
		t.Fatalf("a refused max_read_ahead_mb was tried %d times and logged %d times over three configurations, want once", n, w)
	}
}

// countHandler counts the warnings logged.
type countHandler struct{ n *atomic.Int32 }

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		h.n.Add(1)
	}
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }
