package osd

import (
	"context"
	"time"

	"github.com/nacrefs/nacre/internal/fid"
)

// MaxObjectSize bounds every object: no byte at or past it can be written, and
// Punch, SetAttr, WriteAt and Allocate past it fail with ErrTooLarge. It is ext4's limit
// for a file with 4 KiB blocks (16 TiB - 4 KiB), which every backend honours so
// that an OST behaves the same whatever it sits on.
const MaxObjectSize = 1<<44 - 1<<12

// EOF as the end of a Punch means "to the end of the object": the punch is a
// truncate (Lustre's OBD_OBJECT_EOF).
const EOF = ^uint64(0)

// MaxRecordSize bounds the bytes of one WriteRecord.
const MaxRecordSize = 64 << 10

// AttrMask says which fields of an Attr are meant: the ones to set in Create
// and SetAttr, the ones the object has in GetAttr (Lustre's la_valid).
type AttrMask uint32

// The attribute bits.
const (
	AttrSize          AttrMask = 1 << iota // Size
	AttrBlocks                             // Blocks (reported, never set)
	AttrMtime                              // Mtime
	AttrAtime                              // Atime
	AttrCtime                              // Ctime
	AttrMode                               // Mode
	AttrUID                                // UID
	AttrGID                                // GID
	AttrParent                             // ParentFID and StripeIndex together (Lustre's filter_fid)
	AttrLayoutVersion                      // LayoutVersion

	// AttrAll is every bit above.
	AttrAll = AttrSize | AttrBlocks | AttrMtime | AttrAtime | AttrCtime | AttrMode |
		AttrUID | AttrGID | AttrParent | AttrLayoutVersion
)

// Attr is an object's attributes. Valid says which fields are meaningful;
// the others are zero.
//
// Size is the object's length in bytes; bytes below it that were never
// written (holes) read as zeros. Blocks is the space the object occupies in
// 512-byte units, as the backing store counts it; it is reported by GetAttr
// and ignored by Create and SetAttr. Times are kept to the nanosecond and must
// lie between the years 1678 and 2262 (or be the zero time.Time). The OSD
// never changes times by itself: the OFD sets them from the client in the
// same transaction as the write or punch, as Lustre does. Mode, UID and GID
// are kept as given; an OSD does not interpret them.
type Attr struct {
	Size          uint64
	Blocks        uint64
	Mtime         time.Time
	Atime         time.Time
	Ctime         time.Time
	Mode          uint32
	UID           uint32
	GID           uint32
	ParentFID     fid.FID // the MDT file this object is a stripe of
	StripeIndex   uint32  // which stripe of ParentFID's layout
	LayoutVersion uint32  // layout generation the object was last written under (FLR)
	Valid         AttrMask
}

// Statfs describes the space of a device, taken from the store under it, as
// Lustre's obd_statfs does. Block counts are in units of BSize bytes.
type Statfs struct {
	Blocks   uint64 // total
	BFree    uint64 // free
	BAvail   uint64 // free and usable by the OST (BFree less any root reserve)
	Files    uint64 // total inodes, or an estimate where the store has no limit
	FFree    uint64 // free inodes
	BSize    uint32 // bytes per block
	NameLen  uint32 // longest name the store accepts
	MaxBytes uint64 // largest object size: MaxObjectSize
	ReadOnly bool   // the device hit a fatal error and accepts no more changes
}

// Device is one object storage target's store: the objects of one OST.
//
// Every method is safe for concurrent use by any number of goroutines. A
// method called after Close returns ErrClosed; a method that changes anything,
// called after the device hit a fatal I/O error, returns an error wrapping
// ErrReadOnly (Lustre remounts ldiskfs read-only); reads go on working.
type Device interface {
	// Label returns the target's name, as formatted (e.g. "nacre-OST0000").
	Label() string

	// Statfs reports the space of the store under the device. It fails only
	// with ErrClosed or the store's own error.
	Statfs(ctx context.Context) (Statfs, error)

	// Begin starts a transaction. It does not block and does not take ctx's
	// deadline into the Tx (Commit takes its own). It fails with ErrClosed or
	// ErrReadOnly.
	Begin(ctx context.Context) (Tx, error)

	// GetAttr returns f's attributes as of the last committed transaction,
	// with Valid holding AttrSize, AttrBlocks and every bit ever set on f.
	// It fails with ErrNotExist if f does not exist, ErrInvalid if f is
	// the zero FID, ErrCorrupt if the stored attributes do not check out.
	GetAttr(ctx context.Context, f fid.FID) (Attr, error)

	// ReadAt fills bufs, in order, with f's bytes from off, straight from the
	// store into the caller's buffers. Holes read as zeros. It returns how
	// many bytes it filled: less than the buffers hold only when the read
	// reaches f's size (0 if off is at or past it), and then the error is
	// nil. It fails with ErrNotExist if f does not exist, ErrInvalid for a
	// zero FID, a negative off or off plus the length overflowing, and ctx's
	// error if ctx is done before the read starts. A read runs against a
	// consistent object: a concurrent Punch or truncate waits or goes
	// first; concurrent writes of the same bytes may be seen partly (the
	// OFD's extent locks keep clients from doing that).
	ReadAt(ctx context.Context, f fid.FID, bufs [][]byte, off int64) (int, error)

	// Sync makes every transaction committed before the call durable. It
	// returns nil when they are; ctx's error if ctx ends first (the
	// transactions become durable anyway); and, whenever the device is
	// read-only, the error (wrapping ErrReadOnly) that made it so.
	Sync(ctx context.Context) error

	// LastCommitted returns the highest transno T such that every
	// transaction that carried a transno up to T is durable or aborted, as
	// far as this device knows: transnos must be set (SetTransno) in
	// increasing order, so a transaction that has set transno 10 and not yet
	// committed holds LastCommitted below 10 even when 11 is durable. It
	// never decreases while the device is open; after a restart it is at
	// least the last value that was durable. It never blocks.
	LastCommitted() uint64

	// Close makes everything committed durable, stops the device and
	// releases the target. Transactions still open fail at Commit with
	// ErrClosed. A second Close returns ErrClosed.
	Close() error
}

// Tx is one transaction: a list of steps that Commit applies together or not
// at all. A Tx belongs to one goroutine.
//
// The step methods check their arguments at once (ErrInvalid, ErrTooLarge)
// and leave the Tx unchanged on error; everything that depends on the
// objects' state (exists or not) is checked at Commit, against the state left
// by the earlier steps of the same Tx. Steps on one FID apply in the order
// they were added.
//
// Two orders are refused, with ErrInvalid at Commit: any step on a FID after
// its Destroy in the same Tx, and a WriteAt after a Punch, a SetAttr of the
// size or a WriteRecord on the same FID in the same Tx (bulk data reaches the
// store ahead of the journal, so it cannot follow a journaled change of the
// same bytes). Put them in separate transactions; the later one then waits,
// at Commit, until the earlier change has reached the store (about one group
// commit).
type Tx interface {
	// Create adds a step creating object f, empty, with the attributes in
	// a.Valid (as SetAttr sets them). At Commit it fails with ErrExist if f
	// exists. f must not be the zero FID.
	Create(f fid.FID, a Attr) error

	// Destroy adds a step removing f and its data. At Commit it fails with
	// ErrNotExist if f does not exist.
	Destroy(f fid.FID) error

	// SetAttr adds a step setting the attributes in a.Valid. Setting
	// AttrSize truncates: bytes past the new size are gone, and growing
	// leaves a hole. AttrBlocks is ignored. At Commit it fails with
	// ErrNotExist if f does not exist.
	SetAttr(f fid.FID, a Attr) error

	// WriteAt adds a step writing bufs, in order, at off. The object grows
	// to off plus their length if that is larger; skipped bytes stay holes.
	// The data is written straight from bufs at Commit, so the Tx keeps the
	// buffers (not a copy): the caller must leave them alone until Commit or
	// Abort returns. It fails with ErrInvalid for a negative off and
	// ErrTooLarge if the write would end past MaxObjectSize; at Commit with
	// ErrNotExist if f does not exist and ErrNoSpace if the store is full.
	WriteAt(f fid.FID, bufs [][]byte, off int64) error

	// WriteRecord adds a step writing b at off through the journal, so that
	// the bytes become durable atomically with the rest of the Tx, as
	// Lustre's dt_record_write. It is for the OFD's small bookkeeping
	// objects (LAST_ID, last_rcvd), not for file data: b is at most
	// MaxRecordSize bytes. The Tx keeps b until Commit or Abort returns.
	// Errors are those of WriteAt, and ErrInvalid if b is too long.
	WriteRecord(f fid.FID, b []byte, off int64) error

	// Allocate adds a step reserving the blocks of f's bytes in [start,
	// end), as fallocate(2) mode 0: the bytes never written read as zeros,
	// and the size grows to end if smaller, unless keepSize
	// (FALLOC_FL_KEEP_SIZE). It is applied as a WriteAt is, ahead of the
	// journal (so it cannot follow a Punch, a SetAttr of the size or a
	// WriteRecord of f in the same Tx), and taken back if the Tx fails. It
	// fails with ErrInvalid if start >= end, ErrTooLarge if end is past
	// MaxObjectSize; at Commit with ErrNotExist if f does not exist and
	// ErrNoSpace if the store cannot hold it.
	Allocate(f fid.FID, start, end uint64, keepSize bool) error

	// Punch adds a step freeing f's bytes in [start, end): they read as
	// zeros afterwards and the size does not change (fallocate
	// PUNCH_HOLE|KEEP_SIZE). With end == EOF it truncates f at start
	// instead: the size becomes start, whichever way that moves it. It
	// fails with ErrInvalid if start > end, ErrTooLarge if start, or end
	// other than EOF, is past MaxObjectSize; at Commit with ErrNotExist if f
	// does not exist.
	Punch(f fid.FID, start, end uint64) error

	// SetTransno tags the Tx with the PtlRPC transno of the request it
	// serves; 0 means none. The transno counts as pending from this call
	// until the Tx is durable or aborted (see Device.LastCommitted), so the
	// OFD calls it under the lock that hands out transnos. A second call
	// replaces the first.
	SetTransno(transno uint64)

	// Commit applies every step, all or none, and makes them visible
	// together: a reader sees every change of the Tx to existence and
	// attributes or none of them. It returns before the Tx is durable;
	// Device.Sync and Device.LastCommitted tell when it is. On success it
	// returns nil. On failure it returns the first failing step's error
	// (wrapping ErrExist, ErrNotExist, ErrInvalid, ErrNoSpace, ...) with the
	// step's FID and range, and no change of the Tx is visible — except that,
	// after ErrNoSpace or an I/O error, bytes a WriteAt overwrote inside an
	// object's old size may hold the new data (ordered-mode data, as ext4
	// data=ordered). If ctx ends while Commit waits for an earlier
	// transaction's journaled change to reach the store, it returns ctx's
	// error having changed nothing. It fails with ErrTxDone if the Tx was
	// already committed or aborted. Either way the Tx is finished.
	Commit(ctx context.Context) error

	// Abort discards the Tx; nothing of it is applied. It is a no-op on a
	// finished Tx, so `defer tx.Abort()` is the usual pattern.
	Abort()
}
