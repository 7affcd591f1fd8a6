package nrs

import (
	"context"
	"testing"
	"time"
)

// EnqueueOrTake hands an item back only when it would be the next released
// at once; otherwise it queues it, behind what came earlier.
func TestEnqueueOrTake(t *testing.T) {
	t.Run("fifo", func(t *testing.T) {
		h := mustHead(t, Config{MaxQueued: 2})
		a := &Item{NID: nidA, Value: "a"}
		if taken, ok := h.EnqueueOrTake(a); !taken || !ok {
			t.Fatalf("empty head: EnqueueOrTake = %v, %v; want taken", taken, ok)
		}
		if st := h.Stats(); st.Queued != 0 || st.Dispatched != 1 || st.ByPolicy[PolicyFIFO] != 1 {
			t.Errorf("after a take: %+v, want nothing queued and one dispatched", st)
		}
		// Something queued: the next one queues behind it, and Get
		// returns them in order.
		b, c := &Item{NID: nidA, Value: "b"}, &Item{NID: nidB, Value: "c"}
		if !h.Enqueue(b) {
			t.Fatal("Enqueue refused")
		}
		if taken, ok := h.EnqueueOrTake(c); taken || !ok {
			t.Fatalf("behind a queued item: EnqueueOrTake = %v, %v; want queued", taken, ok)
		}
		for _, want := range []*Item{b, c} {
			got, err := h.Get(context.Background())
			if err != nil || got != want {
				t.Fatalf("Get = %v, %v; want %v", got, err, want.Value)
			}
		}
		// Full, then closed: refused, counted as Enqueue counts.
		h.Enqueue(&Item{Value: 1})
		h.Enqueue(&Item{Value: 2})
		if taken, ok := h.EnqueueOrTake(&Item{Value: 3}); taken || ok {
			t.Errorf("full head: EnqueueOrTake = %v, %v; want refused", taken, ok)
		}
		h.TryGet()
		h.TryGet()
		h.Close()
		if taken, ok := h.EnqueueOrTake(&Item{Value: 4}); taken || ok {
			t.Errorf("closed head: EnqueueOrTake = %v, %v; want refused", taken, ok)
		}
		if st := h.Stats(); st.Rejected != 2 {
			t.Errorf("Rejected = %d, want 2", st.Rejected)
		}
	})
	t.Run("tbf", func(t *testing.T) {
		h, clock := tbfHead(t, "tbf", "start r nid={192.168.1.5@tcp} rate=10 burst=1")
		if taken, _ := h.EnqueueOrTake(&Item{NID: nidA, Value: 0}); !taken {
			t.Fatal("first item with a token in its bucket: not taken")
		}
		// The bucket is empty: the next waits for its token in the head,
		// and a sleeping Get gets it then.
		it := &Item{NID: nidA, Value: 1}
		if taken, ok := h.EnqueueOrTake(it); taken || !ok {
			t.Fatalf("no token: EnqueueOrTake = %v, %v; want queued", taken, ok)
		}
		// Another class with a token of its own is still not taken past
		// the queued item: the caller would run it out of turn.
		if taken, ok := h.EnqueueOrTake(&Item{NID: nidB, Value: 2}); taken || !ok {
			t.Fatalf("behind a waiting item: EnqueueOrTake = %v, %v; want queued", taken, ok)
		}
		got := make(chan *Item, 1)
		go func() {
			it, err := h.Get(context.Background())
			if err != nil {
				t.Error(err)
			}
			got <- it
		}()
		if it2 := <-got; it2.Value != 2 {
			t.Fatalf("Get = %v, want the other class's item 2, which has a token", it2.Value)
		}
		go func() {
			it, err := h.Get(context.Background())
			if err != nil {
				t.Error(err)
			}
			got <- it
		}()
		clock.waitArmed(t, 1)
		clock.Advance(100 * time.Millisecond)
		select {
		case g := <-got:
			if g != it {
				t.Errorf("Get = %v, want item 1", g.Value)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the queued item was not released at its token")
		}
	})
}

// Poll returns what Get would return at once, and nil where Get would
// wait: an empty head, an item without its TBF token, a closed head.
func TestPoll(t *testing.T) {
	h := mustHead(t, Config{MaxQueued: 4})
	if it := h.Poll(); it != nil {
		t.Fatalf("empty head: Poll = %v", it.Value)
	}
	a, b := &Item{NID: nidA, Value: "a"}, &Item{NID: nidB, Value: "b"}
	h.Enqueue(a)
	h.Enqueue(b)
	for _, want := range []*Item{a, b} {
		if got := h.Poll(); got != want {
			t.Fatalf("Poll = %v, want %v", got, want.Value)
		}
	}
	if st := h.Stats(); st.Queued != 0 || st.Dispatched != 2 {
		t.Errorf("after two polls: %+v", st)
	}
	h.Enqueue(&Item{Value: "c"})
	h.Close()
	if it := h.Poll(); it != nil {
		t.Errorf("closed head: Poll = %v (TryGet drains it)", it.Value)
	}

	th, clock := tbfHead(t, "tbf", "start r nid={192.168.1.5@tcp} rate=10 burst=1")
	th.Enqueue(&Item{NID: nidA, Value: 0})
	th.Enqueue(&Item{NID: nidA, Value: 1})
	if it := th.Poll(); it == nil || it.Value != 0 {
		t.Fatalf("token in the bucket: Poll = %v", it)
	}
	if it := th.Poll(); it != nil {
		t.Fatalf("no token: Poll = %v, want nil", it.Value)
	}
	clock.Advance(100 * time.Millisecond)
	if it := th.Poll(); it == nil || it.Value != 1 {
		t.Fatalf("token back: Poll = %v", it)
	}
}
