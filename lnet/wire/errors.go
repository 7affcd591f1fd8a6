package wire

import "errors"

// Every error this package returns wraps one of these sentinels (ErrBadMagic
// comes with ErrOtherEndian for a byte-swapped peer, ErrShort from a reader
// with io.ErrUnexpectedEOF, and ReadHello passes on other read errors as they
// are); test for them with errors.Is. The message starts with the sentinel's
// text and goes on to say what was wrong and where.
var (
	// ErrBadNID reports a NID or process id that does not parse, does not
	// decode, or names an address its net cannot carry.
	ErrBadNID = errors.New("lnet: bad NID")

	// ErrBadNet reports a net name ("tcp1", "o2ib") that does not parse.
	ErrBadNet = errors.New("lnet: bad net")

	// ErrBadMagic reports a header, hello or ping payload that does not start
	// with its magic number: the peer speaks another protocol, or the stream
	// lost its framing.
	ErrBadMagic = errors.New("lnet: bad magic")

	// ErrOtherEndian reports a magic number that is byte-swapped: the peer
	// encodes in big-endian. It is always returned together with ErrBadMagic,
	// so callers that only check ErrBadMagic still see a protocol error.
	ErrOtherEndian = errors.New("lnet: peer has other endianness")

	// ErrBadVersion reports a protocol version this build does not speak.
	ErrBadVersion = errors.New("lnet: unsupported version")

	// ErrBadType reports an unknown message type or connection type.
	ErrBadType = errors.New("lnet: bad type")

	// ErrBadField reports a field whose value is out of its domain: non-zero
	// padding, a field the message type does not use, an unknown status.
	ErrBadField = errors.New("lnet: bad field")

	// ErrTooLong reports a length or count over its bound: a payload over
	// the MTU, a payload on a message type that carries none, too many
	// interface addresses or NIDs, trailing bytes after a ping payload.
	ErrTooLong = errors.New("lnet: too long")

	// ErrShort reports a buffer or stream that ends before the encoding
	// does. From a reader it comes wrapped with io.ErrUnexpectedEOF too.
	ErrShort = errors.New("lnet: short buffer")
)
