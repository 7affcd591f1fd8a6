// Package clienttest runs what the client's data path talks to, in one
// process, for the tests and examples of client/osc and client/lov: an
// OSS with osd-file OSTs on 127.0.0.2 over socklnd, an MDS-like node on
// 127.0.0.3 that precreates objects and hands out layouts, and client
// nodes on 127.0.0.20 and up, each with its own LNet, PtlRPC client, lock
// client and callback service, page cache and one OSC per OST.
package clienttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nacrefs/nacre/client/osc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lnettest"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	"github.com/nacrefs/nacre/oss"
	"github.com/nacrefs/nacre/oss/osd"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"

	_ "github.com/nacrefs/nacre/lnd/lolnd"   // 0@lo
	_ "github.com/nacrefs/nacre/lnd/socklnd" // tcp
	_ "github.com/nacrefs/nacre/oss/osdfile" // the "file" OSD
)

// Quiet is a logger that discards everything.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Seq is the object sequence the test MDS precreates in.
const Seq = 0x100000400

// Addresses of the nodes.
const (
	ServerAddr = "127.0.0.2"
	MDSAddr    = "127.0.0.3"
)

// NodeAddr is the address of client node i.
func NodeAddr(i int) string { return fmt.Sprintf("127.0.0.%d", 20+i) }

// OSTLabel names OST i.
func OSTLabel(i int) string { return fmt.Sprintf("nacre-OST%04x", i) }

// Options configure a Cluster.
type Options struct {
	// OSTs is the number of OSTs (at least 1).
	OSTs int
	// Dirs are the OSTs' directories, by index; an empty or missing entry
	// gets a new temporary directory.
	Dirs []string
	// Nodes is how many client nodes will be started (their addresses
	// must be free too).
	Nodes int
	// PortBase is where the search for a free port starts; packages whose
	// tests run at once use different bases.
	PortBase int
	// CallbackTimeout is the OSTs' lock callback timeout; 0 means the
	// default.
	CallbackTimeout time.Duration
	// Logger receives the servers' logs; nil means Quiet.
	Logger *slog.Logger
}

// Cluster is the servers: the OSS and the test MDS.
type Cluster struct {
	// Port is the TCP port every node's socklnd uses.
	Port int
	// OSS serves the OSTs; SrvID is its process id.
	OSS   *oss.OSS
	SrvID lwire.ProcessID
	// Devs and Dirs are the OSTs' devices and directories, by index.
	Devs []osd.Device
	Dirs []string

	srv, mds *lnet.LNet
	mdsRPC   *ptlrpc.Client
	mdsImps  []*ptlrpc.Import
	temps    []string
	log      *slog.Logger
	next     atomic.Int32 // OST of the next layout's first stripe
	mu       sync.Mutex
	nodes    []*Node
}

var ports sync.Map // base -> *atomic.Int32

// freePort returns a port free on every address, searching from base.
func freePort(base int, addrs ...string) (int, error) {
	v, _ := ports.LoadOrStore(base, new(atomic.Int32))
	next := v.(*atomic.Int32)
	next.CompareAndSwap(0, int32(base))
	for range 400 {
		port := int(next.Add(1))
		ok := true
		for _, a := range addrs {
			l, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return port, nil
		}
	}
	return 0, errors.New("clienttest: no free port")
}

// StartLNet brings up an LNet with a tcp NI on addr:port.
func StartLNet(addr string, port int) (*lnet.LNet, error) {
	cfg := lnettest.Config(addr, port)
	cfg.Logger = Quiet
	cfg.TransactionTimeout = 10 * time.Second
	return lnet.New(context.Background(), cfg)
}

func closeLNet(ln *lnet.LNet) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln.Close(ctx)
}

// Start starts the OSS and the test MDS.
func Start(opts Options) (_ *Cluster, err error) {
	if opts.OSTs < 1 {
		opts.OSTs = 1
	}
	if opts.PortBase == 0 {
		opts.PortBase = 31000
	}
	lg := opts.Logger
	if lg == nil {
		lg = Quiet
	}
	addrs := []string{ServerAddr, MDSAddr}
	for i := range opts.Nodes {
		addrs = append(addrs, NodeAddr(i))
	}
	c := &Cluster{log: lg}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.Port, err = freePort(opts.PortBase, addrs...); err != nil {
		return nil, err
	}
	if c.srv, err = StartLNet(ServerAddr, c.Port); err != nil {
		return nil, err
	}
	c.SrvID = lwire.ProcessID{NID: c.srv.NIDs()[len(c.srv.NIDs())-1], PID: c.srv.PID()}
	if c.OSS, err = oss.New(oss.Config{LNet: c.srv, Logger: lg, EvictTimeout: time.Minute, CallbackTimeout: opts.CallbackTimeout}); err != nil {
		return nil, err
	}
	for i := range opts.OSTs {
		dir := ""
		if i < len(opts.Dirs) {
			dir = opts.Dirs[i]
		}
		if dir == "" {
			if dir, err = os.MkdirTemp("", "nacre-ost"); err != nil {
				return nil, err
			}
			c.temps = append(c.temps, dir)
		}
		dev, err := openOST(dir, i)
		if err != nil {
			return nil, err
		}
		c.Devs, c.Dirs = append(c.Devs, dev), append(c.Dirs, dir)
		if _, err := c.OSS.AddOST(dev, OSTLabel(i), fmt.Sprintf("ost-%d-uuid", i)); err != nil {
			return nil, err
		}
	}
	if c.mds, err = StartLNet(MDSAddr, c.Port); err != nil {
		return nil, err
	}
	c.mdsRPC = ptlrpc.NewClient(c.mds, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.OSCReplyPortal, Logger: Quiet, UUID: "mds-uuid"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range opts.OSTs {
		imp, err := c.mdsRPC.NewImport(ptlrpc.ImportConfig{Target: OSTLabel(i), Servers: []lwire.ProcessID{c.SrvID},
			Portal: ptlrpc.OSTIOPortal, PingInterval: -1})
		if err != nil {
			return nil, err
		}
		c.mdsImps = append(c.mdsImps, imp)
		if err := imp.Connect(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func openOST(dir string, i int) (osd.Device, error) {
	ctx := context.Background()
	if _, err := os.Stat(filepath.Join(dir, "osd")); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Join(dir, "osd"), 0o755); err != nil {
			return nil, err
		}
		if err := osd.Format(ctx, "file", filepath.Join(dir, "osd"), osd.FormatOptions{Label: OSTLabel(i)}); err != nil {
			return nil, err
		}
	}
	return osd.Open(ctx, "file", filepath.Join(dir, "osd"), osd.OpenOptions{Logger: Quiet})
}

// Close stops the nodes still running, the MDS and the OSS, and removes
// the temporary directories.
func (c *Cluster) Close() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = nil
	c.mu.Unlock()
	for _, n := range nodes {
		n.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, imp := range c.mdsImps {
		imp.Close(ctx)
	}
	if c.mds != nil {
		closeLNet(c.mds)
	}
	if c.OSS != nil {
		c.OSS.Close(ctx)
	}
	for _, d := range c.Devs {
		d.Close()
	}
	if c.srv != nil {
		closeLNet(c.srv)
	}
	for _, d := range c.temps {
		os.RemoveAll(d)
	}
}

// ServerLNet returns the OSS's LNet (for raw LNet baselines).
func (c *Cluster) ServerLNet() *lnet.LNet { return c.srv }

// Precreate makes n objects on OST ost, as the MDS's precreate does.
func (c *Cluster) Precreate(ctx context.Context, ost int, n uint32) ([]fid.FID, error) {
	body, err := ptlrpc.Marshal(&ostv1.CreateRequest{Seq: Seq, Count: n})
	if err != nil {
		return nil, err
	}
	rep, err := c.mdsImps[ost].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTCreate, Body: body})
	if err != nil {
		return nil, fmt.Errorf("precreate on %s: %w", OSTLabel(ost), err)
	}
	var cr ostv1.CreateReply
	if err := ptlrpc.Unmarshal(rep, &cr); err != nil {
		return nil, err
	}
	out := make([]fid.FID, cr.Count)
	for i := range out {
		out[i] = fid.FID{Seq: cr.Seq, Oid: cr.First + uint32(i)}
	}
	return out, nil
}

// Destroy destroys object f on OST ost, as the MDS's destroy log does
// after an unlink.
func (c *Cluster) Destroy(ctx context.Context, ost int, f fid.FID) error {
	body, err := ptlrpc.Marshal(&ostv1.ObjectRequest{Fid: &ostv1.FID{Seq: f.Seq, Oid: f.Oid, Ver: f.Ver}})
	if err != nil {
		return err
	}
	if _, err := c.mdsImps[ost].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTDestroy, Body: body}); err != nil {
		return fmt.Errorf("destroy %v on %s: %w", f, OSTLabel(ost), err)
	}
	return nil
}

// Striping returns an instantiated RAID-0 striping over count OSTs
// (count <= OSTs) of stripe size size, with fresh objects, starting at the
// next OST in turn.
func (c *Cluster) Striping(ctx context.Context, count int, size uint32) (layout.RAID0, error) {
	first := int(c.next.Add(1)-1) % len(c.mdsImps)
	r := layout.RAID0{StripeCount: int32(count), StripeSize: size, StripeOffset: int32(first)}
	for k := range count {
		ost := (first + k) % len(c.mdsImps)
		fs, err := c.Precreate(ctx, ost, 1)
		if err != nil {
			return r, err
		}
		r.Objects = append(r.Objects, layout.Object{OSTIndex: uint32(ost), Object: fs[0]})
	}
	return r, nil
}

// PlainLayout returns a plain layout: count stripes of size bytes.
func (c *Cluster) PlainLayout(ctx context.Context, count int, size uint32) (layout.Layout, error) {
	r, err := c.Striping(ctx, count, size)
	if err != nil {
		return layout.Layout{}, err
	}
	l := layout.Plain(r)
	return l, l.Validate()
}

// Node is one client: its LNet, PtlRPC client, lock client and callback
// service, page cache, and one OSC per OST (by index).
type Node struct {
	// LNet is the node's own LNet.
	LNet *lnet.LNet
	// RPC, Locks and Cache are shared by the node's OSCs.
	RPC   *ptlrpc.Client
	Locks *ldlm.Client
	Cache *osc.Cache
	// OSCs are the node's OSCs, by OST index.
	OSCs []*osc.Client
	cb   *ptlrpc.Service
	once sync.Once
}

// NewNode starts client node i (address NodeAddr(i)) with tunables cfg.
func (c *Cluster) NewNode(i int, cfg osc.Config) (_ *Node, err error) {
	n := &Node{}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.LNet, err = StartLNet(NodeAddr(i), c.Port); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = Quiet
	}
	n.RPC = ptlrpc.NewClient(n.LNet, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.OSCReplyPortal, Logger: Quiet, UUID: fmt.Sprintf("client-%d", i)})
	n.Locks = ldlm.NewClient(ldlm.ClientConfig{Logger: Quiet})
	if n.cb, err = ptlrpc.NewService(n.LNet, ptlrpc.ServiceConfig{Name: "ldlm_cb", RequestPortal: ptlrpc.LDLMCBRequestPortal,
		Handlers: n.Locks.Handlers(), Logger: Quiet}); err != nil {
		return nil, err
	}
	if n.Cache, err = osc.NewCache(cfg); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for k := range c.mdsImps {
		o, err := osc.New(osc.ClientConfig{Index: uint32(k), RPC: n.RPC, Locks: n.Locks, Cache: n.Cache,
			Import: ptlrpc.ImportConfig{Target: OSTLabel(k), Servers: []lwire.ProcessID{c.SrvID}, MinTimeout: 2 * time.Second}})
		if err != nil {
			return nil, err
		}
		n.OSCs = append(n.OSCs, o)
		if err := o.Connect(ctx); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	return n, nil
}

// OSC returns the OSC of OST idx (lov.Targets).
func (n *Node) OSC(idx uint32) (*osc.Client, error) {
	if int(idx) >= len(n.OSCs) {
		return nil, fmt.Errorf("clienttest: no OST %d", idx)
	}
	return n.OSCs[idx], nil
}

// Close stops the node: OSCs (flushing), lock client, callback service,
// LNet.
func (n *Node) Close() {
	n.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, o := range n.OSCs {
			o.Close(ctx)
		}
		if n.Locks != nil {
			n.Locks.Close()
		}
		if n.cb != nil {
			n.cb.Close(ctx)
		}
		if n.LNet != nil {
			closeLNet(n.LNet)
		}
	})
}
