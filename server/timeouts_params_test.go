package server

import (
	"log/slog"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/internal/timeouts"
	"github.com/nacrefs/nacre/mgs"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
)

// TestPersistentATMinBeforeATMax: persistent at_min and at_max that are
// valid together reach the node whatever order the MGS's log holds them
// in, and however the configurations bring them. at_min=100 set before
// at_max=200, on a node whose at_max was still 60, was refused (at_min
// above at_max) and, marked applied, never set: the node kept its old
// at_min for good while the MGS said 100 (Lustre applies both).
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
			s := &Storage{log: slog.New(slog.DiscardHandler)}
			s.params.reg = params.New()
			s.addParams(true, timeouts.Params()...)
			t.Cleanup(s.closeParams)
			ids := []TargetIdentity{{FSName: "nacre", Kind: mgs.KindMDT, Index: 0, Label: "nacre-MDT0000"}}
			for _, ps := range tc.configs {
				s.applyParams(&mgsv1.ClientConfig{Params: ps}, ids)
			}
			if nt := ptlrpc.NodeTimeouts(); nt.ATMin != 100*time.Second || nt.ATMax != 200*time.Second {
				t.Fatalf("at_min %v, at_max %v; the MGS says 100s and 200s", nt.ATMin, nt.ATMax)
			}
		})
	}
}
