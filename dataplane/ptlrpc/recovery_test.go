package ptlrpc

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
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
	// An administrator ends it (abort_recovery), the clients unknown.
	if n := tgt.EndRecovery(); n != 0 || tgt.Recovering() {
		t.Fatalf("EndRecovery: %d absent, recovering %v", n, tgt.Recovering())
	}
	select {
	case <-tgt.RecoveryDone():
	default:
		t.Error("EndRecovery left RecoveryDone open")
	}
}

// TestRecoveryEndsWhenClientsAreBack: a target that knows its previous
// life's clients ends recovery once each is back — reconnected and done
// replaying, or connected afresh — not when the window runs out; with
// none, at once. EndRecovery ends it early and forgets the clients that
// did not come back.
func TestRecoveryEndsWhenClientsAreBack(t *testing.T) {
	ts := NewTargetSet()
	connect := func(name, uuid string, handle uint64) {
		t.Helper()
		body, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: name, ClientUuid: uuid, Version: wire.Version, ConnCount: 2, Handle: handle})
		if _, status := ts.connect(&Request{Body: body}); status != 0 {
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
	connect("t1", "b", 0)    // back without its handle: nothing to replay
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
	if n := late.EndRecovery(); n != 1 || len(gone) != 1 || gone[0] != "c" || late.Recovering() || !done(late) {
		t.Fatalf("EndRecovery: %d absent, forgot %v, recovering %v", n, gone, late.Recovering())
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
