package ptlrpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/iovec"
)

const (
	opWrite = wire.OSTWrite
	opRead  = wire.OSTRead
)

// objStore is a test object: one byte slice that bulk writes land in and
// bulk reads come from, at the offsets of the request's niobufs. A write
// GETs into a staging buffer first, so a failed transfer changes nothing.
type objStore struct {
	mu   sync.Mutex
	data []byte
	// from has reads produce their bytes with BulkPutFrom, piece by
	// piece, instead of handing BulkPut views of data.
	from bool
}

func newObjStore(size int) *objStore { return &objStore{data: make([]byte, size)} }

// bytes returns a copy of [off, off+n) of the object.
func (o *objStore) bytes(off, n int) []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return bytes.Clone(o.data[off : off+n])
}

// niobufs decodes and bounds-checks a request's vector.
func (o *objStore) niobufs(req *Request) ([]wire.Niobuf, int32) {
	nbs, err := wire.ParseNiobufs(req.Body, 256)
	if err != nil || len(nbs) == 0 {
		return nil, -errnoEPROTO
	}
	if nbs[len(nbs)-1].End() > uint64(len(o.data)) {
		return nil, -errnoEINVAL
	}
	return nbs, 0
}

func (o *objStore) write(ctx context.Context, req *Request) ([]byte, int32) {
	nbs, st := o.niobufs(req)
	if st != 0 {
		return nil, st
	}
	total := 0
	for _, nb := range nbs {
		total += int(nb.Len)
	}
	stage := make([]byte, total)
	if _, err := req.BulkGet(ctx, [][]byte{stage}); err != nil {
		return nil, Errno(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, nb := range nbs {
		stage = stage[copy(o.data[nb.Offset:nb.End()], stage):]
	}
	return nil, 0
}

func (o *objStore) read(ctx context.Context, req *Request) ([]byte, int32) {
	nbs, st := o.niobufs(req)
	if st != 0 {
		return nil, st
	}
	views := make([][]byte, len(nbs))
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, nb := range nbs {
		views[i] = o.data[nb.Offset:nb.End()]
	}
	if !o.from {
		// Straight from the object into the client's buffer: no copy.
		if _, err := req.BulkPut(ctx, views); err != nil {
			return nil, Errno(err)
		}
		return nil, 0
	}
	// Produced in order into a staging buffer, or into the client's
	// buffer on the loopback; the vector goes piece by piece.
	next := 0
	n := iovec.Len(views)
	_, err := req.BulkPutFrom(ctx, n, 0, func() [][]byte { return [][]byte{make([]byte, n)} }, func(off int, dst [][]byte) error {
		if off != next {
			return fmt.Errorf("fill at %d, want %d: out of order", off, next)
		}
		copyFrom(dst, views, off)
		next += iovec.Len(dst)
		return nil
	})
	if err != nil {
		return nil, Errno(err)
	}
	return nil, 0
}

func startBulkService(t testing.TB, e env, o *objStore, faults *Faults, maxBulk int) *Service {
	s, err := NewService(e.srv, ServiceConfig{Name: "ost_io", RequestPortal: reqPortal, Logger: quiet, Faults: faults,
		MaxBulkSize: maxBulk, Handlers: map[wire.Opcode]HandlerSpec{
			opWrite: {Fn: o.write, Flags: HasBulk},
			opRead:  {Fn: o.read, Flags: HasBulk},
			opEcho:  {Fn: echo},
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

func mustNiobufs(t testing.TB, nbs []wire.Niobuf) []byte {
	b, err := wire.AppendNiobufs(nil, nbs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// splitIOV cuts b into buffers at the given lengths (the rest is the last
// buffer), as a client's pages would be.
func splitIOV(b []byte, cuts ...int) [][]byte {
	var out [][]byte
	for _, n := range cuts {
		out = append(out, b[:n:n])
		b = b[n:]
	}
	return append(out, b)
}

func runBulk(t *testing.T, mk func(testing.TB) env) {
	for _, from := range []bool{false, true} {
		put := "put"
		if from {
			put = "from"
		}
		t.Run("vectors/"+put, func(t *testing.T) { testBulkVectors(t, mk(t), from) })
		for _, ct := range []ChecksumType{ChecksumCRC32C, ChecksumCRC32} {
			t.Run("checksum/"+ct.String()+"/"+put, func(t *testing.T) { testBulkChecksum(t, mk(t), ct, from) })
		}
	}
	t.Run("bad", func(t *testing.T) { testBulkBad(t, mk(t)) })
}

func TestBulkLolnd(t *testing.T)   { runBulk(t, loEnv) }
func TestBulkSocklnd(t *testing.T) { runBulk(t, sockEnv) }

// testBulkVectors writes multi-niobuf vectors at odd offsets from odd
// client buffers, reads other vectors back, and checks every byte against a
// model of the object.
func testBulkVectors(t *testing.T, e env, from bool) {
	const size = 24 << 20
	o := newObjStore(size)
	o.from = from
	s := startBulkService(t, e, o, nil, wire.MaxBulkSize)
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
	base := e.cli.Stats().MDs
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	model := make([]byte, size)

	writes := []struct {
		nbs  []wire.Niobuf
		cuts []int
		sum  bool
		typ  ChecksumType
	}{
		{[]wire.Niobuf{{Offset: 3, Len: 5000}}, nil, false, 0},
		{[]wire.Niobuf{{Offset: 7, Len: 1}, {Offset: 4096, Len: 1<<20 + 17}, {Offset: 3<<20 + 1, Len: 123}}, []int{1, 4095, 1 << 19}, true, 0},
		{[]wire.Niobuf{{Offset: 5 << 20, Len: 4 << 20}}, []int{1<<20 - 1, 2, 2 << 20}, true, ChecksumCRC32},     // the default RPC size
		{[]wire.Niobuf{{Offset: 8<<20 + 5, Len: 8 << 20}, {Offset: 16<<20 + 5, Len: 8<<20 - 5}}, nil, false, 0}, // 16 MiB, the most
		{[]wire.Niobuf{{Offset: 100, Len: 50}, {Offset: 150, Len: 50}}, []int{25}, true, ChecksumCRC32C},        // touching extents
	}
	for i, w := range writes {
		total := 0
		for _, nb := range w.nbs {
			total += int(nb.Len)
		}
		data := pattern(total, 11*i+1)
		_, err := c.Do(ctx, e.target, reqPortal, &Req{Opcode: opWrite, Body: mustNiobufs(t, w.nbs),
			Bulk: &Bulk{Op: BulkWrite, Buffers: splitIOV(data, w.cuts...), Checksum: w.sum, ChecksumType: w.typ}})
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		rest := data
		for _, nb := range w.nbs {
			rest = rest[copy(model[nb.Offset:nb.End()], rest):]
		}
	}
	if st := s.Stats(); st.Direct != 0 {
		// A small bulk comes on the request's connection: its reader
		// must not be the one waiting for it.
		t.Errorf("%d bulk requests were run by the goroutine that received them", st.Direct)
	}
	if !bytes.Equal(o.bytes(0, size), model) {
		t.Fatal("object differs from the model after the writes")
	}

	reads := []struct {
		nbs  []wire.Niobuf
		cuts []int
		sum  bool
		typ  ChecksumType
	}{
		{[]wire.Niobuf{{Offset: 0, Len: 4 << 20}}, []int{3, 1 << 20}, true, 0},
		{[]wire.Niobuf{{Offset: 1, Len: 9}, {Offset: 4095, Len: 2}, {Offset: 3<<20 + 100, Len: 1<<20 + 3}}, []int{5}, false, 0},
		{[]wire.Niobuf{{Offset: 7 << 20, Len: 16 << 20}}, nil, true, ChecksumCRC32},
	}
	for i, r := range reads {
		total := 0
		for _, nb := range r.nbs {
			total += int(nb.Len)
		}
		buf := bytes.Repeat([]byte{0xee}, total)
		_, err := c.Do(ctx, e.target, reqPortal, &Req{Opcode: opRead, Body: mustNiobufs(t, r.nbs),
			Bulk: &Bulk{Op: BulkRead, Buffers: splitIOV(buf, r.cuts...), Checksum: r.sum, ChecksumType: r.typ}})
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		var want []byte
		for _, nb := range r.nbs {
			want = append(want, model[nb.Offset:nb.End()]...)
		}
		if !bytes.Equal(buf, want) {
			t.Fatalf("read %d: bytes differ from the model", i)
		}
	}
	if st := s.Stats(); st.BulkChecksumErrors != 0 || st.BulkBytes == 0 {
		t.Fatalf("stats %+v", st)
	}
	waitMDs(t, e.cli, base)
}

// testBulkChecksum corrupts data in flight both ways, checksummed by ct,
// and checks that the corruption is caught, counted and retried, never
// accepted.
func testBulkChecksum(t *testing.T, e env, ct ChecksumType, from bool) {
	o := newObjStore(1 << 20)
	o.from = from
	faults := &Faults{}
	s := startBulkService(t, e, o, faults, 0)
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nbs := mustNiobufs(t, []wire.Niobuf{{Offset: 1000, Len: 300 << 10}})
	data := pattern(300<<10, 5)

	// A write corrupted once: the server fetches it again.
	faults.Arm(FailBulkWriteCorrupt, 1)
	if _, err := c.Do(ctx, e.target, reqPortal, &Req{Opcode: opWrite, Body: nbs,
		Bulk: &Bulk{Op: BulkWrite, Buffers: [][]byte{data}, Checksum: true, ChecksumType: ct}}); err != nil {
		t.Fatalf("write with one corruption: %v", err)
	}
	if got := s.Stats().BulkChecksumErrors; got != 1 {
		t.Fatalf("server checksum errors %d, want 1", got)
	}
	if !bytes.Equal(o.bytes(1000, len(data)), data) {
		t.Fatal("object differs after a retried write")
	}

	// A write corrupted every time: -EBADMSG and nothing written.
	faults.Arm(FailBulkWriteCorrupt, -1)
	other := pattern(300<<10, 6)
	_, err := c.Do(ctx, e.target, reqPortal, &Req{Opcode: opWrite, Body: nbs,
		Bulk: &Bulk{Op: BulkWrite, Buffers: [][]byte{other}, Checksum: true, ChecksumType: ct}})
	if !errors.Is(err, syscall.EBADMSG) {
		t.Fatalf("write corrupted every time: %v, want EBADMSG", err)
	}
	faults.Disarm(FailBulkWriteCorrupt)
	if !bytes.Equal(o.bytes(1000, len(data)), data) {
		t.Fatal("a write that failed its checksum changed the object")
	}
	if got := s.Stats().BulkChecksumErrors; got != 1+bulkVerifyTries {
		t.Fatalf("server checksum errors %d, want %d", got, 1+bulkVerifyTries)
	}

	// A read whose checksum is wrong once: the client reads again.
	faults.Arm(FailBulkReadCorrupt, 1)
	buf := make([]byte, len(data))
	if _, err := c.Do(ctx, e.target, reqPortal, &Req{Opcode: opRead, Body: nbs,
		Bulk: &Bulk{Op: BulkRead, Buffers: [][]byte{buf}, Checksum: true, ChecksumType: ct}}); err != nil {
		t.Fatalf("read with one corruption: %v", err)
	}
	if !bytes.Equal(buf, data) {
		t.Fatal("read bytes differ")
	}
	if got := c.Stats().BulkChecksumErrors; got != 1 {
		t.Fatalf("client checksum errors %d, want 1", got)
	}
	// Wrong every time: the client gives up with ErrBulkChecksum.
	faults.Arm(FailBulkReadCorrupt, -1)
	_, err = c.Do(ctx, e.target, reqPortal, &Req{Opcode: opRead, Body: nbs,
		Bulk: &Bulk{Op: BulkRead, Buffers: [][]byte{buf}, Checksum: true, ChecksumType: ct}})
	if !errors.Is(err, ErrBulkChecksum) {
		t.Fatalf("read corrupted every time: %v", err)
	}
	if got := c.Stats().BulkChecksumErrors; got != 1+bulkVerifyTries {
		t.Fatalf("client checksum errors %d, want %d", got, 1+bulkVerifyTries)
	}
	// A write whose caller summed it already sends that sum, which the
	// server checks as any other: joined from the pieces' sums it passes,
	// a wrong one is refused and nothing is written.
	faults.Disarm(FailBulkReadCorrupt)
	third := pattern(300<<10, 7)
	sh := ct.Shifter(100 << 10)
	joined := ct.Update(0, third[:100<<10])
	for off := 100 << 10; off < len(third); off += 100 << 10 {
		joined = sh.Combine(joined, ct.Update(0, third[off:off+100<<10]))
	}
	if _, err := c.Do(ctx, e.target, reqPortal, &Req{Opcode: opWrite, Body: nbs,
		Bulk: &Bulk{Op: BulkWrite, Buffers: [][]byte{third}, Checksum: true, ChecksumType: ct, Presummed: true, Presum: joined}}); err != nil {
		t.Fatalf("presummed write: %v", err)
	}
	if !bytes.Equal(o.bytes(1000, len(third)), third) {
		t.Fatal("object differs after a presummed write")
	}
	errs := s.Stats().BulkChecksumErrors
	_, err = c.Do(ctx, e.target, reqPortal, &Req{Opcode: opWrite, Body: nbs,
		Bulk: &Bulk{Op: BulkWrite, Buffers: [][]byte{other}, Checksum: true, ChecksumType: ct, Presummed: true, Presum: joined}})
	if !errors.Is(err, syscall.EBADMSG) {
		t.Fatalf("write presummed wrong: %v, want EBADMSG", err)
	}
	if !bytes.Equal(o.bytes(1000, len(third)), third) {
		t.Fatal("a write presummed wrong changed the object")
	}
	if got := s.Stats().BulkChecksumErrors; got != errs+bulkVerifyTries {
		t.Fatalf("server checksum errors %d after a wrong presum, want %d", got, errs+bulkVerifyTries)
	}

	// The server used the algorithm each request named, and no other.
	st := s.Stats()
	used, unused := st.BulkCRC32C, st.BulkCRC32
	if ct == ChecksumCRC32 {
		used, unused = unused, used
	}
	if used < 4 || unused != 0 {
		t.Fatalf("server checksummed %d transfers by %v and %d by the other", used, ct, unused)
	}
}

// testBulkBad sends bulk requests that break the rules; each gets an error
// and the service keeps serving.
func testBulkBad(t *testing.T, e env) {
	o := newObjStore(8 << 20)
	s := startBulkService(t, e, o, nil, 0)
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
	base := e.cli.Stats().MDs
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	small := make([]byte, 4096)
	tests := []struct {
		name string
		req  *Req
		want error
	}{
		{"niobuf past the end of the bulk", &Req{Opcode: opWrite,
			Body: mustNiobufs(t, []wire.Niobuf{{Offset: 0, Len: 4096}, {Offset: 8192, Len: 1}}),
			Bulk: &Bulk{Op: BulkWrite, Buffers: [][]byte{small}}}, syscall.EPROTO},
		{"read niobuf past the end of the bulk", &Req{Opcode: opRead,
			Body: mustNiobufs(t, []wire.Niobuf{{Offset: 0, Len: 8192}}),
			Bulk: &Bulk{Op: BulkRead, Buffers: [][]byte{small}}}, syscall.EPROTO},
		{"bulk over the service's 4 MiB", &Req{Opcode: opWrite,
			Body: mustNiobufs(t, []wire.Niobuf{{Offset: 0, Len: 4<<20 + 1}}),
			Bulk: &Bulk{Op: BulkWrite, Buffers: [][]byte{make([]byte, 4<<20+1)}}}, syscall.EMSGSIZE},
		{"bulk for a handler without bulk", &Req{Opcode: opEcho,
			Bulk: &Bulk{Op: BulkWrite, Buffers: [][]byte{small}}}, syscall.EPROTO},
		{"garbage niobufs", &Req{Opcode: opWrite, Body: []byte("not a niobuf vector"),
			Bulk: &Bulk{Op: BulkWrite, Buffers: [][]byte{small}}}, syscall.EPROTO},
		{"niobuf past the object", &Req{Opcode: opWrite,
			Body: mustNiobufs(t, []wire.Niobuf{{Offset: 1 << 40, Len: 4096}}),
			Bulk: &Bulk{Op: BulkWrite, Buffers: [][]byte{small}}}, syscall.EINVAL},
	}
	before := o.bytes(0, 8<<20)
	for _, tt := range tests {
		_, err := c.Do(ctx, e.target, reqPortal, tt.req)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if !bytes.Equal(before, o.bytes(0, 8<<20)) {
		t.Fatal("a refused request changed the object")
	}
	// Client-side refusals: nothing is sent.
	for _, req := range []*Req{
		{Opcode: opWrite, Bulk: &Bulk{Op: BulkWrite}},
		{Opcode: opWrite, Bulk: &Bulk{Op: BulkWrite, Buffers: [][]byte{make([]byte, wire.MaxBulkSize+1)}}},
		{Opcode: opWrite, Bulk: &Bulk{Op: 9, Buffers: [][]byte{small}}},
	} {
		if _, err := c.Do(ctx, e.target, reqPortal, req); err == nil {
			t.Errorf("bulk %+v accepted", req.Bulk)
		}
	}
	body := pattern(777, 1)
	if got, err := c.Call(ctx, e.target, reqPortal, opEcho, body); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("service after bad bulk: %v", err)
	}
	if st := s.Stats(); st.Oversize != 1 {
		t.Fatalf("oversize %d, want 1", st.Oversize)
	}
	waitMDs(t, e.cli, base)
}

// TestBulkParallel moves 4 MiB RPCs both ways, 8 at a time, through one
// client, each to its own extent, and checks every byte.
func TestBulkParallel(t *testing.T) {
	e := sockEnv(t)
	const rpc, n = 4 << 20, 8
	o := newObjStore(rpc * n)
	startBulkService(t, e, o, nil, 0)
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	calls := make([]Call, n)
	for i := range calls {
		calls[i] = Call{Target: e.target, Portal: reqPortal, Req: &Req{Opcode: opWrite,
			Body: mustNiobufs(t, []wire.Niobuf{{Offset: uint64(i * rpc), Len: rpc}}),
			Bulk: &Bulk{Op: BulkWrite, Buffers: [][]byte{pattern(rpc, i)}, Checksum: i%2 == 0}}}
	}
	for i, r := range c.CallSet(ctx, calls) {
		if r.Err != nil {
			t.Fatalf("write %d: %v", i, r.Err)
		}
	}
	bufs := make([][]byte, n)
	for i := range calls {
		bufs[i] = make([]byte, rpc)
		calls[i].Req = &Req{Opcode: opRead, Body: calls[i].Req.Body,
			Bulk: &Bulk{Op: BulkRead, Buffers: [][]byte{bufs[i]}, Checksum: i%2 == 1}}
	}
	for i, r := range c.CallSet(ctx, calls) {
		if r.Err != nil {
			t.Fatalf("read %d: %v", i, r.Err)
		}
		if !bytes.Equal(bufs[i], pattern(rpc, i)) {
			t.Fatalf("read %d: bytes differ", i)
		}
	}
}
