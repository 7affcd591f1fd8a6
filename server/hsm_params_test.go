package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/etcdserver/etcdtest"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/mgs"
	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
	"github.com/nacrefs/nacre/services/hsm"
)

// TestHSMControlParams: the MGS's coordinator answers lctl's
// mdt.FS-MDT0000.hsm_control and hsm.actions: actions queue while
// disabled, purge cancels every one, bad values change nothing.
func TestHSMControlParams(t *testing.T) {
	ec := etcdtest.Start(t, 1)
	reg := params.New()
	m := startMGS(t, ec.Endpoints(), func(c *MGSConfig) { c.Params = reg; c.Auth.Disabled = true; c.Auth.Tokens = nil })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := m.Store().CreateFilesystem(ctx, "hsmfs"); err != nil {
		t.Fatal(err)
	}
	m.RegisterHSMParams("hsmfs")
	get := func(name string) string { t.Helper(); return paramValue(t, reg, name) }
	set := func(name, value string) error {
		_, err := reg.Set(params.SetOptions{}, params.Assignment{Pattern: name, Value: value})
		return err
	}
	if got := get("mdt.hsmfs-MDT0000.hsm_control"); got != "enabled" {
		t.Fatalf("hsm_control %q", got)
	}
	if err := set("mdt.*.hsm_control", "disabled"); err != nil {
		t.Fatal(err)
	}
	hc, err := hsm.NewClient([]string{m.GRPCAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	f := fid.FID{Seq: 0x200000400, Oid: 7}
	for {
		if _, err = hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 1, f); err == nil || ctx.Err() != nil {
			break // the coordinator is elected a moment after the MGS starts
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := get("mdt.hsmfs-MDT0000.hsm.actions"); !strings.Contains(got, "fid=[0x200000400:0x7:0x0] action=ARCHIVE archive#=1 status=WAITING") {
		t.Fatalf("hsm.actions: %q", got)
	}
	if err := set("mdt.*.hsm_control", "sideways"); err == nil || get("mdt.hsmfs-MDT0000.hsm_control") != "disabled" {
		t.Fatalf("bad hsm_control: %v", err)
	}
	if err := set("mdt.hsmfs-MDT0000.hsm_control", "purge"); err != nil {
		t.Fatal(err)
	}
	if got := get("mdt.hsmfs-MDT0000.hsm.actions"); got != "" {
		t.Fatalf("hsm.actions after purge: %q", got)
	}
	if err := set("mdt.hsmfs-MDT0000.hsm_control", "enabled"); err != nil || get("mdt.hsmfs-MDT0000.hsm_control") != "enabled" {
		t.Fatalf("enable: %v", err)
	}
}

// TestHSMParamsOfNewFilesystem: a filesystem that comes into being after
// the MGS started (its first target registers, as on a new cluster) gets
// its mdt.FS-MDT0000.hsm_control and hsm.* on the MGS as well, without a
// restart of the MGS.
func TestHSMParamsOfNewFilesystem(t *testing.T) {
	ec := etcdtest.Start(t, 1)
	reg := params.New()
	m := startMGS(t, ec.Endpoints(), func(c *MGSConfig) { c.Params = reg })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, _, err := m.Store().RegisterTarget(ctx, mgs.Registration{FSName: "newfs", Kind: mgs.KindMDT, NIDs: []string{"192.168.1.5@tcp"}}); err != nil {
		t.Fatal(err)
	}
	for {
		v, err := reg.Get(false, "mdt.newfs-MDT0000.hsm_control")
		if err == nil && len(v) == 1 && v[0].Value == "enabled" {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("hsm_control of a filesystem created after the MGS started: %v %v", v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHSMPersistentParams: lctl set_param -P mdt.*.hsm.max_requests and
// conf_param FS-MDT0000.mdt.hsm_control are the coordinator's, which is
// the MGS's, not the MDS's: the MGS applies them, stored before it
// started and changed while it runs, in a cluster where the MGS and the
// MDS are separate processes (registries).
func TestHSMPersistentParams(t *testing.T) {
	ec := etcdtest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := startMGS(t, ec.Endpoints(), func(c *MGSConfig) { c.Params = params.New() })
	if _, err := m.Store().CreateFilesystem(ctx, "hsmfs"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Store().SetParam(ctx, "hsmfs.MDT0000.mdt.hsm.max_requests", "7"); err != nil {
		t.Fatal(err)
	}
	m.Close(ctx)
	reg := params.New()
	m = startMGS(t, ec.Endpoints(), func(c *MGSConfig) { c.Params = reg })
	wait := func(name, want string) {
		t.Helper()
		for {
			v, err := reg.Get(false, name)
			if err == nil && len(v) == 1 && v[0].Value == want {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: %v %v; want %s", name, v, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait("mdt.hsmfs-MDT0000.hsm.max_requests", "7")
	if _, err := m.Store().SetParam(ctx, "*.MDT*.mdt.hsm_control", "disabled"); err != nil {
		t.Fatal(err)
	}
	wait("mdt.hsmfs-MDT0000.hsm_control", "disabled")
}
