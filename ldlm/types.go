package ldlm

import (
	"fmt"
	"strconv"
	"strings"
)

// ResID names a resource within a namespace: Lustre's ldlm_res_id. For a
// file or object it is the FID packed as ResIDOfFID does; the last words
// are type-specific (Lustre puts a name hash there for per-name locks).
type ResID [4]uint64

// ResIDOfFID packs a FID as Lustre's fid_build_reg_res_name does: the
// sequence in word 0, the object id and version in word 1.
func ResIDOfFID(seq uint64, oid, ver uint32) ResID {
	return ResID{seq, uint64(oid) | uint64(ver)<<32}
}

// String formats the id as Lustre's DLDLMRES does: [0x..:0x..:0x..].0x..
func (r ResID) String() string {
	return fmt.Sprintf("[%#x:%#x:%#x].%#x", r[0], r[1], r[2], r[3])
}

// Resource names one lock resource of a namespace: an id and the type of
// the locks on it. The same id under two types (IBITS and FLOCK locks on one
// file) is two independent resources.
type Resource struct {
	ID   ResID
	Type Type
}

// String formats the resource as its id and type: [0x1:0x0:0x0].0x0/EXTENT.
func (r Resource) String() string { return r.ID.String() + "/" + r.Type.String() }

// Handle is a lock's cookie: how callers (and, later, the wire) name a
// lock. A namespace never issues 0 and never issues a handle twice.
type Handle uint64

// String formats the handle in hex, as Lustre prints lock cookies.
func (h Handle) String() string { return fmt.Sprintf("%#x", uint64(h)) }

// Owner names the holder of a lock: on a server, the export (the client
// connection) the lock was enqueued through. Locks of one owner conflict
// with each other like anyone's, except FLOCK locks of one lock owner
// (Policy.FlockOwner), which merge and split instead.
type Owner string

// EOF as an extent end means "to the end of the object, however large".
const EOF = ^uint64(0)

// Extent is a byte range, both ends inclusive (Lustre's ldlm_extent).
type Extent struct {
	Start, End uint64
}

// Whole is the extent of an entire object.
var Whole = Extent{0, EOF}

// String formats the extent as [start,end], with EOF for the end of the object.
func (e Extent) String() string {
	if e.End == EOF {
		return fmt.Sprintf("[%d,EOF]", e.Start)
	}
	return fmt.Sprintf("[%d,%d]", e.Start, e.End)
}

// overlaps reports whether e and o share at least one byte.
func (e Extent) overlaps(o Extent) bool { return e.Start <= o.End && o.Start <= e.End }

// contains reports whether e covers all of o.
func (e Extent) contains(o Extent) bool { return e.Start <= o.Start && o.End <= e.End }

// touches reports whether e and o overlap or are adjacent, so that their
// union is one range. It is careful at 0 and EOF.
func (e Extent) touches(o Extent) bool {
	if e.overlaps(o) {
		return true
	}
	return (e.End != EOF && e.End+1 == o.Start) || (o.End != EOF && o.End+1 == e.Start)
}

// Bits is a set of inode bits (Lustre's MDS_INODELOCK_*): what part of an
// inode an IBITS lock protects.
type Bits uint64

// The inode bits.
const (
	BitLookup Bits = 1 << iota // the name → FID mapping, owner, mode, ACL
	BitUpdate                  // attributes, directory contents
	BitOpen                    // an open handle (exclusive opens, leases)
	BitLayout                  // the file layout
	BitPerm                    // permissions
	BitXAttr                   // extended attributes
	BitDOM                     // data stored on the MDT (Data-on-MDT)

	// AllBits is every bit above (MDS_INODELOCK_FULL).
	AllBits = BitLookup | BitUpdate | BitOpen | BitLayout | BitPerm | BitXAttr | BitDOM
)

var bitNames = [...]string{"LOOKUP", "UPDATE", "OPEN", "LAYOUT", "PERM", "XATTR", "DOM"}

// String formats the bits by name, joined by |: LOOKUP|UPDATE.
func (b Bits) String() string {
	if b == 0 {
		return "0"
	}
	var parts []string
	for i, n := range bitNames {
		if b&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	if rest := b &^ AllBits; rest != 0 {
		parts = append(parts, "0x"+strconv.FormatUint(uint64(rest), 16))
	}
	return strings.Join(parts, "|")
}

// Policy is the type-specific part of a lock (Lustre's
// ldlm_policy_data_t). Fields that do not belong to the lock's type must be
// zero.
type Policy struct {
	// Extent is the byte range of an EXTENT or FLOCK lock. For a granted
	// EXTENT lock it is the granted (possibly grown) range.
	Extent Extent
	// GID is the group id of an EXTENT lock in GROUP mode (never 0).
	GID uint64
	// Bits are the inode bits of an IBITS lock (never empty).
	Bits Bits
	// FlockOwner identifies the POSIX lock owner within the client (the
	// kernel's lock owner, FUSE's lk_owner; a client without one passes
	// the pid). Locks of one (Owner, FlockOwner) pair never conflict with
	// each other: they merge and split.
	FlockOwner uint64
	// PID is the process that took a FLOCK lock, reported by Test
	// (F_GETLK); it plays no part in conflicts.
	PID uint32
}

// Flags modify an enqueue, after Lustre's LDLM_FL_* enqueue flags.
type Flags uint32

// The enqueue flags.
const (
	// BlockNoWait (LDLM_FL_BLOCK_NOWAIT): if the lock cannot be granted at
	// once, fail with ErrWouldBlock instead of waiting, and send no
	// blocking ASTs. For try-locks, F_SETLK and lock-ahead.
	BlockNoWait Flags = 1 << iota
	// NoExpansion (LDLM_FL_NO_EXPANSION): grant an EXTENT lock exactly as
	// requested, without growing it. For lock-ahead and server-local locks.
	NoExpansion
	// Replay (LDLM_FL_REPLAY): a lock a client held before the server
	// restarted, re-established during recovery: granted as it was, with
	// no conflict check (the locks replayed were compatible when granted).
	Replay
	// DiscardData (LDLM_FL_DISCARD_DATA), on a target's own lock
	// (LockLocal) only: the holders of the locks it calls back drop what
	// they cache under them without writing it back, as the object is
	// being destroyed (Lustre's ofd_destroy). The blocking ASTs say so.
	DiscardData
	// RecoveryWait, during a target's recovery, queues a lock its client
	// still waited for before the restart (replayed without Replay) as
	// waiting even if nothing conflicts with it yet, and calls nothing
	// back: a granted lock it waited for may be replayed after it, and
	// granting it first would make two conflicting locks (Lustre's
	// LDLM_FL_REPLAY with LDLM_FL_BLOCK_GRANTED). Namespace.Recovered
	// grants it, or calls back what blocks it, once the replays are in.
	RecoveryWait

	allFlags = BlockNoWait | NoExpansion | Replay | DiscardData | RecoveryWait
)

// Request asks for a lock.
type Request struct {
	Resource Resource
	Mode     Mode
	Owner    Owner
	Policy   Policy
	Flags    Flags
	// Tolerate, on a target's own lock (LockLocal), names one granted PR
	// lock of a client that the request does not conflict with: it gets
	// no blocking AST and need not go first. An MDT's create takes it for
	// the directory lock under which the client that asked for the create
	// knows the directory's names and adds the one made itself
	// (IntentRequest.keep_dir_lock). The client's other locks, and those
	// it asks for later, conflict as always.
	Tolerate Tolerated
}

// Tolerated names a client's lock (Request.Tolerate): its handle and, so
// that a client cannot name another's, its owner. The zero value names
// none.
type Tolerated struct {
	Owner Owner
	Lock  Handle
}

// State is where a lock is in its resource's queues.
type State uint8

// The lock states.
const (
	// Waiting: queued behind conflicting locks; a completion AST will tell
	// the owner when it is granted.
	Waiting State = iota + 1
	// Granted: held.
	Granted
)

// String returns "waiting" or "granted".
func (s State) String() string {
	switch s {
	case Waiting:
		return "waiting"
	case Granted:
		return "granted"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Lock is a snapshot of a lock, taken when the call that returned it ran.
// It is a value: later calls do not change it.
type Lock struct {
	Handle   Handle
	Resource Resource
	Owner    Owner
	Mode     Mode
	State    State
	// Policy is the lock's policy data as it stands; for a granted EXTENT
	// lock, Policy.Extent is the granted range.
	Policy Policy
	// Requested is the extent the owner asked for (EXTENT locks); it
	// differs from Policy.Extent when the server grew the lock.
	Requested Extent
	// CallbackPending (Lustre's LDLM_FL_AST_SENT) is set once a conflicting
	// request is queued behind the lock: the owner has been, or must be,
	// asked to give it up. For a granted lock the blocking AST went out in
	// the Effects that set the flag; for a waiting lock the request for
	// cancellation rides on its completion AST.
	CallbackPending bool
}

// LVB is a resource's lock value block: attributes a server hands out with
// locks on the resource (Lustre's ost_lvb for OST objects; other users put
// their own encoding in Opaque). The namespace stores it and never
// interprets it.
type LVB struct {
	Size   uint64 // object size in bytes
	Blocks uint64 // 512-byte blocks allocated
	MTime  int64  // nanoseconds since the Unix epoch
	ATime  int64
	CTime  int64
	Opaque []byte // any other encoding (a layout, a quota record)
}

// sameAttrs reports whether v and w tell the same size, blocks and times.
func (v LVB) sameAttrs(w LVB) bool {
	return v.Size == w.Size && v.Blocks == w.Blocks && v.MTime == w.MTime && v.ATime == w.ATime && v.CTime == w.CTime
}

// empty reports whether v says nothing of an object: what the LVB of a
// resource stays when LVBInit found no object.
func (v LVB) empty() bool {
	return v.Size == 0 && v.Blocks == 0 && v.MTime == 0 && v.CTime == 0
}

func (v LVB) clone() LVB {
	if v.Opaque != nil {
		v.Opaque = append([]byte(nil), v.Opaque...)
	}
	return v
}
