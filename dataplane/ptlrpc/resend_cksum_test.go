package ptlrpc

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	ptlrpcv1 "github.com/nacrefs/nacre/proto/nacre/ptlrpc/v1"
)

// TestResendAfterReconnectToFewerChecksums: a checksummed write is sent
// by CRC-32 on a connection whose target agreed to CRC-32 and CRC-32C; its
// reply is lost, the import reconnects, and the target now (a failover
// partner of an older version) agrees to CRC-32C only. The resend must not
// name CRC-32: an older server drops a request with the unknown
// CKSUM_CRC32 bit as malformed, so the write would time out forever.
func TestResendAfterReconnectToFewerChecksums(t *testing.T) {
	e := loEnv(t)
	agreed := atomic.Uint32{}
	agreed.Store(uint32(ChecksumTypes))
	faults := &Faults{}
	o := newObjStore(1 << 20)
	var mu sync.Mutex
	type send struct {
		flags  wire.MsgFlags
		agreed ChecksumType
	}
	var sends []send
	curAgreed := atomic.Uint32{}
	connect := func(_ context.Context, r *Request) ([]byte, int32) {
		var cr ptlrpcv1.ConnectRequest
		if err := Unmarshal(r.Body, &cr); err != nil {
			return nil, -errnoEPROTO
		}
		a := agreed.Load()
		curAgreed.Store(uint32(negotiated(a & cr.CksumTypes)))
		return marshalReply(&ptlrpcv1.ConnectReply{Handle: 1, Reconnected: cr.Handle != 0, Version: wire.Version,
			Instance: 1, CksumTypes: a & cr.CksumTypes})
	}
	write := func(ctx context.Context, r *Request) ([]byte, int32) {
		mu.Lock()
		sends = append(sends, send{r.Header.Flags, ChecksumType(curAgreed.Load())})
		mu.Unlock()
		return o.write(ctx, r)
	}
	s, err := NewService(e.srv, ServiceConfig{Name: "ost_io", RequestPortal: reqPortal, Logger: quiet, Faults: faults,
		Handlers: map[wire.Opcode]HandlerSpec{
			wire.OSTConnect: {Fn: connect},
			opWrite:         {Fn: write, Flags: HasBulk},
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
	imp, err := c.NewImport(ImportConfig{Target: "nacre-OST0000", Servers: []lwire.ProcessID{e.target}, Portal: reqPortal,
		MinTimeout: 150 * time.Millisecond, InitialTimeout: 100 * time.Millisecond, PingInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer imp.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := imp.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if got := imp.ChecksumTypes(); got != ChecksumTypes {
		t.Fatalf("agreed %v", got)
	}
	// The OSC picks CRC-32, which the target agreed to.
	data := pattern(64<<10, 9)
	req := &Req{Opcode: opWrite, Body: mustNiobufs(t, []wire.Niobuf{{Offset: 0, Len: uint32(len(data))}}),
		Bulk: &Bulk{Op: BulkWrite, Buffers: [][]byte{data}, Checksum: true, ChecksumType: ChecksumCRC32}}
	agreed.Store(uint32(ChecksumCRC32C)) // the next CONNECT is answered by an older server
	faults.Arm(FailDropReply, 1)
	if _, err := imp.Do(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := imp.ChecksumTypes(); got != ChecksumCRC32C {
		t.Fatalf("after the reconnect the target agreed to %v, want crc32c", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sends) < 2 {
		t.Fatalf("%d sends, want a resend", len(sends))
	}
	for i, sd := range sends {
		if used := flagChecksum(sd.flags); used&sd.agreed == 0 {
			t.Errorf("send %d (%v) checksummed by %v on a connection that agreed to %v only", i, sd.flags, used, sd.agreed)
		}
	}
}
