package mdd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"

	"github.com/nacrefs/nacre/internal/errs"
	"github.com/nacrefs/nacre/internal/fid"
)

// formatVersion is the on-disk format this code writes; it opens stores
// from oldestFormat on and moves them to formatVersion (an older binary
// then refuses the store at open rather than failing on records it cannot
// read). 2: inodes may carry inoXattrsTracked and inoXattrs. 3: client
// records (clients.go), which an older binary would leave stale.
const (
	formatVersion = 3
	oldestFormat  = 1
)

// Sequence widths, after Lustre's fid/seq code.
const (
	// DefaultSeqWidth is the number of object ids in a client sequence
	// (LUSTRE_SEQ_MAX_WIDTH).
	DefaultSeqWidth = 0x20000
	// DefaultSuperWidth is the number of sequences in the super range the
	// controller grants a server at a time (LUSTRE_SEQ_SUPER_WIDTH).
	DefaultSuperWidth = 1 << 30
)

// cacheEntries bounds the records the value cache keeps (about 100 bytes
// each).
const cacheEntries = 1 << 18

// RootFID is the root directory's FID on MDT0 ([0x200000007:0x1:0x0]).
var RootFID = fid.FID{Seq: fid.SeqRoot, Oid: 1}

// Config configures a Store.
type Config struct {
	// Dir is the directory the Pebble database lives in; it is created
	// and formatted (root directory, counters) on first open, unless
	// MustExist.
	Dir string
	// MustExist refuses a Dir that holds no database (errs.NotExist)
	// instead of formatting a new, empty namespace there: a server opening
	// a formatted target whose store is lost or not mounted.
	MustExist bool
	// Index is the MDT index. MDT0 runs the sequence controller; other
	// indexes are not supported yet (their sequence server will ask MDT0).
	Index uint32
	// SyncInterval is the period of the background Sync; 0 disables it
	// (the caller calls Sync).
	SyncInterval time.Duration
	// OnCommit, if set, is called after every successful Sync with
	// LastCommitted, outside the store's locks, one call at a time (the
	// PtlRPC target's Committed).
	OnCommit func(transno uint64)
	// Now is the clock for times a request does not carry.
	Now func() time.Time
	// MaxInodes is the inode count Statfs reports as the total.
	MaxInodes uint64
	// SeqWidth is the number of object ids in a client sequence.
	SeqWidth uint32
	// SuperWidth is the number of sequences in a server's super range.
	SuperWidth uint64
	// CacheSize is the size of Pebble's block cache in bytes.
	CacheSize int64
	// Logger receives Pebble's messages and the store's own.
	Logger *slog.Logger
}

// DefaultConfig returns a Config for an MDT0 in dir with Lustre's widths
// and a one-second background sync.
func DefaultConfig(dir string) Config {
	return Config{Dir: dir, SyncInterval: time.Second, Now: time.Now, MaxInodes: 1 << 32,
		SeqWidth: DefaultSeqWidth, SuperWidth: DefaultSuperWidth, CacheSize: 64 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// Validate checks c.
func (c *Config) Validate() error {
	switch {
	case c.Dir == "":
		return fail(syscall.EINVAL, "config: no directory")
	case c.Index != 0:
		return fail(syscall.EINVAL, "config: MDT index %d: only MDT0 is supported", c.Index)
	case c.SeqWidth < 2:
		return fail(syscall.EINVAL, "config: sequence width %d", c.SeqWidth)
	case c.SuperWidth < 1 || c.SuperWidth > 1<<40:
		return fail(syscall.EINVAL, "config: super width %d", c.SuperWidth)
	case c.Now == nil || c.Logger == nil:
		return fail(syscall.EINVAL, "config: no clock or logger")
	case c.SyncInterval < 0:
		return fail(syscall.EINVAL, "config: sync interval %v", c.SyncInterval)
	}
	return nil
}

// Store is one MDT's namespace over Pebble. See the package doc for what
// it owns and its commit model. All methods are safe for concurrent use.
type Store struct {
	cfg Config
	db  *pebble.DB
	log *slog.Logger

	// mu serializes every read-modify-write operation (Lock) against
	// each other and against multi-key reads (RLock), so that a reader
	// never sees half of an operation and two operations never decide
	// on the same state. Fields below are protected by mu.
	mu struct {
		sync.RWMutex
		transno     uint64            // highest transno applied
		inodes      uint64            // live inodes, orphans included
		clNext      uint64            // next changelog index (≥ 1)
		clFirst     uint64            // no record below this index exists
		clUsers     map[uint32]uint64 // changelog user → cleared index
		clUserNext  uint32            // next changelog user id
		destroyNext uint64            // next destroy record id (≥ 1)
		opens       map[fid.FID]int   // open count per inode (memory only)
		writers     map[fid.FID]int   // of those, opens for write (SwapLayouts)
		// recovering: the counts above may miss opens clients have not
		// replayed yet (BeginRecovery to DestroyOrphans).
		recovering bool
		seqCtlNext uint64                    // controller: first sequence not granted
		srv        seqServer                 // this MDT's sequence server
		fld        []FLDEntry                // the FLD, sorted by Start
		alloc      struct{ seq, oid uint64 } // the store's own FID minting
		lastObj    map[uint32]fid.FID        // OST index → last object used (objects.go)
		oidHigh    map[uint64]*oidMark       // sequence → what is known of its OIDs (seq.go)
	}

	cache     *valueCache   // hot records (cache.go)
	replies   replyBook     // the reply records of this life (replies.go)
	names     nameFilters   // names in new directories (names.go); under mu's write lock
	syncMu    sync.Mutex    // one Sync at a time, so OnCommit calls are ordered
	committed atomic.Uint64 // LastCommitted
	// barrier says a ReplayBarrier was set: Sync reports nothing more
	// committed.
	barrier atomic.Bool
	closed  atomic.Bool
	stop    chan struct{}
	done    chan struct{}
}

// Req is what every modifying operation takes besides its arguments: who
// asks, which transno numbers the change, and the time the change happens.
type Req struct {
	Cred Cred
	// Transno numbers the change when nonzero (replay): it must be higher
	// than every transno applied before.
	Transno uint64
	// AssignTransno, if set (and Transno is 0), is called once the
	// operation is sure to be applied, with the store's lock held, to
	// number it: so transnos increase in the order changes are applied.
	// The PtlRPC layer passes func() uint64 { return req.AssignTransno(nil) }.
	AssignTransno func() uint64
	// Time is the time of the change in nanoseconds since the epoch, as
	// the client sent it; 0 takes the store's clock.
	Time int64
	// Replay says a client replays a change the store made before a
	// restart and lost: checks against what lives in memory only (the
	// opens for write SwapLayouts refuses) were passed the first time,
	// and the opens replayed so far, in no order with the changes of
	// other clients, do not say what they were then.
	Replay bool
	// Restore says the caller restores the file for HSM (it holds it
	// open with OpenRestore): the file's immutable and append-only flags
	// do not refuse the layout its data comes back in. Checked as
	// OpenRestore is: CapSysAdmin, a released file.
	Restore bool
}

// Open opens the store in cfg.Dir, formatting it if it is empty (the root
// directory gets RootFID, mode 0755, owned by root), and starts the
// background sync. After a crash it comes back with every operation that
// a Sync had covered and possibly some later ones, each whole.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// A 64 MiB memtable (Pebble's default is 4 MiB), as CockroachDB runs
	// it: a create writes some 500 bytes in seven records, so a small one
	// is flushed and compacted every few thousand creates: in a run of
	// 100,000 creates the flushes and compactions took 40 % of the CPU
	// (12 % with 64 MiB), and mdtest creates from 16 threads went from
	// 0.44 to 0.50 of the null RPC rate. It starts small and grows to
	// that size only under load.
	opts := &pebble.Options{Logger: pebbleLogger{cfg.Logger}, CacheSize: cfg.CacheSize, MemTableSize: 64 << 20, ErrorIfNotExists: cfg.MustExist}
	for i := range opts.Levels {
		// Most namespace reads are point lookups, many of them for keys
		// that do not exist (a new name, a new FID): bloom filters keep
		// those off the disk.
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	if cfg.MustExist {
		// Pebble would create a missing directory before it finds no
		// database there.
		if _, err := os.Stat(cfg.Dir); errors.Is(err, os.ErrNotExist) {
			return nil, errs.Errorf(errs.NotExist, "mdd: open %s: the store does not exist", cfg.Dir)
		}
	}
	db, err := pebble.Open(cfg.Dir, opts)
	if errors.Is(err, pebble.ErrDBDoesNotExist) {
		return nil, errs.Errorf(errs.NotExist, "mdd: open %s: the store does not exist (no database in it)", cfg.Dir)
	}
	if err != nil {
		return nil, ioError(err, "open %s", cfg.Dir)
	}
	s := &Store{cfg: cfg, db: db, log: cfg.Logger, stop: make(chan struct{}), done: make(chan struct{}), cache: newValueCache(cacheEntries)}
	s.mu.clUsers = map[uint32]uint64{}
	s.mu.opens = map[fid.FID]int{}
	s.mu.writers = map[fid.FID]int{}
	s.mu.lastObj = map[uint32]fid.FID{}
	s.mu.oidHigh = map[uint64]*oidMark{}
	if err := s.load(); err != nil {
		db.Close()
		return nil, err
	}
	s.committed.Store(s.mu.transno)
	if cfg.SyncInterval > 0 {
		go s.syncer()
	} else {
		close(s.done)
	}
	return s, nil
}

// load reads the counters, users and FLD, formatting an empty database.
func (s *Store) load() error {
	v, err := s.getU64(keyFormat)
	if errors.Is(err, pebble.ErrNotFound) && s.cfg.MustExist {
		return errs.Errorf(errs.Internal, "mdd: open %s: the database holds no namespace (no format version)", s.cfg.Dir)
	}
	if errors.Is(err, pebble.ErrNotFound) {
		if err := s.format(); err != nil {
			return err
		}
		v, err = s.getU64(keyFormat)
	}
	if err != nil {
		return ioError(err, "open: format version")
	}
	if v < oldestFormat || v > formatVersion {
		return fail(syscall.EINVAL, "open %s: format version %d, want %d to %d", s.cfg.Dir, v, oldestFormat, formatVersion)
	}
	if v < formatVersion {
		// Every record of the older format reads as it did.
		if err := s.db.Set(keyFormat, u64Val(formatVersion), pebble.Sync); err != nil {
			return ioError(err, "open %s: move to format version %d", s.cfg.Dir, formatVersion)
		}
		s.log.Info("mdd: store moved to a newer format", "dir", s.cfg.Dir, "from", v, "to", formatVersion)
	}
	for _, c := range []struct {
		key []byte
		dst *uint64
	}{{keyTransno, &s.mu.transno}, {keyInodes, &s.mu.inodes}, {keyCLNext, &s.mu.clNext},
		{keyDestroy, &s.mu.destroyNext}, {keySeqCtl, &s.mu.seqCtlNext}} {
		if *c.dst, err = s.getU64(c.key); err != nil {
			return ioError(err, "open: counter %s", c.key[1:])
		}
	}
	u, err := s.getU64(keyCLUser)
	if err != nil {
		return ioError(err, "open: changelog users")
	}
	s.mu.clUserNext = uint32(u)
	if err := s.scan([]byte{pfxCLUser}, func(k, v []byte) error {
		if len(k) != 5 || len(v) != 9 || v[0] != recVersion {
			return fmt.Errorf("changelog user record %x", k)
		}
		s.mu.clUsers[binary.BigEndian.Uint32(k[1:])] = binary.LittleEndian.Uint64(v[1:])
		return nil
	}); err != nil {
		return ioError(err, "open: changelog users")
	}
	s.mu.clFirst = s.mu.clNext
	if err := s.scan([]byte{pfxCLRec}, func(k, v []byte) error {
		s.mu.clFirst = binary.BigEndian.Uint64(k[1:])
		return errStop
	}); err != nil {
		return ioError(err, "open: changelog")
	}
	if err := s.scan([]byte{pfxFLD}, func(k, v []byte) error {
		if len(k) != 9 {
			return fmt.Errorf("fld key %x", k)
		}
		e, err := decodeFLD(binary.BigEndian.Uint64(k[1:]), v)
		s.mu.fld = append(s.mu.fld, e)
		return err
	}); err != nil {
		return ioError(err, "open: fld")
	}
	if s.mu.srv, err = s.loadSeqServer(); err != nil {
		return ioError(err, "open: sequence server")
	}
	if err := s.loadLastObjects(); err != nil {
		return ioError(err, "open: last objects")
	}
	return nil
}

// format writes a new MDT: the root directory and the counters.
func (s *Store) format() error {
	now := s.cfg.Now().UnixNano()
	root := inode{Attr: Attr{FID: RootFID, Mode: S_IFDIR | 0o755, Nlink: 2, Size: DirSize,
		Atime: now, Mtime: now, Ctime: now, Crtime: now}}
	b := s.db.NewBatch()
	defer b.Close()
	b.Set(fidKey(pfxInode, RootFID), root.marshal(), nil)
	for _, c := range []struct {
		key []byte
		v   uint64
	}{{keyTransno, 0}, {keyInodes, 1}, {keyCLNext, 1}, {keyCLUser, 1}, {keyDestroy, 1}, {keySeqCtl, fid.SeqNormal}} {
		b.Set(c.key, u64Val(c.v), nil)
	}
	// Sequences below SeqNormal (the root's, local files') belong to MDT0.
	b.Set(u64Key(pfxFLD, fid.SeqStart), FLDEntry{Start: fid.SeqStart, End: fid.SeqNormal, Index: 0, Type: TargetMDT}.marshal(), nil)
	b.Set(keyFormat, u64Val(formatVersion), nil)
	b.Set(keyClientsKnown, nil, nil) // a new MDT: no clients, known
	return ioError(b.Commit(pebble.Sync), "format %s", s.cfg.Dir)
}

var errStop = errors.New("stop")

// scan calls fn for every key with prefix pfx in order, until fn returns
// an error (errStop ends the scan without one).
func (s *Store) scan(pfx []byte, fn func(k, v []byte) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			if err == errStop {
				return nil
			}
			return err
		}
	}
	return it.Error()
}

// get returns a copy of key's value, or pebble.ErrNotFound.
func (s *Store) get(key []byte) ([]byte, error) {
	if !cachedKey(key) {
		return s.dbGet(key)
	}
	if v, found, hit := s.cache.lookup(key); hit {
		if !found {
			return nil, pebble.ErrNotFound
		}
		return v, nil
	}
	g := s.cache.gen.Load()
	v, err := s.dbGet(key)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		s.cache.fill(key, nil, false, g)
	case err == nil:
		s.cache.fill(key, append([]byte(nil), v...), true, g)
	}
	return v, err
}

// dbGet reads a record from Pebble, bypassing the cache.
func (s *Store) dbGet(key []byte) ([]byte, error) {
	v, c, err := s.db.Get(key)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return append([]byte(nil), v...), nil
}

func (s *Store) getU64(key []byte) (uint64, error) {
	v, err := s.get(key)
	if err != nil {
		return 0, err
	}
	return decodeU64(v)
}

// Sync makes every operation applied so far durable, then records and
// reports (Config.OnCommit) the highest transno among them as
// LastCommitted. Safe for concurrent use; concurrent calls are serialized.
func (s *Store) Sync() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.flushReplies() // (the records of the changes synced go with them)
	s.mu.RLock()
	tn := s.mu.transno // every change numbered ≤ tn has been applied
	s.mu.RUnlock()
	// A synced write makes every earlier write durable: Pebble's WAL is
	// written in order.
	if err := s.db.LogData([]byte("sync"), pebble.Sync); err != nil {
		return ioError(err, "sync")
	}
	if s.barrier.Load() {
		return nil
	}
	if tn > s.committed.Load() {
		s.committed.Store(tn)
	}
	if s.cfg.OnCommit != nil {
		s.cfg.OnCommit(s.committed.Load())
	}
	return nil
}

// ReplayBarrier syncs the store, saves a copy of it as it is now in dir
// (a Pebble checkpoint; dir must not exist), and from then on reports
// nothing more committed (Lustre's replay_barrier: lctl notransno and
// readonly). The store goes on working, but its clients keep every change
// after the barrier for replay; a store opened from the copy has lost
// them, as after a crash that lost the disk's cache (a process killed
// with SIGKILL loses nothing: Pebble's log is in the page cache). For
// tests of recovery.
func (s *Store) ReplayBarrier(dir string) error {
	if err := s.Sync(); err != nil {
		return err
	}
	s.barrier.Store(true)
	return ioError(s.db.Checkpoint(dir, pebble.WithFlushedWAL()), "replay barrier in %s", dir)
}

// AtReplayBarrier reports whether a ReplayBarrier was set: what is
// committed after it counts for nothing (a restore from the barrier's
// copy loses it), so whoever reports commits for the store, from Sync's
// return or otherwise, must report none.
func (s *Store) AtReplayBarrier() bool { return s.barrier.Load() }

// LastCommitted returns the highest transno known durable: covered by a
// Sync, or recovered from disk at Open. Safe for concurrent use.
func (s *Store) LastCommitted() uint64 { return s.committed.Load() }

// LastTransno returns the highest transno applied (durable or not). Safe
// for concurrent use.
func (s *Store) LastTransno() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.transno
}

func (s *Store) syncer() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if err := s.Sync(); err != nil {
				s.log.Error("mdd: background sync", "dir", s.cfg.Dir, "err", err)
			}
		}
	}
}

// Close stops the background sync, syncs, and closes the database. Calls
// after the first return nil; no other method may be called after Close.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	<-s.done
	err := s.Sync()
	s.replies.flushMu.Lock()
	s.replies.dbClosed = true // a reply flush timer that fires now does nothing
	s.replies.flushMu.Unlock()
	if cerr := s.db.Close(); err == nil {
		err = ioError(cerr, "close")
	}
	return err
}

// pebbleLogger sends Pebble's messages to the store's logger: chatter at
// debug level, errors at error level.
type pebbleLogger struct{ l *slog.Logger }

// Infof logs at debug level.
func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
}

// Errorf logs at error level.
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf logs and panics, as Pebble expects Fatalf not to return.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error("pebble: fatal: " + fmt.Sprintf(format, args...))
	panic(fmt.Sprintf(format, args...))
}
