package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
)

// HelloMagic starts every hello; its bytes on the wire spell "LNDh". A
// big-endian peer would send 0x4c4e4468, which ReadHello reports as
// ErrOtherEndian.
const HelloMagic uint32 = 0x68444e4c

// HelloVersion is the hello protocol version this build speaks, and the
// only one ReadHello accepts.
const HelloVersion uint32 = 1

// MaxHelloIPs bounds the interface addresses one hello may list.
const MaxHelloIPs = 16

// HelloFixedSize is the size of a hello without its address list; each
// address adds 16 bytes. The layout, all integers little-endian:
//
//	offset size field
//	     0    4 magic, HelloMagic
//	     4    4 version, HelloVersion
//	     8   24 source NID (see NIDSize)
//	    32   24 destination NID
//	    56    4 source pid
//	    60    4 destination pid
//	    64    8 source incarnation
//	    72    8 destination incarnation
//	    80    4 connection type (ConnType)
//	    84    4 number of addresses, at most MaxHelloIPs
//	    88 16*n addresses, 16 bytes each in network order, IPv4 as IPv4-mapped IPv6
const HelloFixedSize = 88

// helloIPSize is the size of one address in a hello's list.
const helloIPSize = 16

// ConnType is the role of one socklnd connection. Following Lustre, a peer
// pair keeps a control connection (Nagle off) for small messages and separate
// connections for bulk in each direction, so a 1 MiB transfer never delays a
// lock callback. The values are Lustre's SOCKLND_CONN_*.
type ConnType uint32

// The connection types. Bulk in and out are named from the side that sends
// the hello: the sender's BULK_OUT is the receiver's BULK_IN.
const (
	ConnAny     ConnType = 0 // one connection carries everything
	ConnControl ConnType = 1 // small messages
	ConnBulkIn  ConnType = 2 // bulk data flowing to the hello's sender
	ConnBulkOut ConnType = 3 // bulk data flowing from the hello's sender
)

// String returns "any", "control", "bulk_in" or "bulk_out", or "ConnType(N)"
// for an unknown value.
func (c ConnType) String() string {
	switch c {
	case ConnAny:
		return "any"
	case ConnControl:
		return "control"
	case ConnBulkIn:
		return "bulk_in"
	case ConnBulkOut:
		return "bulk_out"
	}
	return "ConnType(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// Known reports whether c is one of the four connection types.
func (c ConnType) Known() bool { return c <= ConnBulkOut }

// Invert returns the type of this connection as seen from the other end:
// ConnBulkIn and ConnBulkOut swap, the others are unchanged. A receiver
// applies it to the type in a peer's hello (Lustre's ksocknal_invert_type).
func (c ConnType) Invert() ConnType {
	switch c {
	case ConnBulkIn:
		return ConnBulkOut
	case ConnBulkOut:
		return ConnBulkIn
	}
	return c
}

// Hello is the socklnd handshake each side sends first on a new connection
// (Lustre's ksock_hello_msg). It tells the peer who is calling, whom it meant
// to reach, which incarnation of each it believes it is talking to (a changed
// incarnation means the peer restarted and its in-flight traffic must fail),
// what the connection is for, and, for multi-rail, the sender's interface
// addresses.
type Hello struct {
	// Version is the hello protocol version; set it to HelloVersion.
	Version uint32
	// SrcNID is the sender's NID on this net and DstNID the NID it meant
	// to reach; both must be valid and non-zero.
	SrcNID, DstNID NID
	// SrcPID and DstPID are the sender's pid and the pid it meant to reach.
	SrcPID, DstPID uint32
	// SrcIncarnation identifies this run of the sender's LNet instance;
	// DstIncarnation is the peer's incarnation as the sender last saw it,
	// or 0 if it has not seen one.
	SrcIncarnation, DstIncarnation uint64
	// ConnType is the role of this connection.
	ConnType ConnType
	// IPs are the sender's interface addresses on this net, at most
	// MaxHelloIPs. They must be valid, unzoned and not IPv4-mapped IPv6.
	IPs []netip.Addr
}

// Size returns the number of bytes h encodes to.
func (h *Hello) Size() int { return HelloFixedSize + helloIPSize*len(h.IPs) }

// AppendBinary appends the encoding of h to b and returns the extended slice
// (encoding.BinaryAppender). It checks h by the rules ReadHello applies and
// returns b unchanged with an error wrapping ErrBadVersion, ErrBadNID,
// ErrBadType, ErrTooLong or ErrBadField if h breaks one.
func (h *Hello) AppendBinary(b []byte) ([]byte, error) {
	if h.Version != HelloVersion {
		return b, fmt.Errorf("%w: hello version %d, want %d", ErrBadVersion, h.Version, HelloVersion)
	}
	if err := h.validate(); err != nil {
		return b, err
	}
	for i, a := range h.IPs {
		if reason := helloIPProblem(a); reason != "" {
			return b, fmt.Errorf("%w: hello address %d (%v): %s", ErrBadField, i, a, reason)
		}
	}
	n := len(b)
	b = append(b, make([]byte, h.Size())...)
	e := b[n:]
	le := binary.LittleEndian
	le.PutUint32(e[0:], HelloMagic)
	le.PutUint32(e[4:], h.Version)
	PutNID(e[8:], h.SrcNID)
	PutNID(e[32:], h.DstNID)
	le.PutUint32(e[56:], h.SrcPID)
	le.PutUint32(e[60:], h.DstPID)
	le.PutUint64(e[64:], h.SrcIncarnation)
	le.PutUint64(e[72:], h.DstIncarnation)
	le.PutUint32(e[80:], uint32(h.ConnType))
	le.PutUint32(e[84:], uint32(len(h.IPs)))
	for i, a := range h.IPs {
		a16 := a.As16() // IPv4 becomes IPv4-mapped
		copy(e[HelloFixedSize+helloIPSize*i:], a16[:])
	}
	return b, nil
}

// validate applies the rules on the fixed part shared by AppendBinary and
// ReadHello.
func (h *Hello) validate() error {
	if reason := h.SrcNID.problem(); reason != "" {
		return fmt.Errorf("%w: hello source %v: %s", ErrBadNID, h.SrcNID, reason)
	}
	if reason := h.DstNID.problem(); reason != "" {
		return fmt.Errorf("%w: hello destination %v: %s", ErrBadNID, h.DstNID, reason)
	}
	if !h.ConnType.Known() {
		return fmt.Errorf("%w: hello connection type %d", ErrBadType, uint32(h.ConnType))
	}
	if len(h.IPs) > MaxHelloIPs {
		return fmt.Errorf("%w: hello lists %d addresses, at most %d", ErrTooLong, len(h.IPs), MaxHelloIPs)
	}
	return nil
}

func helloIPProblem(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return "not an address"
	case a.Zone() != "":
		return "has a zone"
	case a.Is4In6():
		return "IPv4-mapped IPv6: use the IPv4 form"
	}
	return ""
}

// ReadHello reads one hello from r: exactly the fixed part, then the address
// list it announces, and not a byte more, so the stream is positioned at the
// first message after it. It checks the magic and the version before reading
// on, so a peer speaking another protocol is turned away after 8 bytes.
//
// ReadHello does no I/O of its own beyond r.Read and sets no deadline; the
// caller bounds the wait (a socket deadline). On error the returned Hello is
// zero, except for ErrBadVersion: then its Version field holds the peer's
// version, so the LND can answer with the one it speaks. Errors wrap:
//
//   - ErrShort and io.ErrUnexpectedEOF: the stream ended inside the hello
//     (including before its first byte: a hello was expected).
//   - ErrBadMagic, and also ErrOtherEndian for a byte-swapped HelloMagic.
//   - ErrBadVersion: a version other than HelloVersion.
//   - ErrBadNID: a NID that does not decode, or a zero source or destination.
//   - ErrBadType: an unknown connection type.
//   - ErrTooLong: more than MaxHelloIPs addresses.
//   - the error r.Read returned, for other read failures.
func ReadHello(r io.Reader) (Hello, error) {
	var buf [HelloFixedSize + MaxHelloIPs*helloIPSize]byte
	le := binary.LittleEndian

	if err := readFull(r, buf[:8], "magic and version"); err != nil {
		return Hello{}, err
	}
	if err := checkMagic("hello", le.Uint32(buf[0:]), HelloMagic); err != nil {
		return Hello{}, err
	}
	if v := le.Uint32(buf[4:]); v != HelloVersion {
		return Hello{Version: v}, fmt.Errorf("%w: hello version %d, want %d", ErrBadVersion, v, HelloVersion)
	}
	if err := readFull(r, buf[8:HelloFixedSize], "fixed part"); err != nil {
		return Hello{}, err
	}
	src, reason := getNID(buf[8:])
	if reason != "" {
		return Hello{}, fmt.Errorf("%w: hello source: %s", ErrBadNID, reason)
	}
	dst, reason := getNID(buf[32:])
	if reason != "" {
		return Hello{}, fmt.Errorf("%w: hello destination: %s", ErrBadNID, reason)
	}
	h := Hello{
		Version:        HelloVersion,
		SrcNID:         src,
		DstNID:         dst,
		SrcPID:         le.Uint32(buf[56:]),
		DstPID:         le.Uint32(buf[60:]),
		SrcIncarnation: le.Uint64(buf[64:]),
		DstIncarnation: le.Uint64(buf[72:]),
		ConnType:       ConnType(le.Uint32(buf[80:])),
	}
	nips := le.Uint32(buf[84:])
	if nips > MaxHelloIPs {
		return Hello{}, fmt.Errorf("%w: hello lists %d addresses, at most %d", ErrTooLong, nips, MaxHelloIPs)
	}
	if err := h.validate(); err != nil {
		return Hello{}, err
	}
	if nips == 0 {
		return h, nil
	}
	ipb := buf[HelloFixedSize : HelloFixedSize+helloIPSize*int(nips)]
	if err := readFull(r, ipb, "address list"); err != nil {
		return Hello{}, err
	}
	h.IPs = make([]netip.Addr, nips)
	for i := range h.IPs {
		h.IPs[i] = netip.AddrFrom16([16]byte(ipb[helloIPSize*i:])).Unmap()
	}
	return h, nil
}

// readFull fills b from r, turning any end of stream into ErrShort with
// io.ErrUnexpectedEOF.
func readFull(r io.Reader, b []byte, what string) error {
	n, err := io.ReadFull(r, b)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: %w: hello %s: got %d of %d bytes", ErrShort, io.ErrUnexpectedEOF, what, n, len(b))
	}
	return fmt.Errorf("lnet: read hello %s: %w", what, err)
}
