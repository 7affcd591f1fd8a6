package ptlrpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/lnet"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

const (
	opInc  = wire.OSTSetattr // modifying: counts its runs, replies with the count
	opSlow = wire.OSTPunch   // modifying: sleeps for the milliseconds in its body, then counts
	opHold = wire.OSTSync    // modifying: hands its request to the test (held), waits for release, then counts
)

// tgtEnv is a connection-oriented service with one target, and a client.
type tgtEnv struct {
	env
	svc    *Service
	ts     *TargetSet
	tgt    *Target
	faults *Faults
	runs   atomic.Int64 // modifying handler runs
	gone   chan bool    // OnGone's evicted flag
	c      *Client
	// held gets each opHold request as its handler starts; closing
	// release lets them all finish.
	held    chan *Request
	release chan struct{}
}

func newTgtEnv(t *testing.T, mk func(testing.TB) env, tcfg TargetConfig) *tgtEnv {
	te := &tgtEnv{env: mk(t), ts: NewTargetSet(), faults: &Faults{}, gone: make(chan bool, 16),
		held: make(chan *Request, 16), release: make(chan struct{})}
	if tcfg.Name == "" {
		tcfg.Name = "nacre-OST0000"
	}
	tcfg.Logger = quiet
	tcfg.OnGone = func(_ *Export, evicted bool) { te.gone <- evicted }
	tgt, err := te.ts.NewTarget(tcfg)
	if err != nil {
		t.Fatal(err)
	}
	te.tgt = tgt
	inc := func(context.Context, *Request) ([]byte, int32) {
		return binary.LittleEndian.AppendUint64(nil, uint64(te.runs.Add(1))), 0
	}
	slow := func(ctx context.Context, r *Request) ([]byte, int32) {
		d := time.Duration(binary.LittleEndian.Uint64(r.Body)) * time.Millisecond
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		return inc(ctx, r)
	}
	hold := func(ctx context.Context, r *Request) ([]byte, int32) {
		te.held <- r
		select {
		case <-te.release:
		case <-ctx.Done():
		}
		return inc(ctx, r)
	}
	te.svc, err = NewService(te.srv, ServiceConfig{Name: "ost", RequestPortal: reqPortal, Targets: te.ts, Logger: quiet,
		Faults: te.faults, Handlers: map[wire.Opcode]HandlerSpec{
			opEcho: {Fn: echo},
			opInc:  {Fn: inc, Flags: Modifying},
			opSlow: {Fn: slow, Flags: Modifying},
			opHold: {Fn: hold, Flags: Modifying},
		}})
	if err != nil {
		t.Fatal(err)
	}
	te.c = NewClient(te.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		te.svc.Close(ctx)
		tgt.Close(ctx)
	})
	return te
}

// importCfg is a fast-timeout import configuration for tests.
func (te *tgtEnv) importCfg() ImportConfig {
	return ImportConfig{Target: te.tgt.Name(), Servers: []lwire.ProcessID{te.target}, Portal: reqPortal,
		MinTimeout: 150 * time.Millisecond, InitialTimeout: 100 * time.Millisecond, PingInterval: -1}
}

func (te *tgtEnv) newImport(t *testing.T, cfg ImportConfig) *Import {
	imp, err := te.c.NewImport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		imp.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := imp.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	return imp
}

// hold sends an opHold request on imp and returns it as its handler holds
// it, with the channel that gets the call's outcome once te.release is
// closed.
func (te *tgtEnv) hold(t *testing.T, ctx context.Context, imp *Import) (*Request, <-chan error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := imp.Do(ctx, &Req{Opcode: opHold})
		done <- err
	}()
	select {
	case r := <-te.held:
		return r, done
	case err := <-done:
		t.Fatalf("request ended before its handler ran: %v", err)
	case <-ctx.Done():
		t.Fatal("the request never reached its handler")
	}
	return nil, nil
}

func count(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

func ms(d time.Duration) []byte {
	return binary.LittleEndian.AppendUint64(nil, uint64(d/time.Millisecond))
}

func runImports(t *testing.T, mk func(testing.TB) env) {
	t.Run("connect", func(t *testing.T) { testConnect(t, mk) })
	t.Run("lost-request", func(t *testing.T) { testLostRequest(t, mk) })
	t.Run("lost-reply", func(t *testing.T) { testLostReply(t, mk) })
	t.Run("slow-early-reply", func(t *testing.T) { testSlowServer(t, mk) })
	t.Run("slow-no-early-reply", func(t *testing.T) { testSlowNoEarly(t, mk) })
	t.Run("evict-silent", func(t *testing.T) { testEvictSilent(t, mk) })
	t.Run("evict-admin", func(t *testing.T) { testEvictAdmin(t, mk) })
	t.Run("commit", func(t *testing.T) { testCommit(t, mk) })
	t.Run("last-transno", func(t *testing.T) { testLastTransno(t, mk) })
	t.Run("set", func(t *testing.T) { testImportSet(t, mk) })
	t.Run("not-connected", func(t *testing.T) { testNotConnected(t, mk) })
	t.Run("max-rpcs-in-flight", func(t *testing.T) { testMaxInFlight(t, mk) })
}

func TestImportLolnd(t *testing.T)   { runImports(t, loEnv) }
func TestImportSocklnd(t *testing.T) { runImports(t, sockEnv) }

func testConnect(t *testing.T, mk func(testing.TB) env) {
	te := newTgtEnv(t, mk, TargetConfig{AutoCommit: true, Features: 0b1010})
	var mu sync.Mutex
	var states []ImportState
	cfg := te.importCfg()
	cfg.Features = 0b0110
	cfg.PingInterval = 50 * time.Millisecond
	cfg.OnState = func(_, to ImportState) { mu.Lock(); states = append(states, to); mu.Unlock() }
	imp := te.newImport(t, cfg)
	info := imp.Info()
	if info.State != StateFull || info.Handle == 0 || info.ConnCount != 1 || info.Features != 0b0010 {
		t.Fatalf("info %+v", info)
	}
	exps := te.tgt.Exports()
	if len(exps) != 1 || exps[0].UUID != te.c.UUID() || exps[0].Handle != info.Handle {
		t.Fatalf("exports %+v", exps)
	}
	// Pings keep an idle export alive and count on the server.
	deadline := time.Now().Add(5 * time.Second)
	for te.svc.Stats().Ops[wire.OBDPing].Count < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("pings: %+v", te.svc.Stats().Ops[wire.OBDPing])
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body := pattern(3000, 4)
	if got, err := imp.Do(ctx, &Req{Opcode: opEcho, Body: body}); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("echo: %v: got %d bytes % x", err, len(got), got[:min(len(got), 16)])
	}
	if err := imp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if evicted := <-te.gone; evicted {
		t.Fatal("a DISCONNECT counted as an eviction")
	}
	if n := len(te.tgt.Exports()); n != 0 {
		t.Fatalf("%d exports after disconnect", n)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []ImportState{StateConnecting, StateFull, StateClosed}
	if !slices.Equal(states, want) {
		t.Fatalf("states %v, want %v", states, want)
	}
	if _, err := imp.Do(ctx, &Req{Opcode: opEcho}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

// testLostRequest: the server loses a modifying request; the client times
// out, reconnects, resends, and the handler runs once.
func testLostRequest(t *testing.T, mk func(testing.TB) env) {
	te := newTgtEnv(t, mk, TargetConfig{AutoCommit: true})
	imp := te.newImport(t, te.importCfg())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	te.faults.Arm(FailDropRequest, 1)
	got, err := imp.Do(ctx, &Req{Opcode: opInc})
	if err != nil {
		t.Fatal(err)
	}
	if count(got) != 1 || te.runs.Load() != 1 {
		t.Fatalf("reply count %d, handler ran %d times", count(got), te.runs.Load())
	}
	st := te.c.Stats()
	if st.Timeouts < 1 || st.Resent < 1 || st.Reconnects < 1 {
		t.Fatalf("client stats %+v", st)
	}
	if imp.State() != StateFull || imp.Info().ConnCount < 2 {
		t.Fatalf("import %+v", imp.Info())
	}
}

// testLostReply: the server runs a modifying request but its reply is lost;
// the resend is answered from the saved reply, not run again.
func testLostReply(t *testing.T, mk func(testing.TB) env) {
	te := newTgtEnv(t, mk, TargetConfig{AutoCommit: true})
	imp := te.newImport(t, te.importCfg())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	te.faults.Arm(FailDropReply, 1)
	got, err := imp.Do(ctx, &Req{Opcode: opInc})
	if err != nil {
		t.Fatal(err)
	}
	if count(got) != 1 || te.runs.Load() != 1 {
		t.Fatalf("reply count %d, handler ran %d times", count(got), te.runs.Load())
	}
	if st := te.svc.Stats(); st.Reconstructed != 1 || st.Dropped != 1 {
		t.Fatalf("service stats %+v", st)
	}
	if st := te.c.Stats(); st.Resent < 1 {
		t.Fatalf("client stats %+v", st)
	}
	// The next request's last_xid lets the server forget the saved reply.
	if _, err := imp.Do(ctx, &Req{Opcode: opEcho}); err != nil {
		t.Fatal(err)
	}
	if n := te.tgt.Exports()[0].Saved; n != 0 {
		t.Fatalf("%d saved replies after last_xid moved past them", n)
	}
}

// testSlowServer: a handler takes several times the client's timeout;
// early replies keep the client waiting, with no resend.
func testSlowServer(t *testing.T, mk func(testing.TB) env) {
	te := newTgtEnv(t, mk, TargetConfig{AutoCommit: true})
	imp := te.newImport(t, te.importCfg())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	timeout := imp.Info().Timeout
	got, err := imp.Do(ctx, &Req{Opcode: opSlow, Body: ms(3 * timeout)})
	if err != nil {
		t.Fatal(err)
	}
	if count(got) != 1 || te.runs.Load() != 1 {
		t.Fatalf("reply count %d, handler ran %d times", count(got), te.runs.Load())
	}
	st := te.c.Stats()
	if st.EarlyReplies < 1 || st.Resent != 0 || st.Timeouts != 0 {
		t.Fatalf("client stats %+v (timeout %v)", st, timeout)
	}
	if te.svc.Stats().EarlyReplies < 1 {
		t.Fatalf("service stats %+v", te.svc.Stats())
	}
	// The slow service raised the adaptive estimate.
	if imp.Info().Timeout <= timeout {
		t.Fatalf("timeout %v after a slow request, was %v", imp.Info().Timeout, timeout)
	}
	// Fast requests in between leave the early replier's timer where it
	// was (no wakeup each); a slow one after them is still kept alive.
	for range 100 {
		if _, err := imp.Do(ctx, &Req{Opcode: opEcho}); err != nil {
			t.Fatal(err)
		}
	}
	early := te.svc.Stats().EarlyReplies
	if _, err := imp.Do(ctx, &Req{Opcode: opSlow, Body: ms(2 * imp.Info().Timeout)}); err != nil {
		t.Fatal(err)
	}
	if st := te.c.Stats(); te.svc.Stats().EarlyReplies == early || st.Resent != 0 || st.Timeouts != 0 {
		t.Fatalf("a slow request after fast ones: %d early replies before, %d after, client %+v", early, te.svc.Stats().EarlyReplies, st)
	}
}

// testSlowNoEarly: a slow handler whose early replies are lost: the client
// times out and resends; the server drops the resend of a request still
// running, and the original's reply ends the call. The handler runs once.
func testSlowNoEarly(t *testing.T, mk func(testing.TB) env) {
	te := newTgtEnv(t, mk, TargetConfig{AutoCommit: true})
	imp := te.newImport(t, te.importCfg())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	te.faults.Arm(FailDropEarlyReply, -1)
	got, err := imp.Do(ctx, &Req{Opcode: opSlow, Body: ms(3 * imp.Info().Timeout)})
	if err != nil {
		t.Fatal(err)
	}
	if count(got) != 1 || te.runs.Load() != 1 {
		t.Fatalf("reply count %d, handler ran %d times", count(got), te.runs.Load())
	}
	if st := te.c.Stats(); st.Resent < 1 || st.Timeouts < 1 {
		t.Fatalf("client stats %+v", st)
	}
	if st := te.svc.Stats(); st.Stale < 1 {
		t.Fatalf("service stats %+v", st)
	}
}

// testEvictSilent: a client that stops talking is evicted by the target's
// evictor; its next request fails with ErrEvicted, the owner's hook runs,
// and the import carries on with a new export.
func testEvictSilent(t *testing.T, mk func(testing.TB) env) {
	te := newTgtEnv(t, mk, TargetConfig{AutoCommit: true, EvictTimeout: 200 * time.Millisecond})
	evicted := make(chan struct{}, 4)
	cfg := te.importCfg()
	cfg.OnEvict = func(*Import) { evicted <- struct{}{} }
	imp := te.newImport(t, cfg) // PingInterval -1: the client stays silent
	old := imp.Info().Handle
	select {
	case ev := <-te.gone:
		if !ev {
			t.Fatal("export gone, but not evicted")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("silent client not evicted")
	}
	if te.tgt.Evictions() != 1 {
		t.Fatalf("evictions %d", te.tgt.Evictions())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := imp.Do(ctx, &Req{Opcode: opInc})
	if !errors.Is(err, ErrEvicted) {
		t.Fatalf("request after eviction: %v", err)
	}
	select {
	case <-evicted:
	case <-time.After(5 * time.Second):
		t.Fatal("OnEvict not called")
	}
	got, err := imp.Do(ctx, &Req{Opcode: opInc})
	if err != nil {
		t.Fatalf("request on the new export: %v", err)
	}
	if count(got) != 1 {
		t.Fatalf("count %d: the request refused with ENOTCONN ran", count(got))
	}
	if info := imp.Info(); info.Handle == old || info.State != StateFull {
		t.Fatalf("import %+v, old handle %x", info, old)
	}
	if st := te.c.Stats(); st.Evictions != 1 {
		t.Fatalf("client stats %+v", st)
	}
}

// testEvictAdmin: an administrator evicts a busy client.
func testEvictAdmin(t *testing.T, mk func(testing.TB) env) {
	te := newTgtEnv(t, mk, TargetConfig{AutoCommit: true})
	imp := te.newImport(t, te.importCfg())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := imp.Do(ctx, &Req{Opcode: opEcho}); err != nil {
		t.Fatal(err)
	}
	if err := te.tgt.Evict("no-such-client"); err == nil {
		t.Fatal("evicting an unknown client succeeded")
	}
	if err := te.tgt.Evict(te.c.UUID()); err != nil {
		t.Fatal(err)
	}
	if _, err := imp.Do(ctx, &Req{Opcode: opEcho}); !errors.Is(err, ErrEvicted) {
		t.Fatalf("after eviction: %v", err)
	}
	if _, err := imp.Do(ctx, &Req{Opcode: opEcho}); err != nil {
		t.Fatalf("after reconnecting: %v", err)
	}
}

// testCommit: replies of modifying requests carry transnos; the client
// keeps the requests until last_committed covers them.
func testCommit(t *testing.T, mk func(testing.TB) env) {
	te := newTgtEnv(t, mk, TargetConfig{})
	imp := te.newImport(t, te.importCfg())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		if _, err := imp.Do(ctx, &Req{Opcode: opInc}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := imp.Do(ctx, &Req{Opcode: opEcho}); err != nil {
		t.Fatal(err)
	}
	un := imp.Uncommitted()
	if len(un) != 3 || un[0] == 0 || un[1] != un[0]+1 || un[2] != un[1]+1 || te.tgt.LastTransno() != un[2] {
		t.Fatalf("uncommitted %v, last transno %d", un, te.tgt.LastTransno())
	}
	te.tgt.Committed(un[1])
	if err := imp.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if got := imp.Uncommitted(); !slices.Equal(got, un[2:]) {
		t.Fatalf("after commit of %d: %v", un[1], got)
	}
	if imp.Info().LastCommitted != un[1] {
		t.Fatalf("last committed %d", imp.Info().LastCommitted)
	}
	te.tgt.Committed(un[2])
	if _, err := imp.Do(ctx, &Req{Opcode: opEcho}); err != nil {
		t.Fatal(err)
	}
	if got := imp.Uncommitted(); len(got) != 0 {
		t.Fatalf("after commit of everything: %v", got)
	}
}

// testLastTransno: a target restarted on storage that used transnos up to
// 500 numbers new changes after it and reports 500 committed, so a reply
// never carries a transno the client would take as already durable.
func testLastTransno(t *testing.T, mk func(testing.TB) env) {
	te := newTgtEnv(t, mk, TargetConfig{LastTransno: 500})
	imp := te.newImport(t, te.importCfg())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := imp.Do(ctx, &Req{Opcode: opInc}); err != nil {
		t.Fatal(err)
	}
	if un := imp.Uncommitted(); len(un) != 1 || un[0] != 501 || te.tgt.LastCommitted() != 500 {
		t.Fatalf("uncommitted %v, last committed %d", un, te.tgt.LastCommitted())
	}
	if imp.Info().LastCommitted != 500 {
		t.Fatalf("the client saw last committed %d", imp.Info().LastCommitted)
	}
}

// testImportSet sends 64 requests to 4 targets on 4 services as one set.
func testImportSet(t *testing.T, mk func(testing.TB) env) {
	e := mk(t)
	ts := NewTargetSet()
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
	var imps []*Import
	for i := range 4 {
		name := fmt.Sprintf("nacre-OST%04x", i)
		if _, err := ts.NewTarget(TargetConfig{Name: name, AutoCommit: true, Logger: quiet}); err != nil {
			t.Fatal(err)
		}
		s, err := NewService(e.srv, ServiceConfig{Name: name, RequestPortal: reqPortal + 10 + uint32(i), Targets: ts,
			Logger: quiet, Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: echo}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		imp, err := c.NewImport(ImportConfig{Target: name, Servers: []lwire.ProcessID{e.target}, Portal: reqPortal + 10 + uint32(i), PingInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { imp.Close(context.Background()) })
		imps = append(imps, imp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls := make([]SetCall, 64)
	for i := range calls {
		calls[i] = SetCall{Import: imps[i%4], Req: &Req{Opcode: opEcho, Body: pattern(100+i*37, i)}}
	}
	for i, r := range DoSet(ctx, calls) {
		if r.Err != nil {
			t.Fatalf("call %d: %v", i, r.Err)
		}
		if !bytes.Equal(r.Reply, calls[i].Req.Body) {
			t.Fatalf("call %d: wrong reply", i)
		}
	}
}

// testNotConnected: requests naming no live export are refused with
// ENOTCONN, and CONNECTs that make no sense are refused, all without
// disturbing the service.
func testNotConnected(t *testing.T, mk func(testing.TB) env) {
	te := newTgtEnv(t, mk, TargetConfig{AutoCommit: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := te.c.Call(ctx, te.target, reqPortal, opInc, nil); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("request without export: %v", err)
	}
	imp, err := te.c.NewImport(ImportConfig{Target: "nacre-OST00ff", Servers: []lwire.ProcessID{te.target}, Portal: reqPortal,
		PingInterval: -1, MinTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	if err := imp.Connect(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("connect to a missing target: %v", err)
	}
	if st := imp.State(); st != StateDisconn && st != StateConnecting {
		t.Fatalf("state %v", st)
	}
	imp.Close(ctx)
	for _, body := range [][]byte{[]byte("\xff\xff garbage"), nil} {
		if _, err := te.c.Call(ctx, te.target, reqPortal, wire.OSTConnect, body); !errors.Is(err, syscall.EPROTO) && !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("connect with body %q: %v", body, err)
		}
	}
	if te.runs.Load() != 0 || len(te.tgt.Exports()) != 0 {
		t.Fatal("a refused request had an effect")
	}
	if got, err := te.c.Call(ctx, te.target, reqPortal, opEcho, []byte("x")); !errors.Is(err, syscall.ENOTCONN) || got != nil {
		t.Fatalf("echo without export: %v", err)
	}
}

// testMaxInFlight: an import with MaxRPCsInFlight has no more requests at
// the server at once, whatever its callers do; pings go past the limit; a
// new limit applies to the requests that come after.
func testMaxInFlight(t *testing.T, mk func(testing.TB) env) {
	te := newTgtEnv(t, mk, TargetConfig{AutoCommit: true})
	cfg := te.importCfg()
	cfg.MinTimeout = 5 * time.Second
	cfg.MaxRPCsInFlight = 2
	imp := te.newImport(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// burst sends n requests of 50 ms at once and returns how long they
	// took: at least n/limit rounds of 50 ms if the server never has more
	// than limit at once.
	burst := func(n int) time.Duration {
		t.Helper()
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			wg.Go(func() {
				_, err := imp.Do(ctx, &Req{Opcode: opSlow, Body: ms(50 * time.Millisecond)})
				errs <- err
			})
		}
		// While the slots are taken, a ping still goes.
		time.Sleep(10 * time.Millisecond)
		pctx, pcancel := context.WithTimeout(ctx, 40*time.Millisecond)
		if err := imp.Ping(pctx); err != nil {
			t.Errorf("ping while the slots are taken: %v", err)
		}
		pcancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return time.Since(start)
	}
	if d := burst(8); d < 4*50*time.Millisecond {
		t.Fatalf("max_rpcs_in_flight 2: 8 requests of 50 ms took %v, less than 4 rounds", d)
	}
	if limit, peak := imp.MaxRPCsInFlight(); limit != 2 || peak != 2 {
		t.Fatalf("max_rpcs_in_flight 2: limit %d, peak %d", limit, peak)
	}
	if err := imp.SetMaxRPCsInFlight(0); err == nil {
		t.Fatal("max_rpcs_in_flight 0 accepted")
	}
	if err := imp.SetMaxRPCsInFlight(6); err != nil {
		t.Fatal(err)
	}
	burst(8)
	if limit, peak := imp.MaxRPCsInFlight(); limit != 6 || peak < 3 || peak > 6 {
		t.Fatalf("max_rpcs_in_flight 6: limit %d, peak %d", limit, peak)
	}
	if got := te.runs.Load(); got != 16 {
		t.Fatalf("%d requests ran, want 16", got)
	}
	unlimited := te.newImport(t, te.importCfg())
	if err := unlimited.SetMaxRPCsInFlight(4); err == nil {
		t.Fatal("SetMaxRPCsInFlight on an import made without a limit")
	}
}

// TestDeadServerCallEndsAtDeadline: a request to a server that is gone
// waits in socklnd for a connection. When the caller's deadline passes the
// call returns, its send canceled, rather than once LNet gives the send up
// (a minute here); and an import with a failover server connects to it
// at once, its CONNECT to the first failed as soon as socklnd finds the
// server unreachable.
func TestDeadServerCallEndsAtDeadline(t *testing.T) {
	port := freePort(t, "127.0.0.1", "127.0.0.2", "127.0.0.3")
	cfg := lnet.DefaultConfig()
	cfg.Logger = quiet
	cfg.TransactionTimeout = time.Minute
	nc, err := lnet.ParseNetworks("tcp(127.0.0.1)")
	if err != nil {
		t.Fatal(err)
	}
	nc[0].Options = map[string]string{"port": strconv.Itoa(port)}
	cfg.Networks = nc
	cli, err := lnet.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close(context.Background()) })
	c := NewClient(cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
	dead := lwire.ProcessID{NID: lwire.MustParseNID("127.0.0.2@tcp"), PID: lwire.PIDLustre}

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Do(ctx, dead, reqPortal, &Req{Opcode: opEcho, Body: []byte("anyone?")}); err == nil {
		t.Fatal("a call to nobody succeeded")
	}
	// The deadline; the send, given up, is canceled at once.
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("the call returned after %v: it waited for LNet to give its send up", el)
	}

	t.Logf("call to nobody returned after %v", time.Since(start))
	srv := startLNet(t, "tcp(127.0.0.3)", port)
	ts := NewTargetSet()
	tgt, err := ts.NewTarget(TargetConfig{Name: "nacre-OST0000", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close(context.Background())
	svc, err := NewService(srv, ServiceConfig{Name: "ost", RequestPortal: reqPortal, Targets: ts, Logger: quiet,
		Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: echo}}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	partner := lwire.ProcessID{NID: srv.NIDs()[len(srv.NIDs())-1], PID: srv.PID()}
	imp, err := c.NewImport(ImportConfig{Target: "nacre-OST0000", Servers: []lwire.ProcessID{dead, partner}, Portal: reqPortal})
	if err != nil {
		t.Fatal(err)
	}
	defer imp.Close(context.Background())
	start = time.Now()
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	if err := imp.Connect(cctx); err != nil {
		t.Fatal(err)
	}
	if got := imp.Info().Server; got != partner {
		t.Fatalf("connected to %v, want the failover server %v", got, partner)
	}
	// The first server refuses the connection: its CONNECT fails then,
	// not at its timeout (about 6 s here).
	t.Logf("failed over after %v", time.Since(start))
	if el := time.Since(start); el > DefaultInitialTimeout {
		t.Fatalf("failed over after %v: the CONNECT to the dead server waited for its timeout", el)
	}
}

// TestSetServers: an import told of more servers (the configuration
// changed while it was connected) keeps its connection, and when its
// server dies moves on to the one after it in the new list; a list
// without the server it is connected to is taken for the next connect.
func TestSetServers(t *testing.T) {
	port := freePort(t, "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")
	cli := startLNet(t, "tcp(127.0.0.1)", port)
	serve := func(addr string) (*lnet.LNet, lwire.ProcessID) {
		srv := startLNet(t, "tcp("+addr+")", port)
		ts := NewTargetSet()
		tgt, err := ts.NewTarget(TargetConfig{Name: "nacre-OST0000", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tgt.Close(context.Background()) })
		svc, err := NewService(srv, ServiceConfig{Name: "ost", RequestPortal: reqPortal, Targets: ts, Logger: quiet,
			Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: echo}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close(context.Background()) })
		return srv, lwire.ProcessID{NID: srv.NIDs()[len(srv.NIDs())-1], PID: srv.PID()}
	}
	srvA, a := serve("127.0.0.2")
	_, b := serve("127.0.0.3")
	_, c3 := serve("127.0.0.4")
	c := NewClient(cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
	imp, err := c.NewImport(ImportConfig{Target: "nacre-OST0000", Servers: []lwire.ProcessID{a}, Portal: reqPortal,
		MinTimeout: 200 * time.Millisecond, InitialTimeout: 200 * time.Millisecond, PingInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer imp.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	echoVia := func(want lwire.ProcessID) {
		t.Helper()
		body := []byte("to " + want.NID.String())
		got, err := imp.Do(ctx, &Req{Opcode: opEcho, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("echo %q, want %q", got, body)
		}
		if srv := imp.Info().Server; srv != want {
			t.Fatalf("served by %v, want %v", srv, want)
		}
	}
	echoVia(a)

	if err := imp.SetServers(nil); err == nil {
		t.Fatal("SetServers took an empty list")
	}
	if err := imp.SetServers([]lwire.ProcessID{c3, a, b}); err != nil {
		t.Fatal(err)
	}
	if got := imp.Info().Servers; !slices.Equal(got, []lwire.ProcessID{c3, a, b}) {
		t.Fatalf("servers %v, want [%v %v %v]", got, c3, a, b)
	}
	// The connection in place stays, although a is no longer first.
	echoVia(a)

	// a dies: the import goes on to the server after it in the new list,
	// b, not to the first.
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 5*time.Second)
	srvA.Close(closeCtx)
	closeCancel()
	// b's target is not a's on shared storage: it knows nothing of the
	// client, which the reconnect finds evicted, failing the request it
	// was resending.
	if _, err := imp.Do(ctx, &Req{Opcode: opEcho}); !errors.Is(err, ErrEvicted) {
		t.Fatalf("the first request after a died: %v, want eviction by b", err)
	}
	echoVia(b)

	// A list without the server of the connection (b moved to another
	// NID, say): kept for the next connect, the connection stays.
	if err := imp.SetServers([]lwire.ProcessID{a}); err != nil {
		t.Fatal(err)
	}
	echoVia(b)
	if got := imp.Info().Servers; !slices.Equal(got, []lwire.ProcessID{a}) {
		t.Fatalf("servers %v, want [%v]", got, a)
	}
}

// TestConnectRacingClose: a CONNECT whose client record is being made
// (OnNewClient) when the target closes gets ENODEV, and leaves no export
// behind: Close, which did not see it, would never drop it.
func TestConnectRacingClose(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	te := newTgtEnv(t, loEnv, TargetConfig{OnNewClient: func(string) error {
		close(entered)
		<-release
		return nil
	}})
	imp, err := te.c.NewImport(te.importCfg())
	if err != nil {
		t.Fatal(err)
	}
	defer imp.Close(context.Background())
	<-entered
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed <- te.tgt.Close(ctx)
	}()
	waitFor(t, "the target closed", func() bool {
		te.tgt.mu.Lock()
		defer te.tgt.mu.Unlock()
		return te.tgt.closed
	})
	close(release)
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	waitFor(t, "the connect's answer", func() bool { return imp.State() != StateConnecting })
	if st := imp.State(); st == StateFull {
		t.Fatalf("connected to a closed target")
	}
	if n := len(te.tgt.Exports()); n != 0 {
		t.Fatalf("%d exports on the closed target", n)
	}
	te.ts.mu.Lock()
	handles := len(te.ts.byHandle)
	te.ts.mu.Unlock()
	if handles != 0 {
		t.Fatalf("%d export handles live in the target set after its one target closed", handles)
	}
}

// TestFailedConnects: an import counts the CONNECTs that failed since the
// last that succeeded (the MDT's allocator takes an OST whose import has
// some for out of reach), and starts over once one succeeds.
func TestFailedConnects(t *testing.T) {
	port := freePort(t, "127.0.0.1", "127.0.0.2")
	cli := startLNet(t, "tcp(127.0.0.1)", port)
	c := NewClient(cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
	srv := lwire.ProcessID{NID: lwire.MustParseNID("127.0.0.2@tcp"), PID: lwire.PIDLustre}
	imp, err := c.NewImport(ImportConfig{Target: "nacre-OST0000", Servers: []lwire.ProcessID{srv}, Portal: reqPortal,
		MinTimeout: 200 * time.Millisecond, InitialTimeout: 200 * time.Millisecond, PingInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer imp.Close(context.Background())
	waitUntil := func(what string, cond func(ConnInfo) bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(imp.Info()); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %+v", what, imp.Info())
			}
		}
	}
	waitUntil("no failed connect counted with nobody at the server", func(ci ConnInfo) bool { return ci.FailedConnects >= 2 && ci.State != StateFull })

	ln := startLNet(t, "tcp(127.0.0.2)", port)
	ts := NewTargetSet()
	tgt, err := ts.NewTarget(TargetConfig{Name: "nacre-OST0000", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close(context.Background())
	svc, err := NewService(ln, ServiceConfig{Name: "ost", RequestPortal: reqPortal, Targets: ts, Logger: quiet,
		Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: echo}}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	waitUntil("the count did not start over at the connect", func(ci ConnInfo) bool { return ci.State == StateFull && ci.FailedConnects == 0 })
}
