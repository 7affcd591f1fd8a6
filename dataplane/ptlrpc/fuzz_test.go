package ptlrpc

import (
	"bytes"
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/lnet"
	ptlrpcv1 "github.com/nacrefs/nacre/proto/nacre/ptlrpc/v1"
)

// seedRequest returns the bytes of a request header for op followed by
// body.
func seedRequest(tb testing.TB, h wire.Header, body []byte) []byte {
	h.Type, h.BodyLen = wire.TypeRequest, uint32(len(body))
	if h.XID == 0 {
		h.XID = 16
	}
	b := make([]byte, wire.HeaderSize)
	if err := h.Marshal(b); err != nil {
		tb.Fatal(err)
	}
	return append(b, body...)
}

// FuzzServiceRequest PUTs arbitrary bytes to a connection-oriented
// service's request portal, as a broken or hostile peer would, and checks
// after each that the service still answers a well-formed request. The
// seeds cover every path of the service's decoding: headers of each type,
// bad bodies for CONNECT, bulk lengths and checksums, unknown opcodes, and
// truncation.
func FuzzServiceRequest(f *testing.F) {
	connect, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: "nacre-OST0000", ClientUuid: "fuzz", Version: wire.Version, ConnCount: 1})
	nbs, _ := wire.AppendNiobufs(nil, []wire.Niobuf{{Offset: 0, Len: 4096}})
	f.Add(seedRequest(f, wire.Header{Opcode: wire.OSTConnect}, connect))
	f.Add(seedRequest(f, wire.Header{Opcode: wire.OSTConnect}, []byte{0x0a, 0xff, 0xff}))
	f.Add(seedRequest(f, wire.Header{Opcode: wire.OSTConnect}, nil))
	f.Add(seedRequest(f, wire.Header{Opcode: wire.OSTDisconnect, Handle: 1}, nil))
	f.Add(seedRequest(f, wire.Header{Opcode: opWrite, Handle: 1, BulkLen: 4096}, nbs))
	f.Add(seedRequest(f, wire.Header{Opcode: opWrite, Flags: wire.MsgBulkCksum, BulkLen: 4096, BulkCksum: 1}, nbs))
	f.Add(seedRequest(f, wire.Header{Opcode: opEcho, Flags: wire.MsgResent, Handle: 7, ConnCount: 9, LastXID: 3}, []byte("x")))
	f.Add(seedRequest(f, wire.Header{Opcode: wire.Opcode(0xdead)}, nil))
	f.Add(seedRequest(f, wire.Header{Opcode: wire.OBDPing, Timeout: 1}, nil))
	f.Add(seedRequest(f, wire.Header{Opcode: opEcho, BulkLen: wire.MaxBulkSize}, nil)[:wire.HeaderSize-3])
	f.Add([]byte("PRPC"))
	f.Add([]byte{})

	e := loEnv(f)
	ts := NewTargetSet()
	if _, err := ts.NewTarget(TargetConfig{Name: "nacre-OST0000", AutoCommit: true, Logger: quiet}); err != nil {
		f.Fatal(err)
	}
	o := newObjStore(1 << 20)
	s, err := NewService(e.srv, ServiceConfig{Name: "fuzz", RequestPortal: reqPortal, Targets: ts, Logger: quiet,
		Handlers: map[wire.Opcode]HandlerSpec{
			opEcho:  {Fn: echo, Flags: NoExport},
			opWrite: {Fn: o.write, Flags: HasBulk},
		}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close(context.Background()) })
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})

	f.Fuzz(func(t *testing.T, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if len(data) > 0 {
			md, err := e.cli.Bind(lnet.MD{Buffers: [][]byte{data}, Threshold: 1})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.cli.Put(ctx, md, lnet.NoAckReq, e.target, reqPortal, 16, 0, uint64(OSTBulkPortal)<<32|rplPortal); err != nil {
				t.Fatal(err)
			}
		}
		body := []byte("still there?")
		got, err := c.Call(ctx, e.target, reqPortal, opEcho, body)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("service after %q: %v", data, err)
		}
	})
}

// FuzzReplyDecode feeds arbitrary bytes to a client's reply decoding, as a
// broken server would PUT them into the reply MD: the client must deliver
// an error or a reply, never panic, and never read outside the bytes that
// landed.
func FuzzReplyDecode(f *testing.F) {
	rep := wire.Header{Type: wire.TypeReply, Opcode: opEcho, XID: 16, BodyLen: 5}
	b := make([]byte, wire.HeaderSize)
	rep.Marshal(b)
	f.Add(append(b, "hello"...), uint8(0))
	early := wire.Header{Type: wire.TypeReply, Flags: wire.MsgEarlyReply, Opcode: opEcho, XID: 16, Timeout: 1000}
	early.Marshal(b)
	f.Add(bytes.Clone(b), uint8(1))
	errh := wire.Header{Type: wire.TypeError, Opcode: opEcho, XID: 16, Status: -5}
	errh.Marshal(b)
	f.Add(bytes.Clone(b), uint8(2))
	rep.BodyLen = 1 << 20
	rep.Marshal(b)
	f.Add(bytes.Clone(b), uint8(3))
	f.Add([]byte("garbage"), uint8(4))

	c := NewClient(nil, ClientConfig{Logger: quiet})
	f.Fuzz(func(t *testing.T, data []byte, truncated uint8) {
		r := &rpc{c: c, req: &Req{Opcode: opEcho}, xid: 16, wake: make(chan struct{}, 1)}
		buf := make([]byte, replyOffset+len(data))
		copy(buf[replyOffset:], data)
		ev := lnet.Event{Type: lnet.EventPut, Offset: replyOffset, MLength: uint32(len(data)), RLength: uint32(len(data)) + uint32(truncated%2)}
		r.replyBufs[0] = buf
		r.replyEvent(ev)
		switch {
		case r.ev.hasFinal:
			m := r.ev.final
			if m.err == nil {
				if int(m.hdr.BodyLen) != len(m.body) || int(m.hdr.BodyLen) > len(data)-wire.HeaderSize {
					t.Fatalf("body of %d bytes for BodyLen %d from %d bytes", len(m.body), m.hdr.BodyLen, len(data))
				}
				if truncated%2 == 1 {
					t.Fatal("a truncated reply was accepted")
				}
			}
		case r.ev.hasEarly:
		default:
			t.Fatalf("reply %q neither delivered nor refused", data)
		}
	})
}

// FuzzConnectBody runs the CONNECT handler on arbitrary bodies: it must
// refuse what does not decode or makes no sense, and create at most one
// export per client uuid.
func FuzzConnectBody(f *testing.F) {
	good, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: "nacre-OST0000", ClientUuid: "c1", Version: wire.Version, ConnCount: 1})
	f.Add(good)
	other, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: "nacre-OST0000", ClientUuid: "c1", Version: 7 << 16, Handle: 99})
	f.Add(other)
	long, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: "nacre-OST0000", ClientUuid: string(bytes.Repeat([]byte("u"), 200)), Version: wire.Version})
	f.Add(long)
	f.Add([]byte{0xff})
	f.Add([]byte{})

	ts := NewTargetSet()
	tgt, err := ts.NewTarget(TargetConfig{Name: "nacre-OST0000", AutoCommit: true, Logger: quiet, MaxExports: 8})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { tgt.Close(context.Background()) })
	f.Fuzz(func(t *testing.T, body []byte) {
		req := &Request{Body: body}
		rep, status := ts.connect(req)
		switch {
		case status == 0 && req.exp == nil:
			t.Fatal("connect succeeded without an export")
		case status == 0:
			var cr ptlrpcv1.ConnectReply
			if err := proto.Unmarshal(rep, &cr); err != nil || cr.Handle == 0 {
				t.Fatalf("connect reply %x: %v", rep, err)
			}
		case !wire.ErrnoValid(status):
			t.Fatalf("status %d", status)
		}
		if n := len(tgt.Exports()); n > 8 {
			t.Fatalf("%d exports, at most 8", n)
		}
	})
}
