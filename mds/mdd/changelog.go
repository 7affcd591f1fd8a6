package mdd

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nacrefs/nacre/internal/fid"
)

// ChangelogType is the kind of a changelog record (Lustre's
// changelog_rec_type values, which tools print as "01CREAT").
type ChangelogType uint8

// The record types.
const (
	CLMark     ChangelogType = 0
	CLCreate   ChangelogType = 1
	CLMkdir    ChangelogType = 2
	CLHardlink ChangelogType = 3
	CLSoftlink ChangelogType = 4
	CLMknod    ChangelogType = 5
	CLUnlink   ChangelogType = 6
	CLRmdir    ChangelogType = 7
	CLRename   ChangelogType = 8
	CLExt      ChangelogType = 9
	CLOpen     ChangelogType = 10
	CLClose    ChangelogType = 11
	CLLayout   ChangelogType = 12
	CLTrunc    ChangelogType = 13
	CLSetattr  ChangelogType = 14
	CLXattr    ChangelogType = 15
	CLHSM      ChangelogType = 16
	clLast                   = CLHSM
)

var clNames = [...]string{"MARK", "CREAT", "MKDIR", "HLINK", "SLINK", "MKNOD", "UNLNK", "RMDIR", "RENME",
	"RNMTO", "OPEN", "CLOSE", "LYOUT", "TRUNC", "SATTR", "XATTR", "HSM"}

// String prints the type as lfs changelog does: "01CREAT".
func (t ChangelogType) String() string {
	if t <= clLast {
		return fmt.Sprintf("%02d%s", uint8(t), clNames[t])
	}
	return fmt.Sprintf("%02d?", uint8(t))
}

// Changelog record flags (Lustre's CLF_*).
const (
	// CLFUnlinkLast on UNLNK and RENME: the last link of the target went.
	CLFUnlinkLast uint16 = 0x0001
	// CLFRenameExchange on RENME: RENAME_EXCHANGE swapped the two names.
	CLFRenameExchange uint16 = 0x0100
)

// ChangelogRecord is one namespace change. TFID is the object changed,
// PFID and Name its parent and name (for RENME: the target parent and
// name, with TFID the overwritten file if any); SFID, SPFID and SName are
// the renamed file and its old parent and name (RENME only).
type ChangelogRecord struct {
	Index uint64
	Type  ChangelogType
	Flags uint16
	Time  int64 // nanoseconds since the epoch
	UID   uint32
	GID   uint32
	TFID  fid.FID
	PFID  fid.FID
	Name  string
	SFID  fid.FID
	SPFID fid.FID
	SName string
}

const clFixedSize = 1 + 1 + 2 + 8 + 8 + 4 + 4 + 4*fid.Size + 2 + 2

// Marshal encodes the record as the store keeps it and as it travels to
// changelog readers (DecodeChangelogRecord reads it back).
func (r *ChangelogRecord) Marshal() []byte { return r.marshal() }

func (r *ChangelogRecord) marshal() []byte {
	le := binary.LittleEndian
	b := make([]byte, 0, clFixedSize+len(r.Name)+len(r.SName))
	b = append(b, recVersion, byte(r.Type))
	b = le.AppendUint16(b, r.Flags)
	b = le.AppendUint64(b, r.Index)
	b = le.AppendUint64(b, uint64(r.Time))
	b = le.AppendUint32(b, r.UID)
	b = le.AppendUint32(b, r.GID)
	for _, f := range []fid.FID{r.TFID, r.PFID, r.SFID, r.SPFID} {
		b, _ = f.AppendBinary(b)
	}
	b = le.AppendUint16(b, uint16(len(r.Name)))
	b = le.AppendUint16(b, uint16(len(r.SName)))
	b = append(b, r.Name...)
	return append(b, r.SName...)
}

// DecodeChangelogRecord reads a record as the store keeps it (and as a
// changelog reader may receive it). It is strict: a known version and type,
// names of at most MaxName bytes, source fields only on RENME, and no
// trailing bytes.
func DecodeChangelogRecord(b []byte) (ChangelogRecord, error) {
	le := binary.LittleEndian
	if len(b) < clFixedSize || b[0] != recVersion {
		return ChangelogRecord{}, fmt.Errorf("changelog record: %d bytes, version %v", len(b), first(b))
	}
	r := ChangelogRecord{Type: ChangelogType(b[1]), Flags: le.Uint16(b[2:]), Index: le.Uint64(b[4:]),
		Time: int64(le.Uint64(b[12:])), UID: le.Uint32(b[20:]), GID: le.Uint32(b[24:])}
	p := 28
	for _, f := range []*fid.FID{&r.TFID, &r.PFID, &r.SFID, &r.SPFID} {
		*f, _ = fid.Get(b[p:])
		p += fid.Size
	}
	nl, sl := int(le.Uint16(b[p:])), int(le.Uint16(b[p+2:]))
	p += 4
	if r.Type > clLast || nl > MaxName || sl > MaxName || len(b) != p+nl+sl {
		return ChangelogRecord{}, fmt.Errorf("changelog record: type %d, names %d+%d bytes in %d", r.Type, nl, sl, len(b))
	}
	r.Name = string(b[p : p+nl])
	r.SName = string(b[p+nl:])
	if r.Type != CLRename && (sl > 0 || !r.SFID.IsZero() || !r.SPFID.IsZero()) {
		return ChangelogRecord{}, fmt.Errorf("changelog record: source fields on %v", r.Type)
	}
	return r, nil
}

// String prints the record as lfs changelog does.
func (r ChangelogRecord) String() string {
	t := time.Unix(0, r.Time).UTC()
	s := fmt.Sprintf("%d %v %s %s %#x u=%d:%d t=%v", r.Index, r.Type, t.Format("15:04:05.000000000"), t.Format("2006.01.02"), r.Flags, r.UID, r.GID, r.TFID)
	if !r.PFID.IsZero() {
		s += fmt.Sprintf(" p=%v %s", r.PFID, r.Name)
	}
	if r.Type == CLRename {
		s += fmt.Sprintf(" s=%v sp=%v %s", r.SFID, r.SPFID, r.SName)
	}
	return s
}

// ChangelogUser is a registered changelog reader.
type ChangelogUser struct {
	ID      uint32
	Cleared uint64 // the reader has consumed every record up to this index
}

// Name is the user's name as lctl prints it ("cl1").
func (u ChangelogUser) Name() string { return "cl" + strconv.FormatUint(uint64(u.ID), 10) }

// ParseChangelogUser reads "cl<N>" (or "<N>").
func ParseChangelogUser(name string) (uint32, error) {
	n, err := strconv.ParseUint(strings.TrimPrefix(name, "cl"), 10, 32)
	if err != nil || n == 0 {
		return 0, fail(syscall.EINVAL, "changelog user %q", clampName(name))
	}
	return uint32(n), nil
}

// ChangelogRegister registers a new changelog user and returns it; from now
// on every namespace change is recorded until the user deregisters. Users
// are numbered cl1, cl2, ... and numbers are never reused. A new user has
// cleared every record that exists now. Safe for concurrent use.
func (s *Store) ChangelogRegister() (ChangelogUser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	u := ChangelogUser{ID: s.mu.clUserNext, Cleared: s.mu.clNext - 1}
	s.mu.clUserNext++
	b.Set(binary.BigEndian.AppendUint32([]byte{pfxCLUser}, u.ID), binary.LittleEndian.AppendUint64([]byte{recVersion}, u.Cleared), nil)
	b.Set(keyCLUser, binary.LittleEndian.AppendUint64(nil, uint64(s.mu.clUserNext)), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		s.mu.clUserNext--
		return ChangelogUser{}, ioError(err, "changelog register")
	}
	s.mu.clUsers[u.ID] = u.Cleared
	return u, nil
}

// ChangelogDeregister removes a user and purges the records no remaining
// user needs; with no users left, recording stops. ENOENT for an unknown
// user. Safe for concurrent use.
func (s *Store) ChangelogDeregister(id uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.mu.clUsers[id]; !ok {
		return fail(syscall.ENOENT, "changelog deregister cl%d", id)
	}
	b := s.db.NewBatch()
	defer b.Close()
	b.Delete(binary.BigEndian.AppendUint32([]byte{pfxCLUser}, id), nil)
	cleared := s.mu.clUsers[id]
	delete(s.mu.clUsers, id)
	s.purgeLocked(b)
	if err := b.Commit(pebble.Sync); err != nil {
		s.mu.clUsers[id] = cleared
		return ioError(err, "changelog deregister cl%d", id)
	}
	return nil
}

// ChangelogUsers lists the registered users in id order. Safe for
// concurrent use.
func (s *Store) ChangelogUsers() []ChangelogUser {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]ChangelogUser, 0, len(s.mu.clUsers))
	for id, c := range s.mu.clUsers {
		out = append(out, ChangelogUser{ID: id, Cleared: c})
	}
	sortUsers(out)
	return out
}

func sortUsers(u []ChangelogUser) {
	for i := 1; i < len(u); i++ {
		for j := i; j > 0 && u[j].ID < u[j-1].ID; j-- {
			u[j], u[j-1] = u[j-1], u[j]
		}
	}
}

// ChangelogClear records that user id has consumed every record up to
// endrec (0: every record that exists now), and purges the records every
// user has cleared. Clearing is monotonic: an endrec below the user's
// cleared index changes nothing. ENOENT for an unknown user, EINVAL for an
// endrec past the last record. Safe for concurrent use.
func (s *Store) ChangelogClear(id uint32, endrec uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cleared, ok := s.mu.clUsers[id]
	if !ok {
		return fail(syscall.ENOENT, "changelog clear cl%d", id)
	}
	last := s.mu.clNext - 1
	if endrec == 0 {
		endrec = last
	}
	if endrec > last {
		return fail(syscall.EINVAL, "changelog clear cl%d to %d: last record is %d", id, endrec, last)
	}
	if endrec <= cleared {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	b.Set(binary.BigEndian.AppendUint32([]byte{pfxCLUser}, id), binary.LittleEndian.AppendUint64([]byte{recVersion}, endrec), nil)
	s.mu.clUsers[id] = endrec
	s.purgeLocked(b)
	if err := b.Commit(pebble.NoSync); err != nil {
		s.mu.clUsers[id] = cleared
		return ioError(err, "changelog clear cl%d", id)
	}
	return nil
}

// purgeLocked deletes into b the records every user has cleared (all of
// them when there are no users).
func (s *Store) purgeLocked(b *pebble.Batch) {
	upto := s.mu.clNext - 1
	for _, c := range s.mu.clUsers {
		upto = min(upto, c)
	}
	if upto < s.mu.clFirst {
		return
	}
	b.DeleteRange(u64Key(pfxCLRec, s.mu.clFirst), u64Key(pfxCLRec, upto+1), nil)
	s.mu.clFirst = upto + 1
}

// ChangelogRead returns up to max records with index ≥ from, in index
// order (none once from is past the last). Records a concurrent operation
// is writing appear once it has returned. Safe for concurrent use.
func (s *Store) ChangelogRead(from uint64, max int) ([]ChangelogRecord, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: u64Key(pfxCLRec, from), UpperBound: []byte{pfxCLRec + 1}})
	if err != nil {
		return nil, ioError(err, "changelog read")
	}
	defer it.Close()
	var out []ChangelogRecord
	for ok := it.First(); ok && len(out) < max; ok = it.Next() {
		r, err := DecodeChangelogRecord(it.Value())
		if err != nil {
			return out, ioError(err, "changelog read at %d", binary.BigEndian.Uint64(it.Key()[1:]))
		}
		out = append(out, r)
	}
	return out, ioError(it.Error(), "changelog read")
}

// ChangelogLast returns the index of the last record written (0 if none
// ever was). Safe for concurrent use.
func (s *Store) ChangelogLast() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.clNext - 1
}
