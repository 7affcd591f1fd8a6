package layout

import (
	"fmt"
	"math"
	"strings"

	"github.com/nacrefs/nacre/internal/fid"
)

// FID names an OST object.
type FID = fid.FID

// Limits and defaults, after Lustre's LOV.
const (
	// EOF as an extent end means "to the end of the file, however large"
	// (Lustre's LUSTRE_EOF).
	EOF uint64 = math.MaxUint64
	// StripeAlign is the granule of stripe sizes and component extent
	// ends (Lustre's LOV_MIN_STRIPE_SIZE, 64 KiB).
	StripeAlign = 64 << 10
	// DefaultStripeSize is the stripe size a new file gets when nobody
	// chose one (1 MiB, as in Lustre).
	DefaultStripeSize = 1 << 20
	// DefaultStripeCount is the stripe count a new file gets when nobody
	// chose one.
	DefaultStripeCount = 1
	// MaxStripeSize is the largest stripe size (just under 4 GiB, kept a
	// multiple of StripeAlign).
	MaxStripeSize = math.MaxUint32 - (StripeAlign - 1)
	// MaxStripeCount bounds the stripes of one component (Lustre's
	// LOV_MAX_STRIPE_COUNT).
	MaxStripeCount = 2000
	// MaxComponents bounds the components of a composite layout.
	MaxComponents = 64
	// MaxPoolName is the longest pool name (Lustre's LOV_MAXPOOLNAME).
	MaxPoolName = 15
	// MaxOSTIndex is the largest OST index (0xffff is Lustre's "all").
	MaxOSTIndex = 0xfffe
	// AllStripes as a StripeCount asks for one stripe on every OST.
	AllStripes = -1
	// AnyOffset as a StripeOffset lets the allocator pick the first OST.
	AnyOffset = -1
)

// Pattern is a component's data pattern. Only RAID-0 exists today; mirrors,
// data-on-MDT and erasure coding will add patterns.
type Pattern uint32

// The patterns (values of Lustre's LOV_PATTERN_*).
const (
	PatternRAID0 Pattern = 0x1
)

// Object is one allocated stripe: the OST it lives on and its FID there.
type Object struct {
	OSTIndex uint32
	Object   FID
}

// RAID0 is a striping: file data goes round-robin in StripeSize units over
// the objects. Before instantiation Objects is empty and StripeCount is what
// was asked for (AllStripes or 1..MaxStripeCount); once instantiated
// StripeCount equals len(Objects), as Lustre stores the real count.
type RAID0 struct {
	StripeCount  int32  // AllStripes, or 1..MaxStripeCount
	StripeSize   uint32 // a nonzero multiple of StripeAlign
	StripeOffset int32  // first OST index, or AnyOffset
	Pool         string // OST pool name, "" for none; at most MaxPoolName of [A-Za-z0-9_.-]
	Objects      []Object
}

// Instantiated reports whether the striping has its objects.
func (r *RAID0) Instantiated() bool { return len(r.Objects) > 0 }

// Component is one extent of a composite layout with its own striping.
// Extents are in file offsets, [Start, End); End may be EOF.
type Component struct {
	ID      uint32 // unique and nonzero within a composite layout; 0 in a plain one
	Pattern Pattern
	Start   uint64
	End     uint64
	RAID0
}

// Layout is a file's layout, Lustre's LOV EA: either plain (one RAID-0
// component covering [0, EOF), Composite false) or composite (progressive
// file layout: components tiling the file from 0 in order). Gen is the
// layout generation, bumped by the MDS on every change so that clients can
// tell stale layouts. A Layout is a value: methods never modify it, and
// concurrent readers are safe.
type Layout struct {
	Gen        uint32
	Composite  bool
	Components []Component
}

// Plain returns a plain layout with striping r.
func Plain(r RAID0) Layout {
	return Layout{Components: []Component{{Pattern: PatternRAID0, Start: 0, End: EOF, RAID0: r}}}
}

// Clone returns a deep copy of l.
func (l Layout) Clone() Layout {
	c := l
	c.Components = make([]Component, len(l.Components))
	copy(c.Components, l.Components)
	for i := range c.Components {
		if objs := l.Components[i].Objects; objs != nil {
			c.Components[i].Objects = append([]Object(nil), objs...)
		}
	}
	return c
}

// Instantiated reports whether every component has its objects.
func (l Layout) Instantiated() bool {
	for i := range l.Components {
		if !l.Components[i].Instantiated() {
			return false
		}
	}
	return len(l.Components) > 0
}

// ComponentAt returns the index of the component whose extent holds file
// offset off, or -1 if off lies past the last component.
func (l Layout) ComponentAt(off uint64) int {
	// Components are few and sorted; a linear scan beats a search for the
	// usual 1-4.
	for i := range l.Components {
		if off < l.Components[i].End {
			if off >= l.Components[i].Start {
				return i
			}
			return -1
		}
	}
	return -1
}

// Validate checks every rule a stored or transmitted layout must follow.
// It returns nil or an error wrapping ErrInvalid that names the rule broken.
func (l Layout) Validate() error {
	n := len(l.Components)
	if n == 0 {
		return fail(ErrInvalid, "layout: no components")
	}
	if n > MaxComponents {
		return fail(ErrInvalid, "layout: %d components, at most %d", n, MaxComponents)
	}
	if !l.Composite {
		c := &l.Components[0]
		if n != 1 || c.ID != 0 || c.Start != 0 || c.End != EOF {
			return fail(ErrInvalid, "layout: a plain layout is one component [0, EOF) with id 0")
		}
		return c.validate(0)
	}
	seen := make(map[uint32]bool, n)
	var prev uint64
	for i := range l.Components {
		c := &l.Components[i]
		if c.ID == 0 || seen[c.ID] {
			return fail(ErrInvalid, "layout: component %d: id %d zero or repeated", i, c.ID)
		}
		seen[c.ID] = true
		if c.Start != prev {
			return fail(ErrInvalid, "layout: component %d starts at %d, want %d", i, c.Start, prev)
		}
		if c.End <= c.Start {
			return fail(ErrInvalid, "layout: component %d: empty extent [%d, %d)", i, c.Start, c.End)
		}
		if c.End == EOF && i != n-1 {
			return fail(ErrInvalid, "layout: component %d ends at EOF but is not the last", i)
		}
		if err := c.validate(i); err != nil {
			return err
		}
		prev = c.End
	}
	return nil
}

func (c *Component) validate(i int) error {
	if c.Pattern != PatternRAID0 {
		return fail(ErrInvalid, "layout: component %d: unknown pattern %#x", i, uint32(c.Pattern))
	}
	if c.StripeSize == 0 || c.StripeSize%StripeAlign != 0 {
		return fail(ErrInvalid, "layout: component %d: stripe size %d not a nonzero multiple of %d", i, c.StripeSize, StripeAlign)
	}
	if c.End != EOF && c.End%uint64(c.StripeSize) != 0 {
		return fail(ErrInvalid, "layout: component %d: end %d not a multiple of the stripe size %d", i, c.End, c.StripeSize)
	}
	if c.StripeOffset != AnyOffset && (c.StripeOffset < 0 || c.StripeOffset > MaxOSTIndex) {
		return fail(ErrInvalid, "layout: component %d: stripe offset %d", i, c.StripeOffset)
	}
	if err := ValidPool(c.Pool); err != nil {
		return fail(ErrInvalid, "layout: component %d: %v", i, err)
	}
	if len(c.Objects) > 0 {
		if int(c.StripeCount) != len(c.Objects) || len(c.Objects) > MaxStripeCount {
			return fail(ErrInvalid, "layout: component %d: stripe count %d with %d objects", i, c.StripeCount, len(c.Objects))
		}
		for j, o := range c.Objects {
			if o.OSTIndex > MaxOSTIndex {
				return fail(ErrInvalid, "layout: component %d stripe %d: OST index %d", i, j, o.OSTIndex)
			}
		}
		return nil
	}
	if c.StripeCount != AllStripes && (c.StripeCount < 1 || c.StripeCount > MaxStripeCount) {
		return fail(ErrInvalid, "layout: component %d: stripe count %d", i, c.StripeCount)
	}
	return nil
}

// ValidPool reports whether name may name an OST pool: empty (no pool), or
// up to MaxPoolName characters of [A-Za-z0-9_.-].
func ValidPool(name string) error {
	if len(name) > MaxPoolName {
		return fmt.Errorf("pool name %q longer than %d", name, MaxPoolName)
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-')
	}); i >= 0 {
		return fmt.Errorf("pool name %q has a bad character at %d", name, i)
	}
	return nil
}

// String renders the layout in a compact, lfs-getstripe-like form for logs
// and test failures.
func (l Layout) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "gen=%d", l.Gen)
	if l.Composite {
		b.WriteString(" composite")
	}
	for _, c := range l.Components {
		b.WriteString(" {")
		if l.Composite {
			end := "EOF"
			if c.End != EOF {
				end = fmt.Sprint(c.End)
			}
			fmt.Fprintf(&b, "id=%d [%d,%s) ", c.ID, c.Start, end)
		}
		fmt.Fprintf(&b, "count=%d size=%d offset=%d", c.StripeCount, c.StripeSize, c.StripeOffset)
		if c.Pool != "" {
			fmt.Fprintf(&b, " pool=%s", c.Pool)
		}
		for _, o := range c.Objects {
			fmt.Fprintf(&b, " %d:%v", o.OSTIndex, o.Object)
		}
		b.WriteString("}")
	}
	return b.String()
}
