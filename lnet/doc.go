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
//     (by health, then credits, then round robin).
//   - Transaction timeouts, on one timer goroutine for all messages.
//   - The Host side of the LND contract (lnd.go): Parse matches incoming
//     messages and has the LND move payloads straight into the matched MD,
//     Finalize returns credits and raises SEND events, PeerEvent fails the
//     operations a restarted peer will never answer.
//   - Statistics (Stats) and Prometheus metrics.
//
// It does not own sockets, connections or wire bytes (the LNDs and
// lnet/wire do), nor what the bytes mean (PtlRPC does). Routing, peer
// discovery and health-driven multi-rail retries build on the seams in
// peer.go (peer with several peer NIs, selectPathLocked, pick,
// healthLocked) and parse.go (the "not ours" case, initiatorOf).
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
// Every method of LNet is safe for concurrent use. Inside, three mutexes:
//
//   - LNet.res (resources): portals, match entries, MDs, the transactions
//     awaiting ACK/REPLY, and each MD's queue of undelivered events.
//   - LNet.net (network): NI and peer NI credits, credit queues, peers,
//     selection state.
//   - timer.mu: the deadline heap; a leaf.
//
// res and net are never held together; timer.mu may be taken under either.
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
// goroutine at a time, in event order; a handler may call any LNet method,
// including Unlink on its own MD. A handler that blocks stalls the
// goroutine it runs on, and through it the connection it came from: that
// is back-pressure, not a deadlock, unless the handler waits for traffic
// on that same connection.
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
// ErrTimeout and whatever arrives later is dropped. A send that fails on the
// connection (ErrConnReset, ErrPeerUnreachable) is retried up to
// Config.RetryCount times within that time. When an LND reports that a peer
// restarted, the transactions whose message already reached the old
// instance fail at once with ErrPeerRestarted.
package lnet
