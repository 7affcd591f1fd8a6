package layout

import "math/bits"

// Object offsets follow Lustre's lov_stripe_offset: a component stripes the
// whole file offset space as if it began at 0, so its objects are sparse
// below the component's start. Byte x of the file, in a component with
// stripe size S over N objects, lives on stripe (x/S)%N at object offset
// (x/(S*N))*S + x%S.

// Chunk is one contiguous piece of a file range on one object.
type Chunk struct {
	Component  int    // index in Layout.Components
	Stripe     int    // index in the component's Objects
	OSTIndex   uint32 // the object's OST
	Object     FID    // the object
	ObjOffset  uint64 // where the piece starts in the object
	Len        uint64 // bytes
	FileOffset uint64 // where the piece starts in the file
}

// Map splits the file range [off, off+n) into chunks, one per stripe unit
// touched (units that are contiguous on one object, as with one stripe, are
// merged), in file order. n == 0 gives no chunks. It returns ErrInvalid if
// off+n overflows, ErrBeyondLayout if the range reaches past the last
// component, and ErrUninstantiated if it touches a component without
// objects; in every error case no chunks.
func (l Layout) Map(off, n uint64) ([]Chunk, error) {
	return l.AppendMap(nil, off, n)
}

// AppendMap is Map appending to dst; on error it returns dst unchanged.
func (l Layout) AppendMap(dst []Chunk, off, n uint64) ([]Chunk, error) {
	end, carry := bits.Add64(off, n, 0)
	if carry != 0 || end == EOF {
		return dst, fail(ErrInvalid, "layout: map [%d,+%d): overflows", off, n)
	}
	orig, base := dst, len(dst)
	for pos := off; pos < end; {
		ci := l.ComponentAt(pos)
		if ci < 0 {
			return orig, fail(ErrBeyondLayout, "layout: map offset %d", pos)
		}
		c := &l.Components[ci]
		if !c.Instantiated() {
			return orig, fail(ErrUninstantiated, "layout: map offset %d: component %d (id %d)", pos, ci, c.ID)
		}
		stripe, objOff := c.locate(pos)
		ln := min(uint64(c.StripeSize)-pos%uint64(c.StripeSize), c.End-pos, end-pos)
		if k := len(dst) - 1; k >= base && dst[k].Component == ci && dst[k].Stripe == stripe &&
			dst[k].ObjOffset+dst[k].Len == objOff && dst[k].FileOffset+dst[k].Len == pos {
			dst[k].Len += ln
		} else {
			o := c.Objects[stripe]
			dst = append(dst, Chunk{Component: ci, Stripe: stripe, OSTIndex: o.OSTIndex, Object: o.Object,
				ObjOffset: objOff, Len: ln, FileOffset: pos})
		}
		pos += ln
	}
	return dst, nil
}

// locate returns the stripe and object offset of file offset x; c must be
// instantiated.
func (c *Component) locate(x uint64) (stripe int, objOff uint64) {
	s, n := uint64(c.StripeSize), uint64(len(c.Objects))
	unit := x / s
	return int(unit % n), (unit/n)*s + x%s
}

// StripeFileSize returns the file size implied by stripe number stripe of
// the instantiated component c holding objSize bytes (Lustre's
// lov_stripe_size): one past the file offset of the object's last byte, or
// 0 for an empty object. A result that would not fit in 64 bits saturates
// at EOF, which no real file reaches.
func (c *Component) StripeFileSize(stripe int, objSize uint64) uint64 {
	if objSize == 0 || len(c.Objects) == 0 {
		return 0
	}
	s, n := uint64(c.StripeSize), uint64(len(c.Objects))
	last := objSize - 1
	// file offset of object byte last: (last/s)*s*n + stripe*s + last%s
	hi, lo := bits.Mul64(last/s, s*n)
	if hi != 0 {
		return EOF
	}
	sum, carry := bits.Add64(lo, uint64(stripe)*s+last%s+1, 0)
	if carry != 0 {
		return EOF
	}
	return sum
}

// FileSize returns the file size given each object's size (for a glimpse,
// or LSOM on close): the largest StripeFileSize over all objects. sizes has
// one slice per component, holding one size per object of that component;
// an uninstantiated component takes a nil or empty slice. A table of
// another shape gives ErrInvalid.
func (l Layout) FileSize(sizes [][]uint64) (uint64, error) {
	if len(sizes) != len(l.Components) {
		return 0, fail(ErrInvalid, "layout: file size: %d size lists for %d components", len(sizes), len(l.Components))
	}
	var size uint64
	for ci := range l.Components {
		c := &l.Components[ci]
		if len(sizes[ci]) != len(c.Objects) {
			return 0, fail(ErrInvalid, "layout: file size: component %d: %d sizes for %d objects", ci, len(sizes[ci]), len(c.Objects))
		}
		for si, os := range sizes[ci] {
			size = max(size, c.StripeFileSize(si, os))
		}
	}
	return size, nil
}

// ObjectSize is the size one object must be cut or extended to.
type ObjectSize struct {
	Component int
	Stripe    int
	OSTIndex  uint32
	Object    FID
	Size      uint64
}

// Truncate returns, for a truncate of the file to size, the size each
// object must be set to (Lustre's lov_size_to_stripe, applied to every
// stripe of every component whose extent reaches size-1 or beyond;
// components wholly below the new size keep their objects as they are).
// Once the caller has set every listed object to its size, FileSize is
// exactly size and no object holds a byte at a file offset at or past size.
// Uninstantiated components past the new size are skipped (they hold no
// data). It returns ErrBeyondLayout if size-1 lies past the last
// component, and ErrUninstantiated if the component holding byte size-1 has
// no objects (the client must instantiate it first so that the size has an
// object to live on).
func (l Layout) Truncate(size uint64) ([]ObjectSize, error) {
	from := uint64(0)
	if size > 0 {
		from = size - 1
		ci := l.ComponentAt(from)
		if ci < 0 {
			return nil, fail(ErrBeyondLayout, "layout: truncate to %d", size)
		}
		if !l.Components[ci].Instantiated() {
			return nil, fail(ErrUninstantiated, "layout: truncate to %d: component %d (id %d)", size, ci, l.Components[ci].ID)
		}
	}
	var out []ObjectSize
	for ci := range l.Components {
		c := &l.Components[ci]
		if c.End <= from || !c.Instantiated() {
			continue
		}
		for si, o := range c.Objects {
			// A component starting at or past size holds nothing below it:
			// its objects are emptied, not extended to where size would
			// fall in them (sparse for nothing, and past what an object
			// may hold when the component has fewer stripes).
			end := uint64(0)
			if c.Start < size {
				end = c.StripeObjectSize(si, size)
			}
			out = append(out, ObjectSize{Component: ci, Stripe: si, OSTIndex: o.OSTIndex, Object: o.Object, Size: end})
		}
	}
	return out, nil
}

// StripeObjectSize returns how many bytes stripe number stripe of the
// instantiated component c holds below file offset fileSize: the object
// size that stripe has in a file of that size (Lustre's
// lov_size_to_stripe).
func (c *Component) StripeObjectSize(stripe int, fileSize uint64) uint64 {
	if len(c.Objects) == 0 {
		return 0
	}
	s, n := uint64(c.StripeSize), uint64(len(c.Objects))
	q, r := fileSize/(s*n), fileSize%(s*n)
	this := uint64(stripe) * s
	switch {
	case r <= this:
		return q * s
	case r-this >= s:
		return q*s + s
	default:
		return q*s + r - this
	}
}

// MaxBytes returns the first file offset component c cannot store when
// each of its objects holds at most objLimit bytes (object offsets below
// objLimit), as if the component covered the whole file: Lustre's
// lov_tgt_maxbytes times the stripe count, made exact. Objects fill row by
// row, so with objLimit = q*S + r (stripe size S) every object holds rows
// 0..q-1 whole and r bytes of row q: the first byte stripe 0 cannot hold,
// at q*S*N + r, is the limit, although later stripes of that row still
// have room: a write must stop there all the same, since a file stores
// every byte below its size and a byte past the limit would leave one
// below it that no write can fill. The stripe count is len(Objects) once
// instantiated; before, it is the count asked for (MaxStripeCount for
// AllStripes), which the MDS may lower but never raise, so the result is
// never below what the instantiated component allows. A result that does
// not fit in 64 bits saturates at EOF.
func (c *Component) MaxBytes(objLimit uint64) uint64 {
	n := uint64(len(c.Objects))
	switch {
	case n > 0:
	case c.StripeCount > 0:
		n = uint64(c.StripeCount)
	default:
		n = MaxStripeCount
	}
	s := uint64(c.StripeSize)
	if s == 0 {
		// Not a valid component; only a limit of one object is sure.
		return objLimit
	}
	hi, row := bits.Mul64(s, n)
	if hi != 0 {
		return EOF
	}
	hi, lo := bits.Mul64(objLimit/s, row)
	if hi != 0 {
		return EOF
	}
	sum, carry := bits.Add64(lo, objLimit%s, 0)
	if carry != 0 {
		return EOF
	}
	return sum
}

// MaxFileSize returns the first file offset the layout cannot store when
// each object holds at most objLimit bytes: a write must stop short of it
// (Linux's s_maxbytes, Lustre's lsm_maxbytes). Components are scanned in
// file order; one whose MaxBytes lies inside or before its extent bounds
// the file there (at its start, if it can hold none of its bytes), and one
// whose limit lies past its end bounds nothing (the next component holds
// the bytes after). So for a PFL layout the last component decides unless
// an earlier one is already full, and a layout that stops short of EOF
// stores nothing past its last component. EOF means no limit.
func (l Layout) MaxFileSize(objLimit uint64) uint64 {
	for i := range l.Components {
		c := &l.Components[i]
		if m := c.MaxBytes(objLimit); m < c.End {
			return max(m, c.Start)
		}
	}
	if n := len(l.Components); n > 0 {
		return l.Components[n-1].End
	}
	return 0
}
