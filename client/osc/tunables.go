package osc

import (
	"fmt"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
)

// The limits of the run-time tunables (those of Config.Validate, and
// Lustre's).
const (
	// MaxRPCsInFlightLimit bounds max_rpcs_in_flight.
	MaxRPCsInFlightLimit = 256
	// MaxDirtyMBLimit bounds max_dirty_mb.
	MaxDirtyMBLimit = 1 << 20
	// MaxPagesPerRPCLimit bounds max_pages_per_rpc: the largest bulk.
	MaxPagesPerRPCLimit = wire.MaxBulkSize / PageSize
)

// Tunables are an OSC's tunables that lctl set_param changes while the
// OSC runs (osc.*.max_dirty_mb, max_pages_per_rpc, max_rpcs_in_flight,
// checksums, checksum_type, grant_shrink, grant_shrink_interval). They
// start as the Cache's Config has them.
type Tunables struct {
	MaxDirtyMB, MaxPagesPerRPC, MaxRPCsInFlight int
	Checksums                                   bool
	// ChecksumType is the algorithm asked for, zero for the fastest the
	// OST agreed to (ChecksumType returns the one in use).
	ChecksumType        ptlrpc.ChecksumType
	GrantShrink         bool
	GrantShrinkInterval time.Duration
}

func (c *Client) rpcPages() int   { return int(c.tun.rpcPages.Load()) }
func (c *Client) maxRPCs() int    { return int(c.tun.maxRPCs.Load()) }
func (c *Client) maxDirtyMB() int { return int(c.tun.maxDirtyMB.Load()) }

// dirtyPages returns max_dirty_mb in pages.
func (c *Client) dirtyPages() int { return c.maxDirtyMB() << 20 / PageSize }

// Tunables returns the OSC's tunables as they are now.
func (c *Client) Tunables() Tunables {
	return Tunables{MaxDirtyMB: c.maxDirtyMB(), MaxPagesPerRPC: c.rpcPages(), MaxRPCsInFlight: c.maxRPCs(),
		Checksums: c.tun.checksums.Load(), ChecksumType: ptlrpc.ChecksumType(c.tun.cksumType.Load()),
		GrantShrink: c.tun.grantShrink.Load(), GrantShrinkInterval: time.Duration(c.tun.shrinkInterval.Load())}
}

// ChecksumType returns the algorithm of the OSC's next checksummed RPC:
// the one asked for if the OST agreed to it, otherwise the fastest on this
// machine of those the OST agreed to (Lustre's obd_cksum_type_select).
func (c *Client) ChecksumType() ptlrpc.ChecksumType {
	agreed := c.imp.ChecksumTypes()
	if t := ptlrpc.ChecksumType(c.tun.cksumType.Load()); t&agreed != 0 {
		return t
	}
	return ptlrpc.FastestChecksum(agreed)
}

// checkChecksumType returns an error wrapping ErrInvalidConfig unless t is
// zero or one algorithm ptlrpc knows.
func checkChecksumType(t ptlrpc.ChecksumType) error {
	if t != 0 && (t&^ptlrpc.ChecksumTypes != 0 || t&(t-1) != 0) {
		return fmt.Errorf("%w: checksum type %v: want one of %v", ErrInvalidConfig, t, ptlrpc.ChecksumTypes)
	}
	return nil
}

// CheckTunables returns nil if SetTunables would take t, or an error
// wrapping ErrInvalidConfig that says why: each value must be within
// Config.Validate's bounds, max_dirty_mb must hold one RPC, and the
// client's page cache two RPCs and the read-ahead budget.
func (c *Client) CheckTunables(t Tunables) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case t.MaxPagesPerRPC < 1 || t.MaxPagesPerRPC > MaxPagesPerRPCLimit:
		return bad("max_pages_per_rpc %d: want 1 to %d", t.MaxPagesPerRPC, MaxPagesPerRPCLimit)
	case t.MaxRPCsInFlight < 1 || t.MaxRPCsInFlight > MaxRPCsInFlightLimit:
		return bad("max_rpcs_in_flight %d: want 1 to %d", t.MaxRPCsInFlight, MaxRPCsInFlightLimit)
	case t.MaxDirtyMB < 1 || t.MaxDirtyMB > MaxDirtyMBLimit:
		return bad("max_dirty_mb %d: want 1 to %d", t.MaxDirtyMB, MaxDirtyMBLimit)
	case t.GrantShrinkInterval < time.Second:
		return bad("grant_shrink_interval %v: want at least 1s", t.GrantShrinkInterval)
	}
	if err := checkChecksumType(t.ChecksumType); err != nil {
		return err
	}
	rpcMB := mbOfPages(t.MaxPagesPerRPC)
	if t.MaxDirtyMB < rpcMB {
		return bad("max_dirty_mb %d below one RPC of max_pages_per_rpc %d (%d MiB)", t.MaxDirtyMB, t.MaxPagesPerRPC, rpcMB)
	}
	cached, ra := c.cache.Limits()
	if need := 2*rpcMB + ra; cached < need {
		return bad("max_pages_per_rpc %d: two RPCs and max_read_ahead_mb (%d MiB) do not fit max_cached_mb %d", t.MaxPagesPerRPC, need, cached)
	}
	return nil
}

// SetTunables changes the OSC's tunables at once: RPCs gathered from now
// on have the new size, max_rpcs_in_flight admits or holds back the next
// RPCs (those in flight finish), writers waiting for dirty room look
// again. It returns CheckTunables's error, changing nothing, if t is not
// acceptable.
func (c *Client) SetTunables(t Tunables) error {
	c.tunMu.Lock()
	defer c.tunMu.Unlock()
	if err := c.CheckTunables(t); err != nil {
		return fmt.Errorf("osc: ost%04x: %w", c.index, err)
	}
	c.tun.rpcPages.Store(int64(t.MaxPagesPerRPC))
	c.tun.maxDirtyMB.Store(int64(t.MaxDirtyMB))
	c.tun.checksums.Store(t.Checksums)
	c.tun.cksumType.Store(uint32(t.ChecksumType))
	c.tun.maxRPCs.Store(int64(t.MaxRPCsInFlight))
	c.tun.grantShrink.Store(t.GrantShrink)
	c.tun.shrinkInterval.Store(int64(t.GrantShrinkInterval))
	c.wslots.SetLimit(t.MaxRPCsInFlight)
	c.rslots.SetLimit(t.MaxRPCsInFlight)
	c.mu.Lock()
	c.broadcastLocked()
	c.mu.Unlock()
	c.kickWriteback(false)
	return nil
}

// mbOfPages returns n pages in MiB, rounded up.
func mbOfPages(n int) int { return (n*PageSize + 1<<20 - 1) >> 20 }

// RPCStats are an OSC's bulk RPC histograms (Lustre's osc.*.rpc_stats),
// for reads and writes: index 0 is reads, 1 writes.
type RPCStats struct {
	// InFlight is the RPCs in flight now; Slots the RPCs in flight the
	// OSC's slots hold and their limit (max_rpcs_in_flight).
	InFlight     [2]int
	SlotsUsed    [2]int
	SlotsLimit   int
	PendingPages [2]int
	// ByInFlight[d][n] counts the RPCs sent while n RPCs (this one
	// included) were in flight.
	ByInFlight [2][]uint64
	// ByPages[d][b] counts the RPCs of up to 2^b pages (and more than
	// 2^(b-1)).
	ByPages [2][]uint64
}

// RPCStats returns the histograms.
func (c *Client) RPCStats() RPCStats {
	var s RPCStats
	var limit int
	s.SlotsUsed[0], limit = c.rslots.State()
	s.SlotsUsed[1], _ = c.wslots.State()
	s.SlotsLimit = limit
	c.mu.Lock()
	s.PendingPages[1] = int(c.mu.grant.unsent / PageSize)
	c.mu.Unlock()
	for d := range 2 {
		h := &c.st.rpcs[d]
		s.InFlight[d] = int(h.inFlight.Load())
		s.ByInFlight[d] = make([]uint64, inFlightBuckets)
		for i := range h.flight {
			s.ByInFlight[d][i] = h.flight[i].Load()
		}
		s.ByPages[d] = make([]uint64, pagesBuckets)
		for i := range h.pages {
			s.ByPages[d][i] = h.pages[i].Load()
		}
	}
	return s
}

// ClearRPCStats zeroes the histograms (lctl set_param osc.*.rpc_stats=0).
func (c *Client) ClearRPCStats() {
	for d := range 2 {
		h := &c.st.rpcs[d]
		for i := range h.flight {
			h.flight[i].Store(0)
		}
		for i := range h.pages {
			h.pages[i].Store(0)
		}
		h.sent.Store(0)
	}
}

// raPages returns max_read_ahead_mb in pages.
func (c *Cache) raPages() int { return int(c.raMB.Load()) << 20 / PageSize }

// raFilePages returns max_read_ahead_per_file_mb in pages.
func (c *Cache) raFilePages() int { return int(c.raFileMB.Load()) << 20 / PageSize }

// ReadAheadPerFile returns max_read_ahead_per_file_mb.
func (c *Cache) ReadAheadPerFile() int { return int(c.raFileMB.Load()) }

// SetReadAheadPerFile changes max_read_ahead_per_file_mb; reads already
// ahead keep their window until their next read-ahead.
func (c *Cache) SetReadAheadPerFile(mb int) error {
	if mb < 0 || mb > 1<<20 {
		return fmt.Errorf("osc: cache: %w: max_read_ahead_per_file_mb %d: want 0 to %d", ErrInvalidConfig, mb, 1<<20)
	}
	c.raFileMB.Store(int64(mb))
	return nil
}

// Limits returns the cache's max_cached_mb and max_read_ahead_mb.
func (c *Cache) Limits() (maxCachedMB, maxReadAheadMB int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.maxPages * PageSize >> 20, int(c.raMB.Load())
}

// Users returns how many OSCs share the cache.
func (c *Cache) Users() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.clients)
}

// CheckLimits returns nil if SetLimits would take the values: the cache
// must hold two RPCs of every OSC sharing it and the read-ahead budget.
func (c *Cache) CheckLimits(maxCachedMB, maxReadAheadMB int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case maxCachedMB < 1:
		return bad("max_cached_mb %d: want at least 1", maxCachedMB)
	case maxReadAheadMB < 0:
		return bad("max_read_ahead_mb %d is negative", maxReadAheadMB)
	}
	rpcMB := mbOfPages(c.cfg.MaxPagesPerRPC)
	c.mu.Lock()
	for cl := range c.mu.clients {
		rpcMB = max(rpcMB, mbOfPages(cl.rpcPages()))
	}
	c.mu.Unlock()
	if need := 2*rpcMB + maxReadAheadMB; maxCachedMB < need {
		return bad("max_cached_mb %d below two RPCs plus max_read_ahead_mb (%d MiB)", maxCachedMB, need)
	}
	return nil
}

// SetLimits changes max_cached_mb and max_read_ahead_mb at once. A
// smaller cache evicts clean pages now, as many as it can, and has the
// OSCs write back so that the rest follow; a larger one lets waiting
// allocations go on. It returns CheckLimits's error, changing nothing, if
// the values do not fit.
func (c *Cache) SetLimits(maxCachedMB, maxReadAheadMB int) error {
	c.tunMu.Lock()
	defer c.tunMu.Unlock()
	if err := c.CheckLimits(maxCachedMB, maxReadAheadMB); err != nil {
		return fmt.Errorf("osc: cache: %w", err)
	}
	c.raMB.Store(int64(maxReadAheadMB))
	c.mu.Lock()
	c.mu.maxPages = maxCachedMB << 20 / PageSize
	for busy := 0; c.mu.used > c.mu.maxPages && busy < evictTries; {
		v := c.mu.lru.head
		if v == nil {
			break
		}
		vo := v.obj
		if !vo.mu.TryLock() {
			c.mu.lru.remove(v)
			c.mu.lru.pushBack(v) // busy object: look further
			busy++
			continue
		}
		if v.pins > 0 { // being read without a copy
			vo.mu.Unlock()
			c.mu.lru.remove(v)
			c.mu.lru.pushBack(v)
			busy++
			continue
		}
		vo.evictLocked(v)
		c.mu.lru.remove(v)
		c.freePageLocked(v)
		vo.mu.Unlock()
		c.evictions.Add(1)
	}
	shrink := c.mu.used > c.mu.maxPages
	c.mu.pressure = c.mu.pressure || shrink
	c.signalLocked()
	var cls []*Client
	if shrink {
		for cl := range c.mu.clients {
			cls = append(cls, cl)
		}
	}
	c.mu.Unlock()
	for _, cl := range cls {
		cl.kickWriteback(true)
	}
	return nil
}
