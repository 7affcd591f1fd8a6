package server

import (
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/etcdserver/etcdtest"
	"github.com/nacrefs/nacre/internal/params"
)

// TestRESTLiveParams: the admin API reads and changes the same registry
// lctl does, with its rules: all or nothing, tokens for changes.
func TestRESTLiveParams(t *testing.T) {
	reg := params.New()
	var a, b atomic.Int64
	a.Store(8)
	b.Store(8)
	for name, v := range map[string]*atomic.Int64{"osc.fs-OST0000-osc-c1.max_rpcs_in_flight": &a, "osc.fs-OST0001-osc-c1.max_rpcs_in_flight": &b} {
		if _, err := reg.Register(params.Int(name, "", v.Load, func(n int64) error { v.Store(n); return nil }, 1, 256, nil)); err != nil {
			t.Fatal(err)
		}
	}
	reg.Register(params.ReadOnly("osc.fs-OST0000-osc-c1.stats", "", func() string { return "snapshot_time 1 secs\nread_bytes 1 samples [bytes]" }))
	reg.RegisterDevice(params.Device{Type: "osc", Name: "fs-OST0000-osc-c1", UUID: "c1"})
	ec := etcdtest.Start(t, 1)
	m := startMGS(t, ec.Endpoints(), func(c *MGSConfig) { c.Params = reg })

	r := rest(t, m, "GET", "/api/v1/live/params?patterns=osc.*.max_rpcs_in_flight&patterns=osc.*.stats", readonlyToken, "")
	if r.code != 200 || !regexp.MustCompile(`"name":\s*"osc.fs-OST0001-osc-c1.max_rpcs_in_flight",\s*"value":\s*"8"`).MatchString(r.raw) ||
		!strings.Contains(r.raw, `read_bytes 1 samples`) {
		t.Fatalf("get: %d %s", r.code, r.raw)
	}
	if r := rest(t, m, "GET", "/api/v1/live/params", readonlyToken, ""); r.code != 200 || strings.Count(r.raw, `"name"`) != 3 {
		t.Fatalf("get all: %d %s", r.code, r.raw)
	}
	if r := rest(t, m, "GET", "/api/v1/live/params?patterns=mdc.*.import", readonlyToken, ""); r.code != 404 || !strings.Contains(r.raw, "mdc.*.import: no parameter matches") {
		t.Fatalf("no match: %d %s", r.code, r.raw)
	}
	set := `{"assignments":[{"pattern":"osc.*.max_rpcs_in_flight","value":"16"},{"pattern":"osc.*.stats","value":"0"}]}`
	if r := rest(t, m, "POST", "/api/v1/live/params", readonlyToken, set); r.code != 403 {
		t.Fatalf("read-only token set: %d %s", r.code, r.raw)
	}
	if r := rest(t, m, "POST", "/api/v1/live/params", adminToken, set); r.code != 403 || !strings.Contains(r.raw, "read-only parameter") || a.Load() != 8 {
		t.Fatalf("set with a read-only target: %d %s (a=%d)", r.code, r.raw, a.Load())
	}
	bad := `{"assignments":[{"pattern":"osc.*.max_rpcs_in_flight","value":"1000"}]}`
	if r := rest(t, m, "POST", "/api/v1/live/params", adminToken, bad); r.code != 400 || !strings.Contains(r.raw, "out of range") || a.Load() != 8 {
		t.Fatalf("set a bad value: %d %s", r.code, r.raw)
	}
	good := `{"assignments":[{"pattern":"osc.*.max_rpcs_in_flight","value":"16"}]}`
	if r := rest(t, m, "POST", "/api/v1/live/params", adminToken, good); r.code != 200 || a.Load() != 16 || b.Load() != 16 {
		t.Fatalf("set: %d %s", r.code, r.raw)
	}
	if r := rest(t, m, "GET", "/api/v1/live/devices", readonlyToken, ""); r.code != 200 || !regexp.MustCompile(`"type":\s*"osc",\s*"name":\s*"fs-OST0000-osc-c1"`).MatchString(r.raw) {
		t.Fatalf("devices: %d %s", r.code, r.raw)
	}
}

// TestRecoveryText: recovery_status as Lustre shows it, for a target that
// never had to recover, one recovering and one done.
func TestRecoveryText(t *testing.T) {
	start := time.Unix(1764170000, 0)
	end := start.Add(90 * time.Second)
	for _, c := range []struct {
		name       string
		recovering bool
		start, end time.Time
		now        time.Time
		want       string
	}{
		{"new", false, time.Time{}, time.Time{}, start, "status: COMPLETE"},
		{"recovering", true, start, end, start.Add(4500 * time.Millisecond),
			"status: RECOVERING\nrecovery_start: 1764170000\ntime_remaining: 86\nconnected_clients: 3"},
		{"over", false, start, end, end.Add(time.Hour),
			"status: COMPLETE\nrecovery_start: 1764170000\nrecovery_duration: 90\ncompleted_clients: 3\nevicted_clients: 1\nreplayed_requests: 2"},
	} {
		st := ptlrpc.RecoveryStatus{Recovering: c.recovering, Start: c.start, End: c.end, Clients: 3, Evicted: 1, Waiting: -1, Of: -1, Replayed: 2}
		if got := recoveryTextAt(st, c.now); got != c.want {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
	// Known clients: three of four reconnected, one of them still
	// replaying requests (one queued for its turn), none replaying locks.
	want := "status: RECOVERING\nrecovery_start: 1764170000\ntime_remaining: 86\nconnected_clients: 3/4\n" +
		"req_replay_clients: 1\nlock_repay_clients: 0\ncompleted_clients: 2\nevicted_clients: 0\n" +
		"replayed_requests: 5\nqueued_requests: 1\nnext_transno: 107"
	st := ptlrpc.RecoveryStatus{Recovering: true, Start: start, End: end, Clients: 3, Waiting: 2, Of: 4,
		ReqReplay: 1, Replayed: 5, Queued: 1, NextTransno: 107}
	if got := recoveryTextAt(st, start.Add(4500*time.Millisecond)); got != want {
		t.Errorf("known clients:\n%s\nwant\n%s", got, want)
	}
}
