package socklnd

import (
	"bytes"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

type contFunc func()

func (f contFunc) Continue(lnet.Releaser) { f() }

// A message's handler may leave work to the connection's reader: it runs
// after the message, and the reader reads on after it.
func TestContinuation(t *testing.T) {
	a, b := pair(t, nil)
	ran := make(chan uint64, 16)
	var late, twice, afterParse = make(chan bool, 16), make(chan bool, 16), make(chan bool, 16)
	parsed := func(hdr *wire.Header, rx lnet.Rx) {
		c, ok := rx.(lnet.Continuer)
		if !ok {
			t.Error("socklnd's Rx is not an lnet.Continuer")
			return
		}
		bits := hdr.MatchBits
		took := c.Continue(contFunc(func() {
			afterParse <- c.Continuable()
			ran <- bits
		}))
		late <- took
		twice <- c.Continue(contFunc(func() { t.Error("a second continuation ran") }))
	}
	b.h.parsed.Store(&parsed)
	for i := range uint64(5) {
		want := pattern(i, 100)
		a.h.send(t, a.ni, put(a.nid, b.nid, i, want))
		r := b.h.nextRx(t)
		if r.hdr.MatchBits != i || !bytes.Equal(joined(r.dst, r.mlen), want) {
			t.Fatalf("message %d: got bits %d, payload equal %v", i, r.hdr.MatchBits, bytes.Equal(joined(r.dst, r.mlen), want))
		}
		if !<-late {
			t.Fatalf("message %d: Continue refused", i)
		}
		if <-twice {
			t.Fatalf("message %d: a second Continue was taken", i)
		}
		select {
		case got := <-ran:
			if got != i {
				t.Fatalf("continuation of message %d ran after message %d", got, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the continuation of message %d did not run", i)
		}
		if <-afterParse {
			t.Fatalf("message %d: Continuable after its parse", i)
		}
	}
	if st := b.ni.Stats(); st.RxContinued != 5 || st.RxHandoffs != 0 || st.RxMsgs != 5 {
		t.Errorf("stats: %d continued, %d handed off, %d received; want 5, 0, 5", st.RxContinued, st.RxHandoffs, st.RxMsgs)
	}
}

// A continuation that waits for the next message from the same peer — a
// handler waiting for the reply to an RPC it sent back — gets it: the
// watchdog gives the connection a new reader.
func TestContinuationWaitsForNextMessage(t *testing.T) {
	a, b := pair(t, nil)
	second := make(chan struct{})
	done := make(chan time.Duration, 1)
	parsed := func(hdr *wire.Header, rx lnet.Rx) {
		switch hdr.MatchBits {
		case 1:
			start := time.Now()
			if !rx.(lnet.Continuer).Continue(contFunc(func() {
				select {
				case <-second:
					done <- time.Since(start)
				case <-time.After(10 * time.Second):
					done <- -1
				}
			})) {
				t.Error("Continue refused")
			}
		case 2:
			close(second)
		}
	}
	b.h.parsed.Store(&parsed)
	a.h.send(t, a.ni, put(a.nid, b.nid, 1, pattern(1, 10)))
	b.h.nextRx(t)
	a.h.send(t, a.ni, put(a.nid, b.nid, 2, pattern(2, 10)))
	if d := <-done; d < 0 {
		t.Fatal("the continuation never saw the next message: the connection was not read while it ran")
	} else if d < handoffAfter {
		t.Errorf("the next message came %v after the first: the watchdog should have taken at least %v", d, handoffAfter)
	}
	// The new reader reads on; the old goroutine is gone.
	want := pattern(3, 5000)
	a.h.send(t, a.ni, put(a.nid, b.nid, 3, want))
	for _, bits := range []uint64{2, 3} {
		if r := b.h.nextRx(t); r.hdr.MatchBits != bits || (bits == 3 && !bytes.Equal(joined(r.dst, r.mlen), want)) {
			t.Fatalf("got message %d, want %d with its payload", r.hdr.MatchBits, bits)
		}
	}
	if st := b.ni.Stats(); st.RxContinued != 1 || st.RxHandoffs != 1 {
		t.Errorf("stats: %d continued, %d handed off; want 1, 1", st.RxContinued, st.RxHandoffs)
	}
	b.ni.cont.mu.Lock()
	n := len(b.ni.cont.running)
	b.ni.cont.mu.Unlock()
	if n != 0 {
		t.Errorf("the watchdog still lists %d connections", n)
	}
}

type releaseFunc func(lnet.Releaser)

func (f releaseFunc) Continue(r lnet.Releaser) { f(r) }

// A continuation that releases its connection before it waits has the
// next message read at once, not after the watchdog's delay.
func TestContinuationRelease(t *testing.T) {
	a, b := pair(t, nil)
	second := make(chan struct{})
	done := make(chan bool, 1)
	parsed := func(hdr *wire.Header, rx lnet.Rx) {
		switch hdr.MatchBits {
		case 1:
			rx.(lnet.Continuer).Continue(releaseFunc(func(r lnet.Releaser) {
				r.Release()
				r.Release() // a second call does nothing
				select {
				case <-second:
					done <- true
				case <-time.After(10 * time.Second):
					done <- false
				}
			}))
		case 2:
			close(second)
		}
	}
	b.h.parsed.Store(&parsed)
	a.h.send(t, a.ni, put(a.nid, b.nid, 1, pattern(1, 10)))
	b.h.nextRx(t)
	a.h.send(t, a.ni, put(a.nid, b.nid, 2, pattern(2, 10)))
	if !<-done {
		t.Fatal("the continuation never saw the next message")
	}
	b.h.nextRx(t)
	// One reader reads on: the next messages come once each, in order.
	for i := uint64(3); i < 6; i++ {
		want := pattern(i, 3000)
		a.h.send(t, a.ni, put(a.nid, b.nid, i, want))
		if r := b.h.nextRx(t); r.hdr.MatchBits != i || !bytes.Equal(joined(r.dst, r.mlen), want) {
			t.Fatalf("got message %d, want %d with its payload", r.hdr.MatchBits, i)
		}
	}
	if st := b.ni.Stats(); st.RxContinued != 1 || st.RxReleased != 1 || st.RxHandoffs != 0 {
		t.Errorf("stats: %d continued, %d released, %d handed off by the watchdog; want 1, 1, 0", st.RxContinued, st.RxReleased, st.RxHandoffs)
	}
}

// Continuations that overlap: each message's continuation outlives the
// watchdog's delay and returns only once the next message's continuation
// (on the reader the watchdog started) runs. Each old goroutine must end
// when its continuation returns without touching the new reader's entry
// or taking the reading back: the messages come once each, in order, every
// continuation runs once, and the watchdog lists nothing at the end (a
// goroutine that took its reading back removed the newer entry and left
// two readers; an entry left behind crashed the watchdog).
func TestOverlappingContinuations(t *testing.T) {
	a, b := pair(t, nil)
	const n = 40
	var started [n + 1]chan struct{}
	for i := range started {
		started[i] = make(chan struct{})
	}
	ran := make(chan uint64, n)
	parsed := func(hdr *wire.Header, rx lnet.Rx) {
		i := hdr.MatchBits
		if !rx.(lnet.Continuer).Continue(contFunc(func() {
			close(started[i])
			if i+1 < n {
				select { // the next message's continuation runs meanwhile
				case <-started[i+1]:
				case <-time.After(10 * time.Second):
					t.Errorf("continuation %d: the next one never started", i)
				}
			}
			if i%3 == 0 {
				time.Sleep(2 * handoffAfter) // and sometimes outlives it
			}
			ran <- i
		})) {
			t.Errorf("message %d: Continue refused", i)
		}
	}
	b.h.parsed.Store(&parsed)
	for i := range uint64(n) { // each once the one before runs its continuation
		a.h.send(t, a.ni, put(a.nid, b.nid, i, pattern(i, 64)))
		if r := b.h.nextRx(t); r.hdr.MatchBits != i {
			t.Fatalf("got message %d, want %d", r.hdr.MatchBits, i)
		}
		select {
		case <-started[i]:
		case <-time.After(10 * time.Second):
			t.Fatalf("continuation %d never started", i)
		}
	}
	seen := make(map[uint64]bool)
	for range n {
		select {
		case i := <-ran:
			if seen[i] {
				t.Fatalf("continuation %d ran twice", i)
			}
			seen[i] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d continuations ran, want %d", len(seen), n)
		}
	}
	// One reader reads on.
	for i := uint64(n); i < n+3; i++ {
		want := pattern(i, 2000)
		b.h.parsed.Store(nil)
		a.h.send(t, a.ni, put(a.nid, b.nid, i, want))
		if r := b.h.nextRx(t); r.hdr.MatchBits != i || !bytes.Equal(joined(r.dst, r.mlen), want) {
			t.Fatalf("got message %d, want %d with its payload", r.hdr.MatchBits, i)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.ni.cont.mu.Lock()
		left := len(b.ni.cont.running)
		b.ni.cont.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watchdog still lists %d connections", left)
		}
		time.Sleep(time.Millisecond)
	}
}

// A Release that comes after its continuation returned (from work the
// continuation left running) starts no second reader: the messages after
// come once each, in order, whole.
func TestLateRelease(t *testing.T) {
	a, b := pair(t, nil)
	rel := make(chan lnet.Releaser, 1)
	returned := make(chan struct{})
	parsed := func(hdr *wire.Header, rx lnet.Rx) {
		if hdr.MatchBits == 1 {
			rx.(lnet.Continuer).Continue(releaseFunc(func(r lnet.Releaser) {
				rel <- r
				close(returned)
			}))
		}
	}
	b.h.parsed.Store(&parsed)
	a.h.send(t, a.ni, put(a.nid, b.nid, 1, pattern(1, 10)))
	b.h.nextRx(t)
	<-returned
	r := <-rel
	// Let the reader see its continuation return and read on first.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.ni.cont.mu.Lock()
		left := len(b.ni.cont.running)
		b.ni.cont.mu.Unlock()
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	r.Release()
	for i := uint64(2); i < 40; i++ {
		want := pattern(i, 700)
		a.h.send(t, a.ni, put(a.nid, b.nid, i, want))
		if got := b.h.nextRx(t); got.hdr.MatchBits != i || !bytes.Equal(joined(got.dst, got.mlen), want) {
			t.Fatalf("got message %d, want %d with its payload", got.hdr.MatchBits, i)
		}
	}
	if st := b.ni.Stats(); st.RxReleased != 0 {
		t.Fatalf("a Release after the continuation returned started a reader: %+v", st)
	}
}
