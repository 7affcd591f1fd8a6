package ldlm

import (
	"fmt"
	"math/bits"
)

// Mode is a lock mode. The values are Lustre's LCK_* bits (enum ldlm_mode in
// lustre_idl.h), so a Mode crosses the wire unchanged.
type Mode uint8

// The lock modes, strongest first.
const (
	EX    Mode = 1  // exclusive: compatible with NL only
	PW    Mode = 2  // protected write: one writer, concurrent readers may only CR
	PR    Mode = 4  // protected read: shared readers
	CW    Mode = 8  // concurrent write: writers that coordinate among themselves
	CR    Mode = 16 // concurrent read: reads that tolerate concurrent writers
	NL    Mode = 32 // null: a reference that conflicts with nothing; FLOCK unlock
	GROUP Mode = 64 // group lock (EXTENT only): shared by holders of the same group id
)

// Modes lists every mode in matrix order, for tables and tests.
var Modes = [...]Mode{EX, PW, PR, CW, CR, NL, GROUP}

// compat is Lustre's lck_compat_array (LCK_COMPAT_* in lustre_dlm.h),
// indexed by the mode's bit position: the set of modes each mode may
// coexist with.
var compat = [7]Mode{
	NL,                                  // EX
	NL | CR,                             // PW
	NL | CR | PR,                        // PR
	NL | CR | CW,                        // CW
	NL | CR | CW | PR | PW,              // CR
	NL | CR | CW | PR | PW | EX | GROUP, // NL
	GROUP | NL,                          // GROUP
}

// modeIndex is the bit position of a valid mode.
func modeIndex(m Mode) int { return bits.TrailingZeros8(uint8(m)) }

// Valid reports whether m is exactly one of the seven modes.
func (m Mode) Valid() bool { return m != 0 && m <= GROUP && m&(m-1) == 0 }

// Compatible reports whether a lock of mode m may be granted alongside a
// granted lock of mode o, by the mode matrix alone. The matrix is
// symmetric. Policy data can still make compatible modes conflict (GROUP
// locks of different group ids), and can make incompatible modes coexist
// (disjoint extents, disjoint inode bits, FLOCK locks of one owner).
// Invalid modes are compatible with nothing.
func Compatible(m, o Mode) bool {
	if !m.Valid() || !o.Valid() {
		return false
	}
	return compat[modeIndex(m)]&o != 0
}

// covers reports whether every mode compatible with from is also
// compatible with to: converting a granted lock from → to can then never
// create a conflict with another granted lock. It is the test for a legal
// downgrade (EX→PW, PW→PR, PR→CR, anything→NL).
func covers(from, to Mode) bool {
	f, t := compat[modeIndex(from)], compat[modeIndex(to)]
	return f&t == f
}

// String returns Lustre's name for the mode: EX, PW, PR, CW, CR, NL, GROUP.
func (m Mode) String() string {
	switch m {
	case EX:
		return "EX"
	case PW:
		return "PW"
	case PR:
		return "PR"
	case CW:
		return "CW"
	case CR:
		return "CR"
	case NL:
		return "NL"
	case GROUP:
		return "GROUP"
	}
	return fmt.Sprintf("mode(%#x)", uint8(m))
}

// Type is a lock type: which policy decides conflicts on a resource. The
// values are Lustre's LDLM_* types (enum ldlm_type).
type Type uint8

// The lock types.
const (
	// TypePlain locks conflict by mode alone.
	TypePlain Type = 10
	// TypeExtent locks cover a byte range of an object (OST data). The
	// server grows a granted extent to the largest non-conflicting range.
	TypeExtent Type = 11
	// TypeFlock locks are POSIX record locks: owned by a process of a
	// client, merged and split per owner, with deadlock detection.
	TypeFlock Type = 12
	// TypeIBits locks cover a set of inode bits (MDT metadata).
	TypeIBits Type = 13
)

// Valid reports whether t is one of the four types.
func (t Type) Valid() bool { return t >= TypePlain && t <= TypeIBits }

// String returns Lustre's name for the type: PLAIN, EXTENT, FLOCK, IBITS.
func (t Type) String() string {
	switch t {
	case TypePlain:
		return "PLAIN"
	case TypeExtent:
		return "EXTENT"
	case TypeFlock:
		return "FLOCK"
	case TypeIBits:
		return "IBITS"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// validModeFor reports whether mode m is meaningful for type t: GROUP only
// on EXTENT, and FLOCK only PR (F_RDLCK), PW (F_WRLCK) and NL (F_UNLCK).
func validModeFor(t Type, m Mode) bool {
	if !m.Valid() {
		return false
	}
	switch t {
	case TypeExtent:
		return true
	case TypeFlock:
		return m == PR || m == PW || m == NL
	case TypePlain, TypeIBits:
		return m != GROUP
	}
	return false
}
