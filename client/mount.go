package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nacrefs/nacre/client/lov"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/client/osc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/lnet"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"

	_ "github.com/nacrefs/nacre/lnd/socklnd" // tcp
)

// FID is a file identifier (internal/fid's).
type FID = fid.FID

// FS is a mounted file system (Lustre's llite super block with its LMV,
// MDC, LOV and OSCs): every POSIX operation by FID, over one MDT import
// and one OSC per OST, with attributes, entries and data cached under
// LDLM locks. Safe for concurrent use.
type FS struct {
	cfg Config
	log *slog.Logger
	ln  *lnet.LNet
	// sharedLNet: ln is Config.LNet, someone else's to stop.
	sharedLNet bool
	rpc        *ptlrpc.Client
	lk         *ldlm.Client
	cb         *ptlrpc.Service
	data       *osc.Cache
	mdc        *mdc.Client
	root       fid.FID
	mgs        []*grpc.ClientConn

	ctx  context.Context // ends at Close
	stop context.CancelFunc
	wg   sync.WaitGroup

	tmu  sync.RWMutex // guards osts, pools, rev
	osts map[uint32]*osc.Client
	rev  int64

	cache  cache
	params clientParams
}

var _ lov.Targets = (*FS)(nil)

// Mount connects to the file system cfg names: it reads the configuration
// from the MGS, starts this client's LNet, connects to the MDT and to
// every OST that is up, and keeps watching the configuration (OSTs added
// later appear without a remount).
func Mount(ctx context.Context, cfg Config) (_ *FS, err error) {
	if len(cfg.MGS) == 0 || cfg.FSName == "" {
		return nil, errors.New("mount: no MGS or file system name")
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Data.MaxPagesPerRPC == 0 {
		d := osc.DefaultConfig()
		d.Logger = cfg.Data.Logger
		cfg.Data = d
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	if cfg.Data.Logger == nil {
		cfg.Data.Logger = lg
	}
	fs := &FS{cfg: cfg, log: lg.With("fs", cfg.FSName), osts: make(map[uint32]*osc.Client)}
	fs.cache.init()
	fs.ctx, fs.stop = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			fs.Close(context.Background())
		}
	}()
	for _, a := range cfg.MGS {
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("mount %s: MGS %s: %w", cfg.FSName, a, err)
		}
		fs.mgs = append(fs.mgs, conn)
	}
	conf, err := fs.fetchConfig(ctx)
	if err != nil {
		return nil, err
	}
	mdt := findTarget(conf, mgsv1.TargetKind_TARGET_KIND_MDT, 0)
	if mdt == nil {
		return nil, fmt.Errorf("mount %s: the file system has no MDT0", cfg.FSName)
	}
	if cfg.LNet != nil {
		fs.ln, fs.sharedLNet = cfg.LNet, true
	} else if err := fs.startLNet(ctx); err != nil {
		return nil, err
	}
	fs.rpc = ptlrpc.NewClient(fs.ln, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.MDCReplyPortal, UUID: uuid.NewString(), Logger: lg})
	fs.lk = ldlm.NewClient(ldlm.ClientConfig{LRUSize: cfg.LRUSize, Logger: lg})
	if fs.cb, err = ptlrpc.NewService(fs.ln, ptlrpc.ServiceConfig{Name: "ldlm_cb", RequestPortal: ptlrpc.LDLMCBRequestPortal,
		Handlers: fs.lk.Handlers(), Logger: lg}); err != nil {
		if errors.Is(err, ptlrpc.ErrPortalTaken) {
			// Another mount's callbacks come to this LNet's portal: one
			// would get the other's.
			return nil, fmt.Errorf("mount %s: the LNet has a mount of its own already: %w", cfg.FSName, err)
		}
		return nil, fmt.Errorf("mount %s: %w", cfg.FSName, err)
	}
	if fs.data, err = osc.NewCache(cfg.Data); err != nil {
		return nil, fmt.Errorf("mount %s: %w", cfg.FSName, err)
	}
	icfg := mdc.ImportConfig(mdt.GetName(), servers(mdt)...)
	// Evicted, the client's MDT locks are gone on the server: they go
	// here too (their hooks drop what they covered) before any new
	// request, so that nothing is filed under them again.
	icfg.OnEvict = func(imp *ptlrpc.Import) {
		fs.lk.ImportEvicted(imp)
		fs.cache.dropAll(fs)
	}
	// An MDT that restarts and takes the client back (its recovery
	// window) gets the client's IBITS locks again, so the caches under
	// them stay valid, and its open files (files unlinked while open stay
	// as orphans, closes find their handles); its kept requests the import
	// replays itself, before.
	icfg.OnRecover = func(ctx context.Context, imp *ptlrpc.Import) error {
		if err := fs.lk.ReplayLocks(ctx, imp); err != nil {
			return err
		}
		return fs.mdc.ReplayOpens(ctx)
	}
	imp, err := fs.rpc.NewImport(icfg)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", cfg.FSName, err)
	}
	fs.mdc = mdc.New(imp, fs.lk)
	cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := imp.Connect(cctx); err != nil {
		return nil, fmt.Errorf("mount %s: connect to %s: %w", cfg.FSName, mdt.GetName(), err)
	}
	if fs.root, err = fs.mdc.GetRoot(cctx); err != nil {
		return nil, fmt.Errorf("mount %s: %w", cfg.FSName, err)
	}
	fs.registerParams(mdt)
	fs.applyConfig(cctx, conf)
	fs.wg.Go(func() { fs.watch(conf.GetRevision() + 1) })
	fs.log.Info("mounted", "nid", fs.ln.NIDs()[len(fs.ln.NIDs())-1], "mdt", mdt.GetName(), "osts", len(fs.osts))
	return fs, nil
}

// Root returns the root directory's FID.
func (fs *FS) Root() FID { return fs.root }

// Config returns the configuration the file system was mounted with.
func (fs *FS) Config() Config { return fs.cfg }

// NID returns this client's NID.
func (fs *FS) NID() lwire.NID { n := fs.ln.NIDs(); return n[len(n)-1] }

// LNet returns the LNet the mount runs on (its own, or Config.LNet), for
// its lnetctl socket.
func (fs *FS) LNet() *lnet.LNet { return fs.ln }

// startLNet brings up the client's LNet on its NID.
func (fs *FS) startLNet(ctx context.Context) error {
	nid := fs.cfg.NID
	if nid == "" {
		a, err := pickAddr(fs.cfg.MGS[0], fs.cfg.Port)
		if err != nil {
			return fmt.Errorf("mount %s: %w (name one with -o nid=ADDR@tcp)", fs.cfg.FSName, err)
		}
		nid = a.String() + "@tcp"
	}
	n, err := lwire.ParseNID(nid)
	if err != nil {
		return fmt.Errorf("mount %s: nid: %w", fs.cfg.FSName, err)
	}
	lcfg := lnet.DefaultConfig()
	lcfg.Logger = fs.log
	nets, err := lnet.ParseNetworks(n.Net.String() + "(" + n.Addr.String() + ")")
	if err != nil {
		return fmt.Errorf("mount %s: nid %s: %w", fs.cfg.FSName, nid, err)
	}
	nets[0].Options = map[string]string{"port": strconv.Itoa(fs.cfg.Port)}
	lcfg.Networks = nets
	if fs.ln, err = lnet.New(ctx, lcfg); err != nil {
		return fmt.Errorf("mount %s: LNet on %s: %w", fs.cfg.FSName, nid, err)
	}
	return nil
}

// pickAddr returns the address this host reaches mgs from; for a loopback
// MGS (a cluster on this host, whose nodes hold 127.0.0.1), the first
// address of 127.0.1.0/24 whose socklnd port is free.
func pickAddr(mgs string, port int) (netip.Addr, error) {
	host, _, err := net.SplitHostPort(mgs)
	if err != nil {
		return netip.Addr{}, err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		c, err := net.Dial("udp", mgs)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("no route to the MGS %s: %w", mgs, err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
	}
	for i := 1; i < 255; i++ {
		a := netip.AddrFrom4([4]byte{127, 0, 1, byte(i)})
		l, err := net.Listen("tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			l.Close()
			return a, nil
		}
	}
	return netip.Addr{}, errors.New("no free loopback address in 127.0.1.0/24")
}

// servers returns the processes serving a target: its NIDs, then its
// failover NIDs.
func servers(t *mgsv1.Target) []lwire.ProcessID {
	var out []lwire.ProcessID
	for _, n := range append(append([]string(nil), t.GetNids()...), t.GetFailoverNids()...) {
		if nid, err := lwire.ParseNID(n); err == nil {
			out = append(out, lwire.ProcessID{NID: nid, PID: lwire.PIDLustre})
		}
	}
	return out
}

func findTarget(c *mgsv1.ClientConfig, kind mgsv1.TargetKind, idx uint32) *mgsv1.Target {
	for _, t := range c.GetTargets() {
		if t.GetKind() == kind && t.GetIndex() == idx {
			return t
		}
	}
	return nil
}

// fetchConfig reads the configuration from the first MGS node that
// answers.
func (fs *FS) fetchConfig(ctx context.Context) (*mgsv1.ClientConfig, error) {
	var errs []error
	for i, conn := range fs.mgs {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := mgsv1.NewMGSClient(conn).GetClientConfig(cctx, &mgsv1.GetClientConfigRequest{Fsname: fs.cfg.FSName})
		cancel()
		if err == nil {
			return resp.GetConfig(), nil
		}
		errs = append(errs, fmt.Errorf("MGS %s: %w", fs.cfg.MGS[i], err))
	}
	return nil, fmt.Errorf("mount %s: read the configuration: %w", fs.cfg.FSName, errors.Join(errs...))
}

// ostConnectWait bounds how long applyConfig waits for the OSTs the MGS
// says are up to connect: one that died since (its lease not yet lapsed)
// must not hold the mount for the whole timeout.
const ostConnectWait = 5 * time.Second

// applyConfig makes an OSC for every OST of c that has none yet, and
// applies c's persistent parameters. Those the MGS says are up it waits
// for a moment to connect, all at once; the others connect when they
// come back, and I/O to them waits for that (up to the timeout), as it
// does for an OST that goes down after the mount. OSTs are never dropped:
// one that goes down keeps its import, which reconnects when it returns.
func (fs *FS) applyConfig(ctx context.Context, c *mgsv1.ClientConfig) {
	var added []string
	var wg sync.WaitGroup
	for _, t := range c.GetTargets() {
		srv := servers(t)
		if len(srv) == 0 {
			continue
		}
		if t.GetKind() == mgsv1.TargetKind_TARGET_KIND_MDT && t.GetIndex() == 0 && fs.mdc != nil {
			fs.follow(fs.mdc.Import(), srv)
		}
		if t.GetKind() != mgsv1.TargetKind_TARGET_KIND_OST {
			continue
		}
		fs.tmu.RLock()
		have := fs.osts[t.GetIndex()]
		fs.tmu.RUnlock()
		if have != nil {
			fs.follow(have.Import(), srv)
			continue
		}
		o, err := osc.New(osc.ClientConfig{Index: t.GetIndex(), RPC: fs.rpc, Locks: fs.lk, Cache: fs.data,
			Import: ptlrpc.ImportConfig{Target: t.GetName(), Servers: srv}})
		if err != nil {
			fs.log.Warn("OSC", "ost", t.GetName(), "err", err)
			continue
		}
		fs.tmu.Lock()
		mine := fs.osts[t.GetIndex()] == nil
		if mine {
			fs.osts[t.GetIndex()] = o
		}
		fs.tmu.Unlock()
		if !mine {
			o.Close(ctx)
			continue
		}
		added = append(added, fs.registerOSC(o, t))
		if t.GetState() != mgsv1.TargetState_TARGET_STATE_UP {
			fs.log.Info("OST down: requests to it wait for it", "ost", t.GetName())
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, ostConnectWait)
			defer cancel()
			if err := o.Connect(cctx); err != nil {
				// The import keeps trying: requests wait for it.
				fs.log.Warn("connect to OST", "ost", t.GetName(), "err", err)
			}
		})
	}
	wg.Wait()
	fs.tmu.Lock()
	fs.rev = max(fs.rev, c.GetRevision())
	fs.tmu.Unlock()
	fs.applyParams(c, added...)
}

// follow has imp connect to the servers the configuration now names
// for its target (a failover node added, a server's NIDs changed) from
// its next connect on, as Lustre's client adds and drops the import's
// connections when its configuration log changes.
func (fs *FS) follow(imp *ptlrpc.Import, srv []lwire.ProcessID) {
	if err := imp.SetServers(srv); err != nil {
		fs.log.Warn("client: the configuration's servers", "target", imp.Target(), "err", err)
	}
}

// watch follows the MGS's configuration stream; each change re-reads the
// configuration and applies it. A broken stream is opened again (after a
// pause), on the next MGS node.
func (fs *FS) watch(from int64) {
	node := 0
	for fs.ctx.Err() == nil {
		cli := mgsv1.NewMGSClient(fs.mgs[node%len(fs.mgs)])
		stream, err := cli.WatchConfig(fs.ctx, &mgsv1.WatchConfigRequest{Fsname: fs.cfg.FSName, StartRevision: from})
		for err == nil {
			var ev *mgsv1.ConfigEvent
			if ev, err = stream.Recv(); err != nil {
				break
			}
			from = ev.GetRevision() + 1
			if l := ev.GetLiveness(); l != nil && ev.GetType() == mgsv1.ConfigEvent_TYPE_PUT && l.GetState() == mgsv1.TargetState_TARGET_STATE_UP {
				fs.targetUp(l.GetKind(), l.GetIndex())
			}
			if ev.GetTarget() == nil && ev.GetLiveness() == nil && ev.GetParam() == nil {
				continue
			}
			c, ferr := fs.fetchConfig(fs.ctx)
			if ferr != nil {
				fs.log.Info("configuration change", "err", ferr)
				continue
			}
			cctx, cancel := context.WithTimeout(fs.ctx, 30*time.Second)
			fs.applyConfig(cctx, c)
			cancel()
		}
		if fs.ctx.Err() != nil {
			return
		}
		fs.log.Info("configuration watch broke; again", "mgs", fs.cfg.MGS[node%len(fs.mgs)], "err", err)
		node++
		// Restart from a fresh configuration: events may have been compacted.
		if c, ferr := fs.fetchConfig(fs.ctx); ferr == nil {
			// The MGS was away: so may the targets have been, which the
			// events missed would have said. Not at every try while it is
			// away (each second): every import would ping as often.
			fs.targetUp(mgsv1.TargetKind_TARGET_KIND_UNSPECIFIED, 0)
			cctx, cancel := context.WithTimeout(fs.ctx, 30*time.Second)
			fs.applyConfig(cctx, c)
			cancel()
			from = c.GetRevision() + 1
		}
		select {
		case <-fs.ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// targetUp has the imports to a target the MGS says has (re)started check
// their connections now (Lustre's imperative recovery): if it restarted
// they reconnect and replay at once, instead of at their next ping, which
// its recovery would wait for while holding the clients back already.
// TARGET_KIND_UNSPECIFIED means every target.
func (fs *FS) targetUp(kind mgsv1.TargetKind, idx uint32) {
	if testNoImperativeRecovery.Load() == fs {
		return
	}
	all := kind == mgsv1.TargetKind_TARGET_KIND_UNSPECIFIED
	if all || kind == mgsv1.TargetKind_TARGET_KIND_MDT {
		fs.mdc.Import().PingNow()
	}
	if !all && kind != mgsv1.TargetKind_TARGET_KIND_OST {
		return
	}
	fs.tmu.RLock()
	defer fs.tmu.RUnlock()
	for i, o := range fs.osts {
		if all || i == idx {
			o.Import().PingNow()
		}
	}
}

// testNoImperativeRecovery, set by tests, is a mount that learns of
// target restarts only by itself (its next request or ping), for tests
// that need one client back after the other.
var testNoImperativeRecovery atomic.Pointer[FS]

// OSC implements lov.Targets.
func (fs *FS) OSC(idx uint32) (*osc.Client, error) {
	fs.tmu.RLock()
	o := fs.osts[idx]
	fs.tmu.RUnlock()
	if o == nil {
		return nil, fmt.Errorf("OST%04x: not in the configuration (or never up): %w", idx, ErrNoTarget)
	}
	return o, nil
}

// OSTs returns the OST indexes the client has OSCs for, ascending.
func (fs *FS) OSTs() []uint32 {
	fs.tmu.RLock()
	defer fs.tmu.RUnlock()
	out := make([]uint32, 0, len(fs.osts))
	for i := range fs.osts {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// ErrNoTarget: a layout names an OST the client has no connection to.
var ErrNoTarget = errors.New("no such target")

// disconnectGrace is how long Close waits for the imports' disconnects
// once the dirty data is written back. An import whose server is gone
// waits for its requests in flight (a DISCONNECT, a ping, a CONNECT),
// which LNet holds up to its transaction timeout, each: stopping LNet
// fails them. Nothing is lost by then, and a DISCONNECT sent reaches a
// live server anyway.
const disconnectGrace = 5 * time.Second

// Close unmounts: it writes back dirty data, closes the open files it
// still has, gives its locks back, disconnects and stops LNet (on an LNet
// it was given, Config.LNet, it ends its own requests instead). It waits
// for servers that are gone only as long as ctx allows for the dirty data
// and the closes, and disconnectGrace for the disconnects, whatever the
// number of targets.
func (fs *FS) Close(ctx context.Context) error {
	if fs.stop != nil {
		fs.stop()
	}
	fs.unregisterParams()
	var (
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	if fs.mdc != nil {
		// Before the import goes, within ctx: the closes it could not
		// send are dropped with the import (the MDT ends the opens of a
		// client that left).
		if err := fs.mdc.FlushCloses(ctx); err != nil {
			fs.log.Warn("client: unmount: opens left open on the MDT", "err", err)
		}
	}
	fs.cache.dropAll(fs)
	fs.tmu.Lock()
	osts := fs.osts
	fs.osts = map[uint32]*osc.Client{}
	fs.tmu.Unlock()
	// Dirty data to every OST at once (each OSC's Close writes back what
	// is left, then disconnects).
	var wg sync.WaitGroup
	for _, o := range osts {
		wg.Go(func() { o.Flush(ctx) })
	}
	wg.Wait()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		var wg sync.WaitGroup
		for _, o := range osts {
			wg.Go(func() { fail(o.Close(ctx)) })
		}
		wg.Wait()
		if fs.lk != nil {
			fs.lk.Close()
		}
		if fs.mdc != nil {
			if err := fs.mdc.Import().Close(ctx); err != nil && !errors.Is(err, ptlrpc.ErrClosed) {
				fail(err)
			}
		}
	}()
	grace := time.NewTimer(disconnectGrace)
	defer grace.Stop()
	select {
	case <-closed:
	case <-grace.C:
		if fs.sharedLNet {
			fs.log.Info("unmount: servers not answering; ending the client's requests")
		} else {
			fs.log.Info("unmount: servers not answering; stopping LNet under their requests")
		}
	case <-ctx.Done():
	}
	if fs.cb != nil {
		fs.cb.Close(ctx)
	}
	switch {
	case fs.sharedLNet && fs.rpc != nil:
		// Not ours to stop: the client ends its own requests the closes
		// may still wait for, and unlinks their MDs.
		if err := fs.rpc.Close(ctx); err != nil {
			fs.log.Info("unmount: requests still held by LNet", "err", err)
		}
	case fs.ln != nil && !fs.sharedLNet:
		// Ends the requests the closes may still wait for.
		fs.ln.Close(ctx)
	}
	select {
	case <-closed:
	case <-ctx.Done():
		fail(fmt.Errorf("unmount %s: %w", fs.cfg.FSName, ctx.Err()))
	}
	for _, c := range fs.mgs {
		c.Close()
	}
	fs.wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return errors.Join(errs...)
}
