// Package wire owns the bytes of a PtlRPC message header and of the remote
// niobuf vectors that bulk RPCs carry: their fixed layout, the constants
// that appear in them (message types, opcodes, flags, niobuf flags), and the
// rules a peer's bytes must follow before anything above trusts them.
//
// Every PtlRPC request and reply is one LNet PUT whose payload is a Header
// followed by Header.BodyLen bytes of body. The body is a protobuf message
// defined in proto/ and is not this package's business; nor is the bulk data
// of a read or write, which never travels in a body but moves by separate
// LNet PUTs and GETs described by niobufs (see Niobuf). This package must not
// touch LNet, sockets, timers, goroutines, protobuf or any state: every
// function is a pure function of its arguments, so every type is safe for
// concurrent use as long as callers do not share a value they are mutating.
// It imports only the standard library, so dataplane/ptlrpc, the NRS
// policies and the servers can all import it.
//
// # Encoding rules
//
// As in lnet/wire, every encoding is hand-written with a fixed layout:
// integers are little-endian, fields sit at fixed offsets, and there are no
// unions, varints or optional fields. Decoders are strict so that each value
// has exactly one encoding: they reject unknown message types and flag bits,
// statuses that are not network errnos (see ErrnoValid), fields a message
// type does not use, job ids that are not canonically NUL-padded, and lengths
// beyond the documented bounds. Anything a decoder accepts re-encodes to the
// same bytes, and the encoders refuse what the decoders would reject, so a
// peer never sees bytes this package would not accept itself.
//
// Errors wrap one of the package's sentinels (ErrBadMagic, ErrBadField,
// ErrShort, ...) with the detail a person needs, so callers test them with
// errors.Is.
//
// # Sizes
//
//	HeaderSize  120 bytes  (see HeaderSize for the layout)
//	NiobufSize   16 bytes  per remote niobuf (offset u64, length u32, flags u32)
//	MaxBodySize   1 MiB    largest body after a header
//	MaxBulkSize  16 MiB    largest sum of niobuf lengths in one vector
package wire
