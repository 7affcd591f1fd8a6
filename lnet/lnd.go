package lnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nacrefs/nacre/lnet/wire"
)

// This file is the contract between LNet and its network drivers (LNDs, in
// lnd/*). It mirrors Lustre's lnd_t (lnd_startup, lnd_send, lnd_recv,
// lnet_parse, lnet_finalize) so that a TCP driver, the in-process loopback
// driver and an RDMA verbs driver all fit it:
//
//   - LNet decides everything about a message (which NI, which next hop,
//     which MD it lands in) and hands the LND only bytes to move.
//   - Payloads are never staged: Msg.Payload is a list of views into the
//     source MD's buffers for the LND to write from (writev), and Rx.Recv is
//     given views into the matched MD for the LND to read into.
//   - An RDMA driver can serve a GET by RDMA: the GET carries its sink
//     buffers (Msg.Sink) so the initiator's driver can register and advertise
//     them, and the REPLY that answers it carries the Rx of that GET
//     (Msg.ReplyTo) so the target's driver can write straight into them
//     instead of sending a message.

// Driver makes NIs of one network type. Drivers register themselves in
// init() with Register, as database/sql drivers do, and LNet picks them by
// the net type of each configured network.
type Driver interface {
	// Type is the network type this driver serves (wire.TCP, wire.LO, ...).
	Type() wire.NetType
	// Startup brings up one network interface. It returns once the NI can
	// send and receive (a TCP driver is accepting), or with an error. The
	// host outlives the LND; the LND must not call the host after Shutdown
	// returns.
	Startup(ctx context.Context, cfg NIConfig, host Host) (LND, error)
}

// NIConfig is what a driver needs to bring up one NI.
type NIConfig struct {
	// NID of this NI, address already resolved (e.g. 192.168.1.5@tcp).
	NID wire.NID
	// Interface is the OS interface name when the NI was configured by name
	// (tcp(eth0)), empty when configured by address.
	Interface string
	// PID is this node's LNet process id (wire.PIDLustre unless told otherwise).
	PID uint32
	// Incarnation identifies this start of the node; peers that see it change
	// know the node restarted. Unique per LNet startup (e.g. start time in ns).
	Incarnation uint64
	// Tunables are the administrator's settings; zero fields mean "driver
	// default". The driver reports what it settled on through LND.Tunables.
	Tunables Tunables
	// Options are driver-specific settings (socklnd: "port" = "988").
	Options map[string]string
	Logger  *slog.Logger
}

// Tunables are the credit and timeout settings of one NI (Lustre's
// lnet_ioctl_config_lnd_cmn_tunables).
type Tunables struct {
	// Credits is how many sends may be in flight on the NI at once.
	Credits int
	// PeerCredits is how many sends may be in flight to one peer at once.
	PeerCredits int
	// PeerTimeout is how long a peer may stay silent before it is dead
	// (0: never declared dead by the LND). A router drops the messages it
	// would forward to a peer NI that has failed and been silent that long
	// (Lustre's lnet_peer_alive_locked); 0 turns that off.
	PeerTimeout time.Duration
}

// LND is one running network interface of a driver. All methods are safe for
// concurrent use.
type LND interface {
	// Send queues msg for transmission to msg.NextHop and returns without
	// waiting for the network. The LND reports the outcome exactly once with
	// Host.Finalize: nil once the payload has left (the buffers behind
	// msg.Payload may then be reused), or an error (see the Err* below) if it
	// could not be sent. Finalize may be called before Send returns (a
	// message refused at once), so LNet calls Send holding no lock; an LND
	// must not call Host.Parse from inside Send. LNet never calls Send for
	// more messages than the credits it was given, so the LND's own queues
	// stay bounded.
	Send(msg *Msg)
	// Tunables are the settings the LND runs with after applying defaults.
	Tunables() Tunables
	// Shutdown stops the NI: it stops accepting, closes its connections and
	// finalizes every message it still holds with ErrShutdown, then returns.
	Shutdown(ctx context.Context) error
}

// CountingLND is an LND with counters of its own (socklnd's writes,
// continuations and connections), which Stats reports with the NI's and
// lnetctl net show -v lists.
type CountingLND interface {
	LND
	Counters() []Counter
}

// Counter is one named counter of an LND.
type Counter struct {
	Name  string
	Value uint64
}

// BatchLND is an LND that can be handed several messages at once. LNet
// hands one NI's messages to its LND from one goroutine at a time, in
// order; the messages that became ready while an earlier Send was in
// progress are handed over with one SendBatch, so that the LND can move
// those for one peer together (socklnd writes them with one writev).
// Implementing it is optional: LNet calls Send for each message of an LND
// that does not.
type BatchLND interface {
	LND
	// SendBatch is Send for each of msgs, in order, with the same
	// contract for each message. LNet reuses the slice once SendBatch
	// returns: the LND keeps the messages, not msgs.
	SendBatch(msgs []*Msg)
}

// Host is what LNet offers an LND. All methods are safe for concurrent use
// and never block on the network.
type Host interface {
	// Parse is called by the LND for every message header it receives, in
	// the order they arrived on that connection. from is the NID of the
	// neighbour that sent it (a router when the message was routed), and rx
	// holds the payload (hdr.PayloadLen bytes) still unread.
	//
	// LNet calls rx.Recv exactly once, either before Parse returns or later
	// from another goroutine (when it must wait for a router buffer). Until
	// then the LND reads nothing more from that connection: a slow consumer
	// pushes back on its sender instead of growing a queue.
	//
	// A non-nil error means the header was refused (bad destination, no
	// route, protocol violation); rx.Recv has then been called with no
	// destination, so the payload was drained, and the LND may keep the
	// connection. The error is for the LND's log and counters; drops
	// (errors wrapping ErrDropped) are routine and logged at debug.
	//
	// hdr stays valid until rx.Recv returns.
	Parse(hdr *wire.Header, from wire.NID, rx Rx) error
	// Finalize reports the completion of a Send, once per message.
	Finalize(msg *Msg, err error)
	// PeerEvent tells LNet what the LND learnt about a neighbour: connected,
	// gone, or restarted (its incarnation changed, so every message LNet is
	// waiting on it for will never be answered). An LND reports
	// PeerRestarted before it delivers or sends anything over a connection
	// to the new incarnation, and fails the messages it had committed to a
	// connection of the old one with ErrPeerRestarted; messages still queued
	// for want of any connection go to whichever incarnation answers.
	PeerEvent(peer wire.NID, ev PeerEvent)
}

// Rx is a received message whose payload the LND still holds.
type Rx interface {
	// Recv moves the payload into dst: the first mlen bytes of the payload
	// fill dst in order (sum of len(dst) >= mlen), and the remaining
	// hdr.PayloadLen-mlen bytes are read and dropped. With mlen 0 and dst
	// nil the whole payload is drained. It returns when the bytes are in
	// place, or an error if the connection failed (the LND then closes it).
	// Recv is called exactly once per Rx.
	Recv(dst [][]byte, mlen int) error
}

// ObservingRx is an Rx whose LND can show the payload to an observer piece
// by piece as it lands (MD.Observe). LNet calls RecvObserved instead of
// Recv when the MD has an observer; with another Rx it shows the observer
// the whole payload once Recv returns.
type ObservingRx interface {
	Rx
	// RecvObserved is Recv that calls seen, in order, with each piece of
	// the first mlen bytes right after it is in place; the pieces together
	// are those mlen bytes.
	RecvObserved(dst [][]byte, mlen int, seen func([]byte)) error
}

// PeerEvent is what an LND reports about a neighbour.
type PeerEvent uint8

// Peer events.
const (
	PeerUp        PeerEvent = iota + 1 // a connection to the peer is established
	PeerDown                           // every connection to the peer is gone
	PeerRestarted                      // the peer's incarnation changed
)

func (e PeerEvent) String() string {
	switch e {
	case PeerUp:
		return "up"
	case PeerDown:
		return "down"
	case PeerRestarted:
		return "restarted"
	}
	return fmt.Sprintf("PeerEvent(%d)", uint8(e))
}

// Msg is one LNet message on its way out through an LND. LNet owns it; the
// LND reads the exported fields and must not change them.
type Msg struct {
	// Hdr is the header to send as is. Hdr.DstNID is the final destination,
	// which differs from NextHop when the message is routed.
	Hdr wire.Header
	// NextHop is the NID to hand the message to: the destination itself, or
	// the router LNet chose.
	NextHop wire.NID
	// Payload holds Hdr.PayloadLen bytes as views into the source buffers,
	// in order. Nil for GET and ACK.
	Payload [][]byte
	// Sink is, for a GET only, where the REPLY's payload will land (views
	// into the initiator's MD). A socket LND ignores it; an RDMA LND
	// advertises it to the peer so the reply can be written directly.
	Sink [][]byte
	// ReplyTo is, for a REPLY only, the Rx of the GET being answered. A
	// socket LND ignores it; an RDMA LND uses it to write Payload straight
	// into the sink the GET advertised. It stays valid after that GET's
	// Recv(nil, 0).
	ReplyTo Rx
	// Deadline is when LNet gives up on the message; an LND may use it to
	// bound a connection attempt. Zero means no deadline.
	Deadline time.Time
	// FailUnreachable asks the LND to fail the message (ErrPeerUnreachable)
	// at the first failed attempt to connect to NextHop, rather than
	// keep it for another attempt (its MD has MDFailUnreachable).
	FailUnreachable bool

	// LNet's bookkeeping; LNDs never touch it.
	priv any
}

// Canceler is an LND that can give a message back before it has started
// to send it. When a message's sender gives it up (Msg.Canceled), LNet
// calls Cancel for it with the next hop it was handed for (msg.NextHop
// may change once the LND has finalized it), holding none of its locks,
// possibly from an event handler: an LND that still holds it unsent —
// queued behind others, or for a connection to a peer that may be dead —
// finalizes it with ErrCanceled; one that has started to send it, or
// finalized it, does nothing. An LND also finalizes with ErrCanceled a
// message handed to it already canceled (it may have missed the Cancel).
type Canceler interface {
	Cancel(msg *Msg, nextHop wire.NID)
}

// Canceled reports whether the sender gave the message up (unlinked its
// MD) before it was sent: an LND still waiting to send it — for a
// connection to a peer that may be dead — may finalize it with
// ErrCanceled at once instead of at its deadline. A message the LND has
// started to write goes out whole all the same.
func (lm *Msg) Canceled() bool {
	m, _ := lm.priv.(*msg)
	return m != nil && m.canceled.Load()
}

// Errors an LND reports through Finalize. LNet uses them to decide whether
// to lower the health of the local NI or of the peer NI, and whether to
// retry the message on another rail.
var (
	// ErrShutdown: the LND is shutting down.
	ErrShutdown = errors.New("lnet: network interface shutting down")
	// ErrPeerUnreachable: no connection to the peer could be made (refused,
	// no route to host, handshake failed). Lowers the peer NI's health.
	ErrPeerUnreachable = errors.New("lnet: peer unreachable")
	// ErrPeerRestarted: the peer's incarnation changed with the message in
	// flight. Lowers nothing; the message is failed, not retried.
	ErrPeerRestarted = errors.New("lnet: peer restarted")
	// ErrConnReset: the connection broke with the message in flight. Lowers
	// the peer NI's health; the message may be retried on another rail.
	ErrConnReset = errors.New("lnet: connection reset")
	// ErrLocalNI: the local interface failed (e.g. the device went away).
	// Lowers the local NI's health.
	ErrLocalNI = errors.New("lnet: local interface error")
	// ErrTimeout: the message could not be sent before its deadline, or
	// its ACK or REPLY did not come within the transaction timeout.
	ErrTimeout = errors.New("lnet: timed out")
	// ErrCanceled: the sender gave the message up (Msg.Canceled) before
	// the LND sent it. Lowers nothing; the message is not retried.
	ErrCanceled = errors.New("lnet: send canceled")
)

var (
	driversMu sync.RWMutex
	drivers   = map[wire.NetType]Driver{}
)

// Register makes a driver available for its net type. It panics if a driver
// registers twice, as database/sql.Register does: that is a programming error.
func Register(d Driver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if _, dup := drivers[d.Type()]; dup {
		panic(fmt.Sprintf("lnet: driver for %v registered twice", d.Type()))
	}
	drivers[d.Type()] = d
}

// LookupDriver returns the registered driver of a net type.
func LookupDriver(t wire.NetType) (Driver, bool) {
	driversMu.RLock()
	defer driversMu.RUnlock()
	d, ok := drivers[t]
	return d, ok
}

// Drivers lists the registered net types, sorted.
func Drivers() []wire.NetType {
	driversMu.RLock()
	defer driversMu.RUnlock()
	out := make([]wire.NetType, 0, len(drivers))
	for t := range drivers {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
