// Package ofd is the object service of one OST (Lustre's OFD): it serves
// the OST requests — create (precreate), destroy, getattr, setattr, punch,
// bulk read and write, sync, statfs, ladvise — over an OSD device, numbers
// every change with a transno in order with the device's transactions,
// keeps clients' space grants, and runs the target's lock server (extent
// locks with the object's size and times in the lock value block).
//
// It owns the target's bookkeeping (LAST_ID per sequence, kept in the
// device through journaled records) and the grant accounting; it does not
// own the transport (dataplane/ptlrpc serves it, oss assembles the
// service), the storage (oss/osd) or the locks' rules (ldlm).
package ofd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/nacrefs/nacre/internal/jobstats"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/oss/osd"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// Limits and defaults.
const (
	// MaxPrecreate bounds the objects one OST_CREATE makes (Lustre's
	// OST_MAX_PRECREATE).
	MaxPrecreate = 20000
	// MaxNiobufs bounds the niobufs of one BRW.
	MaxNiobufs = 256
	// DefaultInitialGrant is the grant a client gets at connect: enough for
	// two full RPCs in flight of 4 MiB each... times the in-flight default,
	// before the target's space caps it.
	DefaultInitialGrant = 64 << 20
	// grantUnit rounds grants.
	grantUnit = 4096
	// statfsAge is how long a statfs is reused for grant decisions.
	statfsAge = 100 * time.Millisecond
	// commitPoll is how often the device's last committed transno is
	// passed to the target.
	commitPoll = 10 * time.Millisecond
)

// Config configures an OFD.
type Config struct {
	// Device is the OST's store; the OFD does not close it.
	Device osd.Device
	// Targets is the set the OST's target joins; Name is its label and
	// UUID its identity.
	Targets *ptlrpc.TargetSet
	Name    string
	UUID    string
	// Client sends lock callbacks to clients.
	Client *ptlrpc.Client
	// CallbackTimeout and EvictTimeout: 0 means the node's ldlm_timeout
	// and obd_timeout, followed as they change.
	CallbackTimeout, EvictTimeout time.Duration
	// RecoveryWindow is how long after a restart the OST takes back the
	// clients of its previous life (see ptlrpc.TargetConfig); 0 means
	// DefaultRecoveryWindow, negative none.
	RecoveryWindow time.Duration
	// InitialGrant is a new client's grant before the space caps it; 0
	// means DefaultInitialGrant.
	InitialGrant uint64
	// Logger receives the OFD's logs; nil means slog.Default().
	Logger *slog.Logger
}

// JobStats returns the OST's per-job statistics (obdfilter.*.job_stats).
func (o *OFD) JobStats() *jobstats.Stats { return o.jobs }

// DefaultRecoveryWindow is how long a restarted OST waits for its clients
// to come back and replay (Lustre's recovery_time_soft is 300 s; clients
// here reconnect within a few ping intervals).
const DefaultRecoveryWindow = 90 * time.Second

// Stats are an OFD's counters.
type Stats struct {
	// Granted is the space clients hold as grant; Exports how many hold
	// some.
	Granted uint64
	Exports int
	// NoSpace counts writes refused with ENOSPC.
	NoSpace uint64
	// GrantShrunk counts the bytes of grant clients gave back
	// (OST_SET_INFO KEY_GRANT_SHRINK).
	GrantShrunk uint64
	// Precreated counts objects made by OST_CREATE.
	Precreated uint64
	// Ops counts the requests the OST served, by opcode (errors
	// included); ReadBytes and WriteBytes the bulk data of the reads and
	// writes that succeeded, each with the least and greatest request.
	Ops                   map[wire.Opcode]uint64
	ReadBytes, WriteBytes SizeStats
	// Since is when the OFD started counting.
	Since time.Time
}

// SizeStats are the count, least, greatest and total size of requests.
type SizeStats struct {
	Count, Min, Max, Sum uint64
}

func (s *SizeStats) add(n uint64) {
	if s.Count == 0 || n < s.Min {
		s.Min = n
	}
	s.Max = max(s.Max, n)
	s.Count++
	s.Sum += n
}

// OFD serves one OST. Safe for concurrent use.
type OFD struct {
	cfg   Config
	jobs  *jobstats.Stats // job_stats: bytes read and written by job id
	dev   osd.Device
	tgt   *ptlrpc.Target
	lockd *ldlm.Server
	log   *slog.Logger
	stop  chan struct{}
	done  chan struct{}
	// lvbMu serializes updateLVB per object (striped by FID), as Lustre's
	// lr_lvb_mutex: two changes' reads of the attributes and settings of
	// the LVB must not interleave, or an older size replaces a newer one
	// (a file that looks shorter than what the OST acknowledged).
	lvbMu [64]sync.Mutex
	// destroyWaits holds a token for each destroy waiting for clients to
	// give their locks back (maxDestroyWaits).
	destroyWaits chan struct{}

	// seqMu serializes precreate per target; lastID caches LAST_ID.
	seqMu  sync.Mutex
	lastID map[uint64]uint32

	gmu struct {
		sync.Mutex
		byExp map[*ptlrpc.Export]uint64
		total uint64
		// shrinkSeq is the last grant shrink each export gave back
		// (SetInfoRequest.shrink_seq); shrunk counts the bytes.
		shrinkSeq map[*ptlrpc.Export]uint64
		shrunk    uint64
		sfs       osd.Statfs
		sfsAt     time.Time
		noSpace   uint64
		precreate uint64
		// ops, reads and writes are Stats.Ops, ReadBytes and WriteBytes.
		ops           map[wire.Opcode]uint64
		reads, writes SizeStats
		// inFlight counts the bytes of writes admitted by consumeGrant
		// and not yet spent: space neither granted nor shown used.
		inFlight uint64
	}
	since time.Time
	// barrier says a ReplayBarrier was set: no commit is reported since.
	barrier atomic.Bool

	// syncJournal and degraded are obdfilter.*.sync_journal and degraded.
	syncJournal, degraded atomic.Bool
}

// SyncJournal reports whether every modifying request is committed before
// its reply (obdfilter.*.sync_journal).
func (o *OFD) SyncJournal() bool { return o.syncJournal.Load() }

// SetSyncJournal sets obdfilter.*.sync_journal: with it, a write's reply
// waits until the write is durable, and its last_committed says so, so
// that clients drop their copies at once (fewer pages held for replay,
// more disk syncs).
func (o *OFD) SetSyncJournal(on bool) { o.syncJournal.Store(on) }

// Degraded reports obdfilter.*.degraded.
func (o *OFD) Degraded() bool { return o.degraded.Load() }

// SetDegraded sets obdfilter.*.degraded: the OST says so in its statfs
// replies, and the MDS then gives it new objects only when too few other
// OSTs can take them (a RAID rebuilding under it, say). Files already on it
// are served as before.
func (o *OFD) SetDegraded(on bool) { o.degraded.Store(on) }

// New starts the OFD of one OST: its target in cfg.Targets, its lock
// server, and the goroutine that reports commits. Close stops them.
func New(cfg Config) (*OFD, error) {
	if cfg.Device == nil || cfg.Targets == nil || cfg.Client == nil {
		return nil, errors.New("ofd: Device, Targets and Client are required")
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Device.Label()
	}
	if cfg.RecoveryWindow == 0 {
		cfg.RecoveryWindow = DefaultRecoveryWindow
	}
	if cfg.InitialGrant == 0 {
		cfg.InitialGrant = DefaultInitialGrant
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	o := &OFD{cfg: cfg, jobs: jobstats.New(0), dev: cfg.Device, log: lg.With("ost", cfg.Name), lastID: make(map[uint64]uint32),
		stop: make(chan struct{}), done: make(chan struct{}), destroyWaits: make(chan struct{}, maxDestroyWaits)}
	o.gmu.byExp = make(map[*ptlrpc.Export]uint64)
	o.gmu.shrinkSeq = make(map[*ptlrpc.Export]uint64)
	o.gmu.ops = make(map[wire.Opcode]uint64)
	o.since = time.Now()
	var err error
	o.lockd, err = ldlm.NewServer(ldlm.ServerConfig{
		Namespace: ldlm.Config{Name: cfg.Name}, Client: cfg.Client, CallbackTimeout: cfg.CallbackTimeout, Logger: lg,
		LVBInit: o.lvbInit,
		Evict: func(exp *ptlrpc.Export) {
			if err := o.tgt.Evict(exp.ClientUUID()); err != nil {
				o.log.Info("ofd: evict", "client", exp.ClientUUID(), "err", err)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recs, clients, err := loadClients(ctx, cfg.Device)
	switch {
	case errors.Is(err, osd.ErrCorrupt):
		// Recovery waits its whole window, for whoever comes back.
		o.log.Error("ofd: client records damaged; starting them afresh", "err", err)
		if err = recs.reset(ctx); err != nil {
			// Not a reason to keep the OST down: it runs without them.
			o.log.Error("ofd: cannot reset the client records; recording none", "err", err)
			recs.off, err = true, nil
		}
	case err == nil && clients != nil:
		o.log.Info("ofd: clients of the previous life", "clients", len(clients))
	}
	if err != nil {
		o.lockd.Close()
		return nil, fmt.Errorf("ofd %s: %w", cfg.Name, err)
	}
	// Transnos go on after the last one the device made durable, so a
	// restarted OST never reuses a transno clients saw committed.
	o.tgt, err = cfg.Targets.NewTarget(ptlrpc.TargetConfig{Name: cfg.Name, UUID: cfg.UUID, EvictTimeout: cfg.EvictTimeout, Logger: lg,
		Features:    ldlm.ConnectGlimpseLock,
		LastTransno: cfg.Device.LastCommitted(), RecoveryWindow: max(cfg.RecoveryWindow, 0),
		Clients: clients,
		OnNewClient: func(uuid string) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			return recs.add(ctx, uuid)
		},
		OnClientGone: func(uuid string) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := recs.remove(ctx, uuid); err != nil {
				o.log.Warn("ofd: cannot forget a client; the next restart's recovery may wait for it", "client", uuid, "err", err)
			}
		},
		OnConnect: o.connectGrant,
		OnGone: func(e *ptlrpc.Export, _ bool) {
			o.lockd.ExportGone(e)
			o.dropGrant(e)
		}})
	if err != nil {
		o.lockd.Close()
		return nil, err
	}
	o.reportCommitted()
	go o.committer()
	return o, nil
}

// reportCommitted passes the device's durable transno to the target, so
// replies carry it as last_committed; nothing after a replay barrier.
func (o *OFD) reportCommitted() {
	// Read before the barrier is checked: read after, it could count
	// transactions made after the barrier's copy, which a restart from
	// the copy loses, and clients would drop them.
	lc := o.dev.LastCommitted()
	if !o.barrier.Load() {
		o.tgt.Committed(lc)
	}
}

// snapshotter is a device that can copy itself as it is durable now
// (osdfile.Device.Snapshot).
type snapshotter interface {
	Snapshot(ctx context.Context, dir string) error
}

// ReplayBarrier saves the device as it is durable now into dir (which
// must not exist) and from then on reports nothing more committed
// (Lustre's replay_barrier): the OST's clients keep every later change to
// replay, and an OST started from the copy has lost them, as after a
// crash that lost the disk's cache. For tests of recovery.
func (o *OFD) ReplayBarrier(ctx context.Context, dir string) error {
	s, ok := o.dev.(snapshotter)
	if !ok {
		return fmt.Errorf("ofd %s: replay barrier: the device cannot copy itself: %w", o.cfg.Name, osd.ErrInvalid)
	}
	was := o.barrier.Swap(true) // before: what the copy has may stay uncommitted, not the reverse
	if err := s.Snapshot(ctx, dir); err != nil {
		if !was {
			// No copy, no restart from it: commits are reported again,
			// or the clients' pages and Syncs would wait forever.
			o.barrier.Store(false)
			o.reportCommitted()
		}
		return fmt.Errorf("ofd %s: replay barrier: %w", o.cfg.Name, err)
	}
	return nil
}

// Target returns the OST's PtlRPC target.
func (o *OFD) Target() *ptlrpc.Target { return o.tgt }

// Device returns the OST's object storage device.
func (o *OFD) Device() osd.Device { return o.dev }

// LockServer returns the OST's lock server.
func (o *OFD) LockServer() *ldlm.Server { return o.lockd }

// Stats returns the OFD's counters.
func (o *OFD) Stats() Stats {
	o.gmu.Lock()
	defer o.gmu.Unlock()
	st := Stats{Granted: o.gmu.total, Exports: len(o.gmu.byExp), NoSpace: o.gmu.noSpace, GrantShrunk: o.gmu.shrunk,
		Precreated: o.gmu.precreate, Ops: make(map[wire.Opcode]uint64, len(o.gmu.ops)), ReadBytes: o.gmu.reads, WriteBytes: o.gmu.writes, Since: o.since}
	for op, n := range o.gmu.ops {
		st.Ops[op] = n
	}
	return st
}

// Statfs returns the OST's space and inode counts from its device, as
// OST_STATFS does.
func (o *OFD) Statfs(ctx context.Context) (osd.Statfs, error) { return o.dev.Statfs(ctx) }

// count wraps a handler to count its requests in Stats.Ops.
func (o *OFD) count(op wire.Opcode, h ptlrpc.Handler) ptlrpc.Handler {
	return func(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
		o.gmu.Lock()
		o.gmu.ops[op]++
		o.gmu.Unlock()
		return h(ctx, r)
	}
}

// countBulk adds a read or write of n bytes that succeeded to the stats.
func (o *OFD) countBulk(write bool, n uint64) {
	o.gmu.Lock()
	defer o.gmu.Unlock()
	if write {
		o.gmu.writes.add(n)
	} else {
		o.gmu.reads.add(n)
	}
}

// committer passes the device's durable transno to the target, so replies
// carry it as last_committed.
func (o *OFD) committer() {
	defer close(o.done)
	t := time.NewTicker(commitPoll)
	defer t.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-t.C:
			o.reportCommitted()
		}
	}
}

// Close stops the lock server and the target (its exports go) and the
// committer. The device stays open for its owner to close.
func (o *OFD) Close(ctx context.Context) error {
	close(o.stop)
	<-o.done
	err := o.tgt.Close(ctx)
	o.lockd.Close()
	return err
}

// Flags are the handler flags of every opcode an OFD serves, for the
// service that routes requests to OFDs (oss).
var Flags = map[wire.Opcode]ptlrpc.HandlerFlags{
	wire.OSTCreate: ptlrpc.Modifying, wire.OSTDestroy: ptlrpc.Modifying, wire.OSTGetattr: 0,
	wire.OSTSetattr: ptlrpc.Modifying, wire.OSTPunch: ptlrpc.Modifying, wire.OSTWrite: ptlrpc.Modifying | ptlrpc.HasBulk,
	wire.OSTRead: ptlrpc.HasBulk, wire.OSTSync: 0, wire.OSTStatfs: 0, wire.OSTLadvise: 0, wire.OSTFallocate: ptlrpc.Modifying,
	wire.OSTSetInfo:  0, // a resent shrink is recognised by its shrink_seq
	wire.LDLMEnqueue: ldlm.HandlerFlags[wire.LDLMEnqueue], wire.LDLMCancel: ldlm.HandlerFlags[wire.LDLMCancel],
	wire.LDLMConvert: ldlm.HandlerFlags[wire.LDLMConvert],
}

// Handlers returns the OST's request handlers (lock requests included),
// with the flags in Flags, for a connection-oriented service that routes
// each request to the OFD of its export's target.
func (o *OFD) Handlers() map[wire.Opcode]ptlrpc.Handler {
	h := map[wire.Opcode]ptlrpc.Handler{
		wire.OSTCreate: o.create, wire.OSTDestroy: o.destroy, wire.OSTGetattr: o.getattr, wire.OSTSetattr: o.setattr,
		wire.OSTPunch: o.punch, wire.OSTWrite: o.write, wire.OSTRead: o.read, wire.OSTSync: o.sync,
		wire.OSTStatfs: o.statfs, wire.OSTLadvise: o.ladvise, wire.OSTFallocate: o.fallocate, wire.OSTSetInfo: o.setInfo,
	}
	for op, spec := range o.lockd.Handlers() {
		h[op] = spec.Fn
	}
	for op, fn := range h {
		h[op] = o.count(op, fn)
	}
	return h
}

// Errors to errnos.

func errno(err error) int32 {
	if err == nil {
		return 0
	}
	if errors.Is(err, errBadRequest) {
		return -int32(syscall.EINVAL)
	}
	return -int32(osd.Errno(err))
}

// errBadRequest marks requests that make no sense.
var errBadRequest = errors.New("ofd: bad request")

func (o *OFD) refuse(r *ptlrpc.Request, format string, args ...any) ([]byte, int32) {
	err := fmt.Errorf(format, args...)
	o.log.Info("ofd: refusing request", "op", r.Header.Opcode, "from", r.Peer, "err", err)
	if st := errno(err); st != 0 && !errors.Is(err, errBadRequest) {
		return nil, st
	}
	return nil, -int32(syscall.EINVAL)
}

func marshal(m proto.Message) ([]byte, int32) {
	b, err := ptlrpc.Marshal(m)
	if err != nil {
		return nil, -int32(syscall.EIO)
	}
	return b, 0
}

func fidFromWire(w *ostv1.FID) (fid.FID, error) {
	if w == nil {
		return fid.FID{}, fmt.Errorf("%w: no fid", errBadRequest)
	}
	f := fid.FID{Seq: w.Seq, Oid: w.Oid, Ver: w.Ver}
	if f.IsZero() || f.Oid == 0 {
		return f, fmt.Errorf("%w: fid %v", errBadRequest, f)
	}
	return f, nil
}

// FIDToWire converts a FID for an OST request.
func FIDToWire(f fid.FID) *ostv1.FID { return &ostv1.FID{Seq: f.Seq, Oid: f.Oid, Ver: f.Ver} }

func nsTime(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNS(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// AttrToWire converts attributes for a reply.
func AttrToWire(a osd.Attr) *ostv1.Attr {
	return &ostv1.Attr{Size: a.Size, Blocks: a.Blocks, Mtime: nsTime(a.Mtime), Atime: nsTime(a.Atime), Ctime: nsTime(a.Ctime),
		Mode: a.Mode, Uid: a.UID, Gid: a.GID, Parent: FIDToWire(a.ParentFID), StripeIndex: a.StripeIndex,
		LayoutVersion: a.LayoutVersion, Valid: uint32(a.Valid)}
}

// attrFromWire takes what a client may set: everything but size (punch
// truncates) and blocks.
func attrFromWire(w *ostv1.Attr) osd.Attr {
	if w == nil {
		return osd.Attr{}
	}
	a := osd.Attr{Size: w.Size, Mtime: fromNS(w.Mtime), Atime: fromNS(w.Atime), Ctime: fromNS(w.Ctime), Mode: w.Mode,
		UID: w.Uid, GID: w.Gid, StripeIndex: w.StripeIndex, LayoutVersion: w.LayoutVersion, Valid: osd.AttrMask(w.Valid) &^ (osd.AttrBlocks | osd.AttrSize)}
	if w.Parent != nil {
		a.ParentFID = fid.FID{Seq: w.Parent.Seq, Oid: w.Parent.Oid, Ver: w.Parent.Ver}
	}
	return a
}

// resOf names an object's extent lock resource.
func resOf(f fid.FID) ldlm.Resource {
	return ldlm.Resource{ID: ldlm.ResIDOfFID(f.Seq, f.Oid, f.Ver), Type: ldlm.TypeExtent}
}

// lvbInit gives a new lock resource the object's attributes.
func (o *OFD) lvbInit(res ldlm.Resource) (ldlm.LVB, error) {
	f := fid.FID{Seq: res.ID[0], Oid: uint32(res.ID[1]), Ver: uint32(res.ID[1] >> 32)}
	a, err := o.dev.GetAttr(context.Background(), f)
	if errors.Is(err, osd.ErrNotExist) {
		return ldlm.LVB{}, fmt.Errorf("ofd: object %v: %w", f, ldlm.ErrNoObject)
	}
	if err != nil {
		return ldlm.LVB{}, err
	}
	return lvbOf(a), nil
}

func lvbOf(a osd.Attr) ldlm.LVB {
	return ldlm.LVB{Size: a.Size, Blocks: a.Blocks, MTime: nsTime(a.Mtime), ATime: nsTime(a.Atime), CTime: nsTime(a.Ctime)}
}

// updateLVB refreshes the LVB of f's lock resource after a change, if the
// resource has locks.
func (o *OFD) updateLVB(ctx context.Context, f fid.FID) (osd.Attr, error) {
	mu := &o.lvbMu[(f.Seq*31+uint64(f.Oid))%uint64(len(o.lvbMu))]
	mu.Lock()
	defer mu.Unlock()
	a, err := o.dev.GetAttr(ctx, f)
	if err != nil {
		return a, err
	}
	if err := o.lockd.SetLVB(resOf(f), lvbOf(a)); err != nil && !errors.Is(err, ldlm.ErrUnknownResource) {
		o.log.Debug("ofd: set lvb", "fid", f, "err", err)
	}
	return a, nil
}

// commit numbers tx with the request's transno (in order with every other
// change of the target) and commits it.
func (o *OFD) commit(ctx context.Context, r *ptlrpc.Request, tx osd.Tx) error {
	r.AssignTransno(tx.SetTransno)
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if o.syncJournal.Load() {
		if err := o.dev.Sync(ctx); err != nil {
			return err
		}
		o.reportCommitted()
	}
	return nil
}

// lastIDFID is the bookkeeping object holding a sequence's LAST_ID.
func lastIDFID(seq uint64) fid.FID { return fid.FID{Seq: seq} }

// create serves OST_CREATE: precreate count objects in a sequence.
func (o *OFD) create(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	var cr ostv1.CreateRequest
	if err := ptlrpc.Unmarshal(r.Body, &cr); err != nil {
		return o.refuse(r, "%w: create body: %v", errBadRequest, err)
	}
	if cr.Seq == clientsFID.Seq {
		// Its object 0 is the client records, not a LAST_ID.
		return o.refuse(r, "%w: objects in sequence %#x (the OST's own)", errBadRequest, cr.Seq)
	}
	if cr.DeleteOrphans {
		return o.deleteOrphans(ctx, r, &cr)
	}
	if cr.Seq == 0 || cr.Count == 0 || cr.Count > MaxPrecreate {
		return o.refuse(r, "%w: precreate of %d objects in sequence %#x (1 to %d)", errBadRequest, cr.Count, cr.Seq, MaxPrecreate)
	}
	o.seqMu.Lock()
	defer o.seqMu.Unlock()
	last, known := o.lastID[cr.Seq]
	if !known {
		var err error
		if last, err = o.readLastID(ctx, cr.Seq); err != nil {
			return o.refuse(r, "read LAST_ID of %#x: %w", cr.Seq, err)
		}
	}
	if uint64(last)+uint64(cr.Count) > math.MaxUint32 {
		return nil, -int32(syscall.EOVERFLOW)
	}
	tx, err := o.dev.Begin(ctx)
	if err != nil {
		return nil, errno(err)
	}
	defer tx.Abort()
	lf := lastIDFID(cr.Seq)
	if last == 0 {
		if _, err := o.dev.GetAttr(ctx, lf); errors.Is(err, osd.ErrNotExist) {
			if err := tx.Create(lf, osd.Attr{}); err != nil {
				return nil, errno(err)
			}
		}
	}
	for i := uint32(1); i <= cr.Count; i++ {
		if err := tx.Create(fid.FID{Seq: cr.Seq, Oid: last + i}, osd.Attr{}); err != nil {
			return nil, errno(err)
		}
	}
	rec := binary.LittleEndian.AppendUint32(nil, last+cr.Count)
	if err := tx.WriteRecord(lf, rec, 0); err != nil {
		return nil, errno(err)
	}
	if err := o.commit(ctx, r, tx); err != nil {
		return o.refuse(r, "precreate %d in %#x: %w", cr.Count, cr.Seq, err)
	}
	o.lastID[cr.Seq] = last + cr.Count
	o.gmu.Lock()
	o.gmu.precreate += uint64(cr.Count)
	o.gmu.Unlock()
	return marshal(&ostv1.CreateReply{Seq: cr.Seq, First: last + 1, Count: cr.Count})
}

// deleteOrphans serves OST_CREATE with DeleteOrphans: the MDS's orphan
// cleanup (Lustre's ofd_orphans_destroy). Objects of the sequence after the
// last one the MDS used were precreated and never given to a file: they
// are destroyed. Objects up to it that the OST lost (a crash before their
// precreate was committed) are created again, at most MaxPrecreate. LAST_ID
// becomes last_used either way, so precreate continues right after it.
func (o *OFD) deleteOrphans(ctx context.Context, r *ptlrpc.Request, cr *ostv1.CreateRequest) ([]byte, int32) {
	if cr.Seq == 0 || cr.Count != 0 {
		return o.refuse(r, "%w: orphan cleanup of sequence %#x with count %d", errBadRequest, cr.Seq, cr.Count)
	}
	o.seqMu.Lock()
	defer o.seqMu.Unlock()
	last, known := o.lastID[cr.Seq]
	if !known {
		var err error
		if last, err = o.readLastID(ctx, cr.Seq); err != nil {
			return o.refuse(r, "read LAST_ID of %#x: %w", cr.Seq, err)
		}
	}
	want := cr.LastUsed
	if want > last && want-last > MaxPrecreate {
		return o.refuse(r, "%w: orphan cleanup of %#x: %d objects up to %d missing (LAST_ID %d)", errBadRequest, cr.Seq, want-last, want, last)
	}
	tx, err := o.dev.Begin(ctx)
	if err != nil {
		return nil, errno(err)
	}
	defer tx.Abort()
	if r.Stale() {
		// It waited (behind a slow request, for the device) while its MDT
		// reconnected or restarted: the cleanup of the new connection
		// may have run, and this one's last_used, older, would destroy
		// objects handed out since.
		o.log.Warn("ofd: orphan cleanup from a connection since replaced: refused", "seq", fmt.Sprintf("%#x", cr.Seq),
			"last_used", cr.LastUsed, "from", r.Peer)
		return nil, -int32(syscall.ESTALE)
	}
	lf := lastIDFID(cr.Seq)
	if _, err := o.dev.GetAttr(ctx, lf); errors.Is(err, osd.ErrNotExist) {
		if err := tx.Create(lf, osd.Attr{}); err != nil {
			return nil, errno(err)
		}
	} else if err != nil {
		return nil, errno(err)
	}
	destroyed, created := 0, 0
	for oid := uint64(want) + 1; oid <= uint64(last); oid++ {
		f := fid.FID{Seq: cr.Seq, Oid: uint32(oid)}
		if _, err := o.dev.GetAttr(ctx, f); errors.Is(err, osd.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, errno(err)
		}
		if err := tx.Destroy(f); err != nil {
			return nil, errno(err)
		}
		destroyed++
	}
	for oid := uint64(last) + 1; oid <= uint64(want); oid++ {
		if err := tx.Create(fid.FID{Seq: cr.Seq, Oid: uint32(oid)}, osd.Attr{}); err != nil {
			return nil, errno(err)
		}
		created++
	}
	if err := tx.WriteRecord(lf, binary.LittleEndian.AppendUint32(nil, want), 0); err != nil {
		return nil, errno(err)
	}
	if err := o.commit(ctx, r, tx); err != nil {
		return o.refuse(r, "orphan cleanup of %#x to %d: %w", cr.Seq, want, err)
	}
	o.lastID[cr.Seq] = want
	if destroyed > 0 || created > 0 {
		o.log.Info("ofd: orphan cleanup", "seq", fmt.Sprintf("%#x", cr.Seq), "last_used", want, "last_id", last,
			"destroyed", destroyed, "recreated", created, "from", r.Peer)
	}
	return marshal(&ostv1.CreateReply{Seq: cr.Seq, First: want + 1})
}

func (o *OFD) readLastID(ctx context.Context, seq uint64) (uint32, error) {
	var b [4]byte
	n, err := o.dev.ReadAt(ctx, lastIDFID(seq), [][]byte{b[:]}, 0)
	if errors.Is(err, osd.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if n != 4 {
		return 0, fmt.Errorf("%w: LAST_ID of %#x has %d bytes", osd.ErrCorrupt, seq, n)
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

func (o *OFD) objectRequest(r *ptlrpc.Request) (fid.FID, *ostv1.ObjectRequest, error) {
	var or ostv1.ObjectRequest
	if err := ptlrpc.Unmarshal(r.Body, &or); err != nil {
		return fid.FID{}, nil, fmt.Errorf("%w: body: %v", errBadRequest, err)
	}
	f, err := fidFromWire(or.Fid)
	return f, &or, err
}

// destroyLockWait bounds how long a destroy waits for clients to give
// back their locks on the object.
const destroyLockWait = time.Minute

// maxDestroyWaits bounds the destroys that wait for clients' locks at
// once: each holds a handler goroutine of the OSS's one service, which
// reads and writes share, until the clients give their locks back or the
// callback timer evicts them. A destroy beyond it whose lock conflicts is
// refused with EBUSY, without calling anybody back; the MDS's destroy
// log tries it again.
const maxDestroyWaits = 8

func (o *OFD) destroy(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	f, _, err := o.objectRequest(r)
	if err != nil {
		return o.refuse(r, "destroy: %w", err)
	}
	// As Lustre's ofd_destroy_by_fid: a PW lock on the whole object first
	// calls back every client lock on it, so that no client keeps pages
	// or locks of an object that is gone; the clients drop their pages
	// unwritten (DiscardData). The cancels it waits for never queue
	// behind it (ptlrpc.HighPriority).
	req := ldlm.Request{Resource: resOf(f), Mode: ldlm.PW, Policy: ldlm.Policy{Extent: ldlm.Whole},
		Flags: ldlm.NoExpansion | ldlm.DiscardData}
	var release func()
	select {
	case o.destroyWaits <- struct{}{}:
		release, err = o.lockd.LockLocal(ctx, req, destroyLockWait)
		<-o.destroyWaits
	default:
		req.Flags |= ldlm.BlockNoWait
		release, err = o.lockd.LockLocal(ctx, req, 0)
		if errors.Is(err, ldlm.ErrWouldBlock) {
			return nil, -int32(syscall.EBUSY)
		}
	}
	if err != nil {
		o.log.Warn("ofd: destroy: lock", "fid", f, "err", err)
		return nil, errno(err)
	}
	defer release()
	tx, err := o.dev.Begin(ctx)
	if err != nil {
		return nil, errno(err)
	}
	defer tx.Abort()
	if err := tx.Destroy(f); err != nil {
		return nil, errno(err)
	}
	if err := o.commit(ctx, r, tx); err != nil {
		return nil, errno(err)
	}
	return nil, 0
}

func (o *OFD) getattr(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	f, _, err := o.objectRequest(r)
	if err != nil {
		return o.refuse(r, "getattr: %w", err)
	}
	a, err := o.dev.GetAttr(ctx, f)
	if err != nil {
		return nil, errno(err)
	}
	return marshal(&ostv1.ObjectReply{Attr: AttrToWire(a)})
}

func (o *OFD) setattr(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	f, or, err := o.objectRequest(r)
	if err != nil {
		return o.refuse(r, "setattr: %w", err)
	}
	a := attrFromWire(or.Attr)
	if a.Valid&^osd.AttrAll != 0 {
		return o.refuse(r, "%w: setattr valid bits %#x", errBadRequest, uint32(a.Valid))
	}
	tx, err := o.dev.Begin(ctx)
	if err != nil {
		return nil, errno(err)
	}
	defer tx.Abort()
	if err := tx.SetAttr(f, a); err != nil {
		return nil, errno(err)
	}
	if err := o.commit(ctx, r, tx); err != nil {
		return nil, errno(err)
	}
	return o.lvbReply(ctx, f)
}

func (o *OFD) punch(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	var pr ostv1.PunchRequest
	if err := ptlrpc.Unmarshal(r.Body, &pr); err != nil {
		return o.refuse(r, "%w: punch body: %v", errBadRequest, err)
	}
	f, err := fidFromWire(pr.Fid)
	if err != nil {
		return o.refuse(r, "punch: %w", err)
	}
	tx, err := o.dev.Begin(ctx)
	if err != nil {
		return nil, errno(err)
	}
	defer tx.Abort()
	if err := tx.Punch(f, pr.Start, pr.End); err != nil {
		return o.refuse(r, "punch %v [%d,%d): %w", f, pr.Start, pr.End, err)
	}
	if err := o.setTimes(tx, f, pr.Mtime, pr.Ctime); err != nil {
		return nil, errno(err)
	}
	if err := o.commit(ctx, r, tx); err != nil {
		return nil, errno(err)
	}
	return o.lvbReply(ctx, f)
}

// fallocate serves OST_FALLOCATE (Lustre's ofd_fallocate_hdl): the
// object's blocks in [start, end) are reserved, out of the space no
// client holds as grant — the writes clients cached under their grant
// must still find room.
func (o *OFD) fallocate(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	var fr ostv1.FallocateRequest
	if err := ptlrpc.Unmarshal(r.Body, &fr); err != nil {
		return o.refuse(r, "%w: fallocate body: %v", errBadRequest, err)
	}
	f, err := fidFromWire(fr.Fid)
	if err != nil {
		return o.refuse(r, "fallocate: %w", err)
	}
	if fr.Start >= fr.End || fr.End > osd.MaxObjectSize {
		return o.refuse(r, "%w: fallocate %v [%d,%d)", errBadRequest, f, fr.Start, fr.End)
	}
	a, err := o.dev.GetAttr(ctx, f)
	if err != nil {
		return o.refuse(r, "fallocate %v: %w", f, err)
	}
	// What the object holds already may be in the range: counted as
	// taken, a second fallocate of a full OST's file would fail. Its
	// blocks are taken to lie within its size (all but those a KEEP_SIZE
	// allocation put past it), so a range past the end needs all it asks.
	n := fr.End - fr.Start
	inside := uint64(0)
	if fr.Start < a.Size {
		inside = min(fr.End, a.Size) - fr.Start
	}
	need := n - min(inside, a.Blocks*512)
	o.gmu.Lock()
	if spare := o.spaceLocked(ctx); need > spare {
		o.gmu.noSpace++
		o.gmu.Unlock()
		o.log.Info("ofd: fallocate refused: no space beside the grants", "fid", f, "bytes", n, "spare", spare)
		return nil, -int32(syscall.ENOSPC)
	}
	o.gmu.inFlight += need
	o.gmu.Unlock()
	landed := false
	defer func() {
		if !landed {
			o.notInFlight(need)
		}
	}()
	tx, err := o.dev.Begin(ctx)
	if err != nil {
		return nil, errno(err)
	}
	defer tx.Abort()
	if err := tx.Allocate(f, fr.Start, fr.End, fr.KeepSize); err != nil {
		return o.refuse(r, "fallocate %v [%d,%d): %w", f, fr.Start, fr.End, err)
	}
	if err := o.setTimes(tx, f, fr.Mtime, fr.Ctime); err != nil {
		return nil, errno(err)
	}
	if err := o.commit(ctx, r, tx); err != nil {
		return o.refuse(r, "fallocate %v [%d,%d): %w", f, fr.Start, fr.End, err)
	}
	o.spent(need)
	landed = true
	return o.lvbReply(ctx, f)
}

// lvbReply updates f's LVB after a change and answers with the object's
// attributes as they are now.
func (o *OFD) lvbReply(ctx context.Context, f fid.FID) ([]byte, int32) {
	after, err := o.updateLVB(ctx, f)
	if err != nil {
		return nil, errno(err)
	}
	return marshal(&ostv1.ObjectReply{Attr: AttrToWire(after)})
}

// setTimes adds to tx the mtime and ctime a client sent with a change,
// those that are not zero.
func (o *OFD) setTimes(tx osd.Tx, f fid.FID, mtime, ctime int64) error {
	if mtime == 0 && ctime == 0 {
		return nil
	}
	a := osd.Attr{Mtime: fromNS(mtime), Ctime: fromNS(ctime)}
	if mtime != 0 {
		a.Valid |= osd.AttrMtime
	}
	if ctime != 0 {
		a.Valid |= osd.AttrCtime
	}
	return tx.SetAttr(f, a)
}

func (o *OFD) sync(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	if err := o.dev.Sync(ctx); err != nil {
		return nil, errno(err)
	}
	o.reportCommitted()
	return nil, 0
}

func (o *OFD) statfs(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	sfs, err := o.dev.Statfs(ctx)
	if err != nil {
		return nil, errno(err)
	}
	o.gmu.Lock()
	granted := o.gmu.total
	o.gmu.sfs, o.gmu.sfsAt = sfs, time.Now()
	o.gmu.Unlock()
	return marshal(&ostv1.StatfsReply{Blocks: sfs.Blocks, Bfree: sfs.BFree, Bavail: sfs.BAvail, Files: sfs.Files, Ffree: sfs.FFree,
		Bsize: sfs.BSize, Namelen: sfs.NameLen, Maxbytes: sfs.MaxBytes, Granted: granted, Readonly: sfs.ReadOnly,
		Degraded: o.degraded.Load()})
}

// Advisor is what a device implements to take ladvise hints.
type Advisor interface {
	Advise(ctx context.Context, f fid.FID, willNeed bool, start, end uint64) error
}

func (o *OFD) ladvise(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	var lr ostv1.LadviseRequest
	if err := ptlrpc.Unmarshal(r.Body, &lr); err != nil {
		return o.refuse(r, "%w: ladvise body: %v", errBadRequest, err)
	}
	f, err := fidFromWire(lr.Fid)
	if err != nil {
		return o.refuse(r, "ladvise: %w", err)
	}
	if len(lr.Advice) == 0 || len(lr.Advice) > MaxNiobufs {
		return o.refuse(r, "%w: %d pieces of advice", errBadRequest, len(lr.Advice))
	}
	if _, err := o.dev.GetAttr(ctx, f); err != nil {
		return nil, errno(err)
	}
	adv, ok := o.dev.(Advisor)
	for _, a := range lr.Advice {
		if a.Start > a.End || (a.Kind != ostv1.Advice_KIND_WILLNEED && a.Kind != ostv1.Advice_KIND_DONTNEED) {
			return o.refuse(r, "%w: advice %v [%d,%d)", errBadRequest, a.Kind, a.Start, a.End)
		}
		if !ok {
			continue // advice, not a command: a device without a cache ignores it
		}
		if err := adv.Advise(ctx, f, a.Kind == ostv1.Advice_KIND_WILLNEED, a.Start, a.End); err != nil {
			return nil, errno(err)
		}
	}
	return nil, 0
}
