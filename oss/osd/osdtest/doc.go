// Package osdtest is the conformance suite every OSD backend runs, as go-fuse's
// posixtest and juicefs's testMeta are for theirs: Run takes a Harness that
// makes fresh devices and checks everything package osd promises (objects,
// attributes, data byte for byte against a model, sparse files, punch and
// truncate, transactions, transnos, statfs, bad input, ENOSPC, concurrency,
// and durability across a reopen).
//
// It imports package testing and is meant for _test.go files only. Each test
// gets its own device, so the suite runs its subtests in parallel only where
// a test says so.
package osdtest
