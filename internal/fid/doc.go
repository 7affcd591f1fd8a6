// Package fid owns Lustre's File IDentifier: the 128-bit name of every object
// in the file system (sequence 64 bits, object id 32 bits, version 32 bits),
// its text form as Lustre prints it ("[0x200000400:0x1:0x0]"), its fixed
// 16-byte little-endian binary form (struct lu_fid on the wire, Lustre's
// fid_cpu_to_le), and the reserved sequence ranges that matter to object
// storage targets (from Lustre's lustre_fid.h / lustre_idl.h).
//
// It is a leaf: it imports nothing of Nacre's, does no I/O and holds no state,
// so every function is safe for concurrent use. Parse and UnmarshalBinary take
// bytes from the network; they reject anything that is not exactly a FID and
// never panic.
//
// A FID never changes once minted: servers and clients mint FIDs from
// sequences they were granted (the sequence controller on MDT0 hands them
// out), so two FIDs are the same object if and only if they are equal.
package fid
