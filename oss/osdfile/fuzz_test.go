package osdfile

import (
	"bytes"
	"errors"
	"testing"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/oss/osd"
)

// FuzzDecodeRecord feeds journal bytes to the decoder: it must never panic,
// must accept only what checks out, and what it accepts must re-encode to the
// same bytes.
func FuzzDecodeRecord(f *testing.F) {
	rb := newRecord(7, 0)
	rb.step(opCreate, fidN(1), 0)
	le.PutUint64(rb.step(opTruncate, fidN(1), 8), 99)
	p := rb.step(opRecord, fidN(2), 8+3)
	copy(p[8:], "abc")
	a := osd.Attr{Size: 5, Valid: osd.AttrSize | osd.AttrUID, UID: 4}
	putAttr(rb.step(opAttr, fidN(1), attrSize), &a)
	good := rb.finish()
	sealRecord(good, 3, 10, 6)
	f.Add(good, uint64(3), uint64(10))
	f.Add(good[:len(good)-8], uint64(3), uint64(10))
	f.Add([]byte{}, uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, gen, lsn uint64) {
		if len(b)%2 == 1 {
			// Half the inputs get a valid envelope (magic, length,
			// generation, LSN, checksum) so the step parser is fuzzed
			// past the checksum.
			b = append(b[:len(b)-1:len(b)-1], make([]byte, (8-(len(b)-1)%8)%8)...)
			if len(b) < minRecLen {
				b = append(b, make([]byte, minRecLen-len(b))...)
			}
			le.PutUint32(b[0:], recMagic)
			le.PutUint32(b[4:], uint32(len(b)))
			sealRecord(b, gen, lsn, le.Uint64(b[24:]))
		}
		rec, n, err := decodeRecord(b, gen, lsn)
		if err != nil {
			if !errors.Is(err, errJournalEnd) && !errors.Is(err, osd.ErrCorrupt) {
				t.Fatalf("error %v is neither the end nor corruption", err)
			}
			return
		}
		re := newRecord(rec.transno, 0)
		for _, s := range rec.steps {
			switch s.op {
			case opCreate, opDestroy:
				re.step(s.op, s.fid, 0)
			case opAttr:
				putAttr(re.step(opAttr, s.fid, attrSize), &s.attr)
			case opTruncate:
				le.PutUint64(re.step(opTruncate, s.fid, 8), s.a)
			case opPunch:
				body := re.step(opPunch, s.fid, 16)
				le.PutUint64(body, s.a)
				le.PutUint64(body[8:], s.b)
			case opRecord:
				body := re.step(opRecord, s.fid, 8+len(s.data))
				le.PutUint64(body, s.a)
				copy(body[8:], s.data)
			}
		}
		out := re.finish()
		sealRecord(out, gen, lsn, rec.bound)
		// Padding and reserved bytes are not checked by the decoder, so
		// compare what it reads.
		rec2, n2, err := decodeRecord(out, gen, lsn)
		if err != nil || n2 != len(out) || len(rec2.steps) != len(rec.steps) || n < minRecLen {
			t.Fatalf("re-encoded record does not decode the same: %v", err)
		}
		for i := range rec.steps {
			s1, s2 := rec.steps[i], rec2.steps[i]
			if s1.op != s2.op || s1.fid != s2.fid || s1.a != s2.a || s1.b != s2.b || !bytes.Equal(s1.data, s2.data) {
				t.Fatalf("step %d: %+v became %+v", i, s1, s2)
			}
		}
	})
}

// FuzzDecodeLMA feeds attribute bytes, as found on a file, to the decoder.
func FuzzDecodeLMA(f *testing.F) {
	a := osd.Attr{Size: 123, UID: 1, Valid: osd.AttrUID}
	good := encodeLMA(make([]byte, lmaSize), fidN(1), 42, &a)
	f.Add(good)
	f.Add(good[:50])
	f.Fuzz(func(t *testing.T, b []byte) {
		lsn, a, err := decodeLMA(b, fidN(1))
		if err != nil {
			return
		}
		out := encodeLMA(make([]byte, lmaSize), fidN(1), lsn, &a)
		lsn2, a2, err := decodeLMA(out, fidN(1))
		if err != nil || lsn2 != lsn || a2.Size != a.Size || a2.Valid != a.Valid || !a2.Mtime.Equal(a.Mtime) || a2.ParentFID != a.ParentFID {
			t.Fatalf("round trip: %+v %d -> %+v %d, %v", a, lsn, a2, lsn2, err)
		}
		if _, _, err := decodeLMA(out, fid.FID{Seq: 5}); err == nil {
			t.Fatal("an lma was accepted for another FID")
		}
	})
}
