package nrs

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Clock that moves only when the test says so: Advance moves
// it and fires the timers that are due. With step set, every Now call also
// moves it by step, which lets stress tests run TBF without wall time.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	step   time.Duration
	timers []*fakeTimer // armed, unfired timers
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now
	if c.step > 0 {
		c.now = c.now.Add(c.step)
		c.fireLocked()
	}
	return now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, when: c.now.Add(d), ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	c.fireLocked()
	return t
}

// Advance moves the clock by d and fires every timer due by then.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fireLocked()
}

func (c *fakeClock) fireLocked() {
	c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool {
		if t.when.After(c.now) {
			return false
		}
		t.ch <- c.now
		return true
	})
}

// armed returns the number of timers waiting to fire.
func (c *fakeClock) armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// waitArmed waits (in real time, briefly) until at least n timers are
// armed: a Get that found no token has gone to sleep.
func (c *fakeClock) waitArmed(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.armed() < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d armed timers, have %d", n, c.armed())
		}
		time.Sleep(time.Millisecond)
	}
}

type fakeTimer struct {
	c    *fakeClock
	when time.Time
	ch   chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	i := slices.Index(t.c.timers, t)
	if i < 0 {
		return false
	}
	t.c.timers = slices.Delete(t.c.timers, i, i+1)
	return true
}

// poll is a Get that does not wait: the item the policy releases now, if
// any. Tests drive TBF with it one clock step at a time.
func (h *Head) poll() (*Item, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	it, _ := h.dequeueLocked(h.clock.Now())
	return it, it != nil
}

// pollAll releases every item the policy releases now.
func (h *Head) pollAll() []*Item {
	var out []*Item
	for {
		it, ok := h.poll()
		if !ok {
			return out
		}
		out = append(out, it)
	}
}
