// Package lnet is the LNet core: Portals 3 message passing with RDMA
// semantics over pluggable network drivers (LNDs), as Lustre's lnet/lnet.
//
// # What it owns
//
//   - The NIs of the node: 0@lo always, and one per (net, address) of
//     Config.Networks (see ParseNetworks for Lustre's "networks=" syntax),
//     each run by the Driver registered for its net type (lnd/lolnd,
//     lnd/socklnd, ...; drivers register in init, so import them for their
//     side effects).
//   - The portal table: per portal an ordered list of match entries, each
//     with a memory descriptor (Attach), plus free-floating MDs (Bind).
//   - Put and Get, the ACK and REPLY they get back, and the events every MD
//     receives (Event).
//   - Peers and their peer NIs, the per-NI and per-peer-NI send credits, the
//     bounded queues of messages waiting for credits, and path selection
//     (by health, then credits, then round robin) over every NI of the node
//     and every NID of the peer (multi-rail).
//   - Ping and discovery: every node answers GETs on PingPortal with its
//     wire.PingInfo; Ping and Discover ask for it, and the first send to a
//     peer discovers it in the background. A node whose NIs change pushes
//     the new info (a PUT on PingPortal) to the peers that discovered it.
//   - NIs: AddNet and DelNet bring NIs up and down on a running node
//     (lnetctl net add/del); the NI table is replaced whole, never changed.
//   - Health: of each NI and peer NI, lowered by failures, raised by
//     traffic, and recovered by pings (one housekeeping goroutine).
//   - Routing: the route table and its gateways' liveness (route.go), and,
//     on a node with Config.Routing, forwarding through a bounded pool of
//     router buffers (router.go).
//   - Transaction timeouts, on one timer goroutine for all messages.
//   - The Host side of the LND contract (lnd.go): Parse matches incoming
//     messages and has the LND move payloads straight into the matched MD
//     (or a router buffer), Finalize returns credits, records health and
//     raises SEND events, PeerEvent fails the operations a restarted peer
//     will never answer.
//   - Statistics (Stats, Peers, Routes) and Prometheus metrics.
//
// It does not own sockets, connections or wire bytes (the LNDs and
// lnet/wire do), nor what the bytes mean (PtlRPC does).
//
// # Example
//
// A node with a TCP NI, serving a buffer on portal 4 and sending to a peer
// (the Example function runs the same over 0@lo):
//
//	nets, _ := lnet.ParseNetworks("tcp(eth0)")
//	cfg := lnet.DefaultConfig()
//	cfg.Networks = nets
//	ln, err := lnet.New(ctx, cfg) // with _ "github.com/nacrefs/nacre/lnd/lolnd" and .../socklnd imported
//	...
//	defer ln.Close(ctx)
//	_, err = ln.Attach(4, lnet.AnyProcess, 0x77, 0, lnet.InsertLast, lnet.MD{
//		Buffers: [][]byte{buf}, Threshold: lnet.ThresholdInfinite,
//		Options: lnet.MDOpPut, Handler: onRequest,
//	})
//	src, _ := ln.Bind(lnet.MD{Buffers: [][]byte{msg}, Threshold: 1, Handler: onSent})
//	err = ln.Put(ctx, src, lnet.AckReq, peer, 4, 0x77, 0, 0) // SEND, then ACK, on onSent
//
// # Semantics
//
// An incoming PUT or GET on a portal tries the match entries in list order
// and takes the first whose match bits equal the message's outside the
// entry's ignore bits, whose source filter accepts the initiator, and whose
// MD takes the operation: it has MDOpPut or MDOpGet, has operations left
// (Threshold), and has room for the message at the offset (the MD's own,
// which then advances, or with MDManageRemote the initiator's), or accepts
// fewer bytes (MDTruncate). No match: the message is dropped, counted and
// logged at debug level, and its payload drained. A PUT that asked for an
// ACK gets one unless the MD has MDAckDisable; a GET is answered with a
// REPLY carrying what the MD could give.
//
// Payloads are never copied by LNet: Put hands the LND views of the source
// MD's buffers, Parse hands it views of the matched MD's buffers to receive
// into. An MD's buffers belong to LNet while an operation on it is in
// flight.
//
// An MD unlinks itself when its threshold is used up and its operations
// have finished, or when Unlink is called and its operations have finished.
// Its last operation event then has Event.Unlinked set, and an EventUnlink
// always follows as its very last event; the handle is stale from then on.
//
// # Concurrency and locking
//
// Every method of LNet is safe for concurrent use. Inside, three main
// mutexes:
//
//   - LNet.res (resources): portals, match entries, MDs, the transactions
//     awaiting ACK/REPLY, and each MD's queue of undelivered events.
//   - LNet.net (network): NI and peer NI credits, credit queues, peers,
//     health, discovery state, routes and gateways, selection state.
//   - timer.mu: the deadline heap; a leaf.
//
// res and net are never held together; timer.mu may be taken under either.
// Two more leaves are taken under neither: the router buffer pool's and the
// one guarding the ping buffer's handle.
// No lock is held while calling an LND (Send, Shutdown) or an event
// handler. An LND may call Finalize and PeerEvent from any goroutine,
// including from inside Send; it should call Parse from its own receive
// goroutines, not from inside Send (a loopback delivers from a worker, as
// lnd/lolnd does), so that a receive never runs on a sender's stack.
// Functions named ...Locked must be called with the lock guarding the
// fields they touch held (LNet.res for portals, MDs and transactions,
// LNet.net for credits and peers).
//
// Close must not be called from an event handler: it waits for the LNDs,
// which may be waiting for that handler to return.
//
// Event handlers run without any LNet lock, on the goroutine that completed
// the event (an LND's receive goroutine, the LND's completion goroutine,
// the timer, or the caller of Unlink). Each MD's handler is called by one
// goroutine at a time, in event order; a handler may call any LNet method
// but Close (which waits for the goroutines handlers run on), including
// Unlink on its own MD. A handler that blocks stalls the
// goroutine it runs on, and through it the connection it came from: that
// is back-pressure, not a deadlock, unless the handler waits for traffic
// on that same connection.
//
// A handler with longer work — a PtlRPC service running a request — can
// hand it back to the receiving goroutine with Event.Continue instead of
// waking another goroutine for it: when the LND is a Continuer (socklnd),
// the work runs on that goroutine after LNet is done with the message, and
// the LND gives the connection to a new reader should it run long (so it
// may wait for traffic on that connection).
//
// Messages to one peer are handed to the LND in the order they got their
// credits, which is the order they were sent, so an ordered LND delivers
// them in order (several NIs on one net may reorder across rails).
//
// # Credits
//
// A message needs a credit of its peer NI (Tunables.PeerCredits) and one of
// its local NI (Tunables.Credits) before LNet hands it to the LND; without
// one it waits in a FIFO, and credit counters go negative by the number of
// waiters (Stats shows both). The LND's Finalize returns the credits to the
// first waiter. At most Config.MaxWaiting messages of one NI wait: beyond
// that Put and Get block until there is room or their context ends. ACKs
// and REPLYs never block (they are bounded by what peers send us). A
// message that waits past the transaction timeout fails with ErrTimeout.
//
// # Timeouts and failures
//
// Each PUT with ACK and each GET is a transaction that must finish within
// Config.TransactionTimeout; otherwise its ACK or REPLY event is raised with
// ErrTimeout and whatever arrives later is dropped. A send the LND fails
// with ErrConnReset, ErrPeerUnreachable, ErrTimeout or ErrLocalNI lowers
// the health of the peer NI or NI at fault (below) and is sent again, on the
// path selection now prefers, up to Config.RetryCount times within that
// time; ACKs and REPLYs are not resent (the initiator's timeout covers
// them). When an LND reports that a peer restarted, the transactions whose
// message already reached the old instance fail at once with
// ErrPeerRestarted.
//
// # Multi-rail, health and discovery
//
// A node may have several NIs on one net (tcp(eth0,eth1)), and a peer is
// one node known by all its NIDs. Discovery learns them: Discover pings a
// NID (a GET of the peer's wire.PingInfo on PingPortal, answered by its
// LNet) and records every NID the answer lists under one peer whose
// primary NID is the one pinged; LNet does the same in the background the
// first time it sends to a peer (at most 64 such pings at a time; off with
// Config.DisableDiscovery), if the peer advertises multi-rail. Incoming
// operations from a discovered peer carry its primary NID as
// Event.Initiator, whichever rail they came by.
//
// Each send picks its local NI among those on the destination's net and its
// peer NI among the peer's NIDs on that net: the healthiest, then the one
// with the most credits, then the one picked longest ago. The header keeps
// the NID the caller addressed; the message goes to the chosen peer NI.
// ACKs and REPLYs go back exactly the way the request came (to the NID it
// came from, from the NI it came in on).
//
// Health starts at 1000 for every NI and peer NI (Lustre's LNet health,
// with Config.HealthSensitivity s, default 100):
//
//   - a send the LND completed raises its NI by s; a message received
//     raises the NI it came in on and the peer NI it came from by s (only
//     hearing from a peer NI proves it works);
//   - ErrLocalNI lowers the NI by s; ErrConnReset, ErrPeerUnreachable and
//     ErrTimeout lower the peer NI by s, and so does an ACK or REPLY that
//     never came for a message that left (a remote timeout);
//   - an NI whose OS interface is down (checked every
//     Config.RecoveryInterval) ranks below all others until it is back, and
//     our ping answers say it is down.
//
// NIs and peer NIs below 1000 are pinged every Config.RecoveryInterval
// (default 1s; a local NI through a peer on its net, a peer NI on exactly
// its NID), and climb back as the replies come in. A PeerUp or
// PeerRestarted from the LND (a handshake went both ways) restores a peer
// NI at once. All this runs on one housekeeping goroutine owned by LNet;
// pings are asynchronous GETs, so it never waits on the network.
//
// # Routing
//
// A destination on a net where this node has no NI (and whose peer shows
// no NID on one) is reached through a route (Config.Routes, AddRoute): the
// message keeps the final destination in its header and goes to the
// gateway, chosen among the routes to that net that are up by lowest
// priority value, then fewest hops, then round robin. Each gateway is
// pinged every Config.RouterCheckInterval; one that does not answer within
// Config.RouterPingTimeout, answers that it does not route, or fails a
// send, takes its routes down until a ping succeeds; one whose ping says
// every NI it has on a route's net is down takes that route down until a
// ping says one is up (Lustre's avoid_asym_router_failure). With every
// route down a send fails with ErrNoRoute.
//
// A node with Config.Routing forwards what it receives for others: the
// payload goes into one of Config.RouterBuffers MTU-size buffers, and the
// message goes on with its header unchanged (source and destination NID
// and pid, cookies, match bits), directly if the router has an NI on the
// destination's net, else through a route of its own, never back to the
// neighbour it came from. A message that finds no buffer free waits without
// its payload being read, which stalls the connection it came on: a
// router's memory is bounded and a fast sender is slowed to what the far
// side takes. A node without Routing drops such messages and counts them
// (Stats.Router). ACKs and REPLYs find their way back because they are
// addressed to the initiator's NID. A router drops at once, and counts,
// what it would forward to a next hop that failed (health below 1000) and
// has been silent for its NI's Tunables.PeerTimeout, instead of holding it
// until it times out; the next hop's recovery pings bring it back.
//
// # Bounded tables
//
// Nothing grows with load. The peer table holds at most Config.MaxPeers
// peer NIs: a message that needs one more fails with ErrPeerTableFull (or
// is dropped, if it came in), with a log line at most once a second; peers
// with nothing in flight and no traffic for Config.PeerAge are dropped.
// Routes and gateways are what the administrator configured. Credit queues
// are bounded (Config.MaxWaiting), as are router buffers, discovery and
// recovery pings.
package lnet
