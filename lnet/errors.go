package lnet

import "errors"

// Errors of the LNet API, in addition to the LND errors declared with the
// contract (ErrShutdown, ErrTimeout, ErrPeerRestarted, ...), which also reach
// callers as event statuses. Every error LNet returns wraps one of these or
// a context error; test them with errors.Is.
var (
	// ErrNoMD: the handle names no live memory descriptor (never issued,
	// already unlinked, or being unlinked), or the MD's threshold is used up.
	ErrNoMD = errors.New("lnet: no such memory descriptor")
	// ErrInvalid: an argument is out of its domain (a threshold of 0, an MD
	// that takes neither PUT nor GET, an MD attached to a match entry used
	// as a PUT source).
	ErrInvalid = errors.New("lnet: invalid argument")
	// ErrMsgSize: a PUT payload or GET sink is longer than wire.MTU.
	ErrMsgSize = errors.New("lnet: message longer than the MTU")
	// ErrNoRoute: the target is on no network this node is on, and no
	// route to its network is up (or none is configured); also what
	// DelRoute returns when no route matched.
	ErrNoRoute = errors.New("lnet: no route")
	// ErrPeerTableFull: the message needs a peer LNet does not know yet and
	// the peer table holds Config.MaxPeers peer NIs; idle peers age out
	// after Config.PeerAge.
	ErrPeerTableFull = errors.New("lnet: peer table full")
	// ErrNoPeer: no peer has that primary NID (DelPeer).
	ErrNoPeer = errors.New("lnet: no such peer")
	// ErrDropped wraps every error Host.Parse returns for a message it
	// refused: no match entry, a late or stale ACK/REPLY, a message for
	// another node or process. Drops are routine on a busy network (late
	// replies after a timeout); LNDs should count them and log at debug
	// level, not tear down the connection.
	ErrDropped = errors.New("lnet: message dropped")
	// ErrExist: AddNet was given a NID the node has already.
	ErrExist = errors.New("lnet: NI exists")
	// ErrNotFound: DelNet matched no NI.
	ErrNotFound = errors.New("lnet: no such NI")
	// ErrBusy: DelNet would take away the net a route's gateway is on.
	ErrBusy = errors.New("lnet: NI in use")
	// ErrNotLoopback: PutLocal was asked to reach a process other than
	// this LNet's own (IsSelf).
	ErrNotLoopback = errors.New("lnet: not a loopback target")
)
