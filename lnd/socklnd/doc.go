// Package socklnd is Nacre's TCP network driver (LND), Lustre's socklnd: it
// carries LNet messages between the nodes of a "tcp" net over TCP sockets.
// It registers itself for wire.TCP in init; LNet starts one NI per tcp
// network through lnet.Driver.Startup, and hands it messages with
// lnet.LND.Send.
//
// # What socklnd owns, and what it does not
//
// socklnd owns sockets: the listener on the NI's address (port 988 unless
// the "port" option says otherwise; every node of a net uses the same
// port, since a NID carries none), dialing peers with backoff, the hello
// handshake and its checks, the typed connections, TCP keepalive, and
// moving bytes between sockets and the buffers LNet hands it.
//
// It does not look inside messages beyond checking their headers decode:
// matching, portals, memory descriptors, routing, health and credits are
// LNet's. In particular socklnd enforces no credits: its per-peer queues
// are bounded at twice the peer credits it reports through Tunables and
// trust LNet to stay within them (a message over the bound fails rather
// than the queue grows).
//
// # Connections
//
// Between two nodes socklnd keeps up to three connections, as seed 004
// describes: a control connection (Nagle off) for small messages, and one
// bulk connection per direction for payloads of Config.MinBulk (64 KiB) and
// more, so a stream of 1 MiB transfers never delays a lock callback. Each
// is made on the first send that needs it. The dialing side's hello names
// the type as it sees it; the other side inverts it (wire.ConnType.Invert),
// so one node's bulk_out is its peer's bulk_in. Messages of one type to one
// peer leave in Send order on one connection.
//
// The hello carries both sides' incarnations. A peer that shows a new one
// has restarted: its old connections are closed, the messages being written
// on them or queued behind them fail with lnet.ErrPeerRestarted, and LNet
// hears lnet.PeerRestarted. Messages that were waiting for a connection
// (none was up when they were sent) go to the new incarnation, as in
// Lustre. When both nodes dial the same type at once, the
// connection dialed by the higher NID survives (Lustre's rule); see
// installLocked in conn.go.
//
// # Peers
//
// The peer table holds one entry per neighbour NID: its connections, its
// queues, and the incarnation it last showed. It is bounded: a peer with no
// connection, nothing queued and no dial in progress is dropped once it
// has been unused for Config.PeerIdleAge (10 minutes), forgetting its
// incarnation; and at Config.MaxPeers (16384) a new peer is refused (a send
// to it fails with lnet.ErrPeerUnreachable, a handshake from it is closed),
// with a log line at most once a second, until idle ones go.
//
// # Data path
//
// Send never blocks on the network. A small message (payload under
// Config.MinBulk) whose connection is up and idle is written by Send
// itself, header and payload views in one non-blocking writev straight
// from LNet's buffers, and finalized before Send returns: a small round
// trip then costs one write and one read on each side, and no goroutine
// hand-off. When the peer's NI runs in this process, such a Send first
// yields the processor once, with its message queued: the goroutines
// runnable at that moment (RPC handlers finishing together, callers woken
// by replies that came in one read) queue theirs behind it, and the one
// writev carries them all (Stats.TxWrites counts the writes). On loopback
// a write costs more than the rest of a small RPC, so under load this is
// most of the layer's throughput in one process. Across processes the
// yield batches only this process's messages and, with a processor idle,
// costs a thread wake-up, so a Send to another process writes at once;
// messages that come while a write is in progress go together in the
// next one all the same (see conn.combine).
// Otherwise the message, with its header marshalled, goes on the
// peer's queue for its connection type, and the connection's writer
// goroutine sends it, together with whatever queued behind it (up to 64
// messages or 64 KiB to one writev), again straight from LNet's buffers. An
// inline write that the socket takes only part of is finished by the
// writer, before anything queued after it; an inline write never waits for
// socket space, since Send may run on a reader goroutine answering a
// message, and two readers blocked writing to each other would deadlock.
// LNet hands over, with one SendBatch, the messages that became ready while
// an earlier Send was in progress; those for one connection leave in one
// writev.
//
// Each connection's reader reads whatever the socket holds into a
// per-connection buffer (4 KiB), takes the next header out of it, decodes
// it (a bad header drops that connection, logged with the peer and the
// reason; the NI keeps serving everyone else) and calls Host.Parse. Rx.Recv
// then moves the payload into the views LNet passes: the bytes that came
// in the buffer are copied, the rest are read from the socket straight
// into the views. The reader reads nothing more until Recv has run, so a
// slow consumer pushes back on its sender through TCP.
//
// The reader is an lnet.Continuer: a message's handler may leave work
// (a PtlRPC request's handler) to run on the reader goroutine after the
// message, when nothing more from the peer is in the read buffer, and the
// reader reads on after it. A continuation about to wait for the network
// gives the connection to a new reader first (lnet.Releaser); one that
// runs for a millisecond without doing so has it taken by a watchdog, so
// that one waiting for the peer's next message gets it all the same
// (cont.go).
//
// That copy is the one exception to "no copies of payloads", and it is
// bounded and kept off bulk data: a small message arrives with its header
// in one read, and one memory copy of it (the messages on control
// connections are RPC headers and bodies, under MinBulk) is cheaper than
// the second system call that reading the header alone would cost. At
// most 4 KiB minus a header of any one payload is copied: a PUT or GET
// under MinBulk that travels on the control connection has only its first
// bytes copied and the rest read straight into its MD. Bulk
// connections, which carry every payload of MinBulk and more, read exactly
// one header at a time, so bulk data always goes from the socket straight
// into the matched MD. (Without typed connections, the single connection
// reads as a control one does: up to 4 KiB of a bulk payload may then be
// copied.)
//
// # Concurrency
//
// Every NI method is safe for concurrent use. Each goroutine (the acceptor,
// one per handshake, one dialer per peer and connection type while one is
// needed, one reader and one writer per connection) belongs to the NI and
// ends by Shutdown; a reader running a continuation is the upper layer's
// until the continuation returns, and a connection has at most one reader
// reading. Host callbacks are never made with a socklnd lock held.
// A message refused at once, or written whole inline, is finalized before
// Send returns, on the caller's goroutine; messages that queued behind an
// inline write are finalized on the goroutine that wrote them.
package socklnd
