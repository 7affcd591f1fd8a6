package lolnd_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/nacrefs/nacre/lnd/lolnd"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lndtest"
	"github.com/nacrefs/nacre/lnet/wire"
)

var _ lnet.Driver = (*lolnd.Driver)(nil)

func TestConformance(t *testing.T) {
	lndtest.Run(t, lndtest.Harness{
		Name: "lolnd",
		Pair: func(t *testing.T) (a, b *lnet.LNet, bNID wire.NID) {
			ln, err := lnet.New(context.Background(), lnet.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := ln.Close(context.Background()); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			return ln, ln, wire.LoNID
		},
	})
}

// TestObservedInPieces: a PUT into an observed MD through 0@lo lands in
// pieces the observer sees one by one right after each is copied, none
// larger than a core's cache holds, in order, adding up to the payload.
func TestObservedInPieces(t *testing.T) {
	ctx := context.Background()
	ln, err := lnet.New(ctx, lnet.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close(ctx)
	src := make([]byte, 1<<20-5)
	for i := range src {
		src[i] = byte(i * 7)
	}
	sink := make([]byte, len(src))
	var pieces, seen int
	var inOrder = true
	done := make(chan lnet.Event, 1)
	_, err = ln.Attach(9, lnet.AnyProcess, 1, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{sink}, Threshold: 1,
		Options: lnet.MDOpPut | lnet.MDManageRemote,
		Observe: func(off int, b []byte) {
			pieces++
			inOrder = inOrder && off == seen && bytes.Equal(b, src[off:off+len(b)])
			if len(b) > 64<<10 {
				t.Errorf("a piece of %d bytes seen at once", len(b))
			}
			seen += len(b)
		},
		Handler: func(ev lnet.Event) {
			if ev.Type == lnet.EventPut {
				done <- ev
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ln.Bind(lnet.MD{Buffers: [][]byte{src}, Threshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := ln.Put(ctx, h, lnet.NoAckReq, wire.ProcessID{NID: wire.LoNID, PID: ln.PID()}, 9, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	if ev := <-done; ev.Status != nil || int(ev.MLength) != len(src) {
		t.Fatalf("PUT event %+v", ev)
	}
	if !inOrder || seen != len(src) || pieces < len(src)/(64<<10) || !bytes.Equal(sink, src) {
		t.Fatalf("observer saw %d bytes in %d pieces (in order, right: %v); sink right: %v", seen, pieces, inOrder, bytes.Equal(sink, src))
	}
}
