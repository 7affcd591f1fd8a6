package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/internal/etcdserver/etcdtest"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
)

func wantCode(t *testing.T, err error, c codes.Code) {
	t.Helper()
	if got := status.Code(err); got != c {
		t.Fatalf("got %v (%v), want %v", got, err, c)
	}
}

func TestGRPCRegisterHeartbeatWatch(t *testing.T) {
	ec := etcdtest.Start(t, 1)
	m := startMGS(t, ec.Endpoints(), func(c *MGSConfig) { c.LeaseTTL = 2 * time.Second })
	cc := dial(t, m.GRPCAddr())
	mgsc := mgsv1.NewMGSClient(cc)
	adm := adminv1.NewAdminClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Registration needs no token: servers hold no admin credentials.
	reg, err := mgsc.RegisterTarget(ctx, &mgsv1.RegisterTargetRequest{
		Fsname: "lustre", Kind: mgsv1.TargetKind_TARGET_KIND_MDT, Nids: []string{"192.168.1.5@tcp"}, Path: "/srv/mdt0",
	})
	if err != nil {
		t.Fatal(err)
	}
	if reg.GetTarget().GetName() != "lustre-MDT0000" || reg.GetTarget().GetState() != mgsv1.TargetState_TARGET_STATE_UP || reg.GetLeaseId() == 0 || reg.GetLeaseTtlSeconds() != 2 {
		t.Fatalf("registration: %v", reg)
	}
	cfg := reg.GetConfig()
	if cfg.GetFilesystem().GetName() != "lustre" || len(cfg.GetTargets()) != 1 || cfg.GetRevision() == 0 {
		t.Fatalf("config: %v", cfg)
	}

	stream, err := mgsc.WatchConfig(ctx, &mgsv1.WatchConfigRequest{Fsname: "lustre", StartRevision: cfg.GetRevision() + 1})
	if err != nil {
		t.Fatal(err)
	}
	idx := uint32(3)
	ost, err := mgsc.RegisterTarget(ctx, &mgsv1.RegisterTargetRequest{
		Fsname: "lustre", Kind: mgsv1.TargetKind_TARGET_KIND_OST, Index: &idx, Nids: []string{"192.168.1.6@tcp"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.SetParam(withToken(ctx, adminToken), &adminv1.SetParamRequest{Name: "lustre.OST0003.osc.max_rpcs_in_flight", Value: "16"}); err != nil {
		t.Fatal(err)
	}
	var got []*mgsv1.ConfigEvent
	for len(got) < 3 {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	if got[0].GetTarget().GetName() != "lustre-OST0003" || got[1].GetLiveness().GetName() != "OST0003" ||
		got[2].GetParam().GetValue() != "16" || got[2].GetRevision() <= got[1].GetRevision() {
		t.Fatalf("events: %v", got)
	}

	// Heartbeats keep the MDT up past its TTL; the OST, not renewed, goes down.
	for i := 0; i < 8; i++ {
		hb, err := mgsc.Heartbeat(ctx, &mgsv1.HeartbeatRequest{Fsname: "lustre", Kind: mgsv1.TargetKind_TARGET_KIND_MDT, Index: 0, LeaseId: reg.GetLeaseId()})
		if err != nil || hb.GetTtlSeconds() < 1 {
			t.Fatalf("heartbeat %d: %v %v", i, hb, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	ev, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ev.GetLiveness().GetName() != "OST0003" || ev.GetLiveness().GetState() != mgsv1.TargetState_TARGET_STATE_DOWN {
		t.Fatalf("want OST0003 down, got %v", ev)
	}
	_, err = mgsc.Heartbeat(ctx, &mgsv1.HeartbeatRequest{Fsname: "lustre", Kind: mgsv1.TargetKind_TARGET_KIND_OST, Index: 3, LeaseId: ost.GetLeaseId()})
	wantCode(t, err, codes.NotFound)
	ts, err := adm.ListTargets(withToken(ctx, readonlyToken), &adminv1.ListTargetsRequest{Fsname: "lustre"})
	if err != nil || len(ts.GetTargets()) != 2 || ts.GetTargets()[0].GetState() != mgsv1.TargetState_TARGET_STATE_UP || ts.GetTargets()[1].GetState() != mgsv1.TargetState_TARGET_STATE_DOWN {
		t.Fatalf("targets: %v %v", ts, err)
	}

	// Bad input: a clear code, and nothing written.
	before := etcdSnapshot(t, m)
	_, err = mgsc.RegisterTarget(ctx, &mgsv1.RegisterTargetRequest{Fsname: "lustre", Kind: mgsv1.TargetKind_TARGET_KIND_OST, Index: &idx, Nids: []string{"10.0.0.1@tcp"}})
	wantCode(t, err, codes.AlreadyExists)
	big := uint32(70000)
	_, err = mgsc.RegisterTarget(ctx, &mgsv1.RegisterTargetRequest{Fsname: "lustre", Kind: mgsv1.TargetKind_TARGET_KIND_OST, Index: &big, Nids: []string{"10.0.0.1@tcp"}})
	wantCode(t, err, codes.InvalidArgument)
	_, err = mgsc.RegisterTarget(ctx, &mgsv1.RegisterTargetRequest{Fsname: "bad/name", Kind: mgsv1.TargetKind_TARGET_KIND_OST, Nids: []string{"10.0.0.1@tcp"}})
	wantCode(t, err, codes.InvalidArgument)
	_, err = mgsc.RegisterTarget(ctx, &mgsv1.RegisterTargetRequest{Fsname: "lustre", Nids: []string{"10.0.0.1@tcp"}})
	wantCode(t, err, codes.InvalidArgument)
	// A kind that is none of the three, even one whose low byte is
	// (256+OST), is refused, not taken for another kind.
	for _, k := range []mgsv1.TargetKind{256 + mgsv1.TargetKind_TARGET_KIND_OST, -1, 4} {
		_, err = mgsc.RegisterTarget(ctx, &mgsv1.RegisterTargetRequest{Fsname: "lustre", Kind: k, Nids: []string{"10.0.0.1@tcp"}})
		wantCode(t, err, codes.InvalidArgument)
	}
	_, err = mgsc.Heartbeat(ctx, &mgsv1.HeartbeatRequest{Fsname: "lustre", Kind: 256 + mgsv1.TargetKind_TARGET_KIND_MDT, Index: 0, LeaseId: reg.GetLeaseId()})
	wantCode(t, err, codes.InvalidArgument)
	_, err = mgsc.GetClientConfig(ctx, &mgsv1.GetClientConfigRequest{Fsname: "nofs"})
	wantCode(t, err, codes.NotFound)
	ws, err := mgsc.WatchConfig(ctx, &mgsv1.WatchConfigRequest{Fsname: "nofs"})
	if err == nil {
		_, err = ws.Recv()
	}
	wantCode(t, err, codes.NotFound)
	sameSnapshot(t, before, etcdSnapshot(t, m))
}

func TestGRPCAuthHealthReflection(t *testing.T) {
	ec := etcdtest.Start(t, 1)
	m := startMGS(t, ec.Endpoints())
	cc := dial(t, m.GRPCAddr())
	adm := adminv1.NewAdminClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err := adm.ListFilesystems(ctx, &adminv1.ListFilesystemsRequest{})
	wantCode(t, err, codes.Unauthenticated)
	_, err = adm.ListFilesystems(withToken(ctx, "wrong-token-0123456789"), &adminv1.ListFilesystemsRequest{})
	wantCode(t, err, codes.Unauthenticated)
	before := etcdSnapshot(t, m)
	_, err = adm.CreateFilesystem(withToken(ctx, readonlyToken), &adminv1.CreateFilesystemRequest{Name: "fs1"})
	wantCode(t, err, codes.PermissionDenied)
	sameSnapshot(t, before, etcdSnapshot(t, m))
	if _, err := adm.CreateFilesystem(withToken(ctx, adminToken), &adminv1.CreateFilesystemRequest{Name: "fs1"}); err != nil {
		t.Fatal(err)
	}
	list, err := adm.ListFilesystems(withToken(ctx, readonlyToken), &adminv1.ListFilesystemsRequest{})
	if err != nil || len(list.GetFilesystems()) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	h, err := adm.Health(withToken(ctx, readonlyToken), &adminv1.HealthRequest{})
	if err != nil || h.GetStatus() != "ok" || len(h.GetEtcd()) != 1 || !h.GetEtcd()[0].GetHealthy() {
		t.Fatalf("health: %v %v", h, err)
	}

	hc, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "nacre.mgs.v1.MGS"})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health: %v %v", hc, err)
	}

	rs, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	services := map[string]bool{}
	for _, s := range rr.GetListServicesResponse().GetService() {
		services[s.GetName()] = true
	}
	for _, want := range []string{"nacre.mgs.v1.MGS", "nacre.admin.v1.Admin", "grpc.health.v1.Health"} {
		if !services[want] {
			t.Errorf("reflection does not list %s (got %v)", want, services)
		}
	}
	rs.CloseSend()
}

func TestGRPCMutualTLS(t *testing.T) {
	ec := etcdtest.Start(t, 1)
	p := newPKI(t)
	m := startMGS(t, ec.Endpoints(), func(c *MGSConfig) {
		c.TLS.CertFile, c.TLS.KeyFile, c.TLS.ClientCAFile = p.serverCert, p.serverKey, p.caFile
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	connect := func(certs ...tls.Certificate) adminv1.AdminClient {
		creds := credentials.NewTLS(&tls.Config{RootCAs: p.caPool, Certificates: certs, ServerName: "127.0.0.1"})
		cc, err := grpc.NewClient(m.GRPCAddr(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return adminv1.NewAdminClient(cc)
	}
	// A certificate the client CA signed is trusted as admin, no token needed.
	if _, err := connect(p.clientCert).CreateFilesystem(ctx, &adminv1.CreateFilesystemRequest{Name: "tlsfs"}); err != nil {
		t.Fatalf("mTLS client: %v", err)
	}
	short, c2 := context.WithTimeout(ctx, 3*time.Second)
	defer c2()
	_, err := connect().ListFilesystems(withToken(short, adminToken), &adminv1.ListFilesystemsRequest{})
	if err == nil {
		t.Fatal("a client without a certificate got through")
	}
	_, err = connect(p.rogueCert).ListFilesystems(withToken(short, adminToken), &adminv1.ListFilesystemsRequest{})
	if err == nil {
		t.Fatal("a client with an unknown certificate got through")
	}
	_, err = adminv1.NewAdminClient(dial(t, m.GRPCAddr())).ListFilesystems(withToken(short, adminToken), &adminv1.ListFilesystemsRequest{})
	if err == nil {
		t.Fatal("a plaintext client got through")
	}
}

// recvUntil reads events until pred holds or the stream fails.
func recvUntil(t *testing.T, s mgsv1.MGS_WatchConfigClient, seen *[]*mgsv1.ConfigEvent, pred func(*mgsv1.ConfigEvent) bool) {
	t.Helper()
	for {
		ev, err := s.Recv()
		if errors.Is(err, io.EOF) || err != nil {
			t.Fatalf("watch ended: %v", err)
		}
		*seen = append(*seen, ev)
		if pred(ev) {
			return
		}
	}
}

func paramEvent(name, value string) func(*mgsv1.ConfigEvent) bool {
	return func(e *mgsv1.ConfigEvent) bool {
		return proto.Equal(e.GetParam(), &mgsv1.Param{Name: name, Value: value, Revision: e.GetRevision()})
	}
}
