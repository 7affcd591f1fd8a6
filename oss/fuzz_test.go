package oss

import (
	"context"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// FuzzOSTRequest sends arbitrary bodies (and a small bulk) for every OST
// opcode from a connected client: each gets a reply, good or bad, and the
// OST keeps serving; nothing panics.
func FuzzOSTRequest(f *testing.F) {
	ops := []wire.Opcode{wire.OSTCreate, wire.OSTDestroy, wire.OSTGetattr, wire.OSTSetattr, wire.OSTPunch,
		wire.OSTWrite, wire.OSTRead, wire.OSTSync, wire.OSTStatfs, wire.OSTLadvise, wire.OSTFallocate, wire.OSTSetInfo}
	fd := &ostv1.FID{Seq: testSeq, Oid: 1}
	seeds := [][]byte{
		body(f, &ostv1.CreateRequest{Seq: testSeq, Count: 3}),
		body(f, &ostv1.ObjectRequest{Fid: fd, Attr: &ostv1.Attr{Mode: 0o644, Valid: 1 << 5}}),
		body(f, &ostv1.PunchRequest{Fid: fd, Start: 1, End: 100}),
		body(f, &ostv1.BRWRequest{Fid: fd, Niobufs: niobufs(f, []wire.Niobuf{{Offset: 7, Len: 4096}}), GrantWant: 1 << 20}),
		body(f, &ostv1.LadviseRequest{Fid: fd, Advice: []*ostv1.Advice{{Kind: 1, End: 10}}}),
		body(f, &ostv1.FallocateRequest{Fid: fd, Start: 3, End: 8000, KeepSize: true}),
		body(f, &ostv1.SetInfoRequest{GrantShrink: 1 << 20, ShrinkSeq: 1}),
		{0xff, 0xff, 0xff}, nil,
	}
	for i, s := range seeds {
		for j := range ops {
			if i%3 == j%3 {
				f.Add(uint8(j), s, i%2 == 0)
			}
		}
	}
	e := newOSSEnv(f, 1, 1)
	oc := e.client(0)
	ctx := context.Background()
	oc.precreate(ctx, 0, 4)
	bulk := make([]byte, 4096)
	f.Fuzz(func(t *testing.T, op uint8, b []byte, withBulk bool) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		req := &ptlrpc.Req{Opcode: ops[int(op)%len(ops)], Body: b}
		if withBulk {
			dir := ptlrpc.BulkWrite
			if req.Opcode == wire.OSTRead {
				dir = ptlrpc.BulkRead
			}
			req.Bulk = &ptlrpc.Bulk{Op: dir, Buffers: [][]byte{bulk}}
		}
		oc.imps[0].Do(cctx, req) // any answer will do
		if _, err := oc.imps[0].Do(cctx, &ptlrpc.Req{Opcode: wire.OSTStatfs}); err != nil {
			t.Fatalf("OST after %v %x: %v", req.Opcode, b, err)
		}
	})
}
