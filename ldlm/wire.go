package ldlm

import (
	"fmt"

	ldlmv1 "github.com/nacrefs/nacre/proto/nacre/ldlm/v1"
)

// ConnectGlimpseLock is the connect feature bit (ptlrpc ImportConfig and
// TargetConfig Features) of a lock server that grants glimpses as locks
// (wireGlimpseLock): a client asks for one only of a target that agreed,
// since an older one refuses the flag.
const ConnectGlimpseLock uint64 = 1 << 0

// Enqueue flags on the wire (EnqueueRequest.flags). The first two are
// Flags; the rest are the daemon's own.
const (
	wireBlockNoWait = uint32(BlockNoWait)
	wireNoExpansion = uint32(NoExpansion)
	wireReplay      = uint32(Replay)
	// wireGlimpse asks for the resource's LVB, learnt from the holders of
	// write locks, instead of a lock (Lustre's glimpse enqueue).
	wireGlimpse uint32 = 1 << 8
	// wireTestLock asks whether a FLOCK lock could be granted, without
	// taking it (F_GETLK, Lustre's LDLM_FL_TEST_LOCK): the reply names the
	// conflicting lock (mode, range, owner, pid), or mode NL for none.
	wireTestLock uint32 = 1 << 9
	// wireGlimpseLock, with wireGlimpse, takes the PR lock the glimpse
	// asks for when no lock conflicts with it (Lustre's ofd_intent_policy
	// grants an uncontended glimpse): the holder then knows the size
	// without asking again until a writer calls the lock back.
	wireGlimpseLock uint32 = 1 << 10
	wireFlags              = wireBlockNoWait | wireNoExpansion | wireReplay | wireGlimpse | wireTestLock | wireGlimpseLock
)

// resourceToWire and resourceFromWire convert resource names.
func resourceToWire(r Resource) *ldlmv1.Resource {
	return &ldlmv1.Resource{Id: r.ID[:], Type: uint32(r.Type)}
}

func resourceFromWire(w *ldlmv1.Resource) (Resource, error) {
	if w == nil || len(w.Id) != len(ResID{}) {
		return Resource{}, fmt.Errorf("%w: resource id of %d words", ErrInvalid, len(w.GetId()))
	}
	if w.Type > 255 {
		return Resource{}, fmt.Errorf("%w: lock type %d", ErrInvalid, w.Type)
	}
	var r Resource
	copy(r.ID[:], w.Id)
	r.Type = Type(w.Type)
	return r, nil
}

func policyToWire(p Policy) *ldlmv1.Policy {
	return &ldlmv1.Policy{Start: p.Extent.Start, End: p.Extent.End, Gid: p.GID, Bits: uint64(p.Bits),
		FlockOwner: p.FlockOwner, Pid: p.PID}
}

func policyFromWire(w *ldlmv1.Policy) Policy {
	if w == nil {
		return Policy{}
	}
	return Policy{Extent: Extent{Start: w.Start, End: w.End}, GID: w.Gid, Bits: Bits(w.Bits),
		FlockOwner: w.FlockOwner, PID: w.Pid}
}

// modeFromWire refuses values that are not one mode: the core's
// validation then checks the mode against the type.
func modeFromWire(m uint32) (Mode, error) {
	if m > 255 || !Mode(m).Valid() {
		return 0, fmt.Errorf("%w: mode %#x", ErrInvalid, m)
	}
	return Mode(m), nil
}

func lvbToWire(v LVB) *ldlmv1.LVB {
	return &ldlmv1.LVB{Size: v.Size, Blocks: v.Blocks, Mtime: v.MTime, Atime: v.ATime, Ctime: v.CTime, Opaque: v.Opaque}
}

func lvbFromWire(w *ldlmv1.LVB) LVB {
	if w == nil {
		return LVB{}
	}
	return LVB{Size: w.Size, Blocks: w.Blocks, MTime: w.Mtime, ATime: w.Atime, CTime: w.Ctime, Opaque: w.Opaque}
}

// mergeLVB returns the attributes both views support: the larger size,
// blocks and times (a holder's cache is ahead of the server's object).
func mergeLVB(a, b LVB) LVB {
	a.Size, a.Blocks = max(a.Size, b.Size), max(a.Blocks, b.Blocks)
	a.MTime, a.ATime, a.CTime = max(a.MTime, b.MTime), max(a.ATime, b.ATime), max(a.CTime, b.CTime)
	return a
}
