package socklnd

// Counters and the peer/connection listing behind lnetctl.

import (
	"net/netip"
	"sort"
	"sync/atomic"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

type counters struct {
	txMsgs, txBytes, txErrors, txWrites      atomic.Uint64
	rxMsgs, rxBytes, rxRefused               atomic.Uint64
	rxContinued, rxHandoffs, rxReleased      atomic.Uint64
	connsMade, connsDropped, connectFailures atomic.Uint64
	handshakeFailures, connRaces, badHeaders atomic.Uint64
	peersRefused, peersReaped                atomic.Uint64
}

// Stats are one NI's counters since it started. Byte counts include the
// message headers.
type Stats struct {
	TxMsgs   uint64 // messages written to a socket (finalized with nil)
	TxBytes  uint64 // bytes of those
	TxErrors uint64 // messages finalized with an error
	// TxWrites counts the system calls that wrote messages: TxMsgs over
	// TxWrites is how many a write carries on average (one writev takes
	// every small message queued on a connection when it starts).
	TxWrites uint64

	RxMsgs    uint64 // messages received whole (payload placed or drained)
	RxBytes   uint64 // bytes of those
	RxRefused uint64 // headers LNet refused (Parse returned an error)
	// RxContinued counts the continuations readers ran (lnet.Continuer);
	// RxReleased those that gave their connection to a new reader before
	// waiting (lnet.Releaser), RxHandoffs those that ran so long that the
	// watchdog did.
	RxContinued, RxReleased, RxHandoffs uint64

	ConnsMade       uint64 // connections established (hellos exchanged, installed)
	ConnsDropped    uint64 // connections closed, for any reason
	ConnectFailures uint64 // dial attempts that did not end in a connection

	HandshakeFailures uint64 // connections closed for a bad or missing hello
	ConnRaces         uint64 // incoming connections refused by race resolution
	BadHeaders        uint64 // connections dropped for a bad message header

	Peers        int    // peers in the table now (at most Config.MaxPeers)
	PeersRefused uint64 // new peers refused because the table was full
	PeersReaped  uint64 // idle peers dropped (Config.PeerIdleAge)
}

// Stats returns a snapshot of the NI's counters; each counter is read
// atomically, the set is not. Safe for concurrent use.
func (ni *NI) Stats() Stats {
	s := &ni.stats
	return Stats{
		TxMsgs:            s.txMsgs.Load(),
		TxBytes:           s.txBytes.Load(),
		TxErrors:          s.txErrors.Load(),
		TxWrites:          s.txWrites.Load(),
		RxMsgs:            s.rxMsgs.Load(),
		RxBytes:           s.rxBytes.Load(),
		RxRefused:         s.rxRefused.Load(),
		RxContinued:       s.rxContinued.Load(),
		RxHandoffs:        s.rxHandoffs.Load(),
		RxReleased:        s.rxReleased.Load(),
		ConnsMade:         s.connsMade.Load(),
		ConnsDropped:      s.connsDropped.Load(),
		ConnectFailures:   s.connectFailures.Load(),
		HandshakeFailures: s.handshakeFailures.Load(),
		ConnRaces:         s.connRaces.Load(),
		BadHeaders:        s.badHeaders.Load(),
		PeersRefused:      s.peersRefused.Load(),
		PeersReaped:       s.peersReaped.Load(),
		Peers:             ni.npeers(),
	}
}

// Counters implements lnet.CountingLND: Stats by the names lnetctl net
// show -v lists them under.
func (ni *NI) Counters() []lnet.Counter {
	s := ni.Stats()
	return []lnet.Counter{
		{Name: "tx_msgs", Value: s.TxMsgs}, {Name: "tx_bytes", Value: s.TxBytes}, {Name: "tx_errors", Value: s.TxErrors},
		{Name: "tx_writes", Value: s.TxWrites},
		{Name: "rx_msgs", Value: s.RxMsgs}, {Name: "rx_bytes", Value: s.RxBytes}, {Name: "rx_refused", Value: s.RxRefused},
		{Name: "rx_continued", Value: s.RxContinued}, {Name: "rx_released", Value: s.RxReleased}, {Name: "rx_handoffs", Value: s.RxHandoffs},
		{Name: "conns_made", Value: s.ConnsMade}, {Name: "conns_dropped", Value: s.ConnsDropped},
		{Name: "connect_failures", Value: s.ConnectFailures}, {Name: "handshake_failures", Value: s.HandshakeFailures},
		{Name: "conn_races", Value: s.ConnRaces}, {Name: "bad_headers", Value: s.BadHeaders},
		{Name: "peers", Value: uint64(s.Peers)}, {Name: "peers_refused", Value: s.PeersRefused}, {Name: "peers_reaped", Value: s.PeersReaped},
	}
}

func (ni *NI) npeers() int {
	ni.mu.Lock()
	defer ni.mu.Unlock()
	return len(ni.mu.peers)
}

// ConnInfo describes one established connection, for lnetctl.
type ConnInfo struct {
	// Type is the connection's role as this NI sees it: control, bulk_out
	// (this NI sends bulk on it), bulk_in (the peer does), or any.
	Type wire.ConnType
	// Active is true if this NI dialed it.
	Active bool
	// Local and Remote are the socket's addresses.
	Local, Remote netip.AddrPort
	// Since is when it was established.
	Since time.Time
}

// PeerInfo describes one peer and its connections, for lnetctl.
type PeerInfo struct {
	// NID is the peer's NID on this net.
	NID wire.NID
	// Incarnation is the peer's incarnation from its last hello (0: never
	// connected).
	Incarnation uint64
	// Up is true while at least one connection to the peer is established.
	Up bool
	// Queued counts the messages waiting in the peer's tx queues.
	Queued int
	// Conns are the established connections, by type.
	Conns []ConnInfo
}

// Peers lists the peers in the NI's table (those in use, and those idle
// for less than Config.PeerIdleAge), by NID, each with its connections by
// type. Safe for concurrent use; a snapshot.
func (ni *NI) Peers() []PeerInfo {
	ni.mu.Lock()
	peers := make([]*peer, 0, len(ni.mu.peers))
	for _, p := range ni.mu.peers {
		peers = append(peers, p)
	}
	ni.mu.Unlock()
	sort.Slice(peers, func(i, j int) bool { return nidLess(peers[i].nid, peers[j].nid) })

	out := make([]PeerInfo, 0, len(peers))
	for _, p := range peers {
		p.mu.Lock()
		pi := PeerInfo{NID: p.nid, Incarnation: p.mu.incarnation, Up: p.mu.up}
		for t, c := range p.mu.conns {
			pi.Queued += p.mu.txq[t].n
			if c != nil {
				pi.Conns = append(pi.Conns, ConnInfo{
					Type: c.typ, Active: c.active, Local: c.local, Remote: c.remote, Since: c.since,
				})
			}
		}
		p.mu.Unlock()
		out = append(out, pi)
	}
	return out
}
