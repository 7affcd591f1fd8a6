package oss

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/tmpfs"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/lnet/lnettest"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	"github.com/nacrefs/nacre/oss/ofd"
	"github.com/nacrefs/nacre/oss/osd"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"

	_ "github.com/nacrefs/nacre/lnd/lolnd"
	_ "github.com/nacrefs/nacre/lnd/socklnd"
	"github.com/nacrefs/nacre/oss/osdfile"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const testSeq = 0x100000400

// ostLabel names OST i of the test filesystem.
func ostLabel(i int) string { return fmt.Sprintf("nacre-OST%04x", i) }

// openOST formats (if new) and opens an osd-file device in dir.
func openOST(t testing.TB, dir string, i int) osd.Device {
	if _, err := os.Stat(filepath.Join(dir, "osd")); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Join(dir, "osd"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := osd.Format(context.Background(), "file", filepath.Join(dir, "osd"), osd.FormatOptions{Label: ostLabel(i)}); err != nil {
			t.Fatal(err)
		}
	}
	dev, err := osd.Open(context.Background(), "file", filepath.Join(dir, "osd"), osd.OpenOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// ossEnv is an OSS with n OSTs on 127.0.0.2 and the port clients use.
type ossEnv struct {
	t      testing.TB
	port   int
	srvID  lwire.ProcessID
	oss    *OSS
	faults *ptlrpc.Faults
	devs   []osd.Device
	dirs   []string
}

func newOSSEnv(t testing.TB, nOSTs, nClients int, dirs ...string) *ossEnv {
	return newOSSEnvWrapped(t, nil, nOSTs, nClients, dirs...)
}

// newOSSEnvWrapped is newOSSEnv with each OST's device passed through
// wrap (if not nil) before its OFD gets it, so that a test can hold or
// break calls; devs keeps the devices themselves.
func newOSSEnvWrapped(t testing.TB, wrap func(osd.Device) osd.Device, nOSTs, nClients int, dirs ...string) *ossEnv {
	addrs := []string{"127.0.0.2"}
	for i := range nClients {
		addrs = append(addrs, fmt.Sprintf("127.0.0.%d", 20+i))
	}
	e := &ossEnv{t: t, port: lnettest.FreePort(t, addrs...), faults: &ptlrpc.Faults{}}
	ln := lnettest.Start(t, "127.0.0.2", e.port)
	e.srvID = lwire.ProcessID{NID: ln.NIDs()[len(ln.NIDs())-1], PID: ln.PID()}
	var err error
	e.oss, err = New(Config{LNet: ln, Logger: quiet, EvictTimeout: time.Minute, Faults: e.faults})
	if err != nil {
		t.Fatal(err)
	}
	for i := range nOSTs {
		dir := t.TempDir()
		if i < len(dirs) {
			dir = dirs[i]
		}
		dev := openOST(t, dir, i)
		e.devs, e.dirs = append(e.devs, dev), append(e.dirs, dir)
		if wrap != nil {
			dev = wrap(dev)
		}
		if _, err := e.oss.AddOST(dev, ostLabel(i), fmt.Sprintf("ost-%d-uuid", i)); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.oss.Close(ctx)
		for _, d := range e.devs {
			d.Close()
		}
	})
	return e
}

// ostClient is one client's imports to every OST.
type ostClient struct {
	t    testing.TB
	c    *ptlrpc.Client
	imps []*ptlrpc.Import
}

func (e *ossEnv) client(i int) *ostClient { return e.clientWith(i, nil) }

// clientWith is client, whose CONNECTs carry what connectData gives.
func (e *ossEnv) clientWith(i int, connectData func() []byte) *ostClient {
	t := e.t
	ln := lnettest.Start(t, fmt.Sprintf("127.0.0.%d", 20+i), e.port)
	oc := &ostClient{t: t, c: ptlrpc.NewClient(ln, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.OSCReplyPortal, Logger: quiet, UUID: fmt.Sprintf("client-%d", i)})}
	for k := range e.devs {
		imp, err := oc.c.NewImport(ptlrpc.ImportConfig{Target: ostLabel(k), Servers: []lwire.ProcessID{e.srvID}, Portal: ptlrpc.OSTIOPortal,
			MinTimeout: 2 * time.Second, PingInterval: -1, ConnectData: connectData})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { imp.Close(context.Background()) })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := imp.Connect(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		oc.imps = append(oc.imps, imp)
	}
	return oc
}

// close disconnects the client from every OST.
func (oc *ostClient) close() {
	for _, imp := range oc.imps {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		imp.Close(ctx)
		cancel()
	}
}

func body(t testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func niobufs(t testing.TB, nbs []wire.Niobuf) []byte {
	b, err := wire.AppendNiobufs(nil, nbs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// precreate asks OST k for n objects.
func (oc *ostClient) precreate(ctx context.Context, k int, n uint32) []fid.FID {
	rep, err := oc.imps[k].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTCreate, Body: body(oc.t, &ostv1.CreateRequest{Seq: testSeq, Count: n})})
	if err != nil {
		oc.t.Fatalf("precreate on OST%d: %v", k, err)
	}
	var cr ostv1.CreateReply
	if err := proto.Unmarshal(rep, &cr); err != nil || cr.Count != n || cr.Seq != testSeq {
		oc.t.Fatalf("precreate reply %+v: %v", &cr, err)
	}
	out := make([]fid.FID, n)
	for i := range out {
		out[i] = fid.FID{Seq: testSeq, Oid: cr.First + uint32(i)}
	}
	return out
}

// deleteOrphans sends the orphan cleanup of testSeq on OST k, objects up
// to lastUsed used.
func (oc *ostClient) deleteOrphans(ctx context.Context, k int, lastUsed uint32) (*ostv1.CreateReply, error) {
	rep, err := oc.imps[k].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTCreate,
		Body: body(oc.t, &ostv1.CreateRequest{Seq: testSeq, DeleteOrphans: true, LastUsed: lastUsed})})
	if err != nil {
		return nil, err
	}
	var cr ostv1.CreateReply
	return &cr, proto.Unmarshal(rep, &cr)
}

func (oc *ostClient) writeReq(f fid.FID, nbs []wire.Niobuf, data [][]byte, sum bool) *ptlrpc.Req {
	return &ptlrpc.Req{Opcode: wire.OSTWrite, Body: body(oc.t, &ostv1.BRWRequest{Fid: ofdFID(f), Niobufs: niobufs(oc.t, nbs)}),
		Bulk: &ptlrpc.Bulk{Op: ptlrpc.BulkWrite, Buffers: data, Checksum: sum}}
}

func (oc *ostClient) readReq(f fid.FID, nbs []wire.Niobuf, buf [][]byte, sum bool) *ptlrpc.Req {
	return &ptlrpc.Req{Opcode: wire.OSTRead, Body: body(oc.t, &ostv1.BRWRequest{Fid: ofdFID(f), Niobufs: niobufs(oc.t, nbs)}),
		Bulk: &ptlrpc.Bulk{Op: ptlrpc.BulkRead, Buffers: buf, Checksum: sum}}
}

func ofdFID(f fid.FID) *ostv1.FID { return &ostv1.FID{Seq: f.Seq, Oid: f.Oid, Ver: f.Ver} }

func (oc *ostClient) getattr(ctx context.Context, k int, f fid.FID) (*ostv1.Attr, error) {
	rep, err := oc.imps[k].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTGetattr, Body: body(oc.t, &ostv1.ObjectRequest{Fid: ofdFID(f)})})
	if err != nil {
		return nil, err
	}
	var or ostv1.ObjectReply
	if err := proto.Unmarshal(rep, &or); err != nil {
		return nil, err
	}
	return or.Attr, nil
}

func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed*7+1))
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// randomVector picks sorted, non-overlapping niobufs inside [0, span).
func randomVector(r *rand.Rand, span, maxTotal int) []wire.Niobuf {
	var nbs []wire.Niobuf
	off, total := r.IntN(4096), 0
	for off < span && total < maxTotal && len(nbs) < 8 {
		n := 1 + r.IntN(min(span-off, maxTotal-total, 700<<10))
		nbs = append(nbs, wire.Niobuf{Offset: uint64(off), Len: uint32(n)})
		total += n
		off += n + r.IntN(64<<10)
	}
	return nbs
}

// TestParallelBRW: three clients write random vectors at odd offsets to
// objects on 4 OSTs at once (as request sets), then every client reads
// every object back; the bytes match a model exactly.
func TestParallelBRW(t *testing.T) {
	const nClients, perOST, span = 3, 2, 3 << 20
	e := newOSSEnv(t, 4, nClients)
	clients := make([]*ostClient, nClients)
	for i := range clients {
		clients[i] = e.client(i)
	}
	ctx := ctxT(t, 60*time.Second)
	type obj struct {
		ost   int
		f     fid.FID
		model []byte
	}
	objs := make([][]*obj, nClients) // each client owns its objects
	for i, oc := range clients {
		for k := range 4 {
			for _, f := range oc.precreate(ctx, k, perOST) {
				objs[i] = append(objs[i], &obj{ost: k, f: f, model: nil})
			}
		}
	}
	var wg sync.WaitGroup
	for i, oc := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 99))
			for round := range 3 {
				var calls []ptlrpc.SetCall
				for _, o := range objs[i] {
					nbs := randomVector(r, span, 4<<20)
					total := 0
					for _, nb := range nbs {
						total += int(nb.Len)
					}
					data := pattern(total, uint64(i*1000+round*10+o.ost))
					cut := r.IntN(total)
					calls = append(calls, ptlrpc.SetCall{Import: oc.imps[o.ost], Req: oc.writeReq(o.f, nbs, [][]byte{data[:cut], data[cut:]}, round%2 == 0)})
					for _, nb := range nbs {
						if end := int(nb.End()); end > len(o.model) {
							o.model = append(o.model, make([]byte, end-len(o.model))...)
						}
						data = data[copy(o.model[nb.Offset:nb.End()], data):]
					}
				}
				for j, res := range ptlrpc.DoSet(ctx, calls) {
					if res.Err != nil {
						t.Errorf("client %d write %d: %v", i, j, res.Err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i, oc := range clients {
		for owner := range objs {
			for _, o := range objs[owner] {
				a, err := oc.getattr(ctx, o.ost, o.f)
				if err != nil || a.Size != uint64(len(o.model)) {
					t.Fatalf("client %d getattr %v: %+v %v, want size %d", i, o.f, a, err, len(o.model))
				}
				buf := make([]byte, len(o.model))
				if _, err := oc.imps[o.ost].Do(ctx, oc.readReq(o.f, []wire.Niobuf{{Offset: 0, Len: uint32(len(buf))}}, [][]byte{buf}, i == 1)); err != nil {
					t.Fatalf("client %d read %v: %v", i, o.f, err)
				}
				if !bytes.Equal(buf, o.model) {
					t.Fatalf("client %d read %v: bytes differ from the model", i, o.f)
				}
			}
		}
	}
}

// TestSparsePunch: a write far out leaves a hole that reads as zeros and
// takes no space; punch frees a range; a punch to EOF truncates.
func TestSparsePunch(t *testing.T) {
	e := newOSSEnv(t, 1, 1)
	oc := e.client(0)
	ctx := ctxT(t, 30*time.Second)
	f := oc.precreate(ctx, 0, 1)[0]
	const far = 1 << 30
	data := pattern(64<<10, 5)
	if _, err := oc.imps[0].Do(ctx, oc.writeReq(f, []wire.Niobuf{{Offset: far, Len: uint32(len(data))}}, [][]byte{data}, true)); err != nil {
		t.Fatal(err)
	}
	a, err := oc.getattr(ctx, 0, f)
	if err != nil || a.Size != far+uint64(len(data)) {
		t.Fatalf("attr %+v %v", a, err)
	}
	if a.Blocks*512 > 4<<20 {
		t.Fatalf("a 64 KiB write at 1 GiB takes %d bytes: the hole is not sparse", a.Blocks*512)
	}
	buf := bytes.Repeat([]byte{0xaa}, 8192)
	nbs := []wire.Niobuf{{Offset: far - 4096, Len: 8192}}
	if _, err := oc.imps[0].Do(ctx, oc.readReq(f, nbs, [][]byte{buf}, false)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:4096], make([]byte, 4096)) || !bytes.Equal(buf[4096:], data[:4096]) {
		t.Fatal("hole or data read wrong")
	}
	punch := func(start, end uint64) {
		if _, err := oc.imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTPunch, Body: body(t, &ostv1.PunchRequest{Fid: ofdFID(f), Start: start, End: end})}); err != nil {
			t.Fatalf("punch [%d,%d): %v", start, end, err)
		}
	}
	punch(far+4096, far+8192)
	if _, err := oc.imps[0].Do(ctx, oc.readReq(f, []wire.Niobuf{{Offset: far, Len: 12288}}, [][]byte{buf[:8192], make([]byte, 4096)}, false)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 12288)
	if _, err := oc.imps[0].Do(ctx, oc.readReq(f, []wire.Niobuf{{Offset: far, Len: 12288}}, [][]byte{got}, false)); err != nil {
		t.Fatal(err)
	}
	want := append(append(bytes.Clone(data[:4096]), make([]byte, 4096)...), data[8192:12288]...)
	if !bytes.Equal(got, want) {
		t.Fatal("punched range does not read as zeros, or its neighbours changed")
	}
	if a, _ := oc.getattr(ctx, 0, f); a.Size != far+uint64(len(data)) {
		t.Fatalf("punch changed the size: %d", a.Size)
	}
	punch(100, ^uint64(0))
	if a, _ := oc.getattr(ctx, 0, f); a.Size != 100 {
		t.Fatalf("size %d after truncate to 100", a.Size)
	}
	short := bytes.Repeat([]byte{0xaa}, 200)
	if _, err := oc.imps[0].Do(ctx, oc.readReq(f, []wire.Niobuf{{Offset: 0, Len: 200}}, [][]byte{short}, true)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(short[100:], make([]byte, 100)) {
		t.Fatal("bytes past the end did not read as zeros")
	}
}

// TestBadInput: requests that make no sense get an error reply and write
// nothing.
func TestBadInput(t *testing.T) {
	e := newOSSEnv(t, 1, 2)
	oc := e.client(0)
	ctx := ctxT(t, 30*time.Second)
	f := oc.precreate(ctx, 0, 1)[0]
	data := pattern(8192, 1)
	if _, err := oc.imps[0].Do(ctx, oc.writeReq(f, []wire.Niobuf{{Offset: 0, Len: 8192}}, [][]byte{data}, false)); err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		a, err := oc.getattr(ctx, 0, f)
		if err != nil || a.Size != 8192 {
			t.Fatalf("%s: object attr %+v %v", what, a, err)
		}
		got := make([]byte, 8192)
		if _, err := oc.imps[0].Do(ctx, oc.readReq(f, []wire.Niobuf{{Offset: 0, Len: 8192}}, [][]byte{got}, false)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: object bytes changed (%v)", what, err)
		}
	}
	missing := fid.FID{Seq: testSeq, Oid: 999999}
	other := pattern(4096, 2)
	tests := []struct {
		name string
		req  *ptlrpc.Req
		want syscall.Errno
	}{
		{"write to an object that does not exist", oc.writeReq(missing, []wire.Niobuf{{Offset: 0, Len: 4096}}, [][]byte{other}, false), syscall.ENOENT},
		{"read of an object that does not exist", oc.readReq(missing, []wire.Niobuf{{Offset: 0, Len: 4096}}, [][]byte{other}, false), syscall.ENOENT},
		{"niobufs longer than the bulk", &ptlrpc.Req{Opcode: wire.OSTWrite,
			Body: body(t, &ostv1.BRWRequest{Fid: ofdFID(f), Niobufs: niobufs(t, []wire.Niobuf{{Offset: 0, Len: 8192}})}),
			Bulk: &ptlrpc.Bulk{Op: ptlrpc.BulkWrite, Buffers: [][]byte{other}}}, syscall.EINVAL},
		{"absurd offset", oc.writeReq(f, []wire.Niobuf{{Offset: 1 << 62, Len: 4096}}, [][]byte{other}, false), syscall.EFBIG},
		{"offset past the largest object", oc.writeReq(f, []wire.Niobuf{{Offset: osd.MaxObjectSize, Len: 1}}, [][]byte{other[:1]}, false), syscall.EFBIG},
		{"zero fid", oc.writeReq(fid.FID{}, []wire.Niobuf{{Offset: 0, Len: 4096}}, [][]byte{other}, false), syscall.EINVAL},
		{"garbage body", &ptlrpc.Req{Opcode: wire.OSTWrite, Body: []byte{0xff, 0x01},
			Bulk: &ptlrpc.Bulk{Op: ptlrpc.BulkWrite, Buffers: [][]byte{other}}}, syscall.EINVAL},
		{"precreate of nothing", &ptlrpc.Req{Opcode: wire.OSTCreate, Body: body(t, &ostv1.CreateRequest{Seq: testSeq})}, syscall.EINVAL},
		{"precreate in sequence 0", &ptlrpc.Req{Opcode: wire.OSTCreate, Body: body(t, &ostv1.CreateRequest{Count: 5})}, syscall.EINVAL},
		{"punch backwards", &ptlrpc.Req{Opcode: wire.OSTPunch, Body: body(t, &ostv1.PunchRequest{Fid: ofdFID(f), Start: 10, End: 5})}, syscall.EINVAL},
		{"destroy of an object that does not exist", &ptlrpc.Req{Opcode: wire.OSTDestroy, Body: body(t, &ostv1.ObjectRequest{Fid: ofdFID(missing)})}, syscall.ENOENT},
		{"fallocate of nothing", &ptlrpc.Req{Opcode: wire.OSTFallocate, Body: body(t, &ostv1.FallocateRequest{Fid: ofdFID(f), Start: 10, End: 10})}, syscall.EINVAL},
		{"fallocate past the largest object", &ptlrpc.Req{Opcode: wire.OSTFallocate, Body: body(t, &ostv1.FallocateRequest{Fid: ofdFID(f), End: osd.MaxObjectSize + 1})}, syscall.EINVAL},
		{"fallocate of an object that does not exist", &ptlrpc.Req{Opcode: wire.OSTFallocate, Body: body(t, &ostv1.FallocateRequest{Fid: ofdFID(missing), End: 10})}, syscall.ENOENT},
		{"fallocate of more than the OST has", &ptlrpc.Req{Opcode: wire.OSTFallocate, Body: body(t, &ostv1.FallocateRequest{Fid: ofdFID(f), End: osd.MaxObjectSize, KeepSize: true})}, syscall.ENOSPC},
	}
	for _, tt := range tests {
		_, err := oc.imps[0].Do(ctx, tt.req)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := oc.getattr(ctx, 0, missing); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("a refused write created the object: %v", err)
	}
	check("after bad requests")
	// Size goes through OST_PUNCH (under the client's extent lock), not
	// OST_SETATTR, which leaves it.
	if _, err := oc.imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTSetattr, Body: body(t, &ostv1.ObjectRequest{Fid: ofdFID(f),
		Attr: &ostv1.Attr{Size: 1, Valid: uint32(ostv1.AttrValid_ATTR_VALID_SIZE)}})}); err != nil {
		t.Fatalf("setattr of the size: %v", err)
	}
	check("after a setattr of the size")

	// A write whose data is corrupted in flight every time.
	bad := oc.writeReq(f, []wire.Niobuf{{Offset: 0, Len: 4096}}, [][]byte{other}, true)
	e.faults.Arm(ptlrpc.FailBulkWriteCorrupt, -1)
	if _, err := oc.imps[0].Do(ctx, bad); !errors.Is(err, syscall.EBADMSG) {
		t.Fatalf("write with a bad checksum: %v", err)
	}
	e.faults.Disarm(ptlrpc.FailBulkWriteCorrupt)
	check("after a write with a bad checksum")

	// A request from an evicted export.
	o2 := e.client(1)
	ofds := e.oss.OSTs()
	if err := ofds[0].Target().Evict("client-1"); err != nil {
		t.Fatal(err)
	}
	// The export is gone: the raw request with the old handle is refused.
	info := o2.imps[0].Info()
	raw, err := o2.c.Call(ctx, e.srvID, ptlrpc.OSTIOPortal, wire.OSTPunch, body(t, &ostv1.PunchRequest{Fid: ofdFID(f), Start: 0, End: ^uint64(0)}))
	if !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("request without an export: %v %q (handle was %x)", err, raw, info.Handle)
	}
	if _, err := o2.imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTPunch, Body: body(t, &ostv1.PunchRequest{Fid: ofdFID(f), Start: 0, End: ^uint64(0)})}); !errors.Is(err, ptlrpc.ErrEvicted) {
		t.Fatalf("punch from an evicted client: %v", err)
	}
	check("after requests from an evicted client")
}

// TestPrecreateRestart: LAST_ID survives a restart: objects are never
// handed out twice.
func TestPrecreateRestart(t *testing.T) {
	dir := t.TempDir()
	var first []fid.FID
	func() {
		e := newOSSEnv(t, 1, 1, dir)
		oc := e.client(0)
		ctx := ctxT(t, 30*time.Second)
		first = oc.precreate(ctx, 0, 1000)
		first = append(first, oc.precreate(ctx, 0, 7)...)
		ctx2, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		oc.close() // gone: the restarted OST does not wait for it
		e.oss.Close(ctx2)
		e.devs[0].Close()
		e.devs = nil
	}()
	e := newOSSEnv(t, 1, 2, dir)
	oc := e.client(1)
	ctx := ctxT(t, 30*time.Second)
	next := oc.precreate(ctx, 0, 3)
	if next[0].Oid != first[len(first)-1].Oid+1 {
		t.Fatalf("after restart, precreate gave %v; last before was %v", next[0], first[len(first)-1])
	}
	for _, f := range []fid.FID{first[0], first[999], first[1006], next[2]} {
		if _, err := oc.getattr(ctx, 0, f); err != nil {
			t.Fatalf("%v: %v", f, err)
		}
	}
}

// TestENOSPC: on a small target, writes beyond what is left fail with
// ENOSPC before anything is written, grants shrink as the target fills,
// and the grant accounting adds up afterwards.
func TestENOSPC(t *testing.T) {
	dir := tmpfs.Mount(t, "24m")
	e := newOSSEnv(t, 1, 2, dir)
	a, b := e.client(0), e.client(1)
	ctx := ctxT(t, 60*time.Second)
	grantOf := func(oc *ostClient) uint64 {
		var cd ostv1.ConnectData
		proto.Unmarshal(oc.imps[0].Info().TargetData, &cd)
		return cd.Grant
	}
	ga, gb := grantOf(a), grantOf(b)
	st := e.oss.OSTs()[0].Stats()
	if ga == 0 || gb == 0 || st.Granted != ga+gb || st.Exports != 2 {
		t.Fatalf("connect grants a=%d b=%d, server %+v", ga, gb, st)
	}
	f := a.precreate(ctx, 0, 1)[0]
	chunk := pattern(1<<20, 3)
	var off uint64
	var nospace error
	grant := ga
	for i := range 64 {
		rep, err := a.imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTWrite,
			Body: body(t, &ostv1.BRWRequest{Fid: ofdFID(f), Niobufs: niobufs(t, []wire.Niobuf{{Offset: off, Len: 1 << 20}}), FromGrant: grant >= 1<<20, GrantWant: 1 << 20}),
			Bulk: &ptlrpc.Bulk{Op: ptlrpc.BulkWrite, Buffers: [][]byte{chunk}}})
		if err != nil {
			nospace = err
			break
		}
		var br ostv1.BRWReply
		if err := proto.Unmarshal(rep, &br); err != nil {
			t.Fatal(err)
		}
		if i > 2 && br.Grant > grant && grant > 0 && br.Attr.Size > 16<<20 {
			t.Fatalf("grant grew to %d on a nearly full target", br.Grant)
		}
		grant = br.Grant
		off += 1 << 20
	}
	if !errors.Is(nospace, syscall.ENOSPC) {
		t.Fatalf("filling a 24 MiB target: %v after %d MiB", nospace, off>>20)
	}
	attr, err := a.getattr(ctx, 0, f)
	if err != nil || attr.Size != off {
		t.Fatalf("after ENOSPC the object is %+v (%v), want size %d: a refused write changed it", attr, err, off)
	}
	got := make([]byte, 1<<20)
	if _, err := a.imps[0].Do(ctx, a.readReq(f, []wire.Niobuf{{Offset: off - 1<<20, Len: 1 << 20}}, [][]byte{got}, true)); err != nil || !bytes.Equal(got, chunk) {
		t.Fatalf("last acknowledged write reads back wrong: %v", err)
	}
	st = e.oss.OSTs()[0].Stats()
	if st.NoSpace == 0 || st.Granted > 24<<20 {
		t.Fatalf("server stats after ENOSPC %+v", st)
	}
	// Statfs reports the same granted total; grants are within the space.
	rep, err := b.imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTStatfs})
	if err != nil {
		t.Fatal(err)
	}
	var sr ostv1.StatfsReply
	if err := proto.Unmarshal(rep, &sr); err != nil || sr.Granted != st.Granted {
		t.Fatalf("statfs %+v (%v), server granted %d", &sr, err, st.Granted)
	}
	// A client going away gives its grant back.
	if err := b.imps[0].Close(ctx); err != nil {
		t.Fatal(err)
	}
	if after := e.oss.OSTs()[0].Stats(); after.Exports != 1 || after.Granted != st.Granted-gb {
		t.Fatalf("after b disconnected: %+v (b held %d)", after, gb)
	}
}

// TestExtentLockLVB: clients take extent locks on objects from the OST's
// lock server; the lock value block carries the object's size and times,
// and a write under another client's lock shows in a glimpse.
func TestExtentLockLVB(t *testing.T) {
	e := newOSSEnv(t, 1, 1)
	oc := e.client(0)
	ctx := ctxT(t, 30*time.Second)
	f := oc.precreate(ctx, 0, 1)[0]
	data := pattern(12345, 9)
	if _, err := oc.imps[0].Do(ctx, oc.writeReq(f, []wire.Niobuf{{Offset: 100, Len: uint32(len(data))}}, [][]byte{data}, false)); err != nil {
		t.Fatal(err)
	}
	lc := ldlm.NewClient(ldlm.ClientConfig{Logger: quiet})
	defer lc.Close()
	res := ldlm.Resource{ID: ldlm.ResIDOfFID(f.Seq, f.Oid, f.Ver), Type: ldlm.TypeExtent}
	// Nobody holds a lock yet: the glimpse reads the object and vouches
	// for what it read, so a client needs no getattr besides.
	getattrs := func() uint64 { return e.oss.Service().Stats().Ops[wire.OSTGetattr].Count }
	before := getattrs()
	if lvb, valid, err := lc.Glimpse(ctx, oc.imps[0], res); err != nil || !valid || lvb.Size != 100+uint64(len(data)) || lvb.Blocks == 0 {
		t.Fatalf("glimpse of an unlocked object: %+v valid %v, %v", lvb, valid, err)
	}
	// An object that does not exist: nothing to vouch for.
	gone := ldlm.Resource{ID: ldlm.ResIDOfFID(f.Seq, f.Oid+1000, 0), Type: ldlm.TypeExtent}
	if lvb, valid, err := lc.Glimpse(ctx, oc.imps[0], gone); err != nil || valid || lvb.Size != 0 {
		t.Fatalf("glimpse of no object: %+v valid %v, %v", lvb, valid, err)
	}
	if n := getattrs() - before; n != 0 {
		t.Fatalf("glimpses made %d getattrs", n)
	}
	l, _, _, err := lc.Enqueue(ctx, oc.imps[0], ldlm.Enqueue{Resource: res, Mode: ldlm.PR, Policy: ldlm.Policy{Extent: ldlm.Whole}})
	if err != nil {
		t.Fatal(err)
	}
	if lvb := l.LVB(); lvb.Size != 100+uint64(len(data)) || lvb.MTime == 0 && lvb.Blocks == 0 {
		t.Fatalf("lvb %+v, want size %d", lvb, 100+len(data))
	}
	l.Release()
	// A later write updates the LVB of the resource the lock lives on.
	if _, err := oc.imps[0].Do(ctx, oc.writeReq(f, []wire.Niobuf{{Offset: 1 << 20, Len: 10}}, [][]byte{data[:10]}, false)); err != nil {
		t.Fatal(err)
	}
	lvb, valid, err := lc.Glimpse(ctx, oc.imps[0], res)
	if err != nil || lvb.Size != 1<<20+10 || !valid {
		t.Fatalf("glimpse after a write: %+v valid %v, %v", lvb, valid, err)
	}
}

// The file backend takes ladvise hints.
var _ ofd.Advisor = (*osdfile.Device)(nil)

func TestLadvise(t *testing.T) {
	e := newOSSEnv(t, 1, 1)
	oc := e.client(0)
	ctx := ctxT(t, 30*time.Second)
	f := oc.precreate(ctx, 0, 1)[0]
	if _, err := oc.imps[0].Do(ctx, oc.writeReq(f, []wire.Niobuf{{Offset: 0, Len: 1 << 20}}, [][]byte{pattern(1<<20, 4)}, false)); err != nil {
		t.Fatal(err)
	}
	advise := func(f fid.FID, adv ...*ostv1.Advice) error {
		_, err := oc.imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTLadvise, Body: body(t, &ostv1.LadviseRequest{Fid: ofdFID(f), Advice: adv})})
		return err
	}
	if err := advise(f, &ostv1.Advice{Kind: ostv1.Advice_KIND_WILLNEED, Start: 0, End: 1 << 20},
		&ostv1.Advice{Kind: ostv1.Advice_KIND_DONTNEED, Start: 4096, End: ^uint64(0)}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"missing object", advise(fid.FID{Seq: testSeq, Oid: 4242}, &ostv1.Advice{Kind: ostv1.Advice_KIND_WILLNEED, End: 1}), syscall.ENOENT},
		{"backwards", advise(f, &ostv1.Advice{Kind: ostv1.Advice_KIND_WILLNEED, Start: 9, End: 1}), syscall.EINVAL},
		{"no advice", advise(f), syscall.EINVAL},
		{"unknown kind", advise(f, &ostv1.Advice{Kind: 7, End: 1}), syscall.EINVAL},
	} {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, tt.err, tt.want)
		}
	}
}

// TestDeleteOrphans: the MDS's orphan cleanup destroys the precreated
// objects after the last one it used, recreates lost ones up to it, and
// precreate continues right after it; bad cleanups change nothing.
func TestDeleteOrphans(t *testing.T) {
	e := newOSSEnv(t, 1, 1)
	oc := e.client(0)
	ctx := ctxT(t, 30*time.Second)
	objs := oc.precreate(ctx, 0, 50) // oids 1..50
	cleanup := func(lastUsed uint32) (*ostv1.CreateReply, error) { return oc.deleteOrphans(ctx, 0, lastUsed) }
	cr, err := cleanup(20)
	if err != nil || cr.First != 21 || cr.Count != 0 {
		t.Fatalf("cleanup to 20: %+v %v", cr, err)
	}
	for i, f := range objs {
		_, err := oc.getattr(ctx, 0, f)
		if (i < 20) != (err == nil) || (err != nil && !errors.Is(err, syscall.ENOENT)) {
			t.Fatalf("%v after cleanup to 20: %v", f, err)
		}
	}
	if next := oc.precreate(ctx, 0, 5); next[0].Oid != 21 {
		t.Fatalf("precreate after cleanup starts at %v", next[0])
	}
	// The MDS used objects up to 30 but the OST has only up to 25 (lost in
	// a crash): they are created again.
	if cr, err := cleanup(30); err != nil || cr.First != 31 {
		t.Fatalf("cleanup to 30: %+v %v", cr, err)
	}
	for oid := uint32(21); oid <= 30; oid++ {
		if _, err := oc.getattr(ctx, 0, fid.FID{Seq: testSeq, Oid: oid}); err != nil {
			t.Fatalf("oid %d after cleanup to 30: %v", oid, err)
		}
	}
	// A cleanup of a sequence the OST never saw makes it known.
	rep, err := oc.imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTCreate, Body: body(t, &ostv1.CreateRequest{Seq: testSeq + 1, DeleteOrphans: true})})
	if err != nil {
		t.Fatalf("cleanup of a new sequence: %v %x", err, rep)
	}
	for _, bad := range []*ostv1.CreateRequest{
		{Seq: testSeq, DeleteOrphans: true, Count: 3, LastUsed: 5},
		{Seq: 0, DeleteOrphans: true},
		{Seq: testSeq, DeleteOrphans: true, LastUsed: 30 + ofd.MaxPrecreate + 1},
	} {
		if _, err := oc.imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTCreate, Body: body(t, bad)}); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("cleanup %+v: %v", bad, err)
		}
	}
	if _, err := oc.getattr(ctx, 0, fid.FID{Seq: testSeq, Oid: 30}); err != nil {
		t.Fatalf("a refused cleanup changed the objects: %v", err)
	}
}

// TestSyncJournal: with obdfilter.*.sync_journal, a write's reply says it
// is committed (the client keeps nothing for replay); without it, replies
// come before the commit.
func TestSyncJournal(t *testing.T) {
	e := newOSSEnv(t, 1, 1)
	oc := e.client(0)
	ctx := ctxT(t, 30*time.Second)
	objs := oc.precreate(ctx, 0, 1)
	o := e.oss.OSTs()[0]
	imp := oc.imps[0]
	data := pattern(64<<10, 3)
	writes := func() (uncommitted int) {
		t.Helper()
		for i := range 20 {
			if _, err := imp.Do(ctx, oc.writeReq(objs[0], []wire.Niobuf{{Offset: uint64(i) << 16, Len: 64 << 10}}, [][]byte{data}, false)); err != nil {
				t.Fatal(err)
			}
			if imp.Info().Uncommitted > 0 {
				uncommitted++
			}
		}
		return uncommitted
	}
	if n := writes(); n == 0 {
		t.Fatalf("sync_journal off: every one of 20 writes was committed by its reply")
	}
	o.SetSyncJournal(true)
	if !o.SyncJournal() {
		t.Fatal("SyncJournal after SetSyncJournal(true)")
	}
	if err := imp.Ping(ctx); err != nil { // the earlier writes commit meanwhile
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := writes(); n != 0 {
		t.Fatalf("sync_journal on: %d of 20 writes left uncommitted by their reply", n)
	}
	got := make([]byte, 64<<10)
	if _, err := imp.Do(ctx, oc.readReq(objs[0], []wire.Niobuf{{Offset: 19 << 16, Len: 64 << 10}}, [][]byte{got}, false)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
}

// TestOSTRecoveryKnowsItsClients: an OST records the clients connected
// (not those that disconnected), so after a restart its recovery waits
// for exactly them, and lets no new client in before they are back or
// recovery is ended.
func TestOSTRecoveryKnowsItsClients(t *testing.T) {
	dir := t.TempDir()
	oneLife(t, dir, 3, func(_ context.Context, clients []*ostClient) { clients[2].close() })
	e := newOSSEnv(t, 1, 4, dir)
	tgt := e.oss.OSTs()[0].Target()
	if w, of := tgt.RecoveryWaiting(); !tgt.Recovering() || w != 2 || of != 2 {
		t.Fatalf("after the restart: recovering %v, waiting for %d of %d clients; want the 2 still connected", tgt.Recovering(), w, of)
	}
	ln := lnettest.Start(t, "127.0.0.23", e.port)
	c := ptlrpc.NewClient(ln, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.OSCReplyPortal, Logger: quiet, UUID: "client-new"})
	imp, err := c.NewImport(ptlrpc.ImportConfig{Target: ostLabel(0), Servers: []lwire.ProcessID{e.srvID}, Portal: ptlrpc.OSTIOPortal, PingInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer imp.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := imp.Connect(ctx); err == nil {
		t.Fatal("a new client connected while the OST waited for its previous clients")
	}
	if n := tgt.EndRecovery(); n != 2 {
		t.Errorf("abort_recovery evicted %d clients, want 2", n)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := imp.Connect(ctx); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
}

// oneLife runs an OSS with one OST on dir and n clients, which fn (if
// not nil) may use, and the first of which makes a change (something to
// recover), and stops it with its clients still connected, as a crash
// leaves them.
func oneLife(t *testing.T, dir string, n int, fn func(ctx context.Context, clients []*ostClient)) {
	t.Helper()
	e := newOSSEnv(t, 1, n, dir)
	var clients []*ostClient
	for i := range n {
		clients = append(clients, e.client(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if fn != nil {
		fn(ctx, clients)
	}
	if _, err := clients[0].imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTCreate,
		Body: body(t, &ostv1.CreateRequest{Seq: 0x200000400, Count: 1})}); err != nil {
		t.Fatal(err)
	}
	e.oss.Close(ctx)
	e.devs[0].Close()
	e.devs = nil
}

// startOST starts an OSS alone with the OST in dir and the given window.
func startOST(t *testing.T, dir string, window time.Duration) (*ofd.OFD, func()) {
	t.Helper()
	ln := lnettest.Start(t, "127.0.0.2", lnettest.FreePort(t, "127.0.0.2"))
	s, err := New(Config{LNet: ln, Logger: quiet, RecoveryWindow: window})
	if err != nil {
		t.Fatal(err)
	}
	dev := openOST(t, dir, 0)
	o, err := s.AddOST(dev, ostLabel(0), "ost-0-uuid")
	if err != nil {
		t.Fatal(err)
	}
	return o, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
		dev.Close()
	}
}

// TestOSTForgetsClientsNotBack: the clients of the previous life that do
// not come back before the recovery window runs out are forgotten (as
// EndRecovery does), so that the next restart does not wait its whole
// window for them again, and again.
func TestOSTForgetsClientsNotBack(t *testing.T) {
	dir := t.TempDir()
	oneLife(t, dir, 2, nil)
	// Restarted: both clients are gone for good; the window runs out.
	o, stop := startOST(t, dir, 300*time.Millisecond)
	if w, of := o.Target().RecoveryWaiting(); w != 2 || of != 2 {
		t.Fatalf("first restart: waiting for %d of %d, want 2 of 2", w, of)
	}
	time.Sleep(time.Second)
	stop()
	// Restarted again: nobody to wait for.
	o, stop = startOST(t, dir, time.Minute)
	defer stop()
	if w, of := o.Target().RecoveryWaiting(); o.Target().Recovering() {
		t.Fatalf("second restart: still waiting for %d of %d clients that did not come back in the last window", w, of)
	}
}

// TestPrecreateInRecordsSequence: a precreate (or orphan cleanup) in the
// sequence of the client records' object must not treat it as LAST_ID
// and overwrite it.
func TestPrecreateInRecordsSequence(t *testing.T) {
	dir := t.TempDir()
	oneLife(t, dir, 1, func(ctx context.Context, clients []*ostClient) {
		a := clients[0]
		if _, err := a.imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTCreate,
			Body: body(t, &ostv1.CreateRequest{Seq: 0x200000001, Count: 1})}); err == nil {
			t.Error("precreate in sequence 0x200000001 (the client records') accepted")
		}
		if _, err := a.imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTCreate,
			Body: body(t, &ostv1.CreateRequest{Seq: 0x200000001, DeleteOrphans: true, LastUsed: 0x1000})}); err == nil {
			t.Error("orphan cleanup in sequence 0x200000001 (the client records') accepted")
		}
	})
	o, stop := startOST(t, dir, time.Minute)
	defer stop()
	if w, of := o.Target().RecoveryWaiting(); w != 1 || of != 1 {
		t.Fatalf("after the restart: waiting for %d of %d clients, want 1 of 1 (records damaged?)", w, of)
	}
}

// TestChecksummedRead: the OFD sums a read as it reads it from the disk,
// piece by piece; the client's check of that sum passes for vectors of
// odd extents over holes, across the end of the object and past it, with
// either algorithm, and the bytes are the object's.
func TestChecksummedRead(t *testing.T) {
	e := newOSSEnv(t, 1, 1)
	oc := e.client(0)
	ctx := ctxT(t, 30*time.Second)
	f := oc.precreate(ctx, 0, 1)[0]
	const at = 64 << 10
	data := pattern(700<<10, 3)
	if _, err := oc.imps[0].Do(ctx, oc.writeReq(f, []wire.Niobuf{{Offset: at, Len: uint32(len(data))}}, [][]byte{data}, true)); err != nil {
		t.Fatal(err)
	}
	model := append(make([]byte, at), data...) // the hole, then the data
	for _, ct := range []ptlrpc.ChecksumType{ptlrpc.ChecksumCRC32, ptlrpc.ChecksumCRC32C} {
		for _, nbs := range [][]wire.Niobuf{
			{{Offset: 0, Len: uint32(len(model))}},
			{{Offset: 1, Len: 200000}, {Offset: 300000, Len: 131073}, {Offset: 600000, Len: 100}},
			{{Offset: 700000, Len: 200000}},
			{{Offset: 5, Len: 10}, {Offset: 900000, Len: 5000}},
			{{Offset: 0, Len: 4 << 20}},
		} {
			var bufs [][]byte
			var want []byte
			for _, nb := range nbs {
				bufs = append(bufs, bytes.Repeat([]byte{0xaa}, int(nb.Len)))
				for off := nb.Offset; off < nb.End(); off++ {
					b := byte(0)
					if off < uint64(len(model)) {
						b = model[off]
					}
					want = append(want, b)
				}
			}
			req := oc.readReq(f, nbs, bufs, true)
			req.Bulk.ChecksumType = ct
			if _, err := oc.imps[0].Do(ctx, req); err != nil {
				t.Fatalf("%v read %v: %v", ct, nbs, err)
			}
			if got := bytes.Join(bufs, nil); !bytes.Equal(got, want) {
				t.Fatalf("%v read %v: bytes differ from the object's", ct, nbs)
			}
		}
	}
	if n := oc.c.Stats().BulkChecksumErrors; n != 0 {
		t.Fatalf("%d reads did not match their checksum", n)
	}
}

// TestFailedWriteGivesBackTheGrantItTook: a write from grant that the
// client's grant covers only in part, or not at all, takes what grant
// there is (and free space for the rest); when its data never arrives right (a checksum bad
// every time) it gives back that much grant, not the whole write's size,
// which would leave the target's granted total above what it gave out.
func TestFailedWriteGivesBackTheGrantItTook(t *testing.T) {
	e := newOSSEnv(t, 1, 1)
	oc := e.client(0)
	ctx := ctxT(t, 60*time.Second)
	f := oc.precreate(ctx, 0, 1)[0]
	chunk := pattern(1<<20, 4)
	write := func(off uint64, fromGrant bool) (*ostv1.BRWReply, error) {
		req := oc.writeReq(f, []wire.Niobuf{{Offset: off, Len: 1 << 20}}, [][]byte{chunk}, true)
		req.Body = body(t, &ostv1.BRWRequest{Fid: ofdFID(f), Niobufs: niobufs(t, []wire.Niobuf{{Offset: off, Len: 1 << 20}}), FromGrant: fromGrant})
		rep, err := oc.imps[0].Do(ctx, req)
		if err != nil {
			return nil, err
		}
		var br ostv1.BRWReply
		return &br, proto.Unmarshal(rep, &br)
	}
	// Use the grant up, a MiB at a time, asking for none more, until
	// less than a MiB is left.
	st := e.oss.OSTs()[0].Stats()
	grant := st.Granted
	var off uint64
	for grant >= 1<<20 {
		br, err := write(off, true)
		if err != nil {
			t.Fatalf("write at %d: %v", off, err)
		}
		if br.Grant >= grant {
			t.Fatalf("grant %d after a write from grant %d", br.Grant, grant)
		}
		grant = br.Grant
		off += 1 << 20
	}
	before := e.oss.OSTs()[0].Stats().Granted
	if before != grant {
		t.Fatalf("target granted %d, the client holds %d", before, grant)
	}
	e.faults.Arm(ptlrpc.FailBulkWriteCorrupt, -1)
	_, err := write(off, true)
	e.faults.Disarm(ptlrpc.FailBulkWriteCorrupt)
	if !errors.Is(err, syscall.EBADMSG) {
		t.Fatalf("write with a bad checksum: %v", err)
	}
	if after := e.oss.OSTs()[0].Stats().Granted; after != before {
		t.Fatalf("granted %d after a failed write from %d of grant (held %d before it)", after, grant, before)
	}
}

// TestConnectGrantClaims: a client's CONNECT says what grant it holds
// (after an OST restart, its dirty data was cached under it). The OST
// gives at least its first grant, the claim when larger as far as the
// free space goes, and takes a claim it cannot read for none.
func TestConnectGrantClaims(t *testing.T) {
	tests := []struct {
		name  string
		data  []byte
		check func(g, first, free uint64) bool
	}{
		{"nothing", nil, func(g, first, _ uint64) bool { return g == first }},
		{"garbage", []byte{0xff, 0xff, 0xff}, func(g, first, _ uint64) bool { return g == first }},
		{"less than a first grant", body(t, &ostv1.ConnectData{Grant: 1 << 20}), func(g, first, _ uint64) bool { return g == first }},
		{"more", body(t, &ostv1.ConnectData{Grant: ofd.DefaultInitialGrant + 12345}), func(g, _, _ uint64) bool { return g == ofd.DefaultInitialGrant+12345 }},
		{"more than the target has", body(t, &ostv1.ConnectData{Grant: 1 << 62}), func(g, first, free uint64) bool { return g > first && g <= free }},
	}
	e := newOSSEnv(t, 1, len(tests))
	var st unix.Statfs_t
	if err := unix.Statfs(e.dirs[0], &st); err != nil {
		t.Fatal(err)
	}
	free := st.Bavail * uint64(st.Bsize)
	first := min(uint64(ofd.DefaultInitialGrant), free/8) &^ 4095
	for i, tt := range tests {
		oc := e.clientWith(i, func() []byte { return tt.data })
		var cd ostv1.ConnectData
		if err := ptlrpc.Unmarshal(oc.imps[0].Info().TargetData, &cd); err != nil {
			t.Fatalf("%s: connect reply: %v", tt.name, err)
		}
		if !tt.check(cd.Grant, first, free) {
			t.Errorf("%s: granted %d (first grant %d, %d bytes free)", tt.name, cd.Grant, first, free)
		}
		if _, err := oc.imps[0].Do(ctxT(t, 10*time.Second), &ptlrpc.Req{Opcode: wire.OSTStatfs}); err != nil {
			t.Errorf("%s: statfs after connect: %v", tt.name, err)
		}
	}
}

// TestStaleOrphanCleanupRefused: an orphan cleanup that waited while its
// MDT's connection was replaced (here: the MDT connected afresh, as a
// restarted one does, while the cleanup waited for the device) is refused
// with ESTALE and changes nothing; the new connection's cleanup, with a
// later last_used, is the one that counts. Run after it, the old one
// would have destroyed objects handed out since.
func TestStaleOrphanCleanupRefused(t *testing.T) {
	var hold *holdBegin
	e := newOSSEnvWrapped(t, func(d osd.Device) osd.Device { hold = &holdBegin{Device: d}; return hold }, 1, 2)
	ctx := ctxT(t, 30*time.Second)
	mdt := e.client(0)
	objs := mdt.precreate(ctx, 0, 8) // LAST_ID 8
	// A client wrote to object 5: a file has it, made after the MDT's
	// earlier cleanup.
	data := pattern(4096, 5)
	if _, err := mdt.imps[0].Do(ctx, mdt.writeReq(objs[4], []wire.Niobuf{{Offset: 0, Len: 4096}}, [][]byte{data}, true)); err != nil {
		t.Fatal(err)
	}
	// The old connection's cleanup says objects up to 2 were used, and
	// waits in the device.
	hold.arm()
	old := make(chan error, 1)
	go func() {
		_, err := mdt.deleteOrphans(ctx, 0, 2)
		old <- err
	}()
	select {
	case <-hold.held:
	case <-ctx.Done():
		t.Fatal("the cleanup never reached the device")
	}
	// The MDT comes back as a new client of the same name (a restart):
	// its export replaces the old one, and its cleanup says 6 were used.
	ln := lnettest.Start(t, "127.0.0.41", e.port)
	pc := ptlrpc.NewClient(ln, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.OSCReplyPortal, Logger: quiet, UUID: "client-0"})
	imp, err := pc.NewImport(ptlrpc.ImportConfig{Target: ostLabel(0), Servers: []lwire.ProcessID{e.srvID}, Portal: ptlrpc.OSTIOPortal,
		MinTimeout: 2 * time.Second, PingInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer imp.Close(context.Background())
	if err := imp.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	close(hold.release)
	if err := <-old; !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("the old connection's cleanup, run after it was replaced: %v, want ESTALE", err)
	}
	restarted := &ostClient{t: t, c: pc, imps: []*ptlrpc.Import{imp}}
	if cr, err := restarted.deleteOrphans(ctx, 0, 6); err != nil || cr.First != 7 {
		t.Fatalf("the new connection's cleanup: %+v %v", cr, err)
	}
	for i, f := range objs {
		a, err := restarted.getattr(ctx, 0, f)
		if i < 6 && err != nil {
			t.Fatalf("object %v, used, is gone: %v", f, err)
		}
		if i == 4 && a.GetSize() != 4096 {
			t.Fatalf("object %v, written, has size %d: destroyed and made again", f, a.GetSize())
		}
		if i >= 6 && !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("object %v, an orphan, after the cleanup: %v", f, err)
		}
	}
}
