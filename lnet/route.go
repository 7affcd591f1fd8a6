package lnet

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nacrefs/nacre/lnet/wire"
)

// This file is the sending side of routing (Lustre's router.c route table
// and lnet_find_route_locked): the routes to remote nets, their gateways
// and the gateways' liveness. Forwarding, the router's side, is in
// router.go.

// MaxHops bounds Route.Hops (LNET_MAX_HOPS).
const MaxHops = 255

// maxRoutes bounds the route table; routes come from administrators, so
// this only stops a runaway script.
const maxRoutes = 4096

// Route says that the nodes of a remote network are reached through a
// gateway: a router on one of this node's networks (lnetctl route add
// --net NET --gateway NID --hop HOPS --priority PRIO).
type Route struct {
	// Net is the remote network.
	Net wire.Net
	// Gateway is the router's NID on a network of this node.
	Gateway wire.NID
	// Hops is the number of routers to cross to reach Net through Gateway,
	// 1 to MaxHops; -1 (or 0) means unknown, which counts as 1.
	Hops int
	// Priority orders routes to one net: lower values are preferred, 0
	// first.
	Priority uint32
}

// String returns the route as lnetctl prints it on one line.
func (r Route) String() string {
	return fmt.Sprintf("%v via %v hops %d priority %d", r.Net, r.Gateway, r.Hops, r.Priority)
}

// validate checks what can be checked without the node's NIs.
func (r *Route) validate() error {
	switch {
	case r.Net.Validate() != nil:
		return fmt.Errorf("%w: route: %w", ErrInvalid, r.Net.Validate())
	case r.Net.Type == wire.LO:
		return fmt.Errorf("%w: route to lo", ErrInvalid)
	case r.Gateway.Validate() != nil || r.Gateway.IsZero():
		return fmt.Errorf("%w: route to %v: bad gateway %v", ErrInvalid, r.Net, r.Gateway)
	case r.Gateway.Net.Type == wire.LO:
		return fmt.Errorf("%w: route to %v: gateway %v is loopback", ErrInvalid, r.Net, r.Gateway)
	case r.Gateway.Net == r.Net:
		return fmt.Errorf("%w: route to %v: gateway %v is on that net", ErrInvalid, r.Net, r.Gateway)
	case r.Hops < -1 || r.Hops > MaxHops:
		return fmt.Errorf("%w: route to %v: hops %d (1..%d, or -1 for unknown)", ErrInvalid, r.Net, r.Hops, MaxHops)
	}
	return nil
}

// RouteInfo is one route and its state, as Routes reports it.
type RouteInfo struct {
	Route
	// Up is true while the gateway answers its pings, says it forwards,
	// no send to it has failed since it last answered, and its last ping
	// did not say that every NI it has on the route's net is down.
	Up bool
}

// route is one entry of the route table. Protected by LNet.net.
type route struct {
	Route
	gw  *gateway
	seq uint64 // selection round robin among equal routes
	// netDown: the gateway's last ping listed NIs on Net and said every
	// one is down (Lustre's avoid_asym_router_failure): it cannot reach
	// Net, however well it answers on ours.
	netDown bool
}

func (r *route) up() bool { return r.gw.up() && !r.netDown }

// gateway is one router that routes go through (lnet_peer with
// lp_rtr_refcount). Protected by LNet.net.
type gateway struct {
	nid  wire.NID
	refs int // routes through it
	// alive: answered its last ping (or was not pinged yet), and no send to
	// it failed since.
	alive bool
	// routing: its last ping did not say routing is disabled.
	routing   bool
	pinging   bool
	nextPing  time.Time
	lastAlive time.Time
	// Counters.
	sendCount, sendBytes, sendErrors uint64
	pings, pingErrors                uint64
}

func (g *gateway) up() bool { return g.alive && g.routing }

// routeScore is what route selection weighs.
type routeScore struct {
	up       bool
	priority uint32 // lower is better
	hops     int    // fewer is better; -1 counts as 1
	seq      uint64 // last picked; lower is better (round robin)
}

// pickRoute returns the index of the best of n routes (lnet_compare_routes):
// among the routes that are up, the lowest priority value, then the fewest
// hops, then the one picked longest ago; ties beyond that go to the lowest
// index. It returns -1 if none is up. It is a pure function so the rules
// can be tested alone.
func pickRoute(n int, score func(i int) routeScore) int {
	best := -1
	var bs routeScore
	for i := range n {
		s := score(i)
		if !s.up {
			continue
		}
		if s.hops < 1 {
			s.hops = 1
		}
		if best >= 0 {
			switch {
			case s.priority != bs.priority:
				if s.priority > bs.priority {
					continue
				}
			case s.hops != bs.hops:
				if s.hops > bs.hops {
					continue
				}
			case s.seq >= bs.seq:
				continue
			}
		}
		best, bs = i, s
	}
	return best
}

// routeLocked chooses the gateway for a message to a remote net and
// advances the round robin.
func (ln *LNet) routeLocked(net wire.Net) (*gateway, error) {
	rs := ln.net.routes[net]
	if len(rs) == 0 {
		return nil, &routeError{dst: wire.NID{Net: net}, why: "no route to the net"}
	}
	i := pickRoute(len(rs), func(i int) routeScore {
		r := rs[i]
		return routeScore{up: r.up(), priority: r.Priority, hops: r.Hops, seq: r.seq}
	})
	if i < 0 {
		return nil, &routeError{dst: wire.NID{Net: net}, why: fmt.Sprintf("all %d routes to %v are down", len(rs), net)}
	}
	rs[i].seq = ln.nextSeqLocked()
	return rs[i].gw, nil
}

// AddRoute adds a route to a remote net (lnetctl route add). The gateway
// must be on one of this node's nets, and the net must not be one of them.
// Adding a route that exists (same net and gateway) updates its hops and
// priority. A new gateway counts as up until its first ping, which goes out
// at once, says otherwise. It fails with an error wrapping ErrInvalid for a
// bad route, or ErrShutdown. It is safe for concurrent use.
func (ln *LNet) AddRoute(r Route) error {
	if r.Hops == 0 {
		r.Hops = -1
	}
	if err := r.validate(); err != nil {
		return err
	}
	ln.net.Lock()
	defer ln.net.Unlock()
	if ln.net.closed {
		return ErrShutdown
	}
	// Under ln.net: DelNet takes a net away under it, once no route's
	// gateway is on it.
	if len(ln.netNIs(r.Gateway.Net)) == 0 {
		return fmt.Errorf("%w: route to %v: gateway %v is not on a net of this node", ErrInvalid, r.Net, r.Gateway)
	}
	if len(ln.netNIs(r.Net)) > 0 {
		return fmt.Errorf("%w: route to %v: this node is on that net", ErrInvalid, r.Net)
	}
	if ln.isLocal(r.Gateway) {
		return fmt.Errorf("%w: route to %v: gateway %v is this node", ErrInvalid, r.Net, r.Gateway)
	}
	for _, old := range ln.net.routes[r.Net] {
		if old.Gateway == r.Gateway {
			old.Hops, old.Priority = r.Hops, r.Priority
			return nil
		}
	}
	if ln.net.nroutes >= maxRoutes {
		return fmt.Errorf("%w: route to %v: already %d routes", ErrInvalid, r.Net, maxRoutes)
	}
	gw := ln.net.gateways[r.Gateway]
	if gw == nil {
		gw = &gateway{nid: r.Gateway, alive: true, routing: true, nextPing: time.Now()}
		ln.net.gateways[r.Gateway] = gw
	}
	gw.refs++
	ln.net.routes[r.Net] = append(ln.net.routes[r.Net], &route{Route: r, gw: gw})
	ln.net.nroutes++
	ln.log.Info("route added", "net", r.Net, "gateway", r.Gateway, "hops", r.Hops, "priority", r.Priority)
	return nil
}

// DelRoute removes the route to net through gw, or every route to net if
// gw is zero (lnetctl route del). Messages already on their way through the
// gateway go on. It fails with an error wrapping ErrNoRoute if no route
// matched. It is safe for concurrent use.
func (ln *LNet) DelRoute(net wire.Net, gw wire.NID) error {
	ln.net.Lock()
	defer ln.net.Unlock()
	rs := ln.net.routes[net]
	n := 0
	kept := rs[:0]
	for _, r := range rs {
		if !gw.IsZero() && r.Gateway != gw {
			kept = append(kept, r)
			continue
		}
		n++
		ln.net.nroutes--
		if r.gw.refs--; r.gw.refs == 0 {
			delete(ln.net.gateways, r.gw.nid)
		}
		ln.log.Info("route deleted", "net", r.Net, "gateway", r.Gateway)
	}
	clear(rs[len(kept):])
	if len(kept) == 0 {
		delete(ln.net.routes, net)
	} else {
		ln.net.routes[net] = kept
	}
	if n == 0 {
		if gw.IsZero() {
			return fmt.Errorf("%w: no route to %v to delete", ErrNoRoute, net)
		}
		return fmt.Errorf("%w: no route to %v via %v to delete", ErrNoRoute, net, gw)
	}
	return nil
}

// Routes returns the route table, sorted by net, then priority, hops and
// gateway. It is safe for concurrent use; a snapshot.
func (ln *LNet) Routes() []RouteInfo {
	ln.net.Lock()
	out := make([]RouteInfo, 0, ln.net.nroutes)
	for _, rs := range ln.net.routes {
		for _, r := range rs {
			out = append(out, RouteInfo{Route: r.Route, Up: r.up()})
		}
	}
	ln.net.Unlock()
	slices.SortFunc(out, func(a, b RouteInfo) int {
		if c := compareNet(a.Net, b.Net); c != 0 {
			return c
		}
		if a.Priority != b.Priority {
			return cmp.Compare(a.Priority, b.Priority)
		}
		if a.Hops != b.Hops {
			return cmp.Compare(a.Hops, b.Hops)
		}
		return compareNID(a.Gateway, b.Gateway)
	})
	return out
}

// RoutingEnabled reports whether this node forwards messages for others
// (Config.Routing). It is what pings of this node advertise.
func (ln *LNet) RoutingEnabled() bool { return ln.cfg.Routing }

// routeSendLocked records the outcome of a send to a gateway. A send that
// failed on the connection marks the gateway down until a ping answers;
// its next ping goes at once.
func (ln *LNet) routeSendLocked(m *msg, err error) {
	gw := m.gw
	if err == nil {
		gw.sendCount++
		gw.sendBytes += uint64(m.lm.Hdr.PayloadLen)
		return
	}
	gw.sendErrors++
	if !errors.Is(err, ErrConnReset) && !errors.Is(err, ErrPeerUnreachable) && !errors.Is(err, ErrTimeout) {
		return
	}
	if gw.alive {
		gw.alive = false
		ln.log.Warn("gateway down: send failed", "gateway", gw.nid, "err", err)
	}
	gw.nextPing = time.Now()
}

// gatewayPinged records the outcome of a liveness ping sent to gw. If gw
// has left the table since (its last route was deleted, perhaps re-added
// with a gateway entry of its own, whose ping may be in flight), the
// answer still counts as a discovery of the node but says nothing about
// the routes there now.
func (ln *LNet) gatewayPinged(gw *gateway, info wire.PingInfo, err error) {
	ln.net.Lock()
	defer ln.net.Unlock()
	nid := gw.nid
	if err == nil && info.Features&wire.PingFeatMultiRail != 0 && ln.discoveryOn() {
		// A router ping is a discovery of the router as well.
		ln.mergeLocked(nid, info, false)
	}
	if ln.net.gateways[nid] != gw {
		return
	}
	gw.pinging = false
	gw.pings++
	wasUp := gw.up()
	if err != nil {
		gw.pingErrors++
		gw.alive = false
	} else {
		gw.alive = true
		gw.lastAlive = time.Now()
		gw.routing = info.Features&wire.PingFeatRoutingDisabled == 0
		if info.Features&wire.PingFeatNIStatus != 0 {
			ln.routeNetsPingedLocked(gw, info)
		}
	}
	switch up := gw.up(); {
	case up && !wasUp:
		ln.log.Info("gateway up", "gateway", nid)
	case !up && wasUp && err != nil:
		ln.log.Warn("gateway down: no answer to ping", "gateway", nid, "err", err)
	case !up && wasUp:
		ln.log.Warn("gateway down: it does not route", "gateway", nid)
	}
}

// routeNetsPingedLocked marks down each route through gw whose remote net
// gw's ping lists NIs on and says every one is down (Lustre's
// avoid_asym_router_failure), and up again the others. A gateway with no
// NI on the route's net reaches it through further routers: its ping says
// nothing about that route.
func (ln *LNet) routeNetsPingedLocked(gw *gateway, info wire.PingInfo) {
	for _, rs := range ln.net.routes {
		for _, r := range rs {
			if r.gw != gw {
				continue
			}
			on, up := false, false
			for _, ns := range info.NIDs {
				if ns.NID.Net == r.Net {
					on = true
					up = up || ns.Status == wire.NIStatusUp
				}
			}
			down := on && !up
			if down != r.netDown {
				r.netDown = down
				if down {
					ln.log.Warn("route down: the gateway's NIs on the net are down", "net", r.Net, "gateway", gw.nid)
				} else {
					ln.log.Info("route up: the gateway's NIs on the net are back", "net", r.Net, "gateway", gw.nid)
				}
			}
		}
	}
}

// GatewayStats are the counters of one gateway of this node's routes.
type GatewayStats struct {
	NID wire.NID // the gateway's NID, as routes name it
	// Up is the state routes through it have (RouteInfo.Up).
	Up bool
	// LastAlive is when it last answered a ping (zero: never).
	LastAlive time.Time
	// SendCount and SendBytes count the messages (and payload bytes) this
	// node routed through it; SendErrors the sends to it that failed.
	SendCount, SendBytes, SendErrors uint64
	// Pings and PingErrors count its liveness pings and those that failed.
	Pings, PingErrors uint64
}

func (ln *LNet) gatewayStatsLocked() []GatewayStats {
	out := make([]GatewayStats, 0, len(ln.net.gateways))
	for _, g := range ln.net.gateways {
		out = append(out, GatewayStats{
			NID: g.nid, Up: g.up(), LastAlive: g.lastAlive,
			SendCount: g.sendCount, SendBytes: g.sendBytes, SendErrors: g.sendErrors,
			Pings: g.pings, PingErrors: g.pingErrors,
		})
	}
	slices.SortFunc(out, func(a, b GatewayStats) int { return compareNID(a.NID, b.NID) })
	return out
}

func compareNet(a, b wire.Net) int {
	if a.Type != b.Type {
		return cmp.Compare(a.Type, b.Type)
	}
	return cmp.Compare(a.Num, b.Num)
}

func compareNID(a, b wire.NID) int {
	if c := compareNet(a.Net, b.Net); c != 0 {
		return c
	}
	return a.Addr.Compare(b.Addr)
}
