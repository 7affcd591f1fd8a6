// Package osc is the client's data path to the OSTs (Lustre's OSC with the
// page cache llite keeps over it): one Client per OST, owning the import
// to it, the objects of that OST the client uses, their pages in the
// client's Cache, the grant the OST gave, and the writeback engine. The
// file layer (client/lov) splits file I/O into object I/O and calls
// Object.ReadAt, WriteAt, Truncate, Size and Sync here.
//
// # Page cache
//
// A Cache holds PageSize pages of every object of every OSC of a client,
// bounded by max_cached_mb. Data moves between the caller's buffers and the
// pages by one copy (the copy an application or FUSE boundary needs), and
// between the pages and the network by bulk RPCs whose buffers are the
// pages themselves (pages come from 256 KiB slabs, so runs of them usually
// make one buffer). Clean pages nobody uses sit on a least-recently-used
// list and are evicted from its head when a new page is needed; dirty
// pages and pages in an RPC are never evicted: a cache full of them makes
// I/O wait for writeback. A page holds either all of its bytes (valid) or
// just the one range written into it, so a partial write needs no read
// first; a read of the rest fills it. Pages past the end of an object
// whose size the client knows exactly are zeros without an RPC.
//
// Pages are cached only under extent locks (ldlm, PR to read and PW to
// write, on the object's resource; a PW lock serves reads too): a read or
// write takes a lock covering its pages (matched from the lock cache
// without an RPC when one is there) and holds it while it copies; a caller
// that must hold locks on several objects at once (the file layer, for
// atomic striped I/O, truncates and appends) takes them with Object.Lock
// and does its I/O through Lock.ReadAt, WriteAt and Truncate. When a
// lock goes (another client's conflicting enqueue calls it back, the lock
// LRU trims it, an eviction), its Hooks.Blocking writes back exactly the
// dirty pages in the lock's extent, waits for the OST to acknowledge them
// and for RPCs filling pages there, and drops every cached page of the
// extent; only then is the lock given back. A lock's glimpse hook reports
// the client's view of the object's size, which dirty pages may put ahead
// of the OST's.
//
// # Size
//
// An object's known minimum size (kms) is the largest size learnt from
// lock grants (the LVB) and local writes, counted only up to the end of the
// locks the client holds, since nobody can cut the object below a held
// lock without calling it back. With a held lock reaching EOF that starts
// within that size, the size is exact; otherwise Size glimpses the OST's
// lock server, which asks the holders of write locks, or, when none
// holds one, grants the glimpse the PR lock on the whole object, which
// the client keeps: the next Size is exact without an RPC.
//
// # Writes, grant and writeback
//
// A write copies into pages that become dirty. Each newly dirty page
// charges PageSize of the grant the OST reserved for the client (read from
// CONNECT and from every write reply; see grant.go for how concurrent
// replies are reconciled) and one page of max_dirty_mb; while neither has
// room the writer asks for writeback and waits for replies to bring grant
// back, and when no RPC is in flight that could, the pages are written at
// once in the writer's context without OBD_BRW_FROM_GRANT: the OST then
// checks its free space and may answer ENOSPC, which the write returns.
//
// The writeback engine (one goroutine per OSC) sends dirty pages as write
// RPCs of up to max_pages_per_rpc pages of one object in object order,
// contiguous ranges merged into one niobuf, at most max_rpcs_in_flight at
// once: as soon as an object has a full RPC of them; anything dirty when
// dirty data, grant or the cache are under pressure or a writer waits; and
// dirty data older than DirtyExpire. Flush and Sync (and a truncate, a
// lock's hook) send what they need themselves within the same RPC slots.
// Sync then sends OST_SYNC and waits until the OST's last_committed covers
// every write the import keeps for replay. A write RPC that fails drops its
// pages (their bytes never reached the OST) and the error is kept for the
// next Sync, as Linux reports writeback errors at fsync.
//
// # Reads
//
// A read copies out cached pages under a PR (or PW) lock; missing pages are
// read in one RPC per window of max_pages_per_rpc pages. Sequential and
// strided patterns (per object, see readahead.go) are read ahead
// asynchronously in RPCs aligned to the RPC size, within the reader's lock
// and the known size, bounded client-wide by max_read_ahead_mb.
//
// # Truncate
//
// Truncate takes PW on [size, EOF], drops the cached pages past the new
// size (dirty ones unsent, their grant given back), cuts the page holding
// it, waits for RPCs on those pages, and sends OST_PUNCH; reads and writes
// of the object wait for it.
//
// # What it must not touch
//
// It talks only to OSTs, through dataplane/ptlrpc and ldlm, with the wire
// bodies of proto/nacre/ost/v1; it knows nothing of files, layouts or the
// MDS (client/lov and llite do). Every goroutine it starts belongs to a
// Client and stops at Close; every queue and table is bounded (pages by
// max_cached_mb, RPCs by max_rpcs_in_flight, objects by what is open,
// cached or locked).
package osc
