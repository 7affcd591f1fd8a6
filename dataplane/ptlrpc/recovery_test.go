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
}
