package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/etcdserver/etcdtest"
	"github.com/nacrefs/nacre/internal/params"
	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
	"github.com/nacrefs/nacre/services/hsm"
)

// restHandler is a copytool for archive 1 that moves no data: FID oid N
// is a file of N*1000 bytes; oid 99 runs until it is canceled; oid 98
// fails.
type restHandler struct{ started chan uint64 }

func (h restHandler) Handle(ctx context.Context, a *hsmv1.Action, progress func(done, total uint64)) (string, error) {
	n := uint64(a.Fid.Oid) * 1000
	progress(n/2, n)
	switch a.Fid.Oid {
	case 99:
		h.started <- a.Id
		<-ctx.Done()
		return "", ctx.Err()
	case 98:
		return "", fmt.Errorf("rest handler: %w", syscall.EIO)
	}
	return "sum", nil
}

// TestHSMREST: the HSM queue, agents and statistics over REST through a
// real MGS's gateway: submit (admin only), get, list with filters and
// pages, cancel one action, the agents with what they run, per-archive
// statistics; bad requests get 400/404 with a message; mdt.*.hsm.grace_delay
// prunes finished actions and the statistics stay.
func TestHSMREST(t *testing.T) {
	ec := etcdtest.Start(t, 1)
	reg := params.New()
	m := startMGS(t, ec.Endpoints(), func(c *MGSConfig) { c.Params = reg })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := m.Store().CreateFilesystem(ctx, "hsmfs"); err != nil {
		t.Fatal(err)
	}
	m.RegisterHSMParams("hsmfs")

	hc, err := hsm.NewClient([]string{m.GRPCAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	h := restHandler{started: make(chan uint64, 1)}
	actx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() {
		defer close(agentDone)
		hsm.RunAgent(actx, hsm.AgentConfig{Client: hc, UUID: "rest-agent", ArchiveIDs: []uint32{1}, MaxRequests: 2, Handler: h,
			Logger: slog.New(slog.DiscardHandler)})
	}()
	defer func() { stopAgent(); <-agentDone }()

	do := func(method, path, token, body string, code int) restResp {
		t.Helper()
		r := rest(t, m, method, path, token, body)
		if r.code != code {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, r.code, code, r.raw)
		}
		return r
	}
	state := func(id string) string {
		t.Helper()
		r := do("GET", "/api/v1/hsm/actions/"+id, readonlyToken, "", 200)
		s, _ := r.body["state"].(string)
		return s
	}
	waitState := func(id, want string) map[string]any {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			r := do("GET", "/api/v1/hsm/actions/"+id, readonlyToken, "", 200)
			if r.body["state"] == want {
				return r.body
			}
			if time.Now().After(deadline) {
				t.Fatalf("action %s: %s, want %s", id, r.raw, want)
			}
		}
	}
	ids := func(r restResp, key string) []string {
		t.Helper()
		var out []string
		list, _ := r.body[key].([]any)
		for _, x := range list {
			switch x := x.(type) {
			case string:
				out = append(out, x)
			case map[string]any:
				out = append(out, x["id"].(string))
			}
		}
		return out
	}

	// Submit: readers may not, bad requests say why.
	req := `{"kind":"ACTION_KIND_ARCHIVE","archive_id":1,"fid_names":["[0x200000400:0x1:0x0]","[0x200000400:0x2:0x0]","[0x200000400:0x62:0x0]"]}`
	do("POST", "/api/v1/hsm/requests", readonlyToken, req, 403)
	do("POST", "/api/v1/hsm/requests", "", req, 401)
	for _, bad := range []struct{ body, msg string }{
		{`{"kind":"ACTION_KIND_ARCHIVE","archive_id":1,"fid_names":["0x2:zz"]}`, "bad FID"},
		{`{"kind":"ACTION_KIND_ARCHIVE","archive_id":0,"fid_names":["[0x200000400:0x1:0x0]"]}`, "archive id 0"},
		{`{"kind":"ACTION_KIND_ARCHIVE","archive_id":1}`, "0 FIDs"},
		{`{"kind":"ACTION_KIND_SIDEWAYS","archive_id":1}`, ""},
	} {
		r := do("POST", "/api/v1/hsm/requests", adminToken, bad.body, 400)
		if msg, _ := r.body["message"].(string); !strings.Contains(msg, bad.msg) {
			t.Errorf("%s: message %q, want %q", bad.body, msg, bad.msg)
		}
	}
	first := ids(do("POST", "/api/v1/hsm/requests", adminToken, req, 200), "ids")
	if len(first) != 3 {
		t.Fatalf("ids %v", first)
	}
	a := waitState(first[0], "ACTION_STATE_SUCCEED")
	if a["kind"] != "ACTION_KIND_ARCHIVE" || a["agent"] != "rest-agent" || a["bytes_done"] != "1000" || a["archive_id"] != 1.0 {
		t.Fatalf("action %s: %v", first[0], a)
	}
	if f, _ := a["fid"].(map[string]any); f["oid"] != 1.0 {
		t.Fatalf("action fid %v", a["fid"])
	}
	waitState(first[1], "ACTION_STATE_SUCCEED")
	if a := waitState(first[2], "ACTION_STATE_FAILED"); !strings.Contains(a["error"].(string), "input/output error") {
		t.Fatalf("failed action: %v", a)
	}

	// A running action: the agent shows it, the queue filters it, and it
	// is canceled by id.
	running := ids(do("POST", "/api/v1/hsm/requests", adminToken, `{"kind":"ACTION_KIND_ARCHIVE","archive_id":1,"fid_names":["[0x200000400:0x63:0x0]"]}`, 200), "ids")[0]
	// And one for an archive nobody serves.
	waiting := ids(do("POST", "/api/v1/hsm/requests", adminToken, `{"kind":"ACTION_KIND_ARCHIVE","archive_id":7,"fids":[{"seq":"8589935616","oid":5}]}`, 200), "ids")[0]
	select {
	case <-h.started:
	case <-ctx.Done():
		t.Fatal("the long action never started")
	}
	r := do("GET", "/api/v1/hsm/agents", readonlyToken, "", 200)
	ags, _ := r.body["agents"].([]any)
	if len(ags) != 1 {
		t.Fatalf("agents: %s", r.raw)
	}
	ag := ags[0].(map[string]any)
	if ag["uuid"] != "rest-agent" || ag["in_flight"] != 1.0 || ag["max_requests"] != 2.0 || fmt.Sprint(ag["archive_ids"]) != "[1]" || fmt.Sprint(ag["actions"]) != "["+running+"]" {
		t.Fatalf("agent: %s", r.raw)
	}
	if v, err := reg.Get(false, "mdt.hsmfs-MDT0000.hsm.agents"); err != nil || v[0].Value != "uuid=rest-agent archive_id=1 requests=[current:1 ok:2 errors:1]" {
		t.Fatalf("lctl get_param mdt.*.hsm.agents: %v %v", v, err)
	}
	if got := ids(do("GET", "/api/v1/hsm/actions?states=ACTION_STATE_STARTED", readonlyToken, "", 200), "actions"); fmt.Sprint(got) != "["+running+"]" {
		t.Fatalf("started actions %v", got)
	}
	if got := ids(do("GET", "/api/v1/hsm/actions?archive_id=7", readonlyToken, "", 200), "actions"); fmt.Sprint(got) != "["+waiting+"]" {
		t.Fatalf("actions of archive 7: %v", got)
	}
	if got := ids(do("GET", "/api/v1/hsm/actions?states=ACTION_STATE_SUCCEED&states=ACTION_STATE_FAILED", readonlyToken, "", 200), "actions"); fmt.Sprint(got) != fmt.Sprint(first) {
		t.Fatalf("finished actions %v, want %v", got, first)
	}
	var paged []string
	for tok, pages := "", 0; ; pages++ {
		r := do("GET", "/api/v1/hsm/actions?page_size=2&page_token="+tok, readonlyToken, "", 200)
		paged = append(paged, ids(r, "actions")...)
		tok, _ = r.body["next_page_token"].(string)
		if tok == "" {
			if pages != 2 {
				t.Fatalf("%d pages of 2 for 5 actions", pages+1)
			}
			break
		}
	}
	if want := fmt.Sprint(append(first, running, waiting)); fmt.Sprint(paged) != want {
		t.Fatalf("paged %v, want %v", paged, want)
	}
	do("GET", "/api/v1/hsm/actions?page_token=zz", readonlyToken, "", 400)
	do("GET", "/api/v1/hsm/actions?page_size=-3", readonlyToken, "", 400)
	do("GET", "/api/v1/hsm/actions/123456", readonlyToken, "", 404)
	do("POST", "/api/v1/hsm/actions/"+running+":cancel", readonlyToken, "", 403)
	do("POST", "/api/v1/hsm/actions/123456:cancel", adminToken, "", 404)
	if r := do("POST", "/api/v1/hsm/actions/"+running+":cancel", adminToken, "", 200); r.body["state"] != "ACTION_STATE_CANCELED" {
		t.Fatalf("cancel: %s", r.raw)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := do("GET", "/api/v1/hsm/agents", readonlyToken, "", 200)
		if ag := r.body["agents"].([]any)[0].(map[string]any); ag["in_flight"] == 0.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("canceled action still on its agent: %s", r.raw)
		}
	}
	// Cancel by FID through the request path.
	if r := do("POST", "/api/v1/hsm/requests", adminToken, `{"kind":"ACTION_KIND_CANCEL","fid_names":["[0x200000400:0x5:0x0]"]}`, 200); fmt.Sprint(ids(r, "ids")) != "["+waiting+"]" {
		t.Fatalf("cancel by FID: %s", r.raw)
	}
	if s := state(waiting); s != "ACTION_STATE_CANCELED" {
		t.Fatalf("canceled by FID: %s", s)
	}

	wantStats := `{"archives":[` +
		`{"archive_id":1,"waiting":"0","running":"0","succeeded":"2","failed":"1","canceled":"1","bytes_archived":"3000","bytes_restored":"0"},` +
		`{"archive_id":7,"waiting":"0","running":"0","succeeded":"0","failed":"0","canceled":"1","bytes_archived":"0","bytes_restored":"0"}]}`
	if r := do("GET", "/api/v1/hsm/stats", readonlyToken, "", 200); strings.ReplaceAll(r.raw, " ", "") != wantStats {
		t.Fatalf("stats:\n got %s\nwant %s", r.raw, wantStats)
	}

	// grace_delay: 0 prunes every finished action; the statistics stay.
	if _, err := reg.Set(params.SetOptions{}, params.Assignment{Pattern: "mdt.*.hsm.grace_delay", Value: "-1"}); err == nil {
		t.Fatal("negative grace_delay accepted")
	}
	if v, err := reg.Get(false, "mdt.hsmfs-MDT0000.hsm.grace_delay"); err != nil || v[0].Value != "60" {
		t.Fatalf("grace_delay: %v %v", v, err)
	}
	if _, err := reg.Set(params.SetOptions{}, params.Assignment{Pattern: "mdt.*.hsm.grace_delay", Value: "0"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := do("GET", "/api/v1/hsm/actions", readonlyToken, "", 200)
		if len(ids(r, "actions")) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("finished actions not pruned: %s", r.raw)
		}
	}
	do("GET", "/api/v1/hsm/actions/"+first[0], readonlyToken, "", 404)
	if r := do("GET", "/api/v1/hsm/stats", readonlyToken, "", 200); strings.ReplaceAll(r.raw, " ", "") != wantStats {
		t.Fatalf("stats after pruning:\n got %s\nwant %s", r.raw, wantStats)
	}
	if r := do("GET", "/openapi.json", "", "", 200); !strings.Contains(r.raw, `"/api/v1/hsm/actions/{id}:cancel"`) || !strings.Contains(r.raw, `"/api/v1/hsm/stats"`) {
		t.Fatal("the OpenAPI document lacks the HSM paths")
	}
}
