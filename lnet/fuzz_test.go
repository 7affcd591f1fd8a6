package lnet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// fuzzRx serves fuzz bytes as a payload and checks LNet keeps the Rx
// contract.
type fuzzRx struct {
	t       *testing.T
	payload []byte
	plen    uint32
	fail    bool
	called  bool
}

func (r *fuzzRx) Recv(dst [][]byte, mlen int) error {
	if r.called {
		r.t.Error("Recv called twice")
	}
	r.called = true
	if mlen < 0 || mlen > int(r.plen) {
		r.t.Errorf("Recv of %d bytes from a payload of %d", mlen, r.plen)
	}
	total := 0
	for _, d := range dst {
		total += len(d)
	}
	if total < mlen {
		r.t.Errorf("Recv of %d bytes into %d bytes of buffers", mlen, total)
	}
	if r.fail {
		return errors.New("fuzz: connection broke")
	}
	left := mlen
	for _, d := range dst {
		if left == 0 {
			break
		}
		d = d[:min(len(d), left)]
		for i := range d {
			if len(r.payload) > 0 {
				d[i] = r.payload[i%len(r.payload)]
			}
		}
		left -= len(d)
	}
	return nil
}

// FuzzParse feeds headers decoded from fuzz bytes (as an LND would) to a
// running LNet's Host.Parse, with fuzz bytes as the payload, and checks
// that LNet keeps the Rx contract, does not panic, and still completes a
// PUT with ACK afterwards.
func FuzzParse(f *testing.F) {
	ln := startFake(f, nil)
	nid := fakeNIDOf(ln)
	host := fab.lookup(nid).host
	from := newFakeNID()
	self := wire.ProcessID{NID: wire.LoNID, PID: ln.PID()}
	ln.SetTransactionTimeout(2 * time.Second)

	// Targets for fuzzed PUTs and GETs.
	for _, t := range []struct {
		portal        uint32
		src           wire.ProcessID
		match, ignore uint64
		md            lnet.MD
	}{
		{0, lnet.AnyProcess, 0, ^uint64(0), lnet.MD{Buffers: [][]byte{make([]byte, 3), make([]byte, 4093), make([]byte, 1)}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDOpGet | lnet.MDManageRemote | lnet.MDTruncate}},
		{1, lnet.AnyProcess, 0, ^uint64(0), lnet.MD{Buffers: [][]byte{make([]byte, 1<<16)}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDOpGet | lnet.MDTruncate}},
		{2, lnet.AnyProcess, 0x55, 0xf0, lnet.MD{Buffers: [][]byte{make([]byte, 100)}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDAckDisable | lnet.MDManageRemote}},
		{3, wire.ProcessID{NID: from, PID: wire.PIDAny}, 7, 0, lnet.MD{Buffers: [][]byte{make([]byte, 64)}, Threshold: 1000, Options: lnet.MDOpPut | lnet.MDOpGet, Handler: func(lnet.Event) {}}},
	} {
		if _, err := ln.Attach(t.portal, t.src, t.match, t.ignore, lnet.InsertLast, t.md); err != nil {
			f.Fatal(err)
		}
	}

	seed := func(h wire.Header, mode uint8, payload []byte) {
		var b [wire.HeaderSize]byte
		if err := h.Marshal(b[:]); err != nil {
			f.Fatalf("seed %+v: %v", h, err)
		}
		f.Add(b[:], mode, payload)
	}
	base := wire.Header{SrcNID: from, DstNID: nid, SrcPID: 12345, DstPID: ln.PID()}
	put := base
	put.Type, put.PayloadLen, put.WMD, put.Portal, put.Offset, put.MatchBits = wire.MsgPut, 10, wire.WireHandle{Interface: 1, Object: 2}, 0, 4090, 1
	seed(put, 0, []byte("0123456789"))
	put.WMD = wire.WireHandleNone
	seed(put, 32, []byte("x"))
	put.Portal, put.PayloadLen, put.MatchBits, put.HdrData = 2, 100, 0x5a, 42
	seed(put, 0, []byte("abc"))
	put.Portal, put.MatchBits, put.PayloadLen = 3, 7, 64
	seed(put, 0, []byte{1, 2, 3})
	// Pushes: a peer's ping info PUT on the ping portal, whole and not.
	info := wire.PingInfo{Features: wire.PingFeatBase | wire.PingFeatMultiRail, PID: 12345,
		NIDs: []wire.NIDStatus{{NID: from, Status: wire.NIStatusUp}, {NID: newFakeNID(), Status: wire.NIStatusUp}}}
	pi, err := info.AppendBinary(nil)
	if err != nil {
		f.Fatal(err)
	}
	push := base
	push.Type, push.DstPID, push.Portal, push.MatchBits, push.PayloadLen = wire.MsgPut, wire.PIDAny, lnet.PingPortal, lnet.PingMatchBits, uint32(len(pi))
	seed(push, 0, pi)
	push.PayloadLen = 12
	seed(push, 0, pi[:12])
	get := base
	get.Type, get.WMD, get.Portal, get.SinkLength, get.Offset = wire.MsgGet, wire.WireHandle{Interface: 9, Object: 9}, 0, 100, 4000
	seed(get, 0, nil)
	get.Portal = 1
	seed(get, 0, nil)
	ack := base
	ack.Type, ack.WMD, ack.MLength = wire.MsgAck, wire.WireHandle{Object: 3}, 10
	seed(ack, 4, nil)
	reply := base
	reply.Type, reply.WMD, reply.PayloadLen = wire.MsgReply, wire.WireHandle{Object: 5}, 8
	seed(reply, 4, []byte("reply"))
	hello := base
	hello.Type = wire.MsgHello
	seed(hello, 0, nil)
	other := put
	other.DstNID = wire.MustParseNID("10.1.2.3@tcp")
	seed(other, 0, nil)

	match := uint64(1 << 40)
	f.Fuzz(func(t *testing.T, data []byte, mode uint8, payload []byte) {
		var hdr wire.Header
		if err := hdr.Unmarshal(data); err != nil {
			return
		}
		if mode&1 != 0 {
			hdr.DstNID = nid
		}
		if mode&2 != 0 {
			hdr.DstPID = ln.PID()
		}
		if mode&4 != 0 && !hdr.WMD.IsNone() {
			hdr.WMD.Interface = ln.Incarnation()
		}
		if mode&8 == 0 && hdr.SrcNID.Net.Type == wire.TCP {
			hdr.SrcNID = from // keep the peers a response may go to few
		}
		rx := &fuzzRx{t: t, payload: payload, plen: hdr.PayloadLen, fail: mode&32 != 0}
		_ = host.Parse(&hdr, from, rx)
		if !rx.called {
			t.Fatal("Parse returned without calling Recv")
		}

		// LNet still works: a PUT to ourselves with an ACK.
		match++
		got := make(chan lnet.Event, 4)
		if _, err := ln.Attach(100, lnet.AnyProcess, match, 0, lnet.InsertLast, lnet.MD{Buffers: [][]byte{make([]byte, 4)}, Threshold: 1, Options: lnet.MDOpPut}); err != nil {
			t.Fatal(err)
		}
		h, err := ln.Bind(lnet.MD{Buffers: [][]byte{[]byte("ping")}, Threshold: 1, Handler: func(ev lnet.Event) { got <- ev }})
		if err != nil {
			t.Fatal(err)
		}
		if err := ln.Put(context.Background(), h, lnet.AckReq, self, 100, match, 0, 0); err != nil {
			t.Fatal(err)
		}
		for _, want := range []lnet.EventType{lnet.EventSend, lnet.EventAck, lnet.EventUnlink} {
			select {
			case ev := <-got:
				if ev.Type != want || ev.Status != nil {
					t.Fatalf("round trip: event %v status %v, want %v", ev.Type, ev.Status, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round trip: no %v event", want)
			}
		}
	})
}
