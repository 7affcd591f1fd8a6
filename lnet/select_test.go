package lnet

import (
	"bytes"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet/wire"
)

// testNet builds the selection state of an LNet with the given NIs (plus
// 0@lo) and no drivers: enough for selectPathLocked and the route table.
func testNet(t *testing.T, nids ...string) *LNet {
	t.Helper()
	ln := &LNet{log: slog.New(slog.DiscardHandler)}
	ln.cfg = Config{}.withDefaults()
	ln.glob.init(ln.cfg)
	ln.net.peers = map[wire.NID]*peerNI{}
	ln.net.recovery = map[*peerNI]struct{}{}
	ln.net.routes = map[wire.Net][]*route{}
	ln.net.gateways = map[wire.NID]*gateway{}
	var nis []*ni
	add := func(nid wire.NID) {
		n := &ni{ln: ln, nid: nid, health: healthMax}
		n.setTunablesLocked(Tunables{Credits: 8, PeerCredits: 4}, 0)
		nis = append(nis, n)
	}
	add(wire.LoNID)
	ln.lo = nis[0]
	for _, s := range nids {
		add(wire.MustParseNID(s))
	}
	ln.nit.Store(newNITable(nis, nil))
	return ln
}

func (ln *LNet) testNI(s string) *ni { return ln.nit.Load().byNID[wire.MustParseNID(s)] }

// testPeer makes a discovered multi-rail peer with the given NIDs.
func (ln *LNet) testPeer(t *testing.T, nids ...string) []*peerNI {
	t.Helper()
	info := wire.PingInfo{Features: wire.PingFeatMultiRail}
	for _, s := range nids {
		info.NIDs = append(info.NIDs, wire.NIDStatus{NID: wire.MustParseNID(s), Status: wire.NIStatusUp})
	}
	p, err := ln.mergeLocked(info.NIDs[0].NID, info, true)
	if err != nil {
		t.Fatal(err)
	}
	return p.nis
}

func sel(t *testing.T, ln *LNet, dst string) *msg {
	t.Helper()
	m := &msg{kind: kindPut, heapIdx: -1}
	m.lm.Hdr = wire.Header{Type: wire.MsgPut, DstNID: wire.MustParseNID(dst)}
	if err := ln.selectPathLocked(m); err != nil {
		t.Fatalf("select %s: %v", dst, err)
	}
	return m
}

// TestSelectMultiRail: sends to a multi-rail peer spread over every pair of
// healthy NIs; health outranks credits, credits outrank round robin.
func TestSelectMultiRail(t *testing.T) {
	ln := testNet(t, "10.0.0.1@tcp", "10.0.1.1@tcp")
	pnis := ln.testPeer(t, "10.0.0.2@tcp", "10.0.1.2@tcp", "10.9.9.9@tcp9")
	if len(pnis) != 3 || pnis[0].nid != wire.MustParseNID("10.0.0.2@tcp") {
		t.Fatalf("peer NIs %v", pnis)
	}
	count := func(n int, dst string) (map[wire.NID]int, map[wire.NID]int) {
		locals, remotes := map[wire.NID]int{}, map[wire.NID]int{}
		for range n {
			m := sel(t, ln, dst)
			locals[m.ni.nid]++
			remotes[m.lpni.nid]++
			if m.lm.Hdr.SrcNID != m.ni.nid || m.lm.NextHop != m.lpni.nid || m.lm.Hdr.DstNID != wire.MustParseNID(dst) {
				t.Fatalf("header %v -> %v next hop %v", m.lm.Hdr.SrcNID, m.lm.Hdr.DstNID, m.lm.NextHop)
			}
		}
		return locals, remotes
	}
	// Round robin: both local NIs and both peer NIs on tcp, evenly, whichever
	// NID was addressed; never the NID on a net we are not on.
	l, r := count(10, "10.0.1.2@tcp")
	if l[ln.testNI("10.0.0.1@tcp").nid] != 5 || r[pnis[0].nid] != 5 || r[pnis[1].nid] != 5 {
		t.Fatalf("round robin: locals %v remotes %v", l, r)
	}
	// Credits outrank round robin.
	pnis[0].credits = 1
	if _, r = count(4, "10.0.0.2@tcp"); r[pnis[1].nid] != 4 {
		t.Fatalf("credits: remotes %v", r)
	}
	// Health outranks credits.
	pnis[0].credits, pnis[1].credits = 4, 4
	ln.lowerPeerNILocked(pnis[1])
	pnis[0].credits = 1
	if _, r = count(4, "10.0.1.2@tcp"); r[pnis[0].nid] != 4 {
		t.Fatalf("health: remotes %v", r)
	}
	if _, ok := ln.net.recovery[pnis[1]]; !ok {
		t.Fatal("unhealthy peer NI not queued for recovery")
	}
	ln.lowerNILocked(ln.testNI("10.0.1.1@tcp"))
	if l, _ = count(4, "10.0.1.2@tcp"); l[ln.testNI("10.0.0.1@tcp").nid] != 4 {
		t.Fatalf("local health: locals %v", l)
	}
	// A response goes to exactly the NID it answers, from the NI the
	// request came in on.
	m := &msg{kind: kindAck, heapIdx: -1, exactDst: true, fixedSrc: true, forceNI: ln.testNI("10.0.1.1@tcp")}
	m.lm.Hdr = wire.Header{Type: wire.MsgAck, SrcNID: wire.MustParseNID("10.0.1.1@tcp"), DstNID: pnis[1].nid}
	for range 3 {
		if err := ln.selectPathLocked(m); err != nil || m.ni != m.forceNI || m.lpni != pnis[1] {
			t.Fatalf("response path %v -> %v (%v)", m.ni.nid, m.lpni.nid, err)
		}
	}
}

// TestHealthRules: what raises and lowers health.
func TestHealthRules(t *testing.T) {
	ln := testNet(t, "10.0.0.1@tcp")
	lp, _ := ln.peerNILocked(wire.MustParseNID("10.0.0.2@tcp"))
	m := &msg{ni: ln.testNI("10.0.0.1@tcp"), lpni: lp}
	for _, c := range []struct {
		err            error
		niH, peerH     int
		inRecoverySetQ bool
	}{
		{ErrConnReset, 1000, 900, true},
		{ErrPeerUnreachable, 1000, 800, true},
		{ErrTimeout, 1000, 700, true},
		{ErrLocalNI, 900, 700, true},
		{ErrPeerRestarted, 900, 700, true},
		{nil, 1000, 700, true}, // a send says nothing of the far end
	} {
		ln.healthLocked(m, c.err)
		if m.ni.health != c.niH || lp.health != c.peerH {
			t.Fatalf("after %v: NI %d peer NI %d, want %d %d", c.err, m.ni.health, lp.health, c.niH, c.peerH)
		}
	}
	for range 3 {
		ln.raisePeerNILocked(lp) // as a received message does
	}
	if _, ok := ln.net.recovery[lp]; lp.health != healthMax || ok {
		t.Fatalf("peer NI at %d after three receives (recovering %v)", lp.health, ok)
	}
	// Health off: nothing moves.
	ln.glob.health.Store(0)
	ln.healthLocked(m, ErrConnReset)
	ln.healthLocked(m, ErrLocalNI)
	if m.ni.health != healthMax || lp.health != healthMax {
		t.Fatal("health changed with health off")
	}
}

func TestPickRoute(t *testing.T) {
	up := func(prio uint32, hops int, seq uint64) routeScore { return routeScore{true, prio, hops, seq} }
	down := func(prio uint32, hops int, seq uint64) routeScore { return routeScore{false, prio, hops, seq} }
	for i, c := range []struct {
		routes []routeScore
		want   int
	}{
		{nil, -1},
		{[]routeScore{down(0, 1, 0)}, -1},
		{[]routeScore{up(0, 1, 5)}, 0},
		{[]routeScore{down(0, 1, 0), up(5, 9, 9)}, 1},                // down routes are skipped
		{[]routeScore{up(1, 1, 0), up(0, 3, 9)}, 1},                  // priority first
		{[]routeScore{up(0, 3, 0), up(0, 2, 9)}, 1},                  // then hops
		{[]routeScore{up(0, -1, 5), up(0, 1, 3), up(0, 2, 0)}, 1},    // unknown hops count as 1
		{[]routeScore{up(0, 1, 7), up(0, 1, 3), up(0, 1, 5)}, 1},     // then round robin
		{[]routeScore{up(2, 1, 0), down(0, 1, 0), up(2, 1, 0)}, 0},   // ties: lowest index
		{[]routeScore{up(7, 1, 0), up(3, 200, 9), up(3, 200, 2)}, 2}, // all three rules
	} {
		got := pickRoute(len(c.routes), func(i int) routeScore { return c.routes[i] })
		if got != c.want {
			t.Errorf("case %d: pickRoute = %d, want %d", i, got, c.want)
		}
	}
}

// TestRouteChoice: the route table as selection sees it: priority, hops,
// round robin among equals, liveness, and the path to the gateway.
func TestRouteChoice(t *testing.T) {
	ln := testNet(t, "10.1.0.1@tcp1")
	ln.cfg.Routing = false
	add := func(gw string, hops int, prio uint32) {
		t.Helper()
		if err := ln.AddRoute(Route{Net: wire.Net{Type: wire.TCP, Num: 2}, Gateway: wire.MustParseNID(gw), Hops: hops, Priority: prio}); err != nil {
			t.Fatal(err)
		}
	}
	add("10.1.0.2@tcp1", 1, 1)
	add("10.1.0.3@tcp1", 1, 0)
	add("10.1.0.4@tcp1", 1, 0)
	add("10.1.0.5@tcp1", 2, 0)
	gws := func(n int) map[string]int {
		out := map[string]int{}
		for range n {
			m := sel(t, ln, "10.2.0.9@tcp2")
			if m.gw == nil || m.lm.NextHop != m.gw.nid || m.ni != ln.testNI("10.1.0.1@tcp1") || m.lm.Hdr.DstNID != wire.MustParseNID("10.2.0.9@tcp2") {
				t.Fatalf("routed path: ni %v next hop %v dst %v", m.ni.nid, m.lm.NextHop, m.lm.Hdr.DstNID)
			}
			out[m.gw.nid.String()]++
		}
		return out
	}
	if got := gws(6); got["10.1.0.3@tcp1"] != 3 || got["10.1.0.4@tcp1"] != 3 {
		t.Fatalf("priority 0, 1 hop, round robin: %v", got)
	}
	gwOf := func(s string) *gateway { return ln.net.gateways[wire.MustParseNID(s)] }
	gwOf("10.1.0.3@tcp1").alive = false
	gwOf("10.1.0.4@tcp1").routing = false
	if got := gws(3); got["10.1.0.5@tcp1"] != 3 {
		t.Fatalf("with the 1-hop routes down: %v", got)
	}
	gwOf("10.1.0.5@tcp1").alive = false
	if got := gws(2); got["10.1.0.2@tcp1"] != 2 {
		t.Fatalf("only the priority 1 route is up: %v", got)
	}
	gwOf("10.1.0.2@tcp1").alive = false
	m := &msg{kind: kindPut, heapIdx: -1}
	m.lm.Hdr = wire.Header{Type: wire.MsgPut, DstNID: wire.MustParseNID("10.2.0.9@tcp2")}
	if err := ln.selectPathLocked(m); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("all routes down: %v, want ErrNoRoute", err)
	}
	// Routes shows the state; DelRoute by gateway, then the rest by net.
	rs := ln.Routes()
	if len(rs) != 4 || rs[0].Gateway != wire.MustParseNID("10.1.0.3@tcp1") || rs[0].Up || rs[3].Priority != 1 {
		t.Fatalf("Routes: %+v", rs)
	}
	tcp2 := wire.Net{Type: wire.TCP, Num: 2}
	if err := ln.DelRoute(tcp2, wire.MustParseNID("10.1.0.3@tcp1")); err != nil {
		t.Fatal(err)
	}
	if err := ln.DelRoute(tcp2, wire.MustParseNID("10.1.0.3@tcp1")); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("deleting a deleted route: %v", err)
	}
	if err := ln.DelRoute(tcp2, wire.AnyNID); err != nil || len(ln.Routes()) != 0 || len(ln.net.gateways) != 0 {
		t.Fatalf("DelRoute all: %v, %d routes, %d gateways left", err, len(ln.Routes()), len(ln.net.gateways))
	}
	// Bad routes.
	for _, r := range []Route{
		{Net: tcp2, Gateway: wire.MustParseNID("10.3.0.1@tcp3"), Hops: 1},                    // gateway not on our nets
		{Net: wire.Net{Type: wire.TCP, Num: 1}, Gateway: wire.MustParseNID("10.1.0.2@tcp1")}, // our own net
		{Net: tcp2, Gateway: wire.MustParseNID("10.1.0.1@tcp1")},                             // ourselves
		{Net: tcp2, Gateway: wire.MustParseNID("10.1.0.2@tcp1"), Hops: 256},
		{Net: wire.Net{Type: wire.LO}, Gateway: wire.MustParseNID("10.1.0.2@tcp1")},
		{Net: tcp2},
	} {
		if err := ln.AddRoute(r); !errors.Is(err, ErrInvalid) {
			t.Errorf("AddRoute(%v): %v, want ErrInvalid", r, err)
		}
	}
}

// TestPeerTable: the table is bounded, and idle peers age out.
func TestPeerTable(t *testing.T) {
	ln := testNet(t, "10.0.0.1@tcp")
	ln.cfg.MaxPeers = 3
	pnis := ln.testPeer(t, "10.0.0.2@tcp", "10.0.1.2@tcp")
	if _, err := ln.peerNILocked(wire.MustParseNID("10.0.0.3@tcp")); err != nil {
		t.Fatal(err)
	}
	if _, err := ln.peerNILocked(wire.MustParseNID("10.0.0.4@tcp")); !errors.Is(err, ErrPeerTableFull) {
		t.Fatalf("a fourth peer NI: %v, want ErrPeerTableFull", err)
	}
	if len(ln.net.peers) != 3 || ln.net.peersRefused != 1 {
		t.Fatalf("%d peer NIs, %d refused", len(ln.net.peers), ln.net.peersRefused)
	}
	// A peer NI with a credit out keeps its peer; the other peer goes.
	now := time.Now().Add(ln.cfg.PeerAge + ln.TransactionTimeout())
	pnis[1].credits--
	ln.agePeersLocked(now)
	if len(ln.net.peers) != 2 || ln.net.peers[pnis[0].nid] == nil {
		t.Fatalf("after aging: %d peer NIs", len(ln.net.peers))
	}
	pnis[1].credits++
	ln.agePeersLocked(now.Add(-ln.cfg.PeerAge / 2)) // not idle long enough
	if len(ln.net.peers) != 2 {
		t.Fatalf("aged too early: %d peer NIs", len(ln.net.peers))
	}
	ln.agePeersLocked(now)
	if len(ln.net.peers) != 0 {
		t.Fatalf("idle peer kept: %d peer NIs", len(ln.net.peers))
	}
	if _, err := ln.peerNILocked(wire.MustParseNID("10.0.0.4@tcp")); err != nil {
		t.Fatalf("room after aging: %v", err)
	}
}

func TestConfigValidateRouting(t *testing.T) {
	tcp2 := wire.Net{Type: wire.TCP, Num: 2}
	gw := wire.MustParseNID("10.1.0.2@tcp1")
	for name, mod := range map[string]func(*Config){
		"negative router buffers": func(c *Config) { c.RouterBuffers = -1 },
		"negative max peers":      func(c *Config) { c.MaxPeers = -1 },
		"negative peer age":       func(c *Config) { c.PeerAge = -time.Second },
		"negative ping timeout":   func(c *Config) { c.RouterPingTimeout = -time.Second },
		"sensitivity over max":    func(c *Config) { c.HealthSensitivity = 1001 },
		"route to lo":             func(c *Config) { c.Routes = []Route{{Net: wire.Net{Type: wire.LO}, Gateway: gw}} },
		"route without gateway":   func(c *Config) { c.Routes = []Route{{Net: tcp2}} },
		"gateway on the route's net": func(c *Config) {
			c.Routes = []Route{{Net: tcp2, Gateway: wire.MustParseNID("10.2.0.1@tcp2")}}
		},
		"too many hops": func(c *Config) { c.Routes = []Route{{Net: tcp2, Gateway: gw, Hops: MaxHops + 1}} },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
	}
	c := DefaultConfig()
	c.Routes = []Route{{Net: tcp2, Gateway: gw, Hops: -1, Priority: 3}}
	c.HealthSensitivity = -1
	if err := c.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	if d := (Config{}).withDefaults(); d.RouterBuffers != DefaultRouterBuffers || d.MaxPeers != DefaultMaxPeers ||
		d.HealthSensitivity != DefaultHealthSensitivity || d.RecoveryInterval != DefaultRecoveryInterval ||
		d.RouterCheckInterval != DefaultRouterCheckInterval || d.RouterPingTimeout != DefaultRouterPingTimeout ||
		d.PeerAge != DefaultPeerAge {
		t.Fatalf("defaults %+v", d)
	}
}

// TestRouteAsymmetricFailure: a gateway that answers its pings but says
// every NI it has on a route's net is down (its link there failed) takes
// that route down, and only that one, until a ping says an NI there is up
// again (Lustre's avoid_asym_router_failure). A route to a net the gateway
// has no NI on (it routes further) is not judged by its NI list.
func TestRouteAsymmetricFailure(t *testing.T) {
	ln := testNet(t, "10.1.0.1@tcp1")
	tcp2, tcp3 := wire.Net{Type: wire.TCP, Num: 2}, wire.Net{Type: wire.TCP, Num: 3}
	gw2, gw3 := wire.MustParseNID("10.1.0.2@tcp1"), wire.MustParseNID("10.1.0.3@tcp1")
	for _, r := range []Route{
		{Net: tcp2, Gateway: gw2, Hops: 1}, {Net: tcp2, Gateway: gw3, Hops: 1}, {Net: tcp3, Gateway: gw2, Hops: 2},
	} {
		if err := ln.AddRoute(r); err != nil {
			t.Fatal(err)
		}
	}
	ping := func(gw wire.NID, tcp2Status wire.NIStatus) {
		info := wire.PingInfo{Features: wire.PingFeatBase | wire.PingFeatNIStatus | wire.PingFeatMultiRail, NIDs: []wire.NIDStatus{
			{NID: wire.LoNID, Status: wire.NIStatusUp},
			{NID: gw, Status: wire.NIStatusUp},
			{NID: wire.NID{Net: tcp2, Addr: netip.AddrFrom4([4]byte{10, 2, 0, gw.Addr.As4()[3]})}, Status: tcp2Status},
		}}
		ln.gatewayPinged(ln.net.gateways[gw], info, nil)
	}
	gwsTo := func(dst string, n int) map[wire.NID]int {
		out := map[wire.NID]int{}
		for range n {
			out[sel(t, ln, dst).lm.NextHop]++
		}
		return out
	}
	state := func() map[string]bool {
		out := map[string]bool{}
		for _, r := range ln.Routes() {
			out[r.Net.String()+" via "+r.Gateway.String()] = r.Up
		}
		return out
	}
	ping(gw2, wire.NIStatusUp)
	ping(gw3, wire.NIStatusUp)
	if got := gwsTo("10.2.0.9@tcp2", 4); got[gw2] != 2 || got[gw3] != 2 {
		t.Fatalf("both gateways up: %v", got)
	}
	// gw2's link to tcp2 fails; it still answers on tcp1.
	ping(gw2, wire.NIStatusDown)
	if got := gwsTo("10.2.0.9@tcp2", 4); got[gw3] != 4 {
		t.Fatalf("gw2's tcp2 NI down: sends to tcp2 went %v, want all through %v", got, gw3)
	}
	if got := gwsTo("10.3.0.9@tcp3", 2); got[gw2] != 2 {
		t.Fatalf("gw2 still routes to tcp3: %v", got)
	}
	if got := state(); got["tcp2 via 10.1.0.2@tcp1"] || !got["tcp2 via 10.1.0.3@tcp1"] || !got["tcp3 via 10.1.0.2@tcp1"] {
		t.Fatalf("Routes with gw2's tcp2 NI down: %v", got)
	}
	ping(gw2, wire.NIStatusUp)
	if got := gwsTo("10.2.0.9@tcp2", 4); got[gw2] != 2 || got[gw3] != 2 {
		t.Fatalf("gw2's tcp2 NI back: %v", got)
	}
	if got := state(); !got["tcp2 via 10.1.0.2@tcp1"] {
		t.Fatalf("Routes with gw2's tcp2 NI back: %v", got)
	}
}

// TestGatewayStalePing: the answer to a ping sent to a gateway whose route
// was then deleted and added again belongs to the old gateway entry: it
// neither ends the new entry's own ping in flight nor sets its state, and
// the new entry's answer still does.
func TestGatewayStalePing(t *testing.T) {
	ln := testNet(t, "10.1.0.1@tcp1")
	tcp2 := wire.Net{Type: wire.TCP, Num: 2}
	gwNID := wire.MustParseNID("10.1.0.2@tcp1")
	r := Route{Net: tcp2, Gateway: gwNID, Hops: 1}
	if err := ln.AddRoute(r); err != nil {
		t.Fatal(err)
	}
	old := ln.net.gateways[gwNID]
	old.pinging = true // as recoveryTick marks it when it sends the ping
	if err := ln.DelRoute(tcp2, gwNID); err != nil {
		t.Fatal(err)
	}
	if err := ln.AddRoute(r); err != nil {
		t.Fatal(err)
	}
	cur := ln.net.gateways[gwNID]
	if cur == nil || cur == old {
		t.Fatalf("re-added route: gateway entry %p, old %p", cur, old)
	}
	cur.pinging = true
	notRouting := wire.PingInfo{Features: wire.PingFeatBase | wire.PingFeatRoutingDisabled}
	ln.gatewayPinged(old, notRouting, nil)
	if !cur.pinging || cur.pings != 0 || !cur.alive || !cur.routing {
		t.Fatalf("after the old entry's answer: pinging %v pings %d alive %v routing %v, want true 0 true true",
			cur.pinging, cur.pings, cur.alive, cur.routing)
	}
	if rs := ln.Routes(); len(rs) != 1 || !rs[0].Up {
		t.Fatalf("Routes after the old entry's answer: %+v, want the route up", rs)
	}
	ln.gatewayPinged(cur, notRouting, nil)
	if cur.pinging || cur.pings != 1 || cur.routing {
		t.Fatalf("after its own answer: pinging %v pings %d routing %v, want false 1 false", cur.pinging, cur.pings, cur.routing)
	}
	if rs := ln.Routes(); len(rs) != 1 || rs[0].Up {
		t.Fatalf("Routes after the gateway said it does not route: %+v, want the route down", rs)
	}
}

// TestPingClaimsAnotherPeersNID: a ping that lists a NID of another
// discovered peer takes the NID over, as Lustre's discovery does, but
// warns naming the NID and both peers; merging peers that traffic made
// before discovery (the usual case) does not warn.
func TestPingClaimsAnotherPeersNID(t *testing.T) {
	ln := testNet(t, "10.1.0.1@tcp1", "10.2.0.1@tcp2")
	var logs bytes.Buffer
	ln.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nid := wire.MustParseNID
	info := func(nids ...string) wire.PingInfo {
		in := wire.PingInfo{Features: wire.PingFeatBase | wire.PingFeatMultiRail}
		for _, s := range nids {
			in.NIDs = append(in.NIDs, wire.NIDStatus{NID: nid(s), Status: wire.NIStatusUp})
		}
		return in
	}
	nidsOf := func(s string) []string {
		var out []string
		for _, n := range ln.peerNIDsLocked(nid(s)) {
			out = append(out, n.String())
		}
		return out
	}
	merge := func(target string, in wire.PingInfo) {
		t.Helper()
		if _, err := ln.mergeLocked(nid(target), in, false); err != nil {
			t.Fatal(err)
		}
	}
	merge("10.1.0.2@tcp1", info("10.1.0.2@tcp1", "10.2.0.2@tcp2"))
	// Two peers made by traffic, then found to be one node.
	for _, s := range []string{"10.1.0.3@tcp1", "10.2.0.3@tcp2"} {
		if _, err := ln.peerNILocked(nid(s)); err != nil {
			t.Fatal(err)
		}
	}
	merge("10.1.0.3@tcp1", info("10.1.0.3@tcp1", "10.2.0.3@tcp2"))
	if got := nidsOf("10.2.0.3@tcp2"); !slices.Equal(got, []string{"10.1.0.3@tcp1", "10.2.0.3@tcp2"}) {
		t.Fatalf("peer of 10.2.0.3@tcp2 after its node's ping: %v", got)
	}
	if logs.Len() != 0 {
		t.Fatalf("merging peers made by traffic logged:\n%s", logs.String())
	}
	// Another node's ping claims 10.2.0.2@tcp2.
	merge("10.1.0.9@tcp1", info("10.1.0.9@tcp1", "10.2.0.2@tcp2"))
	if got := nidsOf("10.1.0.9@tcp1"); !slices.Equal(got, []string{"10.1.0.9@tcp1", "10.2.0.2@tcp2"}) {
		t.Fatalf("claiming peer: %v", got)
	}
	if got := nidsOf("10.1.0.2@tcp1"); !slices.Equal(got, []string{"10.1.0.2@tcp1"}) {
		t.Fatalf("peer the NID was taken from: %v", got)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "nid=10.2.0.2@tcp2") ||
		!strings.Contains(lines[0], "from_peer=10.1.0.2@tcp1") || !strings.Contains(lines[0], "to_peer=10.1.0.9@tcp1") {
		t.Fatalf("log after a ping claimed another peer's NID:\n%s", logs.String())
	}

	// A ping that claims a discovered peer's primary NID deletes that
	// peer (Lustre's lnet_peer_add_nid): its other NIDs do not live on
	// as a node under a primary it never had. The warning waits for its
	// interval.
	merge("10.1.0.4@tcp1", info("10.1.0.4@tcp1", "10.2.0.4@tcp2"))
	merge("10.2.0.8@tcp2", info("10.2.0.8@tcp2", "10.1.0.4@tcp1"))
	if got := nidsOf("10.2.0.8@tcp2"); !slices.Equal(got, []string{"10.2.0.8@tcp2", "10.1.0.4@tcp1"}) {
		t.Fatalf("peer that claimed a primary NID: %v", got)
	}
	if lp := ln.net.peers[nid("10.2.0.4@tcp2")]; lp != nil {
		t.Fatalf("the peer whose primary NID was claimed lives on as %v with %v", lp.peer.primary, nidsOf("10.2.0.4@tcp2"))
	}
	for _, pi := range ln.Peers() {
		if pi.Primary == nid("10.2.0.4@tcp2") {
			t.Fatalf("peer list after its primary NID was claimed: %+v", pi)
		}
	}
	if n := strings.Count(strings.TrimSpace(logs.String()), "\n") + 1; n != 1 || ln.net.nidsClaimed != 2 {
		t.Fatalf("%d claims counted, logged in %d lines, want 2 in 1:\n%s", ln.net.nidsClaimed, n, logs.String())
	}
	ln.net.claimLogged = ln.net.claimLogged.Add(-claimLogInterval)
	merge("10.1.0.9@tcp1", info("10.1.0.9@tcp1", "10.2.0.8@tcp2"))
	if !strings.Contains(logs.String(), "claimed_so_far=3") {
		t.Fatalf("a claim after the interval is not logged:\n%s", logs.String())
	}
}
