package osdfile

import (
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/oss/osd"
)

// The journal file: two header slots and a record area, preallocated at
// Format so that committing never needs space from the store.
//
//	[0, 4096)       header slot 0
//	[4096, 8192)    header slot 1
//	[8192, size)    records, written from the start of the area on
//
// A header (hdrLen bytes at the start of its slot):
//
//	0  u64 magic "NACREJNL"
//	8  u32 version (1)
//	12 u32 zero
//	16 u64 generation; the header lives in slot generation%2
//	24 u64 LSN of the first record of this generation
//	32 u64 last committed transno as of the start of this generation
//	40 u64 journal file size
//	48 u32 crc32c of bytes 0..47
//
// The valid header with the highest generation is current. A checkpoint
// writes the next generation into the other slot, so a torn header write
// leaves the previous one in force.
//
// A record (one committed transaction), 8-byte aligned:
//
//	0  u32 magic "NJRC"
//	4  u32 length in bytes, header and checksum included
//	8  u64 generation it was written in
//	16 u64 LSN; consecutive from the header's first LSN
//	24 u64 last committed transno once this record is durable
//	32 u64 transno of the transaction (0: none)
//	40 u32 number of steps
//	44 u32 zero
//	48 steps, each: u8 op, 3 zero bytes, u32 body length, 16 FID, body,
//	   zero padding to 8
//	   then zero padding, and the last 4 bytes: crc32c of everything before
//
// Step bodies: create and destroy none; attr the object's attributes after
// the transaction (putAttr, 72 bytes); truncate u64 size; punch u64 start,
// u64 end; record u64 offset then the bytes.
//
// Replay reads records while magic, generation, LSN and checksum all hold;
// the first record that fails any is the end of the journal (a torn write or
// a record of an older generation). A record whose checksum holds but whose
// steps do not parse means corruption: Open fails with osd.ErrCorrupt.
const (
	slotSize   = 4096
	areaStart  = 2 * slotSize
	hdrMagic   = 0x4c4e4a455243414e // "NACREJNL" in a hex dump
	hdrVersion = 1
	hdrLen     = 52

	recMagic   = 0x43524a4e // "NJRC"
	recHdrLen  = 48
	stepHdrLen = 24
	minRecLen  = recHdrLen + 8
)

// The step opcodes.
const (
	opCreate   = 1
	opAttr     = 2
	opDestroy  = 3
	opTruncate = 4
	opPunch    = 5
	opRecord   = 6
)

type jheader struct {
	gen, startLSN, lastCommitted, size uint64
}

func (h *jheader) encode() []byte {
	b := make([]byte, slotSize)
	le.PutUint64(b[0:], hdrMagic)
	le.PutUint32(b[8:], hdrVersion)
	le.PutUint64(b[16:], h.gen)
	le.PutUint64(b[24:], h.startLSN)
	le.PutUint64(b[32:], h.lastCommitted)
	le.PutUint64(b[40:], h.size)
	le.PutUint32(b[48:], crc32.Checksum(b[:48], crcTab))
	return b
}

func decodeHeader(b []byte) (jheader, bool) {
	if len(b) < hdrLen || le.Uint64(b[0:]) != hdrMagic || le.Uint32(b[8:]) != hdrVersion ||
		le.Uint32(b[48:]) != crc32.Checksum(b[:48], crcTab) {
		return jheader{}, false
	}
	return jheader{gen: le.Uint64(b[16:]), startLSN: le.Uint64(b[24:]), lastCommitted: le.Uint64(b[32:]), size: le.Uint64(b[40:])}, true
}

// pickHeader returns the current header of the two slots.
func pickHeader(slots []byte) (jheader, error) {
	h0, ok0 := decodeHeader(slots[:slotSize])
	h1, ok1 := decodeHeader(slots[slotSize:])
	switch {
	case ok0 && ok1:
		if h1.gen > h0.gen {
			return h1, nil
		}
		return h0, nil
	case ok0:
		return h0, nil
	case ok1:
		return h1, nil
	}
	return jheader{}, fmt.Errorf("%w: journal: neither header slot is valid", osd.ErrCorrupt)
}

// recordBuilder encodes one transaction's record. The header fields known
// only when the record is written (generation, LSN, bound) and the checksum
// are filled in by seal.
type recordBuilder struct {
	b      []byte
	nsteps uint32
}

func newRecord(transno uint64, capacity int) *recordBuilder {
	r := &recordBuilder{b: make([]byte, recHdrLen, max(capacity, minRecLen))}
	le.PutUint32(r.b[0:], recMagic)
	le.PutUint64(r.b[32:], transno)
	return r
}

// stepSize is the encoded length of a step with a body of n bytes.
func stepSize(n int) int { return stepHdrLen + align8(n) }

func align8(n int) int { return (n + 7) &^ 7 }

// step appends a step and returns its body, n bytes, for the caller to fill.
func (r *recordBuilder) step(op byte, f fid.FID, n int) []byte {
	start := len(r.b)
	r.b = append(r.b, make([]byte, stepSize(n))...)
	h := r.b[start:]
	h[0] = op
	le.PutUint32(h[4:], uint32(n))
	f.Put(h[8:])
	r.nsteps++
	return h[stepHdrLen : stepHdrLen+n]
}

// finish pads the record and sets its length and step count.
func (r *recordBuilder) finish() []byte {
	r.b = append(r.b, make([]byte, 8)...) // room for the checksum, keeping 8-byte alignment
	le.PutUint32(r.b[4:], uint32(len(r.b)))
	le.PutUint32(r.b[40:], r.nsteps)
	return r.b
}

// sealRecord fills in the header fields known at write time and the checksum.
func sealRecord(b []byte, gen, lsn, bound uint64) {
	le.PutUint64(b[8:], gen)
	le.PutUint64(b[16:], lsn)
	le.PutUint64(b[24:], bound)
	n := len(b)
	sealRecordCRC(b[n-4:], b[:n-4])
}

// sealRecordCRC puts the checksum of body into dst.
func sealRecordCRC(dst, body []byte) { le.PutUint32(dst, crc32.Checksum(body, crcTab)) }

// jrecord is a decoded record.
type jrecord struct {
	lsn, bound, transno uint64
	steps               []jstep
}

type jstep struct {
	op   byte
	fid  fid.FID
	attr osd.Attr // opAttr
	a, b uint64   // opTruncate: a=size; opPunch: [a,b); opRecord: a=offset
	data []byte   // opRecord
}

var errJournalEnd = errors.New("end of journal")

// decodeRecord decodes the record at the start of b, which must be of
// generation gen and carry lsn. It returns errJournalEnd if there is no such
// record there, and an error wrapping osd.ErrCorrupt if the record checks out
// but its contents do not parse.
func decodeRecord(b []byte, gen, lsn uint64) (jrecord, int, error) {
	if len(b) < minRecLen || le.Uint32(b[0:]) != recMagic {
		return jrecord{}, 0, errJournalEnd
	}
	n := int(le.Uint32(b[4:]))
	if n < minRecLen || n > len(b) || n%8 != 0 {
		return jrecord{}, 0, errJournalEnd
	}
	if le.Uint64(b[8:]) != gen || le.Uint64(b[16:]) != lsn {
		return jrecord{}, 0, errJournalEnd
	}
	if le.Uint32(b[n-4:]) != crc32.Checksum(b[:n-4], crcTab) {
		return jrecord{}, 0, errJournalEnd
	}
	corrupt := func(format string, args ...any) (jrecord, int, error) {
		return jrecord{}, 0, fmt.Errorf("%w: journal record %d: %s", osd.ErrCorrupt, lsn, fmt.Sprintf(format, args...))
	}
	rec := jrecord{lsn: lsn, bound: le.Uint64(b[24:]), transno: le.Uint64(b[32:])}
	nsteps := int(le.Uint32(b[40:]))
	body := b[recHdrLen : n-8]
	for i := 0; i < nsteps; i++ {
		if len(body) < stepHdrLen {
			return corrupt("step %d truncated", i)
		}
		op := body[0]
		bl := int(le.Uint32(body[4:]))
		f, _ := fid.Get(body[8:])
		if bl > len(body)-stepHdrLen || stepSize(bl) > len(body) {
			return corrupt("step %d body of %d bytes overruns the record", i, bl)
		}
		p := body[stepHdrLen : stepHdrLen+bl]
		body = body[stepSize(bl):]
		s := jstep{op: op, fid: f}
		want := -1
		switch op {
		case opCreate, opDestroy:
			want = 0
		case opAttr:
			want = attrSize
			a, err := getAttr(p)
			if err != nil {
				return corrupt("step %d: %v", i, err)
			}
			s.attr = a
		case opTruncate:
			want = 8
			if bl == 8 {
				s.a = le.Uint64(p)
			}
		case opPunch:
			want = 16
			if bl == 16 {
				s.a, s.b = le.Uint64(p), le.Uint64(p[8:])
			}
		case opRecord:
			if bl < 8 {
				return corrupt("step %d: record step of %d bytes", i, bl)
			}
			want = bl
			s.a, s.data = le.Uint64(p), p[8:]
		default:
			return corrupt("step %d: unknown op %d", i, op)
		}
		if bl != want {
			return corrupt("step %d: op %d with a body of %d bytes", i, op, bl)
		}
		if f.IsZero() {
			return corrupt("step %d: zero FID", i)
		}
		rec.steps = append(rec.steps, s)
	}
	if len(body) != 0 {
		return corrupt("%d bytes after the last step", len(body))
	}
	return rec, n, nil
}
