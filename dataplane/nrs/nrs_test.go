package nrs

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

func mustHead(t *testing.T, cfg Config) *Head {
	t.Helper()
	h, err := NewHead(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func nid(i int) lwire.NID {
	return lwire.MustParseNID(fmt.Sprintf("10.%d.%d.%d@tcp", i>>16&255, i>>8&255, i&255))
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want error
	}{
		{Config{}, nil},
		{DefaultConfig(), nil},
		{Config{Policy: " TBF   jobid "}, nil},
		{Config{MaxQueued: -1}, ErrBadConfig},
		{Config{MaxQueued: 1 << 21}, ErrBadConfig},
		{Config{Policy: "crrn"}, ErrBadPolicy},
	} {
		err := tc.cfg.Validate()
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%+v: Validate() = %v, want %v", tc.cfg, err, tc.want)
		}
		if _, err2 := NewHead(tc.cfg); (err == nil) != (err2 == nil) {
			t.Errorf("%+v: NewHead error %v disagrees with Validate %v", tc.cfg, err2, err)
		}
	}
	h := mustHead(t, Config{Policy: "TBF  JobID"})
	if got := h.Policy(); got != PolicyTBFJobID {
		t.Errorf("Policy() = %q, want %q", got, PolicyTBFJobID)
	}
}

func TestFIFOOrder(t *testing.T) {
	for _, policy := range []string{"", "fifo"} {
		h := mustHead(t, Config{Policy: policy})
		for i := range 10 {
			if !h.Enqueue(&Item{NID: nid(i % 3), Value: i}) {
				t.Fatalf("Enqueue %d refused", i)
			}
		}
		if h.Len() != 10 {
			t.Fatalf("Len() = %d, want 10", h.Len())
		}
		for i := range 10 {
			it, err := h.Get(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if it.Value != i {
				t.Fatalf("policy %q: item %d is %v", policy, i, it.Value)
			}
		}
		if it, ok := h.TryGet(); ok {
			t.Fatalf("TryGet on an empty head returned %v", it.Value)
		}
	}
}

func TestBound(t *testing.T) {
	for _, policy := range []string{"fifo", "tbf"} {
		t.Run(policy, func(t *testing.T) {
			h := mustHead(t, Config{MaxQueued: 4, Policy: policy, Clock: newFakeClock()})
			items := make([]*Item, 5)
			for i := range items {
				items[i] = &Item{NID: nid(i), Value: i}
			}
			for i := range 4 {
				if !h.Enqueue(items[i]) {
					t.Fatalf("Enqueue %d refused under the bound", i)
				}
			}
			if h.Enqueue(items[4]) {
				t.Fatal("Enqueue past MaxQueued accepted")
			}
			if h.Enqueue(items[0]) {
				t.Fatal("Enqueue of a queued item accepted")
			}
			if h.Enqueue(nil) {
				t.Fatal("Enqueue(nil) accepted")
			}
			if _, ok := h.TryGet(); !ok {
				t.Fatal("TryGet on a full head found nothing")
			}
			if !h.Enqueue(items[4]) {
				t.Fatal("Enqueue refused after an item left")
			}
			st := h.Stats()
			if st.Queued != 4 || st.Rejected != 3 || st.Dispatched != 1 || st.ByPolicy[policy] != 1 {
				t.Errorf("Stats() = %+v", st)
			}
		})
	}
}

func TestCloseWakesGet(t *testing.T) {
	h := mustHead(t, Config{Policy: "tbf", Clock: newFakeClock()})
	errc := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := h.Get(context.Background())
			errc <- err
		}()
	}
	waitWaiters(t, h, 3)
	h.Close()
	for range 3 {
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Errorf("Get after Close = %v, want ErrClosed", err)
		}
	}
	if h.Enqueue(&Item{}) {
		t.Error("Enqueue after Close accepted")
	}
	h.Close() // again: no panic
	if _, err := h.Get(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Get on a closed head = %v", err)
	}
}

func TestCloseLeavesItemsForTryGet(t *testing.T) {
	h := mustHead(t, Config{})
	for i := range 3 {
		h.Enqueue(&Item{Value: i})
	}
	h.Close()
	for i := range 3 {
		it, ok := h.TryGet()
		if !ok || it.Value != i {
			t.Fatalf("TryGet %d after Close = %v, %v", i, it, ok)
		}
	}
}

// waitWaiters waits until n Get calls are asleep in h.
func waitWaiters(t *testing.T, h *Head, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.mu.Lock()
		got := len(h.mu.waiters)
		h.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d sleeping Get calls, have %d", n, got)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestGetContext(t *testing.T) {
	h := mustHead(t, Config{Policy: "tbf", Clock: newFakeClock()})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.Get(ctx)
		errc <- err
	}()
	waitWaiters(t, h, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Get after cancel = %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := h.Get(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get with a deadline = %v, want DeadlineExceeded", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.mu.waiters) != 0 || h.mu.signalled != 0 || h.mu.timekeeper != nil {
		t.Errorf("waiting state left behind: %d waiters, %d signalled, timekeeper %v",
			len(h.mu.waiters), h.mu.signalled, h.mu.timekeeper)
	}
}

// A Get woken for an item but cancelled before it took it must pass the
// wake-up on: the item still reaches another Get.
func TestCancelledWaiterPassesSignal(t *testing.T) {
	h := mustHead(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *Item, 1)
	go func() {
		it, _ := h.Get(context.Background())
		got <- it
	}()
	errc := make(chan error, 1)
	waitWaiters(t, h, 1)
	go func() {
		_, err := h.Get(ctx)
		errc <- err
	}()
	waitWaiters(t, h, 2)
	// Cancel the newest waiter and, before it can take the lock, enqueue:
	// wakeLocked signals the newest waiter, which leaves on its context
	// holding the signal and must pass it on.
	h.mu.Lock()
	cancel()
	h.enqueueLocked(&Item{Value: "x"}) // signals the newest waiter: the cancelled one
	if h.mu.signalled != 1 || len(h.mu.waiters) != 1 {
		t.Errorf("after enqueue: %d signalled, %d waiters; want 1, 1", h.mu.signalled, len(h.mu.waiters))
	}
	h.mu.Unlock()
	<-errc
	select {
	case it := <-got:
		if it.Value != "x" {
			t.Fatalf("got %v", it.Value)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("item never reached the remaining Get")
	}
}

// Many producers and consumers, the policy switching and rules changing
// under them: every item comes out exactly once. Run with -race.
func TestConcurrent(t *testing.T) {
	for _, policy := range []string{"fifo", "tbf"} {
		t.Run(policy, func(t *testing.T) {
			clock := newFakeClock()
			clock.step = time.Millisecond // time moves as the head reads it
			h := mustHead(t, Config{MaxQueued: 32, Policy: policy, Clock: clock})
			const producers, consumers, perProducer = 4, 4, 500
			total := producers * perProducer
			var seen sync.Map
			var got sync.WaitGroup
			got.Add(total)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			for range consumers {
				wg.Go(func() {
					for {
						it, err := h.Get(ctx)
						if err != nil {
							return
						}
						if _, dup := seen.LoadOrStore(it.Value, true); dup {
							t.Errorf("item %v delivered twice", it.Value)
						}
						got.Done()
					}
				})
			}
			for p := range producers {
				wg.Go(func() {
					for i := range perProducer {
						it := &Item{NID: nid(p*7 + i%5), JobID: fmt.Sprintf("job.%d", i%3), Opcode: wire.OSTWrite, Value: p*perProducer + i}
						for !h.Enqueue(it) {
							runtime.Gosched()
						}
					}
				})
			}
			admin := make(chan struct{})
			wg.Go(func() {
				policies := []string{"tbf", "fifo", "tbf jobid", policy}
				for i := 0; ; i++ {
					select {
					case <-admin:
						return
					default:
					}
					if err := h.SetPolicy(policies[i%len(policies)]); err != nil {
						t.Error(err)
					}
					if err := h.AddRule(Rule{Name: "r", Match: Match{JobIDs: []string{"job.1"}}, Rate: MaxRate}, ""); err != nil {
						t.Error(err)
					}
					if err := h.ChangeRule("r", MaxRate/2, 5); err != nil {
						t.Error(err)
					}
					if err := h.DeleteRule("r"); err != nil {
						t.Error(err)
					}
					_ = h.Rules()
					_ = h.Stats()
					runtime.Gosched()
				}
			})
			done := make(chan struct{})
			go func() { got.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("only some of %d items delivered; %d queued", total, h.Len())
			}
			close(admin)
			cancel()
			wg.Wait()
			if h.Len() != 0 {
				t.Errorf("Len() = %d after every item was delivered", h.Len())
			}
			if st := h.Stats(); st.Dispatched != uint64(total) {
				t.Errorf("Dispatched = %d, want %d", st.Dispatched, total)
			}
		})
	}
}

func TestSetPolicyKeepsItems(t *testing.T) {
	clock := newFakeClock()
	h := mustHead(t, Config{Clock: clock})
	if err := h.AddRule(Rule{Name: "slow", Match: Match{JobIDs: []string{"dd.*"}}, Rate: 1, Burst: 1}, ""); err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		h.Enqueue(&Item{NID: nid(i % 4), JobID: fmt.Sprintf("dd.%d", i%2), Opcode: wire.Opcode(i % 3), Value: i})
	}
	for _, p := range []string{"tbf", "tbf jobid", "tbf nid", "tbf opcode", "tbf", "fifo"} {
		if err := h.SetPolicy(p); err != nil {
			t.Fatal(err)
		}
		if h.Len() != n {
			t.Fatalf("after SetPolicy(%q): Len() = %d, want %d", p, h.Len(), n)
		}
		if p != "fifo" && h.Stats().Classes == 0 {
			t.Fatalf("after SetPolicy(%q): no classes", p)
		}
	}
	for i := range n { // back on fifo: arrival order is intact
		it, ok := h.TryGet()
		if !ok || it.Value != i {
			t.Fatalf("item %d: TryGet = %v, %v", i, it, ok)
		}
	}
	if err := h.SetPolicy("orr"); !errors.Is(err, ErrBadPolicy) {
		t.Errorf("SetPolicy(orr) = %v, want ErrBadPolicy", err)
	}
	if h.Policy() != "fifo" {
		t.Errorf("a failed SetPolicy changed the policy to %q", h.Policy())
	}
}
