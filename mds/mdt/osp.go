package mdt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	"github.com/nacrefs/nacre/mds/mdd"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// OST names an OST the MDT allocates objects on: its index, its target
// name, and the processes serving it (the primary first, then failover
// partners).
type OST struct {
	Index   uint32
	Name    string
	Servers []lwire.ProcessID
}

// osp is the MDT's proxy of one OST (Lustre's OSP): an import to it, the
// pool of objects precreated there for new files, and its free space for
// the allocator. One goroutine keeps the pool filled and runs the orphan
// cleanup on start and after the OST restarts.
//
// The pool is the object ids (taken, last] of sequence seq. Creates first
// reserve an object (reserve, which waits only when the pool is empty),
// then take it with the store's lock held (take), so objects are taken in
// the order creates are applied and the store's last object of the OST
// is exact: after a crash everything after it was never given to a file,
// and the orphan cleanup destroys it.
type osp struct {
	m    *MDT
	ost  OST
	imp  *ptlrpc.Import
	log  *slog.Logger
	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	mu struct {
		sync.Mutex
		seq         uint64 // the object sequence; 0 until known
		taken       uint32 // the last object id taken by a create
		last        uint32 // the last object id precreated
		reserved    int    // objects promised to creates in flight
		ready       bool   // the orphan cleanup has run: the pool is usable
		needCleanup bool   // the OST lost our export (restarted): clean up again
		evictions   uint64 // times the OST lost our export
		active      bool   // in the MDT's OST list
		high        uint32 // the pool size the refill aims at
		drained     bool   // a create waited on an empty pool since the last refill
		filling     bool   // the pool fell to half its aim: refill up to the aim
		free        uint64 // bytes available on the OST (statfs)
		freeKnown   bool
		degraded    bool          // the OST said degraded or read-only (statfs)
		unreachable bool          // the last statfs failed
		changed     chan struct{} // closed and replaced when the pool or state changes
	}
}

func newOSP(m *MDT, o OST) (*osp, error) {
	p := &osp{m: m, ost: o, log: m.log.With("ost", o.Name), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	p.mu.changed = make(chan struct{})
	p.mu.active = true
	p.mu.high = m.cfg.PrecreateMin
	if last, ok := m.store.LastObjects()[o.Index]; ok {
		p.mu.seq, p.mu.taken = last.Seq, last.Oid
	}
	imp, err := m.srv.osp.NewImport(ptlrpc.ImportConfig{Target: o.Name, Servers: o.Servers, Portal: ptlrpc.OSTIOPortal,
		Features: 0, OnEvict: func(*ptlrpc.Import) { p.evicted() }})
	if err != nil {
		return nil, fmt.Errorf("mdt: import of %s: %w", o.Name, err)
	}
	p.imp = imp
	go p.run()
	return p, nil
}

// broadcastLocked wakes everybody waiting on the pool.
func (p *osp) broadcastLocked() {
	close(p.mu.changed)
	p.mu.changed = make(chan struct{})
}

func (p *osp) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// evicted runs when the OST no longer knows the MDT's export: it
// restarted, and may have lost objects it precreated before its last
// commit. The pool stops until the orphan cleanup has run again.
func (p *osp) evicted() {
	p.mu.Lock()
	p.mu.needCleanup, p.mu.ready = true, false
	p.mu.evictions++
	p.broadcastLocked()
	p.mu.Unlock()
	p.log.Warn("mdt: the OST lost the MDT's connection; objects wait for the orphan cleanup")
	p.wake()
}

// availLocked is the number of objects a create may still reserve.
func (p *osp) availLocked() int {
	if !p.mu.ready || !p.mu.active {
		return 0
	}
	return int(p.mu.last-p.mu.taken) - p.mu.reserved
}

func (p *osp) avail() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.availLocked()
}

// freeSpace returns the OST's available bytes, if known.
func (p *osp) freeSpace() (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.free, p.mu.freeKnown
}

// reserve promises one object of the pool to a create, waiting while the
// pool is empty (the refill is asked for at once). It fails with ctx's
// error, or ENODEV if the OST leaves the MDT's list meanwhile.
func (p *osp) reserve(ctx context.Context) error {
	for {
		p.mu.Lock()
		if !p.mu.active {
			p.mu.Unlock()
			return fmt.Errorf("%s: %w", p.ost.Name, syscall.ENODEV)
		}
		if n := p.availLocked(); n > 0 {
			p.mu.reserved++
			low := n-1 <= int(p.mu.high/2)
			p.mu.Unlock()
			if low {
				p.wake()
			}
			return nil
		}
		if !p.mu.ready {
			if t := p.m.tgt; t != nil && t.Recovering() {
				// The pool starts after the MDT's recovery (run): its
				// objects past the last the store knows may be those of
				// creates still to be replayed. A replay that wants new
				// objects (a PFL component's first write, say) fails now
				// rather than hold recovery up until its timeout.
				p.mu.Unlock()
				return fmt.Errorf("%s: no new objects while the MDT recovers: %w", p.ost.Name, syscall.EAGAIN)
			}
		}
		p.mu.drained = true
		ch := p.mu.changed
		p.mu.Unlock()
		p.wake()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// unreserve gives back a reservation a create did not use.
func (p *osp) unreserve() {
	p.mu.Lock()
	p.mu.reserved--
	p.broadcastLocked()
	p.mu.Unlock()
}

// take hands a reserved object to a create. The caller holds the store's
// lock (mdd.Spec.Alloc), so takes are in apply order.
func (p *osp) take() fid.FID {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.reserved--
	p.mu.taken++
	if p.mu.taken > p.mu.last {
		panic(fmt.Sprintf("mdt: %s: object %d taken past the pool's end %d", p.ost.Name, p.mu.taken, p.mu.last))
	}
	if p.mu.reserved == 0 {
		p.broadcastLocked() // the cleanup may wait for reservations to end
	}
	return fid.FID{Seq: p.mu.seq, Oid: p.mu.taken}
}

// deactivate takes the OST out of allocation (it left the MDT's list);
// its import stays for destroys.
func (p *osp) setActive(a bool) {
	p.mu.Lock()
	p.mu.active = a
	p.broadcastLocked()
	p.mu.Unlock()
	p.wake()
}

func (p *osp) close(ctx context.Context) {
	close(p.stop)
	<-p.done
	p.imp.Close(ctx)
}

// run keeps the pool: orphan cleanup first (and again after the OST
// restarts), then refills whenever it runs low, and refreshes the OST's
// free space.
func (p *osp) run() {
	defer close(p.done)
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-p.stop
		cancel()
	}()
	cfg := &p.m.cfg
	// The orphan cleanup waits for the MDT's recovery and the replays
	// still in their handlers when it ended: a replayed create names
	// objects the restarted store had not counted as used (the client
	// may have written to them), which the cleanup would destroy.
	if t := p.m.tgt; t != nil && !t.RecoveryEnd().IsZero() {
		if t.ReplaysDone(base) != nil { // stopped
			return
		}
	}
	var lastStatfs time.Time
	for {
		ctx, cancelStep := context.WithTimeout(base, cfg.OSTTimeout)
		err := p.step(ctx, &lastStatfs)
		cancelStep()
		wait := cfg.StatfsInterval
		if err == nil && p.wantRefill() {
			continue
		}
		if err != nil {
			if base.Err() != nil {
				return
			}
			p.log.Info("mdt: OST object pool", "err", err)
			wait = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-p.stop:
			t.Stop()
			return
		case <-p.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// step does what the pool needs now: cleanup, a new sequence, a refill, a
// statfs.
func (p *osp) step(ctx context.Context, lastStatfs *time.Time) error {
	p.mu.Lock()
	active, ready, need, seq := p.mu.active, p.mu.ready, p.mu.needCleanup, p.mu.seq
	p.mu.Unlock()
	if time.Since(*lastStatfs) >= p.m.cfg.StatfsInterval {
		if err := p.statfs(ctx); err != nil {
			return err
		}
		*lastStatfs = time.Now()
	}
	if !active {
		return nil
	}
	if seq == 0 {
		if err := p.newSequence(); err != nil {
			return err
		}
	}
	if !ready || need {
		if err := p.cleanup(ctx); err != nil {
			return err
		}
	}
	return p.refill(ctx)
}

// wantRefill reports whether the pool should be refilled right away.
func (p *osp) wantRefill() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.mu.active || !p.mu.ready || p.mu.needCleanup {
		return false
	}
	if p.mu.last >= p.m.cfg.ObjectSeqWidth {
		return p.mu.taken == p.mu.last && p.mu.reserved == 0 // time for a new sequence
	}
	avail := p.availLocked()
	return avail <= int(p.mu.high/2) || (p.mu.filling && avail < int(p.mu.high))
}

// newSequence gives the OST a new object sequence from the sequence
// controller, recorded in the store before any object of it is made, so
// that the orphan cleanup after a crash knows it.
func (p *osp) newSequence() error {
	e, err := p.m.store.AllocSuperSeq(mdd.TargetOST, p.ost.Index)
	if err != nil {
		return fmt.Errorf("sequence for %s: %w", p.ost.Name, err)
	}
	if err := p.m.store.SetLastObject(p.ost.Index, fid.FID{Seq: e.Start}); err != nil {
		return err
	}
	p.mu.Lock()
	p.mu.seq, p.mu.taken, p.mu.last, p.mu.ready = e.Start, 0, 0, false
	p.mu.Unlock()
	p.log.Info("mdt: new object sequence", "seq", fmt.Sprintf("%#x", e.Start))
	return nil
}

// cleanup is the orphan cleanup (Lustre's osp_precreate_cleanup_orphans):
// once no create holds a reservation, the OST destroys every object after
// the last one taken and recreates any it lost up to it; the pool then
// starts empty right after it.
func (p *osp) cleanup(ctx context.Context) error {
	p.mu.Lock()
	p.mu.ready = false
	for p.mu.reserved > 0 {
		ch := p.mu.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
	// Replayed creates count their objects in the store, maybe past
	// what this pool took before the MDT restarted, maybe in a later
	// sequence the restored store had not recorded (the pool moved to it
	// after the last commit): the pool goes on after them, there.
	if last, ok := p.m.store.LastObjects()[p.ost.Index]; ok && fid.Compare(last, fid.FID{Seq: p.mu.seq, Oid: p.mu.taken}) > 0 {
		if last.Seq != p.mu.seq {
			p.log.Warn("mdt: replayed creates used objects of a later sequence; the pool moves to it",
				"seq", fmt.Sprintf("%#x", p.mu.seq), "to", fmt.Sprintf("%#x", last.Seq))
		}
		p.mu.seq, p.mu.taken = last.Seq, last.Oid
	}
	seq, taken := p.mu.seq, p.mu.taken
	p.mu.needCleanup = false
	p.mu.Unlock()
	body, err := ptlrpc.Marshal(&ostv1.CreateRequest{Seq: seq, DeleteOrphans: true, LastUsed: taken})
	if err != nil {
		return err
	}
	rep, err := p.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.OSTCreate, Body: body})
	var cr ostv1.CreateReply
	if err == nil {
		err = ptlrpc.Unmarshal(rep, &cr)
	}
	if err == nil && (cr.Seq != seq || cr.First != taken+1) {
		err = fmt.Errorf("orphan cleanup reply %v, want sequence %#x from %d", &cr, seq, taken+1)
	}
	if err != nil {
		p.mu.Lock()
		p.mu.needCleanup = true
		p.mu.Unlock()
		return fmt.Errorf("orphan cleanup of %s: %w", p.ost.Name, err)
	}
	p.mu.Lock()
	done := !p.mu.needCleanup
	if done { // not evicted again meanwhile
		p.mu.last, p.mu.ready = taken, true
		p.broadcastLocked()
	}
	p.mu.Unlock()
	if done {
		p.m.kickDestroy() // objects found missing before it are looked for again
	}
	p.log.Debug("mdt: orphan cleanup done", "seq", fmt.Sprintf("%#x", seq), "last_used", taken)
	return nil
}

// maxPrecreateRPC bounds the objects one OST_CREATE asks for: a pool
// that aims higher fills with several (an OST makes a precreate's objects
// in one transaction).
const maxPrecreateRPC = 512

// refill precreates objects once the pool is at half its aim or less,
// until it holds its aim again, doubling the aim (up to PrecreateMax)
// whenever a create found the pool empty.
func (p *osp) refill(ctx context.Context) error {
	p.mu.Lock()
	avail := p.availLocked()
	if p.mu.drained && p.mu.high < p.m.cfg.PrecreateMax {
		p.mu.high = min(p.mu.high*2, p.m.cfg.PrecreateMax)
	}
	p.mu.drained = false
	seq, last, high := p.mu.seq, p.mu.last, p.mu.high
	if avail <= int(high/2) {
		p.mu.filling = true
	}
	if !p.mu.filling || avail >= int(high) {
		p.mu.filling = false
		p.mu.Unlock()
		return nil
	}
	n := min(uint64(int(high)-avail), maxPrecreateRPC)
	width := uint64(p.m.cfg.ObjectSeqWidth)
	if uint64(last)+n > width {
		n = width - uint64(last)
	}
	if n == 0 {
		// The sequence is used up: once the pool is empty and nobody
		// holds a reservation, move to a new one.
		switchNow := p.mu.taken == p.mu.last && p.mu.reserved == 0
		p.mu.Unlock()
		if switchNow {
			return p.newSequence()
		}
		return nil
	}
	p.mu.Unlock()
	body, err := ptlrpc.Marshal(&ostv1.CreateRequest{Seq: seq, Count: uint32(n)})
	if err != nil {
		return err
	}
	rep, err := p.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.OSTCreate, Body: body})
	var cr ostv1.CreateReply
	if err == nil {
		err = ptlrpc.Unmarshal(rep, &cr)
	}
	if err != nil {
		return fmt.Errorf("precreate %d on %s: %w", n, p.ost.Name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.needCleanup || !p.mu.ready || p.mu.seq != seq {
		return nil // evicted meanwhile: the cleanup sorts out what exists
	}
	if cr.Seq != seq || cr.First != last+1 || cr.Count != uint32(n) || p.mu.last != last {
		// The OST's LAST_ID is not where the MDT thought: clean up to
		// make them agree again.
		p.mu.needCleanup, p.mu.ready = true, false
		p.broadcastLocked()
		return fmt.Errorf("precreate on %s gave %v, want %d objects from %d", p.ost.Name, &cr, n, last+1)
	}
	p.mu.last = last + uint32(n)
	p.broadcastLocked()
	p.m.precreated.Add(n)
	return nil
}

// statfs refreshes the OST's free space for the allocator.
func (p *osp) statfs(ctx context.Context) error {
	rep, err := p.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.OSTStatfs})
	var sr ostv1.StatfsReply
	if err == nil {
		err = ptlrpc.Unmarshal(rep, &sr)
	}
	if err != nil {
		p.mu.Lock()
		if !p.mu.unreachable {
			p.mu.unreachable = true
			p.log.Warn("mdt: OST out of reach: new files get no objects on it", "err", err)
		}
		p.mu.Unlock()
		return fmt.Errorf("statfs of %s: %w", p.ost.Name, err)
	}
	free := sr.Bavail * uint64(sr.Bsize)
	if sr.Bsize != 0 && free/uint64(sr.Bsize) != sr.Bavail {
		free = math.MaxUint64
	}
	p.mu.Lock()
	p.mu.free, p.mu.freeKnown = free, true
	if p.mu.unreachable {
		p.mu.unreachable = false
		p.log.Info("mdt: OST back in reach for new objects")
	}
	if d := sr.Degraded || sr.Readonly; d != p.mu.degraded {
		p.mu.degraded = d
		p.log.Info("mdt: OST state for new objects", "degraded", sr.Degraded, "readonly", sr.Readonly)
	}
	p.mu.Unlock()
	return nil
}

// isDown reports whether the OST is out of reach (Lustre's LOD skips an
// OSP whose import is inactive): its last statfs failed, or its import
// lost the connection it had, or has failed to make its first.
func (p *osp) isDown() bool {
	p.mu.Lock()
	unreachable := p.mu.unreachable
	p.mu.Unlock()
	return unreachable || p.imp.OutOfReach()
}

// isDegraded reports whether the OST asked, at its last statfs, to be
// given new objects only when others cannot take them.
func (p *osp) isDegraded() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.degraded
}

// destroysInFlight bounds the OST_DESTROYs the MDT has in flight on one
// OST (Lustre's OSP keeps its sync RPCs within max_rpcs_in_flight): each
// may hold an OSS handler while clients give back their locks on the
// object, and the OST refuses destroys beyond its own bound (EBUSY).
const destroysInFlight = 8

// settledLocked reports whether the OST's objects are as the pool knows
// them: no orphan cleanup is due, which would make again the objects up
// to the last one used that the OST lost in a crash (their precreate not
// committed). An OST out of the MDT's list gets no cleanup.
func (p *osp) settledLocked() bool {
	return !p.mu.active || p.mu.ready && !p.mu.needCleanup
}

// destroy destroys OST objects (a destroy log record's), destroysInFlight
// at a time, and then syncs the OST, so the destroys are durable before
// the record goes. Objects already gone count as destroyed, unless an
// orphan cleanup was due meanwhile (as after the MDT's or the OST's
// restart): it may make them again, and with the record dropped nothing
// would ever destroy them. The record stays until after the cleanup then.
func (p *osp) destroy(ctx context.Context, objs []fid.FID) error {
	p.mu.Lock()
	settled, evictions := p.settledLocked(), p.mu.evictions
	p.mu.Unlock()
	missing := 0
	for len(objs) > 0 {
		n := min(len(objs), destroysInFlight)
		calls := make([]ptlrpc.SetCall, n)
		for i, f := range objs[:n] {
			body, err := ptlrpc.Marshal(&ostv1.ObjectRequest{Fid: &ostv1.FID{Seq: f.Seq, Oid: f.Oid, Ver: f.Ver}})
			if err != nil {
				return err
			}
			calls[i] = ptlrpc.SetCall{Import: p.imp, Req: &ptlrpc.Req{Opcode: wire.OSTDestroy, Body: body}}
		}
		for i, r := range ptlrpc.DoSet(ctx, calls) {
			switch {
			case errors.Is(r.Err, syscall.ENOENT):
				missing++
			case r.Err != nil:
				return fmt.Errorf("destroy %v on %s: %w", objs[i], p.ost.Name, r.Err)
			}
		}
		objs = objs[n:]
	}
	if _, err := p.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.OSTSync}); err != nil {
		return fmt.Errorf("sync of %s after destroys: %w", p.ost.Name, err)
	}
	p.mu.Lock()
	evicted := p.mu.evictions != evictions
	ok := settled && p.settledLocked() && !evicted
	p.mu.Unlock()
	switch {
	case evicted:
		// The OST restarted and lost the MDT's export meanwhile: destroys
		// it took before, not committed, were dropped with the replay
		// list, and their objects are back (below the last used, where
		// no orphan cleanup looks). The record stays, for all again.
		return fmt.Errorf("%s evicted the MDT during the destroys, which may be undone: %w", p.ost.Name, syscall.EAGAIN)
	case missing > 0 && !ok:
		return fmt.Errorf("%d objects missing on %s before its orphan cleanup, which may make them again: %w",
			missing, p.ost.Name, syscall.EAGAIN)
	}
	return nil
}
