// Package client is Nacre's file-system library (Lustre's llite without
// the kernel, with LMV, MDC, LOV and OSC under it): Mount reads a file
// system's configuration from the MGS and keeps watching it, starts the
// client's LNet, and connects to the MDT and every OST; the FS it returns
// does every POSIX operation by FID — lookups, attributes, creates and
// opens as intents on lock enqueues, namespace changes, extended
// attributes, directory pages, statfs, and reads and writes of striped
// files through the client's page cache — and POSIX record locks through
// the MDT's lock server.
//
// Nothing here needs FUSE: client/llite mounts an FS in the kernel, and
// the HSM copytool, benchmarks and tools use it directly.
//
// # Lustre's virtual extended attributes
//
// The lustre.* extended attributes are the library's own (XattrLOV and
// the others): a file's layout and a directory's default, which setting
// changes (lfs setstripe), FIDs and paths, the MDT's view of attributes
// and of directory pages, and the targets, their space and the pools. They
// reach what Lustre's lfs asks with ioctls through any mount, the FUSE
// mount included: nacre lfs uses nothing else.
//
// # Caching and coherence
//
// Attributes and layouts are cached while the IBITS lock their getattr
// intent was granted is held, entries while the lock of the file they lead
// to is; data pages while the OSC's extent locks are. A blocking AST drops
// what its lock covered before the lock goes, and Config.Notify hears of
// it, so a cache above this one (the kernel's) drops its copy too: two
// clients see each other's changes as Lustre clients do.
//
// # Errors and servers that are down
//
// Operations wait for a server that does not answer while its import
// reconnects (Lustre's default), up to Config.Timeout, then fail. Errno
// maps every error to the errno a POSIX caller gets.
package client
