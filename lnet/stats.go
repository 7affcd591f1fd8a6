package lnet

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nacrefs/nacre/lnet/wire"
)

// Stats is a snapshot of LNet's counters (lnetctl stats show, net show -v,
// peer show -v).
type Stats struct {
	NIs   []NIStats     // in the order of NIDs()
	Peers []PeerNIStats // sorted by NID
	// MDs is the number of live MDs, Pending the PUTs and GETs awaiting an
	// ACK or REPLY; neither counts what LNet uses for its own pings.
	MDs, Pending int
	// Router is this node's forwarding of other nodes' messages.
	Router RouterStats
	// Gateways are the gateways of this node's routes, sorted by NID.
	Gateways []GatewayStats
}

// NIStats are the counters of one local NI.
type NIStats struct {
	NID wire.NID // the NI
	// Tunables are what the NI runs with.
	Tunables Tunables
	// Credits are the NI's send credits left; negative, the number of
	// messages waiting for one. MinCredits is their low-water mark.
	Credits, MinCredits int
	// Queued is the number of messages of this NI waiting for credits (of
	// the NI or of a peer NI); at most MaxWaiting.
	Queued, MaxWaiting int
	// Health is 1000 when nothing has gone wrong.
	Health int
	// Status is wire.NIStatusDown while the NI's OS interface is down,
	// wire.NIStatusUp otherwise.
	Status wire.NIStatus
	// SendCount and SendBytes count messages and payload bytes sent
	// successfully; SendErrors the sends the LND failed.
	SendCount, SendBytes, SendErrors uint64
	// RecvCount and RecvBytes count every message received, drops included.
	RecvCount, RecvBytes uint64
	// DropCount and DropBytes count received messages refused (no match,
	// late or stale ACK/REPLY, not for us), forwards included (those
	// RouterStats.DropCount counts).
	DropCount, DropBytes uint64
	// LND are the LND's own counters (CountingLND); nil if it keeps none.
	LND []Counter
}

// PeerNIStats are the counters of one peer NI.
type PeerNIStats struct {
	NID wire.NID // the peer NI
	// Credits and MinCredits are as for NIStats, out of MaxCredits.
	Credits, MinCredits, MaxCredits int
	// Queued is the number of messages waiting for a credit of this peer NI.
	Queued int
	// Health is 1000 when nothing has gone wrong.
	Health int
	// State is the last event the LND reported about the peer (0: none).
	State PeerEvent
	// SendCount and SendBytes count messages and payload bytes sent to the
	// peer NI successfully.
	SendCount, SendBytes uint64
	// RecvCount and RecvBytes count messages and payload bytes received
	// from it (as the neighbour that handed them over).
	RecvCount, RecvBytes uint64
}

// Stats returns a snapshot of the counters. It is safe for concurrent use.
func (ln *LNet) Stats() Stats {
	var s Stats
	var lnds []CountingLND // read after unlocking: an LND takes locks of its own
	ln.net.Lock()
	for _, n := range ln.nis() {
		c, _ := n.lnd.(CountingLND)
		lnds = append(lnds, c)
		st := wire.NIStatusUp
		if n.linkDown {
			st = wire.NIStatusDown
		}
		s.NIs = append(s.NIs, NIStats{
			NID: n.nid, Tunables: n.tun, Credits: n.credits, MinCredits: n.minCredits,
			Queued: n.waiting, MaxWaiting: n.maxWaiting, Health: n.health, Status: st,
			SendCount:  n.counters.sendCount.Load(),
			SendBytes:  n.counters.sendBytes.Load(),
			SendErrors: n.counters.sendErrors.Load(),
			RecvCount:  n.counters.recvCount.Load(),
			RecvBytes:  n.counters.recvBytes.Load(),
			DropCount:  n.counters.dropCount.Load(),
			DropBytes:  n.counters.dropBytes.Load(),
		})
	}
	for _, lp := range ln.net.peers {
		s.Peers = append(s.Peers, lp.stats())
	}
	s.Gateways = ln.gatewayStatsLocked()
	ln.net.Unlock()
	for i, c := range lnds {
		if c != nil {
			s.NIs[i].LND = c.Counters()
		}
	}
	slices.SortFunc(s.Peers, func(a, b PeerNIStats) int { return compareNID(a.NID, b.NID) })
	s.Router = ln.rtr.stats(ln.cfg.Routing)
	ln.res.Lock()
	s.MDs = len(ln.res.mds) - ln.res.internal
	for _, m := range ln.res.pending {
		if !m.md.internal {
			s.Pending++
		}
	}
	ln.res.Unlock()
	return s
}

// PortalMDs returns the number of MDs attached to the portal (those LNet
// made for itself included): who posts what where is the caller's
// knowledge, so a user of a shared LNet can tell that none of its MDs is
// left. It is safe for concurrent use.
func (ln *LNet) PortalMDs(index uint32) int {
	ln.res.Lock()
	defer ln.res.Unlock()
	if p := ln.res.portals[index]; p != nil {
		return p.n
	}
	return 0
}

// stats returns the peer NI's counters; LNet.net must be held.
func (lp *peerNI) stats() PeerNIStats {
	return PeerNIStats{
		NID: lp.nid, Credits: lp.credits, MinCredits: lp.minCredits, MaxCredits: lp.maxCredits,
		Queued: lp.txq.n, Health: lp.health, State: lp.state,
		SendCount: lp.sendCount, SendBytes: lp.sendBytes, RecvCount: lp.recvCount, RecvBytes: lp.recvBytes,
	}
}

// NI returns the counters of one local NI, and false if nid is not one.
func (s *Stats) NI(nid wire.NID) (NIStats, bool) {
	for _, n := range s.NIs {
		if n.NID == nid {
			return n, true
		}
	}
	return NIStats{}, false
}

// Peer returns the counters of one peer NI, and false if it is unknown.
func (s *Stats) Peer(nid wire.NID) (PeerNIStats, bool) {
	for _, p := range s.Peers {
		if p.NID == nid {
			return p, true
		}
	}
	return PeerNIStats{}, false
}

// collector exports Stats to Prometheus, by NI, computed at scrape time.
type collector struct {
	ln                                  *LNet
	credits, minCredits, queued, health *prometheus.Desc
	messages, bytes, sendErrors, drops  *prometheus.Desc
	dropBytes, mds, pending, peerQueued *prometheus.Desc
	peerCredits, peerNIs                *prometheus.Desc
	routed, routedBytes, routeDrops     *prometheus.Desc
	rtrBuffers, rtrWaiting              *prometheus.Desc
	gwUp, gwMessages                    *prometheus.Desc
}

func newCollector(ln *LNet) *collector {
	ni := []string{"ni"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc("nacre_lnet_"+name, help, labels, nil)
	}
	return &collector{
		ln:          ln,
		credits:     d("ni_credits", "Send credits left on the NI; negative: messages waiting.", ni),
		minCredits:  d("ni_min_credits", "Low-water mark of the NI's send credits.", ni),
		queued:      d("ni_queued_messages", "Messages of the NI waiting for credits.", ni),
		health:      d("ni_health", "Health of the NI (1000: healthy).", ni),
		messages:    d("ni_messages_total", "Messages sent and received by the NI.", []string{"ni", "direction"}),
		bytes:       d("ni_bytes_total", "Payload bytes sent and received by the NI.", []string{"ni", "direction"}),
		sendErrors:  d("ni_send_errors_total", "Sends the NI's driver failed.", ni),
		drops:       d("ni_drops_total", "Received messages dropped (no match, late reply, not for us).", ni),
		dropBytes:   d("ni_drop_bytes_total", "Payload bytes of dropped messages.", ni),
		mds:         d("mds", "Live memory descriptors.", nil),
		pending:     d("pending_operations", "PUTs and GETs awaiting their ACK or REPLY.", nil),
		peerQueued:  d("peer_queued_messages", "Messages waiting for peer credits, summed over the peers of the NI's net.", ni),
		peerCredits: d("peer_min_credits", "Lowest peer credits over the peers of the NI's net.", ni),
		peerNIs:     d("peer_nis", "Peer NIs known (bounded by max_peers).", nil),
		routed:      d("route_messages_total", "Messages this router forwarded (route_count).", nil),
		routedBytes: d("route_bytes_total", "Payload bytes this router forwarded (route_length).", nil),
		routeDrops:  d("route_drops_total", "Messages for other nodes not forwarded (routing disabled, no route, loop, failure).", nil),
		rtrBuffers:  d("router_buffers_in_use", "Router buffers holding a payload being forwarded.", nil),
		rtrWaiting:  d("router_buffer_waiters", "Messages waiting for a router buffer (each stalls its connection).", nil),
		gwUp:        d("gateway_up", "1 if routes through the gateway are up.", []string{"gateway"}),
		gwMessages:  d("gateway_messages_total", "Messages routed through the gateway.", []string{"gateway"}),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.credits, c.minCredits, c.queued, c.health, c.messages, c.bytes,
		c.sendErrors, c.drops, c.dropBytes, c.mds, c.pending, c.peerQueued, c.peerCredits, c.peerNIs,
		c.routed, c.routedBytes, c.routeDrops, c.rtrBuffers, c.rtrWaiting, c.gwUp, c.gwMessages} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.ln.Stats()
	g, ctr := prometheus.GaugeValue, prometheus.CounterValue
	for _, n := range s.NIs {
		id := n.NID.String()
		ch <- prometheus.MustNewConstMetric(c.credits, g, float64(n.Credits), id)
		ch <- prometheus.MustNewConstMetric(c.minCredits, g, float64(n.MinCredits), id)
		ch <- prometheus.MustNewConstMetric(c.queued, g, float64(n.Queued), id)
		ch <- prometheus.MustNewConstMetric(c.health, g, float64(n.Health), id)
		ch <- prometheus.MustNewConstMetric(c.messages, ctr, float64(n.SendCount), id, "send")
		ch <- prometheus.MustNewConstMetric(c.messages, ctr, float64(n.RecvCount), id, "recv")
		ch <- prometheus.MustNewConstMetric(c.bytes, ctr, float64(n.SendBytes), id, "send")
		ch <- prometheus.MustNewConstMetric(c.bytes, ctr, float64(n.RecvBytes), id, "recv")
		ch <- prometheus.MustNewConstMetric(c.sendErrors, ctr, float64(n.SendErrors), id)
		ch <- prometheus.MustNewConstMetric(c.drops, ctr, float64(n.DropCount), id)
		ch <- prometheus.MustNewConstMetric(c.dropBytes, ctr, float64(n.DropBytes), id)
		queued, minCredits, any := 0, 0, false
		for _, p := range s.Peers {
			if p.NID.Net == n.NID.Net {
				queued += p.Queued
				if !any || p.MinCredits < minCredits {
					minCredits = p.MinCredits
				}
				any = true
			}
		}
		ch <- prometheus.MustNewConstMetric(c.peerQueued, g, float64(queued), id)
		ch <- prometheus.MustNewConstMetric(c.peerCredits, g, float64(minCredits), id)
	}
	ch <- prometheus.MustNewConstMetric(c.mds, g, float64(s.MDs))
	ch <- prometheus.MustNewConstMetric(c.pending, g, float64(s.Pending))
	ch <- prometheus.MustNewConstMetric(c.peerNIs, g, float64(len(s.Peers)))
	ch <- prometheus.MustNewConstMetric(c.routed, ctr, float64(s.Router.RouteCount))
	ch <- prometheus.MustNewConstMetric(c.routedBytes, ctr, float64(s.Router.RouteLength))
	ch <- prometheus.MustNewConstMetric(c.routeDrops, ctr, float64(s.Router.DropCount))
	ch <- prometheus.MustNewConstMetric(c.rtrBuffers, g, float64(s.Router.InUse))
	ch <- prometheus.MustNewConstMetric(c.rtrWaiting, g, float64(s.Router.Waiting))
	for _, gw := range s.Gateways {
		up := 0.0
		if gw.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.gwUp, g, up, gw.NID.String())
		ch <- prometheus.MustNewConstMetric(c.gwMessages, ctr, float64(gw.SendCount), gw.NID.String())
	}
}
