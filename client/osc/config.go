package osc

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
)

// PageSize is the unit of the client's page cache, of grant accounting
// and of lock alignment (Lustre's PAGE_SIZE on x86).
const PageSize = 4096

// Defaults of a Config: Lustre's values for one OSC (osc.*.max_dirty_mb,
// max_pages_per_rpc, max_rpcs_in_flight, checksums) and one client
// (llite.*.max_read_ahead_mb, max_cached_mb).
const (
	DefaultMaxDirtyMB      = 64
	DefaultMaxPagesPerRPC  = 1024 // 4 MiB RPCs
	DefaultMaxRPCsInFlight = 8
	DefaultMaxReadAheadMB  = 64
	// DefaultMaxReadAheadPerFileMB is half the client's budget: two files
	// read sequentially at once both get their whole window.
	DefaultMaxReadAheadPerFileMB = 32
	DefaultMaxCachedMB           = 512
	DefaultDirtyExpire           = 5 * time.Second
)

// Config holds the tunables of a client's data path. The page cache and
// read-ahead budgets (MaxCachedMB, MaxReadAheadMB) are per client and
// shared by every OSC of a Cache; the others apply to each OSC.
type Config struct {
	// MaxDirtyMB bounds the dirty data one OSC caches (written but not yet
	// acknowledged by the OST), in MiB. The grant the OST gave bounds it
	// too: dirty bytes never exceed either.
	MaxDirtyMB int
	// MaxPagesPerRPC is the size of a full bulk RPC in pages; dirty pages
	// are gathered into RPCs of this size. At most wire.MaxBulkSize.
	MaxPagesPerRPC int
	// MaxRPCsInFlight bounds the bulk RPCs of one OSC in flight, counted
	// separately for reads and writes as Lustre does.
	MaxRPCsInFlight int
	// MaxReadAheadMB bounds the pages read ahead and not yet used by a
	// reader, over the whole client, in MiB. 0 turns read-ahead off.
	MaxReadAheadMB int
	// MaxReadAheadPerFileMB bounds the read-ahead window of a file read
	// sequentially, in MiB, as llite.*.max_read_ahead_per_file_mb: each of
	// the n objects the window spans (of those the file is striped over,
	// Object.SetReadAheadShare) gets 1/n of it, but never less than two
	// RPCs, and never more than its share of MaxReadAheadMB. 0 turns
	// read-ahead off.
	MaxReadAheadPerFileMB int
	// MaxCachedMB bounds the client's page cache, clean and dirty pages
	// together, in MiB. Clean pages are evicted least recently used first.
	MaxCachedMB int
	// Checksums protects bulk data with a checksum end to end.
	Checksums bool
	// ChecksumType is the checksum algorithm (osc.*.checksum_type); zero
	// picks, per OST, the fastest on this machine of those the OST agreed
	// to at CONNECT, as Lustre does. An OST that did not agree to it gets
	// that choice too.
	ChecksumType ptlrpc.ChecksumType
	// DirtyExpire is how long dirty data may wait in the cache before the
	// writeback timer sends it, full RPC or not.
	DirtyExpire time.Duration
	// GrantShrink lets an OSC give back grant it does not use
	// (osc.*.grant_shrink): after GrantShrinkInterval without a write
	// (osc.*.grant_shrink_interval) it keeps max_rpcs_in_flight+1 RPCs'
	// worth, and after another, one RPC's (see shrink.go).
	GrantShrink         bool
	GrantShrinkInterval time.Duration
	// Logger receives the data path's logs; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns Lustre's defaults.
func DefaultConfig() Config {
	return Config{
		MaxDirtyMB:            DefaultMaxDirtyMB,
		MaxPagesPerRPC:        DefaultMaxPagesPerRPC,
		MaxRPCsInFlight:       DefaultMaxRPCsInFlight,
		MaxReadAheadMB:        DefaultMaxReadAheadMB,
		MaxReadAheadPerFileMB: DefaultMaxReadAheadPerFileMB,
		MaxCachedMB:           DefaultMaxCachedMB,
		Checksums:             true,
		DirtyExpire:           DefaultDirtyExpire,
		GrantShrink:           true,
		GrantShrinkInterval:   DefaultGrantShrinkInterval,
	}
}

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("osc: invalid config")

// Validate checks the tunables and how they fit together: the cache must
// hold the dirty data of a full pipeline of RPCs and the read-ahead window
// besides.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	maxPages := wire.MaxBulkSize / PageSize
	switch {
	case c.MaxPagesPerRPC < 1 || c.MaxPagesPerRPC > maxPages:
		return bad("max_pages_per_rpc %d: want 1 to %d", c.MaxPagesPerRPC, maxPages)
	case c.MaxRPCsInFlight < 1 || c.MaxRPCsInFlight > 256:
		return bad("max_rpcs_in_flight %d: want 1 to 256", c.MaxRPCsInFlight)
	case c.MaxDirtyMB < 1:
		return bad("max_dirty_mb %d: want at least 1", c.MaxDirtyMB)
	case c.MaxReadAheadMB < 0:
		return bad("max_read_ahead_mb %d is negative", c.MaxReadAheadMB)
	case c.MaxReadAheadPerFileMB < 0:
		return bad("max_read_ahead_per_file_mb %d is negative", c.MaxReadAheadPerFileMB)
	case c.MaxCachedMB < 1:
		return bad("max_cached_mb %d: want at least 1", c.MaxCachedMB)
	case c.DirtyExpire <= 0:
		return bad("dirty expire %v: want a positive duration", c.DirtyExpire)
	case c.GrantShrinkInterval < time.Second:
		return bad("grant_shrink_interval %v: want at least 1s", c.GrantShrinkInterval)
	}
	if err := checkChecksumType(c.ChecksumType); err != nil {
		return err
	}
	rpcMB := (c.MaxPagesPerRPC*PageSize + 1<<20 - 1) >> 20
	if c.MaxDirtyMB < rpcMB {
		return bad("max_dirty_mb %d below one RPC (%d MiB)", c.MaxDirtyMB, rpcMB)
	}
	if need := 2*rpcMB + c.MaxReadAheadMB; c.MaxCachedMB < need {
		return bad("max_cached_mb %d below two RPCs plus max_read_ahead_mb (%d MiB)", c.MaxCachedMB, need)
	}
	return nil
}

// rpcPages returns the pages of a full RPC.
func (c *Config) rpcPages() int { return c.MaxPagesPerRPC }

// dirtyPages returns max_dirty_mb in pages.
func (c *Config) dirtyPages() int { return c.MaxDirtyMB << 20 / PageSize }

// cachePages returns max_cached_mb in pages.
func (c *Config) cachePages() int { return c.MaxCachedMB << 20 / PageSize }

// raPages returns max_read_ahead_mb in pages.
func (c *Config) raPages() int { return c.MaxReadAheadMB << 20 / PageSize }
