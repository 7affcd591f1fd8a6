package mgs

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/nacrefs/nacre/internal/errs"
	"github.com/nacrefs/nacre/internal/etcdserver/etcdtest"
)

type fixture struct {
	s   *Store
	cli *clientv3.Client
}

func newStore(t *testing.T, mod ...func(*Config)) fixture { return newFixture(t, mod...) }

func newBenchStore(b *testing.B) fixture { return newFixture(b) }

func newFixture(t testing.TB, mod ...func(*Config)) fixture {
	t.Helper()
	c := etcdtest.Start(t, 1)
	cli := c.Client()
	cfg := DefaultConfig()
	cfg.Client = cli
	cfg.Prefix = "/test/" + t.Name() + "/"
	cfg.RequestTimeout = 3 * time.Second
	for _, m := range mod {
		m(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return fixture{s: s, cli: cli}
}

// snapshot is every key and value under the store's prefix.
func (f fixture) snapshot(t *testing.T) map[string]string {
	t.Helper()
	resp, err := f.cli.Get(context.Background(), f.s.prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m[string(kv.Key)] = string(kv.Value)
	}
	return m
}

func (f fixture) unchanged(t *testing.T, before map[string]string) {
	t.Helper()
	after := f.snapshot(t)
	if len(after) != len(before) {
		t.Fatalf("etcd changed: %d keys before, %d after", len(before), len(after))
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("etcd key %s changed: %q -> %q", k, v, after[k])
		}
	}
}

func wantKind(t *testing.T, err error, k errs.Kind) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", k)
	}
	if got := errs.KindOf(err); got != k {
		t.Fatalf("got %v (%v), want %v", got, err, k)
	}
}

func u32(v uint32) *uint32 { return &v }

func ost(fs string, idx *uint32, nid string) Registration {
	return Registration{FSName: fs, Kind: KindOST, Index: idx, NIDs: []string{nid}, Path: "/srv/ost"}
}

func TestFilesystems(t *testing.T) {
	f := newStore(t)
	ctx := context.Background()
	fs, err := f.s.CreateFilesystem(ctx, "lustre1")
	if err != nil {
		t.Fatal(err)
	}
	if fs.UUID == "" || fs.CreateTime.IsZero() || fs.Revision == 0 {
		t.Fatalf("incomplete filesystem %+v", fs)
	}
	if _, err := f.s.CreateFilesystem(ctx, "a_b-9"); err != nil {
		t.Fatal(err)
	}
	_, err = f.s.CreateFilesystem(ctx, "lustre1")
	wantKind(t, err, errs.Exist)
	got, err := f.s.GetFilesystem(ctx, "lustre1")
	if err != nil || got.UUID != fs.UUID {
		t.Fatalf("get = %+v, %v; want uuid %s", got, err, fs.UUID)
	}
	list, err := f.s.ListFilesystems(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "a_b-9" || list[1].Name != "lustre1" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	_, err = f.s.GetFilesystem(ctx, "nope")
	wantKind(t, err, errs.NotExist)

	before := f.snapshot(t)
	for _, bad := range []string{"", "toolongfs", "a.b", "a/b", "a b", "fs\x00", "dé"} {
		_, err := f.s.CreateFilesystem(ctx, bad)
		wantKind(t, err, errs.Invalid)
	}
	f.unchanged(t, before)
}

func TestRegisterTarget(t *testing.T) {
	f := newStore(t)
	ctx := context.Background()

	// Auto-assigned indexes start at 0 and fill holes; the filesystem is created.
	var got []uint32
	for i := 0; i < 3; i++ {
		tg, lease, cfg, err := f.s.RegisterTarget(ctx, ost("fs1", nil, "192.168.1.5@tcp"))
		if err != nil {
			t.Fatal(err)
		}
		if lease.ID == 0 || !tg.Up || tg.UUID == "" {
			t.Fatalf("registration %+v lease %+v", tg, lease)
		}
		if cfg.Filesystem.Name != "fs1" || len(cfg.Targets) != i+1 {
			t.Fatalf("config after %d registrations has %d targets", i+1, len(cfg.Targets))
		}
		got = append(got, tg.Index)
	}
	if fmt.Sprint(got) != "[0 1 2]" {
		t.Fatalf("indexes %v, want [0 1 2]", got)
	}
	seven, _, _, err := f.s.RegisterTarget(ctx, ost("fs1", u32(7), "10.0.0.1@tcp1"))
	if err != nil || seven.Index != 7 || seven.Label() != "fs1-OST0007" {
		t.Fatalf("explicit index: %+v %v", seven, err)
	}
	mdt, _, _, err := f.s.RegisterTarget(ctx, Registration{FSName: "fs1", Kind: KindMDT, NIDs: []string{"0@lo"}})
	if err != nil || mdt.Index != 0 {
		t.Fatalf("mdt: %+v %v", mdt, err)
	}

	// Re-registration with the same uuid keeps the index and takes a new lease.
	again, lease2, _, err := f.s.RegisterTarget(ctx, Registration{FSName: "fs1", Kind: KindOST, NIDs: []string{"192.168.1.6@tcp"}, UUID: seven.UUID})
	if err != nil || again.Index != 7 || again.NIDs[0] != "192.168.1.6@tcp" {
		t.Fatalf("re-register: %+v %v", again, err)
	}
	if _, err := f.s.Heartbeat(ctx, "fs1", KindOST, 7, lease2.ID); err != nil {
		t.Fatalf("heartbeat on new lease: %v", err)
	}

	// A failover pair's target: registered from the partner, it keeps the
	// server it left as a failover NID (the partner's identity lists only
	// the others, mkfs --failnode), and back on the first server it keeps
	// the partner.
	pair, _, _, err := f.s.RegisterTarget(ctx, Registration{FSName: "fs1", Kind: KindOST, Index: u32(8), NIDs: []string{"10.0.0.1@tcp"}, FailoverNIDs: []string{"10.0.0.2@tcp"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the partner registers again (a lost lease, a restart): the server it left stays
		moved, _, _, err := f.s.RegisterTarget(ctx, Registration{FSName: "fs1", Kind: KindOST, NIDs: []string{"10.0.0.2@tcp"}, UUID: pair.UUID})
		if err != nil || !slices.Equal(moved.NIDs, []string{"10.0.0.2@tcp"}) || !slices.Equal(moved.FailoverNIDs, []string{"10.0.0.1@tcp"}) {
			t.Fatalf("registered from the partner (%d): NIDs %v failover %v (%v), want [10.0.0.2@tcp] [10.0.0.1@tcp]", i+1, moved.NIDs, moved.FailoverNIDs, err)
		}
	}
	back, _, _, err := f.s.RegisterTarget(ctx, Registration{FSName: "fs1", Kind: KindOST, NIDs: []string{"10.0.0.1@tcp"}, FailoverNIDs: []string{"10.0.0.2@tcp"}, UUID: pair.UUID})
	if err != nil || !slices.Equal(back.FailoverNIDs, []string{"10.0.0.2@tcp"}) {
		t.Fatalf("back on the first server: failover %v (%v), want [10.0.0.2@tcp]", back.FailoverNIDs, err)
	}
	// Its failover nodes erased (tunefs --erase-params): none are kept.
	alone, _, _, err := f.s.RegisterTarget(ctx, Registration{FSName: "fs1", Kind: KindOST, NIDs: []string{"10.0.0.1@tcp"}, UUID: pair.UUID})
	if err != nil || len(alone.FailoverNIDs) != 0 {
		t.Fatalf("without failover nodes: failover %v (%v), want none", alone.FailoverNIDs, err)
	}

	before := f.snapshot(t)
	cases := []struct {
		name string
		r    Registration
		kind errs.Kind
	}{
		{"index taken", ost("fs1", u32(7), "1.2.3.4@tcp"), errs.Exist},
		{"uuid under other index", Registration{FSName: "fs1", Kind: KindOST, Index: u32(9), NIDs: []string{"1.2.3.4@tcp"}, UUID: seven.UUID}, errs.Exist},
		{"index out of range", ost("fs1", u32(MaxIndex+1), "1.2.3.4@tcp"), errs.Invalid},
		{"mgt index", Registration{FSName: "fs1", Kind: KindMGT, Index: u32(1), NIDs: []string{"0@lo"}}, errs.Invalid},
		{"bad fsname", ost("bad.name", nil, "1.2.3.4@tcp"), errs.Invalid},
		{"long fsname", ost("ninechars", nil, "1.2.3.4@tcp"), errs.Invalid},
		{"no nids", Registration{FSName: "fs1", Kind: KindOST}, errs.Invalid},
		{"bad nid", ost("fs1", nil, "1.2.3.4"), errs.Invalid},
		{"bad nid net", ost("fs1", nil, "1.2.3.4@ethernet"), errs.Invalid},
		{"too many nids", Registration{FSName: "fs1", Kind: KindOST, NIDs: manyNIDs(MaxTargetNIDs + 1)}, errs.Invalid},
		{"too many failover nids", Registration{FSName: "fs1", Kind: KindOST, NIDs: []string{"0@lo"}, FailoverNIDs: manyNIDs(MaxTargetNIDs + 1)}, errs.Invalid},
		{"bad kind", Registration{FSName: "fs1", Kind: 9, NIDs: []string{"0@lo"}}, errs.Invalid},
		{"bad uuid", Registration{FSName: "fs1", Kind: KindOST, NIDs: []string{"0@lo"}, UUID: "not-a-uuid"}, errs.Invalid},
		// The admin API and the gateway put the status address in URLs
		// (http://ADDR/nacre/v1/params, with the token): only HOST:PORT.
		{"status addr with a path", Registration{FSName: "fs1", Kind: KindOST, NIDs: []string{"0@lo"}, StatusAddr: "10.0.0.9/v3/kv/put#:2379"}, errs.Invalid},
		{"status addr with a query", Registration{FSName: "fs1", Kind: KindOST, NIDs: []string{"0@lo"}, StatusAddr: "10.0.0.9?:80"}, errs.Invalid},
		{"status addr with userinfo", Registration{FSName: "fs1", Kind: KindOST, NIDs: []string{"0@lo"}, StatusAddr: "u@10.0.0.9:80"}, errs.Invalid},
		{"status addr port not a number", Registration{FSName: "fs1", Kind: KindOST, NIDs: []string{"0@lo"}, StatusAddr: "10.0.0.9:http"}, errs.Invalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := f.s.RegisterTarget(ctx, tc.r)
			wantKind(t, err, tc.kind)
		})
	}
	f.unchanged(t, before)

	tg, err := f.s.GetTarget(ctx, "fs1", "fs1-OST0007")
	if err != nil || tg.UUID != seven.UUID {
		t.Fatalf("GetTarget by label: %+v %v", tg, err)
	}
	_, err = f.s.GetTarget(ctx, "fs1", "OST0005")
	wantKind(t, err, errs.NotExist)
	_, err = f.s.GetTarget(ctx, "fs1", "other-OST0001")
	wantKind(t, err, errs.Invalid)
	_, err = f.s.GetTarget(ctx, "fs1", "XYZ0001")
	wantKind(t, err, errs.Invalid)
}

func TestLiveness(t *testing.T) {
	f := newStore(t, func(c *Config) { c.LeaseTTL = 2 * time.Second })
	ctx := context.Background()
	kept, keptLease, _, err := f.s.RegisterTarget(ctx, ost("fs1", nil, "0@lo"))
	if err != nil {
		t.Fatal(err)
	}
	dead, deadLease, _, err := f.s.RegisterTarget(ctx, ost("fs1", nil, "0@lo"))
	if err != nil {
		t.Fatal(err)
	}
	// Heartbeat one for three TTLs; let the other lapse.
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := f.s.Heartbeat(ctx, "fs1", KindOST, kept.Index, keptLease.ID); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	ts, err := f.s.ListTargets(ctx, "fs1")
	if err != nil {
		t.Fatal(err)
	}
	up := map[uint32]bool{}
	for _, tg := range ts {
		up[tg.Index] = tg.Up
	}
	if !up[kept.Index] || up[dead.Index] {
		t.Fatalf("liveness after 6s: %v (want %d up, %d down)", up, kept.Index, dead.Index)
	}
	_, err = f.s.Heartbeat(ctx, "fs1", KindOST, dead.Index, deadLease.ID)
	wantKind(t, err, errs.NotExist)
	// Another server's lease can't renew a target it doesn't hold.
	_, err = f.s.Heartbeat(ctx, "fs1", KindOST, kept.Index, deadLease.ID)
	wantKind(t, err, errs.NotExist)
}

func TestParams(t *testing.T) {
	f := newStore(t)
	ctx := context.Background()
	if _, err := f.s.CreateFilesystem(ctx, "fs1"); err != nil {
		t.Fatal(err)
	}
	good := []struct{ name, value, want string }{
		{"fs1.OST0000.osc.max_dirty_mb", "512", "512"},
		{"fs1.OST*.osc.checksums", "true", "1"},
		{"*.MDT0000.mdt.hsm_control", "enabled", "enabled"},
		{"fs1.client.llite.max_read_ahead_mb", " 64", "64"},
		{"fs1.sys.timeout", "200", "200"},
		{"fs1.*.ost.nrs_policies", "tbf jobid", "tbf jobid"},
		{"fs1.client.jobid_var", "SLURM_JOB_ID", "SLURM_JOB_ID"},
	}
	for _, g := range good {
		p, err := f.s.SetParam(ctx, g.name, g.value)
		if err != nil || p.Value != g.want {
			t.Fatalf("set %s=%q: %+v %v", g.name, g.value, p, err)
		}
		p, err = f.s.GetParam(ctx, g.name)
		if err != nil || p.Value != g.want {
			t.Fatalf("get %s: %+v %v", g.name, p, err)
		}
	}
	list, err := f.s.ListParams(ctx, "fs1.OST*")
	if err != nil || len(list) != 2 {
		t.Fatalf("list fs1.OST*: %+v %v", list, err)
	}
	cfg, err := f.s.GetConfig(ctx, "fs1")
	if err != nil || len(cfg.Params) != len(good) {
		t.Fatalf("config params %d, want %d (%v)", len(cfg.Params), len(good), err)
	}
	// A target spelled otherwise than targets name themselves (hex case,
	// padding) is stored as they do: else no target would ever match it.
	for _, spelled := range []string{"fs1.OSTa.osc.max_dirty_mb", "fs1.OST000A.osc.max_dirty_mb", "fs1.OST00000a.osc.max_dirty_mb"} {
		p, err := f.s.SetParam(ctx, spelled, "256")
		if err != nil || p.Name != "fs1.OST000a.osc.max_dirty_mb" {
			t.Fatalf("set %s: stored as %q (%v), want fs1.OST000a.osc.max_dirty_mb", spelled, p.Name, err)
		}
		if p, err := f.s.GetParam(ctx, spelled); err != nil || p.Value != "256" {
			t.Fatalf("get %s: %+v %v", spelled, p, err)
		}
	}
	if err := f.s.DeleteParam(ctx, "fs1.OST000A.osc.max_dirty_mb"); err != nil {
		t.Fatal(err)
	}
	// One stored as spelled before that can still be deleted.
	legacy := "fs1.OSTb.osc.max_dirty_mb"
	if _, err := f.s.cli.Put(ctx, f.s.paramKey(legacy), "1"); err != nil {
		t.Fatal(err)
	}
	if err := f.s.DeleteParam(ctx, legacy); err != nil {
		t.Fatalf("delete %s stored as spelled: %v", legacy, err)
	}
	if resp, err := f.s.cli.Get(ctx, f.s.paramKey(legacy)); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("%s after its delete: %v %v", legacy, resp, err)
	}

	before := f.snapshot(t)
	bad := []struct {
		name, value string
		kind        errs.Kind
	}{
		{"fs1.OST0000.osc.max_dirty_bytes", "1", errs.Invalid},  // unknown
		{"fs1.OST0000.osc.max_dirty_mb", "lots", errs.Invalid},  // type
		{"fs1.OST0000.osc.max_dirty_mb", "0", errs.Invalid},     // range
		{"fs1.OST0000.osc.max_dirty_mb", "99999", errs.Invalid}, // range
		{"fs1.OST0000.osc.checksums", "maybe", errs.Invalid},    // bool
		{"fs1.MDT0000.osc.max_dirty_mb", "1", errs.Invalid},     // wrong scope
		{"fs1.OSTxyz.osc.max_dirty_mb", "1", errs.Invalid},      // bad target
		{"fs1.OST0000.sys.timeout", "1", errs.Invalid},          // unknown as osc param
		{"fs1.client.timeout", "1", errs.Invalid},               // sys param on client
		{"fs1.MDT0000.mdt.hsm_control", "on", errs.Invalid},     // enum
		{"fs1.client.jobid_var", "a b", errs.Invalid},           // string pattern
		{"fs1", "1", errs.Invalid},                              // not three parts
		{"fs1.sys", "1", errs.Invalid},                          // not three parts
		{".sys.timeout", "1", errs.Invalid},                     // empty fs
		{"fs[.sys.timeout", "1", errs.Invalid},                  // bad glob
		{"toolongname.sys.timeout", "1", errs.Invalid},          // fsname
		{"nofs.sys.timeout", "100", errs.NotExist},              // fs missing
		{"fs1.OST10000.osc.max_dirty_mb", "1", errs.Invalid},    // index too big
	}
	for _, b := range bad {
		_, err := f.s.SetParam(ctx, b.name, b.value)
		if errs.KindOf(err) != b.kind {
			t.Errorf("set %s=%q: got %v (%v), want %v", b.name, b.value, errs.KindOf(err), err, b.kind)
		}
	}
	f.unchanged(t, before)

	if err := f.s.DeleteParam(ctx, "fs1.sys.timeout"); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.s.DeleteParam(ctx, "fs1.sys.timeout"), errs.NotExist)
	_, err = f.s.GetParam(ctx, "fs1.sys.timeout")
	wantKind(t, err, errs.NotExist)
}

func TestPools(t *testing.T) {
	f := newStore(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, _, _, err := f.s.RegisterTarget(ctx, ost("fs1", nil, "0@lo")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.s.CreatePool(ctx, "fs1", "flash"); err != nil {
		t.Fatal(err)
	}
	_, err := f.s.CreatePool(ctx, "fs1", "flash")
	wantKind(t, err, errs.Exist)
	_, err = f.s.CreatePool(ctx, "nofs", "flash")
	wantKind(t, err, errs.NotExist)
	_, err = f.s.CreatePool(ctx, "fs1", "waytoolongpoolname")
	wantKind(t, err, errs.Invalid)

	p, err := f.s.AddToPool(ctx, "fs1", "flash", []uint32{2, 0})
	if err != nil || fmt.Sprint(p.OSTs) != "[0 2]" {
		t.Fatalf("add: %+v %v", p, err)
	}
	before := f.snapshot(t)
	_, err = f.s.AddToPool(ctx, "fs1", "flash", []uint32{1, 9})
	wantKind(t, err, errs.NotExist) // OST9 unknown: nothing added, not even OST1
	_, err = f.s.AddToPool(ctx, "fs1", "flash", []uint32{1, 2})
	wantKind(t, err, errs.Exist)
	_, err = f.s.AddToPool(ctx, "fs1", "nopool", []uint32{1})
	wantKind(t, err, errs.NotExist)
	wantKind(t, f.s.DestroyPool(ctx, "fs1", "flash"), errs.NotEmpty)
	f.unchanged(t, before)

	if p, err = f.s.RemoveFromPool(ctx, "fs1", "flash", []uint32{0, 2}); err != nil || len(p.OSTs) != 0 {
		t.Fatalf("remove: %+v %v", p, err)
	}
	if err := f.s.DestroyPool(ctx, "fs1", "flash"); err != nil {
		t.Fatal(err)
	}
	pools, err := f.s.ListPools(ctx, "fs1")
	if err != nil || len(pools) != 0 {
		t.Fatalf("pools after destroy: %+v %v", pools, err)
	}
}

func TestWatchOrderResumeCompaction(t *testing.T) {
	f := newStore(t, func(c *Config) { c.LeaseTTL = 2 * time.Second })
	ctx := context.Background()
	if _, err := f.s.CreateFilesystem(ctx, "fs1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.CreateFilesystem(ctx, "fs2"); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.s.GetConfig(ctx, "fs1")
	if err != nil {
		t.Fatal(err)
	}

	events := make(chan Event, 64)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- f.s.Watch(wctx, "fs1", cfg.Revision+1, func(e Event) error { events <- e; return nil })
	}()
	next := func() Event {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10s")
			return Event{}
		}
	}

	tg, _, _, err := f.s.RegisterTarget(ctx, ost("fs1", nil, "0@lo"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.SetParam(ctx, "fs2.sys.timeout", "50"); err != nil { // other fs: not seen
		t.Fatal(err)
	}
	if _, err := f.s.SetParam(ctx, "*.sys.timeout", "60"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.CreatePool(ctx, "fs1", "p1"); err != nil {
		t.Fatal(err)
	}
	e1 := next()
	if e1.Target == nil || e1.Target.Index != tg.Index || e1.Type != EventPut {
		t.Fatalf("first event %+v, want target put", e1)
	}
	e2 := next()
	if e2.Liveness == nil || !e2.Liveness.Up || e2.Revision != e1.Revision {
		t.Fatalf("second event %+v, want liveness up in the same revision", e2)
	}
	e3 := next()
	if e3.Param == nil || e3.Param.Name != "*.sys.timeout" || e3.Param.Value != "60" {
		t.Fatalf("third event %+v, want the *.sys.timeout param", e3)
	}
	e4 := next()
	if e4.Pool == nil || e4.Pool.Name != "p1" || e4.Revision <= e3.Revision {
		t.Fatalf("fourth event %+v, want pool p1 after revision %d", e4, e3.Revision)
	}
	// The lease lapses (no heartbeat): the watch says the target went down.
	e5 := next()
	if e5.Liveness == nil || e5.Liveness.Up || e5.Type != EventDelete {
		t.Fatalf("fifth event %+v, want liveness down", e5)
	}
	stop()
	<-done

	// Changes made while nobody watches are delivered on resume, once each.
	if _, err := f.s.AddToPool(ctx, "fs1", "p1", []uint32{tg.Index}); err != nil {
		t.Fatal(err)
	}
	if err := f.s.DeleteParam(ctx, "*.sys.timeout"); err != nil {
		t.Fatal(err)
	}
	wctx, stop = context.WithCancel(ctx)
	go func() {
		done <- f.s.Watch(wctx, "fs1", e5.Revision+1, func(e Event) error { events <- e; return nil })
	}()
	r1, r2 := next(), next()
	if r1.Pool == nil || len(r1.Pool.OSTs) != 1 || r2.Param == nil || r2.Type != EventDelete {
		t.Fatalf("resumed events %+v %+v", r1, r2)
	}
	select {
	case e := <-events:
		t.Fatalf("unexpected extra event %+v", e)
	case <-time.After(300 * time.Millisecond):
	}
	stop()
	<-done

	// History before a compaction is gone: the watcher is told to start over.
	if _, err := f.cli.Compact(ctx, r2.Revision); err != nil {
		t.Fatal(err)
	}
	err = f.s.Watch(ctx, "fs1", cfg.Revision+1, func(Event) error { return nil })
	wantKind(t, err, errs.Compacted)
}

// Fifty registrants and param setters at once: no index given twice, exactly
// one winner for a contested explicit index, no lost pool or param update.
func TestConcurrentRegistration(t *testing.T) {
	f := newStore(t)
	ctx := context.Background()
	if _, err := f.s.CreateFilesystem(ctx, "fs1"); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := f.s.RegisterTarget(ctx, ost("fs1", u32(500), "0@lo"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.CreatePool(ctx, "fs1", "all"); err != nil {
		t.Fatal(err)
	}
	const n = 50
	type result struct {
		idx      uint32
		err      error
		explicit bool
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Go(func() {
			var r Registration
			explicit := i%5 == 0 // ten goroutines fight over index 100
			if explicit {
				r = ost("fs1", u32(100), fmt.Sprintf("10.0.0.%d@tcp", i+1))
			} else {
				r = ost("fs1", nil, fmt.Sprintf("10.0.0.%d@tcp", i+1))
			}
			tg, _, _, err := f.s.RegisterTarget(ctx, r)
			results[i] = result{idx: tg.Index, err: err, explicit: explicit}
			if err != nil {
				return
			}
			if _, err := f.s.AddToPool(ctx, "fs1", "all", []uint32{tg.Index}); err != nil {
				results[i].err = err
				return
			}
			if _, err := f.s.SetParam(ctx, fmt.Sprintf("fs1.%s.osc.max_rpcs_in_flight", tg.Name()), fmt.Sprint(i+1)); err != nil {
				results[i].err = err
			}
		})
	}
	wg.Wait()

	winners := 0
	seen := map[uint32]bool{}
	for i, r := range results {
		if r.explicit {
			if r.err == nil {
				winners++
			} else if !errs.Is(r.err, errs.Exist) {
				t.Fatalf("goroutine %d: %v, want Exist for a lost race", i, r.err)
			}
		} else if r.err != nil {
			t.Fatalf("goroutine %d: %v", i, r.err)
		}
		if r.err == nil {
			if seen[r.idx] {
				t.Fatalf("index %d given twice", r.idx)
			}
			seen[r.idx] = true
		}
	}
	if winners != 1 {
		t.Fatalf("%d winners for index 100, want 1", winners)
	}
	ts, err := f.s.ListTargets(ctx, "fs1")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1+40+1 {
		t.Fatalf("%d targets registered, want 42", len(ts))
	}
	pools, err := f.s.ListPools(ctx, "fs1")
	if err != nil || len(pools) != 1 || len(pools[0].OSTs) != 41 {
		t.Fatalf("pool has %d OSTs, want 41 (%v)", len(pools[0].OSTs), err)
	}
	params, err := f.s.ListParams(ctx, "fs1.OST*.osc.max_rpcs_in_flight")
	if err != nil || len(params) != 41 {
		t.Fatalf("%d params, want 41 (%v)", len(params), err)
	}
	for i, r := range results {
		if r.err != nil {
			continue
		}
		p, err := f.s.GetParam(ctx, fmt.Sprintf("fs1.%s.osc.max_rpcs_in_flight", TargetName(KindOST, r.idx)))
		if err != nil || p.Value != fmt.Sprint(i+1) {
			t.Fatalf("param of goroutine %d: %+v %v", i, p, err)
		}
	}
}

// manyNIDs returns n distinct NIDs.
func manyNIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.1.%d.%d@tcp", i/250, i%250+1)
	}
	return out
}

// TestUUIDUnderOneIndex: two first registrations of one UUID under two
// indexes, at once: one wins, the other is told the UUID is taken. The
// check was a read before the transaction, which guarded only the index's
// key: both won, and the target could never register again (its UUID was
// always found under the other index).
func TestUUIDUnderOneIndex(t *testing.T) {
	f := newStore(t)
	ctx := context.Background()
	if _, err := f.s.CreateFilesystem(ctx, "fs1"); err != nil {
		t.Fatal(err)
	}
	for round := range 20 {
		id := uuid.NewString()
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				_, _, _, errs[i] = f.s.RegisterTarget(ctx, Registration{FSName: "fs1", Kind: KindOST,
					Index: u32(uint32(100 + 2*round + i)), NIDs: []string{"10.0.0.1@tcp"}, UUID: id})
			})
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: two registrations of one UUID under two indexes: %v, %v; want one refused", round, errs[0], errs[1])
		}
	}
}
