package osc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/slots"
	"github.com/nacrefs/nacre/ldlm"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// ClientConfig is what New needs: the connection to the OST and the
// client-wide parts an OSC shares with the others (the PtlRPC client, the
// lock client, the page cache and its tunables).
type ClientConfig struct {
	// Index is the OST's index, for logs and errors.
	Index uint32
	// Import describes the connection: Target, Servers, and optionally
	// timeouts and ping interval. Portal 0 means ptlrpc.OSTIOPortal. The
	// OSC adds its own OnEvict (dropping locks, cache and grant) before
	// calling the one given here, if any.
	Import ptlrpc.ImportConfig
	// RPC sends the requests.
	RPC *ptlrpc.Client
	// Locks takes the extent locks; its callback service must be running
	// on the RPC client's LNet.
	Locks *ldlm.Client
	// Cache holds the pages and the tunables, shared by the client's OSCs.
	Cache *Cache
}

// Client is one OSC: the client's data path to one OST (Lustre's osc
// obd and its client_obd). It owns the import to the OST, the objects of
// that OST the client has open or cached, their pages in the shared
// Cache, the grant the OST gave, and the writeback engine that turns dirty
// pages into full bulk RPCs. Safe for concurrent use.
type Client struct {
	cfg   Config
	cache *Cache
	index uint32
	imp   *ptlrpc.Import
	locks *ldlm.Client
	log   *slog.Logger

	ctx  context.Context // ends at Close: the engine and async RPCs stop
	stop context.CancelFunc
	wg   sync.WaitGroup // the engine and every async RPC goroutine
	kick chan struct{}  // wakes the engine (capacity 1)

	wslots *slots.Slots // write RPCs in flight (max_rpcs_in_flight)
	rslots *slots.Slots // read RPCs in flight (max_rpcs_in_flight)

	// tun are the tunables lctl set_param changes at run time, read by
	// the data path without locks; tunMu serializes SetTunables.
	tun struct {
		maxRPCs, maxDirtyMB, rpcPages atomic.Int64
		checksums                     atomic.Bool
		cksumType                     atomic.Uint32 // ptlrpc.ChecksumType; 0: the fastest
		grantShrink                   atomic.Bool
		shrinkInterval                atomic.Int64 // time.Duration
	}
	tunMu sync.Mutex

	mu struct {
		sync.Mutex
		// objs are the objects open, cached or locked, by FID; an object
		// with none of those leaves the table.
		objs map[fid.FID]*Object
		// queue holds the objects with unsent dirty pages, each once
		// (Object.queued), oldest first.
		queue []*Object
		// dirty counts charged pages: dirty, or sent and not yet
		// acknowledged (max_dirty_mb bounds it).
		dirty int
		grant grant
		// grantKnown: the grant of the current connection has been read.
		grantKnown bool
		// grantWrites counts from-grant write RPCs in flight.
		grantWrites int
		// waiters counts writers waiting for grant or dirty room; changed
		// is closed and replaced when either may have grown.
		waiters int
		changed chan struct{}
		// urgent asks the engine to send whatever is dirty.
		urgent bool
		closed bool
		// unstable are the acknowledged writes not yet committed, by
		// transno; unstableSince is when the list last moved.
		unstable      []unstableRPC
		unstableSince time.Time
		// lastWrite is when a write RPC (or a shrink) was last sent:
		// grant_shrink_interval runs from it, once nothing is dirty
		// (dirty pages keep the OSC busy however old). shrinking is set
		// while a shrink is on its way, the shrinkSeq-th.
		lastWrite time.Time
		shrinking bool
		shrinkSeq uint64
	}

	st stats
}

// stats are the OSC's counters.
type stats struct {
	readRPCs, writeRPCs, syncWrites    atomic.Uint64
	readBytes, writeBytes              atomic.Uint64
	hits, misses, raPages, raHits      atomic.Uint64
	writeErrors, grantWaits, lostPages atomic.Uint64
	discardedLocks, discardedPages     atomic.Uint64
	presummed, presumMisses            atomic.Uint64
	grantShrinks                       atomic.Uint64
	// readSize and writeSize bound the bytes of one RPC.
	readSize, writeSize minMax
	// rpcs are the RPCs in flight and their histograms (rpc_stats).
	rpcs [2]rpcHist
	// since is when the OSC was made.
	since time.Time
}

// minMax keeps the least and the greatest sample.
type minMax struct{ lo, hi atomic.Uint64 }

func (m *minMax) add(v uint64) {
	for lo := m.lo.Load(); (lo == 0 || v < lo) && !m.lo.CompareAndSwap(lo, v); lo = m.lo.Load() {
	}
	for hi := m.hi.Load(); v > hi && !m.hi.CompareAndSwap(hi, v); hi = m.hi.Load() {
	}
}

// The histograms' buckets: inFlightBuckets covers 0 to 256 RPCs in flight
// (max_rpcs_in_flight's range), pagesBuckets 2^0 to 2^12 pages per RPC.
const (
	inFlightBuckets = 257
	pagesBuckets    = 13
)

// rpcHist are the histograms of one direction of bulk RPCs (Lustre's
// rpc_stats): how many were in flight when each was sent, itself
// included, and its pages, by powers of two.
type rpcHist struct {
	inFlight atomic.Int64
	flight   [inFlightBuckets]atomic.Uint64
	pages    [pagesBuckets]atomic.Uint64
	// sent counts the RPCs since the histograms were last cleared.
	sent atomic.Uint64
}

// start counts an RPC of n pages going out and returns its end.
func (h *rpcHist) start(pages int) func() {
	n := h.inFlight.Add(1)
	h.flight[min(int(n), inFlightBuckets-1)].Add(1)
	b := 0
	for b < pagesBuckets-1 && 1<<b < pages {
		b++
	}
	h.pages[b].Add(1)
	h.sent.Add(1)
	return func() { h.inFlight.Add(-1) }
}

// New starts an OSC: it creates the import (which connects in the
// background; Connect waits for it) and the writeback engine. Close stops
// them.
func New(cfg ClientConfig) (*Client, error) {
	if cfg.RPC == nil || cfg.Locks == nil || cfg.Cache == nil {
		return nil, errors.New("osc: RPC, Locks and Cache are required")
	}
	cc := cfg.Cache.cfg
	c := &Client{cfg: cc, cache: cfg.Cache, index: cfg.Index, locks: cfg.Locks,
		kick: make(chan struct{}, 1), wslots: slots.New(cc.MaxRPCsInFlight), rslots: slots.New(cc.MaxRPCsInFlight)}
	c.tun.maxRPCs.Store(int64(cc.MaxRPCsInFlight))
	c.tun.maxDirtyMB.Store(int64(cc.MaxDirtyMB))
	c.tun.rpcPages.Store(int64(cc.MaxPagesPerRPC))
	c.tun.checksums.Store(cc.Checksums)
	c.tun.cksumType.Store(uint32(cc.ChecksumType))
	c.tun.grantShrink.Store(cc.GrantShrink)
	c.tun.shrinkInterval.Store(int64(cc.GrantShrinkInterval))
	c.st.since = time.Now()
	c.mu.lastWrite = c.st.since
	lg := cfg.Cache.log
	c.log = lg.With("osc", cfg.Import.Target)
	c.mu.objs = make(map[fid.FID]*Object)
	c.mu.changed = make(chan struct{})
	ic := cfg.Import
	if ic.Portal == 0 {
		ic.Portal = ptlrpc.OSTIOPortal
	}
	ic.OnRecover = c.recover
	ic.NoReplay = noReplay
	ic.ConnectData = c.connectData
	ic.Features |= ldlm.ConnectGlimpseLock
	userEvict := ic.OnEvict
	ic.OnEvict = func(imp *ptlrpc.Import) {
		c.evicted(imp)
		if userEvict != nil {
			userEvict(imp)
		}
	}
	imp, err := cfg.RPC.NewImport(ic)
	if err != nil {
		return nil, fmt.Errorf("osc: ost%04x: %w", cfg.Index, err)
	}
	c.imp = imp
	c.ctx, c.stop = context.WithCancel(context.Background())
	c.cache.register(c)
	c.wg.Go(c.engine)
	return c, nil
}

// Index returns the OST index.
func (c *Client) Index() uint32 { return c.index }

// Import returns the OSC's import, for administration (lctl dl, stats).
func (c *Client) Import() *ptlrpc.Import { return c.imp }

// Connect waits until the import is connected and the OST's grant known.
func (c *Client) Connect(ctx context.Context) error {
	if err := c.imp.Connect(ctx); err != nil {
		return fmt.Errorf("osc: ost%04x: connect: %w", c.index, err)
	}
	c.mu.Lock()
	c.learnGrantLocked()
	c.mu.Unlock()
	return nil
}

// connectData is what each CONNECT tells the OST: the grant the client
// holds. An OST that restarted (or evicted the client) has forgotten it,
// and the dirty pages cached under it must still find room.
func (c *Client) connectData() []byte {
	c.mu.Lock()
	held := c.mu.grant.held()
	c.mu.Unlock()
	b, err := ptlrpc.Marshal(&ostv1.ConnectData{Grant: held})
	if err != nil {
		c.log.Warn("osc: connect data", "err", err)
		return nil
	}
	return b
}

// learnGrantLocked reads the grant the OST sent at CONNECT, once per
// connection.
func (c *Client) learnGrantLocked() {
	if c.mu.grantKnown {
		return
	}
	info := c.imp.Info()
	if info.State != ptlrpc.StateFull {
		return
	}
	var cd ostv1.ConnectData
	if err := ptlrpc.Unmarshal(info.TargetData, &cd); err != nil {
		c.log.Warn("osc: bad connect data", "err", err)
	}
	c.mu.grant.reset(cd.Grant)
	c.mu.grantKnown = true
}

// evicted runs when the OST evicted the client: every lock taken through
// the import is dropped (their hooks drop the cached pages, dirty ones
// lost), and the grant starts over from the new connection's.
func (c *Client) evicted(imp *ptlrpc.Import) {
	c.log.Warn("osc: evicted: dropping locks and cached pages")
	c.locks.ImportEvicted(imp)
	c.mu.Lock()
	objs := make([]*Object, 0, len(c.mu.objs))
	for _, o := range c.mu.objs {
		objs = append(objs, o)
	}
	c.mu.Unlock()
	for _, o := range objs {
		o.discardAll(fmt.Errorf("osc: ost%04x: %v: %w", c.index, o.fid, ptlrpc.ErrEvicted))
	}
	c.mu.Lock()
	c.mu.grantKnown = false
	c.mu.grant.unsent = 0
	c.learnGrantLocked()
	c.broadcastLocked()
	c.mu.Unlock()
}

// Stats are a snapshot of an OSC's counters (lctl get_param osc.*.stats,
// osc.*.cur_grant_bytes, osc.*.cur_dirty_bytes, llite.*.read_ahead_stats).
type Stats struct {
	// ReadRPCs and WriteRPCs count bulk RPCs that succeeded.
	ReadRPCs, WriteRPCs uint64
	// SyncWrites counts the write RPCs sent in the writer's context
	// without grant.
	SyncWrites uint64
	// ReadBytes and WriteBytes count the bulk bytes those RPCs moved.
	ReadBytes, WriteBytes uint64
	// Grant is the grant the OST reported last (cur_grant_bytes).
	Grant uint64
	// AvailGrant is what the OSC may still charge for new dirty pages.
	AvailGrant int64
	// GrantWaits counts the times a writer waited for grant or dirty room.
	GrantWaits uint64
	// GrantShrinks counts the grant given back to the OST (ShrinkGrant,
	// or idle for grant_shrink_interval), in requests the OST answered.
	GrantShrinks uint64
	// DirtyBytes is the dirty data charged: cached, or sent and not yet
	// acknowledged (Lustre's cur_dirty_bytes); it never exceeds
	// max_dirty_mb. UnsentBytes is the part not yet in an RPC, which the
	// grant covers (as far as the OST's replies tell: see grant.go for
	// the OST shrinking a grant on its own).
	DirtyBytes, UnsentBytes int64
	// CacheHits and CacheMisses count pages a read found cached or had to
	// fetch.
	CacheHits, CacheMisses uint64
	// ReadAheadPages counts pages read ahead; ReadAheadHits those a reader
	// then used.
	ReadAheadPages, ReadAheadHits uint64
	// WriteErrors counts write RPCs that failed; LostPages the dirty pages
	// dropped without reaching the OST (after a failed write, an eviction).
	WriteErrors, LostPages uint64
	// DiscardedLocks counts locks the OST called back to destroy their
	// object (DiscardData), DiscardedPages the dirty pages they dropped
	// unwritten: data of files that are gone, not lost.
	DiscardedLocks, DiscardedPages uint64
	// PresummedWrites counts the checksummed write RPCs sent with a
	// checksum joined from their pages' sums, taken as the data was
	// written in; PresumMisses those the OST refused, sent again summed
	// from the data (a page whose bytes changed without its sum: a bug).
	PresummedWrites, PresumMisses uint64
	// Objects is how many objects the OSC tracks.
	Objects int
	// MinReadRPC, MaxReadRPC, MinWriteRPC and MaxWriteRPC bound the
	// bytes of one RPC that succeeded.
	MinReadRPC, MaxReadRPC, MinWriteRPC, MaxWriteRPC uint64
	// Since is when the OSC started counting.
	Since time.Time
}

// Stats returns the OSC's counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	s := Stats{Grant: c.mu.grant.total, AvailGrant: c.mu.grant.avail, DirtyBytes: int64(c.mu.dirty) * PageSize,
		UnsentBytes: c.mu.grant.unsent, Objects: len(c.mu.objs)}
	c.mu.Unlock()
	s.ReadRPCs, s.WriteRPCs, s.SyncWrites = c.st.readRPCs.Load(), c.st.writeRPCs.Load(), c.st.syncWrites.Load()
	s.ReadBytes, s.WriteBytes = c.st.readBytes.Load(), c.st.writeBytes.Load()
	s.CacheHits, s.CacheMisses = c.st.hits.Load(), c.st.misses.Load()
	s.ReadAheadPages, s.ReadAheadHits = c.st.raPages.Load(), c.st.raHits.Load()
	s.WriteErrors, s.GrantWaits, s.LostPages = c.st.writeErrors.Load(), c.st.grantWaits.Load(), c.st.lostPages.Load()
	s.GrantShrinks = c.st.grantShrinks.Load()
	s.DiscardedLocks, s.DiscardedPages = c.st.discardedLocks.Load(), c.st.discardedPages.Load()
	s.PresummedWrites, s.PresumMisses = c.st.presummed.Load(), c.st.presumMisses.Load()
	s.MinReadRPC, s.MaxReadRPC = c.st.readSize.lo.Load(), c.st.readSize.hi.Load()
	s.MinWriteRPC, s.MaxWriteRPC = c.st.writeSize.lo.Load(), c.st.writeSize.hi.Load()
	s.Since = c.st.since
	return s
}

// Open returns the object f of this OST, with a reference: Close it when
// done. Objects are shared: opening f twice gives the same Object.
func (c *Client) Open(f fid.FID) *Object {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.mu.objs[f]
	if o == nil {
		o = newObject(c, f)
		c.mu.objs[f] = o
	}
	o.refs++
	return o
}

// tryForget removes o from the table if nothing refers to it: no
// reference, no page, no lock.
func (c *Client) tryForget(o *Object) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.mu.pages.len() > 0 || len(o.mu.locks) > 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if o.refs == 0 && !o.queued && c.mu.objs[o.fid] == o {
		delete(c.mu.objs, o.fid)
	}
}

// broadcastLocked wakes the writers waiting for grant or dirty room.
func (c *Client) broadcastLocked() {
	close(c.mu.changed)
	c.mu.changed = make(chan struct{})
}

// kickWriteback wakes the engine; urgent makes it send whatever is dirty.
func (c *Client) kickWriteback(urgent bool) {
	if urgent {
		c.mu.Lock()
		c.mu.urgent = true
		c.mu.Unlock()
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// queueLocked puts o on the writeback queue if it is not there.
func (c *Client) queueLocked(o *Object) {
	if !o.queued {
		o.queued = true
		c.mu.queue = append(c.mu.queue, o)
	}
}

// charge takes grant and dirty room for n new dirty pages, all or none.
// If it cannot, wait says whether waiting may help (RPCs in flight or
// dirty pages to send will bring grant back or free dirty room); if not,
// the pages must be written synchronously without grant.
func (c *Client) charge(n int) (ok, wait bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.learnGrantLocked()
	if n == 0 {
		return true, false
	}
	if c.mu.dirty+n > c.dirtyPages() {
		return false, true
	}
	if c.mu.grantKnown && c.mu.grant.charge(int64(n)*PageSize) {
		c.mu.dirty += n
		return true, false
	}
	return false, c.mu.grant.unsent > 0 || c.mu.grant.inflight() > 0 || c.mu.grantWrites > 0
}

// uncharge gives back the grant and dirty room of n dirty pages dropped
// before being sent.
func (c *Client) uncharge(n int) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	c.mu.grant.uncharge(int64(n) * PageSize)
	c.mu.dirty -= n
	c.broadcastLocked()
	c.mu.Unlock()
}

// waitRoom waits for grant or dirty room to change after charge said to,
// having asked the engine to send what is dirty.
func (c *Client) waitRoom(ctx context.Context) error {
	c.st.grantWaits.Add(1)
	c.mu.Lock()
	c.mu.waiters++
	c.mu.urgent = true
	ch := c.mu.changed
	c.mu.Unlock()
	c.kickWriteback(false)
	defer func() {
		c.mu.Lock()
		c.mu.waiters--
		c.mu.Unlock()
	}()
	t := time.NewTimer(c.cfg.DirtyExpire)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C: // look again: grant may come from elsewhere
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return fmt.Errorf("osc: ost%04x: %w", c.index, ptlrpc.ErrClosed)
	}
	return nil
}

// grantTarget is how much grant the OSC asks to hold: its dirty limit and
// a full pipeline of RPCs on top.
func (c *Client) grantTarget() int64 {
	return int64(c.maxDirtyMB())<<20 + int64(c.maxRPCs()*c.rpcPages())*PageSize
}

// lowSpaceLocked reports whether the grant is too small for a pipeline of
// RPCs: the OST is filling up, and write RPCs go one at a time so that
// each reply's grant is exact (see grant.go).
func (c *Client) lowSpaceLocked() bool {
	return c.mu.grant.total < uint64(c.maxRPCs()*c.rpcPages())*PageSize
}

// grantWriteWaitsLocked reports whether a write from grant must wait for
// the one in flight: near full they go one at a time (lowSpaceLocked).
func (c *Client) grantWriteWaitsLocked() bool {
	return c.lowSpaceLocked() && c.mu.grantWrites > 0
}

// engine is the writeback engine: it sends dirty pages as write RPCs when
// an object has a full RPC of them, when dirty data or grant or the cache
// are under pressure, and when dirty data is older than DirtyExpire; and
// it forgets objects nothing refers to.
func (c *Client) engine() {
	tick := time.NewTicker(max(min(c.cfg.DirtyExpire/4, 100*time.Millisecond), 10*time.Millisecond))
	defer tick.Stop()
	sweeps := 0
	var pinging atomic.Bool
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.kick:
		case <-tick.C:
			if sweeps++; sweeps%4 == 0 {
				c.sweep()
			}
			c.releaseCommitted()
			c.pollCommit(&pinging)
			c.idleShrink(time.Now())
		}
		c.writebackPass()
	}
}

// sweep forgets idle objects (evicted pages leave objects empty without
// the evictor being able to take the table's lock).
func (c *Client) sweep() {
	c.mu.Lock()
	objs := make([]*Object, 0, len(c.mu.objs))
	for _, o := range c.mu.objs {
		if o.refs == 0 {
			objs = append(objs, o)
		}
	}
	c.mu.Unlock()
	for _, o := range objs {
		c.tryForget(o)
	}
}

// writebackPass sends what the policy says should go now, as long as
// write RPC slots are free; completions kick the engine again.
func (c *Client) writebackPass() {
	pressure := c.cache.underPressure()
	now := time.Now()
	c.mu.Lock()
	pressure = pressure || c.mu.urgent || c.mu.waiters > 0 || c.mu.dirty*2 >= c.dirtyPages() ||
		(c.mu.grantKnown && c.mu.grant.avail < int64(c.rpcPages())*PageSize)
	c.mu.urgent = false
	budget := len(c.mu.queue) + c.maxRPCs()
	c.mu.Unlock()
	for ; budget > 0; budget-- {
		if !c.wslots.TryAcquire() {
			return
		}
		c.mu.Lock()
		if c.grantWriteWaitsLocked() || len(c.mu.queue) == 0 {
			c.mu.Unlock()
			c.wslots.Release()
			return
		}
		o := c.mu.queue[0]
		c.mu.queue[0] = nil
		c.mu.queue = c.mu.queue[1:]
		o.queued = false
		c.mu.Unlock()

		o.mu.Lock()
		var r *brwRPC
		n := len(o.mu.dirtyIdx)
		if n >= c.rpcPages() || (n > 0 && (pressure || now.Sub(o.mu.dirtySince) >= c.cfg.DirtyExpire)) {
			r = o.gatherLocked(0, ^uint64(0))
		}
		if len(o.mu.dirtyIdx) > 0 {
			c.mu.Lock()
			c.queueLocked(o)
			c.mu.Unlock()
		}
		o.mu.Unlock()
		if r == nil {
			c.wslots.Release()
			continue
		}
		c.startWrite(r)
		c.wg.Go(func() {
			defer func() { c.wslots.Release(); c.kickWriteback(false) }()
			c.finishWrite(c.ctx, r)
		})
	}
}

// startWrite moves r's charged pages from unsent to in flight in the grant
// and asks for more grant.
func (c *Client) startWrite(r *brwRPC) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.lastWrite = time.Now()
	r.ticket = c.mu.grant.send(int64(r.charged) * PageSize)
	if r.charged > 0 {
		r.fromGrant = true
		c.mu.grantWrites++
	}
	r.want = c.mu.grant.want(c.grantTarget())
}

// goWrite sends write RPC r, which a caller's ctx gathered, on a goroutine
// of c.wg (Close waits for it), and returns the channel that gets its
// outcome; after, if not nil, runs once it is done. The RPC keeps ctx's
// values (its job ID) but ends with the client, not with ctx: the caller
// may stop waiting (fsync's deadline, an interrupted request), while the
// RPC's pages are the only copy of their data, some of it written by
// others, which a canceled write would drop (writeDone).
func (c *Client) goWrite(ctx context.Context, r *brwRPC, after func()) <-chan error {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(c.ctx, cancel)
	done := make(chan error, 1)
	c.wg.Go(func() {
		defer func() {
			stop()
			cancel()
			if after != nil {
				after()
			}
		}()
		done <- c.finishWrite(wctx, r)
	})
	return done
}

// finishWrite sends a write RPC and records its outcome in the object and
// the grant.
func (c *Client) finishWrite(ctx context.Context, r *brwRPC) error {
	rep, err := c.brw(ctx, r)
	if err == nil {
		r.obj.noteWritten(rep.GetAttr(), r.transno)
	}
	r.obj.writeDone(r, err, !r.sync || r.pulled > 0)
	if err == nil && !r.stable {
		c.addUnstable(r)
	}
	if err == nil {
		// Each reply says what the OST committed: unpin what it covers
		// now rather than at the engine's next tick.
		c.releaseCommitted()
	}
	c.mu.Lock()
	if r.fromGrant {
		c.mu.grantWrites--
	}
	c.mu.dirty -= r.charged
	if err == nil {
		c.mu.grant.reply(r.ticket, rep.GetGrant())
	} else {
		c.mu.grant.failed(r.ticket, isNoSpace(err))
	}
	c.broadcastLocked()
	c.mu.Unlock()
	return err
}

// Flush writes back every dirty page of the OSC and waits for the OST to
// acknowledge them. Errors of the writes are kept for each object's Sync;
// Flush returns ctx's error, or nil.
func (c *Client) Flush(ctx context.Context) error {
	c.mu.Lock()
	objs := make([]*Object, 0, len(c.mu.objs))
	for _, o := range c.mu.objs {
		objs = append(objs, o)
	}
	c.mu.Unlock()
	for _, o := range objs {
		if err := o.flushPages(ctx, 0, ^uint64(0)); err != nil {
			return err
		}
	}
	return nil
}

// Close flushes what is dirty (within ctx), stops the engine, disconnects
// from the OST and drops the OSC's locks and pages. Objects still open
// must not be used afterwards.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return fmt.Errorf("osc: ost%04x: %w", c.index, ptlrpc.ErrClosed)
	}
	c.mu.closed = true
	c.mu.Unlock()
	err := c.Flush(ctx)
	c.stop()
	c.wg.Wait()
	if cerr := c.imp.Close(ctx); cerr != nil && !errors.Is(cerr, ptlrpc.ErrClosed) {
		err = errors.Join(err, cerr)
	}
	// The OST dropped our locks with the export; the lock client forgets
	// them (their hooks drop the pages).
	c.locks.ImportClosed(c.imp)
	c.mu.Lock()
	objs := make([]*Object, 0, len(c.mu.objs))
	for _, o := range c.mu.objs {
		objs = append(objs, o)
	}
	c.mu.Unlock()
	for _, o := range objs {
		o.discardAll(nil)
	}
	c.cache.unregister(c)
	return err
}
