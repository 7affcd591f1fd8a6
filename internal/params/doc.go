// Package params is the registry of a process's live tunables and
// statistics — Lustre's lprocfs/sysfs tree and obd device list — that
// lctl get_param, set_param, list_param and dl read and change.
//
// Parameters are named as Lustre names them, with dots between
// components:
//
//	osc.nacre-OST0000-osc-ffff8d2a1b3c4d5e.max_rpcs_in_flight
//	ldlm.namespaces.nacre-OST0000-osc-ffff8d2a1b3c4d5e.lru_size
//	llite.nacre-ffff8d2a1b3c4d5e.max_read_ahead_mb
//	ost.OSS.ost_io.nrs_policies
//	obdfilter.nacre-OST0000.stats
//
// A layer does not import this package: it exposes getters and setters,
// and the code that assembles a process (client.Mount, server.StartServer)
// registers them when the layer starts and unregisters them when it
// stops. There is one Registry per process (Default), served to lctl on
// a unix socket (Serve) and read by the admin API: never two copies.
//
// Patterns match component by component with path.Match, as lctl globs
// its parameter paths: "osc.*.max_dirty_mb" matches every OSC's
// max_dirty_mb. A set_param is all or nothing: every parameter matched is
// checked (writable, Validate) before any is changed.
//
// What the package must not do: know any layer, or hold a value itself —
// every Get and Set goes to the layer, so the registry is never stale.
package params
