package mdt

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/mds/mdd"
)

// Server-side locks of namespace changes, as Lustre's MDT takes them for
// a reint: a change takes IBITS locks on what it changes, so that clients
// caching what those bits protect get blocking ASTs and drop it, and no
// client is granted a lock on it while the change is half done.
//
//   - a directory whose entries change: CW with UPDATE (Lustre's PDO
//     lock: changes of different names in one directory run together;
//     clients' PR UPDATE locks — cached entries, negative lookups,
//     readdir pages — are called back, except, for an O_CREAT open that
//     asks so (keep_dir_lock), the one lock of the requester's under
//     which it knows every name there and adds the one it makes);
//   - the name itself: EX on (directory, name hash), so that the name's
//     entry cannot change between the lookup and the change;
//   - an object whose name goes away or moves: EX with LOOKUP and the
//     other bits it changes (all of them when it may be destroyed);
//   - an object whose attributes change: EX with UPDATE (and PERM for
//     mode and owner, XATTR for extended attributes, LAYOUT for its
//     layout).
//
// Every change takes its directory and name locks first, sorted by
// resource, then the locks of the objects it found, sorted: a change
// never waits for a directory or name lock while it holds an object lock,
// so two changes never wait on each other.

// lockReq is one lock a change needs.
type lockReq struct {
	res  ldlm.Resource
	mode ldlm.Mode
	bits ldlm.Bits
	// tolerate: ldlm.Request.Tolerate.
	tolerate ldlm.Tolerated
}

// objRes is an inode's IBITS resource (Lustre's fid_build_reg_res_name).
func objRes(f fid.FID) ldlm.Resource {
	return ldlm.Resource{ID: ldlm.ResIDOfFID(f.Seq, f.Oid, f.Ver), Type: ldlm.TypeIBits}
}

// nameRes is the resource of one name in a directory (Lustre's PDO lock,
// with the name hash in the last word of the resource id).
func nameRes(dir fid.FID, name string) ldlm.Resource {
	r := objRes(dir)
	r.ID[3] = mdd.NameHash(name)
	return r
}

func dirLock(dir fid.FID) lockReq {
	return lockReq{res: objRes(dir), mode: ldlm.CW, bits: ldlm.BitUpdate}
}

func nameLock(dir fid.FID, name string) lockReq {
	return lockReq{res: nameRes(dir, name), mode: ldlm.EX, bits: ldlm.BitUpdate}
}

func objLock(f fid.FID, bits ldlm.Bits) lockReq {
	return lockReq{res: objRes(f), mode: ldlm.EX, bits: bits}
}

// fullBits are the bits of an object that may be destroyed.
const fullBits = ldlm.BitLookup | ldlm.BitUpdate | ldlm.BitLayout | ldlm.BitPerm | ldlm.BitXAttr

// lock takes the locks in resource order, merging locks of one resource
// (more bits; EX over CW), and returns the function that releases them.
// It waits at most twice the callback timeout for any of them: a change
// never waits forever on clients. On error nothing is held.
func (m *MDT) lock(ctx context.Context, reqs ...lockReq) (func(), error) {
	reqs = slices.Clone(reqs)
	slices.SortFunc(reqs, func(a, b lockReq) int {
		for i := range a.res.ID {
			if c := cmp.Compare(a.res.ID[i], b.res.ID[i]); c != 0 {
				return c
			}
		}
		return 0
	})
	merged := reqs[:0]
	for _, r := range reqs {
		if n := len(merged); n > 0 && merged[n-1].res == r.res {
			merged[n-1].bits |= r.bits
			if merged[n-1].tolerate != r.tolerate {
				merged[n-1].tolerate = ldlm.Tolerated{} // tolerated only if every part tolerates
			}
			if r.mode == ldlm.EX {
				merged[n-1].mode = ldlm.EX
			}
			continue
		}
		merged = append(merged, r)
	}
	// One deadline for all of them, armed only if one has to wait.
	deadline := time.Now().Add(m.lockTimeout())
	var held []func()
	release := func() {
		for i := len(held) - 1; i >= 0; i-- {
			held[i]()
		}
	}
	for _, r := range merged {
		rel, err := m.lockd.LockLocal(ctx, ldlm.Request{Resource: r.res, Mode: r.mode, Policy: ldlm.Policy{Bits: r.bits}, Tolerate: r.tolerate}, max(time.Until(deadline), time.Nanosecond))
		if err != nil {
			release()
			if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("mdt: lock %v %v: clients did not give it back: %w", r.mode, r.res, syscall.ETIMEDOUT)
			}
			return nil, fmt.Errorf("mdt: lock %v %v: %w", r.mode, r.res, err)
		}
		held = append(held, rel)
	}
	return release, nil
}

func (m *MDT) lockTimeout() time.Duration {
	t := m.cfg.CallbackTimeout
	if t <= 0 {
		t = ldlm.NodeCallbackTimeout()
	}
	return 2*t + 5*time.Second
}
