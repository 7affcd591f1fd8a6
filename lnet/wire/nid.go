package wire

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// NetType is the kind of network a NID lives on; it names the LND that drives
// it. The values are Lustre's LND numbers (SOCKLND, O2IBLND, LOLND) so that a
// Lustre engineer reading a hex dump recognises them. The zero NetType is not
// a network: it is what the zero NID (AnyNID) carries.
type NetType uint16

// The network types Nacre knows. Parsers and decoders reject every other value.
const (
	TCP  NetType = 2 // "tcp": socklnd over TCP/IP
	O2IB NetType = 5 // "o2ib": o2iblnd over RDMA verbs, addressed by IPoIB address
	LO   NetType = 9 // "lo": lolnd, the node talking to itself; only net "lo", only NID 0@lo
)

// netTypeNames lists the known types with their text names. No name is a
// prefix of another, which ParseNet relies on.
var netTypeNames = [...]struct {
	t    NetType
	name string
}{
	{TCP, "tcp"},
	{O2IB, "o2ib"},
	{LO, "lo"},
}

// String returns the net type's name ("tcp", "o2ib", "lo"), or "NetType(N)"
// for a value this package does not know.
func (t NetType) String() string {
	for _, n := range netTypeNames {
		if n.t == t {
			return n.name
		}
	}
	return "NetType(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// Known reports whether t is one of TCP, O2IB and LO.
func (t NetType) Known() bool {
	return t == TCP || t == O2IB || t == LO
}

// ParseNetType returns the NetType named s: exactly "tcp", "o2ib" or "lo",
// lower case, no number. Any other s gives an error wrapping ErrBadNet.
func ParseNetType(s string) (NetType, error) {
	for _, n := range netTypeNames {
		if n.name == s {
			return n.t, nil
		}
	}
	return 0, fmt.Errorf("%w type %q: want tcp, o2ib or lo", ErrBadNet, s)
}

// Net is one LNet network: a type and a number, so that a node can sit on
// several networks of one type ("tcp", "tcp1", "tcp2"). Net is comparable and
// may be used as a map key. The zero Net is not a network.
type Net struct {
	Type NetType
	Num  uint16
}

// String returns the Lustre name of the net: the type name followed by the
// number unless it is 0 ("tcp", "tcp1", "o2ib3", "lo"). The zero Net prints
// "<?>" as Lustre prints LNET_NET_ANY; a Net Validate rejects prints in angle
// brackets so it is never mistaken for a real one.
func (n Net) String() string {
	if n.Num == 0 && n.Type.Known() {
		return n.Type.String() // no allocation for the common case
	}
	return string(n.AppendTo(nil))
}

// AppendTo appends n.String() to b and returns the extended slice.
func (n Net) AppendTo(b []byte) []byte {
	switch {
	case n == Net{}:
		return append(b, "<?>"...)
	case n.problem() != "":
		b = append(b, "<net type="...)
		b = strconv.AppendUint(b, uint64(n.Type), 10)
		b = append(b, " num="...)
		b = strconv.AppendUint(b, uint64(n.Num), 10)
		return append(b, '>')
	}
	b = append(b, n.Type.String()...)
	if n.Num != 0 {
		b = strconv.AppendUint(b, uint64(n.Num), 10)
	}
	return b
}

// Validate returns nil if n is a network this package can encode: a known
// type, and number 0 for LO. Otherwise it returns an error wrapping ErrBadNet.
func (n Net) Validate() error {
	if reason := n.problem(); reason != "" {
		return fmt.Errorf("%w %s: %s", ErrBadNet, n, reason)
	}
	return nil
}

// problem says why n is not a network, or returns "".
func (n Net) problem() string {
	switch {
	case !n.Type.Known():
		return "unknown net type " + strconv.FormatUint(uint64(n.Type), 10)
	case n.Type == LO && n.Num != 0:
		return "lo has no number"
	}
	return ""
}

// ParseNet parses a Lustre net name: a type name optionally followed by a
// decimal number up to 65535, as in "tcp", "tcp0" (the same net as "tcp"),
// "tcp1", "o2ib3" and "lo" (which takes no number, as in Lustre). Names are
// case-sensitive and may not contain spaces. Errors wrap ErrBadNet.
func ParseNet(s string) (Net, error) {
	n, reason := parseNet(s)
	if reason != "" {
		return Net{}, fmt.Errorf("%w %q: %s", ErrBadNet, s, reason)
	}
	return n, nil
}

// parseNet is ParseNet without the error allocation; it returns a non-empty
// reason when s is not a net.
func parseNet(s string) (Net, string) {
	if s == "" {
		return Net{}, "empty net name"
	}
	for _, tn := range netTypeNames {
		rest, ok := strings.CutPrefix(s, tn.name)
		if !ok || (rest != "" && (rest[0] < '0' || rest[0] > '9')) {
			continue // "tcpx" is not net tcp with a bad number
		}
		if rest == "" {
			return Net{Type: tn.t}, ""
		}
		if tn.t == LO {
			return Net{}, "net lo takes no number"
		}
		num, ok := parseDecimal(rest, 0xffff)
		if !ok {
			return Net{}, "net number " + strconv.Quote(rest) + " is not a decimal in [0, 65535]"
		}
		return Net{Type: tn.t, Num: uint16(num)}, ""
	}
	return Net{}, "unknown net type in " + strconv.Quote(s) + ": want tcp, o2ib or lo"
}

// parseDecimal parses a non-empty string of ASCII digits (leading zeros
// allowed, as Lustre's parser allows them) no greater than max.
func parseDecimal(s string, max uint64) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
		if v > max {
			return 0, false
		}
	}
	return v, true
}

// NID is an LNet network identifier, "address@net": the address of one network
// interface on one LNet network. On TCP and O2IB nets the address is an IPv4
// or IPv6 address (never IPv4-mapped IPv6 and never with a zone); on LO it is
// absent and the NID prints "0@lo".
//
// NID is a small comparable value; use it as a map key and compare it with ==.
// The zero NID is AnyNID, Lustre's LNET_NID_ANY: "no NID" or "any NID"
// depending on where it is used. It prints "<?>" and is not a valid address
// for a message.
type NID struct {
	Net  Net
	Addr netip.Addr
}

// AnyNID is the zero NID, Lustre's LNET_NID_ANY. It is spelled out for
// readability in comparisons and match filters; it is never reassigned.
var AnyNID = NID{}

// LoNID is 0@lo, the one NID on the loopback net.
var LoNID = NID{Net: Net{Type: LO}}

// IsZero reports whether n is the zero NID, AnyNID.
func (n NID) IsZero() bool { return n == NID{} }

// Validate returns nil if n is a non-zero NID this package can print, parse and
// encode; otherwise an error wrapping ErrBadNID that says why. NIDs from
// ParseNID, GetNID and LoNID are always valid; check NIDs built by hand from
// interface addresses, which Go often hands out IPv4-mapped (use
// netip.Addr.Unmap).
func (n NID) Validate() error {
	if reason := n.problem(); reason != "" {
		return fmt.Errorf("%w %s: %s", ErrBadNID, n, reason)
	}
	return nil
}

// problem says why n is not a valid non-zero NID, or returns "".
func (n NID) problem() string {
	if n.IsZero() {
		return "zero NID"
	}
	if reason := n.Net.problem(); reason != "" {
		return reason
	}
	return addrProblem(n.Net.Type, n.Addr)
}

// addrProblem says why a is not an address for a net of type t, or returns "".
func addrProblem(t NetType, a netip.Addr) string {
	if t == LO {
		if a.IsValid() {
			return "lo NIDs carry no address"
		}
		return ""
	}
	switch {
	case !a.IsValid():
		return "missing address"
	case a.Zone() != "":
		return "address has a zone"
	case a.Is4In6():
		return "IPv4-mapped IPv6 address: use the IPv4 form"
	}
	return ""
}

// String returns the Lustre form of n: "192.168.1.5@tcp", "10.0.0.1@tcp1",
// "[fd00::5]@o2ib" (IPv6 in brackets), "0@lo", and "<?>" for the zero NID.
// For a NID that Validate rejects the output is for logs only and does not
// parse.
func (n NID) String() string {
	if n.IsZero() {
		return "<?>"
	}
	return string(n.AppendTo(nil))
}

// AppendTo appends n.String() to b and returns the extended slice, as
// netip.Addr.AppendTo does, so hot paths can format NIDs without allocating.
func (n NID) AppendTo(b []byte) []byte {
	switch {
	case n.IsZero():
		return append(b, "<?>"...)
	case n.Net.Type == LO && !n.Addr.IsValid():
		b = append(b, '0')
	case n.Addr.Is6():
		b = append(b, '[')
		b = n.Addr.AppendTo(b)
		b = append(b, ']')
	default:
		b = n.Addr.AppendTo(b)
	}
	b = append(b, '@')
	return n.Net.AppendTo(b)
}

// ParseNID parses a NID in Lustre's form "address@net". The address is
// "0" on net lo, and otherwise a dotted-quad IPv4 address or an IPv6 address
// with or without brackets ("[fd00::1]@tcp" and "fd00::1@tcp" are the same
// NID). The net is as for ParseNet ("tcp0" and "tcp" are the same net).
// Nothing else is accepted: no host names, no surrounding or embedded spaces,
// no zones, no IPv4-mapped IPv6, no leading zeros in IPv4 octets. Errors wrap
// ErrBadNID and quote s.
func ParseNID(s string) (NID, error) {
	n, reason := parseNID(s)
	if reason != "" {
		return NID{}, fmt.Errorf("%w %q: %s", ErrBadNID, s, reason)
	}
	return n, nil
}

// MustParseNID is ParseNID for constants in tests and examples: it panics if s
// does not parse.
func MustParseNID(s string) NID {
	n, err := ParseNID(s)
	if err != nil {
		panic(err)
	}
	return n
}

func parseNID(s string) (NID, string) {
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return NID{}, "missing '@net'"
	}
	addr, netName := s[:at], s[at+1:]
	net, reason := parseNet(netName)
	if reason != "" {
		return NID{}, reason
	}
	if addr == "" {
		return NID{}, "missing address before '@'"
	}
	if net.Type == LO {
		if addr != "0" {
			return NID{}, "the only NID on lo is 0@lo"
		}
		return NID{Net: net}, ""
	}
	bracketed := false
	if strings.HasPrefix(addr, "[") {
		inner, ok := strings.CutSuffix(addr[1:], "]")
		if !ok {
			return NID{}, "unclosed '[' in address"
		}
		addr, bracketed = inner, true
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return NID{}, "address " + strconv.Quote(addr) + " is not an IPv4 or IPv6 address"
	}
	if bracketed && !a.Is6() {
		return NID{}, "brackets are for IPv6 addresses only"
	}
	if reason := addrProblem(net.Type, a); reason != "" {
		return NID{}, reason
	}
	return NID{Net: net, Addr: a}, ""
}

// NIDSize is the size of a NID on the wire.
//
//	offset size field
//	     0    2 net type (NetType; 0 only in the all-zero AnyNID)
//	     2    2 net number
//	     4    1 address length: 4 (IPv4), 16 (IPv6) or 0 (lo, AnyNID)
//	     5    3 padding, zero
//	     8   16 address bytes in network order, zero past the length
const NIDSize = 24

// PutNID encodes n into b[:NIDSize] in the layout documented on NIDSize. It
// panics if b is shorter, as encoding/binary's Put functions do. It encodes
// whatever n holds; callers that must not emit a NID GetNID would reject call
// n.Validate first (Header.Marshal and the AppendBinary methods do).
func PutNID(b []byte, n NID) {
	_ = b[NIDSize-1] // one bounds check
	binary.LittleEndian.PutUint16(b[0:], uint16(n.Net.Type))
	binary.LittleEndian.PutUint16(b[2:], n.Net.Num)
	clear(b[4:NIDSize])
	switch {
	case n.Addr.Is4():
		b[4] = 4
		a := n.Addr.As4()
		copy(b[8:], a[:])
	case n.Addr.Is6():
		b[4] = 16
		a := n.Addr.As16()
		copy(b[8:], a[:])
	}
}

// GetNID decodes a NID from b[:NIDSize]. All-zero bytes decode to AnyNID;
// callers decide whether AnyNID is acceptable where they read it. Otherwise
// the result is a valid NID (see NID.Validate). Errors wrap ErrShort for a short
// b, or ErrBadNID for an unknown net type, a number on lo, an address length
// that does not fit the net, non-zero padding or bytes past the address, or an
// IPv4-mapped IPv6 address.
func GetNID(b []byte) (NID, error) {
	if len(b) < NIDSize {
		return NID{}, fmt.Errorf("%w: NID needs %d bytes, have %d", ErrShort, NIDSize, len(b))
	}
	n, reason := getNID(b)
	if reason != "" {
		return NID{}, fmt.Errorf("%w: %s in % x", ErrBadNID, reason, b[:NIDSize])
	}
	return n, nil
}

func getNID(b []byte) (NID, string) {
	b = b[:NIDSize]
	t := NetType(binary.LittleEndian.Uint16(b[0:]))
	num := binary.LittleEndian.Uint16(b[2:])
	alen := b[4]
	if b[5]|b[6]|b[7] != 0 {
		return NID{}, "non-zero padding"
	}
	if t == 0 {
		if num != 0 || alen != 0 || !allZero(b[8:]) {
			return NID{}, "net type 0 in a non-zero NID"
		}
		return NID{}, ""
	}
	if !t.Known() {
		return NID{}, "unknown net type " + strconv.FormatUint(uint64(t), 10)
	}
	n := NID{Net: Net{Type: t, Num: num}}
	if t == LO {
		if num != 0 {
			return NID{}, "lo with a net number"
		}
		if alen != 0 || !allZero(b[8:]) {
			return NID{}, "lo with an address"
		}
		return n, ""
	}
	switch alen {
	case 4:
		if !allZero(b[12:]) {
			return NID{}, "bytes past the IPv4 address"
		}
		n.Addr = netip.AddrFrom4([4]byte(b[8:12]))
	case 16:
		n.Addr = netip.AddrFrom16([16]byte(b[8:24]))
		if n.Addr.Is4In6() {
			return NID{}, "IPv4-mapped IPv6 address"
		}
	default:
		return NID{}, "address length " + strconv.Itoa(int(alen)) + " on " + t.String()
	}
	return n, ""
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Well-known process ids.
const (
	// PIDLustre is the pid Lustre's kernel services use, LNET_PID_LUSTRE;
	// Nacre servers and clients use it too so Lustre tools read the same ids.
	PIDLustre uint32 = 12345

	// PIDAny is Lustre's LNET_PID_ANY: any process, in match filters.
	PIDAny uint32 = 0xffffffff
)

// ProcessID names one LNet endpoint: a process (PID) reachable at a NID. It is
// comparable and may be used as a map key.
type ProcessID struct {
	NID NID
	PID uint32
}

// String returns Lustre's form "pid-nid", such as "12345-192.168.1.5@tcp".
func (p ProcessID) String() string {
	return strconv.FormatUint(uint64(p.PID), 10) + "-" + p.NID.String()
}

// ParseProcessID parses "pid-nid" as printed by ProcessID.String: a decimal
// pid up to 4294967295, a '-', and a NID as for ParseNID. Errors wrap
// ErrBadNID.
func ParseProcessID(s string) (ProcessID, error) {
	pid, nid, ok := strings.Cut(s, "-")
	if !ok {
		return ProcessID{}, fmt.Errorf("%w: process id %q: missing 'pid-'", ErrBadNID, s)
	}
	v, ok := parseDecimal(pid, 0xffffffff)
	if !ok {
		return ProcessID{}, fmt.Errorf("%w: process id %q: pid %q is not a decimal in [0, 4294967295]", ErrBadNID, s, pid)
	}
	n, reason := parseNID(nid)
	if reason != "" {
		return ProcessID{}, fmt.Errorf("%w: process id %q: %s", ErrBadNID, s, reason)
	}
	return ProcessID{NID: n, PID: uint32(v)}, nil
}
