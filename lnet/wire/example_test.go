package wire_test

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/nacrefs/nacre/lnet/wire"
)

func ExampleParseNID() {
	for _, s := range []string{"192.168.1.5@tcp", "10.0.0.1@tcp0", "fd00::1@o2ib2", "0@lo", "1@lo"} {
		nid, err := wire.ParseNID(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(nid, nid.Net.Type, nid.Net.Num)
	}
	// Output:
	// 192.168.1.5@tcp tcp 0
	// 10.0.0.1@tcp tcp 0
	// [fd00::1]@o2ib2 o2ib 2
	// 0@lo lo 0
	// lnet: bad NID "1@lo": the only NID on lo is 0@lo
}

func ExampleHeader_Marshal() {
	put := wire.Header{
		Type:       wire.MsgPut,
		SrcNID:     wire.MustParseNID("192.168.1.5@tcp"),
		DstNID:     wire.MustParseNID("192.168.1.6@tcp"),
		SrcPID:     wire.PIDLustre,
		DstPID:     wire.PIDLustre,
		PayloadLen: 4096,
		WMD:        wire.WireHandleNone, // no ACK wanted
		MatchBits:  0x1234,
		Portal:     4,
	}
	// The header and its payload are typically sent with one vectored
	// write; the header buffer can live on the stack.
	var buf [wire.HeaderSize]byte
	if err := put.Marshal(buf[:]); err != nil {
		fmt.Println(err)
		return
	}

	var got wire.Header
	if err := got.Unmarshal(buf[:]); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(got.Type, got.Src(), "->", got.Dst(), got.PayloadLen, got.WMD.IsNone())

	// A GET carries no payload.
	get := put
	get.Type = wire.MsgGet
	err := get.Marshal(buf[:])
	fmt.Println(errors.Is(err, wire.ErrTooLong))
	// Output:
	// PUT 12345-192.168.1.5@tcp -> 12345-192.168.1.6@tcp 4096 true
	// true
}

func ExampleReadHello() {
	out := wire.Hello{
		Version:        wire.HelloVersion,
		SrcNID:         wire.MustParseNID("10.0.0.1@tcp"),
		DstNID:         wire.MustParseNID("10.0.0.2@tcp"),
		SrcPID:         wire.PIDLustre,
		DstPID:         wire.PIDLustre,
		SrcIncarnation: 1700000000,
		ConnType:       wire.ConnControl,
	}
	b, err := out.AppendBinary(nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	in, err := wire.ReadHello(bytes.NewReader(b)) // a net.Conn in socklnd
	fmt.Println(in.SrcNID, in.ConnType, in.SrcIncarnation, err)

	// A big-endian peer is told apart from a stranger.
	swapped := bytes.Clone(b)
	swapped[0], swapped[1], swapped[2], swapped[3] = b[3], b[2], b[1], b[0]
	_, err = wire.ReadHello(bytes.NewReader(swapped))
	fmt.Println(errors.Is(err, wire.ErrBadMagic), errors.Is(err, wire.ErrOtherEndian))
	// Output:
	// 10.0.0.1@tcp control 1700000000 <nil>
	// true true
}
