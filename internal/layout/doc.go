// Package layout is the file layout of Nacre, after Lustre's LOV EA: how a
// file's bytes are spread over OST objects, the binary form the MDS stores
// and sends to clients, and the math that the MDS (truncate, LSOM) and the
// client's LOV (I/O, glimpse) both need.
//
// # What it owns
//
// A Layout is plain (one RAID-0 striping over the whole file) or composite
// (a progressive file layout: components with extents [Start, End) in file
// offsets that tile the file from 0, the last possibly to EOF, each with its
// own striping). A striping (RAID0) has a stripe count (AllStripes = -1 for
// every OST), a stripe size (a multiple of 64 KiB, 1 MiB by default), a
// starting OST (AnyOffset = -1), an optional pool, and once instantiated one
// Object (OST index and object FID) per stripe. Gen is the layout
// generation.
//
// The math follows Lustre's lov_offset.c exactly, including its choice that
// a component's stripes are laid out as if the component began at file
// offset 0 (objects of later components are sparse below their start):
//
//   - Map splits an I/O range into per-object chunks in file order.
//   - StripeFileSize and FileSize turn object sizes into the file size
//     (lov_stripe_size, lov_merge_lvb_kms): for glimpses and LSOM.
//   - Truncate and StripeObjectSize give the object sizes for a truncate
//     (lov_size_to_stripe).
//   - MaxBytes and MaxFileSize give the first file offset a component or
//     a layout cannot store with objects of a given largest size
//     (lov_tgt_maxbytes times the stripe count, lsm_maxbytes), where a
//     write is cut short.
//
// Marshal and Unmarshal are the versioned, little-endian encoding (see
// codec.go for the byte layout). The decoder is strict and canonical: it
// takes bytes from the network and refuses anything Marshal would not have
// written.
//
// # What it must not touch
//
// The package is pure code: no I/O, no state, no allocation policy (which
// OSTs a file gets is the MDS's choice). It imports only internal/errs and
// internal/fid, so both the MDS and the client may use it. Every function
// is safe for concurrent use; a Layout is a value whose methods never
// modify it (Clone gives a copy that may be changed independently).
package layout
