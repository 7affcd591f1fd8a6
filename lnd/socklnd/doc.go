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
// Send never blocks on the network: it puts the message, with its header
// marshalled, on the peer's queue for its connection type, and the
// connection's writer goroutine sends header and payload views with one
// writev, straight from LNet's buffers. Each connection's reader goroutine
// reads a header into a per-connection buffer, decodes it (a bad header
// drops that connection, logged with the peer and the reason; the NI keeps
// serving everyone else) and calls Host.Parse; the payload then goes from
// the socket straight into the views LNet passes to Rx.Recv, and the reader
// reads nothing more until Recv has run, so a slow consumer pushes back on
// its sender through TCP.
//
// # Concurrency
//
// Every NI method is safe for concurrent use. Each goroutine (the acceptor,
// one per handshake, one dialer per peer and connection type while one is
// needed, one reader and one writer per connection) belongs to the NI and
// ends by Shutdown. Host callbacks are never made with a socklnd lock held,
// and a message refused at once is finalized before Send returns.
package socklnd
