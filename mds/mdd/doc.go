// Package mdd is the namespace of one MDT, after Lustre's MDD layer over an
// OSD: inodes named by FID, directory entries, hard links, symlinks,
// special files, extended attributes and POSIX ACLs, layouts, lazy sizes,
// HSM state, changelogs, the destroy log of OST objects, and the sequence
// controller and FLD of MDT0 — all kept in one Pebble database, with
// POSIX permission checks on every operation. It does no networking: the
// MDT service (PtlRPC handlers, LDLM intents) calls it.
//
// # Operations
//
// Every operation is one Pebble batch, so it happens whole or not at all,
// and takes a Req: the caller's Cred (uid, gid, groups, capabilities,
// umask), its transno and its time. Errors wrap the errno Linux returns
// for the same failure (see Errno). Creates take the FID the client minted
// from its sequence (or mint one), and a regular file's layout as the
// caller allocated it; Unlink, Rmdir and Rename over a file say in a
// Removal whether the last link went, whether the file stays as an orphan
// (it is open: OpenFile/CloseFile count opens in memory), and which destroy
// log record names its objects.
//
// # Keys
//
// One byte of prefix names the record type; FIDs are 16 bytes big-endian
// (sequence 64, object id 32, version 32) so that keys sort by FID;
// counters and indexes are 8 bytes big-endian. Values are little-endian
// records that start with a version byte and decode strictly.
//
//	i FID                     inode: mode, uid, gid, nlink, flags, rdev, size,
//	                          a/m/c/crtime (ns), internal bits (ACL presence;
//	                          since format 2, whether other xattrs were ever
//	                          set), symlink target
//	d parentFID hash64 name   directory entry → child FID, DT_ type; hash64 is
//	                          NameHash(name), the readdir cookie
//	k childFID parentFID name link EA: one empty record per hard link (fid2path,
//	                          "..", rename loop checks)
//	l FID                     layout EA (internal/layout encoding); a directory's
//	                          is its default layout
//	x FID name                extended attribute (POSIX ACLs in Linux's binary
//	                          xattr format under system.posix_acl_access/default)
//	s FID                     LSOM: lazy size, blocks, flags
//	h FID                     HSM flags and archive id
//	o FID                     orphan: unlinked while open, or an O_TMPFILE
//	                          file not linked yet
//	c index                   changelog record
//	u id                      changelog user (cleared index)
//	y id                      destroy log record: FID and layout of a file
//	                          whose objects must be destroyed
//	f seqStart                FLD range: end, target index and type
//	v ostIndex                the last OST object a layout named there
//	                          (lov_objid): raised in the batch of every
//	                          layout with objects, for the orphan cleanup
//	r clientUUID              a client connected to the MDT (last_rcvd's
//	                          client records: recovery waits for these)
//	p len clientUUID xid      the reply to a client's change, for its resend
//	                          after a restart (last_rcvd's reply data)
//	m name                    format, transno, inode count, next changelog
//	                          index and user id, next destroy id, sequence
//	                          controller and server state, whether the
//	                          client records are complete (mclients)
//
// # Readdir cookies
//
// Entries are ordered by (hash, name) under their parent; a cookie is a
// hash (0 and 1 stand for "." and "..", DirEnd for the end) and a page
// never splits entries of one hash. Insertions and removals elsewhere in
// the directory do not move an entry's key, so every entry present for the
// whole of a readdir is returned exactly once.
//
// # Commit model
//
// Batches are applied without fsync (pebble.NoSync); Sync — explicit, or
// every Config.SyncInterval — makes everything applied so far durable and
// reports the highest transno among it (LastCommitted, Config.OnCommit).
// Each batch records its transno, so after a crash Open reports as
// LastCommitted the transno of the last operation that survived: Pebble
// recovers a prefix of the applied batches, and what it recovers is
// durable. Transnos must increase in apply order: pass Req.AssignTransno
// (called under the store's lock) or number replayed requests in order.
// Sequence grants and changelog user changes are synced before they
// return: a sequence is never granted twice.
//
// # Concurrency
//
// A Store is safe for concurrent use. One RWMutex serializes every
// read-modify-write operation (write lock) and lets multi-key reads
// (Getattr, Lookup, Readdir, Getxattr, ...) run together under the read
// lock: simple and correct first; per-directory locking can come later
// behind the same API.
//
// The records the read path gets most (inodes, entries, LSOM, layouts,
// and their absence) are cached in memory (cache.go): only a tx commit
// writes them, under the write lock, and it puts what it wrote into the
// cache after applying the batch; a read fills the cache only if no commit
// ran since it started.
//
// # What it must not touch
//
// No networking, no LDLM, no per-client reply data (the PtlRPC layer
// keeps last replies in memory), no OST object allocation (the caller
// allocates objects and passes the layout, or takes them from its pools
// in Spec.Alloc, under the store's lock, in apply order). It imports Pebble,
// internal/errs, internal/fid and internal/layout.
package mdd
