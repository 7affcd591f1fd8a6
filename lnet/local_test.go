package lnet_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// TestPutLocal writes in place into MDs of the node's own process, by 0@lo
// and by its network NID: the bytes fill produces land where the MD says,
// in the pieces asked for, the observer sees them in order, the MD's PUT
// event tells the rest, and misses, other processes and failing fills are
// errors that change nothing they should not.
func TestPutLocal(t *testing.T) {
	ln := startFake(t, nil)
	ctx := context.Background()
	for _, self := range []wire.ProcessID{{NID: wire.LoNID, PID: ln.PID()}, target(ln)} {
		t.Run(self.NID.String(), func(t *testing.T) {
			if !ln.IsSelf(self) {
				t.Fatalf("IsSelf(%v) = false", self)
			}
			rec := newRecorder()
			// Two buffers, the second odd-sized, written at offset 3.
			b1, b2 := make([]byte, 5000), make([]byte, 3001)
			var seen []byte
			if _, err := ln.Attach(7, self, 42, 0, lnet.InsertLast, lnet.MD{
				Buffers: [][]byte{b1, b2}, Threshold: lnet.ThresholdInfinite,
				Options: lnet.MDOpPut | lnet.MDManageRemote, Handler: rec.handler,
				Observe: func(off int, b []byte) {
					if off != 3+len(seen) {
						t.Errorf("observer at %d after %d bytes", off, len(seen))
					}
					seen = append(seen, b...)
				},
			}); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 7000)
			for i := range want {
				want[i] = byte(i*7 + i>>8)
			}
			var pieces []int
			got := 0
			n, err := ln.PutLocal(ctx, self, 7, 42, 3, len(want), 1024, func(dst [][]byte) error {
				k := 0
				for _, d := range dst {
					k += copy(d, want[got+k:])
				}
				pieces = append(pieces, k)
				got += k
				return nil
			})
			if err != nil || n != len(want) {
				t.Fatalf("PutLocal = %d, %v", n, err)
			}
			for i, p := range pieces {
				if p > 1024 || (p < 1024 && i != len(pieces)-1) {
					t.Fatalf("pieces %v: want 1024 each but the last", pieces)
				}
			}
			all := append(append([]byte(nil), b1...), b2...)
			if !bytes.Equal(all[3:3+len(want)], want) || !bytes.Equal(all[:3], make([]byte, 3)) || all[3+len(want)] != 0 {
				t.Fatal("bytes did not land where the MD says")
			}
			if !bytes.Equal(seen, want) {
				t.Fatalf("observer saw %d bytes, not the payload", len(seen))
			}
			ev := rec.expect(t, lnet.EventPut, nil)
			if ev.MLength != uint32(len(want)) || ev.RLength != uint32(len(want)) || ev.Offset != 3 || ev.Initiator != self || ev.MatchBits != 42 {
				t.Fatalf("event %+v", ev)
			}

			// A fill that fails: the caller and the MD's event both see it.
			boom := errors.New("disk on fire")
			if _, err := ln.PutLocal(ctx, self, 7, 42, 0, 10, 0, func([][]byte) error { return boom }); !errors.Is(err, boom) {
				t.Fatalf("failing fill: %v", err)
			}
			if ev := rec.next(t); ev.Type != lnet.EventPut || !errors.Is(ev.Status, boom) {
				t.Fatalf("failing fill: event %v status %v", ev.Type, ev.Status)
			}

			// No MD matches: dropped, fill never called.
			if _, err := ln.PutLocal(ctx, self, 7, 43, 0, 10, 0, func([][]byte) error {
				t.Error("fill called for a PUT nothing matched")
				return nil
			}); !errors.Is(err, lnet.ErrDropped) {
				t.Fatalf("no match: %v", err)
			}
		})
	}

	for _, p := range []wire.ProcessID{
		{NID: wire.LoNID, PID: ln.PID() + 1},    // another process
		{NID: fakeNIDOf(ln), PID: ln.PID() + 1}, // another process here
		{NID: wire.AnyNID, PID: ln.PID()},       // nobody
		{NID: newFakeNID(), PID: ln.PID()},      // another node
	} {
		if ln.IsSelf(p) {
			t.Errorf("IsSelf(%v) = true", p)
		}
		if _, err := ln.PutLocal(ctx, p, 7, 42, 0, 1, 0, func([][]byte) error { return nil }); !errors.Is(err, lnet.ErrNotLoopback) {
			t.Errorf("PutLocal to %v: %v", p, err)
		}
	}
	self := wire.ProcessID{NID: wire.LoNID, PID: ln.PID()}
	if _, err := ln.PutLocal(ctx, self, 7, 42, 0, wire.MTU+1, 0, nil); !errors.Is(err, lnet.ErrMsgSize) {
		t.Errorf("PutLocal past the MTU: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := ln.PutLocal(cctx, self, 7, 42, 0, 1, 0, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("PutLocal with its context done: %v", err)
	}
}
