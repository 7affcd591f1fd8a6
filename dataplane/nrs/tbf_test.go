package nrs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// tbfHead returns a TBF head on a fake clock with the given rules applied.
func tbfHead(t *testing.T, policy string, specs ...string) (*Head, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	h := mustHead(t, Config{Policy: policy, Clock: clock})
	for _, s := range specs {
		apply(t, h, s)
	}
	return h, clock
}

func apply(t *testing.T, h *Head, spec string) {
	t.Helper()
	cmd, err := ParseRule(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Apply(cmd); err != nil {
		t.Fatal(err)
	}
}

// released steps the clock by step n times, releasing what the policy
// releases after each step, and counts the releases per NID.
func released(h *Head, clock *fakeClock, step time.Duration, n int) map[lwire.NID]int {
	got := make(map[lwire.NID]int)
	for range n {
		clock.Advance(step)
		for _, it := range h.pollAll() {
			got[it.NID]++
		}
	}
	return got
}

func fill(h *Head, n int, it Item) {
	for i := range n {
		c := it
		c.Value = i
		h.Enqueue(&c)
	}
}

var (
	nidA = lwire.MustParseNID("192.168.1.5@tcp")
	nidB = lwire.MustParseNID("192.168.2.9@tcp")
	nidC = lwire.MustParseNID("10.1.1.1@o2ib")
)

func TestTBFRate(t *testing.T) {
	for _, tc := range []struct {
		rate, burst int
	}{
		{10, 1}, {10, 3}, {50, 1}, {1, 1}, {7, 2},
	} {
		t.Run(fmt.Sprintf("rate=%d,burst=%d", tc.rate, tc.burst), func(t *testing.T) {
			h, clock := tbfHead(t, "tbf", fmt.Sprintf("start r nid={192.168.1.5@tcp} rate=%d burst=%d", tc.rate, tc.burst))
			fill(h, 200, Item{NID: nidA})
			if got := len(h.pollAll()); got != tc.burst {
				t.Fatalf("at once: %d released, want the burst %d", got, tc.burst)
			}
			got := released(h, clock, 10*time.Millisecond, 100)[nidA] // one second
			if got < tc.rate-1 || got > tc.rate+tc.burst {
				t.Errorf("in 1s: %d released, want %d (±burst %d)", got, tc.rate, tc.burst)
			}
		})
	}
}

// A Get with no token sleeps on a timer and wakes when the fake clock
// reaches the next token.
func TestTBFGetWaitsForToken(t *testing.T) {
	h, clock := tbfHead(t, "tbf", "start r nid={192.168.1.5@tcp} rate=10 burst=1")
	fill(h, 3, Item{NID: nidA})
	if _, err := h.Get(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := make(chan *Item, 2)
	for range 2 {
		go func() {
			it, err := h.Get(context.Background())
			if err != nil {
				t.Error(err)
			}
			got <- it
		}()
	}
	waitWaiters(t, h, 2)
	clock.waitArmed(t, 1)
	clock.Advance(99 * time.Millisecond)
	select {
	case it := <-got:
		t.Fatalf("item %v released before its token", it.Value)
	case <-time.After(20 * time.Millisecond):
	}
	clock.Advance(time.Millisecond)
	select {
	case it := <-got:
		if it.Value != 1 {
			t.Errorf("got item %v, want 1", it.Value)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Get did not wake at the token")
	}
	clock.waitArmed(t, 1) // the other Get now waits for the third token
	clock.Advance(100 * time.Millisecond)
	select {
	case it := <-got:
		if it.Value != 2 {
			t.Errorf("got item %v, want 2", it.Value)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second Get did not wake at its token")
	}
}

// A Get sleeping on a far timer wakes when an enqueue makes something
// releasable now.
func TestTBFEnqueueWakesTimedGet(t *testing.T) {
	h, clock := tbfHead(t, "tbf", "start slow nid={192.168.1.5@tcp} rate=1 burst=1")
	fill(h, 2, Item{NID: nidA})
	h.pollAll()
	got := make(chan *Item, 1)
	go func() {
		it, _ := h.Get(context.Background())
		got <- it
	}()
	clock.waitArmed(t, 1)
	h.Enqueue(&Item{NID: nidB, Value: "b"}) // default rule, fresh bucket
	select {
	case it := <-got:
		if it.Value != "b" {
			t.Errorf("got %v, want b", it.Value)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Get slept through a releasable item")
	}
}

func TestTBFTwoRules(t *testing.T) {
	h, clock := tbfHead(t, "tbf",
		"start a nid={192.168.1.5@tcp} rate=10 burst=1",
		"start b nid={192.168.2.[1-20]@tcp} rate=40 burst=1")
	fill(h, 100, Item{NID: nidA})
	fill(h, 100, Item{NID: nidB})
	h.pollAll()
	got := released(h, clock, 5*time.Millisecond, 200)
	if got[nidA] < 9 || got[nidA] > 11 || got[nidB] < 39 || got[nidB] > 41 {
		t.Errorf("in 1s: %v released; want about 10 for %v and 40 for %v", got, nidA, nidB)
	}
}

// Each client matching a nid rule has its own bucket of the rule's rate.
func TestTBFBucketPerNID(t *testing.T) {
	h, clock := tbfHead(t, "tbf", "start lan nid={*@tcp} rate=10 burst=1")
	fill(h, 50, Item{NID: nidA})
	fill(h, 50, Item{NID: nidB})
	h.pollAll()
	got := released(h, clock, 10*time.Millisecond, 100)
	if got[nidA] != 10 || got[nidB] != 10 {
		t.Errorf("in 1s: %v; want 10 each", got)
	}
	if ri := h.Rules()[0]; ri.Classes != 2 {
		t.Errorf("rule lan has %d classes, want 2", ri.Classes)
	}
}

// The class key follows the rule's kind under "tbf", and the policy's
// under "tbf nid", "tbf jobid" and "tbf opcode".
func TestTBFClassKeys(t *testing.T) {
	items := []Item{
		{NID: nidA, JobID: "dd.1", Opcode: wire.OSTWrite},
		{NID: nidB, JobID: "dd.1", Opcode: wire.OSTWrite},
		{NID: nidA, JobID: "dd.2", Opcode: wire.OSTRead},
		{NID: nidB, JobID: "dd.2", Opcode: wire.OSTWrite},
	}
	for _, tc := range []struct {
		policy, rule string
		classes      int
	}{
		{"tbf", "start r nid={*@tcp} rate=5", 2},
		{"tbf", "start r jobid={dd.*} rate=5", 2},
		{"tbf", "start r opcode={ost_read ost_write} rate=5", 2},
		{"tbf", "start r jobid={dd.*}&opcode={ost_read ost_write} rate=5", 3},
		{"tbf", "start r nid={*@tcp} jobid={*} opcode={ost_read ost_write} rate=5", 4},
		{"tbf", "start r * rate=5", 2},
		{"tbf jobid", "start r nid={*@tcp} rate=5", 2},
		{"tbf opcode", "start r nid={*@tcp} rate=5", 2},
		{"tbf nid", "start r jobid={*} rate=5", 2},
	} {
		h, _ := tbfHead(t, tc.policy, tc.rule)
		for _, it := range items {
			h.Enqueue(&it)
		}
		if ri := h.Rules()[0]; ri.Classes != tc.classes || ri.Queued != len(items) {
			t.Errorf("%s, %q: %d classes holding %d, want %d holding %d", tc.policy, tc.rule, ri.Classes, ri.Queued, tc.classes, len(items))
		}
	}
}

// queuedBy returns each rule's queued count, by name.
func queuedBy(h *Head) map[string]int {
	m := make(map[string]int)
	for _, ri := range h.Rules() {
		if ri.Queued > 0 {
			m[ri.Rule.Name] = ri.Queued
		}
	}
	return m
}

func TestTBFClassify(t *testing.T) {
	rules := []string{
		"start login nid={192.168.1.[1-10]@tcp 0@lo} rate=100",
		"start dd jobid={dd.*} rate=50",
		"start writes opcode={ost_write} rate=20",
		"start both jobid={ior.*}&opcode={ost_read} rate=30",
		"start o2ib nid={*@o2ib} rate=5",
	}
	for _, tc := range []struct {
		name string
		it   Item
		want string
	}{
		{"nid in range", Item{NID: nidA, JobID: "dd.0", Opcode: wire.OSTWrite}, "login"},
		{"lo", Item{NID: lwire.LoNID, JobID: "x", Opcode: wire.OSTRead}, "login"},
		{"nid out of range falls to jobid", Item{NID: lwire.MustParseNID("192.168.1.11@tcp"), JobID: "dd.0", Opcode: wire.OSTRead}, "dd"},
		{"jobid glob", Item{NID: nidB, JobID: "dd.", Opcode: wire.OSTRead}, "dd"},
		{"opcode", Item{NID: nidB, JobID: "cp.1", Opcode: wire.OSTWrite}, "writes"},
		{"conjunction", Item{NID: nidB, JobID: "ior.7", Opcode: wire.OSTRead}, "both"},
		{"half a conjunction", Item{NID: nidB, JobID: "ior.7", Opcode: wire.OSTGetattr}, DefaultRuleName},
		{"wildcard net", Item{NID: nidC, JobID: "x", Opcode: wire.OSTRead}, "o2ib"},
		{"other net number", Item{NID: lwire.MustParseNID("192.168.1.5@tcp1"), JobID: "x", Opcode: wire.OSTRead}, DefaultRuleName},
		{"nothing", Item{NID: nidB, JobID: "", Opcode: wire.OBDPing}, DefaultRuleName},
	} {
		h, _ := tbfHead(t, "tbf", rules...)
		it := tc.it
		h.Enqueue(&it)
		if got := queuedBy(h); got[tc.want] != 1 || len(got) != 1 {
			t.Errorf("%s: classified as %v, want %s", tc.name, got, tc.want)
		}
	}
}

// First match wins; rank= and MoveRule change the order and so who
// matches, for queued and new requests alike.
func TestTBFRuleOrder(t *testing.T) {
	h, _ := tbfHead(t, "tbf", "start dd jobid={dd.*} rate=50", "start lan nid={*@tcp} rate=10")
	fill(h, 3, Item{NID: nidA, JobID: "dd.1"})
	if got := queuedBy(h); got["dd"] != 3 {
		t.Fatalf("before: %v", got)
	}
	apply(t, h, "start w opcode={ost_write} rate=5 rank=dd")
	h.Enqueue(&Item{NID: nidA, JobID: "dd.1", Opcode: wire.OSTWrite})
	if got := queuedBy(h); got["w"] != 1 || got["dd"] != 3 {
		t.Fatalf("after start w rank=dd: %v", got)
	}
	apply(t, h, "change lan rank=w")
	if got := queuedBy(h); got["lan"] != 4 {
		t.Fatalf("after change lan rank=w: %v", got)
	}
	var names []string
	for _, ri := range h.Rules() {
		names = append(names, ri.Rule.Name)
	}
	if want := []string{"lan", "w", "dd", DefaultRuleName}; !slices.Equal(names, want) {
		t.Errorf("order %v, want %v", names, want)
	}
	if err := h.MoveRule("lan", ""); err != nil {
		t.Fatal(err)
	}
	if got := queuedBy(h); got["w"] != 1 || got["dd"] != 3 {
		t.Fatalf("after moving lan last: %v", got)
	}
	for _, tc := range []struct {
		name, before string
		want         error
	}{
		{DefaultRuleName, "dd", ErrBadRule},
		{"nope", "dd", ErrNoRule},
		{"dd", "nope", ErrNoRule},
		{"dd", "dd", ErrBadRule},
	} {
		if err := h.MoveRule(tc.name, tc.before); !errors.Is(err, tc.want) {
			t.Errorf("MoveRule(%q, %q) = %v, want %v", tc.name, tc.before, err, tc.want)
		}
	}
}

func TestTBFChangeRule(t *testing.T) {
	h, clock := tbfHead(t, "tbf", "start r nid={192.168.1.5@tcp} rate=1 burst=1")
	fill(h, 100, Item{NID: nidA})
	if got := len(h.pollAll()); got != 1 {
		t.Fatalf("at once: %d", got)
	}
	if got := released(h, clock, 10*time.Millisecond, 10)[nidA]; got != 0 {
		t.Fatalf("in 100ms at 1/s: %d released", got)
	}
	// 0.9 tokens owed at 1/s become 0.9 tokens at 20/s: 45ms.
	apply(t, h, "change r rate=20")
	if got := released(h, clock, 10*time.Millisecond, 100)[nidA]; got < 19 || got > 21 {
		t.Errorf("in 1s after change to 20/s: %d released", got)
	}
	if err := h.ChangeRule("r", 0, 5); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if got := len(h.pollAll()); got != 5 {
		t.Errorf("after burst=5 and 1s idle: %d at once, want 5", got)
	}
	if err := h.ChangeRule(DefaultRuleName, 100, 0); err != nil {
		t.Errorf("changing the default rule: %v", err)
	}
	for _, tc := range []struct {
		name        string
		rate, burst int
		want        error
	}{
		{"nope", 5, 0, ErrNoRule},
		{"r", -1, 0, ErrBadRule},
		{"r", 0, -2, ErrBadRule},
		{"r", MaxRate + 1, 0, ErrBadRule},
	} {
		if err := h.ChangeRule(tc.name, tc.rate, tc.burst); !errors.Is(err, tc.want) {
			t.Errorf("ChangeRule(%q, %d, %d) = %v, want %v", tc.name, tc.rate, tc.burst, err, tc.want)
		}
	}
	if r := h.Rules()[0].Rule; r.Rate != 20 || r.Burst != 5 {
		t.Errorf("rule after failed changes: %+v", r)
	}
}

func TestTBFDeleteRule(t *testing.T) {
	h, clock := tbfHead(t, "tbf", "start a nid={192.168.1.5@tcp} rate=1", "start b jobid={dd.*} rate=1")
	fill(h, 10, Item{NID: nidA, JobID: "dd.1"})
	fill(h, 10, Item{NID: nidB, JobID: "dd.2"})
	fill(h, 10, Item{NID: nidC})
	if got := queuedBy(h); got["a"] != 10 || got["b"] != 10 || got[DefaultRuleName] != 10 {
		t.Fatalf("before: %v", got)
	}
	if err := h.DeleteRule("a"); err != nil {
		t.Fatal(err)
	}
	if got := queuedBy(h); got["b"] != 20 || got[DefaultRuleName] != 10 || h.Len() != 30 {
		t.Fatalf("after stop a: %v, Len %d", got, h.Len())
	}
	apply(t, h, "stop b")
	if got := queuedBy(h); got[DefaultRuleName] != 30 {
		t.Fatalf("after stop b: %v", got)
	}
	if ri := h.Rules(); len(ri) != 1 || ri[0].Classes != 3 {
		t.Fatalf("rules after stops: %v", ri)
	}
	// Every item comes out once, in arrival order within each client.
	seen := make(map[*Item]bool)
	last := make(map[lwire.NID]int)
	for range 30 {
		clock.Advance(time.Second)
		it, ok := h.poll()
		if !ok {
			t.Fatal("nothing released after a second at 10000/s")
		}
		if seen[it] {
			t.Fatalf("item %v twice", it.Value)
		}
		seen[it] = true
		if v := it.Value.(int); v < last[it.NID] {
			t.Fatalf("%v: item %d after %d", it.NID, v, last[it.NID])
		} else {
			last[it.NID] = v
		}
	}
	for _, tc := range []struct {
		name string
		want error
	}{
		{"a", ErrNoRule},
		{DefaultRuleName, ErrBadRule},
	} {
		if err := h.DeleteRule(tc.name); !errors.Is(err, tc.want) {
			t.Errorf("DeleteRule(%q) = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestTBFDefaultRule(t *testing.T) {
	h, clock := tbfHead(t, "tbf", "change default rate=10 burst=1")
	fill(h, 50, Item{NID: nidC, JobID: "anything"})
	h.pollAll()
	if got := released(h, clock, 10*time.Millisecond, 100)[nidC]; got != 10 {
		t.Errorf("default at 10/s released %d in 1s", got)
	}
	if err := h.AddRule(Rule{Name: DefaultRuleName, Match: Match{JobIDs: []string{"*"}}, Rate: 1}, ""); !errors.Is(err, ErrRuleExists) {
		t.Errorf("starting a second default rule: %v", err)
	}
}

// Among classes with a token, the earliest deadline goes first; within a
// class, arrival order.
func TestTBFDispatchOrder(t *testing.T) {
	h, clock := tbfHead(t, "tbf",
		"start fast nid={192.168.1.5@tcp} rate=100 burst=1",
		"start slow nid={192.168.2.9@tcp} rate=10 burst=1")
	for i := range 4 {
		h.Enqueue(&Item{NID: nidA, Value: fmt.Sprint("a", i)})
		h.Enqueue(&Item{NID: nidB, Value: fmt.Sprint("b", i)})
	}
	var order []string
	for range 10 {
		for _, it := range h.pollAll() {
			order = append(order, it.Value.(string))
		}
		clock.Advance(10 * time.Millisecond)
	}
	// Both fresh buckets go at once (a arrived first); then a's tokens
	// come every 10ms, b's next one only at 100ms.
	if want := []string{"a0", "b0", "a1", "a2", "a3"}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	clock.Advance(10 * time.Millisecond)
	if it, ok := h.poll(); !ok || it.Value != "b1" {
		t.Errorf("at 100ms: %v, %v; want b1", it, ok)
	}
}

func TestTBFRulesStats(t *testing.T) {
	h, clock := tbfHead(t, "tbf", "start a nid={*@tcp} rate=10 burst=2")
	fill(h, 5, Item{NID: nidA})
	fill(h, 5, Item{NID: nidB})
	fill(h, 2, Item{NID: nidC})
	h.pollAll() // 2+2 from a's classes, 2 from the default's
	ri := h.Rules()
	if len(ri) != 2 {
		t.Fatalf("%d rules", len(ri))
	}
	a, def := ri[0], ri[1]
	if a.Rule.String() != "start a nid={*@tcp} rate=10 burst=2" || a.Classes != 2 || a.Queued != 6 || a.Dispatched != 4 {
		t.Errorf("rule a: %v", a)
	}
	if def.Rule.Name != DefaultRuleName || def.Rule.Rate != DefaultRate || def.Rule.Burst != DefaultBurst ||
		def.Rule.Match.String() != "*" || def.Classes != 1 || def.Queued != 0 || def.Dispatched != 2 {
		t.Errorf("default rule: %v", def)
	}
	if got, want := a.String(), "a nid={*@tcp} rate=10 burst=2 classes=2 queued=6 dispatched=4"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	released(h, clock, 100*time.Millisecond, 10)
	st := h.Stats()
	if st.Policy != "tbf" || st.Queued != 0 || st.Dispatched != 12 || st.ByPolicy["tbf"] != 12 || st.Rules != 2 {
		t.Errorf("Stats() = %+v", st)
	}
	if err := h.SetPolicy("fifo"); err != nil {
		t.Fatal(err)
	}
	if ri := h.Rules(); ri[0].Classes != 0 || ri[0].Dispatched != 10 {
		t.Errorf("under fifo: %v", ri[0])
	}
}

// A flood of distinct clients cannot grow the class map past its bound.
func TestTBFClassBound(t *testing.T) {
	clock := newFakeClock()
	const maxQueued = 16
	h := mustHead(t, Config{MaxQueued: maxQueued, Policy: "tbf", Clock: clock})
	apply(t, h, "start lan nid={*@tcp} rate=1 burst=1")
	limit := maxQueued + 2
	classes := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.mu.tbf.classes)
	}
	for i := range 1000 { // nobody dequeues: the queue bound holds the line
		h.Enqueue(&Item{NID: nid(i)})
	}
	if st := h.Stats(); st.Queued != maxQueued || st.Rejected != 1000-maxQueued || classes() > limit {
		t.Fatalf("after a flood: %+v, %d classes", st, classes())
	}
	h.pollAll()
	for i := range 5000 { // handlers keep up: idle classes owing tokens pile up
		h.Enqueue(&Item{NID: nid(i)}) // refused when full
		if i%3 == 0 {
			h.pollAll()
		}
		if i%50 == 0 {
			clock.Advance(time.Millisecond)
		}
		if n := classes(); n > limit {
			t.Fatalf("after %d clients: %d classes, bound %d", i+1, n, limit)
		}
	}
}

func TestTBFRuleErrors(t *testing.T) {
	h, _ := tbfHead(t, "tbf", "start a jobid={x} rate=1")
	for _, tc := range []struct {
		spec string
		want error
	}{
		{"start a jobid={y} rate=1", ErrRuleExists},
		{"start default jobid={y} rate=1", ErrRuleExists},
		{"start b jobid={y} rate=1 rank=nope", ErrNoRule},
		{"change nope rate=5", ErrNoRule},
		{"change a rate=5 rank=nope", ErrNoRule},
		{"change default rank=a", ErrBadRule},
		{"stop nope", ErrNoRule},
		{"stop default", ErrBadRule},
	} {
		cmd, err := ParseRule(tc.spec)
		if err != nil {
			t.Fatalf("%q: %v", tc.spec, err)
		}
		if err := h.Apply(cmd); !errors.Is(err, tc.want) {
			t.Errorf("Apply(%q) = %v, want %v", tc.spec, err, tc.want)
		}
	}
	if r := h.Rules()[0].Rule; r.Rate != 1 {
		t.Errorf("a failed change changed rule a: %v", r)
	}
	if err := h.AddRule(Rule{Name: "bad name", Rate: 1}, ""); !errors.Is(err, ErrBadRule) {
		t.Errorf("AddRule with a bad name: %v", err)
	}
	if err := h.AddRule(Rule{Name: "z", Match: Match{NIDs: []NIDPattern{{}}}, Rate: 1}, ""); !errors.Is(err, ErrBadRule) {
		t.Errorf("AddRule with a zero NIDPattern: %v", err)
	}
	for i := len(h.Rules()); i < MaxRules; i++ {
		if err := h.AddRule(Rule{Name: fmt.Sprint("r", i), Rate: 1}, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.AddRule(Rule{Name: "onemore", Rate: 1}, ""); !errors.Is(err, ErrTooManyRules) {
		t.Errorf("rule %d: %v, want ErrTooManyRules", MaxRules+1, err)
	}
}

// Rules may be managed under fifo; they take effect when TBF starts.
func TestRulesUnderFIFO(t *testing.T) {
	clock := newFakeClock()
	h := mustHead(t, Config{Clock: clock})
	apply(t, h, "start a nid={192.168.1.5@tcp} rate=10 burst=1")
	fill(h, 20, Item{NID: nidA})
	if got := len(h.pollAll()); got != 20 {
		t.Fatalf("fifo released %d of 20", got)
	}
	fill(h, 20, Item{NID: nidA})
	if err := h.SetPolicy("tbf"); err != nil {
		t.Fatal(err)
	}
	if got := len(h.pollAll()); got != 1 {
		t.Errorf("tbf released %d at once, want 1", got)
	}
}
