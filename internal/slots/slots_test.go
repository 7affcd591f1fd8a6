package slots

import (
	"context"
	"testing"
	"time"
)

// TestSlotsLimitChange: lowering the limit under holders admits nobody
// until they are below it; raising it admits waiters at once.
func TestSlotsLimitChange(t *testing.T) {
	s := New(3)
	for range 3 {
		if !s.TryAcquire() {
			t.Fatal("a free slot was refused")
		}
	}
	if s.TryAcquire() || s.TryAcquireSpare() {
		t.Fatal("a fourth slot of three")
	}
	s.SetLimit(1)
	s.Release()
	s.Release()
	if s.TryAcquire() {
		t.Fatal("admitted at the new limit while one holds a slot")
	}
	got := make(chan error, 1)
	go func() { got <- s.Acquire(context.Background()) }()
	select {
	case err := <-got:
		t.Fatalf("acquire did not wait: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	s.SetLimit(2)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if used, limit := s.State(); used != 2 || limit != 2 {
		t.Fatalf("state %d/%d", used, limit)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Acquire(ctx); err != context.Canceled {
		t.Fatalf("acquire with a cancelled context: %v", err)
	}
	s.Release()
	s.SetLimit(3)
	if !s.TryAcquireSpare() || s.TryAcquireSpare() {
		t.Fatal("read-ahead must leave one slot free")
	}
}

// Peak is the most slots held at once, whichever way they were taken.
func TestPeak(t *testing.T) {
	s := New(4)
	ctx := context.Background()
	for range 3 {
		if err := s.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.Release()
	s.Release()
	if !s.TryAcquire() || !s.TryAcquireSpare() {
		t.Fatal("free slots refused")
	}
	if used, _ := s.State(); used != 3 || s.Peak() != 3 {
		t.Fatalf("used %d, peak %d; want 3, 3", used, s.Peak())
	}
	if !s.TryAcquire() {
		t.Fatal("the last slot refused")
	}
	s.Release()
	if s.Peak() != 4 {
		t.Fatalf("peak %d, want 4", s.Peak())
	}
}
