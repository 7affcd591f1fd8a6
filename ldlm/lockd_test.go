package ldlm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lnettest"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	ldlmv1 "github.com/nacrefs/nacre/proto/nacre/ldlm/v1"

	_ "github.com/nacrefs/nacre/lnd/lolnd"
	_ "github.com/nacrefs/nacre/lnd/socklnd"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const (
	svcPortal = ptlrpc.OSTIOPortal
	objSize   = 64 << 10
)

// lockCluster is an OST-like target with a lock server and a one-object
// store served by bulk RPCs, and clients on their own LNets.
type lockCluster struct {
	t       testing.TB
	port    int
	srv     *lnet.LNet
	srvID   lwire.ProcessID
	tgt     *ptlrpc.Target
	lockd   *Server
	svc     *ptlrpc.Service
	evicted chan string

	mu   sync.Mutex
	data []byte // the object
	// missing has LVBInit say the object does not exist.
	missing atomic.Bool
}

func newLockCluster(t testing.TB, nclients int, cbTimeout time.Duration) *lockCluster {
	return newLockClusterWith(t, nclients, cbTimeout, nil)
}

// newLockClusterWith is newLockCluster whose service configuration adjust
// changes (handlers, threads) before the service starts.
func newLockClusterWith(t testing.TB, nclients int, cbTimeout time.Duration, adjust func(*lockCluster, *ptlrpc.ServiceConfig)) *lockCluster {
	return newLockClusterTarget(t, nclients, cbTimeout, adjust, nil)
}

// newLockClusterTarget is newLockClusterWith whose target configuration
// target changes, if not nil.
func newLockClusterTarget(t testing.TB, nclients int, cbTimeout time.Duration, adjust func(*lockCluster, *ptlrpc.ServiceConfig), target func(*ptlrpc.TargetConfig)) *lockCluster {
	return newLockClusterServer(t, nclients, cbTimeout, adjust, target, nil)
}

// newLockClusterServer is newLockClusterTarget whose lock server's
// configuration server changes, if not nil.
func newLockClusterServer(t testing.TB, nclients int, cbTimeout time.Duration, adjust func(*lockCluster, *ptlrpc.ServiceConfig), target func(*ptlrpc.TargetConfig), server func(*ServerConfig)) *lockCluster {
	addrs := []string{"127.0.0.2"}
	for i := range nclients {
		addrs = append(addrs, fmt.Sprintf("127.0.0.%d", 10+i))
	}
	lc := &lockCluster{t: t, port: lnettest.FreePort(t, addrs...), data: make([]byte, objSize), evicted: make(chan string, 16)}
	lc.srv = lnettest.Start(t, "127.0.0.2", lc.port)
	lc.srvID = lwire.ProcessID{NID: lc.srv.NIDs()[len(lc.srv.NIDs())-1], PID: lc.srv.PID()}
	ts := ptlrpc.NewTargetSet()
	var err error
	scfg := ServerConfig{Namespace: Config{Name: "nacre-OST0000"}, Client: ptlrpc.NewClient(lc.srv, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.LDLMCBReplyPortal, Logger: quiet}),
		CallbackTimeout: cbTimeout, Logger: quiet,
		Evict: func(exp *ptlrpc.Export) { lc.tgt.Evict(exp.ClientUUID()) },
		LVBInit: func(Resource) (LVB, error) {
			if lc.missing.Load() {
				return LVB{}, ErrNoObject
			}
			lc.mu.Lock()
			defer lc.mu.Unlock()
			return LVB{Size: uint64(binary.LittleEndian.Uint64(lc.data[objSize-8:]))}, nil
		}}
	if server != nil {
		server(&scfg)
	}
	lc.lockd, err = NewServer(scfg)
	if err != nil {
		t.Fatal(err)
	}
	tc := ptlrpc.TargetConfig{Name: "nacre-OST0000", AutoCommit: true, Logger: quiet, Features: ConnectGlimpseLock,
		OnGone: func(e *ptlrpc.Export, evicted bool) {
			lc.lockd.ExportGone(e)
			if evicted {
				lc.evicted <- e.ClientUUID()
			}
		}}
	if target != nil {
		target(&tc)
	}
	lc.tgt, err = ts.NewTarget(tc)
	if err != nil {
		t.Fatal(err)
	}
	handlers := lc.lockd.Handlers()
	handlers[wire.OSTWrite] = ptlrpc.HandlerSpec{Flags: ptlrpc.HasBulk, Fn: func(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
		buf := make([]byte, objSize)
		if _, err := r.BulkGet(ctx, [][]byte{buf}); err != nil {
			return nil, ptlrpc.Errno(err)
		}
		lc.mu.Lock()
		copy(lc.data, buf)
		lc.mu.Unlock()
		return nil, 0
	}}
	handlers[wire.OSTRead] = ptlrpc.HandlerSpec{Flags: ptlrpc.HasBulk, Fn: func(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
		lc.mu.Lock()
		buf := bytes.Clone(lc.data)
		lc.mu.Unlock()
		_, err := r.BulkPut(ctx, [][]byte{buf})
		return nil, ptlrpc.Errno(err)
	}}
	cfg := ptlrpc.ServiceConfig{Name: "ost", RequestPortal: svcPortal, Targets: ts, Handlers: handlers, Logger: quiet}
	if adjust != nil {
		adjust(lc, &cfg)
	}
	lc.svc, err = ptlrpc.NewService(lc.srv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		lc.svc.Close(ctx)
		lc.lockd.Close()
		lc.tgt.Close(ctx)
	})
	return lc
}

// lockNode is one client: its LNet, a callback service, a lock client, an
// import, and a cache of the object kept only under a lock.
type lockNode struct {
	t     testing.TB
	ln    *lnet.LNet
	pc    *ptlrpc.Client
	lc    *Client
	imp   *ptlrpc.Import
	mu    sync.Mutex
	cache []byte // nil: not cached
	dirty bool
	// stall makes the flush hook hang until the client closes, as a
	// client that ignores blocking ASTs.
	stall atomic.Bool
	// size is what the glimpse hook reports.
	size    atomic.Uint64
	flushes atomic.Int64
}

func (lc *lockCluster) node(i int, cfg ClientConfig) *lockNode {
	t := lc.t
	ln := lnettest.Start(t, fmt.Sprintf("127.0.0.%d", 10+i), lc.port)
	n := &lockNode{t: t, ln: ln}
	n.pc = ptlrpc.NewClient(ln, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.OSCReplyPortal, Logger: quiet, UUID: fmt.Sprintf("client-%d", i)})
	cfg.Logger = quiet
	n.lc = NewClient(cfg)
	cb, err := ptlrpc.NewService(ln, ptlrpc.ServiceConfig{Name: "ldlm_cb", RequestPortal: ptlrpc.LDLMCBRequestPortal,
		Handlers: n.lc.Handlers(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	n.imp, err = n.pc.NewImport(ptlrpc.ImportConfig{Target: "nacre-OST0000", Servers: []lwire.ProcessID{lc.srvID}, Portal: svcPortal, Features: ConnectGlimpseLock,
		PingInterval: -1, MinTimeout: 200 * time.Millisecond, OnEvict: func(imp *ptlrpc.Import) { n.lc.ImportEvicted(imp) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n.lc.Close()
		n.imp.Close(ctx)
		cb.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.imp.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

var objRes = Resource{ID: ResIDOfFID(0x100000000, 1, 0), Type: TypeExtent}

// hooks flush the node's dirty cache to the server and drop it: what the
// OSC does when it loses a lock.
func (n *lockNode) hooks() Hooks {
	return Hooks{
		Blocking: func(ctx context.Context, l *ClientLock, evicted bool) {
			if n.stall.Load() {
				<-ctx.Done()
				return
			}
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.dirty && !evicted {
				if _, err := n.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.OSTWrite, Bulk: &ptlrpc.Bulk{Op: ptlrpc.BulkWrite, Buffers: [][]byte{n.cache}}}); err != nil {
					n.t.Errorf("flush: %v", err)
				}
				n.flushes.Add(1)
			}
			n.cache, n.dirty = nil, false
		},
		Glimpse: func(*ClientLock) LVB { return LVB{Size: n.size.Load()} },
	}
}

// access runs fn on the cached object under a lock of mode m, filling the
// cache from the server first if needed.
func (n *lockNode) access(ctx context.Context, m Mode, fn func(obj []byte) bool) error {
	l, _, _, err := n.lc.Enqueue(ctx, n.imp, Enqueue{Resource: objRes, Mode: m, Policy: Policy{Extent: Whole}, Hooks: n.hooks()})
	if err != nil {
		return err
	}
	defer l.Release()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cache == nil {
		buf := make([]byte, objSize)
		if _, err := n.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.OSTRead, Bulk: &ptlrpc.Bulk{Op: ptlrpc.BulkRead, Buffers: [][]byte{buf}}}); err != nil {
			return err
		}
		n.cache = buf
	}
	if fn(n.cache) {
		n.dirty = true
	}
	return nil
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestCoherence: two clients write overlapping ranges under PW extent
// locks; each sees the other's data after the lock moves, and concurrent
// read-modify-writes serialize (no lost update).
func TestCoherence(t *testing.T) {
	lc := newLockCluster(t, 2, 5*time.Second)
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 30*time.Second)
	write := func(n *lockNode, off int, s string) {
		if err := n.access(ctx, PW, func(obj []byte) bool { copy(obj[off:], s); return true }); err != nil {
			t.Fatal(err)
		}
	}
	read := func(n *lockNode, off, ln int) string {
		var got string
		if err := n.access(ctx, PR, func(obj []byte) bool { got = string(obj[off : off+ln]); return false }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	write(a, 0, "AAAAAAAAAA")
	if got := read(b, 0, 10); got != "AAAAAAAAAA" {
		t.Fatalf("b read %q after a's write", got)
	}
	write(b, 5, "BBBBBBBBBB")
	if got := read(a, 0, 15); got != "AAAAABBBBBBBBBB" {
		t.Fatalf("a read %q after b's write", got)
	}
	if a.flushes.Load() < 1 || b.flushes.Load() < 1 {
		t.Fatalf("flushes a=%d b=%d", a.flushes.Load(), b.flushes.Load())
	}

	// Read-modify-write of one counter from both clients at once.
	const rounds = 40
	var wg sync.WaitGroup
	for _, n := range []*lockNode{a, b} {
		wg.Go(func() {
			for range rounds {
				err := n.access(ctx, PW, func(obj []byte) bool {
					binary.LittleEndian.PutUint64(obj[100:], binary.LittleEndian.Uint64(obj[100:])+1)
					return true
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var got uint64
	if err := a.access(ctx, PR, func(obj []byte) bool { got = binary.LittleEndian.Uint64(obj[100:]); return false }); err != nil {
		t.Fatal(err)
	}
	if got != 2*rounds {
		t.Fatalf("counter %d after %d increments from each client", got, rounds)
	}
	if st := lc.lockd.Stats(); st.BlockingASTs == 0 || st.CallbackTimeouts != 0 {
		t.Fatalf("server stats %+v", st)
	}
}

// TestIgnoredBlockingAST: a client that never gives a lock back is evicted
// within the callback timeout, and the waiter is granted.
func TestIgnoredBlockingAST(t *testing.T) {
	const cbTimeout = 300 * time.Millisecond
	lc := newLockCluster(t, 2, cbTimeout)
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	a.stall.Store(true)
	if err := a.access(ctx, PW, func(obj []byte) bool { copy(obj, "lost"); return true }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var got string
	if err := b.access(ctx, PR, func(obj []byte) bool { got = string(obj[:4]); return false }); err != nil {
		t.Fatal(err)
	}
	waited := time.Since(start)
	if waited < cbTimeout || waited > cbTimeout+3*time.Second {
		t.Fatalf("waiter granted after %v, callback timeout %v", waited, cbTimeout)
	}
	select {
	case uuid := <-lc.evicted:
		if uuid != "client-0" {
			t.Fatalf("evicted %s", uuid)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no eviction")
	}
	if got == "lost" {
		t.Fatal("unflushed data of the evicted client reached the server")
	}
	if st := lc.lockd.Stats(); st.CallbackTimeouts != 1 {
		t.Fatalf("server stats %+v", st)
	}
	// The evicted client finds out (its next request, or one after: a
	// lock it still believes in serves without asking), drops its locks,
	// and works again.
	a.stall.Store(false)
	for try := 0; ; try++ {
		err := a.access(ctx, PR, func([]byte) bool { return false })
		if err == nil && try > 0 {
			break
		}
		if err != nil && !errors.Is(err, ptlrpc.ErrEvicted) || try == 3 {
			t.Fatalf("after eviction, try %d: %v", try, err)
		}
	}
}

// TestGlimpse: a glimpse returns the size the writer's cache holds.
func TestGlimpse(t *testing.T) {
	lc := newLockCluster(t, 2, 5*time.Second)
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	lvb, _, err := b.lc.Glimpse(ctx, b.imp, objRes)
	if err != nil || lvb.Size != 0 {
		t.Fatalf("glimpse with no lock: %+v %v", lvb, err)
	}
	a.size.Store(123457)
	l, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: objRes, Mode: PW, Policy: Policy{Extent: Whole}, Hooks: a.hooks()})
	if err != nil {
		t.Fatal(err)
	}
	lvb, _, err = b.lc.Glimpse(ctx, b.imp, objRes)
	if err != nil || lvb.Size != 123457 {
		t.Fatalf("glimpse: %+v %v, want size 123457", lvb, err)
	}
	if a.lc.Stats().GlimpseASTs != 1 {
		t.Fatalf("glimpse ASTs %d", a.lc.Stats().GlimpseASTs)
	}
	// The glimpse did not take the writer's lock away.
	if got := lc.lockd.Locks(objRes); len(got) != 1 || got[0].Owner == "" || got[0].State != Granted {
		t.Fatalf("locks after glimpse: %+v", got)
	}
	l.Release()
}

// TestGlimpseAfterSetLVB: a glimpse whose holder answers after the
// server set the resource's LVB (an OST putting mtime back with an
// explicit setattr) does not raise it again with what the holder said.
func TestGlimpseAfterSetLVB(t *testing.T) {
	lc := newLockCluster(t, 2, 5*time.Second)
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	const written, setBack = int64(2_000_000_000_000_000_000), int64(-31_536_000_000_000_000)
	asked, answer := make(chan struct{}), make(chan struct{})
	h := a.hooks()
	h.Glimpse = func(*ClientLock) LVB {
		close(asked)
		<-answer
		return LVB{Size: 10, MTime: written, CTime: written}
	}
	l, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: objRes, Mode: PW, Policy: Policy{Extent: Whole}, Hooks: h})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	done := make(chan LVB, 1)
	go func() {
		lvb, _, err := b.lc.Glimpse(ctx, b.imp, objRes)
		if err != nil {
			t.Error(err)
		}
		done <- lvb
	}()
	<-asked
	if err := lc.lockd.SetLVB(objRes, LVB{Size: 10, MTime: setBack, CTime: setBack}); err != nil {
		t.Fatal(err)
	}
	close(answer)
	<-done
	lc.lockd.mu.Lock()
	got, _ := lc.lockd.mu.ns.LVB(objRes)
	lc.lockd.mu.Unlock()
	if got.MTime != setBack {
		t.Fatalf("the LVB's mtime after a glimpse that answered late: %d, want the %d set meanwhile", got.MTime, setBack)
	}
}

// TestGlimpseLock: a glimpse that meets no write lock is granted as the PR
// lock it asks for, whose LVB serves the next glimpses without an RPC; a
// writer calls it back; a glimpse behind a writer gets the writer's size
// and no lock; and an object the server cannot read gets no lock either.
func TestGlimpseLock(t *testing.T) {
	lc := newLockCluster(t, 2, 5*time.Second)
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	lc.mu.Lock()
	binary.LittleEndian.PutUint64(lc.data[objSize-8:], 777)
	lc.mu.Unlock()
	l, lvb, valid, err := b.lc.GlimpseLock(ctx, b.imp, objRes, b.hooks())
	if err != nil || l == nil || lvb.Size != 777 || !valid {
		t.Fatalf("glimpse of an unlocked object: lock %v lvb %+v valid %v err %v", l, lvb, valid, err)
	}
	if got := lc.lockd.Locks(objRes); len(got) != 1 || got[0].Mode != PR || got[0].Policy.Extent != Whole || got[0].State != Granted {
		t.Fatalf("server locks after the glimpse: %+v", got)
	}
	l.Release()
	gl := b.lc.Stats().Glimpses
	l2, lvb, _, err := b.lc.GlimpseLock(ctx, b.imp, objRes, b.hooks())
	if err != nil || l2 != l || lvb.Size != 777 || b.lc.Stats().Glimpses != gl {
		t.Fatalf("second glimpse: lock %v (first %v) lvb %+v err %v, glimpses %d -> %d", l2, l, lvb, err, gl, b.lc.Stats().Glimpses)
	}
	l2.Release()

	// A writer calls the glimpse's lock back.
	a.size.Store(4242)
	w, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: objRes, Mode: PW, Policy: Policy{Extent: Whole}, Hooks: a.hooks()})
	if err != nil {
		t.Fatal(err)
	}
	if got := lc.lockd.Locks(objRes); len(got) != 1 || got[0].Mode != PW {
		t.Fatalf("server locks after the write lock: %+v", got)
	}
	// Behind the writer: the writer's size, no lock, the writer's lock kept.
	l3, lvb, _, err := b.lc.GlimpseLock(ctx, b.imp, objRes, b.hooks())
	if err != nil || l3 != nil || lvb.Size != 4242 {
		t.Fatalf("glimpse behind a writer: lock %v lvb %+v err %v", l3, lvb, err)
	}
	if got := lc.lockd.Locks(objRes); len(got) != 1 || got[0].Mode != PW {
		t.Fatalf("server locks after the glimpse behind the writer: %+v", got)
	}
	w.Release()
	if st := lc.lockd.Stats(); st.GlimpseLocks != 1 || st.GlimpseASTs != 1 {
		t.Fatalf("server stats %+v", st)
	}

	// No object: no lock vouches for a size.
	lc.missing.Store(true)
	other := Resource{ID: ResIDOfFID(0x100000000, 9, 0), Type: TypeExtent}
	l4, _, valid, err := b.lc.GlimpseLock(ctx, b.imp, other, b.hooks())
	if err != nil || l4 != nil || valid {
		t.Fatalf("glimpse of a missing object: lock %v valid %v err %v", l4, valid, err)
	}
	if got := lc.lockd.Locks(other); len(got) != 0 {
		t.Fatalf("locks on the missing object: %+v", got)
	}
	// Nor does an ordinary lock: the enqueue fails (a reader of a file's
	// old layout, whose object was destroyed, would otherwise be told the
	// object is empty and read zeros).
	l5, _, _, err := b.lc.Enqueue(ctx, b.imp, Enqueue{Resource: other, Mode: PR, Policy: Policy{Extent: Whole}, Hooks: b.hooks()})
	if !errors.Is(err, syscall.ENOENT) || l5 != nil {
		t.Fatalf("read lock on a missing object: lock %v err %v, want ENOENT", l5, err)
	}
	if got := lc.lockd.Locks(other); len(got) != 0 {
		t.Fatalf("locks on the missing object after the enqueue: %+v", got)
	}
}

// TestOwnConflictsGoEarly: a write lock asked by a client that holds an
// unused read lock over the same bytes gives that lock back with the
// enqueue (its flush hook run first) rather than being called back by the
// server; a read lock in use stays and is called back as usual.
func TestOwnConflictsGoEarly(t *testing.T) {
	lc := newLockCluster(t, 1, 5*time.Second)
	a := lc.node(0, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	r, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: objRes, Mode: PR, Policy: Policy{Extent: Whole}, Hooks: a.hooks()})
	if err != nil {
		t.Fatal(err)
	}
	r.Release()
	a.mu.Lock()
	a.cache = make([]byte, objSize) // what the read lock covers
	a.mu.Unlock()
	w, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: objRes, Mode: PW, Policy: Policy{Extent: Extent{Start: 0, End: 4095}}, Flags: NoExpansion, Hooks: a.hooks()})
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	dropped := a.cache == nil
	a.mu.Unlock()
	if st := a.lc.Stats(); st.BlockingASTs != 0 || st.EarlyCancels != 1 || !dropped {
		t.Fatalf("client stats %+v, cache dropped %v: want the read lock given back early, its hook run", st, dropped)
	}
	if got := lc.lockd.Locks(objRes); len(got) != 1 || got[0].Mode != PW || got[0].State != Granted {
		t.Fatalf("server locks: %+v", got)
	}
	w.Release()
	// A read lock in use is the holder's to give back.
	r, _, _, err = a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: objRes, Mode: PR, Policy: Policy{Extent: Extent{Start: 1 << 20, End: EOF}}, Hooks: a.hooks()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		w, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: objRes, Mode: PW, Policy: Policy{Extent: Whole}, Hooks: a.hooks()})
		if err == nil {
			w.Release()
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("write lock granted over a read lock in use (%v %v): %v; server %+v client %+v", r.Mode(), r.Policy(), err, lc.lockd.Locks(objRes), a.lc.Stats())
	default:
	}
	r.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := a.lc.Stats(); st.BlockingASTs == 0 {
		t.Fatalf("client stats %+v: the read lock in use was not called back", st)
	}
}

func resN(i int) Resource {
	return Resource{ID: ResIDOfFID(0x200000400, uint32(i+1), 0), Type: TypeIBits}
}

// TestLRU: unused locks beyond lru_size are given back; the server's
// granted locks follow.
func TestLRU(t *testing.T) {
	lc := newLockCluster(t, 1, 5*time.Second)
	a := lc.node(0, ClientConfig{LRUSize: 4, CancelDelay: 20 * time.Millisecond})
	ctx := ctxT(t, 10*time.Second)
	for i := range 10 {
		l, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: resN(i), Mode: PR, Policy: Policy{Bits: BitLookup | BitUpdate}})
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
	}
	deadline := time.Now().Add(5 * time.Second)
	for lc.lockd.Stats().Namespace.Granted != 4 || a.lc.Stats().Unused != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("server %+v, client %+v", lc.lockd.Stats().Namespace, a.lc.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The four most recent are the ones kept, and match without an RPC.
	before := a.lc.Stats().Enqueues
	for i := 6; i < 10; i++ {
		l, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: resN(i), Mode: PR, Policy: Policy{Bits: BitLookup}})
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
	}
	if st := a.lc.Stats(); st.Enqueues != before || st.Matches != 4 {
		t.Fatalf("client stats %+v (enqueues before %d)", st, before)
	}
	// lru_size set at run time (lctl set_param ldlm.namespaces.*.lru_size)
	// gives back the unused locks over it.
	if err := a.lc.SetLRUSize(a.imp, 2); err != nil || a.lc.LRUSize(a.imp) != 2 {
		t.Fatalf("SetLRUSize: %v (now %d)", err, a.lc.LRUSize(a.imp))
	}
	for lc.lockd.Stats().Namespace.Granted != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("after lru_size=2: server %+v", lc.lockd.Stats().Namespace)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if locks, unused := a.lc.NamespaceStats(a.imp); locks != 2 || unused != 2 {
		t.Fatalf("namespace stats %d %d", locks, unused)
	}
	if err := a.lc.SetLRUSize(a.imp, -1); err == nil {
		t.Fatal("lru_size -1 accepted")
	}
	// lru_max_age set at run time gives back the unused locks older than it.
	if err := a.lc.SetLRUMaxAge(a.imp, 0); err == nil {
		t.Fatal("lru_max_age 0 accepted")
	}
	if got := a.lc.LRUMaxAge(a.imp); got != DefaultLRUMaxAge {
		t.Fatalf("lru_max_age before setting: %v", got)
	}
	time.Sleep(60 * time.Millisecond)
	if err := a.lc.SetLRUMaxAge(a.imp, 50*time.Millisecond); err != nil || a.lc.LRUMaxAge(a.imp) != 50*time.Millisecond {
		t.Fatalf("SetLRUMaxAge: %v (now %v)", err, a.lc.LRUMaxAge(a.imp))
	}
	for deadline := time.Now().Add(5 * time.Second); lc.lockd.Stats().Namespace.Granted != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after lru_max_age=50ms: server %+v", lc.lockd.Stats().Namespace)
		}
	}
}

// TestEarlyCancel: locks trimmed from the LRU ride on the next enqueue
// instead of a CANCEL of their own.
func TestEarlyCancel(t *testing.T) {
	lc := newLockCluster(t, 1, 5*time.Second)
	a := lc.node(0, ClientConfig{LRUSize: 1, CancelDelay: time.Hour})
	ctx := ctxT(t, 10*time.Second)
	for i := range 3 {
		l, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: resN(i), Mode: PR, Policy: Policy{Bits: BitLookup}})
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		time.Sleep(20 * time.Millisecond) // the cancel worker queues the trimmed lock
	}
	st, cst := lc.lockd.Stats(), a.lc.Stats()
	if st.EarlyCancels != 1 || st.Cancels != 0 || cst.CancelRPCs != 0 || cst.EarlyCancels != 1 {
		t.Fatalf("server %+v, client %+v", st, cst)
	}
	if st.Namespace.Granted != 2 {
		t.Fatalf("granted %d, want 2 (one pending in the client)", st.Namespace.Granted)
	}
}

// TestLockAhead: a lock-ahead extent is granted exactly, kept, matched by
// later I/O, and refused rather than calling back a conflicting holder.
func TestLockAhead(t *testing.T) {
	lc := newLockCluster(t, 2, 5*time.Second)
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	if err := a.lc.LockAhead(ctx, a.imp, objRes, Extent{Start: 0, End: 1<<20 - 1}, Hooks{}); err != nil {
		t.Fatal(err)
	}
	locks := lc.lockd.Locks(objRes)
	if len(locks) != 1 || locks[0].Policy.Extent != (Extent{0, 1<<20 - 1}) {
		t.Fatalf("lock ahead granted %+v", locks)
	}
	l, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: objRes, Mode: PW, Policy: Policy{Extent: Extent{4096, 8191}}})
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if st := a.lc.Stats(); st.Matches != 1 || st.Enqueues != 1 {
		t.Fatalf("client stats %+v", st)
	}
	err = b.lc.LockAhead(ctx, b.imp, objRes, Extent{Start: 1 << 19, End: 1<<21 - 1}, Hooks{})
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("conflicting lock ahead: %v", err)
	}
	if st := lc.lockd.Stats(); st.BlockingASTs != 0 {
		t.Fatalf("a lock ahead called back a holder: %+v", st)
	}
	if err := b.lc.LockAhead(ctx, b.imp, objRes, Extent{Start: 1 << 20, End: 1<<21 - 1}, Hooks{}); err != nil {
		t.Fatalf("disjoint lock ahead: %v", err)
	}
}

// TestFlockDeadlock: POSIX locks across two clients that would deadlock
// get EDEADLK.
func TestFlockDeadlock(t *testing.T) {
	lc := newLockCluster(t, 2, 5*time.Second)
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	fres := Resource{ID: objRes.ID, Type: TypeFlock}
	flock := func(n *lockNode, start, end uint64) (*ClientLock, error) {
		l, _, _, err := n.lc.Enqueue(ctx, n.imp, Enqueue{Resource: fres, Mode: PW, Policy: Policy{Extent: Extent{start, end}, FlockOwner: 1, PID: 1}})
		return l, err
	}
	if _, err := flock(a, 0, 9); err != nil {
		t.Fatal(err)
	}
	if _, err := flock(b, 10, 19); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { _, err := flock(a, 10, 19); waited <- err }() // a waits for b
	deadline := time.Now().Add(5 * time.Second)
	for len(lc.lockd.Locks(fres)) != 3 {
		if time.Now().After(deadline) {
			t.Fatal("a's request never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := flock(b, 0, 9); !errors.Is(err, syscall.EDEADLK) {
		t.Fatalf("b closing the cycle: %v, want EDEADLK", err)
	}
	select {
	case err := <-waited:
		t.Fatalf("a's wait ended: %v", err)
	default:
	}
}

// TestFlockWaitGivenUp: a POSIX lock wait the caller gives up leaves the
// owner's locks as they were, even when the holder lets go just after: the
// waiting lock is given back before Flock returns, not later, when the
// server may have granted it in the meantime (merging the owner's read
// lock into it) and its cancel would take the owner's read lock along. A
// cancel that comes after the grant is refused (EBUSY): the lock stays.
func TestFlockWaitGivenUp(t *testing.T) {
	lc := newLockCluster(t, 2, 5*time.Second)
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	fres := Resource{ID: objRes.ID, Type: TypeFlock}
	pol := func(start, end uint64) Policy { return Policy{Extent: Extent{start, end}, FlockOwner: 1, PID: 1} }
	if err := a.lc.Flock(ctx, a.imp, fres, PR, pol(0, 99), false); err != nil {
		t.Fatal(err)
	}
	if err := b.lc.Flock(ctx, b.imp, fres, PR, pol(50, 50), false); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { waited <- a.lc.Flock(wctx, a.imp, fres, PW, pol(0, 99), true) }() // the upgrade waits for b
	for deadline := time.Now().Add(5 * time.Second); len(lc.lockd.Locks(fres)) != 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a's upgrade never queued")
		}
	}
	wcancel()
	werr := <-waited
	if err := b.lc.Flock(ctx, b.imp, fres, NL, pol(50, 50), false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * DefaultCancelDelay) // a lazy cancel of a's wait would be in by now
	want := PR                         // the wait was given up: a keeps its read lock
	if werr == nil {
		want = PW // the grant came first: the wait succeeded
	} else if !errors.Is(werr, context.Canceled) {
		t.Fatalf("given-up wait: %v", werr)
	}
	got, m, found, err := b.lc.TestFlock(ctx, b.imp, fres, PW, pol(0, EOF))
	if err != nil || !found || m != want || got.Extent != (Extent{0, 99}) {
		t.Fatalf("after a gave up its upgrade (%v): b finds %v %+v (found %v, %v), want a's %v [0,99]; server %v",
			werr, m, got, found, err, want, lc.lockd.Locks(fres))
	}
	// A cancel naming a's granted lock, as one of a given-up wait that
	// lost the race with the grant would: refused, the lock stays.
	h := lc.lockd.Locks(fres)[0].Handle
	body, _ := proto.Marshal(&ldlmv1.CancelRequest{Handles: []uint64{uint64(h)}})
	if _, err := a.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.LDLMCancel, Body: body}); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("cancel of a granted FLOCK lock: %v, want EBUSY", err)
	}
	if ls := lc.lockd.Locks(fres); len(ls) != 1 || ls[0].Handle != h {
		t.Fatalf("a refused cancel changed the locks: %v", ls)
	}
}

// TestBadInput: requests that make no sense get an error reply and change
// nothing; the server keeps running.
func TestBadInput(t *testing.T) {
	lc := newLockCluster(t, 2, 5*time.Second)
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	l, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: objRes, Mode: PR, Policy: Policy{Extent: Whole}})
	if err != nil {
		t.Fatal(err)
	}
	before := lc.lockd.Locks(objRes)
	enq := func(er *ldlmv1.EnqueueRequest) []byte { b, _ := proto.Marshal(er); return b }
	cancel := func(hs ...uint64) []byte { b, _ := proto.Marshal(&ldlmv1.CancelRequest{Handles: hs}); return b }
	res := resourceToWire(objRes)
	tests := []struct {
		name string
		op   wire.Opcode
		body []byte
		want syscall.Errno
	}{
		{"cancel of an unknown handle", wire.LDLMCancel, cancel(0xdeadbeef), syscall.ESTALE},
		{"cancel of someone else's lock", wire.LDLMCancel, cancel(uint64(l.Handle())), syscall.EPERM},
		{"cancel of nothing", wire.LDLMCancel, cancel(), syscall.EINVAL},
		{"garbage cancel", wire.LDLMCancel, []byte{0xff, 0xff}, syscall.EINVAL},
		{"mode that is no mode", wire.LDLMEnqueue, enq(&ldlmv1.EnqueueRequest{Resource: res, Mode: 3, Policy: policyToWire(Policy{Extent: Whole})}), syscall.EINVAL},
		{"GROUP on ibits", wire.LDLMEnqueue, enq(&ldlmv1.EnqueueRequest{Resource: resourceToWire(resN(1)), Mode: uint32(GROUP), Policy: policyToWire(Policy{Bits: BitLookup, GID: 1})}), syscall.EINVAL},
		{"extent backwards", wire.LDLMEnqueue, enq(&ldlmv1.EnqueueRequest{Resource: res, Mode: uint32(PW), Policy: policyToWire(Policy{Extent: Extent{10, 5}})}), syscall.EINVAL},
		{"unknown type", wire.LDLMEnqueue, enq(&ldlmv1.EnqueueRequest{Resource: &ldlmv1.Resource{Id: res.Id, Type: 99}, Mode: uint32(PR)}), syscall.EINVAL},
		{"short resource id", wire.LDLMEnqueue, enq(&ldlmv1.EnqueueRequest{Resource: &ldlmv1.Resource{Id: []uint64{1}, Type: uint32(TypeExtent)}, Mode: uint32(PR)}), syscall.EINVAL},
		{"unknown flags", wire.LDLMEnqueue, enq(&ldlmv1.EnqueueRequest{Resource: res, Mode: uint32(PR), Flags: 1 << 20, Policy: policyToWire(Policy{Extent: Whole})}), syscall.EINVAL},
		{"intent without a policy", wire.LDLMEnqueue, enq(&ldlmv1.EnqueueRequest{Resource: res, Mode: uint32(PR), Intent: []byte("open"), Policy: policyToWire(Policy{Extent: Whole})}), syscall.EOPNOTSUPP},
		{"convert of an unknown handle", wire.LDLMConvert, func() []byte { b, _ := proto.Marshal(&ldlmv1.ConvertRequest{Handle: 77, Mode: uint32(PR)}); return b }(), syscall.ESTALE},
	}
	for _, tt := range tests {
		_, err := b.imp.Do(ctx, &ptlrpc.Req{Opcode: tt.op, Body: tt.body})
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	after := lc.lockd.Locks(objRes)
	if len(after) != len(before) || after[0] != before[0] {
		t.Fatalf("locks changed: %+v -> %+v", before, after)
	}
	if st := lc.lockd.Stats(); st.BadRequests < uint64(len(tests)-1) {
		t.Fatalf("bad requests %d", st.BadRequests)
	}
	// Still serving.
	l2, _, _, err := b.lc.Enqueue(ctx, b.imp, Enqueue{Resource: objRes, Mode: PR, Policy: Policy{Extent: Whole}})
	if err != nil {
		t.Fatal(err)
	}
	l2.Release()
	l.Release()
}

// TestCancelSkipsStaleHandles: a CANCEL batching a lock the server has
// let go already with one it still holds cancels the one it holds (a
// refusal would leave it granted, and its holder evicted when a conflict
// comes); a batch of nothing but unknown handles, or with another
// client's lock, is refused and changes nothing.
func TestCancelSkipsStaleHandles(t *testing.T) {
	lc := newLockCluster(t, 2, 5*time.Second)
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	res := func(i uint32) Resource { return Resource{ID: ResIDOfFID(0x100000000, 100+i, 0), Type: TypeExtent} }
	la, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: res(1), Mode: PR, Policy: Policy{Extent: Whole}})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Release()
	lb, _, _, err := b.lc.Enqueue(ctx, b.imp, Enqueue{Resource: res(2), Mode: PR, Policy: Policy{Extent: Whole}})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release()
	cancel := func(hs ...uint64) error {
		body, _ := proto.Marshal(&ldlmv1.CancelRequest{Handles: hs})
		_, err := a.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.LDLMCancel, Body: body})
		return err
	}
	if err := cancel(0xdead, 0xbeef); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("cancel of unknown handles only: %v, want ESTALE", err)
	}
	if err := cancel(uint64(la.Handle()), 0xdead, uint64(lb.Handle())); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("cancel with another client's lock: %v, want EPERM", err)
	}
	if len(lc.lockd.Locks(res(1))) != 1 || len(lc.lockd.Locks(res(2))) != 1 {
		t.Fatalf("a refused cancel changed the locks: %v %v", lc.lockd.Locks(res(1)), lc.lockd.Locks(res(2)))
	}
	if err := cancel(0xdead, uint64(la.Handle())); err != nil {
		t.Fatalf("cancel of a stale and a held lock: %v", err)
	}
	if got := lc.lockd.Locks(res(1)); len(got) != 0 {
		t.Fatalf("the held lock survived its cancel: %v", got)
	}
	if len(lc.lockd.Locks(res(2))) != 1 {
		t.Fatal("another client's lock went")
	}
}

// TestLockReplayedTwice: a client whose recovery starts over (its
// connection lost in the middle of its lock replays) replays the same
// locks again. The server answers each with the lock the first replay
// granted, under its handle, instead of granting a second one that
// nobody would ever cancel (Lustre's find_existing_lock).
func TestLockReplayedTwice(t *testing.T) {
	lc := newLockClusterTarget(t, 1, 5*time.Second, nil, func(c *ptlrpc.TargetConfig) {
		c.LastTransno, c.RecoveryWindow = 1, time.Minute // recovering: lock replays are taken
	})
	a := lc.node(0, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	body, _ := proto.Marshal(&ldlmv1.EnqueueRequest{Resource: resourceToWire(objRes), Mode: uint32(PW),
		Policy: policyToWire(Policy{Extent: Whole}), ClientHandle: 0x77, Flags: wireReplay})
	var handles []uint64
	for range 2 {
		b, err := a.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.LDLMEnqueue, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		var rep ldlmv1.EnqueueReply
		if err := proto.Unmarshal(b, &rep); err != nil || !rep.Granted {
			t.Fatalf("replay: %+v %v", &rep, err)
		}
		handles = append(handles, rep.Handle)
	}
	if handles[0] != handles[1] {
		t.Errorf("the second replay got lock %#x, the first %#x", handles[1], handles[0])
	}
	if locks := lc.lockd.Locks(objRes); len(locks) != 1 {
		t.Fatalf("%d locks after the same replay twice, want 1: %+v", len(locks), locks)
	}
	// Another client handle is another lock.
	res2 := Resource{ID: ResIDOfFID(0x100000000, 2, 0), Type: TypeExtent}
	other, _ := proto.Marshal(&ldlmv1.EnqueueRequest{Resource: resourceToWire(res2), Mode: uint32(PR),
		Policy: policyToWire(Policy{Extent: Whole}), ClientHandle: 0x78, Flags: wireReplay})
	if _, err := a.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.LDLMEnqueue, Body: other}); err != nil {
		t.Fatal(err)
	}
	if locks := lc.lockd.Locks(res2); len(locks) != 1 {
		t.Fatalf("%d locks of another replay, want 1", len(locks))
	}
}

// TestGlimpseReplayRefused: during recovery a lock replay is granted
// without a conflict check. A glimpse (or a lock test) flagged as a replay
// is bad input: refused with EINVAL, it takes no lock over the writer's
// replayed one.
func TestGlimpseReplayRefused(t *testing.T) {
	lc := newLockClusterTarget(t, 2, 5*time.Second, nil, func(c *ptlrpc.TargetConfig) {
		c.LastTransno, c.RecoveryWindow = 1, time.Minute
	})
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	enqueue := func(n *lockNode, mode Mode, flags uint32, ch uint64) error {
		body, _ := proto.Marshal(&ldlmv1.EnqueueRequest{Resource: resourceToWire(objRes), Mode: uint32(mode),
			Policy: policyToWire(Policy{Extent: Whole}), ClientHandle: ch, Flags: flags})
		_, err := n.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.LDLMEnqueue, Body: body})
		return err
	}
	if err := enqueue(a, PW, wireReplay, 0x1); err != nil { // a writer's granted lock
		t.Fatal(err)
	}
	for _, flags := range []uint32{wireGlimpse | wireGlimpseLock | wireReplay, wireGlimpse | wireReplay, wireTestLock | wireReplay} {
		if err := enqueue(b, PR, flags, 0x2); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("enqueue with flags %#x during recovery: %v, want EINVAL", flags, err)
		}
	}
	if locks := lc.lockd.Locks(objRes); len(locks) != 1 || locks[0].Mode != PW {
		t.Fatalf("locks after the refused glimpses: %+v, want a's PW only", locks)
	}
}

// newReplayCluster is a recovering lock cluster whose enqueues come as an
// import's replays (MSG_REPLAY), as ReplayLocks sends them from OnRecover.
func newReplayCluster(t *testing.T) *lockCluster { return newReplayClusterOf(t, 1) }

// newReplayClusterOf is newReplayCluster with nclients clients.
func newReplayClusterOf(t *testing.T, nclients int) *lockCluster {
	return newLockClusterTarget(t, nclients, 5*time.Second, func(lc *lockCluster, c *ptlrpc.ServiceConfig) {
		spec := c.Handlers[wire.LDLMEnqueue]
		fn := spec.Fn
		spec.Fn = func(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
			r.Header.Flags |= wire.MsgReplay
			return fn(ctx, r)
		}
		c.Handlers[wire.LDLMEnqueue] = spec
	}, func(c *ptlrpc.TargetConfig) {
		c.LastTransno, c.RecoveryWindow = 1, time.Minute
	})
}

// TestWaitingLockReplayedTwice: a lock the client still waited for is
// replayed without the replay flag (the server checks it for conflicts),
// but a replay all the same: replayed again after recovery started over
// (as waiting, or as granted once the first replay's reply granted it),
// it gets the lock the first replay made, not a second one that nobody
// would cancel.
func TestWaitingLockReplayedTwice(t *testing.T) {
	lc := newReplayCluster(t)
	a := lc.node(0, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	var handles []uint64
	for _, flags := range []uint32{0, 0, wireReplay} {
		body, _ := proto.Marshal(&ldlmv1.EnqueueRequest{Resource: resourceToWire(objRes), Mode: uint32(PW),
			Policy: policyToWire(Policy{Extent: Whole}), ClientHandle: 0x79, Flags: flags})
		b, err := a.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.LDLMEnqueue, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		var rep ldlmv1.EnqueueReply
		if err := proto.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Granted {
			t.Errorf("replay %d: lock %#x granted during recovery", len(handles), rep.Handle)
		}
		handles = append(handles, rep.Handle)
	}
	if handles[1] != handles[0] || handles[2] != handles[0] {
		t.Errorf("the replays of one waiting lock got locks %#x", handles)
	}
	if locks := lc.lockd.Locks(objRes); len(locks) != 1 {
		t.Fatalf("%d locks after the same replay three times, want 1: %+v", len(locks), locks)
	}
	// Granted once recovery is over: the completion AST finds the client
	// not knowing the lock (the test enqueued it by hand), which is
	// cancelled for it then.
	lc.tgt.EndRecovery()
	for lc.lockd.Stats().CompletionASTs == 0 || len(lc.lockd.Locks(objRes)) != 0 {
		if ctx.Err() != nil {
			t.Fatalf("not granted and given back after recovery: %+v, %+v", lc.lockd.Locks(objRes), lc.lockd.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestResentEnqueueGrantsOnce: an enqueue whose reply is lost is resent
// under its XID; the server, which granted the lock, must answer with
// that lock rather than enqueue a second one for the same client lock.
// It enqueued again: the second PW lock conflicted with the first,
// which the client did not know of, and the resend waited for a cancel
// that could not come (or, once granted, the first lock leaked).
func TestResentEnqueueGrantsOnce(t *testing.T) {
	faults := &ptlrpc.Faults{}
	lc := newLockClusterWith(t, 1, 2*time.Second, func(_ *lockCluster, c *ptlrpc.ServiceConfig) { c.Faults = faults })
	a := lc.node(0, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	faults.Arm(ptlrpc.FailDropReply, 1)
	l, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: objRes, Mode: PW, Policy: Policy{Extent: Whole}, Hooks: a.hooks()})
	if err != nil {
		t.Fatalf("%v; locks %+v; stats %+v", err, lc.lockd.Locks(objRes), lc.lockd.Stats())
	}
	defer l.Release()
	if faults.Fired(ptlrpc.FailDropReply) != 1 {
		t.Fatal("the reply was not dropped")
	}
	if ls := lc.lockd.Locks(objRes); len(ls) != 1 {
		t.Fatalf("%d locks on the resource after one enqueue resent: %+v", len(ls), ls)
	}
	select {
	case uuid := <-lc.evicted:
		t.Fatalf("%s evicted", uuid)
	default:
	}
}

// TestResentGlimpseLockGrantsOnce: a glimpse answered with a lock whose
// reply is lost is resent; the server answers with the lock it granted,
// not a second one the client never learns of and never gives back.
func TestResentGlimpseLockGrantsOnce(t *testing.T) {
	faults := &ptlrpc.Faults{}
	lc := newLockClusterWith(t, 1, 5*time.Second, func(_ *lockCluster, c *ptlrpc.ServiceConfig) { c.Faults = faults })
	b := lc.node(0, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	lc.mu.Lock()
	binary.LittleEndian.PutUint64(lc.data[objSize-8:], 777) // an LVB a lock vouches for
	lc.mu.Unlock()
	faults.Arm(ptlrpc.FailDropReply, 1)
	l, _, _, err := b.lc.GlimpseLock(ctx, b.imp, objRes, b.hooks())
	if err != nil || l == nil {
		t.Fatalf("glimpse: lock %v err %v; server locks %+v", l, err, lc.lockd.Locks(objRes))
	}
	defer l.Release()
	if faults.Fired(ptlrpc.FailDropReply) != 1 {
		t.Fatal("the reply was not dropped")
	}
	if ls := lc.lockd.Locks(objRes); len(ls) != 1 {
		t.Fatalf("%d locks on the resource after one glimpse resent: %+v", len(ls), ls)
	}
}

// TestEnqueueAfterExportGone: an enqueue whose handler was running when its
// client was evicted must not leave a lock behind: ExportGone has run, and
// nothing would ever drop it (nor the export the server keeps for it).
func TestEnqueueAfterExportGone(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	lc := newLockClusterWith(t, 1, 5*time.Second, func(lc *lockCluster, c *ptlrpc.ServiceConfig) {
		spec := c.Handlers[wire.LDLMEnqueue]
		fn := spec.Fn
		spec.Fn = func(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
			close(entered)
			<-release
			return fn(ctx, r)
		}
		c.Handlers[wire.LDLMEnqueue] = spec
	})
	a := lc.node(0, ClientConfig{})
	ctx := ctxT(t, 5*time.Second)
	done := make(chan error, 1)
	go func() {
		l, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: objRes, Mode: PR, Policy: Policy{Extent: Whole}, Hooks: a.hooks()})
		if err == nil {
			l.Release()
		}
		done <- err
	}()
	<-entered
	if err := lc.tgt.Evict("client-0"); err != nil {
		t.Fatal(err)
	}
	close(release)
	<-done
	if ls := lc.lockd.Locks(objRes); len(ls) != 0 {
		t.Fatalf("locks of an evicted client left on the server: %+v", ls)
	}
	lc.lockd.mu.Lock()
	n := len(lc.lockd.mu.owners)
	lc.lockd.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d owners kept after their export went", n)
	}
}

// TestConvertBeatsCallbackTimer: a holder that converts its lock out of
// every conflict just as its callback timer fires (the timer's evict waits
// for the server's lock, which the convert holds) is not evicted: it gave
// the server what it asked for in time.
func TestConvertBeatsCallbackTimer(t *testing.T) {
	const cbTimeout = 200 * time.Millisecond
	lc := newLockCluster(t, 1, cbTimeout)
	a := lc.node(0, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	a.stall.Store(true)
	la, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: objRes, Mode: PW, Policy: Policy{Extent: Whole}, Hooks: a.hooks()})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Release()
	held := lc.lockd.Locks(objRes)[0]
	lc.lockd.mu.Lock()
	// A PR request queues behind a's PW and arms a's callback timer.
	ns := lc.lockd.mu.ns
	res, err := ns.Enqueue(Request{Resource: objRes, Mode: PR, Owner: LocalOwner, Policy: Policy{Extent: Extent{0, 4095}}})
	if err != nil || res.Lock.State != Waiting {
		lc.lockd.mu.Unlock()
		t.Fatalf("%+v %v", res, err)
	}
	lc.lockd.effectsLocked(res.Effects)
	if lc.lockd.mu.timers[held.Handle] == nil {
		lc.lockd.mu.Unlock()
		t.Fatal("no callback timer")
	}
	time.Sleep(cbTimeout + 100*time.Millisecond) // the timer fires and waits for mu
	_, _, err = lc.lockd.convertLocked(held.Owner, &ldlmv1.ConvertRequest{Handle: uint64(held.Handle), Mode: uint32(PR)})
	lc.lockd.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case uuid := <-lc.evicted:
		t.Fatalf("%s evicted for a lock it converted before its timer's eviction ran", uuid)
	case <-time.After(500 * time.Millisecond):
	}
}

// TestConvertLeavesConflict: a holder called back for one waiter's bits
// converts them away, but still holds bits a later waiter (queued while
// the first callback was out, so sent none) needs. The holder must hear
// of that conflict: otherwise it keeps the lock unused in its LRU, the
// waiter hangs, and the holder is evicted when its callback timer fires.
func TestConvertLeavesConflict(t *testing.T) {
	const cbTimeout = time.Second
	lc := newLockCluster(t, 3, cbTimeout)
	a, b, c := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{}), lc.node(2, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	res := Resource{ID: ResIDOfFID(0x200000000, 7, 0), Type: TypeIBits}
	proceed := make(chan struct{})
	hooks := Hooks{Convert: func(context.Context, *ClientLock, Bits) bool { <-proceed; return true }}
	la, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: res, Mode: PR, Policy: Policy{Bits: BitLookup | BitUpdate | BitLayout}, Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	la.Release()
	grant := func(n *lockNode, m Mode, bits Bits) chan error {
		ch := make(chan error, 1)
		go func() {
			l, _, _, err := n.lc.Enqueue(ctx, n.imp, Enqueue{Resource: res, Mode: m, Policy: Policy{Bits: bits}})
			if err == nil {
				l.Release()
			}
			ch <- err
		}()
		return ch
	}
	waiting := func(n int) {
		for len(lc.lockd.Locks(res)) != n {
			time.Sleep(5 * time.Millisecond)
		}
	}
	bDone := grant(b, EX, BitLayout) // a is called back for LAYOUT
	waiting(2)
	cDone := grant(c, PW, BitUpdate) // queued while a's callback is out
	waiting(3)
	close(proceed) // a converts to LOOKUP|UPDATE
	start := time.Now()
	for _, ch := range []chan error{bDone, cDone} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	select {
	case uuid := <-lc.evicted:
		t.Fatalf("%s evicted; waiters granted after %v", uuid, time.Since(start))
	default:
	}
}

// TestReplayWaitingThenGranted: before a restart a held PW and b waited
// for PW on the same range. Recovery takes the clients' replays in any
// order: b's waiting lock replayed first must not be granted over a's
// granted lock replayed after it (two writers at once).
func TestReplayWaitingThenGranted(t *testing.T) {
	lc := newReplayClusterOf(t, 2)
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	send := func(n *lockNode, flags uint32, ch uint64) {
		body, _ := proto.Marshal(&ldlmv1.EnqueueRequest{Resource: resourceToWire(objRes), Mode: uint32(PW),
			Policy: policyToWire(Policy{Extent: Whole}), ClientHandle: ch, Flags: flags})
		if _, err := n.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.LDLMEnqueue, Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	send(b, 0, 0x2)          // b's waiting lock
	send(a, wireReplay, 0x1) // a's granted lock
	granted := 0
	for _, l := range lc.lockd.Locks(objRes) {
		if l.State == Granted {
			granted++
		}
	}
	if granted > 1 {
		t.Fatalf("two conflicting PW locks granted: %+v", lc.lockd.Locks(objRes))
	}
	// Once recovery is over, a's lock is called back (a's client does not
	// know it, and it is cancelled) and b's is granted: its completion
	// AST goes to b's client, which does not know it either (the test
	// enqueued by hand), and it is cancelled too.
	lc.tgt.EndRecovery()
	for {
		ls := lc.lockd.Locks(objRes)
		if len(ls) == 1 && ls[0].State == Granted {
			lc.lockd.mu.Lock()
			ch := lc.lockd.mu.remote[ls[0].Handle]
			lc.lockd.mu.Unlock()
			if ch != 0x2 {
				t.Fatalf("the lock left is not b's: %+v", ls)
			}
		}
		st := lc.lockd.Stats()
		if len(ls) == 0 && st.BlockingASTs > 0 && st.CompletionASTs > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("b not granted and given back after recovery: %+v, %+v", ls, st)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestIgnoredBlockingASTNodeTimeout: a lock server whose configuration
// sets no callback timeout waits the node's ldlm_timeout, as it is when
// the callback goes (lctl set_param ldlm_timeout=1), not the default 20 s.
func TestIgnoredBlockingASTNodeTimeout(t *testing.T) {
	old := NodeCallbackTimeout()
	if err := SetNodeCallbackTimeout(time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { SetNodeCallbackTimeout(old) })
	if err := SetNodeCallbackTimeout(time.Millisecond); err == nil || NodeCallbackTimeout() != time.Second {
		t.Fatalf("ldlm_timeout 1ms: %v, now %v", err, NodeCallbackTimeout())
	}
	lc := newLockCluster(t, 2, 0)
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 10*time.Second)
	a.stall.Store(true)
	if err := a.access(ctx, PW, func(obj []byte) bool { copy(obj, "lost"); return true }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := b.access(ctx, PR, func([]byte) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < time.Second || waited > 4*time.Second {
		t.Fatalf("waiter granted after %v, ldlm_timeout 1s", waited)
	}
	if st := lc.lockd.Stats(); st.CallbackTimeouts != 1 {
		t.Fatalf("server stats %+v", st)
	}
}

// TestPendingGrantTimer: a lock that waited while a later request
// conflicted with it is granted with its callback pending (the completion
// AST says so); its holder must give it back within the callback timeout
// like any lock called back, or be evicted. Before, such a grant armed no
// timer: a holder that kept it held the request behind it forever.
func TestPendingGrantTimer(t *testing.T) {
	const cbTimeout = time.Second
	lc := newLockCluster(t, 3, cbTimeout)
	a, b, c := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{}), lc.node(2, ClientConfig{})
	ctx := ctxT(t, 20*time.Second)
	if err := a.access(ctx, PW, func(obj []byte) bool { return false }); err != nil {
		t.Fatal(err)
	}
	a.stall.Store(true) // a keeps its lock: b waits for a's eviction
	b.stall.Store(true) // b keeps the lock it gets
	go b.access(ctx, PW, func([]byte) bool { return false })
	for len(lc.lockd.Locks(objRes)) < 2 {
		if ctx.Err() != nil {
			t.Fatal("b's enqueue never arrived")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// c's request conflicts with b's waiting lock: b's is marked callback
	// pending and, once granted, must come back within cbTimeout.
	start := time.Now()
	if err := c.access(ctx, PR, func([]byte) bool { return false }); err != nil {
		t.Fatalf("c behind a holder that keeps a lock granted with its callback pending: %v", err)
	}
	if waited := time.Since(start); waited < cbTimeout || waited > 2*cbTimeout+3*time.Second {
		t.Fatalf("c granted after %v: want a's and then b's callback timeout (%v each)", waited, cbTimeout)
	}
	evicted := map[string]bool{}
	for len(evicted) < 2 {
		select {
		case uuid := <-lc.evicted:
			evicted[uuid] = true
		case <-ctx.Done():
			t.Fatalf("evicted %v, want client-0 and client-1", evicted)
		}
	}
	if !evicted["client-0"] || !evicted["client-1"] {
		t.Fatalf("evicted %v, want client-0 and client-1", evicted)
	}
	if st := lc.lockd.Stats(); st.CallbackTimeouts != 2 {
		t.Fatalf("server stats %+v: want two callback timeouts", st)
	}
}

// TestRetire: an unused inode bits lock that a lock granted since on the
// same resource covers is given back (its hook runs, the server hears of
// it), and one that is in use, has a bit or a mode the newer lock lacks,
// or is an extent lock is not.
func TestRetire(t *testing.T) {
	lc := newLockCluster(t, 1, 0)
	a := lc.node(0, ClientConfig{CancelDelay: 10 * time.Millisecond})
	ctx := ctxT(t, 10*time.Second)
	var hooked atomic.Int32
	hooks := Hooks{Blocking: func(context.Context, *ClientLock, bool) { hooked.Add(1) }}
	take := func(res Resource, m Mode, p Policy) *ClientLock {
		t.Helper()
		l, _, _, err := a.lc.Enqueue(ctx, a.imp, Enqueue{Resource: res, Mode: m, Policy: p, Hooks: hooks})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	all := Policy{Bits: BitLookup | BitUpdate | BitPerm}
	for i, c := range []struct {
		name        string
		oldMode     Mode
		byMode      Mode // PR if zero
		old, by     Policy
		inUse       bool
		extent      bool
		wantRetired bool
	}{
		{name: "covered", oldMode: PR, old: Policy{Bits: BitLookup | BitPerm}, by: all, wantRetired: true},
		{name: "in use", oldMode: PR, old: Policy{Bits: BitLookup | BitPerm}, by: all, inUse: true},
		{name: "a bit more", oldMode: PR, old: Policy{Bits: BitLookup | BitLayout}, by: all},
		// CW is compatible with CR but not served by it.
		{name: "mode not served", oldMode: CW, old: Policy{Bits: BitLookup}, byMode: CR, by: all},
		{name: "extent", oldMode: CR, old: Policy{Extent: Extent{0, 4095}}, by: Policy{Extent: Whole}, extent: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := Resource{ID: ResID{uint64(100 + i)}, Type: TypeIBits}
			if c.extent {
				res.Type = TypeExtent
			}
			old := take(res, c.oldMode, c.old)
			if !c.inUse {
				old.Release()
			}
			byMode := c.byMode
			if byMode == 0 {
				byMode = PR
			}
			by := take(res, byMode, c.by)
			defer by.Release()
			if old == by {
				t.Fatalf("the second enqueue was served by the first lock (%v)", c.old)
			}
			before, hooks0 := a.lc.Stats().Served, hooked.Load()
			got := a.lc.Retire(ctx, old, by)
			if got != c.wantRetired {
				t.Fatalf("Retire = %v, want %v", got, c.wantRetired)
			}
			if c.inUse {
				old.Release()
			}
			if !got {
				if old.Gone() || a.lc.Stats().Served != before {
					t.Errorf("a lock not retired is gone (%v) or counted", old.Gone())
				}
				return
			}
			if !old.Gone() || a.lc.Stats().Served != before+1 || hooked.Load() != hooks0+1 {
				t.Errorf("retired: gone %v, served %d->%d, hook ran %d times", old.Gone(), before, a.lc.Stats().Served, hooked.Load()-hooks0)
			}
			// The server hears of it (the flusher sends the cancel when no
			// request carries it).
			deadline := time.Now().Add(5 * time.Second)
			for len(lc.lockd.Locks(res)) != 1 {
				if time.Now().After(deadline) {
					t.Fatalf("the server still holds %d locks on the resource, want 1", len(lc.lockd.Locks(res)))
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestASTWorkersHandOff: the callbacks that the answers to callbacks call
// for (a holder not knowing its lock: cancelled, and the waiter behind
// it granted) do not wait for room in the callback queue on the one
// worker that drains it. Here one worker and a queue of one: a's locks,
// enqueued by hand, are unknown to a's client, and b's conflicting
// enqueues need the worker to cancel them and grant b's.
func TestASTWorkersHandOff(t *testing.T) {
	lc := newLockClusterServer(t, 2, 5*time.Second, nil, nil, func(c *ServerConfig) { c.ASTWorkers, c.ASTQueue = 1, 1 })
	a, b := lc.node(0, ClientConfig{}), lc.node(1, ClientConfig{})
	ctx := ctxT(t, 20*time.Second)
	const n = 6
	res := func(i int) Resource { return Resource{ResID{0x100 + uint64(i)}, TypeExtent} }
	for i := range n {
		body, _ := proto.Marshal(&ldlmv1.EnqueueRequest{Resource: resourceToWire(res(i)), Mode: uint32(PW),
			Policy: policyToWire(Policy{Extent: Whole}), ClientHandle: uint64(0x70 + i)})
		if _, err := a.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.LDLMEnqueue, Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, n)
	for i := range n {
		go func() {
			l, _, _, err := b.lc.Enqueue(ctx, b.imp, Enqueue{Resource: res(i), Mode: PW, Policy: Policy{Extent: Whole}, Hooks: b.hooks()})
			if err == nil {
				l.Release()
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("b's enqueue behind a lock a's client does not know: %v (the callback worker stuck?)", err)
		}
	}
}
