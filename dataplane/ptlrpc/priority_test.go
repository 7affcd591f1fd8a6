package ptlrpc

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
)

// TestHighPriorityNotBehindBlocked: every handler goroutine the service
// may run is blocked in a handler that waits for a request of another
// kind (as a destroy waits in a lock enqueue for the clients' cancels);
// that request, HighPriority, still runs at once on the service's own
// goroutines for it, and releases them all.
func TestHighPriorityNotBehindBlocked(t *testing.T) {
	const opBlock, opRelease = wire.OSTDestroy, wire.LDLMCancel
	for _, mk := range []struct {
		name string
		env  func(testing.TB) env
	}{{"lolnd", loEnv}, {"socklnd", sockEnv}} {
		t.Run(mk.name, func(t *testing.T) {
			e := mk.env(t)
			released := make(chan struct{})
			var once sync.Once
			block := func(ctx context.Context, r *Request) ([]byte, int32) {
				Blocking(ctx) // as a lock enqueue does before it waits
				select {
				case <-released:
					return nil, 0
				case <-time.After(20 * time.Second):
					return nil, -int32(syscall.ETIMEDOUT)
				}
			}
			release := func(context.Context, *Request) ([]byte, int32) {
				once.Do(func() { close(released) })
				return nil, 0
			}
			s, err := NewService(e.srv, ServiceConfig{Name: "ost", RequestPortal: reqPortal, MinThreads: 2, MaxThreads: 2, Logger: quiet,
				Handlers: map[wire.Opcode]HandlerSpec{
					opBlock:   {Fn: block},
					opRelease: {Fn: release, Flags: HighPriority},
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			// More blocked requests than handler goroutines (and requests
			// run where they arrive, which MaxThreads bounds too).
			const n = 6
			errs := make(chan error, n)
			for range n {
				go func() { _, err := c.Call(ctx, e.target, reqPortal, opBlock, nil); errs <- err }()
			}
			deadline := time.Now().Add(5 * time.Second)
			for s.Stats().Received < n {
				if time.Now().After(deadline) {
					t.Fatalf("the service received %d of %d requests", s.Stats().Received, n)
				}
				time.Sleep(time.Millisecond)
			}
			start := time.Now()
			if _, err := c.Call(ctx, e.target, reqPortal, opRelease, nil); err != nil {
				t.Fatalf("the high-priority request: %v", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the high-priority request took %v", d)
			}
			for range n {
				if err := <-errs; err != nil {
					t.Errorf("a blocked request: %v", err)
				}
			}
		})
	}
}

// TestHighPriorityStats: the high-priority queue and goroutines show in
// the service's stats, apart from the others.
func TestHighPriorityStats(t *testing.T) {
	e := loEnv(t)
	release := make(chan struct{})
	block := func(context.Context, *Request) ([]byte, int32) {
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		return nil, 0
	}
	s, err := NewService(e.srv, ServiceConfig{Name: "ost", RequestPortal: reqPortal, MinThreads: 2, MaxThreads: 2, Logger: quiet,
		Handlers: map[wire.Opcode]HandlerSpec{wire.LDLMCancel: {Fn: block, Flags: HighPriority}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if st := s.Stats(); st.HPThreads != hpThreads || st.HPQueued != 0 || st.Queued != 0 {
		t.Fatalf("idle: %d high-priority threads, %d queued, %d queued normal", st.HPThreads, st.HPQueued, st.Queued)
	}
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	const n = hpThreads + 3
	errs := make(chan error, n)
	for range n {
		go func() { _, err := c.Call(ctx, e.target, reqPortal, wire.LDLMCancel, nil); errs <- err }()
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().HPQueued != n-hpThreads {
		if time.Now().After(deadline) {
			t.Fatalf("%d high-priority requests queued, want %d (stats %+v)", s.Stats().HPQueued, n-hpThreads, s.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if q := s.Stats().Queued; q != 0 {
		t.Errorf("the normal queue counts %d high-priority requests", q)
	}
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if st := s.Stats(); st.HPQueued != 0 {
		t.Errorf("after: %d queued", st.HPQueued)
	}
}
