package ptlrpc

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/nrs"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
)

// fakeClock is an nrs.Clock the test moves by hand.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	clk   *fakeClock
	at    time.Time
	c     chan time.Time
	fired bool
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) nrs.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clk: c, at: c.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.fired = true
		t.c <- c.now
	} else {
		c.timers = append(c.timers, t)
	}
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }
func (t *fakeTimer) Stop() bool {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	was := !t.fired
	t.fired = true
	return was
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if !t.fired && !t.at.After(c.now) {
			t.fired = true
			t.c <- c.now
		}
	}
}

// TestServiceTBF: a service's NRS policy and TBF rules change while it
// runs; a rule limits one opcode to its rate (on an injected clock), other
// opcodes pass, and the rule's statistics count what went through it.
func TestServiceTBF(t *testing.T) {
	e := loEnv(t)
	clk := &fakeClock{now: time.Unix(1000, 0)}
	s, err := NewService(e.srv, ServiceConfig{Name: "tbf", RequestPortal: reqPortal, Logger: quiet, Clock: clk,
		Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: echo}, opBlock: {Fn: echo}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Call(ctx, e.target, reqPortal, opEcho, []byte("fifo")); err != nil {
		t.Fatal(err)
	}
	if err := s.NRS().SetPolicy("tbf"); err != nil {
		t.Fatal(err)
	}
	cmd, err := nrs.ParseRule("start slow opcode={" + opEcho.String() + "} rate=1 burst=1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.NRS().Apply(cmd); err != nil {
		t.Fatal(err)
	}
	calls := make([]Call, 3)
	for i := range calls {
		calls[i] = Call{Target: e.target, Portal: reqPortal, Opcode: opEcho, Body: []byte{byte(i)}}
	}
	var res []Result
	done := make(chan struct{})
	go func() { res = c.CallSet(ctx, calls); close(done) }()
	waitQueued := func(n int) {
		deadline := time.Now().Add(5 * time.Second)
		for s.Stats().Queued != n {
			if time.Now().After(deadline) {
				t.Fatalf("queued %d, want %d", s.Stats().Queued, n)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitQueued(2) // one token: one request ran, two wait
	// Another opcode is not limited by the rule.
	if _, err := c.Call(ctx, e.target, reqPortal, opBlock, []byte("other")); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	waitQueued(1)
	clk.advance(time.Second)
	<-done
	for i, r := range res {
		if r.Err != nil || len(r.Reply) != 1 || r.Reply[0] != byte(i) {
			t.Fatalf("call %d: %v %v", i, r.Reply, r.Err)
		}
	}
	var slow *nrs.RuleInfo
	for _, ri := range s.NRS().Rules() {
		if ri.Rule.Name == "slow" {
			slow = &ri
		}
	}
	if slow == nil || slow.Dispatched != 3 || slow.Queued != 0 {
		t.Fatalf("rules %+v", s.NRS().Rules())
	}
	if err := s.NRS().SetPolicy("fifo"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, e.target, reqPortal, opEcho, []byte("fifo again")); err != nil {
		t.Fatal(err)
	}
}
