package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nacrefs/nacre/internal/durable"
	"github.com/nacrefs/nacre/internal/mgsnode"
	"github.com/nacrefs/nacre/internal/mmp"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	"github.com/nacrefs/nacre/mgs"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
)

// TargetFile is the file mkfs writes at the top of a target directory: the
// target's identity (Lustre's mountdata / CONFIGS).
const TargetFile = "nacre-target.json"

// DefaultMGSPort is the MGS's gRPC port when an --mgsnode names only a NID.
const DefaultMGSPort = mgsnode.DefaultPort

// TargetIdentity is a formatted target: what `nacre mkfs` writes and
// `nacre server` reads back.
type TargetIdentity struct {
	FSName string   `json:"fsname"`
	Kind   mgs.Kind `json:"kind"`
	Index  uint32   `json:"index"`
	// Label is NAME-OSTnnnn / NAME-MDTnnnn.
	Label string `json:"label"`
	// UUID identifies the target to the MGS across restarts and moves.
	UUID string `json:"uuid"`
	// MGSNodes are the MGS's gRPC addresses (host:port).
	MGSNodes []string `json:"mgsnodes"`
	// Backend names the OSD backend ("file").
	Backend string    `json:"backend"`
	Created time.Time `json:"created"`
	// FailNodes are the NIDs of the servers that may serve the target
	// (mkfs --failnode, --servicenode): a server registers those that are
	// not its own as the target's failover NIDs, which clients try when
	// it does not answer.
	FailNodes []string `json:"failnodes,omitempty"`
	// MMP turns on multiple-mount protection (internal/mmp): a server
	// serving the target rewrites a heartbeat block in its directory
	// every MMPInterval, and a server starting it waits to make sure no
	// other does. On by default with FailNodes, as mkfs.lustre does.
	MMP         bool          `json:"mmp,omitempty"`
	MMPInterval time.Duration `json:"mmp_interval,omitempty"`
}

// ParseMGSNode turns an --mgsnode value into a gRPC address: a NID
// ("192.168.1.5@tcp", port DefaultMGSPort), a NID with a port
// ("192.168.1.5@tcp:9999"), or a plain host:port.
func ParseMGSNode(s string) (string, error) { return mgsnode.Parse(s) }

// Mkfs formats dir as a target: it refuses a directory that is not empty
// (already a target, or something else), has format build the backend's
// store in dir/store for the identity (label, backend) it will write, and
// writes the identity file last, so that a directory holding an identity
// always holds a formatted store. If format fails, what it left is
// removed and dir is empty again for another mkfs.
func Mkfs(dir string, id TargetIdentity, store string, format func(store string, id TargetIdentity) error) (TargetIdentity, error) {
	if err := mgs.ValidateFSName(id.FSName); err != nil {
		return id, err
	}
	if id.Kind != mgs.KindOST && id.Kind != mgs.KindMDT {
		return id, fmt.Errorf("mkfs: kind %v: want OST or MDT", id.Kind)
	}
	if id.Index > mgs.MaxIndex {
		return id, fmt.Errorf("mkfs: index %d over %d", id.Index, mgs.MaxIndex)
	}
	if len(id.MGSNodes) == 0 {
		return id, errors.New("mkfs: no --mgsnode")
	}
	for i, n := range id.MGSNodes {
		a, err := ParseMGSNode(n)
		if err != nil {
			return id, fmt.Errorf("mkfs: %w", err)
		}
		id.MGSNodes[i] = a
	}
	if id.Backend == "" {
		id.Backend = "file"
	}
	if err := checkFailover(&id); err != nil {
		return id, fmt.Errorf("mkfs: %w", err)
	}
	id.Label = mgs.TargetLabel(id.FSName, id.Kind, id.Index)
	id.UUID = uuid.NewString()
	id.Created = time.Now().UTC().Truncate(time.Second)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return id, fmt.Errorf("mkfs %s: %w", dir, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return id, fmt.Errorf("mkfs %s: %w", dir, err)
	}
	if len(ents) > 0 {
		return id, fmt.Errorf("mkfs %s: directory is not empty (already a target? %s)", dir, TargetFile)
	}
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return id, err
	}
	storeDir := filepath.Join(dir, store)
	if err := os.Mkdir(storeDir, 0o755); err != nil {
		return id, fmt.Errorf("mkfs %s: %w", dir, err)
	}
	if err := format(storeDir, id); err != nil {
		if rerr := os.RemoveAll(storeDir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove the store it left: %w", rerr))
		}
		return id, fmt.Errorf("mkfs %s: %w", dir, err)
	}
	if id.MMP {
		if err := mmp.Format(dir, id.MMPInterval); err != nil {
			// Leave dir empty for another mkfs, as a failed format does.
			err = errors.Join(err, os.RemoveAll(storeDir), os.RemoveAll(filepath.Join(dir, mmp.FileName)))
			return id, fmt.Errorf("mkfs %s: %w", dir, err)
		}
	}
	if err := writeIdentity(dir, b); err != nil {
		return id, fmt.Errorf("mkfs %s: %w", dir, err)
	}
	return id, nil
}

// writeIdentity replaces dir's identity file with b, durably.
func writeIdentity(dir string, b []byte) error {
	if err := durable.WriteFile(filepath.Join(dir, TargetFile), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return durable.SyncDir(dir)
}

// checkFailover checks id's service nodes and MMP settings, writing the
// NIDs as LNet does (tcp0 is tcp: what a server compares with its own
// NIDs, and the MGS with those it registered) and giving MMP its default
// interval.
func checkFailover(id *TargetIdentity) error {
	var nodes []string
	for _, n := range id.FailNodes {
		if err := mgs.ValidateNID(n); err != nil {
			return fmt.Errorf("failover node: %w", err)
		}
		if nid, err := lwire.ParseNID(n); err == nil {
			n = nid.String()
		}
		if !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	id.FailNodes = nodes
	if !id.MMP {
		id.MMPInterval = 0
		return nil
	}
	if id.MMPInterval == 0 {
		id.MMPInterval = mmp.DefaultInterval
	}
	if id.MMPInterval < mmp.MinInterval || id.MMPInterval > time.Hour {
		return fmt.Errorf("MMP interval %v: want %v to an hour", id.MMPInterval, mmp.MinInterval)
	}
	return nil
}

// Tunefs changes the failover settings of the stopped target in dir
// (Lustre's tunefs.lustre): change edits its identity (service nodes,
// MMP), which is checked as mkfs checks it and written back; MMP's block
// is written or removed to match. A target this host serves is refused
// (EBUSY); one with MMP is first taken as a server would take it, so one
// another node serves is refused too (mmp.ErrInUse), after the wait.
func Tunefs(ctx context.Context, dir string, change func(*TargetIdentity)) (TargetIdentity, error) {
	old, err := ReadTarget(dir)
	if err != nil {
		return old, err
	}
	release, err := lockTarget(dir)
	if err != nil {
		return old, fmt.Errorf("tunefs: %w", err)
	}
	defer release()
	var g *mmp.Guard
	if old.MMP {
		if g, err = mmp.Start(ctx, mmp.Config{Dir: dir, Interval: old.MMPInterval, Detail: fmt.Sprintf("tunefs, pid %d", os.Getpid())}); err != nil {
			return old, fmt.Errorf("tunefs %s: %w", dir, err)
		}
		defer g.Stop(ctx)
	}
	id := old
	id.FailNodes = slices.Clone(old.FailNodes)
	change(&id)
	if err := checkFailover(&id); err != nil {
		return old, fmt.Errorf("tunefs %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return old, err
	}
	if g != nil {
		// Not a word written to a target a partner took meanwhile.
		if err := g.Held(); err != nil {
			return old, fmt.Errorf("tunefs %s: %w", dir, err)
		}
	}
	if err := writeIdentity(dir, b); err != nil {
		return old, fmt.Errorf("tunefs %s: %w", dir, err)
	}
	if g != nil {
		if err := g.Stop(ctx); err != nil {
			return id, fmt.Errorf("tunefs %s: %w", dir, err)
		}
	}
	// (A clean block records no interval a server uses: one that changes
	// needs no new block.)
	switch {
	case id.MMP && !old.MMP:
		err = mmp.Format(dir, id.MMPInterval)
	case !id.MMP && old.MMP:
		err = os.Remove(filepath.Join(dir, mmp.FileName))
	}
	if err != nil {
		return id, fmt.Errorf("tunefs %s: %w", dir, err)
	}
	return id, nil
}

// ReadTarget reads a formatted target's identity.
func ReadTarget(dir string) (TargetIdentity, error) {
	var id TargetIdentity
	b, err := os.ReadFile(filepath.Join(dir, TargetFile))
	if err != nil {
		return id, fmt.Errorf("target %s: %w (format it with nacre mkfs)", dir, err)
	}
	if err := json.Unmarshal(b, &id); err != nil {
		return id, fmt.Errorf("target %s: %s: %w", dir, TargetFile, err)
	}
	if id.Kind == mgs.KindMGT {
		// Checked before the label: an MGT's (Lustre's "MGS") is none of
		// a file system's, and it is not damaged, only not ours to serve.
		return id, fmt.Errorf("target %s: %s is an MGT (label %q), not served here: nacre server runs OSTs and MDTs; the MGS runs as nacre mgs or nacre up", dir, TargetFile, id.Label)
	}
	if err := mgs.ValidateFSName(id.FSName); err != nil || id.UUID == "" || id.Label != mgs.TargetLabel(id.FSName, id.Kind, id.Index) {
		return id, fmt.Errorf("target %s: %s is damaged (fsname %q, label %q, uuid %q)", dir, TargetFile, id.FSName, id.Label, id.UUID)
	}
	return id, nil
}

// Registrar keeps one target registered with the MGS: it registers at
// start, renews the lease every third of its TTL, and registers again if
// the lease was lost (an MGS or etcd outage longer than the TTL), trying
// each MGS node in turn. Close stops it; the lease then expires and the
// target shows down.
type Registrar struct {
	id     TargetIdentity
	nids   []string
	path   string
	status StatusPort // the server's status port
	log    *slog.Logger
	conns  []*grpc.ClientConn // one per MGS node
	cancel context.CancelFunc
	done   chan struct{}

	regMu  sync.Mutex // one registration at a time
	mu     sync.Mutex // guards nids, cur, lease, ttl, config
	cur    int        // the MGS node that answered last
	lease  int64
	ttl    time.Duration
	config *mgsv1.ClientConfig
}

// Register registers the target at the MGS and keeps it registered;
// status is the HTTP status address of the server process (empty: none).
func Register(ctx context.Context, id TargetIdentity, nids []string, path string, status StatusPort, log *slog.Logger) (*Registrar, error) {
	if log == nil {
		log = slog.Default()
	}
	if len(id.MGSNodes) == 0 {
		return nil, fmt.Errorf("register %s: no MGS node", id.Label)
	}
	r := &Registrar{id: id, nids: nids, path: path, status: status,
		log: log.With("target", id.Label), done: make(chan struct{})}
	for _, a := range id.MGSNodes {
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			r.closeConns()
			return nil, fmt.Errorf("register %s: MGS %s: %w", id.Label, a, err)
		}
		r.conns = append(r.conns, conn)
	}
	if err := r.register(ctx); err != nil {
		r.closeConns()
		return nil, err
	}
	hctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.heartbeat(hctx)
	return r, nil
}

// failoverNIDs returns the failover NIDs a server at nids registers: the
// target's service nodes but its own.
func failoverNIDs(nodes, nids []string) []string {
	var out []string
	for _, n := range nodes {
		if !slices.Contains(nids, n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func (r *Registrar) closeConns() {
	for _, c := range r.conns {
		c.Close()
	}
}

// client returns the MGS client of the node that answered last.
func (r *Registrar) client() (mgsv1.MGSClient, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return mgsv1.NewMGSClient(r.conns[r.cur]), r.cur
}

// FetchConfig reads the file system's configuration from the MGS now
// (GetClientConfig), from the node that answered last.
func (r *Registrar) FetchConfig(ctx context.Context) (*mgsv1.ClientConfig, error) {
	cli, _ := r.client()
	resp, err := cli.GetClientConfig(ctx, &mgsv1.GetClientConfigRequest{Fsname: r.id.FSName})
	if err != nil {
		return nil, fmt.Errorf("%s: read the configuration of %s: %w", r.id.Label, r.id.FSName, err)
	}
	return resp.GetConfig(), nil
}

// Config returns the filesystem configuration the MGS sent at the last
// registration.
func (r *Registrar) Config() *mgsv1.ClientConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.config
}

// SetNIDs registers the target again with nids, the server's NIDs now
// (a net added or deleted with lnetctl): clients that mount from then on,
// and the MDT's, find it there; those connected learn of them from
// LNet's push.
func (r *Registrar) SetNIDs(ctx context.Context, nids []string) error {
	r.mu.Lock()
	r.nids = nids
	r.mu.Unlock()
	return r.register(ctx)
}

func (r *Registrar) register(ctx context.Context) error {
	// One at a time (the heartbeat's, SetNIDs'): the lease kept is the
	// one the MGS holds the target by.
	r.regMu.Lock()
	defer r.regMu.Unlock()
	idx := r.id.Index
	r.mu.Lock()
	nids := r.nids
	r.mu.Unlock()
	failover := failoverNIDs(r.id.FailNodes, nids)
	req := &mgsv1.RegisterTargetRequest{Fsname: r.id.FSName, Kind: mgsv1.TargetKind(r.id.Kind),
		Index: &idx, Nids: nids, FailoverNids: failover, Path: r.path, Uuid: r.id.UUID, StatusAddr: r.status.Addr, StatusToken: r.status.Token}
	_, start := r.client()
	var errs []error
	for i := range r.conns {
		n := (start + i) % len(r.conns)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := mgsv1.NewMGSClient(r.conns[n]).RegisterTarget(cctx, req)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.id.MGSNodes[n], err))
			if c := status.Code(err); c == codes.AlreadyExists || c == codes.InvalidArgument {
				break // the MGS refused us; another node would too
			}
			continue
		}
		ttl := time.Duration(resp.LeaseTtlSeconds) * time.Second
		r.mu.Lock()
		r.cur, r.lease, r.ttl, r.config = n, resp.LeaseId, ttl, resp.Config
		r.mu.Unlock()
		r.log.Info("registered with the MGS", "mgs", r.id.MGSNodes[n], "nids", nids, "lease_ttl", ttl)
		return nil
	}
	return fmt.Errorf("register %s with the MGS: %w", r.id.Label, errors.Join(errs...))
}

func (r *Registrar) heartbeat(ctx context.Context) {
	defer close(r.done)
	for {
		r.mu.Lock()
		every := max(r.ttl/3, 100*time.Millisecond)
		lease := r.lease
		r.mu.Unlock()
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		cli, n := r.client()
		hctx, cancel := context.WithTimeout(ctx, every)
		_, err := cli.Heartbeat(hctx, &mgsv1.HeartbeatRequest{Fsname: r.id.FSName, Kind: mgsv1.TargetKind(r.id.Kind), Index: r.id.Index, LeaseId: lease})
		cancel()
		switch {
		case err == nil || ctx.Err() != nil:
		case status.Code(err) == codes.NotFound:
			r.log.Warn("lease lost, registering again", "mgs", r.id.MGSNodes[n], "err", err)
			if err := r.register(ctx); err != nil {
				r.log.Warn("register again", "err", err)
			}
		default:
			r.log.Warn("heartbeat", "mgs", r.id.MGSNodes[n], "err", err)
			if len(r.conns) > 1 {
				r.mu.Lock()
				r.cur = (r.cur + 1) % len(r.conns)
				r.mu.Unlock()
			}
		}
	}
}

// Close stops the heartbeats.
func (r *Registrar) Close() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
	}
	r.closeConns()
}

// Watch calls apply with the file system's configuration whenever a
// target, its liveness, a pool or a persistent parameter changes (the
// MGS's WatchConfig stream, from the node that answered last), and every
// interval besides, so that a broken stream or a missed event costs at
// most one interval; and up, if not nil, for each target the stream says
// is up (registered, maybe again after a restart). It returns when ctx
// ends.
func (r *Registrar) Watch(ctx context.Context, interval time.Duration, apply func(*mgsv1.ClientConfig), up func(kind mgsv1.TargetKind, idx uint32)) {
	refresh := func() {
		cctx, cancel := context.WithTimeout(ctx, interval)
		defer cancel()
		c, err := r.FetchConfig(cctx)
		if err != nil {
			r.log.Info("read the configuration", "err", err)
			return
		}
		apply(c)
	}
	events := make(chan struct{}, 1)
	go func() {
		for ctx.Err() == nil {
			cli, n := r.client()
			stream, err := cli.WatchConfig(ctx, &mgsv1.WatchConfigRequest{Fsname: r.id.FSName})
			for err == nil {
				var ev *mgsv1.ConfigEvent
				if ev, err = stream.Recv(); err == nil && (ev.GetTarget() != nil || ev.GetLiveness() != nil || ev.GetPool() != nil || ev.GetParam() != nil) {
					if l := ev.GetLiveness(); up != nil && l != nil && ev.GetType() == mgsv1.ConfigEvent_TYPE_PUT && l.GetState() == mgsv1.TargetState_TARGET_STATE_UP {
						up(l.GetKind(), l.GetIndex())
					}
					select {
					case events <- struct{}{}:
					default:
					}
				}
			}
			if ctx.Err() != nil {
				return
			}
			r.log.Info("configuration watch broke", "mgs", r.id.MGSNodes[n], "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-events:
		case <-t.C:
		}
		refresh()
	}
}
