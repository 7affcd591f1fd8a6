package ptlrpc

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	ptlrpcv1 "github.com/nacrefs/nacre/proto/nacre/ptlrpc/v1"
)

// TestRecoveryWindow: a target that restarts with changes behind it
// (LastTransno) opens its recovery window then; a client that reconnects
// with the handle of its previous life in it is taken back and counted,
// one that connects afresh is not. A new target has no window.
func TestRecoveryWindow(t *testing.T) {
	ts := NewTargetSet()
	fresh, err := ts.NewTarget(TargetConfig{Name: "nacre-MDT0001", RecoveryWindow: time.Minute, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close(context.Background())
	if fresh.Recovering() || !fresh.RecoveryStart().IsZero() || !fresh.RecoveryEnd().IsZero() {
		t.Fatalf("a new target: recovering %v, window %v-%v", fresh.Recovering(), fresh.RecoveryStart(), fresh.RecoveryEnd())
	}
	before := time.Now()
	tgt, err := ts.NewTarget(TargetConfig{Name: "nacre-MDT0000", LastTransno: 7, RecoveryWindow: time.Minute, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close(context.Background())
	if start, end := tgt.RecoveryStart(), tgt.RecoveryEnd(); !tgt.Recovering() || start.Before(before) || start.After(time.Now()) || end.Sub(start) != time.Minute {
		t.Fatalf("a restarted target: recovering %v, window %v-%v", tgt.Recovering(), start, end)
	}
	for _, c := range []struct {
		uuid   string
		handle uint64
	}{{"back", 0x1234}, {"new", 0}} {
		body, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: "nacre-MDT0000", ClientUuid: c.uuid, Version: wire.Version, ConnCount: 2, Handle: c.handle})
		rep, status := ts.connect(&Request{Body: body})
		var cr ptlrpcv1.ConnectReply
		if status != 0 || proto.Unmarshal(rep, &cr) != nil {
			t.Fatalf("%s: connect status %d", c.uuid, status)
		}
		if cr.Reconnected != (c.handle != 0) {
			t.Errorf("%s: reconnected %v", c.uuid, cr.Reconnected)
		}
	}
	if n := tgt.RecoveredClients(); n != 1 {
		t.Errorf("%d clients taken back, want 1", n)
	}
	// An administrator ends it (abort_recovery), the clients unknown: the
	// one taken back has not said it is done replaying, and is evicted.
	if n := tgt.EndRecovery(); n != 1 || tgt.Recovering() {
		t.Fatalf("EndRecovery: %d evicted, recovering %v", n, tgt.Recovering())
	}
	tgt.mu.Lock()
	_, kept := tgt.exports["back"]
	tgt.mu.Unlock()
	if kept {
		t.Error("the client still replaying keeps its export after EndRecovery")
	}
	select {
	case <-tgt.RecoveryDone():
	default:
		t.Error("EndRecovery left RecoveryDone open")
	}
}

// TestRecoveryEndsWhenClientsAreBack: a target that knows its previous
// life's clients ends recovery once each is back — reconnected and done
// replaying, or tried to connect afresh — not when the window runs out; with
// none, at once. EndRecovery ends it early and forgets the clients that
// did not come back.
func TestRecoveryEndsWhenClientsAreBack(t *testing.T) {
	ts := NewTargetSet()
	connectStatus := func(name, uuid string, handle uint64) int32 {
		body, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: name, ClientUuid: uuid, Version: wire.Version, ConnCount: 2, Handle: handle})
		_, status := ts.connect(&Request{Body: body})
		return status
	}
	connect := func(name, uuid string, handle uint64) {
		t.Helper()
		if status := connectStatus(name, uuid, handle); status != 0 {
			t.Fatalf("%s: connect status %d", uuid, status)
		}
	}
	done := func(tgt *Target) bool {
		select {
		case <-tgt.RecoveryDone():
			return true
		default:
			return false
		}
	}

	none, err := ts.NewTarget(TargetConfig{Name: "t0", LastTransno: 1, RecoveryWindow: time.Minute, Clients: []string{}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close(context.Background())
	if none.Recovering() || !done(none) {
		t.Fatalf("no clients to wait for: recovering %v", none.Recovering())
	}

	var added, gone []string
	tgt, err := ts.NewTarget(TargetConfig{Name: "t1", LastTransno: 1, RecoveryWindow: time.Minute, Clients: []string{"a", "b"}, Logger: quiet,
		OnNewClient:  func(u string) error { added = append(added, u); return nil },
		OnClientGone: func(u string) { gone = append(gone, u) }})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close(context.Background())
	connect("t1", "a", 0x11) // back, with replays to come
	// Back without its handle: nothing to replay, but nothing new either
	// before a has replayed.
	if status := connectStatus("t1", "b", 0); status != -errnoEBUSY {
		t.Fatalf("b, back without its handle in recovery: connect status %d, want -EBUSY", status)
	}
	if !tgt.Recovering() || done(tgt) {
		t.Fatal("recovery ended before a said it had replayed")
	}
	if w, of := tgt.RecoveryWaiting(); w != 1 || of != 2 {
		t.Errorf("waiting for %d of %d clients, want 1 of 2", w, of)
	}
	tgt.clientBack("a") // as its request with MsgReqReplayDone|MsgLockReplayDone does
	if tgt.Recovering() || !done(tgt) {
		t.Fatal("recovery goes on with every client back")
	}
	if w, of := tgt.RecoveryWaiting(); w != -1 || of != -1 {
		t.Errorf("after recovery: waiting for %d of %d", w, of)
	}
	if d := tgt.RecoveryEnd().Sub(tgt.RecoveryStart()); d >= time.Minute {
		t.Errorf("recovery took its whole window (%v)", d)
	}
	connect("t1", "b", 0) // and in after it
	if len(added) != 2 || len(gone) != 0 {
		t.Errorf("recorded %v, forgot %v", added, gone)
	}

	gone = nil
	late, err := ts.NewTarget(TargetConfig{Name: "t2", LastTransno: 1, RecoveryWindow: time.Minute, Clients: []string{"a", "c"}, Logger: quiet,
		OnClientGone: func(u string) { gone = append(gone, u) }})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close(context.Background())
	connect("t2", "a", 0x21)
	late.clientBack("a")
	if !late.Recovering() {
		t.Fatal("recovery ended without c")
	}
	if n := late.EndRecovery(); n != 1 || len(gone) != 1 || gone[0] != "c" || late.Recovering() || !done(late) || late.RecoveryEvicted() != 1 {
		t.Fatalf("EndRecovery: %d absent (%d counted), forgot %v, recovering %v", n, late.RecoveryEvicted(), gone, late.Recovering())
	}
	if n := late.EndRecovery(); n != 0 {
		t.Errorf("a second EndRecovery found %d absent", n)
	}
}

// TestRecoveryDoesNotWaitForAnEvictedClient: a client of the previous
// life that reconnected and then lost its export in recovery (evicted,
// or it disconnected) has nothing left to replay: recovery ends once the
// others are back, not when its window runs out.
func TestRecoveryDoesNotWaitForAnEvictedClient(t *testing.T) {
	ts := NewTargetSet()
	tgt, err := ts.NewTarget(TargetConfig{Name: "t3", LastTransno: 1, RecoveryWindow: time.Minute, Clients: []string{"a", "b"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close(context.Background())
	for _, c := range []struct {
		uuid   string
		handle uint64
	}{{"a", 0x31}, {"b", 0x32}} {
		body, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: "t3", ClientUuid: c.uuid, Version: wire.Version, ConnCount: 2, Handle: c.handle})
		if _, status := ts.connect(&Request{Body: body}); status != 0 {
			t.Fatalf("%s: connect status %d", c.uuid, status)
		}
	}
	if err := tgt.Evict("a"); err != nil {
		t.Fatal(err)
	}
	tgt.clientBack("b")
	if tgt.Recovering() {
		t.Fatal("recovery still waits for a client it evicted")
	}
}

// recoveryEnv is a service with one target, which a test restarts, and
// clients with uuids of their own; its handler of opInc logs who asked
// and whether it was a replay.
type recoveryEnv struct {
	env
	ts  *TargetSet
	svc *Service
	tgt *Target
	mu  sync.Mutex
	log []string // "uuid" or "uuid replay", in the order handled
}

// newRecoveryEnv starts the service, its config changed by mod if not nil.
func newRecoveryEnv(t *testing.T, mod func(*ServiceConfig)) *recoveryEnv {
	re := &recoveryEnv{env: sockEnv(t), ts: NewTargetSet()}
	// A target restarted before, with no window: the transnos go on from
	// 100, none committed.
	tgt, err := re.ts.NewTarget(TargetConfig{Name: "nacre-MDT0000", LastTransno: 100, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	re.tgt = tgt
	cfg := ServiceConfig{Name: "mdt", RequestPortal: reqPortal, Targets: re.ts, Logger: quiet,
		Handlers: map[wire.Opcode]HandlerSpec{opInc: {Flags: Modifying, Fn: func(_ context.Context, r *Request) ([]byte, int32) {
			entry := r.Export().uuid
			if r.Replayed() {
				entry += " replay"
			}
			re.mu.Lock()
			re.log = append(re.log, entry)
			re.mu.Unlock()
			return nil, 0
		}}}}
	if mod != nil {
		mod(&cfg)
	}
	re.svc, err = NewService(re.srv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := re.svc.Close(ctx); err != nil {
			t.Errorf("service close: %v", err)
		}
		re.tgt.Close(ctx)
	})
	return re
}

// restart replaces the target with its next life, which knows clients.
func (re *recoveryEnv) restart(t *testing.T, window time.Duration, clients ...string) {
	t.Helper()
	re.restartAt(t, 100, window, clients...)
}

// wrapInc has opInc's handler call before(r) first, and what it returns
// (if not nil) once it is done.
func wrapInc(c *ServiceConfig, before func(r *Request) (after func())) {
	inc := c.Handlers[opInc]
	next := inc.Fn
	inc.Fn = func(ctx context.Context, r *Request) ([]byte, int32) {
		if after := before(r); after != nil {
			defer after()
		}
		return next(ctx, r)
	}
	c.Handlers[opInc] = inc
}

// restartAt is restart with the next life's LastTransno; no clients: no
// gate.
func (re *recoveryEnv) restartAt(t *testing.T, last uint64, window time.Duration, clients ...string) {
	t.Helper()
	re.tgt.Close(context.Background())
	tgt, err := re.ts.NewTarget(TargetConfig{Name: "nacre-MDT0000", LastTransno: last, RecoveryWindow: window, Clients: clients, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	re.tgt = tgt
}

// client connects an import of a client called uuid; it does not wait
// for the connection if wait is false.
func (re *recoveryEnv) client(t *testing.T, uuid string, portal uint32, wait bool) *Import {
	t.Helper()
	return re.newImp(t, uuid, portal, wait, nil)
}

// newImp is client with the import's configuration changed by mod if not
// nil.
func (re *recoveryEnv) newImp(t *testing.T, uuid string, portal uint32, wait bool, mod func(*ImportConfig)) *Import {
	t.Helper()
	c := NewClient(re.cli, ClientConfig{ReplyPortal: portal, UUID: uuid, Logger: quiet})
	cfg := ImportConfig{Target: "nacre-MDT0000", Servers: []lwire.ProcessID{re.target}, Portal: reqPortal,
		MinTimeout: 150 * time.Millisecond, InitialTimeout: 100 * time.Millisecond, PingInterval: -1}
	if mod != nil {
		mod(&cfg)
	}
	imp, err := c.NewImport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		imp.Close(ctx)
	})
	if wait {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := imp.Connect(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return imp
}

func (re *recoveryEnv) entries() []string {
	re.mu.Lock()
	defer re.mu.Unlock()
	return slices.Clone(re.log)
}

// waitFor polls until cond holds, failing after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// do runs opInc on imp in the background; the channel gets its error.
func do(imp *Import) <-chan error {
	ch := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := imp.Do(ctx, &Req{Opcode: opInc})
		ch <- err
	}()
	return ch
}

// TestRecoveryHoldsNewWork: a restarted target that knows its clients
// serves nothing new before each of them has replayed. A client done
// replaying gets no answer to its replay-done request until the last one
// is done, so its new request waits meanwhile; a client that was not
// there before is refused (-EBUSY) until then, and connects after. Left
// alone, the new request would take what a replay needs (a name a
// replayed create makes).
func TestRecoveryHoldsNewWork(t *testing.T) {
	re := newRecoveryEnv(t, nil)
	a, b := re.client(t, "a", rplPortal, true), re.client(t, "b", rplPortal+1, true)
	for _, imp := range []*Import{a, b} {
		if err := <-do(imp); err != nil {
			t.Fatal(err)
		}
	}
	if un := append(a.Uncommitted(), b.Uncommitted()...); !slices.Equal(un, []uint64{101, 102}) {
		t.Fatalf("uncommitted %v", un)
	}
	re.restart(t, time.Minute, "a", "b")
	start := time.Now()

	aDone := do(a) // reconnects, replays 101, then waits for b
	waitFor(t, "a's replay", func() bool { return slices.Contains(re.entries(), "a replay") })
	time.Sleep(300 * time.Millisecond) // a few of its timeouts: early replies keep it waiting
	select {
	case err := <-aDone:
		t.Fatalf("a's new request done (%v) before b replayed; handled %q", err, re.entries())
	default:
	}
	// b may still replay a request: a's locks wait (b's 102 before them).
	if st := a.Info().State; st != StateReplayLocks {
		t.Errorf("a's import is %v while it waits for b, want REPLAY_LOCKS", st)
	}
	body, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: "nacre-MDT0000", ClientUuid: "new", Version: wire.Version, ConnCount: 1})
	if _, status := re.ts.connect(&Request{Body: body}); status != -errnoEBUSY {
		t.Fatalf("a new client's connect in recovery: status %d, want -EBUSY", status)
	}
	c := re.client(t, "c", rplPortal+2, false) // retries until recovery ends
	if c.Info().State == StateFull {
		t.Fatal("a new client connected in recovery")
	}

	bDone := do(b)
	for name, ch := range map[string]<-chan error{"a": aDone, "b": bDone} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s's request not done after b replayed; handled %q", name, re.entries())
		}
	}
	if err := <-do(c); err != nil {
		t.Fatalf("the new client after recovery: %v", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("recovery took %v of its minute", d)
	}
	got := re.entries()[2:] // after the first life's
	if want := []string{"a replay", "b replay"}; len(got) != 5 || !slices.Equal(got[:2], want) {
		t.Fatalf("handled %q; want the replays %q first, then a, b and c", got, want)
	}
	if slices.Sort(got[2:]); !slices.Equal(got[2:], []string{"a", "b", "c"}) {
		t.Fatalf("handled after recovery %q", got[2:])
	}
	if st := re.svc.Stats(); st.Ops[wire.OBDPing].Count < 2 {
		t.Errorf("the replay-done requests were not answered: %+v", st.Ops[wire.OBDPing])
	}
}

// TestRecoveryWindowEndAnswersHeld: when the window runs out with a
// client of the previous life still away, the clients held waiting for it
// are answered and go on; the absent one is evicted.
func TestRecoveryWindowEndAnswersHeld(t *testing.T) {
	re := newRecoveryEnv(t, nil)
	a := re.client(t, "a", rplPortal, true)
	if err := <-do(a); err != nil {
		t.Fatal(err)
	}
	const window = 1500 * time.Millisecond
	re.restart(t, window, "a", "gone")
	start := time.Now()
	if err := <-do(a); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < window-100*time.Millisecond {
		t.Errorf("a went on after %v, before the window (%v) ran out without the other client", d, window)
	}
	if got := re.entries(); !slices.Equal(got, []string{"a", "a replay", "a"}) {
		t.Errorf("handled %q", got)
	}
}

// TestCloseWithParked: a service closes (and its buffers come back) with
// a replay-done request held for recovery; the client is not answered.
func TestCloseWithParked(t *testing.T) {
	re := newRecoveryEnv(t, nil)
	a := re.client(t, "a", rplPortal, true)
	if err := <-do(a); err != nil {
		t.Fatal(err)
	}
	re.restart(t, time.Minute, "a", "b")
	aDone := do(a)
	waitFor(t, "a's replay", func() bool { return slices.Contains(re.entries(), "a replay") })
	waitFor(t, "a's replay-done request held", func() bool {
		re.tgt.mu.Lock()
		defer re.tgt.mu.Unlock()
		return len(re.tgt.parked) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := re.svc.Close(ctx); err != nil {
		t.Fatalf("close with a request held: %v", err)
	}
	select {
	case err := <-aDone:
		t.Fatalf("a's request done (%v) though the service closed in recovery", err)
	case <-time.After(200 * time.Millisecond):
	}
	re.svc, _ = NewService(re.srv, ServiceConfig{Name: "mdt2", RequestPortal: reqPortal + 5, Logger: quiet,
		Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: echo}}}) // for the cleanup's Close
}

// TestHeldClientTimesOut: the client waiting in REPLAY_WAIT misses
// the early replies of its parked replay-done ping (lost on the network)
// and times out. It must neither hang for good nor go on with new work
// before recovery has ended.
func TestHeldClientTimesOut(t *testing.T) {
	f := &Faults{}
	re := newRecoveryEnv(t, func(c *ServiceConfig) { c.Faults = f })
	a, b := re.client(t, "a", rplPortal, true), re.client(t, "b", rplPortal+1, true)
	for _, imp := range []*Import{a, b} {
		if err := <-do(imp); err != nil {
			t.Fatal(err)
		}
	}
	re.restart(t, 3*time.Second, "a", "b")
	f.Arm(FailDropEarlyReply, -1)
	aDone := do(a)
	waitFor(t, "a's replay-done request held", func() bool {
		re.tgt.mu.Lock()
		defer re.tgt.mu.Unlock()
		return len(re.tgt.parked) == 1
	})
	// a's ping times out (no early replies); recovery still waits for b.
	time.Sleep(1 * time.Second)
	if !re.tgt.Recovering() {
		t.Fatal("recovery over too soon")
	}
	if slices.Contains(re.entries()[2:], "a") {
		t.Errorf("a's new request handled while recovery waits for b: %q (import %v)", re.entries(), a.State())
	}
	f.Disarm(FailDropEarlyReply)
	// b replays: recovery ends, a must go on.
	if err := <-do(b); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-aDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("a's request still not done after recovery ended; import %v, handled %q", a.State(), re.entries())
	}
}

// TestHeldRequestsKeepNoBuffers: a replay-done request held until
// recovery ends keeps no request buffer. Each one did, until every buffer
// held one and the service received nothing more: the last client of the
// previous life could not replay, recovery ran its whole window and that
// client came back evicted, its replay lost.
func TestHeldRequestsKeepNoBuffers(t *testing.T) {
	re := newRecoveryEnv(t, func(c *ServiceConfig) {
		c.MaxBodySize = 1024
		c.BufferSize = 1 // raised to one request's size: each request fills its buffer
		c.Buffers, c.MaxBuffers = 2, 2
	})
	a, b, c := re.client(t, "a", rplPortal, true), re.client(t, "b", rplPortal+1, true), re.client(t, "c", rplPortal+2, true)
	for _, imp := range []*Import{a, b, c} {
		if err := <-do(imp); err != nil {
			t.Fatal(err)
		}
	}
	const window = 6 * time.Second
	re.restart(t, window, "a", "b", "c")
	start := time.Now()
	aDone, bDone := do(a), do(b)
	waitFor(t, "a's and b's replay-done requests held", func() bool {
		re.tgt.mu.Lock()
		defer re.tgt.mu.Unlock()
		return len(re.tgt.parked) == 2
	})
	if err := <-do(c); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan error{aDone, bDone} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > window/2 {
		t.Errorf("recovery took %v of its %v window", d, window)
	}
	if !slices.Contains(re.entries(), "c replay") {
		t.Errorf("c's replay lost: handled %q", re.entries())
	}
}

// TestPingNow: an idle import (no pings) told to check its connection
// finds the target restarted, reconnects and replays, with no request of
// its own to send.
func TestPingNow(t *testing.T) {
	re := newRecoveryEnv(t, nil)
	a := re.client(t, "a", rplPortal, true)
	if err := <-do(a); err != nil {
		t.Fatal(err)
	}
	re.restart(t, time.Minute, "a")
	time.Sleep(200 * time.Millisecond)
	if slices.Contains(re.entries(), "a replay") {
		t.Fatal("the idle import replayed before it was told to check")
	}
	a.PingNow()
	waitFor(t, "a's replay after PingNow", func() bool { return slices.Contains(re.entries(), "a replay") })
	waitFor(t, "recovery's end", func() bool { return !re.tgt.Recovering() })
}

// TestReplayGoesOnAfterALostConnection: a replay lost on the way (the
// connection failing in the middle of recovery) leaves the rest of the
// replay list to be replayed after the reconnect, each change once; it
// was dropped, the changes not yet replayed lost without a word.
func TestReplayGoesOnAfterALostConnection(t *testing.T) {
	// Armed at the first replay: the next one, the second, is lost.
	_, a := replayLosing(t, FailDropRequest, 1)
	if un := a.Uncommitted(); len(un) != 4 {
		t.Errorf("uncommitted after recovery %v, want the 3 replayed and the new one", un)
	}
}

// replayLosing has client a make three changes, restarts the target and
// has a make a fourth, with fault id armed once as the target handles a's
// replay number at; it checks the fault fired and that each change was
// made once.
func replayLosing(t *testing.T, id FailID, at int) (*recoveryEnv, *Import) {
	t.Helper()
	f := &Faults{}
	var re *recoveryEnv
	replays := 0
	re = newRecoveryEnv(t, func(c *ServiceConfig) {
		c.Faults = f
		wrapInc(c, func(r *Request) (after func()) {
			if r.Replayed() {
				if replays++; replays == at {
					f.Arm(id, 1)
				}
			}
			return nil
		})
	})
	a := re.client(t, "a", rplPortal, true)
	for range 3 {
		if err := <-do(a); err != nil {
			t.Fatal(err)
		}
	}
	re.restart(t, time.Minute, "a")
	if err := <-do(a); err != nil {
		t.Fatal(err)
	}
	if f.Fired(id) != 1 {
		t.Fatalf("the fault fired %d times", f.Fired(id))
	}
	if got, want := re.entries()[3:], []string{"a replay", "a replay", "a replay", "a"}; !slices.Equal(got, want) {
		t.Fatalf("after the restart handled %q, want %q", got, want)
	}
	return re, a
}

// TestRecoveryEvictsClientsNotDone: when the window runs out, a client
// that reconnected but has not finished replaying is evicted (its export
// dropped, its record forgotten), as Lustre evicts stale exports: its
// replays would otherwise go on in among the others' new work. The
// clients held for recovery go on.
func TestRecoveryEvictsClientsNotDone(t *testing.T) {
	re := newRecoveryEnv(t, nil)
	a := re.client(t, "a", rplPortal, true)
	stuck, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b := re.newImp(t, "b", rplPortal+1, true, func(c *ImportConfig) {
		c.OnRecover = func(ctx context.Context, _ *Import) error {
			once.Do(func() { close(stuck) })
			select { // its lock replays, say, slow
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}
	})
	for _, imp := range []*Import{a, b} {
		if err := <-do(imp); err != nil {
			t.Fatal(err)
		}
	}
	const window = time.Second
	re.restart(t, window, "a", "b")
	bDone, aDone := do(b), do(a)
	<-stuck // b reconnected and replayed its request (after a's); not done
	if err := <-aDone; err != nil {
		t.Fatalf("a, held until the window ran out: %v", err)
	}
	re.tgt.mu.Lock()
	_, kept := re.tgt.exports["b"]
	re.tgt.mu.Unlock()
	if kept {
		t.Error("b, not done replaying when the window ran out, keeps its export")
	}
	close(release)
	if err := <-bDone; !errors.Is(err, ErrEvicted) {
		t.Errorf("b's request: %v, want evicted", err)
	}
	got := re.entries()[2:]
	if !slices.Contains(got, "b replay") || !slices.Contains(got, "a") || slices.Contains(got, "b") {
		t.Errorf("after the restart handled %q: want b's replay and a's new request, not b's", got)
	}
}

// TestPingNowCutsReconnectBackoff: an import that saw its target go away
// (a busy client) backs off between connects, up to its ping interval.
// Told by the MGS that the target is back (PingNow), it must connect now,
// not when its backoff runs out: the target's recovery waits for it.
func TestPingNowCutsReconnectBackoff(t *testing.T) {
	re := newRecoveryEnv(t, nil)
	a := re.newImp(t, "a", rplPortal, true, func(c *ImportConfig) { c.PingInterval = 10 * time.Second })
	if err := <-do(a); err != nil {
		t.Fatal(err)
	}
	re.tgt.Close(context.Background()) // down: connects get -ENODEV
	aDone := do(a)                     // sees it, and backs off: 50 ms, 100 ms, ... 3.2 s
	time.Sleep(3500 * time.Millisecond)
	re.restart(t, time.Minute, "a")
	start := time.Now()
	a.PingNow()
	waitFor(t, "recovery's end", func() bool { return !re.tgt.Recovering() })
	if d := time.Since(start); d > time.Second {
		t.Errorf("a reconnected %v after PingNow: it slept out its backoff", d)
	}
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
}

// TestRecoverRefusedDoesNotLoop: an OnRecover the server refuses (its
// answer, the same at every try: a lock replay after the window, say)
// must not have the import reconnect and recover again and again, never
// FULL, its requests hanging: replayDue stayed set after the failure.
func TestRecoverRefusedDoesNotLoop(t *testing.T) {
	re := newRecoveryEnv(t, nil)
	var calls atomic.Int32
	a := re.newImp(t, "a", rplPortal, true, func(c *ImportConfig) {
		c.OnRecover = func(context.Context, *Import) error {
			calls.Add(1)
			return &RemoteError{Status: -22}
		}
	})
	if err := <-do(a); err != nil {
		t.Fatal(err)
	}
	re.restart(t, time.Minute) // knows no clients: no gate
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	if _, err := a.Do(ctx, &Req{Opcode: opInc}); err != nil {
		t.Errorf("a's request after the restart: %v (OnRecover ran %d times, import %v)", err, calls.Load(), a.State())
	}
	if n := calls.Load(); n > 1 {
		t.Errorf("OnRecover ran %d times against one server instance", n)
	}
}

// TestEvictedMidReplayStopsReplaying: a client evicted while it replays
// (recovery's end drops the exports of the clients not done) gets
// -ENOTCONN for its next replay: it must reconnect (and learn it was
// evicted) instead of sending, and logging as refused, every replay left.
func TestEvictedMidReplayStopsReplaying(t *testing.T) {
	var re *recoveryEnv
	re = newRecoveryEnv(t, func(c *ServiceConfig) {
		wrapInc(c, func(r *Request) (after func()) {
			if r.Replayed() && !slices.Contains(re.entries(), "a replay") {
				after = func() { re.tgt.Evict("a") }
			}
			return after
		})
	})
	var evicted atomic.Bool
	a := re.newImp(t, "a", rplPortal, true, func(c *ImportConfig) { c.OnEvict = func(*Import) { evicted.Store(true) } })
	const n = 20
	for range n {
		if err := <-do(a); err != nil {
			t.Fatal(err)
		}
	}
	re.restart(t, time.Minute, "a") // its eviction ends recovery: it is back at once
	before := re.svc.Stats().NotConnected
	err := <-do(a)
	if !errors.Is(err, ErrEvicted) && err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a evicted", evicted.Load)
	if nc := re.svc.Stats().NotConnected - before; nc > 2 {
		t.Errorf("%d requests of the evicted client refused -ENOTCONN: it went on replaying", nc)
	}
}

// TestReplaysRunInTransnoOrder: a restarted target that knows its
// clients runs their replays in transno order, each under its transno of
// the previous life, whichever client comes back first: b's change may
// have needed a's (a file in the directory a made). A later replay waits
// for the clients that may still replay one before it; none comes first.
func TestReplaysRunInTransnoOrder(t *testing.T) {
	re := newRecoveryEnv(t, nil)
	a, b := re.client(t, "a", rplPortal, true), re.client(t, "b", rplPortal+1, true)
	for _, imp := range []*Import{a, b, a} { // a 101, b 102, a 103
		if err := <-do(imp); err != nil {
			t.Fatal(err)
		}
	}
	re.restart(t, time.Minute, "a", "b")
	bDone := do(b) // 102 waits for a, which may replay 101
	waitFor(t, "b's replay queued", func() bool {
		re.tgt.mu.Lock()
		defer re.tgt.mu.Unlock()
		return len(re.tgt.replays) == 1
	})
	time.Sleep(300 * time.Millisecond) // a few of b's timeouts: early replies keep it waiting
	if got := re.entries()[3:]; len(got) != 0 {
		t.Fatalf("handled %q before a came back", got)
	}
	if st := re.tgt.RecoveryStatus(); st.Waiting != 2 || st.ReqReplay != 1 || st.LockReplay != 0 || st.Queued != 1 || st.Replayed != 0 || st.NextTransno != 101 {
		t.Errorf("recovery status with b's replay waiting for a: %+v", st)
	}
	if err := <-do(a); err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	if st := re.tgt.RecoveryStatus(); st.Recovering || st.Replayed != 3 || st.Waiting != -1 {
		t.Errorf("recovery status once over: %+v", st)
	}
	got := re.entries()[3:]
	if want := []string{"a replay", "b replay", "a replay"}; len(got) != 5 || !slices.Equal(got[:3], want) {
		t.Fatalf("handled after the restart %q; want %q, then a and b", got, want)
	}
	// Under their transnos of before, and the new after them.
	if ua, ub := a.Uncommitted(), b.Uncommitted(); !slices.Equal(ua, []uint64{101, 103, 104}) && !slices.Equal(ua, []uint64{101, 103, 105}) ||
		len(ub) != 2 || ub[0] != 102 || ub[1] < 104 {
		t.Errorf("uncommitted: a %v, b %v", ua, ub)
	}
}

// TestRestartDuringRecoveryKeepsChanges: a target that restarts again
// while it recovers, some replays made and committed, others not yet
// come, must have the rest replayed in its next life: none taken for
// committed because the replays before it were. (Replays numbered anew
// took the late client's old transno for one of the new, committed.)
func TestRestartDuringRecoveryKeepsChanges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first string // the client back in the second life
	}{{"early first", "a"}, {"late first", "b"}} {
		t.Run(tc.name, func(t *testing.T) {
			re := newRecoveryEnv(t, nil)
			imps := map[string]*Import{}
			imps["a"], imps["b"] = re.client(t, "a", rplPortal, true), re.client(t, "b", rplPortal+1, true)
			for _, c := range []string{"a", "b"} { // a 101, b 102
				if err := <-do(imps[c]); err != nil {
					t.Fatal(err)
				}
			}
			re.restart(t, time.Minute, "a", "b")
			first := do(imps[tc.first])
			if tc.first == "a" {
				waitFor(t, "a's replay", func() bool { return slices.Contains(re.entries(), "a replay") })
			} else {
				waitFor(t, "b's replay queued", func() bool {
					re.tgt.mu.Lock()
					defer re.tgt.mu.Unlock()
					return len(re.tgt.replays) == 1
				})
			}
			// What the second life made is committed (the store's last
			// transno the third life starts from), and it goes.
			last := re.tgt.LastTransno()
			re.tgt.Committed(last)
			re.restartAt(t, last, time.Minute, "a", "b")
			second := do(imps[map[string]string{"a": "b", "b": "a"}[tc.first]])
			for _, ch := range []<-chan error{first, second} {
				if err := <-ch; err != nil {
					t.Fatal(err)
				}
			}
			got := re.entries()[2:]
			var replays []string
			for _, e := range got {
				if strings.HasSuffix(e, " replay") {
					replays = append(replays, e)
				}
			}
			// a's 101 once (in the second life, or the third if b came
			// first), b's 102 once: in the third life.
			if !slices.Equal(replays, []string{"a replay", "b replay"}) {
				t.Fatalf("handled after the first restart %q: want a's replay, then b's, once each", got)
			}
		})
	}
}

// TestCommittedCappedOnlyForReplayers: the last_committed held back while
// a target recovers is only that of clients still replaying; another
// client (a new one, at a target that does not gate recovery) learns what
// is committed as ever, or its syncs would wait for the window's end.
func TestCommittedCappedOnlyForReplayers(t *testing.T) {
	re := newRecoveryEnv(t, nil)
	re.tgt.Close(context.Background())
	tgt, err := re.ts.NewTarget(TargetConfig{Name: "nacre-MDT0000", LastTransno: 100, RecoveryWindow: time.Minute, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	re.tgt = tgt
	c := re.client(t, "c", rplPortal, true)
	if err := <-do(c); err != nil {
		t.Fatal(err)
	}
	tgt.Committed(tgt.LastTransno())
	if err := <-do(c); err != nil {
		t.Fatal(err)
	}
	if !tgt.Recovering() || c.Info().LastCommitted != 101 {
		t.Fatalf("recovering %v; a new client heard last_committed %d, want past the previous life's 100", tgt.Recovering(), c.Info().LastCommitted)
	}
}

// TestWindowEndLiftsCapMidReplay: at a target that does not know its
// clients (no gate), a client still replaying when the window runs out
// is evicted. It was not, and its replies' last_committed was no longer
// held back: once the new life committed past its next (old-numbered)
// change, a reconnect mid-replay (the connect's last_committed) had it
// drop that change unreplayed, and it was told nothing.
func TestWindowEndLiftsCapMidReplay(t *testing.T) {
	var re *recoveryEnv
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	faults := &Faults{}
	re = newRecoveryEnv(t, func(c *ServiceConfig) {
		c.Faults = faults
		wrapInc(c, func(r *Request) (after func()) {
			if r.Replayed() && r.Export().uuid == "a" {
				once.Do(func() {
					close(entered)
					<-release
					faults.Arm(FailDropReply, 1) // a loses its connection mid-replay
				})
			}
			return after
		})
	})
	var evicted atomic.Bool
	a := re.newImp(t, "a", rplPortal, true, func(c *ImportConfig) { c.OnEvict = func(*Import) { evicted.Store(true) } })
	for range 2 { // 101, 102
		if err := <-do(a); err != nil {
			t.Fatal(err)
		}
	}
	re.restartAt(t, 100, 500*time.Millisecond) // no gate
	aDone := do(a)
	<-entered // a replays 101, slowly
	c := re.client(t, "c", rplPortal+1, true)
	for range 2 { // new work: 101, 102
		if err := <-do(c); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the window's end", func() bool { return !re.tgt.Recovering() })
	re.tgt.Committed(re.tgt.LastTransno())
	close(release)
	err := <-aDone
	n := 0
	for _, e := range re.entries() {
		if e == "a replay" {
			n++
		}
	}
	if n != 2 && !evicted.Load() && !errors.Is(err, ErrEvicted) {
		t.Errorf("a replayed %d of its 2 changes and was not evicted (err %v): handled %q", n, err, re.entries())
	}
}

// TestReplayWithLostReplyRunsOnce: a replay whose reply is lost with the
// connection goes again after the reconnect under its XID, marked resent:
// the server, which made the change, answers from the reply it kept, and
// the change is made once. (Sent afresh, it was made twice.)
func TestReplayWithLostReplyRunsOnce(t *testing.T) {
	re, _ := replayLosing(t, FailDropReply, 2) // the second replay made, its reply lost
	if st := re.svc.Stats(); st.Reconstructed != 1 {
		t.Errorf("%d replies reconstructed, want the lost one's", st.Reconstructed)
	}
}

// TestResentReplayAfterExportDropped: at a target that does not know its
// clients (no gate), a client taken back whose export then goes mid-replay
// (evicted, its saved replies with it) while the reply to a replay it made
// is lost must not be taken back again as recovering: its replay, resent
// under its XID, finds no saved reply in the fresh export and is made a
// second time.
func TestResentReplayAfterExportDropped(t *testing.T) {
	f := &Faults{}
	var re *recoveryEnv
	re = newRecoveryEnv(t, func(c *ServiceConfig) {
		c.Faults = f
		wrapInc(c, func(r *Request) (after func()) {
			if r.Replayed() && slices.Contains(re.entries(), "a replay") && f.Fired(FailDropReply) == 0 {
				f.Arm(FailDropReply, 1)              // the second replay made, its reply lost
				after = func() { re.tgt.Evict("a") } // and its export (saved replies) gone
			}
			return after
		})
	})
	a := re.client(t, "a", rplPortal, true)
	for range 3 {
		if err := <-do(a); err != nil {
			t.Fatal(err)
		}
	}
	re.restartAt(t, 100, time.Minute) // no gate
	<-do(a)
	n := 0
	for _, e := range re.entries()[3:] {
		if e == "a replay" {
			n++
		}
	}
	if n > 3 {
		t.Fatalf("%d replays of 3 changes: handled %q", n, re.entries())
	}
}

// TestCloseWaitsForRunningReplay: a service closing while a replay run in
// its transno's turn is being handled waits for the handler, as it waits
// for its workers': the layer above closes its store after the service.
// It did not (the replay runs on the target's goroutine, not a worker's).
func TestCloseWaitsForRunningReplay(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	re := newRecoveryEnv(t, func(c *ServiceConfig) {
		wrapInc(c, func(r *Request) (after func()) {
			if r.Replayed() {
				once.Do(func() { close(entered) })
				<-release
			}
			return nil
		})
	})
	a := re.client(t, "a", rplPortal, true)
	if err := <-do(a); err != nil {
		t.Fatal(err)
	}
	re.restart(t, time.Minute, "a")
	do(a)
	<-entered
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closed <- re.svc.Close(ctx)
	}()
	select {
	case err := <-closed:
		t.Errorf("the service closed (%v) with a replay's handler running", err)
		closed <- err
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	re.svc, _ = NewService(re.srv, ServiceConfig{Name: "mdt2", RequestPortal: reqPortal + 5, Logger: quiet,
		Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: echo}}}) // for the cleanup's Close
}

// TestNoReplayRunsAfterRecoveryEnds: the window ends (after its one
// extension) with a replay running and another client's queued behind an
// absent client's turn: the queued one is of a client recovery evicts,
// and must not run. It did when recovery's end, waiting for no one any
// more, let it go before it dropped that client: its change went in among
// the new work, under a transno the new work may have taken already.
func TestNoReplayRunsAfterRecoveryEnds(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	re := newRecoveryEnv(t, func(c *ServiceConfig) {
		wrapInc(c, func(r *Request) (after func()) {
			if r.Replayed() && r.Export().uuid == "a" {
				once.Do(func() { close(entered) })
				<-release
			}
			return nil
		})
	})
	a, c, b := re.client(t, "a", rplPortal, true), re.client(t, "c", rplPortal+1, true), re.client(t, "b", rplPortal+2, true)
	for _, imp := range []*Import{a, c, b} { // a 101, c 102, b 103
		if err := <-do(imp); err != nil {
			t.Fatal(err)
		}
	}
	re.tgt.Close(context.Background())
	var tgt *Target
	forgotten := make(chan struct{})
	tgt, err := re.ts.NewTarget(TargetConfig{Name: "nacre-MDT0000", LastTransno: 100, RecoveryWindow: time.Second,
		Clients: []string{"a", "b", "c"}, Logger: quiet,
		OnClientGone: func(uuid string) {
			if uuid != "c" {
				return
			}
			// Recovery is over (c, absent, is forgotten before those not
			// done are evicted): a's replay ends now; b's must not follow.
			close(release)
			for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
				tgt.mu.Lock()
				running := tgt.replayRunning
				tgt.mu.Unlock()
				if !running {
					break
				}
			}
			close(forgotten)
		}})
	if err != nil {
		t.Fatal(err)
	}
	re.tgt = tgt
	// As after its extensions: the hard limit is near, and the window's
	// end ends recovery.
	tgt.recoverStart.Store(time.Now().Add(-recoveryHard * time.Second).UnixNano())
	do(a) // 101 runs, slowly
	<-entered
	do(b) // 103 waits for c, which may replay 102
	waitFor(t, "b's replay queued", func() bool {
		tgt.mu.Lock()
		defer tgt.mu.Unlock()
		return len(tgt.replays) == 1
	})
	<-forgotten
	waitFor(t, "recovery's end", func() bool {
		tgt.mu.Lock()
		defer tgt.mu.Unlock()
		return tgt.exports["b"] == nil
	})
	if got := re.entries()[3:]; slices.Contains(got, "b replay") {
		t.Errorf("b's replay ran after recovery ended: handled %q", got)
	}
}

// TestClientGivenUpAsItReconnectsIsEvicted: the window's end gives up on
// the clients not back (extendRecovery) just as one of them reconnects, its
// connect past the check that took it for a client recovery waits for.
// It must not be kept as recovering: recovery waits for it no more, so
// its replays would run out of their turn (after later ones), or after
// request replay is over, renumbered.
func TestClientGivenUpAsItReconnectsIsEvicted(t *testing.T) {
	ts := NewTargetSet()
	tgt, err := ts.NewTarget(TargetConfig{Name: "t4", LastTransno: 1, RecoveryWindow: time.Minute, Clients: []string{"a", "c"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close(context.Background())
	connect := func(uuid string, handle uint64) int32 {
		body, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: "t4", ClientUuid: uuid, Version: wire.Version, ConnCount: 2, Handle: handle})
		_, status := ts.connect(&Request{Body: body})
		return status
	}
	if status := connect("a", 0x41); status != 0 { // back, replaying
		t.Fatalf("a: connect status %d", status)
	}
	// The client records are busy (another client's being written, say):
	// the window's end waits for them first, then c's connect.
	tgt.cmu.Lock()
	extended := make(chan time.Duration, 1)
	go func() { extended <- tgt.extendRecovery() }()
	time.Sleep(50 * time.Millisecond)
	connected := make(chan int32, 1)
	go func() { connected <- connect("c", 0x42) }()
	time.Sleep(50 * time.Millisecond)
	tgt.cmu.Unlock()
	if d := <-extended; d == 0 {
		t.Fatal("the window's end, a back and c not, did not give a more time")
	}
	if status := <-connected; status != 0 && status != -errnoEBUSY {
		t.Fatalf("c: connect status %d", status)
	}
	tgt.mu.Lock()
	e := tgt.exports["c"]
	_, awaited := tgt.waiting["c"]
	tgt.mu.Unlock()
	if e != nil && !awaited {
		t.Error("c, given up on as it reconnected, is kept as a recovering client recovery does not wait for")
	}
}

// TestEndRecoveryOfClosedTargetForgetsNoClient: recovery's end reached
// after the target closed (its window's timer firing with the close, an
// abort_recovery racing it) forgets no client: they come back to the
// next life, whose recovery must wait for them. Forgotten, they would be
// evicted there, their replays lost.
func TestEndRecoveryOfClosedTargetForgetsNoClient(t *testing.T) {
	ts := NewTargetSet()
	var mu sync.Mutex
	var gone []string
	tgt, err := ts.NewTarget(TargetConfig{Name: "t5", LastTransno: 1, RecoveryWindow: time.Minute, Clients: []string{"a", "b"}, Logger: quiet,
		OnClientGone: func(u string) { mu.Lock(); gone = append(gone, u); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: "t5", ClientUuid: "a", Version: wire.Version, ConnCount: 2, Handle: 0x51})
	if _, status := ts.connect(&Request{Body: body}); status != 0 {
		t.Fatalf("a: connect status %d", status)
	}
	if err := tgt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	tgt.EndRecovery()
	mu.Lock()
	defer mu.Unlock()
	if len(gone) != 0 {
		t.Errorf("the closed target's recovery end forgot %v", gone)
	}
}

// TestOnRecoverKeptNotReplayedTwice: what OnRecover replays and keeps
// (an open, say) was made by the instance being recovered: when the
// connection is lost in the middle of OnRecover and recovery starts over
// with the same instance, OnRecover replays it again, and the kept list
// must not replay it a third time.
func TestOnRecoverKeptNotReplayedTwice(t *testing.T) {
	f := &Faults{}
	re := newRecoveryEnv(t, func(c *ServiceConfig) { c.Faults = f })
	calls := 0
	a := re.newImp(t, "a", rplPortal, true, func(c *ImportConfig) {
		c.OnRecover = func(ctx context.Context, imp *Import) error {
			calls++
			if _, err := imp.Replay(ctx, &Req{Opcode: opInc}); err != nil {
				return err
			}
			if calls == 1 {
				// The next request is lost: the connection with it, and
				// recovery starts over.
				f.Arm(FailDropRequest, 1)
				_, err := imp.Replay(ctx, &Req{Opcode: opInc})
				return err
			}
			return nil
		}
	})
	if err := <-do(a); err != nil { // 101
		t.Fatal(err)
	}
	re.restart(t, time.Minute) // no gate: the replays run as they come
	if err := <-do(a); err != nil {
		t.Fatal(err)
	}
	if calls != 2 || f.Fired(FailDropRequest) != 1 {
		t.Fatalf("OnRecover ran %d times, the fault fired %d", calls, f.Fired(FailDropRequest))
	}
	// 101 from the list, OnRecover's replay once in each pass, then the
	// new request.
	if got, want := re.entries()[1:], []string{"a replay", "a replay", "a replay", "a"}; !slices.Equal(got, want) {
		t.Fatalf("after the restart handled %q, want %q", got, want)
	}
}

// TestRecoveryExtendedWhileReplaysGoOn: a client whose replays take
// longer than the window, one after the other, is not evicted at its end:
// the replays go on, so the window is put off (up to recoveryHard
// windows), and every change is made.
func TestRecoveryExtendedWhileReplaysGoOn(t *testing.T) {
	re := newRecoveryEnv(t, func(c *ServiceConfig) {
		wrapInc(c, func(r *Request) (after func()) {
			if r.Replayed() {
				time.Sleep(60 * time.Millisecond) // a slow replay
			}
			return nil
		})
	})
	a := re.client(t, "a", rplPortal, true)
	const n = 10
	for range n {
		if err := <-do(a); err != nil {
			t.Fatal(err)
		}
	}
	const window = 300 * time.Millisecond // n replays take 600 ms
	re.restart(t, window, "a")
	if err := <-do(a); err != nil {
		t.Fatalf("a, replaying for longer than the window: %v", err)
	}
	got := re.entries()[n:]
	if len(got) != n+1 || slices.Index(got, "a") != n {
		t.Fatalf("after the restart handled %q: want the %d replays, then a's new request", got, n)
	}
	if st := re.tgt.RecoveryStatus(); st.Evicted != 0 || st.Recovering {
		t.Errorf("recovery status: %+v", st)
	}
}

// TestRecoveryGoesOnWhenAClientComesBackAfresh: a client of the previous
// life that comes back without its handle (its process restarted: an MDS
// to its OSTs) has nothing to replay. The clients that did replay their
// requests, held until it had too, must go on then: they waited for the
// window's end instead.
func TestRecoveryGoesOnWhenAClientComesBackAfresh(t *testing.T) {
	re := newRecoveryEnv(t, nil)
	a := re.client(t, "a", rplPortal, true)
	if err := <-do(a); err != nil { // 101
		t.Fatal(err)
	}
	re.restart(t, time.Minute, "a", "b")
	aDone := do(a) // replays 101, then waits for b
	waitFor(t, "a waiting for b", func() bool { return a.Info().State == StateReplayLocks })
	// b, its process new, connects afresh: refused until recovery ends,
	// but recovery waits for it no more.
	body, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: "nacre-MDT0000", ClientUuid: "b", Version: wire.Version, ConnCount: 1})
	if _, status := re.ts.connect(&Request{Body: body}); status != -errnoEBUSY {
		t.Fatalf("b's fresh connect in recovery: status %d, want -EBUSY", status)
	}
	select {
	case err := <-aDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a still waits (import %v) after b came back afresh", a.Info().State)
	}
	if re.tgt.Recovering() {
		t.Error("recovery goes on with every client back")
	}
}

// TestRecoveryConnectRacingItsRetryKeepsOneExport: a client's CONNECT to a
// restarted target that it gave up on (sent while the server was away,
// delivered late) is handled at the same time as the one it sent next.
// Both looked for the client's export before either put one in place;
// the one it waits for puts its export in place first, the one it gave
// up on after. The target must not end up waiting on an export the
// client never uses: the client would say on its own that it replayed
// its requests, and request replay would wait for the other export to
// say so, holding every client until the window's end, which then evicts
// them all (the OSS restart in TestDDAcrossOSSRestart).
func TestRecoveryConnectRacingItsRetryKeepsOneExport(t *testing.T) {
	re := newRecoveryEnv(t, nil)
	a := re.newImp(t, "a", rplPortal, true, func(c *ImportConfig) {
		// Not to give up on the CONNECT held below.
		c.InitialTimeout, c.MinTimeout = time.Second, time.Second
	})
	b := re.client(t, "b", rplPortal+1, true)
	for _, imp := range []*Import{a, b} {
		if err := <-do(imp); err != nil {
			t.Fatal(err)
		}
	}
	prev := a.Info() // a's connection to the previous life

	re.tgt.Close(context.Background())
	inRecords, recorded := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	tgt, err := re.ts.NewTarget(TargetConfig{Name: "nacre-MDT0000", LastTransno: 100, RecoveryWindow: 30 * time.Second,
		Clients: []string{"a", "b"}, Logger: quiet,
		OnNewClient: func(uuid string) error {
			if uuid == "a" && calls.Add(1) == 1 {
				close(inRecords)
				<-recorded
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	re.tgt = tgt
	aDone, bDone := do(a), do(b) // each reconnects, replays, and waits for the other
	<-inRecords                  // a's CONNECT is about to put its export in place
	stale := make(chan int32, 1)
	go func() {
		body, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: "nacre-MDT0000", ClientUuid: "a", Version: wire.Version,
			ConnCount: prev.ConnCount + 1, Handle: prev.Handle})
		_, status := re.ts.connect(&Request{Body: body})
		stale <- status
	}()
	time.Sleep(100 * time.Millisecond) // it finds no export of a yet, and waits for the client records
	close(recorded)
	for name, ch := range map[string]<-chan error{"a": aDone, "b": bDone} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		case <-time.After(5 * time.Second):
			st := tgt.RecoveryStatus()
			t.Fatalf("%s still waits for recovery: %d clients replaying their requests, %d their locks", name, st.ReqReplay, st.LockReplay)
		}
	}
	if status := <-stale; status != 0 {
		t.Errorf("the late CONNECT: status %d", status)
	}
	if n := tgt.RecoveryEvicted(); n != 0 {
		t.Errorf("recovery evicted %d clients", n)
	}
	tgt.mu.Lock()
	e := tgt.exports["a"]
	tgt.mu.Unlock()
	if e == nil || e.handle != a.Info().Handle {
		t.Errorf("a's export is not the one its connection names")
	}
}

// TestNoConnectHookForAnExportDropped: a client of the previous life whose
// CONNECT is made as recovery ends gets its export dropped at once ("stale
// as those recovery evicted"); OnConnect is not called for that export
// (an OST's would hand it grant that OnGone had already taken back, and
// that nothing would ever give back).
func TestNoConnectHookForAnExportDropped(t *testing.T) {
	re := newRecoveryEnv(t, nil)
	a := re.client(t, "a", rplPortal, true)
	b := re.client(t, "b", rplPortal+1, true)
	for _, imp := range []*Import{a, b} {
		if err := <-do(imp); err != nil {
			t.Fatal(err)
		}
	}
	re.tgt.Close(context.Background())
	var mu sync.Mutex
	var connected, gone []*Export
	made := make(chan *Target, 1) // the imports may reconnect before NewTarget returns
	tgt, err := re.ts.NewTarget(TargetConfig{Name: "nacre-MDT0000", LastTransno: 100, RecoveryWindow: 30 * time.Second,
		Clients: []string{"a", "b"}, Logger: quiet,
		OnNewClient: func(uuid string) error {
			tgt := <-made
			made <- tgt
			if uuid == "a" && tgt.Recovering() {
				// Recovery ends as a's CONNECT puts its export in place.
				go tgt.EndRecovery()
				for tgt.Recovering() {
					time.Sleep(time.Millisecond)
				}
			}
			return nil
		},
		OnConnect: func(e *Export, _ []byte) []byte {
			mu.Lock()
			defer mu.Unlock()
			connected = append(connected, e)
			return nil
		},
		OnGone: func(e *Export, _ bool) {
			mu.Lock()
			defer mu.Unlock()
			gone = append(gone, e)
		}})
	if err != nil {
		t.Fatal(err)
	}
	made <- tgt
	re.tgt = tgt
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.Ping(ctx) // reconnects: its first CONNECT finds recovery ending
	waitFor(t, "a's export dropped", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(gone) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	for _, g := range gone {
		if slices.Contains(connected, g) {
			t.Errorf("OnConnect called for an export dropped as it connected (client %s)", g.ClientUUID())
		}
	}
}

// TestReplaysDoneWaitsForAReplayInItsHandler: a replay still in its
// handler when recovery ends (the window run out, its client evicted)
// may still make its change; ReplaysDone, which the MDS's orphan cleanup
// waits for, returns only once it is out.
func TestReplaysDoneWaitsForAReplayInItsHandler(t *testing.T) {
	inHandler, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	re := newRecoveryEnv(t, func(c *ServiceConfig) {
		wrapInc(c, func(r *Request) func() {
			if r.Replayed() {
				once.Do(func() { close(inHandler) })
				<-release
			}
			return nil
		})
	})
	a := re.client(t, "a", rplPortal, true)
	if err := <-do(a); err != nil { // 101, not committed
		t.Fatal(err)
	}
	re.restart(t, time.Minute, "a")
	aDone := do(a)
	<-inHandler // a's replay of 101 is in its handler
	re.tgt.EndRecovery()
	<-re.tgt.RecoveryDone()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- re.tgt.ReplaysDone(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("ReplaysDone returned (%v) with a replay in its handler", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("ReplaysDone: %v", err)
	}
	<-aDone // evicted as it replayed: whatever it says
	stopped, cancelStopped := context.WithCancel(context.Background())
	cancelStopped()
	if err := re.tgt.ReplaysDone(stopped); err != nil {
		t.Fatalf("ReplaysDone once done, with a done context: %v", err)
	}
}

// TestLateReplyOfEndedLifeResent: a change's reply (transno 101) arrives
// from the server, but before the import takes it in (it is not in the
// replay list yet) the server restarts without the change (its store had
// committed up to 100) and the import reconnects and recovers, replaying
// nothing. Kept as it was, the reply said the change was made, and the
// next life never had it. The import sends the request again instead:
// the new life makes the change.
func TestLateReplyOfEndedLifeResent(t *testing.T) {
	re := newRecoveryEnv(t, nil)
	a := re.client(t, "a", rplPortal, true)
	got, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	testHookReplyCollected = func(r *rpc, h *wire.Header) {
		if r.req.Opcode == opInc && h.Transno != 0 {
			once.Do(func() {
				close(got)
				<-release
			})
		}
	}
	defer func() { testHookReplyCollected = nil }()
	done := do(a)
	<-got
	if n := len(re.entries()); n != 1 {
		t.Fatalf("%d changes made before the restart, want 1", n)
	}
	inst := a.Info().Instance
	re.restartAt(t, 100, time.Minute, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Ping(ctx); err != nil { // reconnects, recovers
		t.Fatal(err)
	}
	// (RECOVER: the replay is over; the request in flight is to be sent
	// again before anything new goes.)
	if info := a.Info(); info.Instance == inst || (info.State != StateFull && info.State != StateRecover) {
		t.Fatalf("the import has not recovered to the new life: %+v", info)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if e := re.entries(); len(e) != 2 {
		t.Fatalf("the change was made %d times over the two lives (%q), want once in each", len(e), e)
	}
}

// TestLateReplyOfEndedLifeResentPastNewCommits: as
// TestLateReplyOfEndedLifeResent, but before the late reply is taken in,
// the new life has committed a change of its own under the same transno
// (101: its transnos go on from 100) and said so in the reply to another
// request of the import. That transno is not the
// old life's change: the request is sent again all the same. Compared
// with the last committed transno, the reply was kept and the change the
// new life never had was reported made.
func TestLateReplyOfEndedLifeResentPastNewCommits(t *testing.T) {
	re := newRecoveryEnv(t, nil)
	a := re.client(t, "a", rplPortal, true)
	got, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	testHookReplyCollected = func(r *rpc, h *wire.Header) {
		if r.c == a.c && r.req.Opcode == opInc && h.Transno != 0 {
			once.Do(func() {
				close(got)
				<-release
			})
		}
	}
	defer func() { testHookReplyCollected = nil }()
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	done := do(a)
	<-got
	re.restartAt(t, 100, time.Minute, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Ping(ctx); err != nil { // reconnects, recovers
		t.Fatal(err)
	}
	// Another client's change in the new life, committed, and the import
	// told so.
	b := re.client(t, "b", rplPortal+1, true)
	if err := <-do(b); err != nil {
		t.Fatal(err)
	}
	re.tgt.Committed(101)
	// The reply to another request of a's resent in RECOVER (the import
	// holds new ones until its requests in flight are resent) says so.
	a.committedUpTo(101)
	if c := a.Info().LastCommitted; c != 101 {
		t.Fatalf("the import knows %d committed, want 101", c)
	}
	releaseOnce.Do(func() { close(release) })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if e := re.entries(); len(e) != 3 {
		t.Fatalf("changes %q over the two lives, want a's in each and b's", e)
	}
}

// TestRequestStale: a request let in on a connection that its client
// replaced since (here a reconnect to the same export with a newer
// connection count; oss TestStaleOrphanCleanupRefused has a fresh connect
// that drops the export) is stale; one on the current connection is not.
func TestRequestStale(t *testing.T) {
	te := newTgtEnv(t, loEnv, TargetConfig{AutoCommit: true})
	imp := te.newImport(t, te.importCfg())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, done := te.hold(t, ctx, imp)
	if r.Stale() {
		t.Fatal("a request on the current connection is stale")
	}
	info := imp.Info()
	body, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: te.tgt.Name(), ClientUuid: te.c.UUID(), Version: wire.Version,
		ConnCount: info.ConnCount + 1, Handle: info.Handle})
	if _, status := te.ts.connect(&Request{Body: body, Peer: r.Peer}); status != 0 {
		t.Fatalf("reconnect: status %d", status)
	}
	if !r.Stale() {
		t.Fatalf("a request of connection %d is not stale after a reconnect with %d", r.Header.ConnCount, info.ConnCount+1)
	}
	close(te.release)
	<-done // whatever its answer: its connection is gone
}
