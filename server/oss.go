package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nacrefs/nacre/internal/mmp"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/selftest"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	"github.com/nacrefs/nacre/mds/mdt"
	"github.com/nacrefs/nacre/mgs"
	"github.com/nacrefs/nacre/oss"
	"github.com/nacrefs/nacre/oss/osd"

	// The backends a target directory may name.
	_ "github.com/nacrefs/nacre/oss/osdfile"
)

// osdDir is where a target's OSD backend keeps its store, under the target
// directory.
const osdDir = "osd"

// FormatOST formats dir as an OST (identity and store).
func FormatOST(ctx context.Context, dir string, id TargetIdentity) (TargetIdentity, error) {
	id.Kind = mgs.KindOST
	return Mkfs(dir, id, osdDir, func(store string, id TargetIdentity) error {
		return osd.Format(ctx, id.Backend, store, osd.FormatOptions{Label: id.Label})
	})
}

// ServerConfig configures the storage targets one `nacre server` process
// serves.
type ServerConfig struct {
	// Dirs are the formatted target directories.
	Dirs []string
	// MGSNodes, if not empty, replace the MGS nodes of every target's
	// identity (the files are left as they are): nacre up's targets
	// register with its embedded MGS wherever that listens now, not where
	// it listened when they were formatted.
	MGSNodes []string
	// LNet configures the process's LNet; its NIDs are what the targets
	// register with the MGS.
	LNet lnet.Config
	// CallbackTimeout and EvictTimeout tune the lock servers and exports;
	// 0 means the defaults.
	CallbackTimeout, EvictTimeout time.Duration
	// RecoveryWindow is how long a restarted target waits for the clients
	// of its previous life to reconnect and replay (Lustre's recovery
	// window); 0 means the targets' default (90 s), negative none.
	RecoveryWindow time.Duration
	// ConfigInterval is how often an MDT reads the OST list and pools
	// from the MGS again; 0 means DefaultConfigInterval.
	ConfigInterval time.Duration
	// RestoreReplayBarrier puts each target that set a replay barrier
	// (mdt.*.replay_barrier, obdfilter.*.replay_barrier) back as it was
	// then before serving it (RestoreReplayBarrier): a crash after the
	// barrier lost every later change, and the clients replay them.
	RestoreReplayBarrier bool
	// Params is where the server registers its live parameters and
	// devices for lctl, and which it serves on the process's socket; nil
	// means params.Default, the process's registry.
	Params *params.Registry
	// StatusAddr, if not empty, is where the server serves its status
	// port (HTTP: Prometheus /metrics and its live state for the Admin
	// API); it registers the bound address with its targets so that the
	// MGS finds it. "127.0.0.1:0" picks a port.
	StatusAddr string
	// Registry receives the server's metrics on the status port; nil
	// makes a fresh one with the Go and process collectors.
	Registry *prometheus.Registry
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Storage is a running `nacre server`: an LNet, the OSS serving its OSTs
// and the MDS serving its MDTs (either nil when the process has none), the
// devices and their registrations.
type Storage struct {
	LNet *lnet.LNet
	OSS  *oss.OSS
	MDS  *mdt.Server
	log  *slog.Logger
	devs []osd.Device
	regs []*Registrar
	st   *selftest.Server
	stop chan struct{}
	wg   sync.WaitGroup
	// params are the Storage's entries in the parameter registry.
	params serverParams
	// status is the bound address of the status port, if any, and
	// statusToken the bearer token its changes need.
	status, statusToken string
	// unlock gives back the target locks (lockTarget), once the targets
	// are closed.
	unlock []func()
	// guards are the MMP heartbeats of the targets that have MMP, stopped
	// (their blocks marked clean) once the targets are closed; lost gets
	// the first loss of one (Lost).
	guards  []*mmp.Guard
	guardBy map[string]*mmp.Guard // by target label
	lost    chan error
	// nids are the NIDs the targets registered with (followNIDs).
	nidMu sync.Mutex
	nids  []string
	// devMu guards devs and lostLabels: a loss (abortLost) may come
	// while StartServer still opens the devices.
	devMu      sync.Mutex
	lostLabels map[string]error
}

// aborter is a device that can stop writing at once (osd-file's Abort).
type aborter interface{ Abort(error) }

// abortLost stops every write to the store of the target labelled label,
// which another node serves now: an OST's device turns read-only (Close
// then leaves it as it is). An MDT's store has no such switch: the
// process must stop (Lost).
func (s *Storage) abortLost(label string, err error) {
	s.devMu.Lock()
	defer s.devMu.Unlock()
	if s.lostLabels == nil {
		s.lostLabels = map[string]error{}
	}
	s.lostLabels[label] = err
	for _, d := range s.devs {
		if a, ok := d.(aborter); ok && d.Label() == label {
			a.Abort(err)
		}
	}
}

// lostErr returns the loss of the target labelled label, if it was lost.
func (s *Storage) lostErr(label string) error {
	s.devMu.Lock()
	defer s.devMu.Unlock()
	return s.lostLabels[label]
}

// addDev adds an opened device, aborted at once if its target was lost
// meanwhile.
func (s *Storage) addDev(d osd.Device) {
	s.devMu.Lock()
	defer s.devMu.Unlock()
	s.devs = append(s.devs, d)
	if err := s.lostLabels[d.Label()]; err != nil {
		if a, ok := d.(aborter); ok {
			a.Abort(err)
		}
	}
}

// StartServer opens every target in cfg.Dirs, serves them on LNet and
// registers them with the MGS named in their identities.
func StartServer(ctx context.Context, cfg ServerConfig) (_ *Storage, err error) {
	if len(cfg.Dirs) == 0 {
		return nil, errors.New("server: no target directories")
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	s := &Storage{log: lg, stop: make(chan struct{}), lost: make(chan error, 1)}
	s.params.reg, s.params.since = cfg.Params, time.Now()
	if s.params.reg == nil {
		s.params.reg = params.Default
	}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s.Close(cctx)
		}
	}()
	ids := make([]TargetIdentity, len(cfg.Dirs))
	for i, dir := range cfg.Dirs {
		if ids[i], err = ReadTarget(dir); err != nil {
			return nil, err
		}
		if ids[i].Kind != mgs.KindOST && ids[i].Kind != mgs.KindMDT {
			return nil, fmt.Errorf("server: %s is %s %s; this server runs OSTs and MDTs", dir, ids[i].Kind, ids[i].Label)
		}
		// Before anything touches its store (the replay barrier's restore
		// replaces it): one process per target on this host, then (MMP)
		// one node per target.
		release, err := lockTarget(dir)
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		s.unlock = append(s.unlock, release)
		if len(cfg.MGSNodes) > 0 {
			ids[i].MGSNodes = cfg.MGSNodes
		}
	}
	if err := s.startGuards(ctx, cfg.Dirs, ids); err != nil {
		return nil, err
	}
	if cfg.RestoreReplayBarrier {
		for i, dir := range cfg.Dirs {
			if _, err := os.Stat(filepath.Join(dir, replayBarrierDir)); err == nil {
				if err := restoreReplayBarrier(dir); err != nil {
					return nil, err
				}
				lg.Warn("replay barrier: the target is back as it was at its barrier; later changes are lost, for its clients to replay", "target", ids[i].Label, "dir", dir)
			}
		}
	}
	cfg.LNet.Logger = lg
	if s.LNet, err = lnet.New(ctx, cfg.LNet); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	// Every Nacre server answers lnet_selftest.
	if s.st, err = selftest.Serve(s.LNet); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if s.OSS, err = oss.New(oss.Config{LNet: s.LNet, CallbackTimeout: cfg.CallbackTimeout, EvictTimeout: cfg.EvictTimeout,
		RecoveryWindow: cfg.RecoveryWindow, Logger: lg}); err != nil {
		return nil, err
	}
	if slices.ContainsFunc(ids, func(id TargetIdentity) bool { return id.Kind == mgs.KindOST }) {
		s.registerOSS()
	}
	if slices.ContainsFunc(ids, func(id TargetIdentity) bool { return id.Kind == mgs.KindMDT }) {
		if s.MDS, err = mdt.NewServer(mdt.ServerConfig{LNet: s.LNet, Logger: lg}); err != nil {
			return nil, err
		}
		s.registerMDS()
	}
	if err := s.startStatus(cfg.StatusAddr, cfg.Registry); err != nil {
		return nil, err
	}
	nids := serverNIDs(s.LNet)
	s.setNIDs(nids)
	// OSTs first, so that an MDT's registration finds them in the
	// configuration.
	for i, dir := range cfg.Dirs {
		if ids[i].Kind != mgs.KindOST {
			continue
		}
		if err := s.lostErr(ids[i].Label); err != nil { // lost while the others started
			return nil, err
		}
		dev, err := osd.Open(ctx, ids[i].Backend, filepath.Join(dir, osdDir), osd.OpenOptions{Logger: lg})
		if err != nil {
			return nil, fmt.Errorf("server: %s: %w", dir, err)
		}
		s.addDev(dev)
		o, err := s.OSS.AddOST(dev, ids[i].Label, ids[i].UUID)
		if err != nil {
			return nil, err
		}
		s.registerOST(o, ids[i], dir)
		abs, _ := filepath.Abs(dir)
		reg, err := Register(ctx, ids[i], nids, abs, s.StatusPort(), lg)
		if err != nil {
			return nil, err
		}
		s.regs = append(s.regs, reg)
		lg.Info("serving", "target", ids[i].Label, "dir", dir, "nids", nids)
	}
	for i, dir := range cfg.Dirs {
		if ids[i].Kind != mgs.KindMDT {
			continue
		}
		if err := s.lostErr(ids[i].Label); err != nil {
			return nil, err
		}
		if err := s.startMDT(ctx, cfg, dir, ids[i], nids, lg); err != nil {
			return nil, err
		}
		lg.Info("serving", "target", ids[i].Label, "dir", dir, "nids", nids)
	}
	s.startParams(ids)
	s.wg.Go(s.followNIDs)
	return s, nil
}

func (s *Storage) setNIDs(nids []string) {
	s.nidMu.Lock()
	s.nids = nids
	s.nidMu.Unlock()
}

func (s *Storage) curNIDs() []string {
	s.nidMu.Lock()
	defer s.nidMu.Unlock()
	return s.nids
}

// serverNIDs are the NIDs the node's targets are served at: its NIs but
// 0@lo.
func serverNIDs(ln *lnet.LNet) []string {
	var nids []string
	for _, n := range ln.NIDs() {
		if n.Net.Type != lwire.LO {
			nids = append(nids, n.String())
		}
	}
	return nids
}

// followNIDs registers the targets again whenever the node's NIDs change
// (lnetctl net add/del), until Close: a NID added is where clients mounting
// later find them, one deleted is not handed out any more. (Lustre needs
// lctl replace_nids for that.)
func (s *Storage) followNIDs() {
	stop := s.stop
	for {
		ch := s.LNet.NIChanges()
		select {
		case <-stop:
			return
		case <-ch:
		}
		nids := serverNIDs(s.LNet)
		if slices.Equal(nids, s.curNIDs()) || len(nids) == 0 {
			continue // a link that went and came back; or nothing to serve at
		}
		s.setNIDs(nids)
		for _, r := range s.regs {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := r.SetNIDs(ctx, nids); err != nil {
				s.log.Warn("register again with the node's new NIDs", "target", r.id.Label, "nids", nids, "err", err)
			} else {
				s.log.Info("registered again with the node's new NIDs", "target", r.id.Label, "nids", nids)
			}
			cancel()
		}
	}
}

// Targets returns the names of the targets served: MDTs, then OSTs.
func (s *Storage) Targets() []string {
	var out []string
	if s.MDS != nil {
		for _, m := range s.MDS.MDTs() {
			out = append(out, m.Name())
		}
	}
	if s.OSS != nil {
		for _, o := range s.OSS.OSTs() {
			out = append(out, o.Target().Name())
		}
	}
	return out
}

// Close stops the registrations, the service, the devices and LNet.
func (s *Storage) Close(ctx context.Context) error {
	var err error
	s.closeParams()
	if s.stop != nil {
		close(s.stop)
		s.wg.Wait()
		s.stop = nil
	}
	for _, r := range s.regs {
		r.Close()
	}
	if s.MDS != nil {
		err = errors.Join(err, s.MDS.Close(ctx))
	}
	if s.OSS != nil {
		err = errors.Join(err, s.OSS.Close(ctx))
	}
	for _, d := range s.devs {
		err = errors.Join(err, d.Close())
	}
	if s.st != nil {
		s.st.Close()
	}
	if s.LNet != nil {
		err = errors.Join(err, s.LNet.Close(ctx))
	}
	for _, g := range s.guards {
		err = errors.Join(err, g.Stop(ctx))
	}
	s.guards = nil
	for _, release := range s.unlock {
		release()
	}
	s.unlock = nil
	return err
}

// startGuards takes the targets that have multiple-mount protection for
// this node (mmp.Start), all at once: each may wait for a partner's
// heartbeat. It fails if another node serves any of them.
func (s *Storage) startGuards(ctx context.Context, dirs []string, ids []TargetIdentity) error {
	type started struct {
		g   *mmp.Guard
		err error
	}
	// One refusal is enough: the others stop waiting.
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	res := make([]started, len(dirs))
	for i, dir := range dirs {
		if !ids[i].MMP {
			continue
		}
		label := ids[i].Label
		wg.Go(func() {
			g, err := mmp.Start(gctx, mmp.Config{Dir: dir, Interval: ids[i].MMPInterval, Detail: fmt.Sprintf("pid %d", os.Getpid()),
				Logger: s.log.With("target", label), OnLost: func(err error) {
					err = fmt.Errorf("server: %s: %w", label, err)
					s.abortLost(label, err)
					select {
					case s.lost <- err:
					default:
					}
				}})
			if err != nil {
				cancel()
			}
			res[i] = started{g, err}
		})
	}
	wg.Wait()
	var err error
	for i, r := range res {
		if r.g != nil {
			s.guards = append(s.guards, r.g)
			if s.guardBy == nil {
				s.guardBy = map[string]*mmp.Guard{}
			}
			s.guardBy[ids[i].Label] = r.g
		}
		if r.err != nil && (ctx.Err() != nil || !errors.Is(r.err, context.Canceled)) {
			err = errors.Join(err, fmt.Errorf("server: %s: %w", ids[i].Label, r.err))
		}
	}
	return err
}

// Lost reports the first target this server lost (an error wrapping
// mmp.ErrLost): another node wrote its MMP block, or this server's own
// heartbeat landed so late that a partner may have taken the target (then
// the late write also made the partner give up, and nobody serves it
// until one is started again). Its store may be another node's now: this
// process must stop serving it at once. A lost OST's device is read-only
// already (Close leaves it as it is); an MDT's store has no such switch,
// and Close would still close it, writing to it: nacre server exits
// without closing.
func (s *Storage) Lost() <-chan error { return s.lost }
