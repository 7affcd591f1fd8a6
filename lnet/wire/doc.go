// Package wire owns the byte layout of everything LNet puts on a wire: NIDs and
// process ids (in text and in binary), the fixed LNet message header, the LND
// hello handshake, and the ping payload that carries a peer's NID list.
//
// It sits below both lnet and the network drivers in lnd/*, which never import
// each other; the two agree on the bytes by importing this package. That is the
// whole of its job. It must not touch sockets, timers, goroutines or any state:
// every function here is a pure function of its arguments (ReadHello reads
// from an io.Reader it is handed and nothing else), so every type is safe for
// concurrent use as long as callers do not share a value they are mutating.
//
// # Encoding rules
//
// Every encoding is hand-written with a fixed layout: integers are
// little-endian, fields sit at fixed offsets with explicit zero padding, and
// there are no unions, varints or optional fields. IP addresses are byte
// strings in network order, not integers. Decoders are strict so that each
// value has exactly one encoding: they reject unknown enumerations, non-zero
// padding, fields a message type does not use, non-canonical addresses and
// lengths beyond the documented bounds. Anything a decoder accepts re-encodes
// to the same bytes, and the encoders refuse what the decoders would reject,
// so a peer never sees bytes this package would not accept itself.
//
// Errors wrap one of the package's sentinels (ErrBadNID, ErrBadMagic,
// ErrShort, ...) with the detail a person needs, so callers test them with
// errors.Is.
//
// # Sizes
//
//	NIDSize        24 bytes  (type u16, num u16, addr length u8, 3 pad, 16 addr)
//	HeaderSize    120 bytes  (see Header)
//	HelloFixedSize 88 bytes  + 16 bytes per interface address
//	PingInfo       16 bytes  + 28 bytes per NID
//
// The LNet MTU is 1 MiB (MTU); larger transfers are split by lnet into several
// messages.
package wire
