package socklnd_test

import (
	"context"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
)

// A SEND handler that waits for another message of the same NI to arrive
// does not hold that message up, although socklnd writes small messages,
// and finalizes them, inside LNet's call to Send.
func TestSendHandlerWaitsForAnotherSend(t *testing.T) {
	a, b, target := pair(t)
	arrived := make(chan struct{})
	if _, err := b.Attach(42, lnet.AnyProcess, 2, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 1, Options: lnet.MDOpPut, Handler: func(ev lnet.Event) {
		if ev.Type == lnet.EventPut {
			close(arrived)
		}
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Attach(42, lnet.AnyProcess, 1, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 1, Options: lnet.MDOpPut}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Connections first, so the PUTs below are written inline.
	warm, _ := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 1})
	if err := a.Put(ctx, warm, lnet.NoAckReq, target, 43, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)

	inHandler := make(chan struct{})
	waited := make(chan bool, 1)
	first, _ := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 1, Handler: func(ev lnet.Event) {
		if ev.Type != lnet.EventSend {
			return
		}
		close(inHandler)
		select {
		case <-arrived:
			waited <- true
		case <-time.After(10 * time.Second):
			waited <- false
		}
	}})
	second, _ := a.Bind(lnet.MD{Buffers: [][]byte{make([]byte, 8)}, Threshold: 1})
	go func() {
		<-inHandler
		if err := a.Put(ctx, second, lnet.NoAckReq, target, 42, 2, 0, 0); err != nil {
			t.Errorf("second Put: %v", err)
		}
	}()
	if err := a.Put(ctx, first, lnet.NoAckReq, target, 42, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	if !<-waited {
		t.Fatal("the second message did not leave while the first's SEND handler ran")
	}
}
