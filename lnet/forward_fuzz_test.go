package lnet_test

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// fakeNIDOn is newFakeNID on another net.
func fakeNIDOn(num uint16) wire.NID {
	n := newFakeNID()
	return wire.NID{Net: wire.Net{Type: wire.TCP, Num: num}, Addr: n.Addr}
}

// startNets starts an LNet with one fake NI per NID, each on its own net.
func startNets(t testing.TB, mod func(*lnet.Config), nids ...wire.NID) *lnet.LNet {
	t.Helper()
	cfg := lnet.DefaultConfig()
	for _, nid := range nids {
		cfg.Networks = append(cfg.Networks, lnet.NetConfig{Net: nid.Net, Addrs: []netip.Addr{nid.Addr}})
	}
	if mod != nil {
		mod(&cfg)
	}
	ln, err := lnet.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ln.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return ln
}

// asyncRx is fuzzRx for a Recv that may come from another goroutine.
type asyncRx struct {
	plen   uint32
	fail   bool
	called atomic.Int32
	done   chan struct{}
}

func (r *asyncRx) Recv(dst [][]byte, mlen int) error {
	if r.called.Add(1) == 1 {
		defer close(r.done)
	}
	total := 0
	for _, d := range dst {
		total += len(d)
	}
	if mlen < 0 || mlen > int(r.plen) || total < mlen {
		panic("asyncRx: Recv out of bounds")
	}
	if r.fail {
		return context.Canceled
	}
	return nil
}

// FuzzForward feeds fuzzed headers to a router (two buffers, a route to a
// third net through a gateway that is not there) from a neighbour, and
// checks that each gets exactly one Recv (soon, even when it had to wait
// for a buffer), and that the router still forwards a PUT from A to B
// afterwards.
func FuzzForward(f *testing.F) {
	rTCP, rTCP2 := newFakeNID(), fakeNIDOn(2)
	aNID, bNID := newFakeNID(), fakeNIDOn(2)
	ghost := fakeNIDOn(2) // a gateway to tcp3 that never answers
	startNets(f, func(c *lnet.Config) {
		c.Routing = true
		c.RouterBuffers = 2
		c.Routes = []lnet.Route{{Net: wire.Net{Type: wire.TCP, Num: 3}, Gateway: ghost, Hops: 1}}
	}, rTCP, rTCP2)
	a := startNets(f, func(c *lnet.Config) {
		c.Routes = []lnet.Route{{Net: bNID.Net, Gateway: rTCP, Hops: 1}}
	}, aNID)
	b := startNets(f, func(c *lnet.Config) {
		c.Routes = []lnet.Route{{Net: aNID.Net, Gateway: rTCP2, Hops: 1}}
	}, bNID)
	host := fab.lookup(rTCP).host
	from := newFakeNID()
	sinkMD := lnet.MD{Buffers: [][]byte{make([]byte, 16)}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDManageRemote}
	if _, err := b.Attach(9, lnet.AnyProcess, 0, 0, lnet.InsertLast, sinkMD); err != nil {
		f.Fatal(err)
	}

	seed := func(h wire.Header, mode uint8) {
		var buf [wire.HeaderSize]byte
		if err := h.Marshal(buf[:]); err != nil {
			f.Fatalf("seed %+v: %v", h, err)
		}
		f.Add(buf[:], mode)
	}
	put := wire.Header{Type: wire.MsgPut, SrcNID: from, DstNID: bNID, SrcPID: 1, DstPID: 12345, PayloadLen: 1000, WMD: wire.WireHandleNone, Portal: 9}
	seed(put, 0)
	seed(put, 1)
	put.PayloadLen = wire.MTU
	seed(put, 2)
	get := wire.Header{Type: wire.MsgGet, SrcNID: from, DstNID: bNID, WMD: wire.WireHandle{Object: 1}, SinkLength: 100, Portal: 9}
	seed(get, 4)
	ack := wire.Header{Type: wire.MsgAck, SrcNID: bNID, DstNID: aNID, WMD: wire.WireHandle{Object: 1}}
	seed(ack, 0)

	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		var hdr wire.Header
		if err := hdr.Unmarshal(data); err != nil {
			return
		}
		switch mode % 8 {
		case 1:
			hdr.DstNID = bNID
		case 2:
			hdr.DstNID = wire.NID{Net: wire.Net{Type: wire.TCP, Num: 3}, Addr: bNID.Addr}
		case 3:
			hdr.DstNID = from // back where it came from
		}
		rx := &asyncRx{plen: hdr.PayloadLen, fail: mode&16 != 0, done: make(chan struct{})}
		_ = host.Parse(&hdr, from, rx)
		select {
		case <-rx.done:
		case <-time.After(10 * time.Second):
			t.Fatal("no Recv within 10s")
		}
		// The router still forwards.
		got := make(chan lnet.Event, 4)
		h, err := a.Bind(lnet.MD{Buffers: [][]byte{[]byte("ping")}, Threshold: 1, Handler: func(ev lnet.Event) { got <- ev }})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Put(context.Background(), h, lnet.AckReq, wire.ProcessID{NID: bNID, PID: b.PID()}, 9, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		for _, want := range []lnet.EventType{lnet.EventSend, lnet.EventAck} {
			select {
			case ev := <-got:
				if ev.Type != want || ev.Status != nil {
					t.Fatalf("A to B: event %v status %v, want %v", ev.Type, ev.Status, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("A to B: no %v event", want)
			}
		}
		if n := rx.called.Load(); n != 1 {
			t.Fatalf("Recv called %d times", n)
		}
	})
}
