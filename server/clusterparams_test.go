package server_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/ldlm"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
	"github.com/nacrefs/nacre/services/admin"
)

// TestClusterParams: the admin API's live parameters are the cluster's:
// get_param reads the OSTs of a child process (through its status port)
// and the client and MDT of the test's process as one list; set_param is
// all or nothing over them; evict_client evicts a client from an OST of
// the other process; dl lists every process's devices; the status port
// refuses parameter requests without its token.
func TestClusterParams(t *testing.T) {
	o := startOverviewCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	get := func(patterns ...string) map[string]string {
		t.Helper()
		rep, err := o.api.GetLiveParams(ctx, &adminv1.GetLiveParamsRequest{Patterns: patterns})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, p := range rep.GetParams() {
			out[p.GetName()] = p.GetValue()
		}
		return out
	}
	// The OSTs live in the child OSS, the MDT and the mount here.
	got := get("obdfilter.*.uuid", "mdt.*.uuid", "osc.*.max_rpcs_in_flight")
	for _, want := range []string{"obdfilter.nacre-OST0000.uuid", "obdfilter.nacre-OST0001.uuid", "mdt.nacre-MDT0000.uuid"} {
		if got[want] == "" {
			t.Fatalf("get_param: no %s in %v", want, got)
		}
	}
	oscs := 0
	for n := range got {
		if strings.HasPrefix(n, "osc.") {
			oscs++
		}
	}
	if oscs != 2 {
		t.Fatalf("get_param osc.*: %d OSCs in %v", oscs, got)
	}
	// All or nothing: a value the child refuses changes nothing here.
	before := get("osc.*.max_rpcs_in_flight")
	_, err := o.api.SetLiveParams(ctx, &adminv1.SetLiveParamsRequest{Assignments: []*adminv1.LiveAssignment{
		{Pattern: "osc.*.max_rpcs_in_flight", Value: "3"},
		{Pattern: "obdfilter.nacre-OST0001.evict_client", Value: "no-such-client"}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "no-such-client") {
		t.Fatalf("set_param with a value the child OSS refuses: %v", err)
	}
	if after := get("osc.*.max_rpcs_in_flight"); !mapsEqual(after, before) {
		t.Fatalf("a refused set_param changed %v to %v", before, after)
	}
	if _, err := o.api.SetLiveParams(ctx, &adminv1.SetLiveParamsRequest{Assignments: []*adminv1.LiveAssignment{
		{Pattern: "nothing.*.matches", Value: "1"}}}); status.Code(err) != codes.NotFound {
		t.Fatalf("set_param matching nothing anywhere: %v", err)
	}
	// Evict the mount from OST0000, served by the other process.
	nid := "nid:" + clustertest.ClientAddr(0) + "@tcp"
	// The mount's line of an OST's exports: "UUID NID conn=N idle=Ns".
	mineOn := func(ost string) string {
		p := "obdfilter.nacre-" + ost + ".exports"
		for _, l := range strings.Split(get(p)[p], "\n") {
			if f := strings.Fields(l); len(f) == 4 && f[1] == clustertest.ClientAddr(0)+"@tcp" {
				return f[0] + " " + f[2]
			}
		}
		return ""
	}
	mine := func() string { return mineOn("OST0000") }
	was := mine()
	if was == "" {
		t.Fatal("the mount is not a client of OST0000")
	}
	rep, err := o.api.SetLiveParams(ctx, &adminv1.SetLiveParamsRequest{Assignments: []*adminv1.LiveAssignment{
		{Pattern: "obdfilter.nacre-OST0000.evict_client", Value: nid}}})
	if err != nil || len(rep.GetParams()) != 1 {
		t.Fatalf("evict_client through the admin API: %v %v", rep, err)
	}
	// Gone, or connected again (a new connection count): not the export
	// it had.
	if now := mine(); now == was {
		t.Fatalf("the evicted mount is still a client of OST0000: %q", now)
	}
	// The same through the REST evict call, on OST0001.
	was1 := mineOn("OST0001")
	if was1 == "" {
		t.Fatal("the mount is not a client of OST0001")
	}
	post := func(path, body string) (int, string) {
		resp, err := http.Post(o.https+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("/api/v1/filesystems/nacre/targets/OST0001/evict", `{"client":"`+nid+`"}`); code != 200 {
		t.Fatalf("POST evict: %d %s", code, body)
	}
	if now := mineOn("OST0001"); now == was1 {
		t.Fatalf("the mount evicted through REST is still a client of OST0001: %q", now)
	}
	for _, bad := range []struct {
		path, body string
		code       int
	}{
		{"/api/v1/filesystems/nacre/targets/OST0001/evict", `{"client":"no-such-client"}`, 400},
		{"/api/v1/filesystems/nacre/targets/OST0001/evict", `{}`, 400},
		{"/api/v1/filesystems/nacre/targets/OST0009/evict", `{"client":"x"}`, 404},
		{"/api/v1/filesystems/other/targets/OST0001/evict", `{"client":"x"}`, 404},
	} {
		if code, body := post(bad.path, bad.body); code != bad.code {
			t.Errorf("POST %s %s: %d %s, want %d", bad.path, bad.body, code, body, bad.code)
		}
	}
	// dl: the child's OSTs and the MDT here, numbered as one list.
	devs, err := o.api.ListDevices(ctx, &adminv1.ListDevicesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for i, d := range devs.GetDevices() {
		if int(d.GetIndex()) != i {
			t.Fatalf("device %d has index %d", i, d.GetIndex())
		}
		names[d.GetName()] = true
	}
	for _, want := range []string{"nacre-OST0000", "nacre-OST0001", "nacre-MDT0000"} {
		if !names[want] {
			t.Fatalf("dl: no %s in %v", want, names)
		}
	}
	// The token never leaves the MGS: not in the targets the API lists,
	// nor in a client's configuration.
	tok := o.c.Servers()[0].StatusPort().Token
	if len(tok) < 32 {
		t.Fatalf("status token %q", tok)
	}
	if body := o.get(t, "/api/v1/filesystems/nacre/targets", 200, nil); strings.Contains(body, tok) {
		t.Fatal("the targets' REST listing shows a status token")
	}
	cfg, err := mgsv1.NewMGSClient(o.conn).GetClientConfig(ctx, &mgsv1.GetClientConfigRequest{Fsname: "nacre"})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := proto.Marshal(cfg); bytes.Contains(b, []byte(tok)) {
		t.Fatal("a client's configuration carries a status token")
	}
	// The status port wants its token.
	for _, ts := range o.serverStatusAddrs(t) {
		resp, err := http.Post("http://"+ts+admin.ParamsPath, "application/json", strings.NewReader(`{"op":"get","patterns":["*"]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("parameters on %s without the token: HTTP %d", ts, resp.StatusCode)
		}
	}
	// The node-wide timeouts: persistent sys.* values reach every process,
	// the child OSS as this one (MDT and mount), as lctl get_param at_max
	// shows them on each.
	// (clustertest puts this process's back after the test.)
	for name, v := range map[string]string{"nacre.sys.at_max": "300", "nacre.sys.ldlm_timeout": "7", "nacre.sys.timeout": "60"} {
		if _, err := o.api.SetParam(ctx, &adminv1.SetParamRequest{Name: name, Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"at_max": "300", "ldlm_timeout": "7", "timeout": "60", "at_min": "0", "at_history": "600"}
	for {
		rep, err := o.api.GetLiveParams(ctx, &adminv1.GetLiveParamsRequest{Patterns: []string{"at_*", "ldlm_timeout", "timeout"}})
		if err != nil {
			t.Fatal(err)
		}
		seen, right := map[string]int{}, 0
		for _, p := range rep.GetParams() {
			seen[p.GetName()]++
			if want[p.GetName()] == p.GetValue() {
				right++
			}
		}
		if right == 2*len(want) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("get_param at_* ldlm_timeout timeout: %v (%v), want %v from each of the two processes", rep.GetParams(), seen, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if nt := ptlrpc.NodeTimeouts(); nt.ATMax != 300*time.Second || nt.Obd != time.Minute || ldlm.NodeCallbackTimeout() != 7*time.Second {
		t.Fatalf("this process's timeouts %+v, ldlm_timeout %v", nt, ldlm.NodeCallbackTimeout())
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// serverStatusAddrs returns the status ports the servers registered.
func (o *overviewCluster) serverStatusAddrs(t *testing.T) []string {
	t.Helper()
	rep, err := o.api.ListServers(context.Background(), &adminv1.ListServersRequest{Fsname: "nacre"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range rep.GetServers() {
		out = append(out, s.GetAddress())
	}
	if len(out) < 2 {
		t.Fatalf("servers %v", out)
	}
	return out
}
