// Package lnetctl serves the local LNet control service (nacre.lnet.v1.
// LNetControl) of a process running LNet, on a unix socket only its owner
// can open: what `nacre lnetctl` shows and changes. It converts between the
// wire and package lnet; the behaviour lives there.
package lnetctl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nacrefs/nacre/internal/rdmadev"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
	lnetv1 "github.com/nacrefs/nacre/proto/nacre/lnet/v1"
)

// DefaultSocket is where a node serves LNet control unless told otherwise.
const DefaultSocket = "/run/nacre/lnet.sock"

// Server implements lnetv1.LNetControlServer over one LNet.
type Server struct {
	lnetv1.UnimplementedLNetControlServer
	ln *lnet.LNet
}

var _ lnetv1.LNetControlServer = (*Server)(nil)

// New returns a Server for ln.
func New(ln *lnet.LNet) *Server { return &Server{ln: ln} }

// ShowNets implements lnetv1.LNetControlServer (lnetctl net show).
func (s *Server) ShowNets(_ context.Context, req *lnetv1.ShowNetsRequest) (*lnetv1.ShowNetsResponse, error) {
	st := s.ln.Stats()
	out := &lnetv1.ShowNetsResponse{}
	byNet := map[string]*lnetv1.Net{}
	for _, ni := range st.NIs {
		name := ni.NID.Net.String()
		n := byNet[name]
		if n == nil {
			n = &lnetv1.Net{NetType: name}
			byNet[name] = n
			out.Nets = append(out.Nets, n)
		}
		state := "up"
		if ni.Status == wire.NIStatusDown {
			state = "down"
		}
		pni := &lnetv1.NI{Nid: ni.NID.String(), Status: state, Interfaces: interfacesOf(ni.NID)}
		if req.GetVerbose() {
			pni.Statistics = &lnetv1.NIStatistics{SendCount: ni.SendCount, RecvCount: ni.RecvCount, DropCount: ni.DropCount, SendBytes: ni.SendBytes, RecvBytes: ni.RecvBytes}
			pni.Tunables = &lnetv1.Tunables{PeerTimeout: int32(ni.Tunables.PeerTimeout / time.Second), PeerCredits: int32(ni.Tunables.PeerCredits), Credits: int32(ni.Tunables.Credits)}
			pni.HealthValue = int32(ni.Health)
			pni.TxCreditsAvailable, pni.TxCreditsMin, pni.TxQueued = int32(ni.Credits), int32(ni.MinCredits), int32(ni.Queued)
			for _, c := range ni.LND {
				pni.LndStatistics = append(pni.LndStatistics, &lnetv1.LNDCounter{Name: c.Name, Value: c.Value})
			}
		}
		n.LocalNis = append(n.LocalNis, pni)
	}
	if req.GetVerbose() {
		for _, d := range rdmadev.List() {
			out.RdmaDevices = append(out.RdmaDevices, &lnetv1.RDMADevice{Name: d.Name, NetDevices: d.NetDevices})
		}
		if len(out.RdmaDevices) == 0 {
			out.RdmaNote = "no RDMA devices found (/sys/class/infiniband is empty or absent)"
		}
	}
	return out, nil
}

// AddNet implements lnetv1.LNetControlServer (lnetctl net add).
func (s *Server) AddNet(ctx context.Context, req *lnetv1.AddNetRequest) (*lnetv1.AddNetResponse, error) {
	n, err := wire.ParseNet(req.GetNet())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	nc := lnet.NetConfig{Net: n, Interfaces: req.GetInterfaces(), Tunables: lnet.Tunables{
		PeerCredits: int(req.GetPeerCredits()), Credits: int(req.GetCredits()), PeerTimeout: time.Duration(req.GetPeerTimeout()) * time.Second,
	}}
	if req.GetPeerCredits() < 0 || req.GetCredits() < 0 || req.GetPeerTimeout() < 0 {
		return nil, status.Error(codes.InvalidArgument, "credits and timeouts cannot be negative")
	}
	for _, a := range req.GetAddresses() {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "address %q: %v", a, err)
		}
		nc.Addrs = append(nc.Addrs, ip)
	}
	nids, err := s.ln.AddNet(ctx, nc)
	if err != nil {
		return nil, lnetStatus(err)
	}
	return &lnetv1.AddNetResponse{Nids: nidStrings(nids)}, nil
}

// DeleteNet implements lnetv1.LNetControlServer (lnetctl net del).
func (s *Server) DeleteNet(ctx context.Context, req *lnetv1.DeleteNetRequest) (*lnetv1.DeleteNetResponse, error) {
	n, err := wire.ParseNet(req.GetNet())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	nids, err := s.ln.DelNet(ctx, n, req.GetInterfaces())
	if err != nil {
		return nil, lnetStatus(err)
	}
	return &lnetv1.DeleteNetResponse{Nids: nidStrings(nids)}, nil
}

func nidStrings(nids []wire.NID) []string {
	out := make([]string, len(nids))
	for i, n := range nids {
		out[i] = n.String()
	}
	return out
}

// interfacesOf names the OS interfaces holding a NID's address.
func interfacesOf(nid wire.NID) []string {
	if nid.Net.Type == wire.LO {
		return nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []string
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			// The interface whose subnet holds the address: 127.0.0.5 is
			// served by lo (127.0.0.1/8) as the kernel would route it.
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Masked().Contains(nid.Addr) {
				out = append(out, ifc.Name)
			}
		}
	}
	return out
}

// ShowPeers implements lnetv1.LNetControlServer (lnetctl peer show).
func (s *Server) ShowPeers(context.Context, *lnetv1.ShowPeersRequest) (*lnetv1.ShowPeersResponse, error) {
	out := &lnetv1.ShowPeersResponse{}
	for _, p := range s.ln.Peers() {
		pp := &lnetv1.Peer{PrimaryNid: p.Primary.String(), MultiRail: p.MultiRail, Configured: p.Configured}
		for _, ni := range p.NIs {
			pp.PeerNis = append(pp.PeerNis, peerNIProto(ni))
		}
		out.Peers = append(out.Peers, pp)
	}
	return out, nil
}

// AddPeer implements lnetv1.LNetControlServer (lnetctl peer add).
func (s *Server) AddPeer(_ context.Context, req *lnetv1.AddPeerRequest) (*lnetv1.AddPeerResponse, error) {
	primary, nids, err := peerNIDs(req.GetPrimaryNid(), req.GetNids())
	if err != nil {
		return nil, err
	}
	if err := s.ln.AddPeer(primary, nids, !req.GetNonMr()); err != nil {
		return nil, lnetStatus(err)
	}
	return &lnetv1.AddPeerResponse{}, nil
}

// DeletePeer implements lnetv1.LNetControlServer (lnetctl peer del).
func (s *Server) DeletePeer(_ context.Context, req *lnetv1.DeletePeerRequest) (*lnetv1.DeletePeerResponse, error) {
	primary, nids, err := peerNIDs(req.GetPrimaryNid(), req.GetNids())
	if err != nil {
		return nil, err
	}
	if err := s.ln.DelPeer(primary, nids); err != nil {
		return nil, lnetStatus(err)
	}
	return &lnetv1.DeletePeerResponse{}, nil
}

// peerNIDs parses a peer's primary NID and other NIDs.
func peerNIDs(primary string, others []string) (wire.NID, []wire.NID, error) {
	p, err := wire.ParseNID(primary)
	if err != nil {
		return wire.NID{}, nil, status.Errorf(codes.InvalidArgument, "primary NID: %v", err)
	}
	nids := make([]wire.NID, 0, len(others))
	for _, o := range others {
		n, err := wire.ParseNID(o)
		if err != nil {
			return wire.NID{}, nil, status.Errorf(codes.InvalidArgument, "NID: %v", err)
		}
		nids = append(nids, n)
	}
	return p, nids, nil
}

func peerNIProto(ni lnet.PeerNIStats) *lnetv1.PeerNI {
	state := "NA"
	switch ni.State {
	case lnet.PeerUp:
		state = "up"
	case lnet.PeerDown:
		state = "down"
	case lnet.PeerRestarted:
		state = "restarted"
	}
	return &lnetv1.PeerNI{
		Nid: ni.NID.String(), State: state, MaxNiTxCredits: int32(ni.MaxCredits),
		AvailableTxCredits: int32(ni.Credits), MinTxCredits: int32(ni.MinCredits), TxQNumOfBuf: int32(ni.Queued),
		HealthValue: int32(ni.Health), SendCount: ni.SendCount, RecvCount: ni.RecvCount,
	}
}

// ShowStats implements lnetv1.LNetControlServer (lnetctl stats show).
func (s *Server) ShowStats(context.Context, *lnetv1.ShowStatsRequest) (*lnetv1.ShowStatsResponse, error) {
	st := s.ln.Stats()
	out := &lnetv1.Statistics{MsgsAlloc: uint64(st.Pending)}
	for _, ni := range st.NIs {
		out.SendCount += ni.SendCount
		out.RecvCount += ni.RecvCount
		out.DropCount += ni.DropCount
		out.SendLength += ni.SendBytes
		out.RecvLength += ni.RecvBytes
		out.DropLength += ni.DropBytes
		out.Errors += ni.SendErrors
	}
	// The NIs' drops include the router's: each message once.
	out.RouteCount, out.RouteLength = st.Router.RouteCount, st.Router.RouteLength
	return &lnetv1.ShowStatsResponse{Statistics: out}, nil
}

// Ping implements lnetv1.LNetControlServer (lnetctl ping).
func (s *Server) Ping(ctx context.Context, req *lnetv1.PingRequest) (*lnetv1.PingResponse, error) {
	nid, err := wire.ParseNID(req.GetNid())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	ctx, cancel := withTimeout(ctx, req.GetTimeoutMs())
	defer cancel()
	info, rtt, err := s.ln.Ping(ctx, nid)
	if err != nil {
		return nil, lnetStatus(err)
	}
	out := &lnetv1.PingResponse{PrimaryNid: nid.String(), MultiRail: info.Features&wire.PingFeatMultiRail != 0, RttUs: rtt.Microseconds()}
	for _, n := range info.NIDs {
		if n.NID.Net.Type == wire.LO {
			continue // every node has 0@lo; lnetctl does not list it
		}
		out.PeerNis = append(out.PeerNis, n.NID.String())
	}
	return out, nil
}

// Discover implements lnetv1.LNetControlServer (lnetctl discover).
func (s *Server) Discover(ctx context.Context, req *lnetv1.DiscoverRequest) (*lnetv1.DiscoverResponse, error) {
	nid, err := wire.ParseNID(req.GetNid())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	ctx, cancel := withTimeout(ctx, req.GetTimeoutMs())
	defer cancel()
	p, err := s.ln.Discover(ctx, nid)
	if err != nil {
		return nil, lnetStatus(err)
	}
	pp := &lnetv1.Peer{PrimaryNid: p.Primary.String(), MultiRail: p.MultiRail}
	for _, ni := range p.NIs {
		pp.PeerNis = append(pp.PeerNis, peerNIProto(ni))
	}
	return &lnetv1.DiscoverResponse{Peer: pp}, nil
}

// ShowRoutes implements lnetv1.LNetControlServer (lnetctl route show).
func (s *Server) ShowRoutes(context.Context, *lnetv1.ShowRoutesRequest) (*lnetv1.ShowRoutesResponse, error) {
	out := &lnetv1.ShowRoutesResponse{RoutingEnabled: s.ln.RoutingEnabled()}
	for _, r := range s.ln.Routes() {
		state := "down"
		if r.Up {
			state = "up"
		}
		out.Routes = append(out.Routes, &lnetv1.Route{Net: r.Net.String(), Gateway: r.Gateway.String(), Hop: int32(r.Hops), Priority: r.Priority, State: state})
	}
	return out, nil
}

// AddRoute implements lnetv1.LNetControlServer (lnetctl route add).
func (s *Server) AddRoute(_ context.Context, req *lnetv1.AddRouteRequest) (*lnetv1.AddRouteResponse, error) {
	r, err := RouteFromProto(req.GetRoute())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.ln.AddRoute(r); err != nil {
		return nil, lnetStatus(err)
	}
	return &lnetv1.AddRouteResponse{}, nil
}

// ShowGlobals implements lnetv1.LNetControlServer (lnetctl global show).
func (s *Server) ShowGlobals(context.Context, *lnetv1.ShowGlobalsRequest) (*lnetv1.ShowGlobalsResponse, error) {
	return &lnetv1.ShowGlobalsResponse{Globals: globalsToProto(s.ln.Globals())}, nil
}

// SetGlobals implements lnetv1.LNetControlServer (lnetctl set): the
// globals the request holds change, all or none.
func (s *Server) SetGlobals(_ context.Context, req *lnetv1.SetGlobalsRequest) (*lnetv1.SetGlobalsResponse, error) {
	g := s.ln.Globals()
	seconds := func(name string, v float64) (time.Duration, error) {
		if !(v > 0 && v <= float64(math.MaxInt64/int64(time.Second))) {
			return 0, status.Errorf(codes.InvalidArgument, "%s %v: want seconds above 0", name, v)
		}
		return time.Duration(v * float64(time.Second)), nil
	}
	var err error
	if req.Discovery != nil {
		g.Discovery = req.GetDiscovery()
	}
	if req.RetryCount != nil {
		g.RetryCount = int(req.GetRetryCount())
	}
	if req.HealthSensitivity != nil {
		g.HealthSensitivity = int(req.GetHealthSensitivity())
	}
	if req.TransactionTimeout != nil {
		if g.TransactionTimeout, err = seconds("transaction_timeout", req.GetTransactionTimeout()); err != nil {
			return nil, err
		}
	}
	if req.RecoveryInterval != nil {
		if g.RecoveryInterval, err = seconds("recovery_interval", req.GetRecoveryInterval()); err != nil {
			return nil, err
		}
	}
	if err := s.ln.SetGlobals(g); err != nil {
		return nil, lnetStatus(err)
	}
	return &lnetv1.SetGlobalsResponse{Globals: globalsToProto(s.ln.Globals())}, nil
}

func globalsToProto(g lnet.Globals) *lnetv1.Globals {
	return &lnetv1.Globals{Discovery: g.Discovery, RetryCount: int32(g.RetryCount), TransactionTimeout: g.TransactionTimeout.Seconds(),
		HealthSensitivity: int32(g.HealthSensitivity), RecoveryInterval: g.RecoveryInterval.Seconds()}
}

// DeleteRoute implements lnetv1.LNetControlServer (lnetctl route del).
func (s *Server) DeleteRoute(_ context.Context, req *lnetv1.DeleteRouteRequest) (*lnetv1.DeleteRouteResponse, error) {
	n, err := wire.ParseNet(req.GetNet())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	var gw wire.NID
	if req.GetGateway() != "" {
		if gw, err = wire.ParseNID(req.GetGateway()); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	if err := s.ln.DelRoute(n, gw); err != nil {
		if errors.Is(err, lnet.ErrNoRoute) {
			return nil, status.Error(codes.NotFound, err.Error())
		}
		return nil, lnetStatus(err)
	}
	return &lnetv1.DeleteRouteResponse{}, nil
}

// RouteFromProto parses a route given on the wire or the command line.
func RouteFromProto(r *lnetv1.Route) (lnet.Route, error) {
	n, err := wire.ParseNet(r.GetNet())
	if err != nil {
		return lnet.Route{}, err
	}
	gw, err := wire.ParseNID(r.GetGateway())
	if err != nil {
		return lnet.Route{}, err
	}
	return lnet.Route{Net: n, Gateway: gw, Hops: int(r.GetHop()), Priority: r.GetPriority()}, nil
}

func withTimeout(ctx context.Context, ms int64) (context.Context, context.CancelFunc) {
	if ms <= 0 {
		ms = 10_000
	}
	return context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
}

// lnetStatus maps LNet's errors to codes a tool can print.
func lnetStatus(err error) error {
	switch {
	case errors.Is(err, lnet.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, lnet.ErrNoRoute), errors.Is(err, lnet.ErrPeerUnreachable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, lnet.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, lnet.ErrNoPeer), errors.Is(err, lnet.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, lnet.ErrExist):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, lnet.ErrBusy):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, lnet.ErrShutdown):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, lnet.ErrPeerTableFull):
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}

// Listener serves a Server on a unix socket.
type Listener struct {
	srv  *grpc.Server
	path string
	wg   sync.WaitGroup
}

// Listen serves srv on a unix socket at path (mode 0600; a stale socket
// left by a dead process is replaced; a live one is an error).
func Listen(path string, srv *Server, log *slog.Logger) (*Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lnetctl: socket directory: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("lnetctl: %s is in use by another LNet process", path)
	}
	// A stale socket goes; anything else (a path mistyped) stays.
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("lnetctl: %s exists and is not a socket", path)
	}
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("lnetctl: listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("lnetctl: chmod %s: %w", path, err)
	}
	gs := grpc.NewServer()
	lnetv1.RegisterLNetControlServer(gs, srv)
	lst := &Listener{srv: gs, path: path}
	lst.wg.Go(func() {
		if err := gs.Serve(l); err != nil && log != nil {
			log.Error("lnet control socket stopped", "socket", path, "err", err)
		}
	})
	return lst, nil
}

// Close stops serving and removes the socket.
func (l *Listener) Close() {
	l.srv.Stop()
	l.wg.Wait()
	os.Remove(l.path)
}
