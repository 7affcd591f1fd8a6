// Package selftest is Nacre's lnet_selftest: a server that every LNet node
// can run, and a client that drives bulk read, bulk write and ping traffic at
// it and reports MB/s, RPC/s and latency percentiles. It measures LNet and
// the LND below it, nothing above.
//
// The server posts, on Portal, a write sink and a read source of SlotCount
// slots of wire.MTU bytes each (MANAGE_REMOTE: the client picks the slot by
// offset, so concurrent workers never share bytes) and a zero-length ping
// sink. A write is a PUT with ACK into the sink, a read a GET from the
// source, a ping a zero-byte PUT with ACK.
package selftest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// Portal is the selftest request portal (Lustre's SRPC_REQUEST_PORTAL).
const Portal = 51

// SlotCount is how many concurrent transfers of wire.MTU bytes one client can
// run against a server without two of them sharing bytes.
const SlotCount = 64

// Match bits of the three targets on Portal.
const (
	matchWrite uint64 = 0x5e1f_0001
	matchRead  uint64 = 0x5e1f_0002
	matchPing  uint64 = 0x5e1f_0003
)

// Server serves selftest traffic on one LNet.
type Server struct {
	ln  *lnet.LNet
	mds []lnet.MDHandle
}

// Serve attaches the selftest targets to ln. Close detaches them.
func Serve(ln *lnet.LNet) (*Server, error) {
	s := &Server{ln: ln}
	source := make([]byte, SlotCount*wire.MTU)
	for i := range source {
		source[i] = byte(i*7 + i>>12) // recognisable, not constant
	}
	targets := []struct {
		match uint64
		md    lnet.MD
	}{
		{matchWrite, lnet.MD{Buffers: [][]byte{make([]byte, SlotCount*wire.MTU)}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDManageRemote | lnet.MDTruncate}},
		{matchRead, lnet.MD{Buffers: [][]byte{source}, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpGet | lnet.MDManageRemote | lnet.MDTruncate}},
		{matchPing, lnet.MD{Buffers: nil, Threshold: lnet.ThresholdInfinite, Options: lnet.MDOpPut | lnet.MDTruncate}},
	}
	for _, tg := range targets {
		h, err := ln.Attach(Portal, wire.ProcessID{NID: wire.AnyNID, PID: wire.PIDAny}, tg.match, 0, lnet.InsertLast, tg.md)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("selftest: attach portal %d: %w", Portal, err)
		}
		s.mds = append(s.mds, h)
	}
	return s, nil
}

// Close detaches the selftest targets.
func (s *Server) Close() {
	for _, h := range s.mds {
		s.ln.Unlink(h)
	}
	s.mds = nil
}

// Op is a selftest operation.
type Op string

// Operations.
const (
	OpWrite Op = "write"
	OpRead  Op = "read"
	OpPing  Op = "ping"
)

// Config is one selftest run.
type Config struct {
	Peer        wire.ProcessID
	Op          Op
	Size        int // bytes per operation; at most wire.MTU; ignored for ping
	Concurrency int // operations in flight; at most SlotCount
	Duration    time.Duration
}

// Validate checks a run's parameters.
func (c Config) Validate() error {
	switch c.Op {
	case OpWrite, OpRead:
		if c.Size <= 0 || c.Size > wire.MTU {
			return fmt.Errorf("selftest: size %d out of range (1 to %d bytes)", c.Size, wire.MTU)
		}
	case OpPing:
	default:
		return fmt.Errorf("selftest: unknown op %q (want read, write or ping)", c.Op)
	}
	if c.Concurrency < 1 || c.Concurrency > SlotCount {
		return fmt.Errorf("selftest: concurrency %d out of range (1 to %d)", c.Concurrency, SlotCount)
	}
	if c.Duration <= 0 {
		return fmt.Errorf("selftest: duration must be positive")
	}
	if c.Peer.NID.IsZero() {
		return fmt.Errorf("selftest: no peer")
	}
	return nil
}

// Result is what a run measured.
type Result struct {
	Op          Op            `json:"op"`
	Peer        string        `json:"peer"`
	Size        int           `json:"size"`
	Concurrency int           `json:"concurrency"`
	Ops         uint64        `json:"ops"`
	Errors      uint64        `json:"errors"`
	Bytes       uint64        `json:"bytes"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	MBps        float64       `json:"mb_per_s"`
	RPCps       float64       `json:"rpc_per_s"`
	P50         time.Duration `json:"-"`
	P90         time.Duration `json:"-"`
	P99         time.Duration `json:"-"`
	PMax        time.Duration `json:"-"`
	P50us       float64       `json:"p50_us"`
	P90us       float64       `json:"p90_us"`
	P99us       float64       `json:"p99_us"`
	PMaxus      float64       `json:"max_us"`
	FirstError  string        `json:"first_error,omitempty"`
}

// maxSamples bounds the latency samples kept per worker.
const maxSamples = 1 << 16

// Run drives cfg.Op at cfg.Peer for cfg.Duration (or until ctx ends) with
// cfg.Concurrency operations in flight, and reports what it measured. It
// fails only for bad parameters or when no operation at all succeeded.
func Run(ctx context.Context, ln *lnet.LNet, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if cfg.Op == OpPing {
		cfg.Size = 0
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()

	var (
		ops, errCount, bytes atomic.Uint64
		firstErr             atomic.Pointer[error]
		wg                   sync.WaitGroup
		samples              = make([][]time.Duration, cfg.Concurrency)
	)
	start := time.Now()
	for w := 0; w < cfg.Concurrency; w++ {
		wg.Go(func() {
			wk, err := newWorker(ln, cfg, w)
			if err != nil {
				errCount.Add(1)
				firstErr.CompareAndSwap(nil, &err)
				return
			}
			defer wk.close()
			for ctx.Err() == nil {
				t0 := time.Now()
				if err := wk.once(ctx); err != nil {
					if ctx.Err() != nil {
						return // the run ended mid-operation: not an error
					}
					errCount.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				d := time.Since(t0)
				ops.Add(1)
				bytes.Add(uint64(cfg.Size))
				if len(samples[w]) < maxSamples {
					samples[w] = append(samples[w], d)
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	r := Result{Op: cfg.Op, Peer: cfg.Peer.String(), Size: cfg.Size, Concurrency: cfg.Concurrency,
		Ops: ops.Load(), Errors: errCount.Load(), Bytes: bytes.Load(), Elapsed: el}
	r.MBps = float64(r.Bytes) / el.Seconds() / 1e6
	r.RPCps = float64(r.Ops) / el.Seconds()
	all := slices.Concat(samples...)
	slices.Sort(all)
	if n := len(all); n > 0 {
		r.P50, r.P90, r.P99, r.PMax = all[n*50/100], all[n*90/100], all[n*99/100], all[n-1]
		r.P50us, r.P90us, r.P99us, r.PMaxus = us(r.P50), us(r.P90), us(r.P99), us(r.PMax)
	}
	if e := firstErr.Load(); e != nil {
		r.FirstError = (*e).Error()
	}
	if r.Ops == 0 {
		return r, fmt.Errorf("selftest: no %s to %s succeeded: %s", cfg.Op, cfg.Peer, r.FirstError)
	}
	return r, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// worker owns one MD and runs one operation at a time on it.
type worker struct {
	ln     *lnet.LNet
	cfg    Config
	md     lnet.MDHandle
	events chan lnet.Event
	offset uint32
}

func newWorker(ln *lnet.LNet, cfg Config, slot int) (*worker, error) {
	w := &worker{ln: ln, cfg: cfg, events: make(chan lnet.Event, 4), offset: uint32(slot) * wire.MTU}
	buf := make([]byte, cfg.Size)
	for i := range buf {
		buf[i] = byte(i + slot)
	}
	h, err := ln.Bind(lnet.MD{Buffers: [][]byte{buf}, Threshold: lnet.ThresholdInfinite, Handler: w.handle})
	if err != nil {
		return nil, fmt.Errorf("selftest: bind: %w", err)
	}
	w.md = h
	return w, nil
}

// handle forwards events to the worker; the channel never fills because the
// worker has at most two events outstanding (SEND and ACK/REPLY).
func (w *worker) handle(e lnet.Event) {
	if e.Type == lnet.EventUnlink {
		return
	}
	w.events <- e
}

var errShort = errors.New("selftest: short transfer")

// once runs one operation and waits for its two events.
func (w *worker) once(ctx context.Context) error {
	var (
		err  error
		done lnet.EventType
	)
	switch w.cfg.Op {
	case OpWrite:
		err = w.ln.Put(ctx, w.md, lnet.AckReq, w.cfg.Peer, Portal, matchWrite, w.offset, 0)
		done = lnet.EventAck
	case OpPing:
		err = w.ln.Put(ctx, w.md, lnet.AckReq, w.cfg.Peer, Portal, matchPing, 0, 0)
		done = lnet.EventAck
	case OpRead:
		err = w.ln.Get(ctx, w.md, w.cfg.Peer, Portal, matchRead, w.offset)
		done = lnet.EventReply
	}
	if err != nil {
		return err
	}
	// Both events always come (the final one, at worst, with a timeout
	// status), so waiting for them is bounded by LNet's transaction timeout.
	for got := 0; got < 2; got++ {
		e := <-w.events
		if e.Status != nil {
			// Drain the other event so the next operation starts clean.
			if e.Type == lnet.EventSend {
				<-w.events
			}
			return fmt.Errorf("selftest: %s %s: %w", w.cfg.Op, e.Type, e.Status)
		}
		if e.Type == done && w.cfg.Op != OpPing && int(e.MLength) != w.cfg.Size {
			return fmt.Errorf("%w: %d of %d bytes", errShort, e.MLength, w.cfg.Size)
		}
	}
	return nil
}

func (w *worker) close() { w.ln.Unlink(w.md) }
