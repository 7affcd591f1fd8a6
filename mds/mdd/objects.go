package mdd

import (
	"encoding/binary"
	"fmt"
	"maps"
	"syscall"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
)

// The last object used on each OST (Lustre's lov_objid, the OSP's
// last_used_fid): the highest object FID, in (sequence, object id) order,
// that a layout stored by this MDT names on the OST. It is written in the
// same batch as every layout with objects, so after a crash it covers
// exactly the layouts that survived: the MDT's orphan cleanup destroys the
// objects after it, which were precreated and never given to a file that
// exists (DESIGN.md §6: none leak).
//
//	v ostIndex(u32 BE) → version, seq u64, oid u32, ver u32 (little-endian)

const lastObjSize = 1 + 16

func lastObjKey(ost uint32) []byte { return binary.BigEndian.AppendUint32([]byte{pfxLastObj}, ost) }

func marshalLastObj(f fid.FID) []byte {
	b := []byte{recVersion}
	b = binary.LittleEndian.AppendUint64(b, f.Seq)
	b = binary.LittleEndian.AppendUint32(b, f.Oid)
	return binary.LittleEndian.AppendUint32(b, f.Ver)
}

func decodeLastObj(k, v []byte) (uint32, fid.FID, error) {
	if len(k) != 5 || len(v) != lastObjSize || v[0] != recVersion {
		return 0, fid.FID{}, fmt.Errorf("last object record %x: %d bytes", k, len(v))
	}
	le := binary.LittleEndian
	return binary.BigEndian.Uint32(k[1:]), fid.FID{Seq: le.Uint64(v[1:]), Oid: le.Uint32(v[9:]), Ver: le.Uint32(v[13:])}, nil
}

// loadLastObjects reads the records at Open.
func (s *Store) loadLastObjects() error {
	return s.scan([]byte{pfxLastObj}, func(k, v []byte) error {
		ost, f, err := decodeLastObj(k, v)
		if err != nil {
			return err
		}
		s.mu.lastObj[ost] = f
		return nil
	})
}

// noteObjects records in t the objects of a layout t stores, raising each
// OST's last object.
func (t *tx) noteObjects(l *layout.Layout) {
	for i := range l.Components {
		for _, o := range l.Components[i].Objects {
			cur, ok := t.lastObj[o.OSTIndex]
			if !ok {
				cur = t.s.mu.lastObj[o.OSTIndex]
			}
			if fid.Compare(o.Object, cur) > 0 {
				if t.lastObj == nil {
					t.lastObj = make(map[uint32]fid.FID)
				}
				t.lastObj[o.OSTIndex] = o.Object
				t.b.Set(lastObjKey(o.OSTIndex), marshalLastObj(o.Object), nil)
			}
		}
	}
}

// LastObjects returns, for every OST a layout of this MDT ever named, the
// last object used there: the highest object FID of any layout stored
// (durable or not yet), or what SetLastObject set. Safe for concurrent
// use.
func (s *Store) LastObjects() map[uint32]fid.FID {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.mu.lastObj)
}

// SetLastObject moves OST ost's last object forward to f, durably before
// it returns: the MDT starts a new object sequence on the OST with
// (seq, 0), so that the orphan cleanup after a crash knows the sequence
// even before a file takes an object of it. EINVAL if f is not after the
// current last object. Safe for concurrent use.
func (s *Store) SetLastObject(ost uint32, f fid.FID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.mu.lastObj[ost]; fid.Compare(f, cur) <= 0 {
		return fail(syscall.EINVAL, "last object of OST%04x: %v is not after %v", ost, f, cur)
	}
	b := s.db.NewBatch()
	defer b.Close()
	b.Set(lastObjKey(ost), marshalLastObj(f), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return ioError(err, "set last object of OST%04x", ost)
	}
	s.mu.lastObj[ost] = f
	return nil
}
