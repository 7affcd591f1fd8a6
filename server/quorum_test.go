package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nacrefs/nacre/internal/etcdserver/etcdtest"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
)

// Three etcd members: with one killed the MGS keeps registering, setting
// params and watching; with two killed calls fail with Unavailable within
// their deadline; when the members return everything works again and the
// watch that stayed open has missed nothing.
func TestEtcdQuorumLossAndRecovery(t *testing.T) {
	ec := etcdtest.Start(t, 3)
	m := startMGS(t, ec.Endpoints(), func(c *MGSConfig) { c.RequestTimeout = 2 * time.Second; c.LeaseTTL = 30 * time.Second })
	cc := dial(t, m.GRPCAddr())
	mgsc := mgsv1.NewMGSClient(cc)
	adm := adminv1.NewAdminClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	actx := withToken(ctx, adminToken)

	register := func(ctx context.Context, nid string) (*mgsv1.RegisterTargetResponse, error) {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return mgsc.RegisterTarget(c, &mgsv1.RegisterTargetRequest{Fsname: "qfs", Kind: mgsv1.TargetKind_TARGET_KIND_OST, Nids: []string{nid}})
	}
	first, err := register(ctx, "10.1.0.1@tcp")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := mgsc.WatchConfig(ctx, &mgsv1.WatchConfigRequest{Fsname: "qfs", StartRevision: first.GetConfig().GetRevision() + 1})
	if err != nil {
		t.Fatal(err)
	}
	var seen []*mgsv1.ConfigEvent

	// One member down: everything still works.
	ec.Stop(0)
	r2, err := register(ctx, "10.1.0.2@tcp")
	if err != nil {
		t.Fatalf("register with one member down: %v", err)
	}
	if _, err := adm.SetParam(actx, &adminv1.SetParamRequest{Name: "qfs.sys.timeout", Value: "111"}); err != nil {
		t.Fatalf("set_param with one member down: %v", err)
	}
	if r := rest(t, m, "PUT", "/api/v1/params/qfs.sys.at_max", adminToken, `{"value":"600"}`); r.code != 200 {
		t.Fatalf("REST set_param with one member down: %d %s", r.code, r.raw)
	}
	recvUntil(t, stream, &seen, paramEvent("qfs.sys.at_max", "600"))

	// Two members down: no quorum. Calls fail with Unavailable, in time.
	ec.Stop(1)
	for i, call := range []func(context.Context) error{
		func(c context.Context) error { _, err := register(c, "10.1.0.3@tcp"); return err },
		func(c context.Context) error {
			_, err := adm.SetParam(withToken(c, adminToken), &adminv1.SetParamRequest{Name: "qfs.sys.timeout", Value: "222"})
			return err
		},
		func(c context.Context) error {
			_, err := mgsc.GetClientConfig(c, &mgsv1.GetClientConfigRequest{Fsname: "qfs"})
			return err
		},
	} {
		c, cancel := context.WithTimeout(ctx, 8*time.Second)
		start := time.Now()
		err := call(c)
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call %d without quorum: %v, want Unavailable", i, err)
		}
		if el := time.Since(start); el > 7*time.Second {
			t.Fatalf("call %d took %v; it must fail within its deadline", i, el)
		}
	}
	if r := rest(t, m, "GET", "/api/v1/params/qfs.sys.timeout", adminToken, ""); r.code != 503 {
		t.Fatalf("REST without quorum: %d %s, want 503", r.code, r.raw)
	}
	if r := rest(t, m, "GET", "/healthz", "", ""); r.code != 503 {
		t.Fatalf("healthz without quorum: %d, want 503", r.code)
	}
	h, err := adm.Health(actx, &adminv1.HealthRequest{})
	if err != nil || h.GetStatus() != "degraded" {
		t.Fatalf("health without quorum: %v %v", h, err)
	}

	// Members return: calls succeed again, and the open watch carries on.
	ec.RestartAll(0, 1)
	var r3 *mgsv1.RegisterTargetResponse
	deadline := time.Now().Add(60 * time.Second)
	for {
		r3, err = register(ctx, "10.1.0.4@tcp")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery within 60s: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if _, err := adm.SetParam(actx, &adminv1.SetParamRequest{Name: "qfs.sys.timeout", Value: "333"}); err != nil {
		t.Fatalf("set_param after recovery: %v", err)
	}
	recvUntil(t, stream, &seen, paramEvent("qfs.sys.timeout", "333"))

	// Every change made while the cluster had a quorum arrived, in order,
	// exactly once; nothing from the quorum-less window was written.
	var targets, params []string
	last := int64(0)
	for _, e := range seen {
		if e.GetRevision() < last {
			t.Fatalf("event revision %d after %d", e.GetRevision(), last)
		}
		last = e.GetRevision()
		if tg := e.GetTarget(); tg != nil {
			targets = append(targets, tg.GetName())
		}
		if p := e.GetParam(); p != nil {
			params = append(params, p.GetName()+"="+p.GetValue())
		}
	}
	wantTargets := fmt.Sprint([]string{r2.GetTarget().GetName(), r3.GetTarget().GetName()})
	if fmt.Sprint(targets) != wantTargets {
		t.Fatalf("watched targets %v, want %s", targets, wantTargets)
	}
	wantParams := "[qfs.sys.timeout=111 qfs.sys.at_max=600 qfs.sys.timeout=333]"
	if fmt.Sprint(params) != wantParams {
		t.Fatalf("watched params %v, want %s", params, wantParams)
	}
	if r3.GetTarget().GetIndex() != 2 {
		t.Fatalf("index after recovery %d, want 2 (the quorum-less attempt must not have taken one)", r3.GetTarget().GetIndex())
	}
}
