package lnet_test

import (
	"context"
	"fmt"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// A node PUTs a message to itself through 0@lo, asks for an ACK, and GETs
// it back. A real node would add Networks (lnet.ParseNetworks("tcp(eth0)"))
// and import lnd/socklnd.
func Example() {
	ctx := context.Background()
	ln, err := lnet.New(ctx, lnet.DefaultConfig()) // lnd/lolnd is imported for 0@lo
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close(ctx)
	me := wire.ProcessID{NID: wire.LoNID, PID: ln.PID()}

	// The target: a 64-byte buffer on portal 4 for match bits 0x77, taking
	// PUTs and GETs at the offset the initiator names.
	landed := make(chan lnet.Event, 1)
	buf := make([]byte, 64)
	_, err = ln.Attach(4, lnet.AnyProcess, 0x77, 0, lnet.InsertLast, lnet.MD{
		Buffers:   [][]byte{buf},
		Threshold: lnet.ThresholdInfinite,
		Options:   lnet.MDOpPut | lnet.MDOpGet | lnet.MDManageRemote,
		Handler: func(ev lnet.Event) {
			if ev.Type == lnet.EventPut {
				landed <- ev
			}
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	// The initiator: a bound MD as the source, events on a channel.
	events := make(chan lnet.Event, 8)
	src, _ := ln.Bind(lnet.MD{
		Buffers:   [][]byte{[]byte("hello, "), []byte("portals")},
		Threshold: 1,
		Handler:   func(ev lnet.Event) { events <- ev },
	})
	if err := ln.Put(ctx, src, lnet.AckReq, me, 4, 0x77, 8, 42); err != nil {
		fmt.Println(err)
		return
	}
	for range 3 { // SEND, ACK, UNLINK
		ev := <-events
		fmt.Println(ev.Type, ev.Status, ev.MLength, ev.Unlinked)
	}
	ev := <-landed
	fmt.Printf("target: %d bytes at %d, hdr data %d: %q\n", ev.MLength, ev.Offset, ev.HdrData, buf[ev.Offset:ev.Offset+ev.MLength])

	// GET the bytes back into a new MD.
	sink := make([]byte, 14)
	dst, _ := ln.Bind(lnet.MD{Buffers: [][]byte{sink}, Threshold: 1, Handler: func(ev lnet.Event) { events <- ev }})
	if err := ln.Get(ctx, dst, me, 4, 0x77, 8); err != nil {
		fmt.Println(err)
		return
	}
	for range 3 { // SEND, REPLY, UNLINK
		ev := <-events
		fmt.Println(ev.Type, ev.Status, ev.MLength, ev.Unlinked)
	}
	fmt.Printf("got %q\n", sink)
	// Output:
	// SEND <nil> 14 false
	// ACK <nil> 14 true
	// UNLINK <nil> 0 true
	// target: 14 bytes at 8, hdr data 42: "hello, portals"
	// SEND <nil> 0 false
	// REPLY <nil> 14 true
	// UNLINK <nil> 0 true
	// got "hello, portals"
}

func ExampleParseNetworks() {
	nets, err := lnet.ParseNetworks("tcp(eth0,eth1), tcp1(10.0.0.1,10.0.0.2), o2ib")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, n := range nets {
		fmt.Println(n.Net, n.Interfaces, n.Addrs)
	}
	// Output:
	// tcp [eth0 eth1] []
	// tcp1 [] [10.0.0.1 10.0.0.2]
	// o2ib [] []
}
