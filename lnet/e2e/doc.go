// Package e2e holds end-to-end tests of LNet over its TCP driver (socklnd):
// routing through one and two routers, router back-pressure, multi-rail
// with discovery, in one process on loopback addresses, and the same
// failures with real processes in network namespaces (internal/netns):
// a router killed mid-stream, a link taken down mid-stream.
//
// It has no code of its own; everything is in its tests. The network
// namespace tests need root and iproute2 and are skipped without them.
package e2e
