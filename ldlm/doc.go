// Package ldlm is the core of Nacre's distributed lock manager, after
// Lustre's LDLM: the server-side lock tables that keep every client's cache
// coherent.
//
// # What it owns
//
// A Namespace (one per target: each MDT, each OST, the MGS) holds
// resources, named by a ResID (a FID, packed as ResIDOfFID does) and a
// Type. Each resource has a granted queue, a waiting queue and a lock value
// block (LVB). Locks have a Mode (EX, PW, PR, CW, CR, NL, and GROUP on
// extents) checked against Lustre's compatibility matrix, and type-specific
// policy data:
//
//   - TypePlain: the mode alone.
//   - TypeExtent: a byte range; conflicts need overlapping ranges. The
//     server grows a granted extent to the largest range that conflicts
//     with nothing (see grow in extent.go for the exact rule and its caps).
//     GROUP locks of one group id share the object; they exclude every
//     other mode but NL whatever the ranges, and are never called back.
//   - TypeIBits: a set of inode bits; conflicts need a common bit. Convert
//     drops bits, as a client does to keep the rest of its lock.
//   - TypeFlock: POSIX record locks of a process (Policy.FlockOwner) on a
//     client: merged, trimmed and split per owner, unlocked by an NL
//     request, with deadlock detection across owners and resources.
//
// # Decisions, not actions
//
// The package is pure code: no I/O, no goroutines, no clock, no logging.
// Every operation returns what the caller must do:
//
//   - Enqueue grants at once, or queues the lock and names the granted
//     locks whose owners must get a blocking AST (Effects.Blocking), each at
//     most once per lock. Waiting locks that conflict are marked
//     CallbackPending instead; their completion AST carries the request to
//     cancel after use (Lustre's LDLM_FL_AST_SENT on a completion AST).
//   - Cancel, Convert and DropOwner (eviction) return the waiting locks
//     that became granted (Effects.Granted, completion ASTs), in queue
//     order.
//   - Fairness: a request is granted only if it conflicts with no granted
//     lock and with no lock waiting ahead of it, so a stream of readers
//     cannot starve a writer. FLOCK locks, like POSIX locks everywhere,
//     only look at granted locks.
//   - Locks are named by Handle, never by pointer; handles count up from
//     Config.HandleSeed, are never 0 and are never reused.
//
// # The daemon and the client (lockd.go, client.go)
//
// Server is the lock daemon of one target: it serves LDLM_ENQUEUE (with
// early cancels riding along, glimpse enqueues, and intents handed to the
// target's IntentPolicy), LDLM_CONVERT and LDLM_CANCEL on the target's
// connection-oriented PtlRPC service, owner = the export. It calls the
// core under one mutex and performs the returned Effects after releasing
// it: blocking and completion ASTs go to the holders' callback portal
// (ptlrpc.LDLMCBRequestPortal) through a bounded queue and a few sender
// goroutines; each blocking AST starts a callback timer, and a holder that
// has not cancelled when it fires, or whose callback fails, is evicted
// (ServerConfig.Evict, then ExportGone drops its locks and grants the
// waiters). Glimpse asks the holders of write locks for their view of a
// resource's LVB; for a resource no lock holds it reads the object
// (ServerConfig.LVBInit) and vouches for the answer (lvb_valid), so a
// client needs no getattr besides. GlimpseLock, from a client whose
// target agreed to ConnectGlimpseLock, is granted the PR lock on the
// whole resource when no lock conflicts with it (Lustre's
// ofd_intent_policy), and the client keeps the size until a writer calls
// that lock back; an enqueue gives back the client's own unused read
// locks it conflicts with, after their hooks, with the request. CancelFor and ConvertFor apply the
// early cancels and conversions a target's own requests carry (an MDS
// reint). LockLocal takes a lock for the target itself (an MDT
// locking what a namespace change touches): it waits, in the caller, for
// the holders of conflicting locks to give them back. An intent policy
// may take the lock it grants with IntentLock before it reads what the
// lock protects, and return it granted (Lustre's ELDLM_LOCK_REPLACED); the
// client files a lock granted on another resource than it asked for
// under the resource granted.
//
// Client is the other side for every target of a process: Enqueue matches
// a granted lock that covers the need before asking the server, waits for
// the completion AST of a lock that has to wait, and hands out locks with
// a reference; Release puts an unused lock in its target's LRU (lru_size,
// lru_max_age), from which trimmed locks are given back on a worker that
// first runs the owner's Hooks.Blocking (flush and invalidate), and whose
// handles ride on the next enqueue to the target (early lock cancel) or, if
// none comes within CancelDelay, go in a CANCEL of their own. Ahead of a
// change that would call them back, a caller gives back a file's unused
// locks (CancelUnusedWhole) or some bits of a directory's, converting the
// locks that keep LOOKUP (GiveBackUnused); its own request to the
// target carries them (TakeCancels, TakeConverts), so the change's locks
// call nobody back. A blocking
// AST marks a lock callback-pending: it is given back as soon as its last
// user releases it. LockAhead takes a write extent before the I/O without
// waiting or calling anybody back.
//
// # What it must not touch
//
// The core imports no transport and no other Nacre layer but internal/errs;
// the daemon and the client add only dataplane/ptlrpc and the wire
// messages in proto/nacre/ldlm/v1. A Namespace is not safe for concurrent
// use: the daemon serializes calls.
package ldlm
