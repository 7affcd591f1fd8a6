package mdd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nacrefs/nacre/internal/fid"
)

// seqServer is this MDT's sequence server: the super range the controller
// granted it and the next sequence to hand to a client.
type seqServer struct {
	start, end, next uint64 // [start, end) granted; next ≤ end
}

func (s *Store) loadSeqServer() (seqServer, error) {
	v, err := s.get(keySeqServer)
	if errors.Is(err, pebble.ErrNotFound) {
		return seqServer{}, nil
	}
	if err != nil {
		return seqServer{}, err
	}
	if len(v) != 25 || v[0] != recVersion {
		return seqServer{}, fmt.Errorf("sequence server record: %d bytes", len(v))
	}
	le := binary.LittleEndian
	st := seqServer{start: le.Uint64(v[1:]), end: le.Uint64(v[9:]), next: le.Uint64(v[17:])}
	if st.start > st.next || st.next > st.end {
		return seqServer{}, fmt.Errorf("sequence server record: [%#x, %#x) next %#x", st.start, st.end, st.next)
	}
	return st, nil
}

func (st seqServer) marshal() []byte {
	b := []byte{recVersion}
	b = binary.LittleEndian.AppendUint64(b, st.start)
	b = binary.LittleEndian.AppendUint64(b, st.end)
	return binary.LittleEndian.AppendUint64(b, st.next)
}

// AllocSuperSeq is the sequence controller (MDT0): it grants a server (an
// MDT or OST of the given index) a super range of Config.SuperWidth
// sequences, records it in the FLD, and makes both durable before
// returning, so no range is ever granted twice, across crashes too.
// ENOSPC when the sequence space is exhausted. Safe for concurrent use.
func (s *Store) AllocSuperSeq(typ TargetType, index uint32) (FLDEntry, error) {
	if typ > TargetOST {
		return FLDEntry{}, fail(syscall.EINVAL, "alloc super sequence: target type %d", typ)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	e, err := s.allocSuperLocked(b, typ, index)
	if err != nil {
		return FLDEntry{}, err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return FLDEntry{}, ioError(err, "alloc super sequence")
	}
	s.grantLocked(e)
	return e, nil
}

// allocSuperLocked writes a new grant into b; the caller commits with
// Sync and then calls grantLocked.
func (s *Store) allocSuperLocked(b *pebble.Batch, typ TargetType, index uint32) (FLDEntry, error) {
	start := s.mu.seqCtlNext
	end := start + s.cfg.SuperWidth
	if end < start || end > fid.SeqLOVDefault {
		return FLDEntry{}, fail(syscall.ENOSPC, "alloc super sequence: sequences exhausted at %#x", start)
	}
	e := FLDEntry{Start: start, End: end, Index: index, Type: typ}
	b.Set(keySeqCtl, u64Val(end), nil)
	b.Set(u64Key(pfxFLD, start), e.marshal(), nil)
	return e, nil
}

func (s *Store) grantLocked(e FLDEntry) {
	s.mu.seqCtlNext = e.End
	i := sort.Search(len(s.mu.fld), func(i int) bool { return s.mu.fld[i].Start > e.Start })
	s.mu.fld = append(s.mu.fld, FLDEntry{})
	copy(s.mu.fld[i+1:], s.mu.fld[i:])
	s.mu.fld[i] = e
}

// AllocClientSeq is this MDT's sequence server: it hands a client one
// sequence of its own, from which the client mints SeqWidth() FIDs
// (object ids 1..SeqWidth) without asking. It asks the controller for a
// new super range when the current one is used up. The grant is durable
// before it returns, so a sequence is never handed out twice. Safe for
// concurrent use.
func (s *Store) AllocClientSeq() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allocClientSeqLocked()
}

func (s *Store) allocClientSeqLocked() (uint64, error) {
	b := s.db.NewBatch()
	defer b.Close()
	st := s.mu.srv
	var grant *FLDEntry
	if st.next >= st.end {
		e, err := s.allocSuperLocked(b, TargetMDT, s.cfg.Index)
		if err != nil {
			return 0, err
		}
		grant = &e
		st = seqServer{start: e.Start, end: e.End, next: e.Start}
	}
	seq := st.next
	st.next++
	b.Set(keySeqServer, st.marshal(), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, ioError(err, "alloc client sequence")
	}
	if grant != nil {
		s.grantLocked(*grant)
	}
	s.mu.srv = st
	return seq, nil
}

// SeqWidth returns the number of object ids in a client sequence.
func (s *Store) SeqWidth() uint32 { return s.cfg.SeqWidth }

// FLDLookup returns the FLD range holding sequence seq; ENOENT if no
// target owns it. Safe for concurrent use.
func (s *Store) FLDLookup(seq uint64) (FLDEntry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.fldLookupLocked(seq)
}

func (s *Store) fldLookupLocked(seq uint64) (FLDEntry, error) {
	fld := s.mu.fld
	i := sort.Search(len(fld), func(i int) bool { return fld[i].Start > seq }) - 1
	if i < 0 || seq >= fld[i].End {
		return FLDEntry{}, fail(syscall.ENOENT, "fld: sequence %#x", seq)
	}
	return fld[i], nil
}

// checkNewFIDLocked accepts a client-minted FID for a new inode: sane,
// with an object id, and in a sequence the FLD gives to this MDT.
func (s *Store) checkNewFIDLocked(f fid.FID) error {
	if !f.IsNormal() || f.Oid == 0 || f.Ver != 0 {
		return fail(syscall.EINVAL, "new FID %v: not a normal FID", f)
	}
	e, err := s.fldLookupLocked(f.Seq)
	if err != nil || e.Type != TargetMDT || e.Index != s.cfg.Index {
		return fail(syscall.EINVAL, "new FID %v: sequence not on MDT%04x", f, s.cfg.Index)
	}
	return nil
}

// maxOIDHigh bounds the sequences whose highest OID the store keeps (one
// per client mount that created files since the store opened, usually):
// past it the table starts over, and each sequence costs one seek again.
const maxOIDHigh = 4096

// oidWindow is how many OIDs below a sequence's highest the store knows
// the inodes of: a client's creates reach the MDS out of the order their
// FIDs were minted in when several run at once (mdtest with 16 threads),
// and one below the highest is still known free if no commit wrote it.
const oidWindow = 1024

// oidMark is what the store knows of a sequence's OIDs: no inode has one
// above high; of those in (max(base, high-oidWindow), high], exactly the
// ones whose bit (OID mod oidWindow) is set have been written since the
// store first looked (base, the highest it found then).
type oidMark struct {
	high, base uint32
	used       [oidWindow / 64]uint64
}

func (m *oidMark) known(oid uint32) bool {
	low := m.base
	if m.high > oidWindow && m.high-oidWindow > low {
		low = m.high - oidWindow
	}
	return oid > low
}

func (m *oidMark) bit(oid uint32) (*uint64, uint64) {
	i := oid % oidWindow
	return &m.used[i/64], 1 << (i % 64)
}

// note records an inode written with oid.
func (m *oidMark) note(oid uint32) {
	if oid > m.high {
		if oid-m.high >= oidWindow {
			clear(m.used[:])
		} else {
			for o := m.high + 1; o < oid; o++ { // their slots held OIDs leaving the window
				w, b := m.bit(o)
				*w &^= b
			}
		}
		m.high = oid
	} else if !m.known(oid) {
		return
	}
	w, b := m.bit(oid)
	*w |= b
}

// unusedFIDLocked reports whether no inode can have FID f because f's OID
// is above every OID of its sequence in the store, or below the highest
// but not written since the store found the highest: what makes creates
// with a client's FID (which the client mints in order) skip the lookup
// of an inode that does not exist. The highest OID of a sequence is found
// with one seek the first time, then kept by noteOIDLocked for every
// inode a commit writes. false means only "look it up".
func (s *Store) unusedFIDLocked(f fid.FID) (bool, error) {
	m := s.mu.oidHigh[f.Seq]
	if m == nil {
		var high uint32
		lo, hi := fidKey(pfxInode, fid.FID{Seq: f.Seq}), fidKey(pfxInode, fid.FID{Seq: f.Seq + 1})
		if f.Seq == math.MaxUint64 {
			hi = []byte{pfxInode + 1}
		}
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return false, ioError(err, "inodes of sequence %#x", f.Seq)
		}
		if it.Last() {
			high = getFID(it.Key()[1:]).Oid
		}
		err = it.Close()
		if err != nil {
			return false, ioError(err, "inodes of sequence %#x", f.Seq)
		}
		if len(s.mu.oidHigh) >= maxOIDHigh {
			clear(s.mu.oidHigh)
		}
		m = &oidMark{high: high, base: high}
		s.mu.oidHigh[f.Seq] = m
	}
	return m.unused(f.Oid), nil
}

// unused reports whether no inode has oid, as far as m knows.
func (m *oidMark) unused(oid uint32) bool {
	if oid > m.high {
		return true
	}
	if !m.known(oid) {
		return false
	}
	w, b := m.bit(oid)
	return *w&b == 0
}

// noteOIDLocked keeps unusedFIDLocked's table right as inode f is written.
func (s *Store) noteOIDLocked(f fid.FID) {
	if m := s.mu.oidHigh[f.Seq]; m != nil {
		m.note(f.Oid)
	}
}

// mintLocked mints a FID for the store's own use (creates that came
// without one) from a sequence of its own; a new sequence after each
// restart and whenever one is used up.
func (s *Store) mintLocked() (fid.FID, error) {
	a := &s.mu.alloc
	if a.seq == 0 || a.oid >= uint64(s.cfg.SeqWidth) {
		seq, err := s.allocClientSeqLocked()
		if err != nil {
			return fid.FID{}, err
		}
		a.seq, a.oid = seq, 0
	}
	a.oid++
	return fid.FID{Seq: a.seq, Oid: uint32(a.oid)}, nil
}

// FIDAllocator mints FIDs from sequences it gets from a sequence server
// (a client's, or a server's own): object ids 1..width of each sequence,
// then a new sequence. Safe for concurrent use.
type FIDAllocator struct {
	width uint32
	next  func() (uint64, error)

	mu  sync.Mutex
	seq uint64 // 0: none yet
	oid uint32
}

// NewFIDAllocator returns an allocator minting width FIDs per sequence
// and calling next for each new sequence (Store.AllocClientSeq, or an RPC
// to it).
func NewFIDAllocator(width uint32, next func() (uint64, error)) *FIDAllocator {
	return &FIDAllocator{width: width, next: next}
}

// Next returns a FID never returned before by any allocator fed by the
// same sequence server; it fails only if a new sequence is needed and next
// fails.
func (a *FIDAllocator) Next() (fid.FID, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seq == 0 || a.oid >= a.width {
		seq, err := a.next()
		if err != nil {
			return fid.FID{}, err
		}
		a.seq, a.oid = seq, 0
	}
	a.oid++
	return fid.FID{Seq: a.seq, Oid: a.oid}, nil
}
