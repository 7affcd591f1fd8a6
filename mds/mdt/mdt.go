package mdt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/jobstats"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/mds/mdd"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// LNet carries the service and the MDT's traffic to the OSTs.
	LNet *lnet.LNet
	// Portal is the service's request portal; 0 means
	// ptlrpc.MDSRequestPortal.
	Portal uint32
	// MinThreads and MaxThreads size the handler pool; 0 means 8 and 128.
	// Handlers of namespace changes wait for clients to give locks back,
	// and the cancels come in on the same service: keep MaxThreads well
	// above the clients' concurrency.
	MinThreads, MaxThreads int
	// Faults are the service's armed fault-injection points; nil means
	// none.
	Faults *ptlrpc.Faults
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Server serves the MDTs of one process on one connection-oriented PtlRPC
// service on the MDS request portal (Lustre's mds service), routing each
// request to the MDT of the export it names. Safe for concurrent use.
type Server struct {
	cfg ServerConfig
	log *slog.Logger
	ts  *ptlrpc.TargetSet
	svc *ptlrpc.Service
	// ast sends lock callbacks to clients; osp talks to OSTs.
	ast, osp *ptlrpc.Client

	mu   sync.Mutex // guards mdts
	mdts map[*ptlrpc.Target]*MDT
}

// handlerFlags are the flags of every opcode an MDT serves. Namespace
// changes and closes are Modifying (transnos, reply reconstruction on
// resend); so are lock enqueues, because an intent may create and open.
var handlerFlags = map[wire.Opcode]ptlrpc.HandlerFlags{
	wire.MDSGetattr: 0, wire.MDSGetattrName: 0, wire.MDSReint: ptlrpc.Modifying, wire.MDSClose: ptlrpc.Modifying,
	wire.MDSReadpage: 0, wire.MDSStatfs: 0, wire.MDSGetxattr: 0, wire.MDSGetRoot: 0, wire.MDSSync: 0,
	wire.MDSGetInfo: 0, wire.SEQQuery: 0, wire.FLDQuery: 0,
	wire.MDSHSMStateGet: 0, wire.MDSHSMStateSet: ptlrpc.Modifying, wire.MDSHSMProgress: ptlrpc.Modifying,
	wire.MDSSwapLayouts: ptlrpc.Modifying,
	wire.LLOGNextBlock:  0, wire.MDSChangelogClear: 0,
	wire.LDLMEnqueue: ldlm.HandlerFlags[wire.LDLMEnqueue] | ptlrpc.Modifying, wire.LDLMCancel: ldlm.HandlerFlags[wire.LDLMCancel],
	wire.LDLMConvert: ldlm.HandlerFlags[wire.LDLMConvert],
}

// NewServer starts the MDS service with no MDT; AddMDT adds them.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.LNet == nil {
		return nil, errors.New("mdt: no LNet")
	}
	if cfg.Portal == 0 {
		cfg.Portal = ptlrpc.MDSRequestPortal
	}
	if cfg.MinThreads <= 0 {
		cfg.MinThreads = 8
	}
	if cfg.MaxThreads <= 0 {
		cfg.MaxThreads = max(128, cfg.MinThreads)
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	s := &Server{cfg: cfg, log: lg, ts: ptlrpc.NewTargetSet(), mdts: make(map[*ptlrpc.Target]*MDT),
		ast: ptlrpc.NewClient(cfg.LNet, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.LDLMCBReplyPortal, Logger: lg}),
		osp: ptlrpc.NewClient(cfg.LNet, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.OSCReplyPortal, UUID: ospUUID(cfg.LNet), Logger: lg})}
	handlers := make(map[wire.Opcode]ptlrpc.HandlerSpec, len(handlerFlags))
	for op, flags := range handlerFlags {
		handlers[op] = ptlrpc.HandlerSpec{Flags: flags, Fn: func(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
			m := s.mdtOf(r.Export())
			if m == nil {
				return nil, -int32(syscall.ENODEV)
			}
			return m.handlers[op](ctx, r)
		}}
	}
	svc, err := ptlrpc.NewService(cfg.LNet, ptlrpc.ServiceConfig{Name: "mds", RequestPortal: cfg.Portal, Targets: s.ts,
		ConnectOp: wire.MDSConnect, DisconnectOp: wire.MDSDisconnect, MinThreads: cfg.MinThreads, MaxThreads: cfg.MaxThreads,
		MaxBodySize: maxRequestBody, Handlers: handlers, Faults: cfg.Faults, Logger: lg})
	if err != nil {
		return nil, err
	}
	s.svc = svc
	return s, nil
}

// maxRequestBody fits a setxattr of the largest value with its name and
// credential.
const maxRequestBody = mdd.MaxXattrValue + 16<<10

func (s *Server) mdtOf(e *ptlrpc.Export) *MDT {
	if e == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mdts[e.Target()]
}

// Threads returns the least and the most handler threads of the service.
func (s *Server) Threads() (minThreads, maxThreads int) { return s.cfg.MinThreads, s.cfg.MaxThreads }

// Service returns the server's PtlRPC service (stats, NRS).
func (s *Server) Service() *ptlrpc.Service { return s.svc }

// MDTs returns the MDTs served, by name.
func (s *Server) MDTs() []*MDT {
	s.mu.Lock()
	out := make([]*MDT, 0, len(s.mdts))
	for _, m := range s.mdts {
		out = append(out, m)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *MDT) int { return strings.Compare(a.cfg.Name, b.cfg.Name) })
	return out
}

// Close stops the service, then every MDT (their stores close).
func (s *Server) Close(ctx context.Context) error {
	err := s.svc.Close(ctx)
	s.mu.Lock()
	mdts := s.mdts
	s.mdts = map[*ptlrpc.Target]*MDT{}
	s.mu.Unlock()
	for _, m := range mdts {
		err = errors.Join(err, m.close(ctx))
	}
	return err
}

// Defaults of a Config.
const (
	// DefaultSyncInterval is how often the MDT commits its changes when
	// there are uncommitted ones (Lustre commits every 5 s; Nacre's store
	// is cheaper to sync).
	DefaultSyncInterval = time.Second
	// DefaultRecoveryWindow is how long a restarted MDT waits for its
	// clients to come back and replay.
	DefaultRecoveryWindow = 90 * time.Second
	// DefaultPrecreateMin and DefaultPrecreateMax bound the objects an
	// OST's pool aims to hold: it starts at the minimum and doubles each
	// time a create finds it empty (Lustre's OST_MIN_PRECREATE and the
	// growth of opd_pre_create_count).
	DefaultPrecreateMin = 32
	DefaultPrecreateMax = 1024
	// DefaultObjectSeqWidth is the number of object ids the MDT uses in
	// one OST sequence before it moves to a new one (Lustre's
	// LUSTRE_DATA_SEQ_MAX_WIDTH less one).
	DefaultObjectSeqWidth = 0xfffffffe
	// DefaultAllocTimeout is how long a create waits for an empty pool
	// before ENOSPC.
	DefaultAllocTimeout = 30 * time.Second
	// DefaultStatfsInterval is how often an OST's free space is refreshed.
	DefaultStatfsInterval = 5 * time.Second
	// DefaultOSTTimeout bounds one step of an OST's pool upkeep or one
	// batch of destroys.
	DefaultOSTTimeout = time.Minute
	// DefaultReaddirEntries is a page's size when the client asks for 0.
	DefaultReaddirEntries = 1024
)

// Config configures one MDT.
type Config struct {
	// Name is the target's label ("nacre-MDT0000"), UUID its identity.
	Name, UUID string
	// Store configures the namespace store (mdd); its Dir is required.
	// The MDT sets Index, SyncInterval (it commits itself) and OnCommit.
	Store mdd.Config
	// Index is the MDT's index (only 0 for now).
	Index uint32
	// OSTs are the OSTs objects go to; SetOSTs changes the list later.
	OSTs []OST
	// AwaitOSTs says the OST list comes later, from the MGS: until the
	// first SetOSTs, creates and layout intents wait for it (at most
	// AllocTimeout) instead of making files without objects or failing
	// with ENOSPC, as they would in the window after a restart.
	AwaitOSTs bool
	// Pools are the OST pools layouts may name; SetPools changes them.
	Pools map[string][]uint32
	// DefaultStripe is the file system's default striping, for files in
	// directories without a default layout; zero means stripe count 1,
	// 1 MiB stripes, any OST.
	DefaultStripe layout.RAID0
	// SyncInterval is how often uncommitted changes are committed; 0
	// means DefaultSyncInterval.
	SyncInterval time.Duration
	// PrecreateMin, PrecreateMax, ObjectSeqWidth, AllocTimeout,
	// StatfsInterval, OSTTimeout: 0 means the Default values.
	PrecreateMin, PrecreateMax, ObjectSeqWidth uint32
	AllocTimeout, StatfsInterval, OSTTimeout   time.Duration
	// CallbackTimeout is how long a client has to give a lock back, and
	// EvictTimeout how long a silent client keeps its export; 0 means the
	// node's ldlm_timeout and obd_timeout, followed as they change.
	CallbackTimeout, EvictTimeout time.Duration
	// RecoveryWindow is how long after a restart the MDT takes back the
	// clients of its previous life, which replay their locks and the
	// changes it had not committed (see ptlrpc.TargetConfig); 0 means
	// DefaultRecoveryWindow, negative none.
	RecoveryWindow time.Duration
	// Logger receives the MDT's logs; nil means the server's.
	Logger *slog.Logger
}

// Validate fills in defaults and checks c.
func (c *Config) Validate() error {
	if c.Name == "" {
		return errors.New("mdt: no target name")
	}
	if c.Store.Dir == "" {
		return fmt.Errorf("mdt %s: no store directory", c.Name)
	}
	if c.Index != 0 {
		return fmt.Errorf("mdt %s: index %d: only MDT0 is supported", c.Name, c.Index)
	}
	if c.DefaultStripe.StripeCount == 0 {
		c.DefaultStripe = layout.RAID0{StripeCount: layout.DefaultStripeCount, StripeSize: layout.DefaultStripeSize, StripeOffset: layout.AnyOffset}
	}
	if c.DefaultStripe.Objects != nil {
		return fmt.Errorf("mdt %s: the default striping names objects", c.Name)
	}
	if err := layout.Plain(c.DefaultStripe).Validate(); err != nil {
		return fmt.Errorf("mdt %s: default striping: %w", c.Name, err)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.SyncInterval, DefaultSyncInterval)
	if c.RecoveryWindow == 0 { // negative: none
		c.RecoveryWindow = DefaultRecoveryWindow
	}
	def(&c.AllocTimeout, DefaultAllocTimeout)
	def(&c.StatfsInterval, DefaultStatfsInterval)
	def(&c.OSTTimeout, DefaultOSTTimeout)
	if c.PrecreateMin == 0 {
		c.PrecreateMin = DefaultPrecreateMin
	}
	if c.PrecreateMax == 0 {
		c.PrecreateMax = max(DefaultPrecreateMax, c.PrecreateMin)
	}
	if c.ObjectSeqWidth == 0 {
		c.ObjectSeqWidth = DefaultObjectSeqWidth
	}
	if c.PrecreateMin < 2 || c.PrecreateMax < c.PrecreateMin || c.PrecreateMax > 20000 {
		return fmt.Errorf("mdt %s: precreate between %d and %d objects (2..20000)", c.Name, c.PrecreateMin, c.PrecreateMax)
	}
	return nil
}

// Stats are an MDT's counters.
type Stats struct {
	// Precreated counts objects precreated on OSTs; Destroyed objects
	// destroyed through the destroy log.
	Precreated, Destroyed uint64
	// Opens is the number of open handles.
	Opens int
	// PendingDestroys is how many destroy log records are waiting.
	PendingDestroys int
}

// MDT is one metadata target: its namespace store, its PtlRPC target and
// lock server, its OSTs' object pools, and its destroy log worker. Safe
// for concurrent use.
type MDT struct {
	cfg Config
	// defStripe is cfg.DefaultStripe as changed at run time.
	defStripe atomic.Pointer[layout.RAID0]
	log       *slog.Logger
	srv       *Server
	store     *mdd.Store
	tgt       *ptlrpc.Target
	lockd     *ldlm.Server
	handlers  map[wire.Opcode]ptlrpc.Handler
	// jobs counts metadata operations by the job id of the requests
	// (mdt.*.job_stats).
	jobs *jobstats.Stats
	// ops counts metadata operations by md_stats name (a fixed set).
	opsMu sync.Mutex
	ops   map[string]uint64

	ospMu sync.Mutex // guards osps, pools
	// ostsKnown is closed once the OST list is known (see AwaitOSTs).
	ostsKnown     chan struct{}
	ostsKnownOnce sync.Once
	osps          map[uint32]*osp
	pools         map[string][]uint32
	rr            atomic.Uint64 // round-robin start

	opensMu sync.Mutex // guards opens, nextHandle
	// opens are the open handles of each export (Lustre's mfd list).
	opens      map[*ptlrpc.Export]map[uint64]openFile
	nextHandle uint64

	commitMu sync.Mutex // one commit at a time

	// renameLock (a token in a channel of one) serializes the renames
	// that move a directory between parents: Lustre's global rename lock
	// (mdt_rename_lock). See doRename.
	renameLock chan struct{}

	precreated, destroyed atomic.Uint64

	destroyKick chan struct{}
	stop        chan struct{}
	wg          sync.WaitGroup
}

// openFile is one open handle.
type openFile struct {
	fid   fid.FID
	flags uint64
}

// AddMDT opens cfg's store and starts serving it as an MDT: its target
// joins the server's service, its OSTs' pools start (orphan cleanup
// first), and the destroy log left by an earlier run is drained in the
// background.
func (s *Server) AddMDT(cfg Config) (*MDT, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = s.log
	}
	m := &MDT{cfg: cfg, log: lg.With("mdt", cfg.Name), srv: s, osps: map[uint32]*osp{}, ostsKnown: make(chan struct{}),
		opens: map[*ptlrpc.Export]map[uint64]openFile{}, nextHandle: rand.Uint64() >> 1,
		destroyKick: make(chan struct{}, 1), renameLock: make(chan struct{}, 1), stop: make(chan struct{}), jobs: jobstats.New(0), ops: map[string]uint64{}}
	m.SetPools(cfg.Pools)
	def := cfg.DefaultStripe
	m.defStripe.Store(&def)
	sc := cfg.Store
	sc.Index, sc.SyncInterval = cfg.Index, 0
	sc.OnCommit = func(n uint64) {
		if t := m.tgt; t != nil {
			t.Committed(n)
		}
	}
	if sc.Now == nil || sc.Logger == nil || sc.SeqWidth == 0 || sc.SuperWidth == 0 {
		d := mdd.DefaultConfig(sc.Dir)
		if sc.Now == nil {
			sc.Now = d.Now
		}
		if sc.Logger == nil {
			sc.Logger = lg
		}
		if sc.SeqWidth == 0 {
			sc.SeqWidth = d.SeqWidth
		}
		if sc.SuperWidth == 0 {
			sc.SuperWidth = d.SuperWidth
		}
		if sc.MaxInodes == 0 {
			sc.MaxInodes = d.MaxInodes
		}
		if sc.CacheSize == 0 {
			sc.CacheSize = d.CacheSize
		}
	}
	var err error
	if m.store, err = mdd.Open(sc); err != nil {
		return nil, fmt.Errorf("mdt %s: %w", cfg.Name, err)
	}
	m.lockd, err = ldlm.NewServer(ldlm.ServerConfig{Namespace: ldlm.Config{Name: "mdt-" + cfg.Name + "_UUID"}, Client: s.ast,
		CallbackTimeout: cfg.CallbackTimeout, Intent: m.intent, Logger: lg,
		Evict: func(exp *ptlrpc.Export) {
			if err := m.tgt.Evict(exp.ClientUUID()); err != nil {
				m.log.Info("mdt: evict", "client", exp.ClientUUID(), "err", err)
			}
		}})
	if err != nil {
		m.store.Close()
		return nil, err
	}
	// Until destroyOrphans below, the store's open counts may miss opens
	// that clients of the previous life still hold and will replay: it
	// keeps unlinked files as orphans and refuses swaps and releases.
	m.store.BeginRecovery()
	// The clients connected when the MDT stopped: recovery ends once they
	// are back and have replayed (or at the window's end).
	clients, err := m.store.Clients()
	if err != nil {
		m.lockd.Close()
		m.store.Close()
		return nil, fmt.Errorf("mdt %s: %w", cfg.Name, err)
	}
	m.tgt, err = s.ts.NewTarget(ptlrpc.TargetConfig{Name: cfg.Name, UUID: cfg.UUID, EvictTimeout: cfg.EvictTimeout, Logger: lg,
		LastTransno: m.store.LastTransno(), RecoveryWindow: max(cfg.RecoveryWindow, 0), Clients: clients,
		OnNewClient: m.store.AddClient, Replies: m.store,
		OnClientGone: func(uuid string) {
			if err := m.store.DropClient(uuid); err != nil {
				m.log.Warn("mdt: forget client", "client", uuid, "err", err)
			}
		},
		OnGone: func(e *ptlrpc.Export, evicted bool) {
			m.lockd.ExportGone(e)
			m.dropOpens(e)
		}})
	if err != nil {
		m.lockd.Close()
		m.store.Close()
		return nil, err
	}
	m.handlers = m.handlerTable()
	// Files unlinked while open before a restart are orphans now; the
	// clients that had them open reopen them in the recovery window
	// (replayed opens), and the rest go when it ends: when every client of
	// the previous life is back, or the window runs out.
	if m.tgt.RecoveryEnd().IsZero() {
		m.destroyOrphans()
	} else {
		m.wg.Go(func() {
			select {
			case <-m.tgt.RecoveryDone(): // the target ends it itself when the window runs out
			case <-m.stop:
				return
			}
			m.destroyOrphans()
		})
	}
	if !cfg.AwaitOSTs {
		if err := m.SetOSTs(cfg.OSTs); err != nil {
			m.log.Warn("mdt: OST list", "err", err)
		}
	}
	m.wg.Go(m.committer)
	m.wg.Go(m.destroyer)
	s.mu.Lock()
	s.mdts[m.tgt] = m
	s.mu.Unlock()
	return m, nil
}

// Name returns the MDT's label.
func (m *MDT) Name() string { return m.cfg.Name }

// ospUUID names the server's connections to the OSTs after its NID, the
// same across restarts (as Lustre's MDT-mdtlov_UUID): a restarted OST
// that recorded them knows the MDS from its previous life, has it back
// without waiting out its recovery window, and does not wait for an MDS
// process that is gone.
func ospUUID(ln *lnet.LNet) string {
	nids := ln.NIDs()
	return nids[len(nids)-1].String() + "-osp_UUID"
}

// Target returns the MDT's PtlRPC target.
func (m *MDT) Target() *ptlrpc.Target { return m.tgt }

// Store returns the MDT's namespace store: for checks, changelog users
// (lctl changelog_register comes later; until then this is the API) and
// administration. Changes made through it bypass the MDT's locks.
func (m *MDT) Store() *mdd.Store { return m.store }

// LockServer returns the MDT's lock server.
func (m *MDT) LockServer() *ldlm.Server { return m.lockd }

// Stats returns the MDT's counters.
func (m *MDT) Stats() Stats {
	st := Stats{Precreated: m.precreated.Load(), Destroyed: m.destroyed.Load()}
	m.opensMu.Lock()
	for _, h := range m.opens {
		st.Opens += len(h)
	}
	m.opensMu.Unlock()
	if recs, err := m.store.PendingDestroys(0, 1<<20); err == nil {
		st.PendingDestroys = len(recs)
	}
	return st
}

// JobStats returns the MDT's per-job statistics (mdt.*.job_stats):
// metadata operations by job id, named as Lustre's md_stats names them.
func (m *MDT) JobStats() *jobstats.Stats { return m.jobs }

// Statfs returns the MDT's space and inode counts, as MDS_STATFS does.
func (m *MDT) Statfs() (mdd.Statfs, error) { return m.store.Statfs() }

// Sync commits every change made so far (MDS_SYNC does it for clients).
func (m *MDT) Sync() error { return m.commit() }

// commit makes every change numbered so far durable and tells the target:
// the transnos given out before the store syncs are all either applied by
// the store (under its lock, before the sync reads it) or changes that
// need no storage (an open, a lock), so all of them are committed after.
func (m *MDT) commit() error {
	m.commitMu.Lock()
	defer m.commitMu.Unlock()
	lt := m.tgt.LastTransno()
	if err := m.store.Sync(); err != nil {
		return err
	}
	if m.store.AtReplayBarrier() {
		// Not committed for its clients: they keep every change after
		// the barrier to replay it to the store put back as it was then.
		return nil
	}
	m.tgt.Committed(lt)
	return nil
}

// commitBatch is how many changes may wait for a commit before the
// committer commits without waiting for SyncInterval: well below what a
// client keeps for replay (ptlrpc.DefaultMaxUncommitted), so that clients
// learn of commits from their replies and never stall on a full replay
// list.
const commitBatch = ptlrpc.DefaultMaxUncommitted / 4

// commitPoll is how often the committer looks at the uncommitted count.
const commitPoll = 20 * time.Millisecond

// committer commits every SyncInterval while something is uncommitted,
// and at once when commitBatch changes wait.
func (m *MDT) committer() {
	t := time.NewTicker(min(commitPoll, m.cfg.SyncInterval))
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		pending := m.tgt.LastTransno() - m.tgt.LastCommitted()
		if pending == 0 || (pending < commitBatch && time.Since(last) < m.cfg.SyncInterval) {
			continue
		}
		last = time.Now()
		if err := m.commit(); err != nil {
			m.log.Error("mdt: commit", "err", err)
		}
	}
}

// close stops the MDT: its workers and OST imports, its target, its lock
// server, and its store (which syncs).
func (m *MDT) close(ctx context.Context) error {
	close(m.stop)
	m.wg.Wait()
	m.ospMu.Lock()
	osps := m.osps
	m.osps = map[uint32]*osp{}
	m.ospMu.Unlock()
	var wg sync.WaitGroup
	for _, p := range osps {
		wg.Go(func() { p.close(ctx) })
	}
	wg.Wait()
	err := m.tgt.Close(ctx)
	m.lockd.Close()
	return errors.Join(err, m.store.Close())
}
