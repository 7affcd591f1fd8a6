package lnet

import (
	"container/heap"
	"sync"
	"time"
)

// timer is LNet's one deadline goroutine: a heap of the messages whose
// transaction may time out, ordered by deadline. A message is in it from
// launch until its operation completes, so the heap holds no more than the
// operations in flight, and no message needs a goroutine or a timer of its
// own.
type timer struct {
	// mu is a leaf lock: it may be taken with LNet.res or LNet.net held, and
	// nothing is called with it held.
	mu sync.Mutex
	h  msgHeap // protected by mu
	// armed is when run will next look at the heap (protected by mu). add
	// wakes run only for a deadline before it: messages are mostly added
	// in deadline order, and a wake per message would cost a goroutine
	// switch on every send. When the message armed for completes first,
	// run wakes at its deadline for nothing and rearms: once per timeout,
	// not once per message.
	armed time.Time
	kick  chan struct{}
	quit  chan struct{}
	done  chan struct{}
}

func (t *timer) start(ln *LNet) {
	t.kick = make(chan struct{}, 1)
	t.quit = make(chan struct{})
	t.done = make(chan struct{})
	t.armed = time.Now().Add(time.Hour) // run's first wait
	go t.run(ln)
}

func (t *timer) stop() {
	close(t.quit)
	<-t.done
}

// add puts m in the heap; it must not be there already.
func (t *timer) add(m *msg) {
	t.mu.Lock()
	heap.Push(&t.h, m)
	first := m.heapIdx == 0 && m.deadline.Before(t.armed)
	t.mu.Unlock()
	if first {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// del takes m out of the heap if it is there.
func (t *timer) del(m *msg) {
	t.mu.Lock()
	if m.heapIdx >= 0 {
		heap.Remove(&t.h, m.heapIdx)
	}
	t.mu.Unlock()
}

func (t *timer) run(ln *LNet) {
	defer close(t.done)
	tm := time.NewTimer(time.Hour)
	defer tm.Stop()
	for {
		select {
		case <-t.quit:
			return
		case <-t.kick:
		case <-tm.C:
		}
		now := time.Now()
		var expired []*msg
		t.mu.Lock()
		for len(t.h) > 0 && !t.h[0].deadline.After(now) {
			expired = append(expired, heap.Pop(&t.h).(*msg))
		}
		next := time.Hour
		if len(t.h) > 0 {
			next = t.h[0].deadline.Sub(now)
		}
		t.armed = now.Add(next)
		t.mu.Unlock()
		for _, m := range expired {
			ln.expire(m)
		}
		tm.Reset(next)
	}
}

// msgHeap orders messages by deadline (container/heap).
type msgHeap []*msg

func (h msgHeap) Len() int           { return len(h) }
func (h msgHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h msgHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *msgHeap) Push(x any) {
	m := x.(*msg)
	m.heapIdx = len(*h)
	*h = append(*h, m)
}
func (h *msgHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	m.heapIdx = -1
	return m
}
