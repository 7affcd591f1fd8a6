package timeouts

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/params"
)

// TestSetTogether: at_min and at_max given in one set_param are checked
// against the values they set together, in either order (at_min=100
// at_max=200 on a node at at_max 60), and refused, naming both and
// changing nothing, when the result is inconsistent.
func TestSetTogether(t *testing.T) {
	old := ptlrpc.NodeTimeouts()
	t.Cleanup(func() {
		if err := ptlrpc.UpdateNodeTimeouts(func(t *ptlrpc.Timeouts) { *t = old }); err != nil {
			panic(err)
		}
	})
	reg := params.New()
	if _, err := reg.RegisterAll(Params()...); err != nil {
		t.Fatal(err)
	}
	reset := func(t *testing.T) {
		t.Helper()
		if err := ptlrpc.UpdateNodeTimeouts(func(t *ptlrpc.Timeouts) { t.ATMin, t.ATMax = 0, 60*time.Second }); err != nil {
			t.Fatal(err)
		}
	}
	set := func(opts params.SetOptions, kv ...string) error {
		var as []params.Assignment
		for _, s := range kv {
			a, err := params.ParseAssignment(s)
			if err != nil {
				return err
			}
			as = append(as, a)
		}
		_, err := reg.Set(opts, as...)
		return err
	}
	for _, tc := range []struct {
		assign           []string
		dryRun           bool
		wantMin, wantMax time.Duration // if accepted and not a dry run
		refused          bool
	}{
		{assign: []string{"at_min=100", "at_max=200"}, wantMin: 100 * time.Second, wantMax: 200 * time.Second},
		{assign: []string{"at_max=200", "at_min=100"}, wantMin: 100 * time.Second, wantMax: 200 * time.Second},
		{assign: []string{"at_min=100", "at_max=0"}, wantMin: 100 * time.Second, wantMax: 0},
		{assign: []string{"at_min=100", "at_max=200"}, dryRun: true, wantMin: 0, wantMax: 60 * time.Second},
		{assign: []string{"at_min=30", "timeout=20"}, wantMin: 30 * time.Second, wantMax: 60 * time.Second},
		{assign: []string{"at_min=100"}, refused: true},
		{assign: []string{"at_min=300", "at_max=200"}, refused: true},
		{assign: []string{"at_max=200", "at_min=300"}, refused: true},
		{assign: []string{"at_max=30", "at_min=40"}, refused: true},
	} {
		t.Run(strings.Join(tc.assign, " "), func(t *testing.T) {
			reset(t)
			before := ptlrpc.NodeTimeouts()
			err := set(params.SetOptions{DryRun: tc.dryRun}, tc.assign...)
			now := ptlrpc.NodeTimeouts()
			if tc.refused {
				if err == nil || !errors.Is(err, params.ErrBadValue) {
					t.Fatalf("error %v, want a bad value", err)
				}
				if len(tc.assign) > 1 && (!strings.Contains(err.Error(), "at_min") || !strings.Contains(err.Error(), "at_max")) {
					t.Fatalf("error %q does not name at_min and at_max", err)
				}
				if now != before {
					t.Fatalf("a refused set_param left %+v, was %+v", now, before)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if now.ATMin != tc.wantMin || now.ATMax != tc.wantMax {
				t.Fatalf("at_min %v, at_max %v; want %v, %v", now.ATMin, now.ATMax, tc.wantMin, tc.wantMax)
			}
		})
	}
}
