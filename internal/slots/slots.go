// Package slots is a counting semaphore whose limit may change while it is
// in use: an RPC-in-flight limit (max_rpcs_in_flight) set at run time.
package slots

import (
	"context"
	"sync"
)

// Slots is a counting semaphore whose limit may change while it is in
// use (max_rpcs_in_flight set at run time): lowering the limit lets the
// holders finish and admits nobody until fewer than the new limit hold a
// slot; raising it admits waiters at once. Safe for concurrent use.
type Slots struct {
	mu struct {
		sync.Mutex
		limit, used int
		peak        int // the most slots held at once
		// freed is closed and replaced when a slot may have become free
		// and someone waits for one (waiting).
		freed   chan struct{}
		waiting int
	}
}

// New returns Slots with limit slots.
func New(limit int) *Slots {
	s := &Slots{}
	s.mu.limit = limit
	s.mu.freed = make(chan struct{})
	return s
}

// TryAcquire takes a slot if one is free.
func (s *Slots) TryAcquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.used >= s.mu.limit {
		return false
	}
	s.takeLocked()
	return true
}

// TryAcquireSpare takes a slot only if another would still be free after
// it (read-ahead keeps one for readers).
func (s *Slots) TryAcquireSpare() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.used+1 >= s.mu.limit {
		return false
	}
	s.takeLocked()
	return true
}

// Acquire waits for a slot until ctx ends.
func (s *Slots) Acquire(ctx context.Context) error {
	for {
		s.mu.Lock()
		if s.mu.used < s.mu.limit {
			s.takeLocked()
			s.mu.Unlock()
			return nil
		}
		ch := s.mu.freed
		s.mu.waiting++
		s.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
		s.mu.Lock()
		s.mu.waiting--
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// Release gives a slot back.
func (s *Slots) Release() {
	s.mu.Lock()
	s.mu.used--
	s.wakeLocked()
	s.mu.Unlock()
}

// SetLimit changes the limit.
func (s *Slots) SetLimit(n int) {
	s.mu.Lock()
	s.mu.limit = n
	s.wakeLocked()
	s.mu.Unlock()
}

// State returns the slots held and the limit.
func (s *Slots) State() (used, limit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.used, s.mu.limit
}

// Peak returns the most slots held at once so far.
func (s *Slots) Peak() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.peak
}

func (s *Slots) takeLocked() {
	s.mu.used++
	s.mu.peak = max(s.mu.peak, s.mu.used)
}

// wakeLocked wakes the waiters, if any (a release with nobody waiting,
// the common case on an RPC's path, makes no new channel).
func (s *Slots) wakeLocked() {
	if s.mu.waiting == 0 {
		return
	}
	close(s.mu.freed)
	s.mu.freed = make(chan struct{})
}
