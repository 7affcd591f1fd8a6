package mgs

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nacrefs/nacre/internal/errs"
)

// Kind is the role of a target.
type Kind uint8

// Target kinds; the values match nacre.mgs.v1.TargetKind.
const (
	KindMGT Kind = 1
	KindMDT Kind = 2
	KindOST Kind = 3
)

// MaxIndex is the largest target index (Lustre's is 0xffff as well).
const MaxIndex = 0xffff

// MaxFSNameLen is Lustre's limit on a filesystem name.
const MaxFSNameLen = 8

// MaxPoolNameLen is Lustre's LOV_MAXPOOLNAME.
const MaxPoolNameLen = 15

func (k Kind) String() string {
	switch k {
	case KindMGT:
		return "MGT"
	case KindMDT:
		return "MDT"
	case KindOST:
		return "OST"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Valid reports whether k is one of the three kinds.
func (k Kind) Valid() bool { return k >= KindMGT && k <= KindOST }

// MarshalText encodes a kind as its name so etcd records stay readable.
func (k Kind) MarshalText() ([]byte, error) {
	if !k.Valid() {
		return nil, fmt.Errorf("mgs: invalid target kind %d", uint8(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText decodes MGT, MDT or OST.
func (k *Kind) UnmarshalText(b []byte) error {
	v, err := ParseKind(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// ParseKind parses "MGT", "MDT" or "OST" (any case).
func ParseKind(s string) (Kind, error) {
	switch strings.ToUpper(s) {
	case "MGT", "MGS":
		return KindMGT, nil
	case "MDT":
		return KindMDT, nil
	case "OST":
		return KindOST, nil
	}
	return 0, errs.Errorf(errs.Invalid, "unknown target kind %q (want MDT, OST or MGT)", s)
}

// ValidateFSName checks a filesystem name: 1 to 8 characters of [A-Za-z0-9_-].
func ValidateFSName(name string) error {
	if name == "" {
		return errs.Errorf(errs.Invalid, "filesystem name is empty")
	}
	if len(name) > MaxFSNameLen {
		return errs.Errorf(errs.Invalid, "filesystem name %q is %d characters; the limit is %d", name, len(name), MaxFSNameLen)
	}
	if i := strings.IndexFunc(name, func(r rune) bool { return !nameChar(r) }); i >= 0 {
		return errs.Errorf(errs.Invalid, "filesystem name %q has %q at %d; only A-Z a-z 0-9 _ - are allowed", name, name[i], i)
	}
	return nil
}

// ValidatePoolName checks a pool name: 1 to 15 characters of [A-Za-z0-9_-].
func ValidatePoolName(name string) error {
	if name == "" {
		return errs.Errorf(errs.Invalid, "pool name is empty")
	}
	if len(name) > MaxPoolNameLen {
		return errs.Errorf(errs.Invalid, "pool name %q is %d characters; the limit is %d", name, len(name), MaxPoolNameLen)
	}
	if i := strings.IndexFunc(name, func(r rune) bool { return !nameChar(r) }); i >= 0 {
		return errs.Errorf(errs.Invalid, "pool name %q has %q at %d; only A-Z a-z 0-9 _ - are allowed", name, name[i], i)
	}
	return nil
}

func nameChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// TargetName is a target's short name: "OST0003", "MDT0000" (Lustre prints
// the index as four lowercase hex digits).
func TargetName(k Kind, index uint32) string {
	return fmt.Sprintf("%s%04x", k, index)
}

// TargetLabel is a target's full label: "nacre-OST0003".
func TargetLabel(fsname string, k Kind, index uint32) string {
	return fsname + "-" + TargetName(k, index)
}

// ParseTargetName parses "OST0003" or a full label "nacre-OST0003" (whose
// filesystem part must then be fsname, when fsname is not empty).
func ParseTargetName(fsname, s string) (Kind, uint32, error) {
	name := s
	if i := strings.LastIndexByte(s, '-'); i >= 0 {
		if fsname != "" && s[:i] != fsname {
			return 0, 0, errs.Errorf(errs.Invalid, "target %q is not in filesystem %q", s, fsname)
		}
		name = s[i+1:]
	}
	if len(name) < 4 {
		return 0, 0, errs.Errorf(errs.Invalid, "bad target name %q (want e.g. OST0003 or %s-MDT0000)", s, fsname)
	}
	k, err := ParseKind(name[:3])
	if err != nil {
		return 0, 0, errs.Errorf(errs.Invalid, "bad target name %q (want e.g. OST0003 or %s-MDT0000)", s, fsname)
	}
	idx, err := strconv.ParseUint(name[3:], 16, 32)
	if err != nil || idx > MaxIndex {
		return 0, 0, errs.Errorf(errs.Invalid, "bad target index in %q (want 0000 to %04x in hex)", s, MaxIndex)
	}
	return k, uint32(idx), nil
}

// validateIndex checks that index is allowed for kind: the MGT is always 0.
func validateIndex(k Kind, index uint32) error {
	if index > MaxIndex {
		return errs.Errorf(errs.Invalid, "%s index %d is out of range (0 to %d)", k, index, MaxIndex)
	}
	if k == KindMGT && index != 0 {
		return errs.Errorf(errs.Invalid, "MGT index must be 0, not %d", index)
	}
	return nil
}
