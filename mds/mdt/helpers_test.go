package mdt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lnettest"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	"github.com/nacrefs/nacre/mds/mdd"
	"github.com/nacrefs/nacre/oss"
	"github.com/nacrefs/nacre/oss/osd"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"

	_ "github.com/nacrefs/nacre/lnd/lolnd"
	_ "github.com/nacrefs/nacre/lnd/socklnd"
	_ "github.com/nacrefs/nacre/oss/osdfile"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Addresses of the test cluster: the OSS, the MDS, and clients from
// clientBase on.
const (
	ossAddr    = "127.0.0.2"
	mdsAddr    = "127.0.0.3"
	clientBase = 40
	mdtName    = "nacre-MDT0000"
)

func lnetConfig(addr string, port int) lnet.Config {
	cfg := lnet.DefaultConfig()
	cfg.Logger = quiet
	cfg.TransactionTimeout = 5 * time.Second
	nc, err := lnet.ParseNetworks("tcp(" + addr + ")")
	if err != nil {
		panic(err)
	}
	for i := range nc {
		nc[i].Options = map[string]string{"port": strconv.Itoa(port)}
	}
	cfg.Networks = nc
	return cfg
}

func procID(ln *lnet.LNet) lwire.ProcessID {
	return lwire.ProcessID{NID: ln.NIDs()[len(ln.NIDs())-1], PID: ln.PID()}
}

func ostLabel(i int) string { return fmt.Sprintf("nacre-OST%04x", i) }

// openOST formats (if new) and opens an osd-file device in dir.
func openOST(t testing.TB, dir string, i int) osd.Device {
	store := filepath.Join(dir, "osd")
	if _, err := os.Stat(store); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(store, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := osd.Format(context.Background(), "file", store, osd.FormatOptions{Label: ostLabel(i)}); err != nil {
			t.Fatal(err)
		}
	}
	dev, err := osd.Open(context.Background(), "file", store, osd.OpenOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// ossEnv is a real OSS with osd-file OSTs on ossAddr.
type ossEnv struct {
	ln    *lnet.LNet
	oss   *oss.OSS
	id    lwire.ProcessID
	devs  []osd.Device
	dirs  []string
	first int // the index of devs[0]
}

// startOSS starts an OSS with n OSTs on a new LNet on ossAddr; the OSTs
// use dirs where given (a restart), fresh directories otherwise.
func startOSS(t testing.TB, port, n int, dirs []string) *ossEnv {
	return serveOSS(t, lnettest.Start(t, ossAddr, port), 0, n, dirs)
}

// restart serves the OSS's devices again on the same LNet, as a new
// instance: clients' exports are gone.
func (e *ossEnv) restart(t testing.TB) *ossEnv {
	e.close()
	return serveOSS(t, e.ln, e.first, len(e.dirs), e.dirs)
}

// serveOSS serves, on ln, n OSTs with indexes from first on.
func serveOSS(t testing.TB, ln *lnet.LNet, first, n int, dirs []string) *ossEnv {
	s, err := oss.New(oss.Config{LNet: ln, Logger: testLogger(), EvictTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e := &ossEnv{oss: s, id: procID(ln), ln: ln, first: first}
	for i := first; i < first+n; i++ {
		dir := t.TempDir()
		if i-first < len(dirs) {
			dir = dirs[i-first]
		}
		dev := openOST(t, dir, i)
		e.devs, e.dirs = append(e.devs, dev), append(e.dirs, dir)
		if _, err := s.AddOST(dev, ostLabel(i), fmt.Sprintf("ost-%d-uuid", i)); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { e.close() })
	return e
}

func (e *ossEnv) close() {
	if e.oss == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e.oss.Close(ctx)
	for _, d := range e.devs {
		d.Close()
	}
	e.oss = nil
}

// osts lists the OSS's OSTs for an MDT config.
func (e *ossEnv) osts() []OST {
	var out []OST
	for i := e.first; i < e.first+len(e.devs); i++ {
		out = append(out, OST{Index: uint32(i), Name: ostLabel(i), Servers: []lwire.ProcessID{e.id}})
	}
	return out
}

// objectExists asks OST i (in process) whether object f exists.
func (e *ossEnv) objectExists(t testing.TB, i uint32, f fid.FID) bool {
	_, err := e.devs[int(i)-e.first].GetAttr(context.Background(), f)
	if errors.Is(err, osd.ErrNotExist) {
		return false
	}
	if err != nil {
		t.Fatalf("getattr %v on OST%d: %v", f, i, err)
	}
	return true
}

// cluster is an MDS (and maybe an OSS) with clients.
type cluster struct {
	t      testing.TB
	port   int
	ln     *lnet.LNet
	id     lwire.ProcessID
	srv    *Server
	mdt    *MDT
	dir    string
	oss    *ossEnv
	cfg    Config
	faults *ptlrpc.Faults
	nodes  int
}

// newCluster starts an MDS over a fresh (or the given) store directory,
// with an OSS of nOSTs OSTs when nOSTs > 0. tune adjusts the MDT config.
func newCluster(t testing.TB, nOSTs int, tune func(*Config)) *cluster {
	addrs := []string{ossAddr, mdsAddr}
	for i := range 8 {
		addrs = append(addrs, fmt.Sprintf("127.0.0.%d", clientBase+i))
	}
	c := &cluster{t: t, port: lnettest.FreePort(t, addrs...), dir: t.TempDir(), faults: &ptlrpc.Faults{}}
	if nOSTs > 0 {
		c.oss = startOSS(t, c.port, nOSTs, nil)
	}
	c.cfg = Config{Name: mdtName, UUID: "mdt0-uuid", Store: mdd.Config{Dir: filepath.Join(c.dir, "mdt"), Logger: quiet},
		CallbackTimeout: 5 * time.Second, EvictTimeout: time.Minute, SyncInterval: 200 * time.Millisecond}
	if c.oss != nil {
		c.cfg.OSTs = c.oss.osts()
	}
	if tune != nil {
		tune(&c.cfg)
	}
	c.ln = lnettest.Start(t, mdsAddr, c.port)
	c.id = procID(c.ln)
	c.start()
	t.Cleanup(func() { c.stop() })
	return c
}

func (c *cluster) start() {
	t := c.t
	var err error
	if c.srv, err = NewServer(ServerConfig{LNet: c.ln, Logger: testLogger(), Faults: c.faults}); err != nil {
		t.Fatal(err)
	}
	if c.mdt, err = c.srv.AddMDT(c.cfg); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) stop() {
	if c.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.srv.Close(ctx); err != nil {
		c.t.Errorf("close the MDS: %v", err)
	}
	c.srv, c.mdt = nil, nil
}

// check runs the store's fsck.
func (c *cluster) check() {
	c.t.Helper()
	if err := c.mdt.Store().Check(); err != nil {
		c.t.Fatalf("Check: %v", err)
	}
}

// node is one client process: LNet, the lock callback service, a lock
// client, an import to the MDT, its MDC.
type node struct {
	t     testing.TB
	ln    *lnet.LNet
	pc    *ptlrpc.Client
	locks *ldlm.Client
	imp   *ptlrpc.Import
	mdc   *mdc.Client
	root  fid.FID
}

func (c *cluster) client() *node {
	t := c.t
	i := c.nodes
	c.nodes++
	n := &node{t: t, ln: lnettest.Start(t, fmt.Sprintf("127.0.0.%d", clientBase+i), c.port)}
	n.pc = ptlrpc.NewClient(n.ln, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.MDCReplyPortal, Logger: quiet, UUID: fmt.Sprintf("client-%d", i)})
	n.locks = ldlm.NewClient(ldlm.ClientConfig{Logger: quiet})
	cb, err := ptlrpc.NewService(n.ln, ptlrpc.ServiceConfig{Name: "ldlm_cb", RequestPortal: ptlrpc.LDLMCBRequestPortal,
		Handlers: n.locks.Handlers(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	icfg := mdc.ImportConfig(mdtName, c.id)
	icfg.PingInterval, icfg.MinTimeout = -1, 2*time.Second
	icfg.OnEvict = n.locks.ImportEvicted
	if n.imp, err = n.pc.NewImport(icfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.locks.Close()
		n.imp.Close(ctx)
		cb.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.imp.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	n.mdc = mdc.New(n.imp, n.locks)
	if n.root, err = n.mdc.GetRoot(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var root = mdc.Root()

// user is an unprivileged caller.
func user(uid, gid uint32, groups ...uint32) mdc.Cred {
	return mdc.Cred{UID: uid, GID: gid, Groups: groups, Umask: 0o022}
}

func wantErrno(t testing.TB, what string, err error, want syscall.Errno) {
	t.Helper()
	if want == 0 {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

// ostGetattr asks an OST for an object through the OSS's service, as a
// client would (OST_GETATTR).
func ostGetattr(ctx context.Context, imp *ptlrpc.Import, f fid.FID) error {
	body, err := proto.Marshal(&ostv1.ObjectRequest{Fid: &ostv1.FID{Seq: f.Seq, Oid: f.Oid, Ver: f.Ver}})
	if err != nil {
		return err
	}
	_, err = imp.Do(ctx, &ptlrpc.Req{Opcode: wire.OSTGetattr, Body: body})
	return err
}

func testLogger() *slog.Logger {
	if os.Getenv("NACRE_MDT_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return quiet
}
