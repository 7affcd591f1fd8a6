// Package llite mounts a Nacre file system in the kernel through FUSE
// (Lustre's llite, with the kernel's VFS on the other side of /dev/fuse):
// every FUSE request becomes one call of the file-system library
// (client.FS) by FID, under the caller's credentials.
//
//	srv, err := llite.Mount(ctx, "/mnt/nacre", cfg, llite.Options{AllowOther: true})
//	...
//	srv.Wait() // until umount /mnt/nacre (or srv.Unmount)
//
// # Nodes and inode numbers
//
// A node holds nothing but its FID: lookups, opens and namespace changes
// all name files by FID, never by path. Node IDs are the inode numbers
// (go-fuse's ExternalNodeID), which are the FIDs flattened: seq<<24|oid
// for the FIDs clients meet (Ver 0, seq below 2^39, oid below 2^24; the
// mapping is one to one there), a 63-bit hash with the top bit set for
// anything else. So the kernel's ID of a file follows from its FID, and a
// lock callback can name the kernel's inode without a table of live nodes
// (the root alone is node 1).
//
// # Credentials and permissions
//
// Each request runs as its caller: uid and gid from the FUSE header,
// supplementary groups and effective capabilities from /proc/PID/status
// (cached for a second), so the MDT checks permissions itself — mode bits
// and POSIX ACLs — and the mount does not use default_permissions. The
// umask goes to the MDT with the mode of a new file (FUSE_DONT_MASK), which
// applies it unless the directory has a default ACL, as Linux does. Access
// (access(2), chdir) checks mode bits and the access ACL here, and so
// does opendir: the MDT's READDIR checks no permission (Lustre's does
// not), so that a directory handle reads on whoever holds it, as Linux's
// do. Without
// default_permissions the kernel checks no search permission on the way
// through directories whose entries it has cached: entries of a directory
// that not everyone may search (not a+x) are never cached, so that each
// walk through it comes to the library, which checks the caller (a chmod
// of a directory drops the kernel's entries in it). Search denied by an
// ACL alone to a named user of an a+x directory is not caught that way.
//
// # Kernel caches and coherence
//
// Entries and the attributes of directories, symlinks and devices that
// the library caches under MDT locks are given to the kernel for an hour,
// and so are names a lookup found missing (negative entries), which the
// library knows missing while it holds the directory's lock, in
// directories everyone may search: a shell's PATH search or a compiler's
// include search asks the MDT once per missing name, not once per look.
// A name this client makes replaces its negative entry in the kernel;
// one another client makes calls the lock back, which invalidates it;
// regular files' attributes are not cached by the kernel (their size is
// the OSTs', which the library settles under extent locks), nor is
// anything a namespace change or setattr returns (no lock covers it, so
// the next access looks it up again). The kernel's page cache is kept
// across opens (FOPEN_KEEP_CACHE, with explicit invalidation): every page
// in it was read or written under an extent lock of the library, and when
// such a lock goes the library calls Config.Notify, which invalidates the
// kernel's copy. Notifications never run inside the callback: a bounded
// queue feeds worker goroutines (one for attributes and entries, which
// may wait for a directory's lock in the kernel; two for data), and a
// queue that overflows turns into "invalidate everything known" once it
// has drained. Data invalidations are waited for, up to half a second,
// unless a FUSE read or write of the same file is in progress here (the
// kernel holds that request's page locks, and the request may be what
// called the lock back): so a write on one client is seen by a read on
// another as soon as the write returns. Files opened O_APPEND use direct
// I/O: the kernel's idea of the end of the file may be stale, and the
// library appends at the real end. The kernel's writeback cache
// (FUSE_WRITEBACK_CACHE) stays off: with it the kernel keeps a regular
// file's size and times from its own writes and takes them from the file
// system only when it first loads the inode (fuse_get_cache_mask), so
// another client's truncate or extension of an open file would not show
// here, and nothing in the FUSE protocol can shrink the kernel's size. Writes are cached instead by the
// library (the OSC's dirty pages, up to max_dirty_mb, written back in full
// RPCs under extent locks), where a lock callback can reach them.
//
// The kernel caps a FUSE mount's readahead at 128 KiB whatever the file
// system asks at INIT; the mount raises it through sysfs to
// max_read_ahead_mb, at most 4 MiB (see readahead.go), so that a
// sequential reader does not wait for a round trip every 128 KiB.
//
// The kernel reads security.capability before every write; a file found
// without one, or just made by the mount, is taken to have none for a
// second instead of asking the MDT each time.
//
// The kernel writes a shared mapping's dirty pages back through any open
// of the file that may write, an O_APPEND one included: such a WRITE
// (FUSE_WRITE_CACHE) goes where the pages are, not to the end of the
// file. The kernel does not know the append-only flag and lets an
// O_APPEND open of such a file be mapped shared: the write-back is
// refused (EPERM at msync) and the kernel's pages of the file dropped.
//
// # What is not supported
//
// fallocate(2) takes mode 0, FALLOC_FL_KEEP_SIZE and
// FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE, as Lustre; the other modes
// (ZERO_RANGE, COLLAPSE_RANGE, INSERT_RANGE, UNSHARE_RANGE) are
// EOPNOTSUPP. renameat2's RENAME_WHITEOUT is EINVAL. SEEK_DATA and SEEK_HOLE see the whole file
// as data, with its one hole at the end (ENXIO at or past the end), as
// Linux does for a file system that does not track holes (st_blocks,
// though, is what the objects occupy on the OSTs, summed, as Lustre's:
// holes count nothing, and dirty data only once written). statx gives no birth
// time. Times are kept in ns since the epoch in an int64: a time set
// outside 1677-2262 is clamped to that range.
//
// # Layouts (lfs)
//
// The library's lustre.* extended attributes pass through (see
// client.XattrLOV): lfs reads and sets layouts, FIDs and the rest with
// getxattr and setxattr, without ioctls. A create with Lustre's
// O_LOV_DELAY_CREATE (O_NOCTTY|FASYNC; the kernel keeps only FASYNC for
// FUSE) makes the file without objects, for lfs setstripe to give it its
// layout by setting lustre.lov, as Lustre's lfs does.
//
// # Locks
//
// fcntl record locks and flock (as whole-file locks, which therefore
// conflict with fcntl locks, as in Lustre) go to the MDT's lock server
// with the kernel's lock owner. The kernel does not release a
// process's POSIX locks at close for a file system with remote locks: it
// sends the owner with FLUSH (and the flock owner with RELEASE), which a
// thin wrapper of go-fuse's bridge turns into an unlock.
//
// # Errors
//
// Every error goes through client.Errno; unexpected EIOs are logged.
// The library's timeout bounds every operation. An interrupt (a signal to
// the caller, or the mount going away) ends an operation with EINTR only
// if it is still running two seconds later — Go programs are signalled
// all the time and few of them retry EINTR, but one waiting for a server
// that is down must end when its caller gives up or the mount goes —
// except a blocking lock wait (F_SETLKW, flock), which it ends at once.
package llite
