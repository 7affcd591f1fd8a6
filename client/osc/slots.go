package osc

import (
	"context"
	"sync"
)

// slots is a counting semaphore whose limit may change while it is in
// use (max_rpcs_in_flight set at run time): lowering the limit lets the
// holders finish and admits nobody until fewer than the new limit hold a
// slot; raising it admits waiters at once. Safe for concurrent use.
type slots struct {
	mu struct {
		sync.Mutex
		limit, used int
		// freed is closed and replaced when a slot may have become free.
		freed chan struct{}
	}
}

func newSlots(limit int) *slots {
	s := &slots{}
	s.mu.limit = limit
	s.mu.freed = make(chan struct{})
	return s
}

// tryAcquire takes a slot if one is free.
func (s *slots) tryAcquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.used >= s.mu.limit {
		return false
	}
	s.mu.used++
	return true
}

// tryAcquireSpare takes a slot only if another would still be free after
// it (read-ahead keeps one for readers).
func (s *slots) tryAcquireSpare() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.used+1 >= s.mu.limit {
		return false
	}
	s.mu.used++
	return true
}

// acquire waits for a slot until ctx ends.
func (s *slots) acquire(ctx context.Context) error {
	for {
		s.mu.Lock()
		if s.mu.used < s.mu.limit {
			s.mu.used++
			s.mu.Unlock()
			return nil
		}
		ch := s.mu.freed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release gives a slot back.
func (s *slots) release() {
	s.mu.Lock()
	s.mu.used--
	s.wakeLocked()
	s.mu.Unlock()
}

// setLimit changes the limit.
func (s *slots) setLimit(n int) {
	s.mu.Lock()
	s.mu.limit = n
	s.wakeLocked()
	s.mu.Unlock()
}

// state returns the slots held and the limit.
func (s *slots) state() (used, limit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.used, s.mu.limit
}

func (s *slots) wakeLocked() {
	close(s.mu.freed)
	s.mu.freed = make(chan struct{})
}
