// Package osdfile is osd-file, the first OSD backend: it keeps an OST's
// objects as files in a directory on a local file system (ext4, xfs, tmpfs),
// in Lustre's ldiskfs O/ layout, with a write-ahead journal of its own that
// makes every transaction atomic across a crash. It registers itself with
// package osd as "file"; Format and Open are the direct, tunable way in.
//
// It owns the target directory and nothing outside it. It must not be
// shared: Open takes an exclusive flock on the journal, and a second Open, in
// this or another process, fails with osd.ErrBusy.
//
// # On disk
//
//	<dir>/nacre-osd.json            identity: magic, version, label, journal size, xattr name
//	<dir>/journal                   preallocated write-ahead journal (see journal.go)
//	<dir>/O/<seq>/d<oid%32>/<oid>   one file per object: seq and oid in lower-case hex
//	                                without 0x, ".<ver>" appended when the version is not 0
//
// An object's bytes are its file's bytes: reads and writes use preadv and
// pwritev straight between the file and the caller's buffers, holes stay
// holes, Punch is fallocate(PUNCH_HOLE|KEEP_SIZE). With
// Config.DirectWriteMin set (it is 0 by default), bulk writes of at least
// that many bytes write their block-aligned middle with O_DIRECT, around the
// page cache (see writeData); with Config.DirectReadMin set (0 by default),
// bulk reads of at least that many bytes of a range the page cache holds
// none of read with O_DIRECT too (see readData). Its attributes live in one
// extended attribute on the file, user.nacre.lma (trusted.nacre.lma where the
// store does not take user xattrs; Format picks and records which), 108
// bytes, little-endian, checksummed:
//
//	0   u32 magic "NLMA"       4  u16 version 1    6  u16 flags 0
//	8   16  the object's own FID (a file moved to the wrong path is caught)
//	24  u64 LSN of the last journal record applied to this file
//	32  72  size, mtime, atime, ctime (i64 ns; MinInt64 for the zero time),
//	        mode, uid, gid, stripe index, layout version, valid mask, parent FID
//	104 u32 crc32c of bytes 0..103
//
// An object that was only created has no file yet (a lazy object, see
// lazy.go): it lives in its Create record and in memory, reads as zeros up
// to its size, and gets its file from the first Tx that does anything else
// to it, or from the checkpoint that drops its record; a destroy before
// either touches no file at all. Precreated objects of files that stay
// empty or are unlinked soon, as most of an mdtest's are, never cost the
// store a create, a directory fsync or an unlink.
//
// The attribute size, not the file's length, is the object's size. A file
// without the attribute is not an object: it is what a creation that never
// committed leaves, and it is reused by the next Create of its FID. Blocks
// comes from the file (st_blocks). On ext4, format the store with 512-byte
// inodes (mkfs.ext4 -I 512, as Lustre does for OSTs) so the attribute fits in
// the inode.
//
// # Transactions and crashes
//
// Commit runs in the caller's goroutine. It locks the Tx's objects in FID
// order (shared for objects it only bulk-writes, so writers of different
// ranges of one object go in parallel; exclusive otherwise), checks every
// step against the objects' state, then does the eager part: creates new
// files and writes bulk data straight into them (ordered mode, as ext4
// data=ordered: data before the metadata that exposes it). Then, at the
// commit point, it encodes one journal record for the whole Tx — creates,
// destroys, truncates, punches, journaled writes (WriteRecord), and the final
// attributes of every object — assigns its LSN, changes the in-memory
// objects, which makes the Tx visible, and queues the record. Commit returns
// without waiting for the disk, as Lustre replies before commit.
//
// One committer goroutine takes the queue in batches (group commit): it
// fsyncs the files the batch bulk-wrote or created and the directories that
// got entries (so the data is durable before the record that exposes it),
// writes the batch's records into the journal with one pwritev, fdatasyncs
// it, and only then applies the records to the files: truncates, punches,
// journaled writes, unlinks, and the lma attributes. Changes that alter
// existing bytes or remove files are never applied before their record is
// durable, so a crash can lose a Tx but never half-apply one. Until a change
// is applied it is pending on its object: reads lay it over the file, and a
// later bulk write or create of the object waits for it (about one group
// commit). When a batch is applied, waiters of Sync are told and
// LastCommitted advances.
//
// The journal is a fixed file, allocated at Format, so committing never needs
// space from a full store. When it fills, the committer checkpoints: syncfs
// makes every applied change durable, then a new generation starts at the
// beginning of the record area, its header written into the other of two
// header slots. Open and Close checkpoint too.
//
// A checkpoint first gives their files to the lazy objects whose create is
// durable, attributes included, since their records go with it.
//
// At Open, the records of the current generation are replayed in order,
// stopping at the first that does not check out (a torn write). Replay is
// idempotent: each file's lma says which record last reached it, and a step
// is redone only on a file that has not seen its record. Steps on a FID before
// its last Destroy in the journal are skipped (the file at the path may be a
// newer object), as is that Destroy when a Create of the FID follows it. Then
// objects are loaded lazily; loading cuts off bytes past the committed size
// (a bulk write whose Tx never committed).
//
// A failed Tx undoes its eager part: files it created are removed, bytes it
// wrote past the old size are punched out. Bytes it overwrote inside the old
// size keep the new data, as with ext4 data=ordered. An I/O error the device
// cannot undo (a failed fsync, journal write or apply) turns it read-only
// (osd.ErrReadOnly) until it is restarted, when replay repairs the files.
//
// # Transnos
//
// SetTransno registers a Tx's transno as pending until its record is durable
// or it aborts. LastCommitted is the highest durable transno below every
// pending one, so a slow Tx with a lower transno holds it back even when later
// ones are durable, and each record carries that value as of its own
// durability, so that it survives a restart.
//
// # Concurrency
//
// Every method of Device and every Tx method follows osd's rules; a Device is
// safe for any number of goroutines. Cached objects are bounded by
// Config.MaxCachedObjects (each holds a file descriptor while idle).
package osdfile
