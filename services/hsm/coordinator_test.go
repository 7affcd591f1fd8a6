package hsm_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/fid"
	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
	"github.com/nacrefs/nacre/services/hsm"
	"github.com/nacrefs/nacre/services/hsm/hsmtest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// sizedHandler is a copytool that moves no data: it reports a file of
// Oid*1000 bytes copied, and fails the files of odd Oid with EIO.
type sizedHandler struct{}

func (sizedHandler) Handle(ctx context.Context, a *hsmv1.Action, progress func(done, total uint64)) (string, error) {
	n := uint64(a.Fid.Oid) * 1000
	progress(n, n)
	if a.Fid.Oid%2 == 1 {
		return "", fmt.Errorf("sized handler: odd FID %v: %w", hsm.FIDFrom(a.Fid), syscall.EIO)
	}
	return "sum", nil
}

func runAgent(t *testing.T, addrs []string, uuid string, archives ...uint32) {
	t.Helper()
	runAgentWith(t, addrs, uuid, sizedHandler{}, archives...)
}

// runAgentWith is runAgent with handler h.
func runAgentWith(t *testing.T, addrs []string, uuid string, h hsm.Handler, archives ...uint32) {
	t.Helper()
	hc, err := hsm.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		hsm.RunAgent(ctx, hsm.AgentConfig{Client: hc, UUID: uuid, ArchiveIDs: archives, MaxRequests: 2, Handler: h, Logger: clustertest.Quiet})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		hc.Close()
	})
}

func statsOf(t *testing.T, ctx context.Context, hc *hsm.Client, archive uint32) *hsmv1.ArchiveStats {
	t.Helper()
	sts, err := hc.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.ArchiveId == archive {
			st.ArchiveId = 0 // compared without it
			return st
		}
	}
	return &hsmv1.ArchiveStats{}
}

func wantStats(t *testing.T, what string, got, want *hsmv1.ArchiveStats) {
	t.Helper()
	if got.String() != want.String() {
		t.Fatalf("%s: statistics\n got %v\nwant %v", what, got, want)
	}
}

// TestCoordinatorQueue: the queue filters and pages its actions, counts
// per-archive statistics that survive a failover and the pruning of
// finished actions, cancels one action by id, takes FIDs as Lustre
// prints them, refuses bad requests clearly, and deletes finished actions
// once they are older than grace_delay (never an active one), without
// ever giving an id twice.
func TestCoordinatorQueue(t *testing.T) {
	coords, addrs := hsmtest.StartCoordinators(t, 2, 20*time.Second)
	for _, co := range coords {
		if got := co.C.GraceDelay(); got != hsm.DefaultGraceDelay {
			t.Fatalf("default grace delay %v", got)
		}
	}
	hc, err := hsm.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runAgent(t, addrs, "agent-1", 1)

	// Archive 1: FIDs 1..6, half fail; given as structs and as names.
	var fids []fid.FID
	for oid := uint32(1); oid <= 6; oid++ {
		fids = append(fids, fid.FID{Seq: 0x200000400, Oid: oid})
	}
	q := &hsmv1.SubmitRequest{Kind: hsmv1.ActionKind_ACTION_KIND_ARCHIVE, ArchiveId: 1}
	for _, f := range fids[:3] {
		q.Fids = append(q.Fids, hsm.FIDTo(f))
	}
	for _, f := range fids[3:] {
		q.FidNames = append(q.FidNames, f.String())
	}
	ids, err := hc.SubmitRequest(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 6 {
		t.Fatalf("ids %v", ids)
	}
	for i, id := range ids {
		a, err := hc.Action(ctx, id)
		if err != nil || hsm.FIDFrom(a.Fid) != fids[i] {
			t.Fatalf("action %d: %v, want FID %v (%v)", id, a, fids[i], err)
		}
		err = hc.Wait(ctx, id)
		if (i%2 == 0) != (err != nil) { // odd Oids fail
			t.Fatalf("action %d (oid %d): %v", id, fids[i].Oid, err)
		}
	}
	done := &hsmv1.ArchiveStats{Succeeded: 3, Failed: 3, BytesArchived: (2 + 4 + 6) * 1000}
	wantStats(t, "after archive", statsOf(t, ctx, hc, 1), done)

	// Archive 2 has no agent: its actions wait.
	var waiting []uint64
	for oid := uint32(10); oid < 17; oid++ {
		ids, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 2, fid.FID{Seq: 0x200000400, Oid: oid})
		if err != nil {
			t.Fatal(err)
		}
		waiting = append(waiting, ids[0])
	}
	wantStats(t, "archive 2 waiting", statsOf(t, ctx, hc, 2), &hsmv1.ArchiveStats{Waiting: 7})

	// Filters and pages.
	list := func(q *hsmv1.ListActionsRequest) []uint64 {
		t.Helper()
		as, err := hc.ListActions(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, a := range as {
			out = append(out, a.Id)
		}
		return out
	}
	all := list(&hsmv1.ListActionsRequest{})
	if want := append(slices.Clone(ids), waiting...); !slices.Equal(all, want) {
		t.Fatalf("all actions %v, want %v", all, want)
	}
	if got := list(&hsmv1.ListActionsRequest{States: []hsmv1.ActionState{hsmv1.ActionState_ACTION_STATE_WAITING}}); !slices.Equal(got, waiting) {
		t.Fatalf("waiting actions %v, want %v", got, waiting)
	}
	if got := list(&hsmv1.ListActionsRequest{ArchiveId: 1, States: []hsmv1.ActionState{hsmv1.ActionState_ACTION_STATE_FAILED}}); !slices.Equal(got, []uint64{ids[0], ids[2], ids[4]}) {
		t.Fatalf("failed actions of archive 1 %v", got)
	}
	if got := list(&hsmv1.ListActionsRequest{Kind: hsmv1.ActionKind_ACTION_KIND_RESTORE}); len(got) != 0 {
		t.Fatalf("restores %v", got)
	}
	cc := hsmv1.NewCoordinatorClient(dial(t, coords))
	var paged []uint64
	var pages int
	for tok := ""; ; pages++ {
		rep, err := cc.ListActions(ctx, &hsmv1.ListActionsRequest{PageSize: 4, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Actions) > 4 {
			t.Fatalf("page of %d actions, asked 4", len(rep.Actions))
		}
		for _, a := range rep.Actions {
			paged = append(paged, a.Id)
		}
		if tok = rep.NextPageToken; tok == "" {
			break
		}
	}
	if !slices.Equal(paged, all) || pages != 3 {
		t.Fatalf("paged %v in %d pages, want %v in 4", paged, pages+1, all)
	}

	// Bad requests: clear errors, nothing queued.
	for _, bad := range []struct {
		what string
		err  error
	}{
		{"page token", func() error {
			_, err := cc.ListActions(ctx, &hsmv1.ListActionsRequest{PageToken: "zz"})
			return err
		}()},
		{"page size", func() error { _, err := cc.ListActions(ctx, &hsmv1.ListActionsRequest{PageSize: -1}); return err }()},
		{"state", func() error {
			_, err := cc.ListActions(ctx, &hsmv1.ListActionsRequest{States: []hsmv1.ActionState{42}})
			return err
		}()},
		{"FID", func() error {
			_, err := cc.Submit(ctx, &hsmv1.SubmitRequest{Kind: hsmv1.ActionKind_ACTION_KIND_ARCHIVE, ArchiveId: 1, FidNames: []string{"[0x1:zz]"}})
			return err
		}()},
		{"archive id", func() error {
			_, err := cc.Submit(ctx, &hsmv1.SubmitRequest{Kind: hsmv1.ActionKind_ACTION_KIND_ARCHIVE, ArchiveId: 1 << 20, FidNames: []string{"[0x200000400:0x1:0x0]"}})
			return err
		}()},
	} {
		if status.Code(bad.err) != codes.InvalidArgument {
			t.Errorf("bad %s: %v, want INVALID_ARGUMENT", bad.what, bad.err)
		}
	}
	if _, err := cc.CancelAction(ctx, &hsmv1.CancelActionRequest{Id: 99999}); status.Code(err) != codes.NotFound {
		t.Errorf("cancel of an unknown action: %v", err)
	}
	if got := list(&hsmv1.ListActionsRequest{}); !slices.Equal(got, all) {
		t.Fatalf("bad requests changed the queue: %v", got)
	}

	// Cancel one action by id; cancelling a finished one changes nothing.
	a, err := cc.CancelAction(ctx, &hsmv1.CancelActionRequest{Id: waiting[0]})
	if err != nil || a.State != hsmv1.ActionState_ACTION_STATE_CANCELED {
		t.Fatalf("cancel %d: %v %v", waiting[0], a, err)
	}
	if a, err := cc.CancelAction(ctx, &hsmv1.CancelActionRequest{Id: ids[1]}); err != nil || a.State != hsmv1.ActionState_ACTION_STATE_SUCCEED {
		t.Fatalf("cancel of a finished action: %v %v", a, err)
	}
	wantStats(t, "after cancel", statsOf(t, ctx, hc, 2), &hsmv1.ArchiveStats{Waiting: 6, Canceled: 1})

	// Pruning: finished actions go after the grace delay, active ones stay.
	var leader *hsmtest.Coord
	for _, co := range coords {
		if co.C.Leader() {
			leader = co
		}
	}
	if err := leader.C.SetGraceDelay(-time.Second); err == nil {
		t.Fatal("negative grace delay accepted")
	}
	if err := leader.C.SetGraceDelay(time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		got := list(&hsmv1.ListActionsRequest{})
		if slices.Equal(got, waiting[1:]) {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("finished actions not pruned after %v: %v", time.Since(start), got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if time.Since(start) < 500*time.Millisecond {
		t.Errorf("pruned after %v, before the grace delay", time.Since(start))
	}
	if _, err := hc.Action(ctx, ids[0]); status.Code(err) != codes.NotFound {
		t.Fatalf("pruned action: %v, want NOT_FOUND", err)
	}
	wantStats(t, "archive 1 after pruning", statsOf(t, ctx, hc, 1), done)

	// A failover: the new leader finds what etcd holds — the waiting
	// actions, the statistics — and gives no id twice.
	leader.Stop()
	got := list(&hsmv1.ListActionsRequest{}) // retries until the standby leads
	if !slices.Equal(got, waiting[1:]) {
		t.Fatalf("after failover: %v, want %v", got, waiting[1:])
	}
	wantStats(t, "archive 1 after failover", statsOf(t, ctx, hc, 1), done)
	wantStats(t, "archive 2 after failover", statsOf(t, ctx, hc, 2), &hsmv1.ArchiveStats{Waiting: 6, Canceled: 1})
	nids, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_REMOVE, 1, fids[0])
	if err != nil {
		t.Fatal(err)
	}
	if nids[0] <= waiting[len(waiting)-1] {
		t.Fatalf("new action id %d after failover: ids up to %d were given", nids[0], waiting[len(waiting)-1])
	}
}

// dial connects to the active one of coords.
func dial(t *testing.T, coords []*hsmtest.Coord) *grpc.ClientConn {
	t.Helper()
	for _, co := range coords {
		if co.C.Leader() {
			cc, err := grpc.NewClient(co.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cc.Close() })
			return cc
		}
	}
	t.Fatal("no active coordinator")
	return nil
}

// busyHandler counts the actions it runs at once, in all and per file.
type busyHandler struct {
	mu                sync.Mutex
	now, most         int
	fileNow, fileMost map[fid.FID]int
}

func newBusyHandler() *busyHandler {
	return &busyHandler{fileNow: map[fid.FID]int{}, fileMost: map[fid.FID]int{}}
}

func (h *busyHandler) Handle(ctx context.Context, a *hsmv1.Action, progress func(done, total uint64)) (string, error) {
	f := hsm.FIDFrom(a.Fid)
	h.mu.Lock()
	h.now++
	h.most = max(h.most, h.now)
	h.fileNow[f]++
	h.fileMost[f] = max(h.fileMost[f], h.fileNow[f])
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.now--
		h.fileNow[f]--
		h.mu.Unlock()
	}()
	select {
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
	}
	progress(1, 1)
	return "", nil
}

// mostAtOnce returns the most actions it ran at once, in all and of f.
func (h *busyHandler) mostAtOnce(f fid.FID) (all, ofFile int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.most, h.fileMost[f]
}

// TestCoordinatorMaxRequests: mdt.*.hsm.max_requests, changed at run time,
// is what an agent that names no limit of its own is given at once.
func TestCoordinatorMaxRequests(t *testing.T) {
	coords, addrs := hsmtest.StartCoordinators(t, 1, 20*time.Second)
	c := coords[0].C
	if err := c.SetActiveRequestTimeout(90 * time.Second); err != nil || c.ActiveRequestTimeout() != 90*time.Second {
		t.Fatalf("active_request_timeout after setting 90s: %v (%v)", c.ActiveRequestTimeout(), err)
	}
	for _, bad := range []int{0, -1, 65537} {
		if err := c.SetMaxRequests(bad); err == nil {
			t.Fatalf("SetMaxRequests(%d) accepted", bad)
		}
	}
	if err := c.SetActiveRequestTimeout(0); err == nil {
		t.Fatal("SetActiveRequestTimeout(0) accepted")
	}
	if err := c.SetMaxRequests(1); err != nil {
		t.Fatal(err)
	}
	hc, err := hsm.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := newBusyHandler()
	agentCtx, stopAgent := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		hsm.RunAgent(agentCtx, hsm.AgentConfig{Client: hc, UUID: "one-at-a-time", ArchiveIDs: []uint32{1}, Handler: h, Logger: clustertest.Quiet})
	}()
	defer func() { stopAgent(); <-done }()
	var ids []uint64
	for oid := uint32(1); oid <= 4; oid++ {
		got, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 1, fid.FID{Seq: 0x200000400, Oid: oid})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	for _, id := range ids {
		if err := hc.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if m, _ := h.mostAtOnce(fid.FID{}); m != 1 {
		t.Fatalf("max_requests=1: the agent ran %d actions at once", m)
	}
}

// TestCoordinatorOneActionPerFile: actions on one file are not run at
// once, even of different kinds and with agents free: a remove of the
// archive copy running beside an archive of the file could delete the
// copy the archive then records as current (the file released next has
// no data left), a release beside a remove the same.
func TestCoordinatorOneActionPerFile(t *testing.T) {
	_, addrs := hsmtest.StartCoordinators(t, 1, 20*time.Second)
	hc, err := hsm.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := newBusyHandler()
	for _, uuid := range []string{"agent-1", "agent-2"} {
		agentCtx, stopAgent := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			hsm.RunAgent(agentCtx, hsm.AgentConfig{Client: hc, UUID: uuid, MaxRequests: 4, Handler: h, Logger: clustertest.Quiet})
		}()
		defer func() { stopAgent(); <-done }()
	}
	a, b := fid.FID{Seq: 0x200000400, Oid: 1}, fid.FID{Seq: 0x200000400, Oid: 2}
	var ids []uint64
	for _, k := range []hsmv1.ActionKind{hsmv1.ActionKind_ACTION_KIND_ARCHIVE, hsmv1.ActionKind_ACTION_KIND_REMOVE, hsmv1.ActionKind_ACTION_KIND_RELEASE} {
		got, err := hc.Submit(ctx, k, 1, a, b)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	for _, id := range ids {
		if err := hc.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []fid.FID{a, b} {
		if _, m := h.mostAtOnce(f); m != 1 {
			t.Errorf("%v: %d actions ran at once", f, m)
		}
	}
}

// stuckHandler reports progress once, then hangs until canceled.
type stuckHandler struct{}

func (stuckHandler) Handle(ctx context.Context, a *hsmv1.Action, progress func(done, total uint64)) (string, error) {
	progress(1, 10)
	<-ctx.Done()
	return "", ctx.Err()
}

// TestCoordinatorActiveTimeoutSetAtRunTime: active_request_timeout set at
// run time holds for actions heard of since, not the configured one: an
// agent that reported progress then hung is given up on within it.
func TestCoordinatorActiveTimeoutSetAtRunTime(t *testing.T) {
	coords, addrs := hsmtest.StartCoordinators(t, 1, time.Hour)
	if err := coords[0].C.SetActiveRequestTimeout(time.Second); err != nil {
		t.Fatal(err)
	}
	hc, err := hsm.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	agentCtx, stopAgent := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		hsm.RunAgent(agentCtx, hsm.AgentConfig{Client: hc, UUID: "stuck", Handler: stuckHandler{}, Logger: clustertest.Quiet})
	}()
	defer func() { stopAgent(); <-done }()
	ids, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 1, fid.FID{Seq: 0x200000400, Oid: 1})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		a, err := hc.Action(ctx, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if a.Attempts >= 2 || a.State == hsmv1.ActionState_ACTION_STATE_FAILED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a hung action not given up on 10s after it started, timeout 1s: %v", a)
		}
	}
}

// startWithClient starts n coordinators (as StartCoordinators) and a
// client of theirs, closed at the test's end.
func startWithClient(t *testing.T, n int, timeout time.Duration) ([]*hsmtest.Coord, []string, *hsm.Client) {
	t.Helper()
	coords, addrs := hsmtest.StartCoordinators(t, n, timeout)
	hc, err := hsm.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Close() })
	return coords, addrs, hc
}

// TestAgentsFollowLeaderChange: a coordinator that loses its etcd session
// steps down and ends its agents' sessions, idle ones too; they register
// again with the coordinator that leads next (here the same one, elected
// again), which can then hand them work.
func TestAgentsFollowLeaderChange(t *testing.T) {
	coords, addrs, hc := startWithClient(t, 1, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runAgent(t, addrs, "idle-agent", 1)
	registered := func() bool {
		ags, err := hc.Agents(ctx)
		return err == nil && len(ags) == 1 && ags[0].Uuid == "idle-agent"
	}
	waitUntil(t, ctx, "the agent registered", registered)
	// The leader's session lapses (etcd lost it): every lease revoked.
	leases, err := coords[0].Etcd.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Leases {
		if _, err := coords[0].Etcd.Revoke(ctx, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, ctx, "the coordinator stepped down", func() bool {
		_, err := hc.Agents(ctx)
		return status.Code(err) == codes.Unavailable || !registered()
	})
	waitUntil(t, ctx, "the agent registered with the new leader", registered)
	ids, err := hc.SubmitRequest(ctx, &hsmv1.SubmitRequest{Kind: hsmv1.ActionKind_ACTION_KIND_ARCHIVE, ArchiveId: 1,
		Fids: []*hsmv1.FID{hsm.FIDTo(fid.FID{Seq: 0x200000400, Oid: 2})}})
	if err != nil {
		t.Fatal(err)
	}
	if err := hc.Wait(ctx, ids[0]); err != nil {
		t.Fatalf("an archive after the leader change: %v", err)
	}
}

func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hangOnce hangs its first action until it is canceled, and does the
// others at once.
type hangOnce struct {
	mu    sync.Mutex
	calls int
}

func (h *hangOnce) Handle(ctx context.Context, a *hsmv1.Action, progress func(done, total uint64)) (string, error) {
	h.mu.Lock()
	h.calls++
	first := h.calls == 1
	h.mu.Unlock()
	if first {
		<-ctx.Done()
		return "", ctx.Err()
	}
	return "sum", nil
}

// TestTimedOutActionRetriedOnSameAgent: an action that times out on the
// only agent is tried again there once its canceled attempt ends, and
// that attempt's report of the cancel does not fail the new one.
func TestTimedOutActionRetriedOnSameAgent(t *testing.T) {
	_, addrs, hc := startWithClient(t, 1, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := &hangOnce{}
	runAgentWith(t, addrs, "only", h, 1)
	ids, err := hc.SubmitRequest(ctx, &hsmv1.SubmitRequest{Kind: hsmv1.ActionKind_ACTION_KIND_ARCHIVE, ArchiveId: 1,
		Fids: []*hsmv1.FID{hsm.FIDTo(fid.FID{Seq: 0x200000400, Oid: 8})}})
	if err != nil {
		t.Fatal(err)
	}
	if err := hc.Wait(ctx, ids[0]); err != nil {
		a, _ := hc.Action(ctx, ids[0])
		t.Fatalf("the action after its first attempt timed out: %v (%v)", err, a)
	}
	a, err := hc.Action(ctx, ids[0])
	h.mu.Lock()
	calls := h.calls
	h.mu.Unlock()
	if err != nil || a.Attempts != 2 || calls != 2 {
		t.Fatalf("action %v, %v; handler ran %d times: want 2 attempts, 2 runs", a, err, calls)
	}
}

// heldFirst holds its first action until release (whatever its context
// says: a copytool slow to notice the cancel), does the others at once,
// and counts the actions it runs at once.
type heldFirst struct {
	started, release chan struct{}
	mu               sync.Mutex
	calls, running   int
	most             int
}

func (h *heldFirst) Handle(ctx context.Context, a *hsmv1.Action, progress func(done, total uint64)) (string, error) {
	h.mu.Lock()
	h.calls++
	h.running++
	h.most = max(h.most, h.running)
	first := h.calls == 1
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.running--
		h.mu.Unlock()
	}()
	if first {
		close(h.started)
		<-h.release
		return "", ctx.Err()
	}
	return "sum", nil
}

// TestCanceledAttemptHoldsItsFile: a canceled action's file takes no other
// action until the agent has ended the canceled attempt, which may still
// write the archive: a remove canceled after it told the MDT could delete
// the copy a new archive made, or an archive canceled late rename a stale
// copy over the current one. The action was CANCELED at once, and the
// file free for the next.
func TestCanceledAttemptHoldsItsFile(t *testing.T) {
	_, addrs, hc := startWithClient(t, 1, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := &heldFirst{started: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(h.release) }) }
	defer release()
	runAgentWith(t, addrs, "only", h, 1)
	f := fid.FID{Seq: 0x200000400, Oid: 12}
	if _, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 1, f); err != nil {
		t.Fatal(err)
	}
	<-h.started
	if _, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_CANCEL, 1, f); err != nil {
		t.Fatal(err)
	}
	ids, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 1, f)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // dispatch had its chances
	if a, err := hc.Action(ctx, ids[0]); err != nil || a.State != hsmv1.ActionState_ACTION_STATE_WAITING {
		t.Fatalf("the next action on the file while the canceled one still runs: %v %v, want WAITING", a, err)
	}
	release()
	if err := hc.Wait(ctx, ids[0]); err != nil {
		t.Fatalf("the next action once the canceled attempt ended: %v", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.most != 1 || h.calls != 2 {
		t.Fatalf("the agent ran %d actions, %d at once: want 2, one at a time", h.calls, h.most)
	}
}

// TestRefusedDoneSentAgain: a completion the coordinator refused for now
// (EAGAIN: it could not save it) is reported again while the session
// lasts. It was sent again only after a reconnect, so the action stayed
// STARTED, its file busy, until its timeout.
func TestRefusedDoneSentAgain(t *testing.T) {
	_, addrs, hc := startWithClient(t, 1, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var refused atomic.Int32
	hsm.SetTestHookSaveFinished(func(a *hsmv1.Action) error {
		if a.State == hsmv1.ActionState_ACTION_STATE_SUCCEED && refused.Add(1) == 1 {
			return errors.New("etcd out of reach")
		}
		return nil
	})
	t.Cleanup(func() { hsm.SetTestHookSaveFinished(nil) })
	runAgent(t, addrs, "only", 1)
	ids, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 1, fid.FID{Seq: 0x200000400, Oid: 14})
	if err != nil {
		t.Fatal(err)
	}
	if err := hc.Wait(ctx, ids[0]); err != nil {
		a, _ := hc.Action(ctx, ids[0])
		t.Fatalf("the action whose first report was refused: %v (%v)", err, a)
	}
	if n := refused.Load(); n < 2 {
		t.Fatalf("the completion was saved %d times, want the refused one and the next", n)
	}
}
