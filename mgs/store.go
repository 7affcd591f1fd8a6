package mgs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nacrefs/nacre/internal/errs"
)

// Config configures a Store.
type Config struct {
	// Client is the etcd client; the Store does not close it.
	Client *clientv3.Client
	// Prefix is the key prefix of this cluster, ending in "/".
	Prefix string
	// LeaseTTL is how long a target stays up without a heartbeat.
	LeaseTTL time.Duration
	// RequestTimeout bounds every etcd call, so a lost quorum fails a call
	// with Unavailable instead of hanging it.
	RequestTimeout time.Duration
	Logger         *slog.Logger
}

// DefaultConfig returns the defaults; Client must still be set.
func DefaultConfig() Config {
	return Config{Prefix: "/nacre/", LeaseTTL: 10 * time.Second, RequestTimeout: 5 * time.Second}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("mgs: config: no etcd client")
	case !strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/"):
		return fmt.Errorf("mgs: config: prefix %q must start and end with /", c.Prefix)
	case c.LeaseTTL < 2*time.Second:
		return fmt.Errorf("mgs: config: lease TTL %v is under 2s", c.LeaseTTL)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("mgs: config: request timeout %v must be positive", c.RequestTimeout)
	}
	return nil
}

// Store is the resource database of every filesystem of one cluster, kept in
// etcd under Config.Prefix:
//
//	filesystems/FS          Filesystem
//	targets/FS/OST0003      Target (without its state)
//	live/FS/OST0003         present while the target's lease lives
//	pools/FS/POOL           Pool
//	params/FS.TARGET.PARAM  the value
//
// Every mutation is one etcd transaction guarded by a compare, so concurrent
// MGS instances and concurrent callers never overwrite each other. A Store is
// safe for concurrent use and holds no state of its own beyond its config.
type Store struct {
	cli     *clientv3.Client
	prefix  string
	ttl     time.Duration
	timeout time.Duration
	log     *slog.Logger
}

// New returns a Store over cfg.Client.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{cli: cfg.Client, prefix: cfg.Prefix, ttl: cfg.LeaseTTL, timeout: cfg.RequestTimeout, log: log.With("component", "mgs")}, nil
}

// LeaseTTL is the liveness lease length targets must heartbeat within.
func (s *Store) LeaseTTL() time.Duration { return s.ttl }

// Filesystem is one named filesystem.
type Filesystem struct {
	Name       string    `json:"name"`
	UUID       string    `json:"uuid"`
	CreateTime time.Time `json:"create_time"`
	Revision   int64     `json:"-"`
}

// Target is one registered MDT, OST or MGT.
type Target struct {
	FSName       string   `json:"fsname"`
	Kind         Kind     `json:"kind"`
	Index        uint32   `json:"index"`
	NIDs         []string `json:"nids"`
	FailoverNIDs []string `json:"failover_nids,omitempty"`
	// MovedFrom are the NIDs of the server the target last moved from,
	// when the server serving it does not list them itself (a partner of
	// mkfs --failnode knows only the other partners): kept among the
	// failover NIDs as long as that server registers it.
	MovedFrom []string `json:"moved_from,omitempty"`
	Path      string   `json:"path,omitempty"`
	UUID      string   `json:"uuid"`
	// StatusAddr is the HTTP status port (HOST:PORT) of the server
	// process serving the target, where its live state and metrics are.
	StatusAddr string `json:"status_addr,omitempty"`
	// StatusToken is the bearer token the status port wants for changes
	// (set_param from the admin API); never part of a configuration.
	StatusToken  string    `json:"status_token,omitempty"`
	RegisterTime time.Time `json:"register_time"`
	// Up is true while the target's liveness lease lives; not stored.
	Up       bool  `json:"-"`
	Revision int64 `json:"-"`
}

// Name is the short name, e.g. OST0003.
func (t *Target) Name() string { return TargetName(t.Kind, t.Index) }

// Label is the full label, e.g. nacre-OST0003.
func (t *Target) Label() string { return TargetLabel(t.FSName, t.Kind, t.Index) }

// Pool is a named set of OSTs.
type Pool struct {
	FSName   string   `json:"fsname"`
	Name     string   `json:"name"`
	OSTs     []uint32 `json:"osts"`
	Revision int64    `json:"-"`
}

// Param is one persistent parameter.
type Param struct {
	Name     string
	Value    string
	Revision int64
}

// FSConfig is a consistent snapshot of one filesystem.
type FSConfig struct {
	Filesystem Filesystem
	Targets    []Target
	Pools      []Pool
	Params     []Param // those whose FSNAME pattern matches, in revision order
	Revision   int64
}

func (s *Store) fsKey(fs string) string           { return s.prefix + "filesystems/" + fs }
func (s *Store) targetsPrefix(fs string) string   { return s.prefix + "targets/" + fs + "/" }
func (s *Store) livePrefix(fs string) string      { return s.prefix + "live/" + fs + "/" }
func (s *Store) poolsPrefix(fs string) string     { return s.prefix + "pools/" + fs + "/" }
func (s *Store) paramsPrefix() string             { return s.prefix + "params/" }
func (s *Store) targetKey(fs, name string) string { return s.targetsPrefix(fs) + name }
func (s *Store) liveKey(fs, name string) string   { return s.livePrefix(fs) + name }
func (s *Store) poolKey(fs, pool string) string   { return s.poolsPrefix(fs) + pool }
func (s *Store) paramKey(name string) string      { return s.paramsPrefix() + name }

// uuidKey names the target a UUID is registered as, so that a UUID is
// under one index only (two first registrations racing are told apart
// in the same transaction as their targets' keys).
func (s *Store) uuidKey(fs, uuid string) string { return s.prefix + "uuids/" + fs + "/" + uuid }

// call bounds one etcd round trip by the request timeout.
func (s *Store) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// etcdErr classifies an error from etcd: anything that says "no quorum, no
// leader, no answer" is Unavailable so callers and the gRPC edge can tell a
// sick database from a bad request.
func (s *Store) etcdErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var kind errs.Kind
	switch {
	case errors.Is(err, context.Canceled):
		kind = errs.Canceled
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, rpctypes.ErrNoLeader),
		errors.Is(err, rpctypes.ErrTimeout),
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail),
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost),
		errors.Is(err, rpctypes.ErrLeaderChanged):
		kind = errs.Unavailable
	default:
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded:
			kind = errs.Unavailable
		case codes.Canceled:
			kind = errs.Canceled
		default:
			kind = errs.Internal
		}
	}
	s.log.Warn("etcd call failed", "op", op, "kind", kind.String(), "err", err)
	return errs.Errorf(kind, "mgs: %s: resource database unavailable: %w", op, err)
}

func decode[T any](key string, raw []byte) (T, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, errs.Errorf(errs.Internal, "mgs: corrupt record %s: %w", key, err)
	}
	return v, nil
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("mgs: marshal %T: %v", v, err)) // only plain structs reach here
	}
	return string(b)
}

// CreateFilesystem creates a filesystem. Exist if it is there already.
func (s *Store) CreateFilesystem(ctx context.Context, name string) (Filesystem, error) {
	if err := ValidateFSName(name); err != nil {
		return Filesystem{}, err
	}
	fs := Filesystem{Name: name, UUID: uuid.NewString(), CreateTime: time.Now().UTC().Truncate(time.Second)}
	ctx, cancel := s.call(ctx)
	defer cancel()
	key := s.fsKey(name)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, mustJSON(fs))).
		Commit()
	if err != nil {
		return Filesystem{}, s.etcdErr("create filesystem "+name, err)
	}
	if !resp.Succeeded {
		return Filesystem{}, errs.Errorf(errs.Exist, "filesystem %q already exists", name)
	}
	fs.Revision = resp.Header.Revision
	s.log.Info("filesystem created", "fsname", name, "uuid", fs.UUID)
	return fs, nil
}

// ensureFilesystem creates the filesystem if it is missing and returns it.
func (s *Store) ensureFilesystem(ctx context.Context, name string) (Filesystem, error) {
	fs, err := s.GetFilesystem(ctx, name)
	if errs.Is(err, errs.NotExist) {
		fs, err = s.CreateFilesystem(ctx, name)
		if errs.Is(err, errs.Exist) { // lost a race to another registrant: fine
			return s.GetFilesystem(ctx, name)
		}
	}
	return fs, err
}

// GetFilesystem returns one filesystem. NotExist if there is none.
func (s *Store) GetFilesystem(ctx context.Context, name string) (Filesystem, error) {
	if err := ValidateFSName(name); err != nil {
		return Filesystem{}, err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	key := s.fsKey(name)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return Filesystem{}, s.etcdErr("get filesystem "+name, err)
	}
	if len(resp.Kvs) == 0 {
		return Filesystem{}, errs.Errorf(errs.NotExist, "filesystem %q does not exist", name)
	}
	fs, err := decode[Filesystem](key, resp.Kvs[0].Value)
	fs.Revision = resp.Kvs[0].ModRevision
	return fs, err
}

// ListFilesystems returns every filesystem, sorted by name.
func (s *Store) ListFilesystems(ctx context.Context) ([]Filesystem, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.prefix+"filesystems/", clientv3.WithPrefix())
	if err != nil {
		return nil, s.etcdErr("list filesystems", err)
	}
	out := make([]Filesystem, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		fs, err := decode[Filesystem](string(kv.Key), kv.Value)
		if err != nil {
			return nil, err
		}
		fs.Revision = kv.ModRevision
		out = append(out, fs)
	}
	return out, nil // etcd returns keys sorted
}

// Registration is what a server presents for one of its targets.
type Registration struct {
	FSName       string
	Kind         Kind
	Index        *uint32 // nil: take the lowest free index
	NIDs         []string
	FailoverNIDs []string
	Path         string
	UUID         string // empty: a new target; one is assigned
	StatusAddr   string // HOST:PORT of the server's status port, or empty
	StatusToken  string // the bearer token its changes need
}

// Lease is a target's liveness lease.
type Lease struct {
	ID  clientv3.LeaseID
	TTL time.Duration
}

// maxRegisterAttempts bounds the retries of an index race.
const maxRegisterAttempts = 64

// MaxTargetNIDs bounds a target's NIDs, and its failover NIDs (Lustre's
// MTI_NIDS_MAX).
const MaxTargetNIDs = 32

func (s *Store) validateRegistration(r *Registration) error {
	if err := ValidateFSName(r.FSName); err != nil {
		return err
	}
	if !r.Kind.Valid() {
		return errs.Errorf(errs.Invalid, "target kind %d is not MDT, OST or MGT", uint8(r.Kind))
	}
	if r.Index != nil {
		if err := validateIndex(r.Kind, *r.Index); err != nil {
			return err
		}
	} else if r.Kind == KindMGT {
		zero := uint32(0)
		r.Index = &zero
	}
	if len(r.NIDs) == 0 {
		return errs.Errorf(errs.Invalid, "target of %s has no NIDs", r.FSName)
	}
	// Every client's configuration carries every target's NIDs: without a
	// bound, one server's list could make it too large to fetch, for
	// every mount and registration.
	if len(r.NIDs) > MaxTargetNIDs || len(r.FailoverNIDs) > MaxTargetNIDs {
		return errs.Errorf(errs.Invalid, "target of %s: %d NIDs and %d failover NIDs; the limit is %d each", r.FSName, len(r.NIDs), len(r.FailoverNIDs), MaxTargetNIDs)
	}
	for _, list := range [][]string{r.NIDs, r.FailoverNIDs} {
		for _, n := range list {
			if err := ValidateNID(n); err != nil {
				return err
			}
		}
	}
	if len(r.Path) > 4096 {
		return errs.Errorf(errs.Invalid, "target path is %d bytes; the limit is 4096", len(r.Path))
	}
	if r.StatusAddr != "" && !validHostPort(r.StatusAddr) {
		return errs.Errorf(errs.Invalid, "target status address %.64q: want HOST:PORT", r.StatusAddr)
	}
	if len(r.StatusToken) > 256 {
		return errs.Errorf(errs.Invalid, "target status token of %d bytes; the limit is 256", len(r.StatusToken))
	}
	if r.UUID != "" {
		if _, err := uuid.Parse(r.UUID); err != nil {
			return errs.Errorf(errs.Invalid, "target uuid %q is not a UUID", r.UUID)
		}
	}
	return nil
}

// RegisterTarget adds a target or re-registers a known one (same UUID), and
// gives it a fresh liveness lease. The filesystem is created on first use, as
// Lustre's MGS does on the first registration. Outcomes:
//   - the target with its index and UUID, its lease, and a config snapshot;
//   - Exist: the requested index belongs to a target with another UUID, or
//     the UUID is registered under another index;
//   - Invalid: bad name, kind, index or NID; nothing is written;
//   - Unavailable: etcd did not answer within the request timeout.
func (s *Store) RegisterTarget(ctx context.Context, r Registration) (Target, Lease, FSConfig, error) {
	if err := s.validateRegistration(&r); err != nil {
		return Target{}, Lease{}, FSConfig{}, err
	}
	if _, err := s.ensureFilesystem(ctx, r.FSName); err != nil {
		return Target{}, Lease{}, FSConfig{}, err
	}
	for attempt := 0; attempt < maxRegisterAttempts; attempt++ {
		t, lease, err := s.tryRegister(ctx, r)
		if errs.Is(err, errs.Conflict) {
			continue // someone else took the index we picked; pick again
		}
		if err != nil {
			return Target{}, Lease{}, FSConfig{}, err
		}
		cfg, err := s.GetConfig(ctx, r.FSName)
		if err != nil {
			return Target{}, Lease{}, FSConfig{}, err
		}
		s.log.Info("target registered", "target", t.Label(), "uuid", t.UUID, "nids", t.NIDs, "lease", int64(lease.ID))
		return t, lease, cfg, nil
	}
	return Target{}, Lease{}, FSConfig{}, errs.Errorf(errs.Unavailable, "register %s %s: gave up after %d index races", r.FSName, r.Kind, maxRegisterAttempts)
}

// sameNIDs reports whether a and b hold the same NIDs.
func sameNIDs(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(n string) bool { return !slices.Contains(b, n) })
}

func (s *Store) tryRegister(ctx context.Context, r Registration) (Target, Lease, error) {
	existing, _, err := s.listTargets(ctx, r.FSName)
	if err != nil {
		return Target{}, Lease{}, err
	}
	var prev *Target
	if r.UUID != "" {
		for i := range existing {
			t := &existing[i]
			if t.UUID == r.UUID {
				if t.Kind != r.Kind || (r.Index != nil && *r.Index != t.Index) {
					return Target{}, Lease{}, errs.Errorf(errs.Exist, "uuid %s is already registered as %s", r.UUID, t.Label())
				}
				prev = t
			}
		}
	}
	idx := uint32(0)
	switch {
	case prev != nil:
		idx = prev.Index
	case r.Index != nil:
		idx = *r.Index
		for i := range existing {
			if t := &existing[i]; t.Kind == r.Kind && t.Index == idx {
				return Target{}, Lease{}, errs.Errorf(errs.Exist, "index %d is taken: %s is registered with uuid %s", idx, t.Label(), t.UUID)
			}
		}
	default:
		idx, err = lowestFree(existing, r.Kind)
		if err != nil {
			return Target{}, Lease{}, err
		}
	}

	var movedFrom []string
	switch {
	case prev != nil && slices.ContainsFunc(r.NIDs, func(n string) bool { return slices.Contains(prev.FailoverNIDs, n) }):
		// A failover target moving to a partner: the server it left stays
		// a failover NID (with --failnode only the partners are in the
		// identity), so clients can go back to it. Only that one: what it
		// had before is dropped, so the list stays what the pair is.
		for _, n := range prev.NIDs {
			if !slices.Contains(r.FailoverNIDs, n) && !slices.Contains(r.NIDs, n) {
				movedFrom = append(movedFrom, n)
			}
		}
	case prev != nil && sameNIDs(r.NIDs, prev.NIDs):
		// The same server again (a lost lease, a restart): the server it
		// moved from stays, which its identity does not list.
		movedFrom = prev.MovedFrom
	}
	var failover []string
	for _, n := range slices.Concat(r.FailoverNIDs, movedFrom) {
		if !slices.Contains(r.NIDs, n) && !slices.Contains(failover, n) {
			failover = append(failover, n)
		}
	}
	t := Target{FSName: r.FSName, Kind: r.Kind, Index: idx, NIDs: r.NIDs, FailoverNIDs: failover, MovedFrom: movedFrom, Path: r.Path, UUID: r.UUID,
		StatusAddr: r.StatusAddr, StatusToken: r.StatusToken}
	if t.UUID == "" {
		t.UUID = uuid.NewString()
	}
	t.RegisterTime = time.Now().UTC().Truncate(time.Millisecond)
	key, ukey := s.targetKey(r.FSName, t.Name()), s.uuidKey(r.FSName, t.UUID)
	var guard []clientv3.Cmp
	if prev != nil {
		guard = []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", prev.Revision)}
	} else {
		guard = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(ukey), "=", 0)}
	}

	cctx, cancel := s.call(ctx)
	defer cancel()
	grant, err := s.cli.Grant(cctx, int64(s.ttl/time.Second))
	if err != nil {
		return Target{}, Lease{}, s.etcdErr("grant lease for "+t.Label(), err)
	}
	live := mustJSON(liveRecord{Lease: int64(grant.ID), NIDs: t.NIDs})
	resp, err := s.cli.Txn(cctx).
		If(guard...).
		Then(clientv3.OpPut(key, mustJSON(t)), clientv3.OpPut(ukey, t.Name()), clientv3.OpPut(s.liveKey(r.FSName, t.Name()), live, clientv3.WithLease(grant.ID))).
		Commit()
	if err != nil || !resp.Succeeded {
		s.revoke(grant.ID)
		if err != nil {
			return Target{}, Lease{}, s.etcdErr("register "+t.Label(), err)
		}
		// Another registrant wrote the key (or took the UUID) between our
		// read and our write. Read again: an explicit index or the UUID
		// then reports Exist with the winner.
		return Target{}, Lease{}, errs.Errorf(errs.Conflict, "index %d raced", idx)
	}
	t.Up = true
	t.Revision = resp.Header.Revision
	return t, Lease{ID: grant.ID, TTL: s.ttl}, nil
}

// revoke drops a lease we could not use, best effort.
func (s *Store) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if _, err := s.cli.Revoke(ctx, id); err != nil {
		s.log.Debug("revoke unused lease", "lease", int64(id), "err", err)
	}
}

// validHostPort reports whether s is HOST:PORT and nothing else: the admin
// API and the gateway build http://ADDR/PATH from a status address and
// send it the target's token, so a host holding a path, a query, a
// fragment or userinfo ("10.0.0.9/x#:80") must not reach them. HOST is an
// IP address or a DNS name; PORT a number from 1 to 65535.
func validHostPort(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || len(s) > 256 || host == "" {
		return false
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return !strings.ContainsFunc(host, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_')
	})
}

func lowestFree(ts []Target, k Kind) (uint32, error) {
	used := make(map[uint32]bool, len(ts))
	for _, t := range ts {
		if t.Kind == k {
			used[t.Index] = true
		}
	}
	for i := uint32(0); i <= MaxIndex; i++ {
		if !used[i] {
			if k == KindMGT && i > 0 {
				break
			}
			return i, nil
		}
	}
	return 0, errs.Errorf(errs.Exist, "no free %s index left", k)
}

// liveRecord is the value of a liveness key.
type liveRecord struct {
	Lease int64    `json:"lease"`
	NIDs  []string `json:"nids"`
}

// Heartbeat renews a target's lease. NotExist if the lease is gone (the
// server must register again) or the target now lives under another lease
// (a failover partner took it over).
func (s *Store) Heartbeat(ctx context.Context, fsname string, k Kind, index uint32, id clientv3.LeaseID) (time.Duration, error) {
	if err := ValidateFSName(fsname); err != nil {
		return 0, err
	}
	if !k.Valid() {
		return 0, errs.Errorf(errs.Invalid, "heartbeat: target kind %d is not MDT, OST or MGT", uint8(k))
	}
	if err := validateIndex(k, index); err != nil {
		return 0, err
	}
	name := TargetLabel(fsname, k, index)
	ctx, cancel := s.call(ctx)
	defer cancel()
	lk := s.liveKey(fsname, TargetName(k, index))
	resp, err := s.cli.Get(ctx, lk)
	if err != nil {
		return 0, s.etcdErr("heartbeat "+name, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, errs.Errorf(errs.NotExist, "%s has no live lease; register again", name)
	}
	rec, err := decode[liveRecord](lk, resp.Kvs[0].Value)
	if err != nil {
		return 0, err
	}
	if rec.Lease != int64(id) {
		return 0, errs.Errorf(errs.NotExist, "%s is held by lease %x, not %x; register again", name, rec.Lease, int64(id))
	}
	ka, err := s.cli.KeepAliveOnce(ctx, id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return 0, errs.Errorf(errs.NotExist, "%s: lease %x expired; register again", name, int64(id))
	}
	if err != nil {
		return 0, s.etcdErr("heartbeat "+name, err)
	}
	return time.Duration(ka.TTL) * time.Second, nil
}

// listTargets reads a filesystem's targets with their liveness, both at one
// revision, in one read-only transaction that also checks the filesystem
// exists (NotExist otherwise).
func (s *Store) listTargets(ctx context.Context, fsname string) ([]Target, int64, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.fsKey(fsname), clientv3.WithCountOnly()),
		clientv3.OpGet(s.targetsPrefix(fsname), clientv3.WithPrefix()),
		clientv3.OpGet(s.livePrefix(fsname), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return nil, 0, s.etcdErr("list targets of "+fsname, err)
	}
	if resp.Responses[0].GetResponseRange().Count == 0 {
		return nil, 0, errs.Errorf(errs.NotExist, "filesystem %q does not exist", fsname)
	}
	ts, err := s.decodeTargets(fsname, resp.Responses[1].GetResponseRange().Kvs, resp.Responses[2].GetResponseRange().Kvs)
	return ts, resp.Header.Revision, err
}

func (s *Store) decodeTargets(fsname string, targets, live []*mvccpb.KeyValue) ([]Target, error) {
	up := make(map[string]bool, len(live))
	for _, kv := range live {
		up[strings.TrimPrefix(string(kv.Key), s.livePrefix(fsname))] = true
	}
	out := make([]Target, 0, len(targets))
	for _, kv := range targets {
		t, err := decode[Target](string(kv.Key), kv.Value)
		if err != nil {
			return nil, err
		}
		t.Revision = kv.ModRevision
		t.Up = up[t.Name()]
		out = append(out, t)
	}
	sortTargets(out)
	return out, nil
}

// sortTargets orders MGT, MDTs, OSTs, each by index.
func sortTargets(ts []Target) {
	slices.SortFunc(ts, func(a, b Target) int {
		if a.Kind != b.Kind {
			return cmp.Compare(a.Kind, b.Kind)
		}
		return cmp.Compare(a.Index, b.Index)
	})
}

// ListTargets returns a filesystem's targets with their state. NotExist if
// the filesystem does not exist.
func (s *Store) ListTargets(ctx context.Context, fsname string) ([]Target, error) {
	if err := ValidateFSName(fsname); err != nil {
		return nil, err
	}
	ts, _, err := s.listTargets(ctx, fsname)
	return ts, err
}

// GetTarget returns one target by short name or label.
func (s *Store) GetTarget(ctx context.Context, fsname, name string) (Target, error) {
	if err := ValidateFSName(fsname); err != nil {
		return Target{}, err
	}
	k, idx, err := ParseTargetName(fsname, name)
	if err != nil {
		return Target{}, err
	}
	ts, err := s.ListTargets(ctx, fsname)
	if err != nil {
		return Target{}, err
	}
	for _, t := range ts {
		if t.Kind == k && t.Index == idx {
			return t, nil
		}
	}
	return Target{}, errs.Errorf(errs.NotExist, "target %s is not registered", TargetLabel(fsname, k, idx))
}

// GetConfig returns a consistent snapshot of one filesystem: every part is
// read in one read-only transaction, so at one revision, and a watcher
// starting at Revision+1 misses nothing.
func (s *Store) GetConfig(ctx context.Context, fsname string) (FSConfig, error) {
	if err := ValidateFSName(fsname); err != nil {
		return FSConfig{}, err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(cctx).Then(
		clientv3.OpGet(s.fsKey(fsname)),
		clientv3.OpGet(s.targetsPrefix(fsname), clientv3.WithPrefix()),
		clientv3.OpGet(s.livePrefix(fsname), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.poolsPrefix(fsname), clientv3.WithPrefix()),
		clientv3.OpGet(s.paramsPrefix(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return FSConfig{}, s.etcdErr("get config of "+fsname, err)
	}
	r := func(i int) []*mvccpb.KeyValue { return resp.Responses[i].GetResponseRange().Kvs }
	if len(r(0)) == 0 {
		return FSConfig{}, errs.Errorf(errs.NotExist, "filesystem %q does not exist", fsname)
	}
	cfg := FSConfig{Revision: resp.Header.Revision}
	if cfg.Filesystem, err = decode[Filesystem](s.fsKey(fsname), r(0)[0].Value); err != nil {
		return FSConfig{}, err
	}
	cfg.Filesystem.Revision = r(0)[0].ModRevision
	if cfg.Targets, err = s.decodeTargets(fsname, r(1), r(2)); err != nil {
		return FSConfig{}, err
	}
	if cfg.Pools, err = decodePools(r(3)); err != nil {
		return FSConfig{}, err
	}
	for _, kv := range r(4) {
		name := strings.TrimPrefix(string(kv.Key), s.paramsPrefix())
		if n, err := ParseParamName(name); err == nil && n.MatchesFS(fsname) {
			cfg.Params = append(cfg.Params, Param{Name: name, Value: string(kv.Value), Revision: kv.ModRevision})
		}
	}
	// Later records win, as in Lustre's configuration log: keep write order.
	slices.SortStableFunc(cfg.Params, func(a, b Param) int { return cmp.Compare(a.Revision, b.Revision) })
	return cfg, nil
}

// MemberHealth is one etcd endpoint's answer to a status probe.
type MemberHealth struct {
	Endpoint string
	Healthy  bool
	Err      string
}

// Health reports whether the database serves linearizable reads (a quorum)
// and how each endpoint answers. It never fails; a sick database is a report.
func (s *Store) Health(ctx context.Context) (ok bool, rev int64, members []MemberHealth) {
	for _, ep := range s.cli.Endpoints() {
		cctx, cancel := context.WithTimeout(ctx, s.timeout/2)
		_, err := s.cli.Status(cctx, ep)
		cancel()
		m := MemberHealth{Endpoint: ep, Healthy: err == nil}
		if err != nil {
			m.Err = err.Error()
		}
		members = append(members, m)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.prefix+"health", clientv3.WithCountOnly())
	if err != nil {
		s.log.Warn("health probe failed", "err", err)
		return false, 0, members
	}
	return true, resp.Header.Revision, members
}
