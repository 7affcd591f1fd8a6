package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nacrefs/nacre/internal/etcdserver/etcdtest"
	"github.com/nacrefs/nacre/mgs"
)

func TestREST(t *testing.T) {
	ec := etcdtest.Start(t, 1)
	m := startMGS(t, ec.Endpoints())
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, _, _, err := m.Store().RegisterTarget(ctx, mgs.Registration{FSName: "fs1", Kind: mgs.KindOST, NIDs: []string{"192.168.7.1@tcp"}}); err != nil {
			t.Fatal(err)
		}
	}

	type step struct {
		name, method, path, token, body string
		code                            int
		check                           func(t *testing.T, r restResp)
	}
	field := func(key, want string) func(*testing.T, restResp) {
		return func(t *testing.T, r restResp) {
			t.Helper()
			if got, _ := r.body[key].(string); got != want {
				t.Fatalf("%s = %q, want %q in %s", key, got, want, r.raw)
			}
		}
	}
	errMsg := func(sub string) func(*testing.T, restResp) {
		return func(t *testing.T, r restResp) {
			t.Helper()
			msg, _ := r.body["message"].(string)
			if !strings.Contains(msg, sub) {
				t.Fatalf("error message %q does not say %q", msg, sub)
			}
			if _, ok := r.body["code"].(float64); !ok {
				t.Fatalf("error body has no numeric code: %s", r.raw)
			}
		}
	}
	steps := []step{
		{"no token", "GET", "/api/v1/filesystems", "", "", 401, func(t *testing.T, r restResp) {
			if r.header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		}},
		{"unknown token", "GET", "/api/v1/filesystems", "not-a-real-token-123", "", 401, errMsg("unknown token")},
		{"readonly may read", "GET", "/api/v1/filesystems", readonlyToken, "", 200, func(t *testing.T, r restResp) {
			fss, _ := r.body["filesystems"].([]any)
			if len(fss) != 1 || fss[0].(map[string]any)["name"] != "fs1" {
				t.Fatalf("filesystems: %s", r.raw)
			}
		}},
		{"readonly may not write", "POST", "/api/v1/filesystems", readonlyToken, `{"name":"fs2"}`, 403, errMsg("role admin")},
		{"create", "POST", "/api/v1/filesystems", adminToken, `{"name":"fs2"}`, 200, field("name", "fs2")},
		{"create again", "POST", "/api/v1/filesystems", adminToken, `{"name":"fs2"}`, 409, errMsg("already exists")},
		{"invalid fsname", "POST", "/api/v1/filesystems", adminToken, `{"name":"much_too_long"}`, 400, errMsg("limit is 8")},
		{"malformed json", "POST", "/api/v1/filesystems", adminToken, `{"name":`, 400, nil},
		{"unknown json field", "POST", "/api/v1/filesystems", adminToken, `{"nam":"x"}`, 400, nil},
		{"get fs", "GET", "/api/v1/filesystems/fs2", adminToken, "", 200, field("name", "fs2")},
		{"missing fs", "GET", "/api/v1/filesystems/nofs", adminToken, "", 404, errMsg("does not exist")},
		{"targets", "GET", "/api/v1/filesystems/fs1/targets", adminToken, "", 200, func(t *testing.T, r restResp) {
			ts, _ := r.body["targets"].([]any)
			if len(ts) != 2 || ts[1].(map[string]any)["name"] != "fs1-OST0001" || ts[0].(map[string]any)["state"] != "TARGET_STATE_UP" {
				t.Fatalf("targets: %s", r.raw)
			}
		}},
		{"target", "GET", "/api/v1/filesystems/fs1/targets/OST0001", adminToken, "", 200, field("name", "fs1-OST0001")},
		{"missing target", "GET", "/api/v1/filesystems/fs1/targets/OST0009", adminToken, "", 404, nil},
		{"bad target name", "GET", "/api/v1/filesystems/fs1/targets/XYZ", adminToken, "", 400, nil},
		{"set param", "PUT", "/api/v1/params/fs1.OST0001.osc.max_dirty_mb", adminToken, `{"value":"256"}`, 200, field("value", "256")},
		{"set glob param", "PUT", "/api/v1/params/fs1.OST*.osc.checksums", adminToken, `{"value":"on"}`, 200, field("value", "1")},
		{"get param", "GET", "/api/v1/params/fs1.OST0001.osc.max_dirty_mb", readonlyToken, "", 200, field("value", "256")},
		{"list params", "GET", "/api/v1/params?pattern=fs1.OST*", readonlyToken, "", 200, func(t *testing.T, r restResp) {
			if ps, _ := r.body["params"].([]any); len(ps) != 2 {
				t.Fatalf("params: %s", r.raw)
			}
		}},
		{"unknown param", "PUT", "/api/v1/params/fs1.OST0001.osc.max_dirty_gb", adminToken, `{"value":"1"}`, 400, errMsg("unknown parameter")},
		{"bad value", "PUT", "/api/v1/params/fs1.OST0001.osc.max_dirty_mb", adminToken, `{"value":"-4"}`, 400, errMsg("out of range")},
		{"param of missing fs", "PUT", "/api/v1/params/nofs.sys.timeout", adminToken, `{"value":"40"}`, 404, nil},
		{"delete param", "DELETE", "/api/v1/params/fs1.OST0001.osc.max_dirty_mb", adminToken, "", 200, nil},
		{"deleted param", "GET", "/api/v1/params/fs1.OST0001.osc.max_dirty_mb", adminToken, "", 404, nil},
		{"create pool", "POST", "/api/v1/filesystems/fs1/pools", adminToken, `{"name":"flash"}`, 200, field("name", "flash")},
		{"add to pool", "POST", "/api/v1/filesystems/fs1/pools/flash/osts", adminToken, `{"osts":[1,0]}`, 200, func(t *testing.T, r restResp) {
			if o, _ := r.body["osts"].([]any); len(o) != 2 || o[0].(float64) != 0 {
				t.Fatalf("pool: %s", r.raw)
			}
		}},
		{"add unknown ost", "POST", "/api/v1/filesystems/fs1/pools/flash/osts", adminToken, `{"osts":[7]}`, 404, errMsg("OST0007")},
		{"add twice", "POST", "/api/v1/filesystems/fs1/pools/flash/osts", adminToken, `{"osts":[0]}`, 409, nil},
		{"destroy non-empty", "DELETE", "/api/v1/filesystems/fs1/pools/flash", adminToken, "", 400, errMsg("remove them first")},
		{"remove from pool", "POST", "/api/v1/filesystems/fs1/pools/flash/osts:remove", adminToken, `{"osts":[0,1]}`, 200, nil},
		{"list pools", "GET", "/api/v1/filesystems/fs1/pools", readonlyToken, "", 200, func(t *testing.T, r restResp) {
			if ps, _ := r.body["pools"].([]any); len(ps) != 1 {
				t.Fatalf("pools: %s", r.raw)
			}
		}},
		{"destroy pool", "DELETE", "/api/v1/filesystems/fs1/pools/flash", adminToken, "", 200, nil},
		{"health", "GET", "/api/v1/health", readonlyToken, "", 200, field("status", "ok")},
		{"no such route", "GET", "/api/v1/nothing", adminToken, "", 404, nil},
		{"wrong method", "DELETE", "/api/v1/filesystems", adminToken, "", 405, nil},
		{"oversized body", "POST", "/api/v1/filesystems", adminToken, `{"name":"` + strings.Repeat("x", 2<<20) + `"}`, 400, nil},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			r := rest(t, m, s.method, s.path, s.token, s.body)
			if r.code != s.code {
				t.Fatalf("%s %s: status %d, want %d: %s", s.method, s.path, r.code, s.code, r.raw)
			}
			if s.check != nil {
				s.check(t, r)
			}
		})
	}

	// Refused requests change nothing.
	before := etcdSnapshot(t, m)
	for _, s := range steps {
		if s.code >= 400 && s.method != "GET" {
			rest(t, m, s.method, s.path, s.token, s.body)
		}
	}
	sameSnapshot(t, before, etcdSnapshot(t, m))

	t.Run("openapi", func(t *testing.T) {
		r := rest(t, m, "GET", "/openapi.json", "", "")
		var doc struct {
			Swagger string                    `json:"swagger"`
			Paths   map[string]map[string]any `json:"paths"`
		}
		if err := json.Unmarshal([]byte(r.raw), &doc); err != nil || r.code != 200 {
			t.Fatalf("openapi: %d %v", r.code, err)
		}
		for _, p := range []string{"/api/v1/filesystems", "/api/v1/params/{name}", "/api/v1/filesystems/{fsname}/targets"} {
			if doc.Paths[p] == nil {
				t.Errorf("openapi lacks %s", p)
			}
		}
		if doc.Paths["/api/v1/params/{name}"]["put"] == nil {
			t.Error("openapi lacks PUT /api/v1/params/{name}")
		}
	})
	t.Run("healthz", func(t *testing.T) {
		if r := rest(t, m, "GET", "/healthz", "", ""); r.code != 200 || strings.TrimSpace(r.raw) != "ok" {
			t.Fatalf("healthz: %d %q", r.code, r.raw)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		resp, err := http.Get("http://" + m.HTTPAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatalf("metrics do not parse: %v", err)
		}
		fam := families["nacre_gateway_requests_total"]
		if fam == nil {
			t.Fatal("no nacre_gateway_requests_total")
		}
		var unauth float64
		for _, mt := range fam.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "code" && l.GetValue() == "401" {
					unauth += mt.GetCounter().GetValue()
				}
			}
		}
		if unauth < 2 {
			t.Fatalf("counted %v 401s, want at least 2", unauth)
		}
		if families["grpc_server_handled_total"] == nil {
			t.Fatal("no gRPC server metrics")
		}
	})
}
