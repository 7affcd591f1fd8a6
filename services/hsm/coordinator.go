// Package hsm is Nacre's HSM coordinator (Lustre's MDT coordinator, "cdt"),
// its client and its agent side.
//
// The Coordinator takes ARCHIVE, RESTORE, RELEASE, REMOVE and CANCEL
// requests, keeps every action in etcd (so the queue survives restarts and
// failovers), and hands actions to copytool agents — registered over a
// bidirectional stream — by archive id, at most max_requests per agent.
// An action not heard of within active_request_timeout goes back to the
// queue for another agent (up to MaxAttempts tries). Exactly one
// coordinator is active: instances campaign in an etcd election; a
// standby answers UNAVAILABLE, and takes over when the leader's session
// lapses (within its TTL). Every write the leader makes is conditional on
// still holding the election key, so a deposed leader cannot change the
// queue.
//
// The file's HSM state lives on the MDT; copytools report completions to
// the MDT (through the client library) before they report them here.
package hsm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/internal/fid"
	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
)

// Defaults of Config.
const (
	DefaultPrefix               = "/nacre/hsm/"
	DefaultActiveRequestTimeout = 3600 * time.Second // Lustre's active_request_timeout
	DefaultMaxRequests          = 3                  // Lustre's max_requests
	DefaultMaxAttempts          = 3
	DefaultSessionTTL           = 5 // seconds
	DefaultMaxActive            = 100000
	DefaultGraceDelay           = 60 * time.Second // Lustre's grace_delay
	// MaxArchiveID bounds archive ids (and so the per-archive statistics).
	MaxArchiveID      = 65535
	maxFIDsPerRequest = 10000
	// maxPageSize bounds a page of ListActions; pruneBatch the actions
	// one pruning round deletes (the rest wait for the next round).
	maxPageSize = 1000
	pruneBatch  = 1000
	// pruneEvery is how often the leader looks for actions to prune.
	pruneEvery = time.Second
)

// Config configures a Coordinator.
type Config struct {
	// Etcd holds the queue and the election; required.
	Etcd *clientv3.Client
	// Prefix is the etcd key prefix; "" means DefaultPrefix.
	Prefix string
	// Name identifies this instance (its gRPC address) to agents.
	Name string
	// ActiveRequestTimeout: a started action not heard of for this long
	// is given to another agent.
	ActiveRequestTimeout time.Duration
	// MaxRequests is an agent's limit when it asks for none.
	MaxRequests int
	// MaxAttempts bounds the agents one action is given to.
	MaxAttempts int
	// SessionTTL (seconds) is how long a dead leader keeps the election.
	SessionTTL int
	// MaxActive bounds the waiting and started actions (RESOURCE_EXHAUSTED).
	MaxActive int
	// GraceDelay is how long a finished action (succeeded, failed,
	// canceled) stays in the queue before it is deleted; 0 means
	// DefaultGraceDelay (SetGraceDelay can set 0: delete at once).
	GraceDelay time.Duration
	// Logger gets the coordinator's logs; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns Lustre's defaults, without etcd.
func DefaultConfig() Config {
	return Config{Prefix: DefaultPrefix, ActiveRequestTimeout: DefaultActiveRequestTimeout, MaxRequests: DefaultMaxRequests,
		MaxAttempts: DefaultMaxAttempts, SessionTTL: DefaultSessionTTL, MaxActive: DefaultMaxActive, GraceDelay: DefaultGraceDelay}
}

// Validate fills in defaults and checks c.
func (c *Config) Validate() error {
	if c.Etcd == nil {
		return errors.New("hsm: no etcd client")
	}
	d := DefaultConfig()
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.ActiveRequestTimeout <= 0 {
		c.ActiveRequestTimeout = d.ActiveRequestTimeout
	}
	if c.MaxRequests <= 0 {
		c.MaxRequests = d.MaxRequests
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = d.SessionTTL
	}
	if c.MaxActive <= 0 {
		c.MaxActive = d.MaxActive
	}
	switch {
	case c.GraceDelay < 0:
		return fmt.Errorf("hsm: grace delay %v is negative", c.GraceDelay)
	case c.GraceDelay == 0:
		c.GraceDelay = d.GraceDelay
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Coordinator serves hsmv1.Coordinator. Safe for concurrent use; Run
// drives it.
type Coordinator struct {
	hsmv1.UnimplementedCoordinatorServer
	cfg  Config
	log  *slog.Logger
	kick chan struct{}
	// disabled pauses dispatching (hsm_control=disabled): actions are
	// taken and kept, none goes to an agent.
	disabled atomic.Bool
	// grace is the grace delay in nanoseconds (SetGraceDelay).
	grace atomic.Int64
	// activeTimeout and maxReq are cfg.ActiveRequestTimeout and
	// cfg.MaxRequests, changed at run time (mdt.*.hsm.*).
	activeTimeout, maxReq atomic.Int64

	mu struct {
		sync.Mutex
		// leader: this instance holds the election; the fields below
		// are valid only then.
		leader  bool
		elected *concurrency.Election
		actions map[uint64]*hsmv1.Action // every action in etcd
		agents  map[string]*agent        // registered agents by UUID
		nextID  uint64
		// stats are the per-archive counts of finished actions, as in
		// etcd (written with the action that finishes).
		stats map[uint32]*hsmv1.ArchiveStats
	}
}

// agent is one registered copytool session.
type agent struct {
	uuid     string
	archives []uint32
	max      int
	out      chan *hsmv1.AgentResponse // bounded: max actions + acks
	stop     context.CancelFunc
	actions  map[uint64]bool // started actions given to it (guarded by Coordinator.mu)
	// canceled are the actions taken back from it (timed out, or
	// canceled) whose cancel it has not answered yet (guarded by
	// Coordinator.mu): not given back to it until then, as the attempt it
	// still runs would take the new one for itself, and its report of the
	// cancel end it; and their files take no other action meanwhile, as
	// the attempt may still write the archive.
	canceled map[uint64]canceledAttempt
	// ok and errors count the actions it finished in this session, well
	// and not (guarded by Coordinator.mu).
	ok, errors uint64
}

func (a *agent) serves(archive uint32) bool {
	return len(a.archives) == 0 || archive == 0 || slices.Contains(a.archives, archive)
}

// New returns a coordinator; Run makes it campaign and serve.
func New(cfg Config) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Coordinator{cfg: cfg, log: cfg.Logger.With("hsm", cfg.Name), kick: make(chan struct{}, 1)}
	c.grace.Store(int64(cfg.GraceDelay))
	c.activeTimeout.Store(int64(cfg.ActiveRequestTimeout))
	c.maxReq.Store(int64(cfg.MaxRequests))
	return c, nil
}

// Register adds the Coordinator service to s (the MGS's gRPC server).
func (c *Coordinator) Register(s *grpc.Server) { hsmv1.RegisterCoordinatorServer(s, c) }

// Leader reports whether this instance is the active coordinator.
func (c *Coordinator) Leader() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.leader
}

// Run campaigns for leadership and, while leader, dispatches actions and
// retries those that time out; it steps down when its etcd session ends
// and campaigns again. It returns when ctx ends.
func (c *Coordinator) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := c.term(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("hsm: coordinator term ended", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return nil
}

// term is one campaign and, if won, one leadership.
func (c *Coordinator) term(ctx context.Context) error {
	sess, err := concurrency.NewSession(c.cfg.Etcd, concurrency.WithTTL(c.cfg.SessionTTL), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("hsm: etcd session: %w", err)
	}
	defer sess.Close()
	e := concurrency.NewElection(sess, c.cfg.Prefix+"election")
	if err := e.Campaign(ctx, c.cfg.Name); err != nil {
		return fmt.Errorf("hsm: campaign: %w", err)
	}
	if err := c.takeOver(ctx, e); err != nil {
		return err
	}
	c.log.Info("hsm: active coordinator")
	defer c.stepDown()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	lastPrune := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sess.Done():
			return errors.New("hsm: etcd session lost: stepping down")
		case <-c.kick:
		case <-t.C:
		}
		if err := c.dispatch(ctx); err != nil {
			return err
		}
		if time.Since(lastPrune) >= pruneEvery {
			lastPrune = time.Now()
			if err := c.prune(ctx); errors.Is(err, errNotLeader) {
				return err
			} else if err != nil {
				c.log.Warn("hsm: pruning", "err", err) // tried again next round
			}
		}
	}
}

// takeOver loads the queue from etcd once elected.
func (c *Coordinator) takeOver(ctx context.Context, e *concurrency.Election) error {
	resp, err := c.cfg.Etcd.Get(ctx, c.cfg.Prefix+"actions/", clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("hsm: load actions: %w", err)
	}
	actions := map[uint64]*hsmv1.Action{}
	var next uint64 = 1
	for _, kv := range resp.Kvs {
		a := &hsmv1.Action{}
		if err := protojson.Unmarshal(kv.Value, a); err != nil {
			c.log.Error("hsm: bad action record", "key", string(kv.Key), "err", err)
			continue
		}
		actions[a.Id] = a
		next = max(next, a.Id+1)
	}
	resp, err = c.cfg.Etcd.Get(ctx, c.cfg.Prefix+"stats/", clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("hsm: load statistics: %w", err)
	}
	stats := map[uint32]*hsmv1.ArchiveStats{}
	for _, kv := range resp.Kvs {
		st := &hsmv1.ArchiveStats{}
		if err := protojson.Unmarshal(kv.Value, st); err != nil {
			c.log.Error("hsm: bad statistics record", "key", string(kv.Key), "err", err)
			continue
		}
		stats[st.ArchiveId] = st
	}
	// The next id is past every id ever given, pruned ones included.
	if resp, err = c.cfg.Etcd.Get(ctx, c.cfg.Prefix+"next_id"); err != nil {
		return fmt.Errorf("hsm: load next action id: %w", err)
	}
	if len(resp.Kvs) == 1 {
		n, err := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
		if err != nil {
			return fmt.Errorf("hsm: bad next action id %q: %w", resp.Kvs[0].Value, err)
		}
		next = max(next, n)
	}
	now := time.Now().UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.leader, c.mu.elected, c.mu.actions, c.mu.nextID, c.mu.stats = true, e, actions, next, stats
	c.mu.agents = map[string]*agent{}
	for _, a := range actions {
		// Started actions keep their agent: it reconnects and reports,
		// or the deadline (at least a full timeout from now) retries it.
		if a.State == hsmv1.ActionState_ACTION_STATE_STARTED {
			a.DeadlineUnixNs = max(a.DeadlineUnixNs, now+c.activeTimeout.Load())
		}
	}
	return nil
}

// stepDown drops leadership and every agent session.
func (c *Coordinator) stepDown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.mu.agents {
		a.stop()
	}
	c.mu.leader, c.mu.elected, c.mu.actions, c.mu.agents, c.mu.stats = false, nil, nil, nil, nil
	c.log.Info("hsm: no longer the active coordinator")
}

func (c *Coordinator) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func actionKey(prefix string, id uint64) string {
	return prefix + "actions/" + fmt.Sprintf("%016x", id)
}

// saveLocked writes as to etcd if this instance still leads.
func (c *Coordinator) saveLocked(ctx context.Context, as ...*hsmv1.Action) error {
	return c.saveOpsLocked(ctx, nil, as...)
}

// saveOpsLocked writes as, and does ops, in one transaction if this
// instance still leads.
func (c *Coordinator) saveOpsLocked(ctx context.Context, ops []clientv3.Op, as ...*hsmv1.Action) error {
	for _, a := range as {
		b, err := protojson.Marshal(a)
		if err != nil {
			return fmt.Errorf("hsm: encode action %d: %w", a.Id, err)
		}
		ops = append(ops, clientv3.OpPut(actionKey(c.cfg.Prefix, a.Id), string(b)))
	}
	return c.txnLocked(ctx, ops)
}

// txnLocked does ops in one transaction if this instance still leads.
func (c *Coordinator) txnLocked(ctx context.Context, ops []clientv3.Op) error {
	e := c.mu.elected
	if e == nil {
		return errNotLeader
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.cfg.Etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", e.Rev())).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("hsm: save to etcd: %w", err)
	}
	if !resp.Succeeded {
		return errNotLeader
	}
	return nil
}

// saveFinishedLocked saves a, which was active: if it has finished, with
// its archive's statistics counting it, in the same transaction.
func (c *Coordinator) saveFinishedLocked(ctx context.Context, a *hsmv1.Action) error {
	if testHookSaveFinished != nil {
		if err := testHookSaveFinished(a); err != nil {
			return err
		}
	}
	if active(a) {
		return c.saveLocked(ctx, a)
	}
	st := &hsmv1.ArchiveStats{ArchiveId: a.ArchiveId}
	if old := c.mu.stats[a.ArchiveId]; old != nil {
		st = proto.Clone(old).(*hsmv1.ArchiveStats)
	}
	countFinished(st, a)
	b, err := protojson.Marshal(st)
	if err != nil {
		return fmt.Errorf("hsm: encode statistics of archive %d: %w", a.ArchiveId, err)
	}
	op := clientv3.OpPut(c.cfg.Prefix+"stats/"+fmt.Sprintf("%08x", a.ArchiveId), string(b))
	if err := c.saveOpsLocked(ctx, []clientv3.Op{op}, a); err != nil {
		return err
	}
	c.mu.stats[a.ArchiveId] = st
	return nil
}

// countFinished counts finished action a in st.
func countFinished(st *hsmv1.ArchiveStats, a *hsmv1.Action) {
	switch a.State {
	case hsmv1.ActionState_ACTION_STATE_SUCCEED:
		st.Succeeded++
		switch a.Kind {
		case hsmv1.ActionKind_ACTION_KIND_ARCHIVE:
			st.BytesArchived += a.BytesTotal
		case hsmv1.ActionKind_ACTION_KIND_RESTORE:
			st.BytesRestored += a.BytesTotal
		}
	case hsmv1.ActionState_ACTION_STATE_FAILED:
		st.Failed++
	case hsmv1.ActionState_ACTION_STATE_CANCELED:
		st.Canceled++
	}
}

var errNotLeader = status.Error(codes.Unavailable, "hsm: not the active coordinator")

func active(a *hsmv1.Action) bool {
	return a.State == hsmv1.ActionState_ACTION_STATE_WAITING || a.State == hsmv1.ActionState_ACTION_STATE_STARTED
}

// dispatch retries timed-out actions and gives waiting ones to agents.
func (c *Coordinator) dispatch(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.mu.leader {
		return errNotLeader
	}
	now := time.Now().UnixNano()
	ids := make([]uint64, 0, len(c.mu.actions))
	for id, a := range c.mu.actions {
		if active(a) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		a := c.mu.actions[id]
		if a.State != hsmv1.ActionState_ACTION_STATE_STARTED || a.DeadlineUnixNs > now {
			continue
		}
		old := proto.Clone(a).(*hsmv1.Action)
		if ag := c.mu.agents[a.Agent]; ag != nil {
			c.takeBackLocked(ag, a, now)
		}
		if int(a.Attempts) >= c.cfg.MaxAttempts {
			a.State, a.Error = hsmv1.ActionState_ACTION_STATE_FAILED, fmt.Sprintf("timed out %d times", a.Attempts)
		} else {
			a.State, a.Error = hsmv1.ActionState_ACTION_STATE_WAITING, "agent "+a.Agent+" timed out"
		}
		a.ChangedUnixNs = now
		c.log.Info("hsm: action timed out", "id", a.Id, "agent", a.Agent, "attempts", a.Attempts)
		if err := c.saveFinishedLocked(ctx, a); err != nil {
			c.mu.actions[id] = old
			return err
		}
	}
	// One action at a time per file: a remove of the archive copy beside
	// an archive of the file could delete the copy the archive then
	// records as current, or a release beside a remove leave the file
	// with no data anywhere. The others wait their turn, also for an
	// attempt canceled but not ended yet.
	busy := map[string]bool{}
	for _, id := range ids {
		if a := c.mu.actions[id]; a.State == hsmv1.ActionState_ACTION_STATE_STARTED {
			busy[fidKey(a.Fid)] = true
		}
	}
	for _, ag := range c.mu.agents {
		for id, ca := range ag.canceled {
			if now >= ca.until {
				delete(ag.canceled, id)
				continue
			}
			busy[ca.file] = true
		}
	}
	for _, id := range ids {
		a := c.mu.actions[id]
		if a.State != hsmv1.ActionState_ACTION_STATE_WAITING || c.disabled.Load() || busy[fidKey(a.Fid)] {
			continue
		}
		ag := c.pickLocked(a)
		if ag == nil {
			continue
		}
		old := proto.Clone(a).(*hsmv1.Action)
		a.State, a.Agent, a.Error = hsmv1.ActionState_ACTION_STATE_STARTED, ag.uuid, ""
		a.Attempts++
		a.ChangedUnixNs, a.DeadlineUnixNs = now, now+c.activeTimeout.Load()
		a.BytesDone = 0
		if err := c.saveLocked(ctx, a); err != nil {
			c.mu.actions[id] = old
			return err
		}
		ag.actions[a.Id] = true
		busy[fidKey(a.Fid)] = true
		c.sendLocked(ag, &hsmv1.AgentResponse{Msg: &hsmv1.AgentResponse_Action{Action: proto.Clone(a).(*hsmv1.Action)}})
	}
	return nil
}

// testHookSaveFinished, if set (by tests), runs before an action's change
// is saved; an error it returns fails the save (etcd out of reach).
var testHookSaveFinished func(a *hsmv1.Action) error

// canceledAttempt is an attempt an agent was told to cancel: the file it
// is on (fidKey) and until when the coordinator waits for its end.
type canceledAttempt struct {
	file  string
	until int64
}

// takeBackLocked takes action a from agent ag and tells it to cancel the
// attempt, which counts as running on a's file until the agent reports
// its end, its session ends, or an active request timeout passes.
func (c *Coordinator) takeBackLocked(ag *agent, a *hsmv1.Action, now int64) {
	delete(ag.actions, a.Id)
	ag.canceled[a.Id] = canceledAttempt{file: fidKey(a.Fid), until: now + c.activeTimeout.Load()}
	c.sendLocked(ag, &hsmv1.AgentResponse{Msg: &hsmv1.AgentResponse_Cancel{Cancel: &hsmv1.Cancel{Id: a.Id}}})
}

// pickLocked returns the least loaded agent with room that serves a's
// archive, nil if none.
func (c *Coordinator) pickLocked(a *hsmv1.Action) *agent {
	var best *agent
	for _, ag := range c.mu.agents {
		if !ag.serves(a.ArchiveId) || len(ag.actions) >= ag.max {
			continue
		}
		if _, ok := ag.canceled[a.Id]; ok {
			continue // (dispatch dropped those it waited for long enough)
		}
		if best == nil || len(ag.actions) < len(best.actions) || (len(ag.actions) == len(best.actions) && ag.uuid < best.uuid) {
			best = ag
		}
	}
	return best
}

// sendLocked queues m for ag; a full queue (an agent not reading) ends
// its session: its actions time out and go to others.
func (c *Coordinator) sendLocked(ag *agent, m *hsmv1.AgentResponse) {
	select {
	case ag.out <- m:
	default:
		c.log.Warn("hsm: agent not reading: dropping its session", "agent", ag.uuid)
		ag.stop()
	}
}

func (c *Coordinator) leaderLocked() error {
	if !c.mu.leader {
		return errNotLeader
	}
	return nil
}

// Submit queues actions (see the service's doc).
func (c *Coordinator) Submit(ctx context.Context, q *hsmv1.SubmitRequest) (*hsmv1.SubmitResponse, error) {
	switch {
	case q.Kind < hsmv1.ActionKind_ACTION_KIND_ARCHIVE || q.Kind > hsmv1.ActionKind_ACTION_KIND_RELEASE:
		return nil, status.Errorf(codes.InvalidArgument, "hsm: action kind %v", q.Kind)
	case q.Kind == hsmv1.ActionKind_ACTION_KIND_ARCHIVE && q.ArchiveId == 0:
		return nil, status.Error(codes.InvalidArgument, "hsm: archive to archive id 0")
	case q.ArchiveId > MaxArchiveID:
		return nil, status.Errorf(codes.InvalidArgument, "hsm: archive id %d: at most %d", q.ArchiveId, MaxArchiveID)
	}
	fids, err := requestFIDs(q)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.leaderLocked(); err != nil {
		return nil, err
	}
	if q.Kind == hsmv1.ActionKind_ACTION_KIND_CANCEL {
		return c.cancelLocked(ctx, fids)
	}
	nActive := 0
	byFID := map[string]uint64{}
	for _, a := range c.mu.actions {
		if active(a) {
			nActive++
			if a.Kind == q.Kind {
				byFID[fidKey(a.Fid)] = a.Id
			}
		}
	}
	if nActive+len(fids) > c.cfg.MaxActive {
		return nil, status.Errorf(codes.ResourceExhausted, "hsm: %d actions queued, at most %d", nActive, c.cfg.MaxActive)
	}
	now := time.Now().UnixNano()
	rep := &hsmv1.SubmitResponse{}
	var added []*hsmv1.Action
	for _, f := range fids {
		if id, ok := byFID[fidKey(f)]; ok {
			rep.Ids = append(rep.Ids, id)
			continue
		}
		a := &hsmv1.Action{Id: c.mu.nextID, Kind: q.Kind, Fid: f, ArchiveId: q.ArchiveId, State: hsmv1.ActionState_ACTION_STATE_WAITING,
			CreatedUnixNs: now, ChangedUnixNs: now}
		c.mu.nextID++
		byFID[fidKey(f)] = a.Id
		added = append(added, a)
		rep.Ids = append(rep.Ids, a.Id)
	}
	// etcd bounds a transaction's operations (128 by default). The next
	// id is saved with the actions: pruning may delete them all, and a
	// new leader must not give their ids again.
	nextOp := clientv3.OpPut(c.cfg.Prefix+"next_id", strconv.FormatUint(c.mu.nextID, 10))
	for len(added) > 0 {
		n := min(len(added), 100)
		if err := c.saveOpsLocked(ctx, []clientv3.Op{nextOp}, added[:n]...); err != nil {
			return nil, err
		}
		for _, a := range added[:n] {
			c.mu.actions[a.Id] = a
		}
		added = added[n:]
	}
	c.wake()
	return rep, nil
}

// requestFIDs returns q's FIDs, fids then fid_names: INVALID_ARGUMENT
// for a bad one, or for none or too many.
func requestFIDs(q *hsmv1.SubmitRequest) ([]*hsmv1.FID, error) {
	n := len(q.Fids) + len(q.FidNames)
	if n == 0 || n > maxFIDsPerRequest {
		return nil, status.Errorf(codes.InvalidArgument, "hsm: %d FIDs in a request (1..%d)", n, maxFIDsPerRequest)
	}
	fids := make([]*hsmv1.FID, 0, n)
	for _, f := range q.Fids {
		if f == nil || f.Seq == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "hsm: bad FID %v", f)
		}
		fids = append(fids, f)
	}
	for _, s := range q.FidNames {
		f, err := fid.Parse(s)
		if err != nil || f.Seq == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "hsm: bad FID %q: want [0xSEQ:0xOID:0xVER]", s)
		}
		fids = append(fids, FIDTo(f))
	}
	return fids, nil
}

func fidKey(f *hsmv1.FID) string {
	return strconv.FormatUint(f.GetSeq(), 16) + ":" + strconv.FormatUint(uint64(f.GetOid()), 16) + ":" + strconv.FormatUint(uint64(f.GetVer()), 16)
}

func (c *Coordinator) cancelLocked(ctx context.Context, fids []*hsmv1.FID) (*hsmv1.SubmitResponse, error) {
	rep := &hsmv1.SubmitResponse{}
	now := time.Now().UnixNano()
	for _, f := range fids {
		var id uint64
		for _, a := range c.mu.actions {
			if !active(a) || fidKey(a.Fid) != fidKey(f) {
				continue
			}
			if err := c.cancelOneLocked(ctx, a, now); err != nil {
				return nil, err
			}
			id = a.Id
		}
		rep.Ids = append(rep.Ids, id)
	}
	c.wake()
	return rep, nil
}

// cancelOneLocked cancels active action a and tells its agent.
func (c *Coordinator) cancelOneLocked(ctx context.Context, a *hsmv1.Action, now int64) error {
	old := proto.Clone(a).(*hsmv1.Action)
	a.State, a.ChangedUnixNs, a.Error = hsmv1.ActionState_ACTION_STATE_CANCELED, now, "canceled"
	if err := c.saveFinishedLocked(ctx, a); err != nil {
		c.mu.actions[a.Id] = old
		return err
	}
	if ag := c.mu.agents[a.Agent]; ag != nil && ag.actions[a.Id] {
		c.takeBackLocked(ag, a, now)
	}
	return nil
}

// CancelAction cancels action id (see the service's doc).
func (c *Coordinator) CancelAction(ctx context.Context, q *hsmv1.CancelActionRequest) (*hsmv1.Action, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, err := c.actionLocked(q.Id)
	if err != nil {
		return nil, err
	}
	if active(a) {
		if err := c.cancelOneLocked(ctx, a, time.Now().UnixNano()); err != nil {
			return nil, err
		}
		c.wake()
	}
	return proto.Clone(a).(*hsmv1.Action), nil
}

// Control modes (Lustre's hsm_control).
const (
	ControlEnabled  = "enabled"
	ControlDisabled = "disabled"
	ControlPurge    = "purge"
)

// ControlState returns "enabled" or "disabled".
func (c *Coordinator) ControlState() string {
	if c.disabled.Load() {
		return ControlDisabled
	}
	return ControlEnabled
}

// Control applies hsm_control: enabled dispatches again, disabled stops
// giving actions to agents (they stay queued), purge cancels every action
// not finished (only the active coordinator can).
func (c *Coordinator) Control(ctx context.Context, mode string) error {
	switch mode {
	case ControlEnabled:
		c.disabled.Store(false)
		c.wake()
		return nil
	case ControlDisabled:
		c.disabled.Store(true)
		return nil
	case ControlPurge:
	default:
		return fmt.Errorf("hsm: control %q: want enabled, disabled or purge", mode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.mu.leader {
		return errNotLeader
	}
	seen := map[string]bool{}
	var fids []*hsmv1.FID
	for _, a := range c.mu.actions {
		if active(a) && !seen[fidKey(a.Fid)] {
			seen[fidKey(a.Fid)] = true
			fids = append(fids, a.Fid)
		}
	}
	_, err := c.cancelLocked(ctx, fids)
	return err
}

// ActionsText lists the actions not finished as lctl get_param
// mdt.*.hsm.actions shows them, one a line.
func (c *Coordinator) ActionsText() string {
	c.mu.Lock()
	var as []*hsmv1.Action
	for _, a := range c.mu.actions {
		if active(a) {
			as = append(as, proto.Clone(a).(*hsmv1.Action))
		}
	}
	c.mu.Unlock()
	slices.SortFunc(as, func(a, b *hsmv1.Action) int { return cmp.Compare(a.Id, b.Id) })
	var b strings.Builder
	for _, a := range as {
		f := FIDFrom(a.Fid)
		fmt.Fprintf(&b, "idx=%d fid=%v action=%s archive#=%d status=%s agent=%s attempts=%d bytes=%d\n", a.Id, f,
			strings.TrimPrefix(a.Kind.String(), "ACTION_KIND_"), a.ArchiveId, strings.TrimPrefix(a.State.String(), "ACTION_STATE_"),
			a.Agent, a.Attempts, a.BytesDone)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// AgentsText lists the registered agents as lctl get_param
// mdt.*.hsm.agents shows them, one a line: "uuid=U archive_id=1,2
// requests=[current:N ok:N errors:N]" (ANY for an agent of every archive;
// ok and errors count this session's actions). Empty on a standby.
func (c *Coordinator) AgentsText() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lines []string
	for _, ag := range c.mu.agents {
		arch := "ANY"
		if len(ag.archives) > 0 {
			ids := make([]string, len(ag.archives))
			for i, id := range ag.archives {
				ids[i] = strconv.FormatUint(uint64(id), 10)
			}
			arch = strings.Join(ids, ",")
		}
		lines = append(lines, fmt.Sprintf("uuid=%s archive_id=%s requests=[current:%d ok:%d errors:%d]", ag.uuid, arch, len(ag.actions), ag.ok, ag.errors))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// GetAction returns one action: NOT_FOUND if unknown.
func (c *Coordinator) GetAction(_ context.Context, q *hsmv1.GetActionRequest) (*hsmv1.Action, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, err := c.actionLocked(q.Id)
	if err != nil {
		return nil, err
	}
	return proto.Clone(a).(*hsmv1.Action), nil
}

// actionLocked returns action id: UNAVAILABLE on a standby, NOT_FOUND if
// there is no such action (or no more: pruned).
func (c *Coordinator) actionLocked(id uint64) (*hsmv1.Action, error) {
	if err := c.leaderLocked(); err != nil {
		return nil, err
	}
	a := c.mu.actions[id]
	if a == nil {
		return nil, status.Errorf(codes.NotFound, "hsm: no action %d", id)
	}
	return a, nil
}

// ListActions lists the actions that pass q's filters by id, a page at a
// time: INVALID_ARGUMENT for a page token not returned by ListActions or
// a negative page size. A page token is the id the next page starts at,
// so pages stay right while actions come and go.
func (c *Coordinator) ListActions(_ context.Context, q *hsmv1.ListActionsRequest) (*hsmv1.ListActionsResponse, error) {
	size := int(q.PageSize)
	switch {
	case size < 0:
		return nil, status.Errorf(codes.InvalidArgument, "hsm: page size %d is negative", size)
	case size == 0 || size > maxPageSize:
		size = maxPageSize
	}
	var from uint64
	if q.PageToken != "" {
		n, err := strconv.ParseUint(q.PageToken, 10, 64)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "hsm: bad page token %q", q.PageToken)
		}
		from = n
	}
	for _, st := range q.States {
		if _, ok := hsmv1.ActionState_name[int32(st)]; !ok || st == hsmv1.ActionState_ACTION_STATE_UNSPECIFIED {
			return nil, status.Errorf(codes.InvalidArgument, "hsm: action state %v", st)
		}
	}
	if _, ok := hsmv1.ActionKind_name[int32(q.Kind)]; !ok {
		return nil, status.Errorf(codes.InvalidArgument, "hsm: action kind %v", q.Kind)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.leaderLocked(); err != nil {
		return nil, err
	}
	var ids []uint64
	for id, a := range c.mu.actions {
		if id >= from && (!q.Active || active(a)) && (len(q.States) == 0 || slices.Contains(q.States, a.State)) &&
			(q.ArchiveId == 0 || a.ArchiveId == q.ArchiveId) && (q.Kind == hsmv1.ActionKind_ACTION_KIND_UNSPECIFIED || a.Kind == q.Kind) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	rep := &hsmv1.ListActionsResponse{}
	if len(ids) > size {
		rep.NextPageToken = strconv.FormatUint(ids[size], 10)
		ids = ids[:size]
	}
	for _, id := range ids {
		rep.Actions = append(rep.Actions, proto.Clone(c.mu.actions[id]).(*hsmv1.Action))
	}
	return rep, nil
}

// GetStats returns each archive's statistics (see the service's doc).
func (c *Coordinator) GetStats(context.Context, *hsmv1.GetStatsRequest) (*hsmv1.GetStatsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.leaderLocked(); err != nil {
		return nil, err
	}
	byID := map[uint32]*hsmv1.ArchiveStats{}
	for id, st := range c.mu.stats {
		byID[id] = proto.Clone(st).(*hsmv1.ArchiveStats)
	}
	for _, a := range c.mu.actions {
		if !active(a) {
			continue
		}
		st := byID[a.ArchiveId]
		if st == nil {
			st = &hsmv1.ArchiveStats{ArchiveId: a.ArchiveId}
			byID[a.ArchiveId] = st
		}
		if a.State == hsmv1.ActionState_ACTION_STATE_WAITING {
			st.Waiting++
		} else {
			st.Running++
		}
	}
	rep := &hsmv1.GetStatsResponse{}
	for _, st := range byID {
		rep.Archives = append(rep.Archives, st)
	}
	slices.SortFunc(rep.Archives, func(a, b *hsmv1.ArchiveStats) int { return cmp.Compare(a.ArchiveId, b.ArchiveId) })
	return rep, nil
}

// GraceDelay is how long finished actions are kept (Lustre's grace_delay).
func (c *Coordinator) GraceDelay() time.Duration { return time.Duration(c.grace.Load()) }

// ActiveRequestTimeout is how long a started action may go unheard of
// before it is given to another agent (mdt.*.hsm.active_request_timeout).
func (c *Coordinator) ActiveRequestTimeout() time.Duration {
	return time.Duration(c.activeTimeout.Load())
}

// SetActiveRequestTimeout changes it for actions started or heard of from
// now on.
func (c *Coordinator) SetActiveRequestTimeout(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("hsm: active request timeout %v: want a positive duration", d)
	}
	c.activeTimeout.Store(int64(d))
	return nil
}

// MaxRequests is the actions an agent that names no limit of its own is
// given at once (mdt.*.hsm.max_requests).
func (c *Coordinator) MaxRequests() int { return int(c.maxReq.Load()) }

// SetMaxRequests changes it for agents registering from now on.
func (c *Coordinator) SetMaxRequests(n int) error {
	if n < 1 || n > 65536 {
		return fmt.Errorf("hsm: max requests %d: want 1 to 65536", n)
	}
	c.maxReq.Store(int64(n))
	return nil
}

// SetGraceDelay sets how long finished actions are kept; those older go
// at the next pruning round (within a second). Negative is an error.
func (c *Coordinator) SetGraceDelay(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("hsm: grace delay %v is negative", d)
	}
	c.grace.Store(int64(d))
	return nil
}

// prune deletes finished actions older than the grace delay, up to
// pruneBatch of them a round.
func (c *Coordinator) prune(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.mu.leader {
		return errNotLeader
	}
	cutoff := time.Now().UnixNano() - c.grace.Load()
	var ids []uint64
	for id, a := range c.mu.actions {
		if !active(a) && a.ChangedUnixNs <= cutoff {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	ids = ids[:min(len(ids), pruneBatch)]
	for len(ids) > 0 {
		n := min(len(ids), 100)
		ops := make([]clientv3.Op, 0, n)
		for _, id := range ids[:n] {
			ops = append(ops, clientv3.OpDelete(actionKey(c.cfg.Prefix, id)))
		}
		if err := c.txnLocked(ctx, ops); err != nil {
			return fmt.Errorf("hsm: prune finished actions: %w", err)
		}
		for _, id := range ids[:n] {
			delete(c.mu.actions, id)
		}
		c.log.Debug("hsm: pruned finished actions", "n", n, "first", ids[0])
		ids = ids[n:]
	}
	return nil
}

// ListAgents lists the registered agents.
func (c *Coordinator) ListAgents(context.Context, *hsmv1.ListAgentsRequest) (*hsmv1.ListAgentsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.leaderLocked(); err != nil {
		return nil, err
	}
	rep := &hsmv1.ListAgentsResponse{}
	for _, ag := range c.mu.agents {
		info := &hsmv1.AgentInfo{Uuid: ag.uuid, ArchiveIds: ag.archives, MaxRequests: uint32(ag.max), InFlight: uint32(len(ag.actions))}
		for id := range ag.actions {
			info.Actions = append(info.Actions, id)
		}
		slices.Sort(info.Actions)
		rep.Agents = append(rep.Agents, info)
	}
	slices.SortFunc(rep.Agents, func(a, b *hsmv1.AgentInfo) int {
		if a.Uuid < b.Uuid {
			return -1
		}
		return 1
	})
	return rep, nil
}

// Agent serves one copytool session (see the service's doc).
func (c *Coordinator) Agent(stream grpc.BidiStreamingServer[hsmv1.AgentRequest, hsmv1.AgentResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	reg := first.GetRegister()
	if reg == nil || reg.Uuid == "" || len(reg.Uuid) > 128 {
		return status.Error(codes.InvalidArgument, "hsm: an agent must register first, with a UUID")
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	mx := int(reg.MaxRequests)
	if mx <= 0 {
		mx = int(c.maxReq.Load())
	}
	mx = min(mx, 1024)
	ag := &agent{uuid: reg.Uuid, archives: reg.ArchiveIds, max: mx, out: make(chan *hsmv1.AgentResponse, 2*mx+16), stop: cancel,
		actions: map[uint64]bool{}, canceled: map[uint64]canceledAttempt{}}
	c.mu.Lock()
	if err := c.leaderLocked(); err != nil {
		c.mu.Unlock()
		return err
	}
	if old := c.mu.agents[ag.uuid]; old != nil {
		old.stop()
	}
	c.mu.agents[ag.uuid] = ag
	ag.out <- &hsmv1.AgentResponse{Msg: &hsmv1.AgentResponse_Registered{Registered: &hsmv1.Registered{Coordinator: c.cfg.Name}}}
	// Actions it started under an earlier session (or coordinator) are
	// its again, and sent again: the earlier session may have ended before
	// they reached it (the agent ignores those it runs or has finished).
	for _, a := range c.mu.actions {
		if a.State == hsmv1.ActionState_ACTION_STATE_STARTED && a.Agent == ag.uuid {
			ag.actions[a.Id] = true
			c.sendLocked(ag, &hsmv1.AgentResponse{Msg: &hsmv1.AgentResponse_Action{Action: proto.Clone(a).(*hsmv1.Action)}})
		}
	}
	c.mu.Unlock()
	c.log.Info("hsm: agent registered", "agent", ag.uuid, "archives", ag.archives, "max_requests", mx)
	defer func() {
		c.mu.Lock()
		if c.mu.leader && c.mu.agents[ag.uuid] == ag {
			delete(c.mu.agents, ag.uuid)
		}
		c.mu.Unlock()
		c.log.Info("hsm: agent gone", "agent", ag.uuid)
	}()
	c.wake()

	errc := make(chan error, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				errc <- ctx.Err()
				return
			case m := <-ag.out:
				if err := stream.Send(m); err != nil {
					errc <- err
					cancel()
					return
				}
			}
		}
	}()
	// Received on a goroutine of its own: the session also ends when the
	// coordinator ends it (stepped down, the agent replaced or not
	// reading), and an idle agent sends nothing that would wake a Recv.
	// Returning ends the stream, whose Recv then returns too.
	recvd, recvErr := make(chan *hsmv1.AgentRequest), make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case recvd <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		var m *hsmv1.AgentRequest
		select {
		case m = <-recvd:
		case <-recvErr:
			cancel()
			<-errc
			return nil
		case <-ctx.Done():
			<-errc
			// The agent reconnects, to the coordinator that leads now.
			return status.Error(codes.Unavailable, "hsm: the coordinator ended this agent session")
		}
		var ack *hsmv1.Ack
		switch x := m.Msg.(type) {
		case *hsmv1.AgentRequest_Progress:
			ack = c.progress(ctx, ag, x.Progress.Id, x.Progress, nil)
		case *hsmv1.AgentRequest_Done:
			ack = c.progress(ctx, ag, x.Done.Id, nil, x.Done)
			ack.Done = true
		default:
			ack = &hsmv1.Ack{Errno: int32(syscall.EINVAL), Error: "hsm: unexpected message"}
		}
		c.mu.Lock()
		c.sendLocked(ag, &hsmv1.AgentResponse{Msg: &hsmv1.AgentResponse_Ack{Ack: ack}})
		c.mu.Unlock()
		select {
		case err := <-errc:
			return err
		default:
		}
	}
}

// progress records an agent's progress or completion of action id: EPERM
// if the agent does not own it (never given it, or it timed out and went
// to another), ENOENT if there is no such action, ESTALE if it is not
// running any more.
func (c *Coordinator) progress(ctx context.Context, ag *agent, id uint64, p *hsmv1.Progress, d *hsmv1.Done) *hsmv1.Ack {
	c.mu.Lock()
	defer c.mu.Unlock()
	ack := &hsmv1.Ack{Id: id}
	if !c.mu.leader {
		ack.Errno, ack.Error = int32(syscall.EAGAIN), "hsm: not the active coordinator"
		return ack
	}
	if _, ok := ag.canceled[id]; ok && d != nil {
		// Its canceled attempt ended: the action may go to it again.
		delete(ag.canceled, id)
		c.wake()
	}
	a := c.mu.actions[id]
	switch {
	case a == nil:
		ack.Errno, ack.Error = int32(syscall.ENOENT), fmt.Sprintf("hsm: no action %d", id)
		return ack
	case a.Agent != ag.uuid:
		ack.Errno, ack.Error = int32(syscall.EPERM), fmt.Sprintf("hsm: action %d belongs to agent %q, not %q", id, a.Agent, ag.uuid)
		return ack
	case a.State != hsmv1.ActionState_ACTION_STATE_STARTED:
		ack.Errno, ack.Error = int32(syscall.ESTALE), fmt.Sprintf("hsm: action %d is %v", id, a.State)
		return ack
	}
	old := proto.Clone(a).(*hsmv1.Action)
	now := time.Now().UnixNano()
	a.ChangedUnixNs = now
	if p != nil {
		a.BytesDone, a.BytesTotal = p.BytesDone, p.BytesTotal
		a.DeadlineUnixNs = now + c.activeTimeout.Load() // as set now (SetActiveRequestTimeout)
	} else {
		a.Checksum = d.Checksum
		if d.Errno == 0 {
			a.State = hsmv1.ActionState_ACTION_STATE_SUCCEED
			a.BytesDone = max(a.BytesDone, a.BytesTotal)
		} else {
			a.State, a.Error = hsmv1.ActionState_ACTION_STATE_FAILED, fmt.Sprintf("errno %d: %s", d.Errno, d.Error)
		}
		delete(ag.actions, id)
	}
	if err := c.saveFinishedLocked(ctx, a); err != nil {
		c.mu.actions[id] = old
		ack.Errno, ack.Error = int32(syscall.EAGAIN), err.Error()
		return ack
	}
	switch {
	case d == nil:
	case d.Errno == 0:
		ag.ok++
	default:
		ag.errors++
	}
	if d != nil {
		c.wake()
	}
	return ack
}
