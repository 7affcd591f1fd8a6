package lnet_test

import (
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// contRx is a Continuer that takes a continuation while its Parse runs.
type contRx struct {
	fuzzRx
	parsing bool
	later   lnet.Continuation
}

func (r *contRx) Continuable() bool { return r.parsing && r.later == nil }
func (r *contRx) Continue(c lnet.Continuation) bool {
	if !r.Continuable() {
		return false
	}
	r.later = c
	return true
}

type nop struct{}

func (nop) Continue(lnet.Releaser) {}

// An event can continue only on the goroutine that received its message:
// a PUT whose event another goroutine delivers (its MD's handler was busy
// there), or whose LND is no Continuer, cannot.
func TestEventContinue(t *testing.T) {
	ln := startFake(t, nil)
	nid := fakeNIDOf(ln)
	host := fab.lookup(nid).host
	from := newFakeNID()
	type seen struct {
		bits        uint64
		continuable bool
		took        bool
	}
	events := make(chan seen, 4)
	inFirst, release := make(chan struct{}), make(chan struct{})
	if _, err := ln.Attach(7, lnet.AnyProcess, 0, ^uint64(0), lnet.InsertLast, lnet.MD{
		Buffers: [][]byte{make([]byte, 1024)}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDAckDisable,
		Handler: func(ev lnet.Event) {
			if ev.Type != lnet.EventPut {
				return
			}
			if ev.MatchBits == 1 {
				close(inFirst)
				<-release
			}
			c := ev.Continuable()
			events <- seen{ev.MatchBits, c, ev.Continue(nop{})}
		},
	}); err != nil {
		t.Fatal(err)
	}
	hdr := func(bits uint64) *wire.Header {
		return &wire.Header{Type: wire.MsgPut, SrcNID: from, DstNID: nid, SrcPID: 12345, DstPID: ln.PID(),
			WMD: wire.WireHandleNone, Portal: 7, MatchBits: bits, PayloadLen: 10}
	}
	parse := func(bits uint64, rx lnet.Rx) {
		if err := host.Parse(hdr(bits), from, rx); err != nil {
			t.Errorf("Parse %d: %v", bits, err)
		}
	}
	rx1 := &contRx{fuzzRx: fuzzRx{t: t, plen: 10}, parsing: true}
	rx2 := &contRx{fuzzRx: fuzzRx{t: t, plen: 10}, parsing: true}
	done1 := make(chan struct{})
	go func() {
		parse(1, rx1)
		close(done1)
	}()
	<-inFirst
	parse(2, rx2) // the MD's handler is busy with 1: the first goroutine delivers 2
	close(release)
	<-done1
	want := []seen{{1, true, true}, {2, false, false}}
	for _, w := range want {
		select {
		case got := <-events:
			if got != w {
				t.Errorf("event %d: Continuable %v, Continue %v; want %v, %v", got.bits, got.continuable, got.took, w.continuable, w.took)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %d", w.bits)
		}
	}
	if rx1.later == nil || rx2.later != nil {
		t.Errorf("continuations taken: first %v, second %v; want the first only", rx1.later != nil, rx2.later != nil)
	}
	// An Rx that is no Continuer: nothing to continue on.
	parse(3, &fuzzRx{t: t, plen: 10})
	if got := <-events; got.continuable || got.took {
		t.Errorf("event of a plain Rx: Continuable %v, Continue %v", got.continuable, got.took)
	}
}
