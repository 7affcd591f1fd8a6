package wire

import "errors"

// Every error this package returns wraps one of these sentinels (ErrBadMagic
// comes with ErrOtherEndian for a byte-swapped peer); test for them with
// errors.Is. The message starts with the sentinel's text and goes on to say
// what was wrong and where.
var (
	// ErrBadMagic reports a header that does not start with Magic: the peer
	// speaks another protocol, or the buffer is not a PtlRPC message.
	ErrBadMagic = errors.New("ptlrpc: bad magic")

	// ErrOtherEndian reports a magic number that is byte-swapped: the peer
	// encodes in big-endian. It is always returned together with
	// ErrBadMagic, so callers that only check ErrBadMagic still see a
	// protocol error.
	ErrOtherEndian = errors.New("ptlrpc: peer has other endianness")

	// ErrBadVersion reports a header version this build does not speak.
	ErrBadVersion = errors.New("ptlrpc: unsupported version")

	// ErrBadType reports an unknown message type.
	ErrBadType = errors.New("ptlrpc: bad message type")

	// ErrBadField reports a field whose value is out of its domain: unknown
	// flag bits, a status that is not a network errno or that the message
	// type may not carry, a field the message type does not use, a zero XID,
	// a job id that is not NUL-padded printable ASCII, or a niobuf that is
	// empty, overflows, carries unknown flags, or is out of order.
	ErrBadField = errors.New("ptlrpc: bad field")

	// ErrTooLong reports a length or count over its bound: a body over
	// MaxBodySize, a job id over JobIDSize, more niobufs than the caller
	// allows, or a niobuf vector over MaxBulkSize.
	ErrTooLong = errors.New("ptlrpc: too long")

	// ErrShort reports a buffer that ends before the encoding does: a
	// header buffer under HeaderSize, or a niobuf vector whose length is not
	// a multiple of NiobufSize.
	ErrShort = errors.New("ptlrpc: short buffer")
)
