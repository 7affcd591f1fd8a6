package ptlrpc

import (
	"fmt"
	"hash/crc32"
	"math/bits"
	"strings"
	"sync"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
)

// ChecksumType is a bulk checksum algorithm, or a set of them, with
// Lustre's OBD_CKSUM_* bits: a client and a target agree at CONNECT on the
// algorithms both handle (ocd_cksum_types), and the client picks one per
// RPC, by default the one that runs fastest on its CPU (Lustre's
// obd_cksum_type_select). A request's header says which one its checksum
// is (wire.MsgBulkCksumCRC32); a read's reply uses the algorithm the
// request asked for.
type ChecksumType uint32

const (
	// ChecksumCRC32 is CRC-32 with the IEEE polynomial (OBD_CKSUM_CRC32).
	// On amd64 with carry-less multiply it streams through memory several
	// times faster than CRC-32C's crc32 instruction does.
	ChecksumCRC32 ChecksumType = 0x1
	// ChecksumCRC32C is CRC-32C, the Castagnoli polynomial
	// (OBD_CKSUM_CRC32C): what an RPC without a type, or a peer that
	// names none at CONNECT, uses.
	ChecksumCRC32C ChecksumType = 0x4

	// ChecksumTypes is every algorithm this build handles.
	ChecksumTypes = ChecksumCRC32 | ChecksumCRC32C
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C of the bytes of bufs taken in order.
func Checksum(bufs [][]byte) uint32 { return ChecksumCRC32C.Sum(bufs) }

// Sum returns t's checksum of the bytes of bufs taken in order. t must be
// one algorithm; the zero type is CRC-32C.
func (t ChecksumType) Sum(bufs [][]byte) uint32 {
	tab := castagnoli
	if t == ChecksumCRC32 {
		tab = crc32.IEEETable
	}
	var c uint32
	for _, b := range bufs {
		c = crc32.Update(c, tab, b)
	}
	return c
}

// Update returns t's checksum crc extended by the bytes of b: the
// checksum of a piece whose beginning was summed to crc (0 for nothing).
func (t ChecksumType) Update(crc uint32, b []byte) uint32 { return crc32.Update(crc, t.table(), b) }

// checksumNames are the algorithms' names, in the order lctl lists them.
var checksumNames = []struct {
	t    ChecksumType
	name string
}{{ChecksumCRC32, "crc32"}, {ChecksumCRC32C, "crc32c"}}

// String returns an algorithm's name ("crc32c"), a set's names joined by
// spaces, and unknown bits in hex.
func (t ChecksumType) String() string {
	var names []string
	for _, n := range checksumNames {
		if t&n.t != 0 {
			names = append(names, n.name)
			t &^= n.t
		}
	}
	if t != 0 || len(names) == 0 {
		names = append(names, fmt.Sprintf("%#x", uint32(t)))
	}
	return strings.Join(names, " ")
}

// List names the algorithms of set t as Lustre's osc.*.checksum_type
// lists them, the one in use in brackets ("crc32 [crc32c]").
func (t ChecksumType) List(inUse ChecksumType) string {
	var names []string
	for _, n := range checksumNames {
		switch {
		case t&n.t == 0:
		case n.t == inUse:
			names = append(names, "["+n.name+"]")
		default:
			names = append(names, n.name)
		}
	}
	return strings.Join(names, " ")
}

// ParseChecksumType returns the algorithm called name ("crc32",
// "crc32c"), as lctl set_param osc.*.checksum_type takes it.
func ParseChecksumType(name string) (ChecksumType, error) {
	for _, n := range checksumNames {
		if n.name == name {
			return n.t, nil
		}
	}
	return 0, fmt.Errorf("ptlrpc: unknown checksum type %q (want %s)", name, ChecksumTypes)
}

// negotiated returns the algorithms a peer's CONNECT named, as this side
// can use them: those of set this build handles, CRC-32C alone if it
// named none (an older peer, which knew only CRC-32C).
func negotiated(set uint32) ChecksumType {
	if t := ChecksumType(set) & ChecksumTypes; t != 0 {
		return t
	}
	return ChecksumCRC32C
}

// FastestChecksum returns the algorithm of set (CRC-32C if set has none
// this build handles) that checksums a buffer fastest on this machine.
// Each algorithm's speed is measured once per process, as Lustre does at
// module load.
func FastestChecksum(set ChecksumType) ChecksumType {
	speeds := checksumSpeeds()
	best, bestRate := ChecksumCRC32C, -1.0
	for _, n := range checksumNames {
		if set&n.t != 0 && speeds[n.t] > bestRate {
			best, bestRate = n.t, speeds[n.t]
		}
	}
	return best
}

// checksumSpeeds measures each algorithm's bytes per second over a buffer
// larger than a core's L2 cache (bulk data is rarely in it), the best of
// a few runs so that a preemption does not decide.
var checksumSpeeds = sync.OnceValue(func() map[ChecksumType]float64 {
	buf := make([]byte, 4<<20)
	for i := range buf {
		buf[i] = byte(bits.RotateLeft32(uint32(i), i&31))
	}
	speeds := make(map[ChecksumType]float64, len(checksumNames))
	for _, n := range checksumNames {
		var best time.Duration
		for range 3 {
			start := time.Now()
			n.t.Sum([][]byte{buf})
			if d := time.Since(start); best == 0 || d < best {
				best = d
			}
		}
		speeds[n.t] = float64(len(buf)) / max(best, time.Nanosecond).Seconds()
	}
	return speeds
})

// flagChecksum returns the algorithm of a header's bulk checksum.
func flagChecksum(f wire.MsgFlags) ChecksumType {
	if f&wire.MsgBulkCksumCRC32 != 0 {
		return ChecksumCRC32
	}
	return ChecksumCRC32C
}

// flags returns the header flags that carry a checksum of type t.
func (t ChecksumType) flags() wire.MsgFlags {
	if t == ChecksumCRC32 {
		return wire.MsgBulkCksum | wire.MsgBulkCksumCRC32
	}
	return wire.MsgBulkCksum
}

// poly returns the reversed polynomial of algorithm t (the zero type is
// CRC-32C).
func (t ChecksumType) poly() uint32 {
	if t == ChecksumCRC32 {
		return crc32.IEEE
	}
	return crc32.Castagnoli
}

// table returns the crc32 table of algorithm t.
func (t ChecksumType) table() *crc32.Table {
	if t == ChecksumCRC32 {
		return crc32.IEEETable
	}
	return castagnoli
}

// Combine returns t's checksum of A followed by B from the checksum of A,
// the checksum of B and the length of B, so that the pieces of a bulk
// summed as they arrive, in whatever order, give the checksum of the
// whole. hash/crc32 has no such function; this is zlib's crc32_combine:
// appending n bytes multiplies A's remainder by x^(8n) modulo the
// polynomial, and the CRC's initial and final inversions cancel out.
func (t ChecksumType) Combine(a, b uint32, n int) uint32 {
	p := t.poly()
	return mulModP(p, xPow8n(p, uint64(n)), a) ^ b
}

// Shifter combines checksums by algorithm t with that of a piece of n
// bytes appended, for n fixed: a caller joining the sums of many pieces of
// one size (pages) pays four table lookups for each. Multiplying by
// x^(8n) modulo the polynomial is linear over GF(2), so the product of a
// sum is the XOR of the products of its four bytes, each looked up.
// Making one costs about 32 multiplications and a 4 KiB table: keep it.
type Shifter struct {
	tab *[4][256]uint32
	n   int
}

// Shifter returns t's Shifter for pieces of n bytes.
func (t ChecksumType) Shifter(n int) Shifter {
	p := t.poly()
	x := xPow8n(p, uint64(n))
	tab := new([4][256]uint32)
	for k := range tab {
		var basis [8]uint32 // the products of the byte's single bits
		for i := range basis {
			basis[i] = mulModP(p, x, 1<<(8*k+i))
		}
		for v := 1; v < 256; v++ {
			low := bits.TrailingZeros8(uint8(v))
			tab[k][v] = tab[k][v&(v-1)] ^ basis[low]
		}
	}
	return Shifter{tab: tab, n: n}
}

// Len returns the piece length s combines.
func (s Shifter) Len() int { return s.n }

// Combine returns the checksum of A followed by B, B being s.Len() bytes,
// from their checksums (ChecksumType.Combine).
func (s Shifter) Combine(a, b uint32) uint32 {
	t := s.tab
	return t[0][uint8(a)] ^ t[1][uint8(a>>8)] ^ t[2][uint8(a>>16)] ^ t[3][uint8(a>>24)] ^ b
}

// mulModP multiplies a and b, polynomials over GF(2) in reversed bit
// order (the x^0 coefficient in the top bit), modulo p.
func mulModP(p, a, b uint32) uint32 {
	var prod uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			prod ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ p
		} else {
			b >>= 1
		}
	}
	return prod
}

// xPow8n returns x^(8n) modulo p, by squaring: x^(8·2^k) for each bit k
// of n.
func xPow8n(p uint32, n uint64) uint32 {
	result := uint32(1) << 31 // x^0
	sq := uint32(1) << 23     // x^8
	for ; n != 0; n >>= 1 {
		if n&1 != 0 {
			result = mulModP(p, sq, result)
		}
		sq = mulModP(p, sq, sq)
	}
	return result
}
