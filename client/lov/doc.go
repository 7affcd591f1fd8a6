// Package lov is the client's file data layer (Lustre's LOV): a File is a
// file's bytes as its layout (internal/layout: plain RAID-0 or composite
// PFL) spreads them over OST objects. Every call is split by the layout's
// offset math into per-object pieces that go to the objects' OSCs
// (client/osc), all objects at once — one goroutine per object touched, so
// at most the stripe count of each component — and the results are put
// back together: reads and writes at any offset, appends, truncates, the
// size (every object's size, glimpsed unless the client's locks settle it,
// combined by layout.FileSize), flush and sync.
//
// Holes read as zeros, as do components not instantiated yet; writing to
// those fails with an error wrapping layout.ErrUninstantiated, for the
// caller to have the MDS instantiate them (a layout intent) and open the
// new layout.
//
// A file can hold bytes only below MaxBytes, the first file offset its
// layout maps to an object offset at or past osc.MaxObjectSize
// (layout.MaxFileSize). As Linux's generic_write_checks, a write or append
// that crosses it is cut short there before it is split (a later stripe's
// object may still have room for bytes past it, which must not be
// written), and one that starts there fails with EFBIG.
//
// # Locks
//
// As Lustre's cl_io does, every call first takes the extent locks it needs
// on all the objects it touches — PR on each object's part of a read, PW on
// each object's part of a write, PW on [new object size, EOF] of every
// object a truncate cuts, PW on the tail of every object for an append —
// always in layout order (component, then stripe), so that two clients
// (or two threads) taking several never deadlock; then it does the I/O of
// every object at once under those locks, and releases them. So a read
// sees all of a write or none of it, and decides the file size under its
// locks (never zeros where another client's truncate cut), and a truncate
// cuts every stripe while holding them all. Appends (O_APPEND) write at
// the size their tail locks make exact (see File.Append).
//
// # What it must not touch
//
// It keeps no cache, and no lock beyond a call: coherence, caching, grants and
// RPCs are the OSCs'. It does not talk to the MDS: the layout comes from
// the caller (llite, through the MDC), as do the OSCs (Targets, from the
// client's configuration).
package lov
