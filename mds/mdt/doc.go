// Package mdt is the metadata target over PtlRPC (Lustre's MDT, with the
// LOD and OSP layers it drives): a connection-oriented service on the MDS
// request portal (MDS_CONNECT) serving the MDTs of a process, each over
// its namespace store (mds/mdd), with a lock server whose intent policy
// runs lookups, getattrs, opens and creates, and proxies to the OSTs that
// hold the objects of its files. client/mdc is the other side of the
// protocol; bodies are proto/nacre/mds/v1.
//
// # Requests
//
// Every request carries the caller's credential (uid, gid, groups,
// capabilities, umask) as Lustre's mdt_body does; the store checks POSIX
// permissions with it. FIDs, names (bytes: any but '/' and NUL), layouts
// (internal/layout encoding) and readdir cookies travel as the protocol
// says; a FID that cannot be this MDT's is refused before the store sees
// it (an OST object: EINVAL; another MDT's: EREMOTE; a sequence nobody was
// granted: ENOENT).
//
//	MDS_GETATTR       attributes by FID; the layout (OBD_MD_FLEASIZE) and
//	                  a symlink's target (readlink) on request
//	MDS_GETATTR_NAME  lookup of a name in a directory
//	MDS_REINT         create (file, directory, device, FIFO, socket,
//	                  symlink), unlink, rmdir, rename (RENAME_NOREPLACE,
//	                  RENAME_EXCHANGE, over an existing target, loops
//	                  EINVAL), link, setattr, setxattr/removexattr, open
//	                  (REINT_OPEN), setstripe
//	MDS_CLOSE         ends an open handle, with the lazy size (LSOM)
//	MDS_READPAGE      entries from a cookie in hash order, ≤ 63 KiB a page
//	MDS_STATFS        the MDT's inode counts (OST space is the client's sum)
//	MDS_GETXATTR      a value, or the list of names
//	MDS_GET_ROOT      the root FID
//	MDS_SYNC          commit now
//	MDS_GET_INFO      fid2path (needs CAP_DAC_READ_SEARCH)
//	SEQ_QUERY         a FID sequence for a client to mint new FIDs from
//	FLD_QUERY         which target holds a sequence
//	LDLM_ENQUEUE      with an IntentRequest: IT_LOOKUP, IT_GETATTR,
//	                  IT_OPEN (IT_CREAT, O_CREAT), IT_CREAT
//
// REINT, CLOSE and LDLM_ENQUEUE are Modifying: their replies carry a
// transno, and a resent request is answered from the kept reply instead
// of running twice (an O_EXCL open whose reply was lost stays one open).
//
// # Locks
//
// A namespace change takes IBITS locks before it changes anything (see
// lock.go): CW UPDATE on each directory whose entries change (Lustre's
// PDO lock), EX on each name it touches, and EX on each object whose name
// goes or attributes change, so that clients caching what those bits
// protect get blocking ASTs first, and no client is granted a lock on a
// half-made change. The lock server's LockLocal (ldlm) takes them with the
// target as owner. An intent takes the lock it grants before it reads what
// the lock protects (ldlm's IntentLock): a PR lock on the file found with
// the bits its operation allows caching under, or, for a name that does
// not exist, a PR UPDATE lock on the directory (the negative entry), which
// the next create there calls back.
//
// # Objects
//
// A new regular file's layout is the one the client sent (a template), or
// its directory's default layout, or the root's, or Config.DefaultStripe
// (stripe count 1, 1 MiB); new directories inherit their parent's default.
// The allocator (lod.go) takes the first component's OSTs from the stripe
// offset on, or round robin while the OSTs' free space is balanced and
// weighted by free space when it is not (17%, Lustre's qos_threshold_rr),
// within the layout's pool, preferring OSTs whose pool holds objects. Each
// OST's proxy (osp.go) keeps a pool of objects precreated by OST_CREATE in
// the background, refilled when it falls to half of its aim, the aim
// doubling (up to PrecreateMax) when a create finds it empty: a create
// waits for an OST only then. Objects are reserved before the store's
// change and taken inside it, in apply order (mdd.Spec.Alloc), so the
// store's last object per OST (mdd.LastObjects, Lustre's lov_objid) is
// exact; at start and whenever an OST has lost the MDT's export, the
// orphan cleanup (OST_CREATE with DeleteOrphans, Lustre's OBD_FL_DELORPHAN)
// destroys what was precreated after it and recreates what the OST lost
// before it. OST object sequences come from the sequence controller
// (mdd.AllocSuperSeq), one per OST, recorded before use.
//
// Unlink, rmdir, rename over a file and the last close of an orphan leave
// destroy log records (written by the store in the removal's batch); a
// worker (destroy.go) destroys their objects with OST_DESTROY once the
// removal is committed, makes that durable with OST_SYNC, and only then
// drops the records. The log survives restarts. Files open when the MDT
// stopped stay as orphans through the recovery window, in which clients
// replay their opens; those nobody reopened are destroyed when it ends.
// Until then the MDT's open counts may miss opens not yet replayed, so an
// unlink keeps even a file nobody has open (yet) as an orphan, and swaps
// of layouts (but replayed ones) and HSM releases are refused (EBUSY).
//
// # Commit
//
// The store applies changes without syncing; the committer syncs it every
// Config.SyncInterval while changes wait, or at once when many do, and
// reports to the PtlRPC target as committed every transno given out
// before the sync (each change the store applied under its lock before
// the sync read it, or a change that needs no storage: an open, a lock).
// A restarted target numbers on from the store's last transno.
//
// # Limits
//
// MDT0 only (no DNE). Recovery: the store records the clients connected
// (mdd.Store.AddClient, Lustre's last_rcvd client records); after a
// restart, the window (Config.RecoveryWindow) ends as soon as each of
// them is back and has replayed its locks, opens and uncommitted changes
// (its ping with MSG_REQ_REPLAY_DONE|MSG_LOCK_REPLAY_DONE), and those not
// back when it runs out are forgotten. Unlike Lustre, requests that are
// not replays are served meanwhile (a new file may take a name an
// uncommitted create will replay). The OST list and pools
// come from SetOSTs and SetPools, which the server calls from the MGS's
// watch.
//
// A write into a component of a composite (PFL) layout that has no
// objects yet has the client send REINT with a layout intent (Lustre's
// IT_LAYOUT write intent): the MDT instantiates the components covering
// the range under an EX LAYOUT lock, which calls back the layouts other
// clients cache.
package mdt
