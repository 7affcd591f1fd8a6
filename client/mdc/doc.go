// Package mdc is the client of one MDT (Lustre's MDC): a thin, typed
// layer over a ptlrpc.Import to the MDT's service, one method per
// operation of the protocol in proto/nacre/mds/v1 (see mds/mdt for what
// the MDT does with each), and intents through an ldlm.Client.
//
// Every method takes the caller's credential (Cred), which the MDT checks
// permissions with, and returns errors that wrap the errno the MDT sent,
// so errors.Is(err, syscall.ENOENT) and the like work; a reply that does
// not decode or makes no sense is ErrBadReply.
//
// New files take their FIDs from a sequence the client owns (NewFID),
// asked for with SEQ_QUERY when the last one is used up, as Lustre clients
// mint FIDs; the MDT checks the sequence was granted to a client of its.
//
// Readdir walks a directory page by page with 64-bit cookies (ReadPage
// gives the pages themselves): every entry present for the whole walk is
// returned exactly once, whatever changes in the directory meanwhile.
//
// Enqueue runs an intent (lookup, getattr, open, create) and takes the
// lock the MDT grants with it in one RPC; the lock's hooks are where the
// caller drops what it cached under the lock. The package itself caches
// nothing: attribute and entry caches under locks, LMV (several MDTs) and
// aggregating OST space for lfs df belong to the client library above it.
package mdc
