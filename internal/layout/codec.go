package layout

import (
	"encoding/binary"
	"math"
)

// The encoding (all integers little-endian, as Lustre's LOV EA):
//
//	header, 16 bytes:
//	  magic   u32  Magic
//	  version u8   Version
//	  flags   u8   bit 0: composite; other bits zero
//	  count   u16  number of components, 1..MaxComponents
//	  gen     u32  layout generation
//	  pad     u32  zero
//	component, 40 bytes + pool + objects:
//	  id      u32
//	  pattern u32
//	  start   u64
//	  end     u64
//	  size    u32  stripe size
//	  count   i32  stripe count
//	  offset  i32  stripe offset
//	  nobj    u16  number of objects (0: not instantiated)
//	  poollen u8
//	  pad     u8   zero
//	  pool    poollen bytes
//	  objects nobj × 20 bytes: ost u32, seq u64, oid u32, ver u32
//
// The decoder is strict: every field must be in its domain and the buffer
// must end exactly where the encoding does, so Marshal(Unmarshal(b)) == b
// for every b that decodes.
const (
	// Magic starts every encoded layout ("NLOV" read as a big-endian word).
	Magic uint32 = 0x4e4c4f56
	// Version is the encoding version Marshal writes and Unmarshal reads.
	Version = 1

	headerSize    = 16
	componentSize = 40
	objectSize    = 20
	flagComposite = 1 << 0
)

// EncodedSize returns the length of l's encoding.
func (l Layout) EncodedSize() int {
	n := headerSize
	for i := range l.Components {
		n += componentSize + len(l.Components[i].Pool) + objectSize*len(l.Components[i].Objects)
	}
	return n
}

// Marshal encodes l after validating it. It returns an error wrapping
// ErrInvalid, and no bytes, for a layout that Validate refuses.
func (l Layout) Marshal() ([]byte, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return l.AppendMarshal(make([]byte, 0, l.EncodedSize())), nil
}

// AppendMarshal appends the encoding of l, which the caller has validated,
// to b. An invalid layout gives an encoding that Unmarshal refuses.
func (l Layout) AppendMarshal(b []byte) []byte {
	le := binary.LittleEndian
	var flags uint8
	if l.Composite {
		flags |= flagComposite
	}
	b = le.AppendUint32(b, Magic)
	b = append(b, Version, flags)
	b = le.AppendUint16(b, uint16(min(len(l.Components), math.MaxUint16)))
	b = le.AppendUint32(b, l.Gen)
	b = le.AppendUint32(b, 0)
	for i := range l.Components {
		c := &l.Components[i]
		b = le.AppendUint32(b, c.ID)
		b = le.AppendUint32(b, uint32(c.Pattern))
		b = le.AppendUint64(b, c.Start)
		b = le.AppendUint64(b, c.End)
		b = le.AppendUint32(b, c.StripeSize)
		b = le.AppendUint32(b, uint32(c.StripeCount))
		b = le.AppendUint32(b, uint32(c.StripeOffset))
		b = le.AppendUint16(b, uint16(min(len(c.Objects), math.MaxUint16)))
		b = append(b, uint8(min(len(c.Pool), math.MaxUint8)), 0)
		b = append(b, c.Pool[:min(len(c.Pool), math.MaxUint8)]...)
		for _, o := range c.Objects {
			b = le.AppendUint32(b, o.OSTIndex)
			b = le.AppendUint64(b, o.Object.Seq)
			b = le.AppendUint32(b, o.Object.Oid)
			b = le.AppendUint32(b, o.Object.Ver)
		}
	}
	return b
}

// Unmarshal decodes an encoded layout, from the network or from disk. It
// returns the layout, or an error wrapping ErrCorrupt that says what was
// wrong and at which byte; it never panics and never allocates more than a
// small multiple of len(b).
func Unmarshal(b []byte) (Layout, error) {
	le := binary.LittleEndian
	if len(b) < headerSize {
		return Layout{}, fail(ErrCorrupt, "layout: %d bytes, header needs %d", len(b), headerSize)
	}
	if m := le.Uint32(b); m != Magic {
		return Layout{}, fail(ErrCorrupt, "layout: magic %#x", m)
	}
	if b[4] != Version {
		return Layout{}, fail(ErrCorrupt, "layout: version %d", b[4])
	}
	flags := b[5]
	if flags&^flagComposite != 0 {
		return Layout{}, fail(ErrCorrupt, "layout: unknown flags %#x", flags)
	}
	count := int(le.Uint16(b[6:]))
	if count == 0 || count > MaxComponents {
		return Layout{}, fail(ErrCorrupt, "layout: %d components", count)
	}
	if le.Uint32(b[12:]) != 0 {
		return Layout{}, fail(ErrCorrupt, "layout: nonzero header padding")
	}
	l := Layout{Gen: le.Uint32(b[8:]), Composite: flags&flagComposite != 0}
	l.Components = make([]Component, count)
	p := headerSize
	for i := range l.Components {
		if len(b)-p < componentSize {
			return Layout{}, fail(ErrCorrupt, "layout: component %d at byte %d: short buffer", i, p)
		}
		e := b[p:]
		c := &l.Components[i]
		c.ID = le.Uint32(e)
		c.Pattern = Pattern(le.Uint32(e[4:]))
		c.Start = le.Uint64(e[8:])
		c.End = le.Uint64(e[16:])
		c.StripeSize = le.Uint32(e[24:])
		c.StripeCount = int32(le.Uint32(e[28:]))
		c.StripeOffset = int32(le.Uint32(e[32:]))
		nobj := int(le.Uint16(e[36:]))
		poolLen := int(e[38])
		if e[39] != 0 {
			return Layout{}, fail(ErrCorrupt, "layout: component %d: nonzero padding", i)
		}
		p += componentSize
		if poolLen > MaxPoolName || nobj > MaxStripeCount || len(b)-p < poolLen+nobj*objectSize {
			return Layout{}, fail(ErrCorrupt, "layout: component %d at byte %d: pool %d bytes, %d objects: too long", i, p, poolLen, nobj)
		}
		c.Pool = string(b[p : p+poolLen])
		p += poolLen
		if nobj > 0 {
			c.Objects = make([]Object, nobj)
			for j := range c.Objects {
				o := b[p:]
				c.Objects[j] = Object{OSTIndex: le.Uint32(o), Object: FID{Seq: le.Uint64(o[4:]), Oid: le.Uint32(o[12:]), Ver: le.Uint32(o[16:])}}
				p += objectSize
			}
		}
	}
	if p != len(b) {
		return Layout{}, fail(ErrCorrupt, "layout: %d trailing bytes", len(b)-p)
	}
	if err := l.Validate(); err != nil {
		return Layout{}, fail(ErrCorrupt, "%v", err)
	}
	return l, nil
}
