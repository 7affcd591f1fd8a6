// Package clustertest runs a whole Nacre file system for the tests of the
// layers that use one (the client library, the FUSE mount, tools): an
// embedded etcd, the MGS, and `nacre server` with MDT0 and the OSTs on
// real socklnd over loopback — in the test's process, or with the OSS in a
// child process (the test binary run again) that a test can kill -9 and
// start again.
//
// A test binary that uses child servers calls Main from its TestMain.
package clustertest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/etcdserver/etcdtest"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lnettest"
	"github.com/nacrefs/nacre/server"

	_ "github.com/nacrefs/nacre/lnd/lolnd"
	_ "github.com/nacrefs/nacre/lnd/socklnd"
)

// Addresses: the MDS (and the OSS when it runs in the test's process) and
// the OSS when it runs in a child.
const (
	MDSAddr      = "127.0.0.1"
	ChildOSSAddr = "127.0.0.2"
	// ExtraOSSAddr serves the OSTs AddOST adds.
	ExtraOSSAddr = "127.0.0.3"
	// ChildMDSAddr serves MDT0 when it runs in a child.
	ChildMDSAddr = "127.0.0.4"
	// PartnerOSSAddr is the child OSS's failover partner
	// (Options.Failover, FailOverOSS).
	PartnerOSSAddr = "127.0.0.5"
)

// PartnerMMPInterval is the MMP interval of the OSTs of a cluster with
// Options.Failover: a partner takes them over in two waits of three
// intervals each (after a crash), then starts serving.
const PartnerMMPInterval = 250 * time.Millisecond

// ClientAddr is the address of client i.
func ClientAddr(i int) string { return fmt.Sprintf("127.0.2.%d", 10+i) }

// Quiet drops logs, unless NACRE_TEST_LOG is set (then everything goes
// to stderr: debugging a failed test).
var Quiet = func() *slog.Logger {
	if os.Getenv("NACRE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}()

// Options configure a Cluster.
type Options struct {
	// OSTs is the number of OSTs; 0 means 4.
	OSTs int
	// ChildOSS runs the OSS in a child process (Main must be wired).
	ChildOSS bool
	// ChildMDS runs MDT0 in a child process (Main must be wired); the
	// OSTs are served in the test's process then (unless ChildOSS).
	ChildMDS bool
	// Clients is how many client addresses must be free; 0 means 4.
	Clients int
	// RecoveryWindow is the servers' (see server.ServerConfig); 0 means
	// their default.
	RecoveryWindow time.Duration
	// FSName is the file system's name; "" means "nacre". A test that
	// names its file system to tools that look mounts up by name (lfs
	// fid2path FSNAME) gives it a name no other test mounts.
	FSName string
	// Logger gets the in-process servers' logs; nil means Quiet.
	Logger *slog.Logger
	// Failover formats the OSTs for a failover pair: served by the child
	// OSS (ChildOSSAddr) or its partner (PartnerOSSAddr), with
	// multiple-mount protection (PartnerMMPInterval). FailOverOSS moves
	// them to the partner.
	Failover bool
	// OSTTmpfs, if not 0, puts each OST on a tmpfs of its own of that
	// many bytes (the test must run as root), so that an OST's statfs
	// (lfs df) counts its own data, not the whole host file system's
	// that every OST and every other program shares.
	OSTTmpfs int64
}

// Cluster is a running file system.
type Cluster struct {
	t      testing.TB
	FSName string
	// MGS is the MGS's gRPC address; Port the socklnd port of every node.
	MGS  string
	Port int
	// Gateway is the MGS's HTTP address: REST, /metrics (the cluster's),
	// /dashboard. Every server has a status port (metrics, live state) on
	// its own address, registered with its targets.
	Gateway string
	mgs     *server.MGS
	mds     *server.Storage
	root    string
	extra   *server.Storage
	oss     *server.Storage
	// OSTDirs are the OSTs' target directories.
	OSTDirs []string
	mdtDir  string
	clients int
	// recovery is the servers' recovery window.
	recovery time.Duration
	child    *exec.Cmd // the child OSS
	ossAddr  string    // where it runs: ChildOSSAddr, or PartnerOSSAddr after FailOverOSS
	mdsProc  *exec.Cmd // the child MDS
	// tmpfs is the directory of the OSTs' tmpfs mounts (Options.OSTTmpfs),
	// unmounted and removed by Close.
	tmpfs string
	lg    *slog.Logger
}

// Start starts a file system (named "nacre" unless opts.FSName says
// otherwise) and stops it when the test ends.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.OSTs == 0 {
		opts.OSTs = 4
	}
	if opts.Clients == 0 {
		opts.Clients = 4
	}
	lg := opts.Logger
	if lg == nil {
		lg = Quiet
	}
	c := &Cluster{t: t, FSName: cmp.Or(opts.FSName, "nacre"), lg: lg, recovery: opts.RecoveryWindow, ossAddr: ChildOSSAddr}
	// The node's timeouts are the process's: persistent sys.* parameters a
	// test sets reach them through the servers and mounts here, and must
	// not outlive it (a shorter obd_timeout would have every later test's
	// imports ping more often).
	nodeTimeouts, cbTimeout := ptlrpc.NodeTimeouts(), ldlm.NodeCallbackTimeout()
	t.Cleanup(func() {
		if err := ptlrpc.UpdateNodeTimeouts(func(t *ptlrpc.Timeouts) { *t = nodeTimeouts }); err != nil {
			t.Errorf("restore the node's timeouts: %v", err)
		}
		if err := ldlm.SetNodeCallbackTimeout(cbTimeout); err != nil {
			t.Errorf("restore ldlm_timeout: %v", err)
		}
	})
	ec := etcdtest.Start(t, 1)
	mcfg := server.DefaultMGSConfig()
	mcfg.GRPCAddr, mcfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	mcfg.EtcdEndpoints = ec.Endpoints()
	mcfg.EtcdPrefix = "/clustertest/"
	mcfg.Auth.Disabled = true
	mcfg.Logger = lg
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	if c.mgs, err = server.StartMGS(ctx, mcfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.MGS, c.Gateway = c.mgs.GRPCAddr(), c.mgs.HTTPAddr()
	if _, err := c.mgs.Store().CreateFilesystem(ctx, c.FSName); err != nil {
		t.Fatal(err)
	}
	addrs := []string{MDSAddr, ChildOSSAddr, ExtraOSSAddr, ChildMDSAddr, PartnerOSSAddr}
	for i := range opts.Clients + 1 { // one more for the cluster's own checks
		addrs = append(addrs, ClientAddr(i))
	}
	c.clients = opts.Clients
	c.Port = lnettest.FreePort(t, addrs...)
	root := t.TempDir()
	c.root = root
	ostRoot := root
	if opts.OSTTmpfs > 0 {
		if c.tmpfs, err = os.MkdirTemp("", "clustertest-ost-"); err != nil {
			t.Fatal(err)
		}
		ostRoot = c.tmpfs
	}
	for i := range opts.OSTs {
		dir := filepath.Join(ostRoot, "ost"+strconv.Itoa(i))
		if opts.OSTTmpfs > 0 {
			if err := mountTmpfs(dir, opts.OSTTmpfs); err != nil {
				t.Fatalf("clustertest: OST %d on a tmpfs: %v", i, err)
			}
		}
		id := server.TargetIdentity{FSName: c.FSName, Index: uint32(i), MGSNodes: []string{c.MGS}}
		if opts.Failover {
			id.FailNodes = []string{ChildOSSAddr + "@tcp", PartnerOSSAddr + "@tcp"}
			id.MMP, id.MMPInterval = true, PartnerMMPInterval
		}
		if _, err := server.FormatOST(ctx, dir, id); err != nil {
			t.Fatal(err)
		}
		c.OSTDirs = append(c.OSTDirs, dir)
	}
	mdtDir := filepath.Join(root, "mdt0")
	if _, err := server.FormatMDT(ctx, mdtDir, server.TargetIdentity{FSName: c.FSName, MGSNodes: []string{c.MGS}}); err != nil {
		t.Fatal(err)
	}
	c.mdtDir = mdtDir
	var local []string // what this process serves
	if opts.ChildOSS {
		if err := c.StartOSS(); err != nil {
			t.Fatal(err)
		}
	} else {
		local = append(local, c.OSTDirs...)
	}
	if opts.ChildMDS {
		if err := c.StartMDS(); err != nil {
			t.Fatal(err)
		}
	} else {
		local = append([]string{mdtDir}, local...)
	}
	if len(local) > 0 {
		if c.mds, err = server.StartServer(ctx, c.serverConfig(MDSAddr, local)); err != nil {
			t.Fatal(err)
		}
	}
	if opts.ChildMDS {
		c.waitCreates(ctx, opts.OSTs)
	} else {
		c.waitOSTs(ctx, opts.OSTs)
	}
	return c
}

// waitCreates waits until a file made through a client gets objects on
// every OST (the MDT, in another process, knows them all).
func (c *Cluster) waitCreates(ctx context.Context, n int) {
	fs, err := client.Mount(ctx, c.ClientConfig(c.clients))
	if err != nil {
		c.t.Fatalf("clustertest: %v", err)
	}
	defer fs.Close(context.WithoutCancel(ctx))
	lay := layout.Plain(layout.RAID0{StripeCount: -1, StripeSize: 1 << 20, StripeOffset: -1})
	for i := 0; ctx.Err() == nil; i++ {
		name := ".clustertest-" + strconv.Itoa(i)
		f, _, err := fs.Create(ctx, client.Root(), fs.Root(), name, uint64(syscall.O_RDWR|syscall.O_CREAT), 0o600, &client.CreateOptions{Layout: &lay})
		if err == nil {
			ready := f.Layout() != nil && len(f.Layout().Components[0].Objects) == n
			f.Close(ctx)
			fs.Unlink(ctx, client.Root(), fs.Root(), name)
			if ready {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("clustertest: the MDT never had %d OSTs ready", n)
}

func (c *Cluster) serverConfig(addr string, dirs []string) server.ServerConfig {
	return server.ServerConfig{Dirs: dirs, LNet: lnetConfig(addr, c.Port), Logger: c.lg, ConfigInterval: 5 * time.Second,
		RecoveryWindow: c.recovery, StatusAddr: net.JoinHostPort(addr, "0")}
}

func lnetConfig(addr string, port int) lnet.Config {
	cfg := lnettest.Config(addr, port)
	cfg.TransactionTimeout = 30 * time.Second
	return cfg
}

// waitOSTs waits until the MDT has objects precreated on every OST (a
// create then never waits).
func (c *Cluster) waitOSTs(ctx context.Context, n int) {
	for ctx.Err() == nil {
		ms := c.mds.MDS.MDTs()
		if len(ms) == 1 && ms[0].ReadyOSTs() >= n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("clustertest: the MDT never had %d OSTs ready", n)
}

// AddOST formats one more OST and serves it from another process-local
// server (at ExtraOSSAddr; once per cluster), registered with the MGS as
// any new OST is; it returns the OST's index.
func (c *Cluster) AddOST() uint32 {
	c.t.Helper()
	if c.extra != nil {
		c.t.Fatal("clustertest: AddOST twice")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	idx := uint32(len(c.OSTDirs))
	dir := filepath.Join(c.root, "ost"+strconv.Itoa(int(idx)))
	if _, err := server.FormatOST(ctx, dir, server.TargetIdentity{FSName: c.FSName, Index: idx, MGSNodes: []string{c.MGS}}); err != nil {
		c.t.Fatal(err)
	}
	c.OSTDirs = append(c.OSTDirs, dir)
	var err error
	if c.extra, err = server.StartServer(ctx, c.serverConfig(ExtraOSSAddr, []string{dir})); err != nil {
		c.t.Fatal(err)
	}
	c.waitOSTs(ctx, len(c.OSTDirs))
	return idx
}

// Servers returns the servers running in the test's process (MDT0 and,
// without ChildOSS, the OSTs; and AddOST's).
func (c *Cluster) Servers() []*server.Storage {
	var out []*server.Storage
	if c.mds != nil {
		out = append(out, c.mds)
	}
	if c.extra != nil {
		out = append(out, c.extra)
	}
	return out
}

// Source is the mount source, MGSNID:PORT:/FSNAME.
func (c *Cluster) Source() string {
	_, port, _ := net.SplitHostPort(c.MGS)
	return "127.0.0.1@tcp:" + port + ":/" + c.FSName
}

// OSTObjectBytes sums the sizes of the object files under the OSTs'
// directories (the files of their OSDs' O/ trees): the data the OSTs
// hold, less what the host's file system rounds up.
func (c *Cluster) OSTObjectBytes() int64 {
	var n int64
	for _, d := range c.OSTDirs {
		filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			rel, _ := filepath.Rel(d, p)
			if err == nil && e.Type().IsRegular() && slices.Contains(strings.Split(rel, string(filepath.Separator)), "O") {
				if fi, err := e.Info(); err == nil {
					n += fi.Size()
				}
			}
			return nil
		})
	}
	return n
}

// ClientConfig returns a Config mounting the file system as client i.
func (c *Cluster) ClientConfig(i int) client.Config {
	cfg := client.DefaultConfig()
	if err := cfg.ParseSource(c.Source()); err != nil {
		c.t.Fatal(err)
	}
	cfg.NID = ClientAddr(i) + "@tcp"
	cfg.Port = c.Port
	cfg.Logger = Quiet
	cfg.Data.Logger = Quiet
	cfg.Timeout = time.Minute
	return cfg
}

// Mount mounts the file system as client i and unmounts it when the test
// ends.
func (c *Cluster) Mount(i int) *client.FS {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fs, err := client.Mount(ctx, c.ClientConfig(i))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		fs.Close(ctx)
	})
	return fs
}

// childEnv carries a child OSS's directories and LNet address and port.
const childEnv = "NACRE_CLUSTERTEST_OSS"

type childSpec struct {
	Dirs     []string
	Addr     string
	Port     int
	Recovery time.Duration
}

// IsChild reports whether the test binary was started as a child server:
// a TestMain that does work before running the tests calls Main first
// when it is, so that the child does none of it.
func IsChild() bool { return os.Getenv(childEnv) != "" }

// Main runs a child server when the test binary was started as one, and
// the tests otherwise.
func Main(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

func runChild(spec string) int {
	var s childSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "clustertest child:", err)
		return 2
	}
	ctx := context.Background()
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if os.Getenv("NACRE_TEST_LOG") != "" {
		lg = Quiet
	}
	st, err := server.StartServer(ctx, server.ServerConfig{Dirs: s.Dirs, LNet: lnetConfig(s.Addr, s.Port), Logger: lg,
		RecoveryWindow: s.Recovery, StatusAddr: net.JoinHostPort(s.Addr, "0")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "clustertest child:", err)
		return 1
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case err := <-st.Lost(): // as nacre server: not one more write
		fmt.Fprintln(os.Stderr, "clustertest child:", err)
		return 3
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st.Close(cctx)
	return 0
}

// StartOSS starts the child OSS serving every OST (again, after KillOSS),
// where it ran last.
func (c *Cluster) StartOSS() error {
	cmd, err := c.startChild("OSS", c.OSTDirs, c.ossAddr)
	if err == nil {
		c.child = cmd
	}
	return err
}

// FailOverOSS kills the child OSS with SIGKILL and starts its failover
// partner (Options.Failover) on the OSTs, as an HA manager does when a
// server dies: the partner waits out the OSTs' multiple-mount protection,
// then serves them at PartnerOSSAddr.
func (c *Cluster) FailOverOSS() error {
	c.KillOSS()
	c.ossAddr = PartnerOSSAddr
	return c.StartOSS()
}

// MoveOSS kills the child OSS with SIGKILL, makes its OSTs a failover
// pair's (tunefs --servicenode ChildOSSAddr,PartnerOSSAddr, without MMP)
// and starts it at PartnerOSSAddr: OSTs put behind a pair and failed
// over while clients are mounted, which learn of the partner only from
// the configuration the OSS registers there.
func (c *Cluster) MoveOSS(ctx context.Context) error {
	c.KillOSS()
	for _, d := range c.OSTDirs {
		if _, err := server.Tunefs(ctx, d, func(id *server.TargetIdentity) {
			id.FailNodes = []string{ChildOSSAddr + "@tcp", PartnerOSSAddr + "@tcp"}
		}); err != nil {
			return err
		}
	}
	c.ossAddr = PartnerOSSAddr
	return c.StartOSS()
}

// KillOSS kills the child OSS with SIGKILL.
func (c *Cluster) KillOSS() { killChild(&c.child) }

// PauseOSS stops the child OSS with SIGSTOP: it keeps its connections
// and answers nothing, a server that hangs. Close or KillOSS end it.
func (c *Cluster) PauseOSS() {
	if c.child != nil {
		c.child.Process.Signal(syscall.SIGSTOP)
	}
}

// StartMDS starts the child MDS serving MDT0 (again, after KillMDS).
func (c *Cluster) StartMDS() error {
	cmd, err := c.startChild("MDS", []string{c.mdtDir}, ChildMDSAddr)
	if err == nil {
		c.mdsProc = cmd
	}
	return err
}

// KillMDS kills the child MDS with SIGKILL.
func (c *Cluster) KillMDS() { killChild(&c.mdsProc) }

// ReplayBarrierMDS sets the child MDS's replay barrier
// (mdt.*.replay_barrier, through its parameter socket): FailMDS loses
// every change the MDT makes from now on, which its clients replay.
func (c *Cluster) ReplayBarrierMDS(ctx context.Context) error {
	return setChildParam(ctx, c.mdsProc, "mdt.*.replay_barrier", "1")
}

// ReplayBarrierOSS sets the replay barrier of every OST of the child OSS
// (obdfilter.*.replay_barrier): FailOSS loses every change they make from
// now on, which their clients replay.
func (c *Cluster) ReplayBarrierOSS(ctx context.Context) error {
	return setChildParam(ctx, c.child, "obdfilter.*.replay_barrier", "1")
}

// MDSParam returns the value of the child MDS's parameter name (one, not
// a pattern): mdt.nacre-MDT0000.recovery_status, say.
func (c *Cluster) MDSParam(ctx context.Context, name string) (string, error) {
	return childParam(ctx, c.mdsProc, name)
}

// OSSParam returns the value of the child OSS's parameter name (one, not
// a pattern).
func (c *Cluster) OSSParam(ctx context.Context, name string) (string, error) {
	return childParam(ctx, c.child, name)
}

func childParam(ctx context.Context, p *exec.Cmd, name string) (string, error) {
	r, err := childParams(p)
	if err != nil {
		return "", err
	}
	vs, err := r.Get(ctx, name)
	if err != nil {
		return "", err
	}
	if len(vs) != 1 {
		return "", fmt.Errorf("clustertest: %s: %d values", name, len(vs))
	}
	return vs[0].Value, nil
}

func setChildParam(ctx context.Context, p *exec.Cmd, pattern, value string) error {
	r, err := childParams(p)
	if err != nil {
		return err
	}
	_, err = r.Set(ctx, params.Assignment{Pattern: pattern, Value: value})
	return err
}

// childParams reaches a child server's parameters through its socket.
func childParams(p *exec.Cmd) (*params.Remote, error) {
	if p == nil {
		return nil, errors.New("clustertest: no such child server")
	}
	name := strconv.Itoa(p.Process.Pid) + ".sock"
	for _, dir := range []string{params.RunDir(), params.FallbackRunDir()} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return &params.Remote{Sockets: []string{filepath.Join(dir, name)}}, nil
		}
	}
	return nil, fmt.Errorf("clustertest: the child server's parameter socket %s not found", name)
}

// FailMDS kills the child MDS, puts its MDT back as it was at its replay
// barrier (RestoreMDS), and starts it again.
func (c *Cluster) FailMDS() error {
	c.KillMDS()
	if err := c.RestoreMDS(); err != nil {
		return err
	}
	return c.StartMDS()
}

// FailOSS kills the child OSS, puts its OSTs back as they were at their
// replay barrier (RestoreOSS), and starts it again.
func (c *Cluster) FailOSS() error {
	c.KillOSS()
	if err := c.RestoreOSS(); err != nil {
		return err
	}
	return c.StartOSS()
}

// RestoreOSS puts the OSTs of the child OSS, killed, back as they were at
// their replay barrier (ReplayBarrierOSS), as a crash that lost the
// disk's cache would.
func (c *Cluster) RestoreOSS() error {
	if c.child != nil {
		return errors.New("clustertest: RestoreOSS with the child OSS running")
	}
	for _, d := range c.OSTDirs {
		if err := server.RestoreReplayBarrier(d); err != nil {
			return err
		}
	}
	return nil
}

// RestoreMDS puts the MDT of the child MDS, killed, back as it was at its
// replay barrier (ReplayBarrierMDS), as a crash that lost the disk's
// cache would.
func (c *Cluster) RestoreMDS() error {
	if c.mdsProc != nil {
		return errors.New("clustertest: RestoreMDS with the child MDS running")
	}
	return server.RestoreReplayBarrier(c.mdtDir)
}

func killChild(p **exec.Cmd) {
	if *p != nil {
		(*p).Process.Kill()
		(*p).Wait()
		*p = nil
	}
}

// startChild runs the test binary again as a server of dirs on addr and
// waits for it to say it is ready.
func (c *Cluster) startChild(what string, dirs []string, addr string) (*exec.Cmd, error) {
	spec, _ := json.Marshal(childSpec{Dirs: dirs, Addr: addr, Port: c.Port, Recovery: c.recovery})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	// A test binary that dies (a panic, a timeout) takes its children
	// with it: left running, they hold their ports and the next run's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	buf := make([]byte, 6)
	done := make(chan error, 1)
	go func() { _, err := io.ReadFull(out, buf); done <- err }()
	select {
	case err := <-done:
		if err != nil || string(buf) != "ready\n" {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("clustertest: child %s did not start: %q %v", what, buf, err)
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("clustertest: child %s did not start within a minute", what)
	}
	return cmd, nil
}

// stopChild stops a child with SIGTERM (SIGKILL after 20 s).
func stopChild(p **exec.Cmd) {
	if *p == nil {
		return
	}
	(*p).Process.Signal(syscall.SIGTERM)
	(*p).Process.Signal(syscall.SIGCONT) // a paused one (PauseOSS) takes the SIGTERM
	done := make(chan struct{})
	go func() { (*p).Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		(*p).Process.Kill()
		<-done
	}
	*p = nil
}

// StopMGS stops the MGS (the servers and clients go on without it).
func (c *Cluster) StopMGS() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c.mgs != nil {
		c.mgs.Close(ctx)
		c.mgs = nil
	}
}

// Close stops everything (also run when the test ends): the servers in
// this process first, so that the MDS disconnects from a child OSS still
// alive, then the child, then the MGS.
func (c *Cluster) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stopChild(&c.mdsProc) // while the OSTs it talks to are up
	if c.mds != nil {
		c.mds.Close(ctx)
		c.mds = nil
	}
	if c.extra != nil {
		c.extra.Close(ctx)
		c.extra = nil
	}
	stopChild(&c.child)
	if c.mgs != nil {
		c.mgs.Close(ctx)
		c.mgs = nil
	}
	if c.tmpfs != "" {
		ents, _ := os.ReadDir(c.tmpfs)
		for _, e := range ents {
			d := filepath.Join(c.tmpfs, e.Name())
			if err := unix.Unmount(d, unix.MNT_DETACH); err != nil {
				c.t.Errorf("clustertest: unmount the tmpfs of %s: %v", d, err)
			}
		}
		os.RemoveAll(c.tmpfs)
		c.tmpfs = ""
	}
}

// mountTmpfs mounts a tmpfs of size bytes on dir (made if missing).
func mountTmpfs(dir string, size int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+strconv.FormatInt(size, 10)); err != nil {
		return fmt.Errorf("mount a tmpfs on %s (needs root): %w", dir, err)
	}
	return nil
}
