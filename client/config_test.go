package client_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/internal/params"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
)

// TestNewOSTWithoutRemount: an OST added to the file system after the
// mount shows up in the client from the MGS's watch, and a file striped
// over every OST uses it.
func TestNewOSTWithoutRemount(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	fs := c.Mount(0)
	idx := c.AddOST()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for !slices.Contains(fs.OSTs(), idx) {
		if ctx.Err() != nil {
			t.Fatalf("the client never connected to OST%04x: %v", idx, fs.OSTs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	lay := layout.Plain(layout.RAID0{StripeCount: -1, StripeSize: 64 << 10, StripeOffset: -1})
	f, _, err := fs.Create(ctx, client.Root(), fs.Root(), "wide", syscall.O_RDWR|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.Layout().Components[0].Objects); n != 3 {
		t.Fatalf("a file over every OST has %d stripes: %v", n, f.Layout())
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 3*64<<10/16)
	if _, _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	g, _, err := c.Mount(1).Open(ctx, client.Root(), f.FID(), syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if n, err := g.ReadAt(ctx, got, 0); n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("read %d %v", n, err)
	}
}

// TestPersistentLRUSizeOnNewOST: lctl set_param -P ldlm.namespaces.*.lru_size
// (nacre.client.ldlm.lru_size) applies to every lock namespace of the
// mount, those of OSTs added after the mount as well, as osc.* parameters
// do.
func TestPersistentLRUSizeOnNewOST(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	setParam(ctx, t, c, "nacre.client.ldlm.lru_size", "123")
	fs := c.Mount(0)
	lru := func(ost uint32) string {
		name := fmt.Sprintf("ldlm.namespaces.nacre-OST%04x-osc-%s.lru_size", ost, fs.Instance())
		vs, err := params.Default.Get(false, name)
		if err != nil || len(vs) != 1 {
			t.Fatalf("get %s: %v %v", name, vs, err)
		}
		return vs[0].Value
	}
	if v := lru(0); v != "123" {
		t.Fatalf("OST0000's namespace at mount: lru_size=%s, want 123", v)
	}
	idx := c.AddOST()
	for !slices.Contains(fs.OSTs(), idx) {
		if ctx.Err() != nil {
			t.Fatalf("the client never connected to OST%04x: %v", idx, fs.OSTs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := lru(idx); v != "123" {
		t.Fatalf("the namespace of OST%04x, added after the mount: lru_size=%s, want the persistent 123", idx, v)
	}
}

// TestPersistentTimeoutAndJobIDVar: the persistent sys.timeout and
// jobid_var (lctl set_param -P) reach a mount, at mount and as they
// change, as its llite.*.timeout and llite.*.jobid_var; the catalog took
// them and nothing applied them before. A value set_param refuses leaves
// the mount's.
func TestPersistentTimeoutAndJobIDVar(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	set := func(name, v string) { t.Helper(); setParam(ctx, t, c, name, v) }
	set("nacre.sys.timeout", "7")
	fs := c.Mount(0)
	if got := fs.Timeout(); got != 7*time.Second {
		t.Fatalf("timeout at mount: %v, want the persistent 7s", got)
	}
	if got := fs.JobIDVar(); got != "procname_uid" {
		t.Fatalf("jobid_var at mount: %q, want the default", got)
	}
	set("nacre.client.jobid_var", "SLURM_JOB_ID")
	set("nacre.sys.timeout", "9")
	for fs.JobIDVar() != "SLURM_JOB_ID" || fs.Timeout() != 9*time.Second {
		if ctx.Err() != nil {
			t.Fatalf("after set_param -P: jobid_var %q, timeout %v", fs.JobIDVar(), fs.Timeout())
		}
		time.Sleep(20 * time.Millisecond)
	}
	name := "llite.nacre-" + fs.Instance() + ".jobid_var"
	if _, err := params.Default.Set(params.SetOptions{}, params.Assignment{Pattern: name, Value: "A=B"}); err == nil {
		t.Fatalf("set_param %s=A=B accepted", name)
	}
	if vs, err := params.Default.Get(false, name); err != nil || len(vs) != 1 || vs[0].Value != "SLURM_JOB_ID" {
		t.Fatalf("get %s: %v %v", name, vs, err)
	}
}

// setParam stores the persistent parameter name=v through the MGS's admin
// API, as lctl set_param -P does.
func setParam(ctx context.Context, t *testing.T, c *clustertest.Cluster, name, v string) {
	t.Helper()
	cc, err := grpc.NewClient(c.MGS, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := adminv1.NewAdminClient(cc).SetParam(ctx, &adminv1.SetParamRequest{Name: name, Value: v}); err != nil {
		t.Fatal(err)
	}
}
