// Package ptlrpc is Nacre's PtlRPC layer over LNet (DESIGN.md §4, seed 000
// §3.3–3.5): services that take requests on a portal and run them on a pool
// of handler goroutines in the order an NRS policy picks; targets and their
// exports (the server side of connections); a client with connectionless
// calls and imports (the client side of connections); server-driven bulk
// transfers; adaptive timeouts, early replies, resend and reply
// reconstruction; the transno/last_committed bookkeeping; and recovery
// after a server restart (replay, REPLAY_WAIT, client records). Bodies are opaque bytes (protobuf, marshalled by the layers
// above); headers are dataplane/ptlrpc/wire. It must not know what an
// opcode means beyond CONNECT, DISCONNECT and OBD_PING.
//
// # Request and reply
//
// A request is one LNet PUT of a wire.Header and its body to the service's
// request portal, with the XID as match bits and hdr data carrying the
// client's reply portal (low 32 bits) and bulk portal (high 32 bits). Before
// sending, the client posts a reply MD (MANAGE_REMOTE, matched by the XID)
// that stays posted across resends until the call ends: early replies land
// at offset 0, the final reply at wire.HeaderSize. A handler's status goes
// back in a TypeReply with its body; TypeError means the service could not
// process the request at all (-EAGAIN when its queue is full, -EOPNOTSUPP,
// -EMSGSIZE, -ENOTCONN, -EPROTO).
//
// # Request buffers and handlers
//
// A Service posts ServiceConfig.Buffers request buffers on its portal; each
// request lands at the buffer's advancing offset. When the space left is
// below the largest acceptable request the buffer is unlinked, and once
// every request in it has been handled the memory is posted again. Requests
// go through the NRS head (dataplane/nrs: FIFO or TBF, bounded at
// MaxQueued; past it -EAGAIN) to between MinThreads and MaxThreads handler
// goroutines. A request that the NRS would release at once (nothing queued
// before it) is instead handled by the goroutine that received it, once
// LNet is done with it (lnet.Event.Continue; over socklnd), at most
// MaxThreads such at once: making a handler goroutine runnable wakes an
// idle CPU, which at one RPC in flight costs more than a small handler
// (ServiceStats.Direct counts them). Such a handler's context carries the
// connection's lnet.Releaser: code about to wait for the network calls
// Blocking (Client calls and LDLM lock waits do), so the connection is
// read meanwhile; handlers that move bulk always go to the handler
// goroutines, since a small bulk comes on the request's connection. The
// handler table maps opcodes to a function, flags (Modifying, HasBulk,
// NoExport) and a fault-injection id.
//
// # Bulk
//
// Server-driven, as in Lustre: the client registers its buffers as MDs on
// its bulk portal, one per 1 MiB fragment with match bits XID+i (XIDs step
// by 16, so fragments never meet another request's), and states the bulk
// length (and, for a write with checksums, its checksum) in the header; the
// body carries the remote niobufs. The handler calls Request.BulkGet (a
// write: the server GETs every fragment at once, straight into the
// handler's buffers) or Request.BulkPut (a read: PUTs straight from them)
// and replies after the transfer. A write whose data does not match the
// client's checksum is fetched again (three tries, counted) and then
// refused with -EBADMSG; a read's checksum travels in the reply and a
// mismatch makes the client send the request again (three tries, counted).
// The checksum is CRC-32C or CRC-32 (ChecksumType, Lustre's OBD_CKSUM_*
// bits): CONNECT agrees on the algorithms both sides handle, the client
// names one per request (by default the fastest on its CPU: on amd64 with
// carry-less multiply, CRC-32 streams through cold memory several times
// faster than CRC-32C), and a read's reply uses the one its request named.
//
// # Connections
//
// A service with ServiceConfig.Targets serves CONNECT, DISCONNECT and
// OBD_PING itself and refuses other requests (-ENOTCONN) unless they name a
// live export in their handle. A Target keeps one export per client uuid,
// evicts clients silent for EvictTimeout, and numbers the requests of
// Modifying handlers with transnos. An Import connects by itself, pings
// when idle, and after a timeout, a lost connection or -ENOTCONN
// reconnects and resends its outstanding requests with the same XID and
// MSG_RESENT: the export answers a resend whose original already ran from
// the reply it kept (pruned by the client's last_xid) and drops one whose
// original is still running. After a reconnect that finds the export gone
// the import is EVICTED: outstanding requests fail with ErrEvicted and
// ImportConfig.OnEvict runs before new requests go out.
//
// # Timeouts
//
// Each import estimates the service time (from replies' service time) and
// the network latency, each the worst value of a sliding window
// (estimator), and sets a request's timeout from them; the header tells the
// server that timeout in milliseconds. The server sends an early reply to a
// request still queued or running when a quarter of its timeout is left,
// extending the client's deadline, never past the request's arrival plus
// at_max (10 minutes by default). A client whose node has adaptive
// timeouts off (at_max 0) does not flag its requests MsgATSupport, so the
// server sends it none, and it ignores any that comes: its requests wait
// obd_timeout.
//
// # Commit
//
// Replies to Modifying requests carry the transno, and every reply the
// target's last_committed; an import keeps each such request (opcode, body,
// transno) until last_committed covers it, bounded by MaxUncommitted (past
// it new requests wait and ping).
//
// # Recovery
//
// A target that restarts with changes behind it (TargetConfig.LastTransno)
// opens a recovery window (RecoveryWindow). An import that reconnects to
// a new instance of its server that took it back replays its kept
// requests in transno order (MSG_REPLAY, state REPLAY), says it has with
// an OBD_PING flagged MSG_REQ_REPLAY_DONE, then replays what the layers
// above keep (ImportConfig.OnRecover: locks, open files, data not yet
// committed; state REPLAY_LOCKS), and then says so with an OBD_PING
// flagged MSG_REQ_REPLAY_DONE | MSG_LOCK_REPLAY_DONE.
//
// A target that knows its previous life's clients (TargetConfig.Clients,
// recorded through OnNewClient and OnClientGone) recovers as Lustre's
// does. It runs the replayed requests of all clients one at a time in
// transno order, each under its transno of the previous life: a replay
// waits until every client that may still replay an earlier transno has
// come back and sent its next replay or its MSG_REQ_REPLAY_DONE. So a
// change finds what it depended on (a file created in another client's
// new directory), and a restart during recovery never has a later change
// committed before an earlier one still to come. It holds each
// MSG_REQ_REPLAY_DONE request until every client has replayed its
// requests, so locks and opens are replayed after them and numbered after
// them; and it serves nothing new until all clients are back: it holds
// each final replay-done request unanswered (early replies keep its
// client waiting, in REPLAY_WAIT, sending only lock cancels and
// conversions) and refuses other clients' connects with -EBUSY. It ends
// recovery once the last is back, at EndRecovery (abort_recovery), or
// when the window runs out. At the window's end, while clients that came
// back still replay, and either some others never came back (they are
// evicted then) or the replays went on since, the window is put off by
// its length, up to three windows from the start (Lustre's
// recovery_time_hard); then the clients not done are evicted and the
// rest answered. A connection lost in the middle
// of this goes on after the reconnect where it stopped. Import.PingNow
// makes an idle import notice a restart at once (Lustre's imperative
// recovery: the client hears of it from the MGS).
package ptlrpc
