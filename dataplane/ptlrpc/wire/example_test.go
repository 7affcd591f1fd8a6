package wire_test

import (
	"errors"
	"fmt"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
)

func ExampleHeader_Marshal() {
	req := wire.Header{
		Type:      wire.TypeRequest,
		Opcode:    wire.OSTWrite,
		XID:       1001,
		LastXID:   1000,
		Handle:    0x5eed,
		ConnCount: 1,
		Timeout:   30,
		BodyLen:   64,
	}
	if err := req.SetJobID("dd.1000"); err != nil {
		fmt.Println(err)
		return
	}
	// The header and its body are sent as one LNet PUT; the header buffer
	// can live on the stack.
	var buf [wire.HeaderSize]byte
	if err := req.Marshal(buf[:]); err != nil {
		fmt.Println(err)
		return
	}

	var got wire.Header
	if err := got.Unmarshal(buf[:]); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(got.Type, got.Opcode, got.XID, got.JobID(), got.Flags)

	// A request never carries a status; replies carry network errnos.
	bad := req
	bad.Status = -5
	fmt.Println(errors.Is(bad.Marshal(buf[:]), wire.ErrBadField))
	// Output:
	// REQUEST OST_WRITE 1001 dd.1000 0
	// true
}

func ExampleParseNiobufs() {
	b, err := wire.AppendNiobufs(nil, []wire.Niobuf{
		{Offset: 0, Len: 4096, Flags: wire.NiobufFromGrant},
		{Offset: 8192, Len: 4096, Flags: wire.NiobufFromGrant},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	n, err := wire.ParseNiobufs(b, 256)
	fmt.Println(len(b), n, err)

	// Overlapping extents are refused, by both sides.
	_, err = wire.AppendNiobufs(nil, []wire.Niobuf{{Offset: 0, Len: 4096}, {Offset: 4000, Len: 10}})
	fmt.Println(err)
	// Output:
	// 32 [{0 4096 32} {8192 4096 32}] <nil>
	// ptlrpc: bad field: niobuf 1 [4000,4010) overlaps niobuf 0 [0,4096)
}
