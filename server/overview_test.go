package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/jobstats"
	"github.com/nacrefs/nacre/internal/layout"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// overviewCluster is a file system with the OSS in a child process (its
// own status port) and a known workload: job "ovw.7" wrote overviewBytes
// over both OSTs and created the file, job "meta.9" made a directory, and
// a changelog user is registered.
type overviewCluster struct {
	c     *clustertest.Cluster
	https string // the gateway's base URL
	api   adminv1.AdminClient
	conn  *grpc.ClientConn // to the MGS
}

const overviewBytes = 4 << 20

func startOverviewCluster(t *testing.T) *overviewCluster {
	t.Helper()
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, ChildOSS: true, Clients: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fs := c.Mount(0)
	lay := layout.Plain(layout.RAID0{StripeCount: 2, StripeSize: 1 << 20, StripeOffset: -1})
	jctx := jobstats.WithJob(ctx, "ovw.7")
	f, _, err := fs.Create(jctx, client.Root(), fs.Root(), "data", syscall.O_RDWR|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.WriteAt(jctx, make([]byte, overviewBytes), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(jctx); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Mkdir(jobstats.WithJob(ctx, "meta.9"), client.Root(), fs.Root(), "dir", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Servers()[0].MDS.MDTs()[0].Store().ChangelogRegister(); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(c.MGS, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &overviewCluster{c: c, https: "http://" + c.Gateway, api: adminv1.NewAdminClient(cc), conn: cc}
}

// get fetches a REST path and decodes the JSON answer into out (a proto
// message or a map), failing unless the status is want.
func (o *overviewCluster) get(t *testing.T, path string, want int, out any) string {
	t.Helper()
	resp, err := http.Get(o.https + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d, want %d: %s", path, resp.StatusCode, want, b)
	}
	switch v := out.(type) {
	case nil:
	case proto.Message:
		if err := protojson.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, b)
		}
	default:
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, b)
		}
	}
	return string(b)
}

func TestClusterOverview(t *testing.T) {
	o := startOverviewCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var ov adminv1.ClusterOverview
	o.get(t, "/api/v1/filesystems/nacre/overview", 200, &ov)
	names := []string{}
	for _, tg := range ov.GetTargets() {
		names = append(names, tg.GetName())
	}
	if strings.Join(names, ",") != "nacre-MDT0000,nacre-OST0000,nacre-OST0001" {
		t.Fatalf("targets %v", names)
	}
	if ov.GetTargetsUp() != 3 || ov.GetTargetsDown() != 0 || ov.GetClients() != 1 {
		t.Fatalf("up %d down %d clients %d", ov.GetTargetsUp(), ov.GetTargetsDown(), ov.GetClients())
	}
	var sumTotal, sumWrite uint64
	servers := map[string]bool{}
	for _, tg := range ov.GetTargets() {
		u := tg.GetUsage()
		if tg.GetLiveError() != "" || u.GetTotalBytes() == 0 || u.GetFreeBytes() > u.GetTotalBytes() || u.GetAvailBytes() > u.GetFreeBytes() ||
			u.GetTotalInodes() == 0 || u.GetFreeInodes() > u.GetTotalInodes() {
			t.Fatalf("%s: usage %v, live error %q", tg.GetName(), u, tg.GetLiveError())
		}
		// The mount; an OST has the MDT's OSP too.
		wantClients := uint32(1)
		if strings.Contains(tg.GetName(), "OST") {
			wantClients = 2
		}
		if tg.GetConnectedClients() != wantClients || tg.GetRecovery() != adminv1.RecoveryState_RECOVERY_STATE_COMPLETE || len(tg.GetClients()) != 0 {
			t.Fatalf("%s: clients %d recovery %v detail %d (none without a mask)", tg.GetName(), tg.GetConnectedClients(), tg.GetRecovery(), len(tg.GetClients()))
		}
		servers[tg.GetServer()] = true
		wantNID := clustertest.MDSAddr + "@tcp"
		if strings.Contains(tg.GetName(), "OST") {
			wantNID = clustertest.ChildOSSAddr + "@tcp"
			sumTotal += u.GetTotalBytes()
			sumWrite += tg.GetIo().GetWriteBytes()
			if tg.GetIo().GetWriteOps() == 0 || tg.GetIo().GetOps()["ost_write"] != tg.GetIo().GetWriteOps() {
				t.Fatalf("%s: io %v", tg.GetName(), tg.GetIo())
			}
		} else if tg.GetIo().GetOps()["mkdir"] != 1 || tg.GetIo().GetOps()["open"]+tg.GetIo().GetOps()["mknod"] == 0 {
			t.Fatalf("MDT op counts %v: want one mkdir and the create", tg.GetIo().GetOps())
		}
		if len(tg.GetNids()) != 1 || tg.GetNids()[0] != wantNID {
			t.Fatalf("%s: nids %v, want %s", tg.GetName(), tg.GetNids(), wantNID)
		}
	}
	if sumWrite != overviewBytes || ov.GetTotalIo().GetWriteBytes() != overviewBytes || ov.GetTotal().GetTotalBytes() != sumTotal {
		t.Fatalf("OST writes %d (total_io %d), want %d; total space %d, OSTs' %d", sumWrite, ov.GetTotalIo().GetWriteBytes(), overviewBytes,
			ov.GetTotal().GetTotalBytes(), sumTotal)
	}
	// Two server processes: this one (MDT) and the child (OSTs).
	if len(servers) != 2 || len(ov.GetServers()) != 2 {
		t.Fatalf("servers %v / %v", servers, ov.GetServers())
	}
	ossAddr := ov.GetTargets()[1].GetServer()
	for _, s := range ov.GetServers() {
		if s.GetError() != "" || len(s.GetLnet().GetNis()) == 0 {
			t.Fatalf("server %v", s)
		}
		if (s.GetAddress() == ossAddr) == (s.GetPid() == int64(os.Getpid())) {
			t.Fatalf("server %s has pid %d; the OSS's should be the child's, the MDS's ours (%d)", s.GetAddress(), s.GetPid(), os.Getpid())
		}
	}

	t.Run("grpc", func(t *testing.T) {
		g, err := o.api.GetClusterOverview(ctx, &adminv1.GetClusterOverviewRequest{Fsname: "nacre",
			ReadMask: &fieldmaskpb.FieldMask{Paths: []string{"targets.name", "targets.usage.total_bytes", "total"}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(g.GetTargets()) != 3 || g.GetTargets()[1].GetUsage().GetTotalBytes() != ov.GetTargets()[1].GetUsage().GetTotalBytes() ||
			g.GetTargets()[1].GetUsage().GetFreeBytes() != 0 || g.GetTargets()[1].GetIo() != nil || g.GetServers() != nil ||
			g.GetTotal().GetTotalBytes() != sumTotal || g.GetFsname() != "" {
			t.Fatalf("masked overview: %v", g)
		}
		_, err = o.api.GetClusterOverview(ctx, &adminv1.GetClusterOverviewRequest{Fsname: "nacre",
			ReadMask: &fieldmaskpb.FieldMask{Paths: []string{"targets.bogus"}}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "bogus") {
			t.Fatalf("bad mask: %v", err)
		}
	})

	t.Run("clients", func(t *testing.T) {
		var m adminv1.ClusterOverview
		o.get(t, "/api/v1/filesystems/nacre/overview?read_mask=targets.name,targets.clients", 200, &m)
		var written uint64
		for _, tg := range m.GetTargets() {
			if tg.GetUsage() != nil || len(tg.GetClients()) == 0 {
				t.Fatalf("%s: %v", tg.GetName(), tg)
			}
			found := false
			for _, cl := range tg.GetClients() {
				if cl.GetNid() != clustertest.ClientAddr(0)+"@tcp" {
					continue // the MDT's OSP
				}
				found = true
				if cl.GetUuid() == "" || cl.GetOps()["ldlm_enqueue"]+cl.GetOps()["mds_reint"]+cl.GetOps()["ost_write"] == 0 {
					t.Fatalf("%s: client %v", tg.GetName(), cl)
				}
				written += cl.GetWriteBytes()
			}
			if !found {
				t.Fatalf("%s: the mount is not among the clients %v", tg.GetName(), tg.GetClients())
			}
		}
		if written != overviewBytes {
			t.Fatalf("clients wrote %d, want %d", written, overviewBytes)
		}
		var l adminv1.ListTargetClientsResponse
		o.get(t, "/api/v1/filesystems/nacre/targets/OST0001/clients", 200, &l)
		if len(l.GetClients()) != 2 || l.GetClients()[0].GetWriteBytes()+l.GetClients()[1].GetWriteBytes() == 0 || l.GetNextPageToken() != "" {
			t.Fatalf("OST0001 clients: %v", &l)
		}
	})

	t.Run("pages", func(t *testing.T) {
		var got []string
		tok := ""
		for range 4 {
			var p adminv1.ClusterOverview
			o.get(t, "/api/v1/filesystems/nacre/overview?page_size=1&read_mask=targets.name&page_token="+url.QueryEscape(tok), 200, &p)
			for _, tg := range p.GetTargets() {
				got = append(got, tg.GetName())
			}
			if tok = p.GetNextPageToken(); tok == "" {
				break
			}
		}
		if strings.Join(got, ",") != "nacre-MDT0000,nacre-OST0000,nacre-OST0001" {
			t.Fatalf("pages gave %v", got)
		}
		var first adminv1.ClusterOverview
		o.get(t, "/api/v1/filesystems/nacre/overview?page_size=1", 200, &first)
		// A token of one list is refused by another, and garbage too.
		var e map[string]any
		o.get(t, "/api/v1/filesystems/nacre/jobs?page_token="+url.QueryEscape(first.GetNextPageToken()), 400, &e)
		if !strings.Contains(fmt.Sprint(e["message"]), "another query") {
			t.Fatalf("foreign token: %v", e)
		}
		o.get(t, "/api/v1/filesystems/nacre/overview?page_token=%21%21", 400, nil)
		o.get(t, "/api/v1/filesystems/nacre/overview?page_size=-1", 400, nil)
	})

	t.Run("jobs", func(t *testing.T) {
		var all []*adminv1.JobStats
		tok := ""
		for range 10 {
			var p adminv1.ListJobStatsResponse
			o.get(t, "/api/v1/filesystems/nacre/jobs?page_size=2&page_token="+url.QueryEscape(tok), 200, &p)
			all = append(all, p.GetJobs()...)
			if tok = p.GetNextPageToken(); tok == "" {
				break
			}
		}
		var written uint64
		var mkdirs, creates uint64
		for _, j := range all {
			switch {
			case j.GetJobId() == "ovw.7" && strings.Contains(j.GetTarget(), "OST"):
				written += j.GetOps()["write_bytes"].GetSum()
			case j.GetJobId() == "ovw.7" && j.GetTarget() == "nacre-MDT0000":
				creates += j.GetOps()["open"].GetSamples() + j.GetOps()["mknod"].GetSamples()
			case j.GetJobId() == "meta.9" && j.GetTarget() == "nacre-MDT0000":
				mkdirs += j.GetOps()["mkdir"].GetSamples()
			}
		}
		if written != overviewBytes || creates == 0 || mkdirs != 1 {
			t.Fatalf("job stats: ovw.7 wrote %d (want %d) and created %d; meta.9 made %d directories (want 1): %v", written, overviewBytes, creates, mkdirs, all)
		}
		var one adminv1.ListJobStatsResponse
		o.get(t, "/api/v1/filesystems/nacre/jobs?target=OST0000", 200, &one)
		if len(one.GetJobs()) == 0 {
			t.Fatal("no job stats on OST0000")
		}
		for _, j := range one.GetJobs() {
			if j.GetTarget() != "nacre-OST0000" {
				t.Fatalf("target filter let %s through", j.GetTarget())
			}
		}
		o.get(t, "/api/v1/filesystems/nacre/jobs?target=OST0007", 404, nil)
		o.get(t, "/api/v1/filesystems/nacre/jobs?target=XYZ", 400, nil)
	})

	t.Run("lnet-changelog-servers", func(t *testing.T) {
		var peers adminv1.ListLNetPeersResponse
		o.get(t, "/api/v1/filesystems/nacre/lnet/peers", 200, &peers)
		fromOSS := false
		for _, p := range peers.GetPeers() {
			fromOSS = fromOSS || (p.GetServer() == ossAddr && p.GetNid() == clustertest.ClientAddr(0)+"@tcp" && p.GetRecvBytes() >= overviewBytes)
		}
		if !fromOSS {
			t.Fatalf("the OSS has no peer entry for the client with its bytes: %v", &peers)
		}
		var users adminv1.ListChangelogUsersResponse
		o.get(t, "/api/v1/filesystems/nacre/changelog_users", 200, &users)
		if len(users.GetUsers()) != 1 || users.GetUsers()[0].GetId() != "cl1" || users.GetUsers()[0].GetTarget() != "nacre-MDT0000" {
			t.Fatalf("changelog users: %v", &users)
		}
		var ss adminv1.ListServersResponse
		o.get(t, "/api/v1/filesystems/nacre/servers?page_size=1", 200, &ss)
		if len(ss.GetServers()) != 1 || ss.GetNextPageToken() == "" {
			t.Fatalf("servers page: %v", &ss)
		}
	})

	t.Run("openapi", func(t *testing.T) {
		var doc struct {
			Paths map[string]map[string]any `json:"paths"`
		}
		o.get(t, "/openapi.json", 200, &doc)
		for _, p := range []string{"/api/v1/filesystems/{fsname}/overview", "/api/v1/filesystems/{fsname}/targets/{name}/clients",
			"/api/v1/filesystems/{fsname}/jobs", "/api/v1/filesystems/{fsname}/servers", "/api/v1/filesystems/{fsname}/lnet/peers",
			"/api/v1/filesystems/{fsname}/changelog_users"} {
			if doc.Paths[p]["get"] == nil {
				t.Errorf("openapi lacks GET %s", p)
			}
		}
	})

	t.Run("bad-input", func(t *testing.T) {
		o.get(t, "/api/v1/filesystems/nofs/overview", 404, nil)
		o.get(t, "/api/v1/filesystems/nacre/targets/OST0009/clients", 404, nil)
		o.get(t, "/api/v1/filesystems/nacre/targets/XYZ/clients", 400, nil)
		o.get(t, "/api/v1/filesystems/nacre/overview?read_mask=targets.usage.nothing", 400, nil)
		o.get(t, "/api/v1/filesystems/nacre/overview?read_mask=targets.io.ops.x", 400, nil)
	})

	t.Run("metrics", func(t *testing.T) {
		resp, err := http.Get(o.https + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatalf("the gateway's metrics do not parse: %v", err)
		}
		var written float64
		for _, m := range fams["nacre_ost_bytes_total"].GetMetric() {
			if label(m, "direction") == "write" {
				if label(m, "instance") != ossAddr {
					t.Fatalf("OST series from %q, want the child OSS's %s", label(m, "instance"), ossAddr)
				}
				written += m.GetCounter().GetValue()
			}
		}
		if written != overviewBytes {
			t.Fatalf("nacre_ost_bytes_total write %v, want %d", written, overviewBytes)
		}
		up := map[string]float64{}
		for _, m := range fams["nacre_federation_up"].GetMetric() {
			up[label(m, "instance")] = m.GetGauge().GetValue()
		}
		if len(up) != 2 || up[ossAddr] != 1 {
			t.Fatalf("nacre_federation_up %v", up)
		}
		// The child's Go runtime and the gateway's own, told apart.
		inst := map[string]bool{}
		for _, m := range fams["go_goroutines"].GetMetric() {
			inst[label(m, "instance")] = true
		}
		if !inst[ossAddr] || !inst[o.c.Gateway] {
			t.Fatalf("go_goroutines from %v, want the OSS %s and the gateway %s", inst, ossAddr, o.c.Gateway)
		}
		var mkdirs float64
		for _, m := range fams["nacre_job_requests_total"].GetMetric() {
			if label(m, "job") == "meta.9" && label(m, "op") == "mkdir" {
				mkdirs += m.GetCounter().GetValue()
			}
		}
		if mkdirs != 1 || fams["nacre_gateway_requests_total"] == nil {
			t.Fatalf("MDT job series: %v mkdirs; gateway's own series: %v", mkdirs, fams["nacre_gateway_requests_total"] != nil)
		}
	})

	t.Run("dashboard", func(t *testing.T) { checkDashboard(t, o, &ov) })

	// Last: the OSS dies. Its targets are still registered (their leases
	// have not run out), but their figures are gone, and the overview and
	// the metrics say why instead of failing.
	t.Run("server-gone", func(t *testing.T) {
		o.c.KillOSS()
		// Back before the cluster stops: the MDS and the mount would wait
		// out their timeouts on a dead OSS.
		defer func() {
			if err := o.c.StartOSS(); err != nil {
				t.Error(err)
			}
		}()
		var g adminv1.ClusterOverview
		o.get(t, "/api/v1/filesystems/nacre/overview", 200, &g)
		for _, tg := range g.GetTargets() {
			gone := tg.GetServer() == ossAddr
			if gone != (tg.GetUsage() == nil) || gone != strings.Contains(tg.GetLiveError(), ossAddr) {
				t.Fatalf("%s after the OSS died: usage %v, live error %q", tg.GetName(), tg.GetUsage(), tg.GetLiveError())
			}
		}
		for _, s := range g.GetServers() {
			if (s.GetAddress() == ossAddr) != (s.GetError() != "") {
				t.Fatalf("server %v after the OSS died", s)
			}
		}
		var e map[string]any
		o.get(t, "/api/v1/filesystems/nacre/jobs", 503, &e)
		if !strings.Contains(fmt.Sprint(e["message"]), ossAddr) {
			t.Fatalf("job stats without the OSS: %v", e)
		}
		resp, err := http.Get(o.https + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fams["nacre_federation_up"].GetMetric() {
			if want := map[bool]float64{true: 0, false: 1}[label(m, "instance") == ossAddr]; m.GetGauge().GetValue() != want {
				t.Fatalf("nacre_federation_up{instance=%s} = %v, want %v", label(m, "instance"), m.GetGauge().GetValue(), want)
			}
		}
		if fams["nacre_ost_bytes_total"] != nil {
			t.Fatal("OST series without the OSS")
		}
	})
}
