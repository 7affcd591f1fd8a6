package osc

import (
	"context"
	"testing"
	"time"
)

// TestSlotsLimitChange: lowering the limit under holders admits nobody
// until they are below it; raising it admits waiters at once.
func TestSlotsLimitChange(t *testing.T) {
	s := newSlots(3)
	for range 3 {
		if !s.tryAcquire() {
			t.Fatal("a free slot was refused")
		}
	}
	if s.tryAcquire() || s.tryAcquireSpare() {
		t.Fatal("a fourth slot of three")
	}
	s.setLimit(1)
	s.release()
	s.release()
	if s.tryAcquire() {
		t.Fatal("admitted at the new limit while one holds a slot")
	}
	got := make(chan error, 1)
	go func() { got <- s.acquire(context.Background()) }()
	select {
	case err := <-got:
		t.Fatalf("acquire did not wait: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	s.setLimit(2)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if used, limit := s.state(); used != 2 || limit != 2 {
		t.Fatalf("state %d/%d", used, limit)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.acquire(ctx); err != context.Canceled {
		t.Fatalf("acquire with a cancelled context: %v", err)
	}
	s.release()
	s.setLimit(3)
	if !s.tryAcquireSpare() || s.tryAcquireSpare() {
		t.Fatal("read-ahead must leave one slot free")
	}
}
