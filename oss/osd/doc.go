// Package osd declares the object storage device interface that the OFD (the
// object service of an OST, oss/ofd) keeps every byte of file data behind, as
// Lustre's OFD sits on dt_device/dt_object (lustre/include/dt_object.h) over
// osd-ldiskfs or osd-zfs.
//
// It owns three things and nothing else: the Device and Tx interfaces with the
// attribute and statfs types they carry; the error vocabulary callers branch
// on (ErrExist, ErrNotExist, ErrNoSpace, ...) and its errno mapping for the
// wire; and a registry of backends by name, as database/sql keeps drivers.
// Backends live in their own packages (oss/osdfile is "file") and register in
// init; wiring opens them by name. A conformance suite that every backend
// runs lives in oss/osd/osdtest.
//
// # Model
//
// A device stores objects named by FID. An object is a sparse byte array of up
// to MaxObjectSize bytes plus a small fixed set of attributes (Attr). Every
// change goes through a transaction: Begin, any number of steps (Create,
// Destroy, SetAttr, WriteAt, WriteRecord, Punch), then Commit or Abort.
// Commit applies all steps or none, and makes them visible together; it
// returns before they are durable, as Lustre replies before commit. Each
// transaction may carry the PtlRPC transno of the request it serves
// (SetTransno); LastCommitted reports how far transnos are durable, and Sync
// forces everything committed so far to stable storage.
//
// Reads (GetAttr, ReadAt) see every committed transaction, durable or not.
//
// Bulk data moves straight between the caller's buffers and the backing store
// (WriteAt takes a vector of buffers, ReadAt fills one) without an
// intermediate copy; the caller's buffers are typically the PtlRPC bulk
// pages.
package osd
