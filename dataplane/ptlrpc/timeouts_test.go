package ptlrpc

import (
	"context"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
)

// setNodeTimeouts changes the node's timeouts for one test and puts them
// back after it.
func setNodeTimeouts(t *testing.T, change func(*Timeouts)) {
	t.Helper()
	old := NodeTimeouts()
	if err := UpdateNodeTimeouts(change); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := UpdateNodeTimeouts(func(t *Timeouts) { *t = old }); err != nil {
			panic(err)
		}
	})
}

func TestNodeTimeoutsValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Timeouts)
		ok     bool
	}{
		{"obd_timeout under a second", func(t *Timeouts) { t.Obd = time.Millisecond }, false},
		{"negative at_min", func(t *Timeouts) { t.ATMin = -time.Second }, false},
		{"negative at_max", func(t *Timeouts) { t.ATMax = -time.Second }, false},
		{"at_min above at_max", func(t *Timeouts) { t.ATMin, t.ATMax = 20*time.Second, 10*time.Second }, false},
		{"no history", func(t *Timeouts) { t.ATHistory = 0 }, false},
		{"adaptive timeouts off with a floor", func(t *Timeouts) { t.ATMin, t.ATMax = 20*time.Second, 0 }, true},
		{"short obd_timeout", func(t *Timeouts) { t.Obd = time.Second }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := NodeTimeouts()
			err := UpdateNodeTimeouts(tc.change)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				after := NodeTimeouts()
				want := before
				tc.change(&want)
				if after != want {
					t.Fatalf("timeouts %+v, want %+v", after, want)
				}
				if err := UpdateNodeTimeouts(func(t *Timeouts) { *t = before }); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted: %+v", NodeTimeouts())
			}
			if got := NodeTimeouts(); got != before {
				t.Fatalf("a refused change left %+v, was %+v", got, before)
			}
		})
	}
}

// TestImportTimeoutFollowsNode: an import's request timeout follows the
// node's at_min, at_max and (adaptive timeouts off) obd_timeout as they
// change, within its own MaxTimeout if it has one.
func TestImportTimeoutFollowsNode(t *testing.T) {
	te := newTgtEnv(t, loEnv, TargetConfig{AutoCommit: true})
	imp := te.newImport(t, te.importCfg())
	capped := te.importCfg()
	capped.MaxTimeout = 3 * time.Second
	imp3 := te.newImport(t, capped)
	base := imp.Info().Timeout
	if base >= time.Second {
		t.Fatalf("timeout %v of a fresh fast import", base)
	}
	setNodeTimeouts(t, func(t *Timeouts) { t.ATMin = 30 * time.Second })
	if got := imp.Info().Timeout; got < 30*time.Second*5/4 || got > 40*time.Second {
		t.Fatalf("at_min 30s: timeout %v, want 37.5s and a margin", got)
	}
	if got := imp3.Info().Timeout; got != 3*time.Second {
		t.Fatalf("at_min 30s: an import of MaxTimeout 3s waits %v", got)
	}
	setNodeTimeouts(t, func(t *Timeouts) { t.ATMin, t.ATMax = 8*time.Second, 9*time.Second })
	if got := imp.Info().Timeout; got != 9*time.Second {
		t.Fatalf("at_min 8s, at_max 9s: timeout %v, want 9s", got)
	}
	setNodeTimeouts(t, func(t *Timeouts) { t.ATMin, t.ATMax, t.Obd = 0, 0, 42*time.Second })
	if got := imp.Info().Timeout; got != 42*time.Second {
		t.Fatalf("adaptive timeouts off: timeout %v, want obd_timeout 42s", got)
	}
	if got := imp3.Info().Timeout; got != 3*time.Second {
		t.Fatalf("adaptive timeouts off: an import of MaxTimeout 3s waits %v", got)
	}
	setNodeTimeouts(t, func(t *Timeouts) { *t = DefaultTimeouts() })
	if got := imp.Info().Timeout; got != base {
		t.Fatalf("defaults again: timeout %v, was %v", got, base)
	}
}

// TestATOffNoEarlyReplies: with at_max 0 a server sends no early replies:
// a request slower than the client's timeout (obd_timeout now) times
// out and is resent, the resend dropped while the original runs, and the
// original's reply ends the call; the handler runs once.
func TestATOffNoEarlyReplies(t *testing.T) {
	te := newTgtEnv(t, loEnv, TargetConfig{AutoCommit: true})
	imp := te.newImport(t, te.importCfg())
	setNodeTimeouts(t, func(t *Timeouts) { t.ATMax, t.Obd = 0, time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := imp.Do(ctx, &Req{Opcode: opSlow, Body: ms(1500 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if count(got) != 1 || te.runs.Load() != 1 {
		t.Fatalf("reply count %d, handler ran %d times", count(got), te.runs.Load())
	}
	if st := te.svc.Stats(); st.EarlyReplies != 0 {
		t.Fatalf("%d early replies with adaptive timeouts off", st.EarlyReplies)
	}
	if st := te.c.Stats(); st.Timeouts < 1 || st.Resent < 1 {
		t.Fatalf("client stats %+v: the request did not time out after obd_timeout", st)
	}
}

// TestATMaxCapsEarlyReplies: early replies keep a slow request going for
// at most at_max; past it the client's timeout runs out and it resends.
// Under the default at_max the same request needs no resend.
func TestATMaxCapsEarlyReplies(t *testing.T) {
	slow := func(t *testing.T) (ServiceStats, ClientStats) {
		te := newTgtEnv(t, loEnv, TargetConfig{AutoCommit: true})
		imp := te.newImport(t, te.importCfg())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got, err := imp.Do(ctx, &Req{Opcode: opSlow, Body: ms(2500 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		if count(got) != 1 || te.runs.Load() != 1 {
			t.Fatalf("reply count %d, handler ran %d times", count(got), te.runs.Load())
		}
		return te.svc.Stats(), te.c.Stats()
	}
	t.Run("default", func(t *testing.T) {
		svc, cli := slow(t)
		if svc.EarlyReplies < 1 || cli.Timeouts != 0 || cli.Resent != 0 {
			t.Fatalf("service %+v, client %+v", svc, cli)
		}
	})
	t.Run("at_max=1s", func(t *testing.T) {
		setNodeTimeouts(t, func(t *Timeouts) { t.ATMax = time.Second })
		svc, cli := slow(t)
		if svc.EarlyReplies < 1 || cli.Timeouts < 1 || cli.Resent < 1 {
			t.Fatalf("service %+v, client %+v: early replies went on past at_max", svc, cli)
		}
	})
}

// TestObdTimeoutPingAndEvict: a shorter obd_timeout applies at once to
// targets and imports that set no interval of their own: a silent client
// is evicted after six ping intervals, and a client that pings at the
// new interval (not the old 25 s) keeps its export.
func TestObdTimeoutPingAndEvict(t *testing.T) {
	t.Run("silent", func(t *testing.T) {
		te := newTgtEnv(t, loEnv, TargetConfig{AutoCommit: true})
		te.newImport(t, te.importCfg()) // PingInterval -1
		start := time.Now()
		setNodeTimeouts(t, func(t *Timeouts) { t.Obd = time.Second }) // evicts after 6s
		select {
		case ev := <-te.gone:
			if !ev {
				t.Fatal("export gone, but not evicted")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("silent client not evicted after obd_timeout went down to 1s")
		}
		if d := time.Since(start); d < 6*time.Second {
			t.Fatalf("evicted after %v, before six ping intervals", d)
		}
	})
	t.Run("pinging", func(t *testing.T) {
		te := newTgtEnv(t, loEnv, TargetConfig{AutoCommit: true})
		cfg := te.importCfg()
		cfg.PingInterval = 0 // the node's
		imp := te.newImport(t, cfg)
		handle := imp.Info().Handle
		setNodeTimeouts(t, func(t *Timeouts) { t.Obd = time.Second }) // pings every 1s, evicts after 6s
		select {
		case <-te.gone:
			t.Fatalf("pinging client's export gone; import %+v", imp.Info())
		case <-time.After(6500 * time.Millisecond):
		}
		if info := imp.Info(); info.Handle != handle || info.State != StateFull {
			t.Fatalf("import %+v, handle was %x", info, handle)
		}
		if n := te.svc.Stats().Ops[wire.OBDPing].Count; n < 4 {
			t.Fatalf("%d pings in 6.5s at a 1s interval", n)
		}
	})
}

// TestEstimatorFollowsATHistory: a peak is forgotten once at_history has
// passed, as at_history is when the measurements come.
func TestEstimatorFollowsATHistory(t *testing.T) {
	setNodeTimeouts(t, func(t *Timeouts) { t.ATHistory = 4 * time.Second })
	e := newEstimator(0, 0)
	t0 := time.Now()
	e.add(t0, 5*time.Second)
	e.add(t0.Add(1500*time.Millisecond), time.Millisecond)
	if got := e.current(); got != 5*time.Second {
		t.Fatalf("estimate %v within the history, want the 5s peak", got)
	}
	e.add(t0.Add(6*time.Second), 2*time.Millisecond)
	if got := e.current(); got != 2*time.Millisecond {
		t.Fatalf("estimate %v after at_history passed, want 2ms", got)
	}
	setNodeTimeouts(t, func(t *Timeouts) { t.ATHistory = time.Hour })
	e.add(t0.Add(7*time.Second), 3*time.Second)
	e.add(t0.Add(20*time.Minute), time.Millisecond)
	if got := e.current(); got != 3*time.Second {
		t.Fatalf("estimate %v with an hour of history, want the 3s peak of 20 minutes ago", got)
	}
}

// TestATOffClientTakesNoEarlyReplies: a client whose node has adaptive
// timeouts off (at_max 0) does not flag its requests MsgATSupport, so
// the server, adaptive timeouts on or not, does not watch them for early
// replies; and an early reply that comes all the same does not extend the
// request, which times out after obd_timeout (Lustre: no
// MSGHDR_AT_SUPPORT, no early replies).
func TestATOffClientTakesNoEarlyReplies(t *testing.T) {
	te := newTgtEnv(t, loEnv, TargetConfig{AutoCommit: true})
	imp := te.newImport(t, te.importCfg())
	setNodeTimeouts(t, func(t *Timeouts) { t.ATMax, t.Obd = 0, time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, done := te.hold(t, ctx, imp)
	if req.Header.Flags&wire.MsgATSupport != 0 {
		t.Errorf("request flags %v: AT_SUPPORT with at_max 0", req.Header.Flags)
	}
	te.svc.erMu.Lock()
	watched := req.erIdx >= 0
	te.svc.erMu.Unlock()
	if watched {
		t.Errorf("the server watches for early replies a request of a client with adaptive timeouts off")
	}
	// A server that sends one all the same, asking for an hour more.
	te.svc.erMu.Lock()
	req.erTimeout = time.Hour
	te.svc.sendEarly(req)
	te.svc.erMu.Unlock()
	// The request still times out after obd_timeout (1s) and is resent.
	for te.c.Stats().Timeouts == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("no timeout after an early reply to a client with adaptive timeouts off: client %+v", te.c.Stats())
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(te.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := te.c.Stats(); st.EarlyReplies != 0 {
		t.Fatalf("client counted %d early replies with adaptive timeouts off", st.EarlyReplies)
	}
	if n := te.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

// TestEarlyReplyCappedByATMax: no early reply extends a request's
// deadline past its arrival plus at_max: the extension that would is cut
// short to end there, and after it none is sent (Lustre's
// ptlrpc_at_send_early_reply: "couldn't add any time").
func TestEarlyReplyCappedByATMax(t *testing.T) {
	setNodeTimeouts(t, func(t *Timeouts) { t.ATMin, t.ATMax = 0, 2*time.Second })
	ln := startLNet(t, "", 0)
	s := startService(t, ln, reqPortal)
	t0 := time.Now()
	limit := t0.Add(2 * time.Second)
	r := &Request{Arrived: t0, erTimeout: time.Second, erDeadline: t0.Add(time.Second), erIdx: -1}
	s.erMu.Lock()
	defer s.erMu.Unlock()
	for _, step := range []struct {
		at       time.Duration // since arrival
		ext      time.Duration // extension wanted, 0 none
		deadline time.Duration // since arrival, after it
	}{
		{900 * time.Millisecond, time.Second, 1900 * time.Millisecond},
		{1800 * time.Millisecond, 200 * time.Millisecond, 2 * time.Second}, // cut short at at_max
		{1950 * time.Millisecond, 0, 2 * time.Second},                      // nothing left to add
	} {
		now := t0.Add(step.at)
		ext := s.extendLocked(r, now)
		if ext != step.ext || !r.erDeadline.Equal(t0.Add(step.deadline)) {
			t.Fatalf("at %v: extension %v, deadline arrival+%v; want %v, arrival+%v", step.at, ext, r.erDeadline.Sub(t0), step.ext, step.deadline)
		}
		if r.erDeadline.After(limit) {
			t.Fatalf("at %v: deadline arrival+%v past at_max 2s", step.at, r.erDeadline.Sub(t0))
		}
		if ext > 0 && r.erTimeout != ext {
			t.Fatalf("at %v: the early reply would tell %v, the extension is %v", step.at, r.erTimeout, ext)
		}
	}
}
