// Package ptlrpc is Nacre's PtlRPC request/reply core over LNet (DESIGN.md
// §4): services that take requests on a portal and run them on a fixed pool
// of handler goroutines, and a client that sends requests and waits for
// their replies, one at a time (Client.Call) or as a request set
// (Client.CallSet). Bodies are opaque bytes; marshalling them (protobuf) is
// the caller's business. Headers are dataplane/ptlrpc/wire.
//
// # Protocol
//
// A request is one LNet PUT of a wire.Header followed by the body to the
// service's request portal, with the request's XID as match bits and the
// client's reply portal in the PUT's hdr data. The client posts its reply
// MD before sending: attached on its reply portal, match bits = XID,
// threshold 1, room for wire.HeaderSize+wire.MaxBodySize bytes. The service
// answers with a PUT of a header (TypeReply, or TypeError with a negative
// errno) and the reply body to the requester's process id on that reply
// portal, with the XID as match bits. A request and a reply are each at most
// one LNet message (lnet/wire.MTU bytes, header included).
//
// # Request buffers
//
// A Service posts ServiceConfig.Buffers request buffers of BufferSize bytes
// on its request portal. They are not MANAGE_REMOTE: each request lands at
// the buffer's own advancing offset, so one buffer holds many small
// requests. Once the free space left in a buffer is below the largest
// request the service accepts (HeaderSize + ServiceConfig.MaxBodySize), the
// buffer is unlinked, so every acceptable request always fits whole in some
// posted buffer; when every request that landed in it has been handled, the
// same memory is posted again. Buffers have MDTruncate, so a request that
// is too big lands truncated and is answered with -EMSGSIZE instead of being
// dropped silently by LNet.
//
// # Back-pressure and errors
//
// Requests go through a bounded queue (Threads*8) to the handler
// goroutines; when it is full a request is answered at once with -EAGAIN. A
// request for an opcode with no handler gets -EOPNOTSUPP. A request whose
// header does not decode is dropped, logged and counted (without a valid
// XID no reply can reach the client).
//
// # Not built yet
//
// Bulk transfers (niobufs, bulk MDs, server-driven GET/PUT), imports and
// exports (CONNECT, connection handles and counts, eviction), adaptive
// timeouts and early replies, resend with the same XID and reply
// reconstruction, replay and transno/last_committed tracking, and NRS
// policies (requests are served FIFO).
package ptlrpc
