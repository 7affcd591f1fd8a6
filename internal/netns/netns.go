// Package netns builds small labs of hosts for multi-node tests: Linux
// network namespaces joined by veth links, with real processes started
// inside them. It owns the namespaces and links it creates and removes them
// when the test ends; it never touches the host's own interfaces.
//
// It needs root and iproute2 (`ip`). Every lab's names carry the process id
// so parallel test binaries do not collide.
package netns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

var seq atomic.Int64

// Lab is a set of namespaces and links owned by one test.
type Lab struct {
	t      testing.TB
	id     string
	mu     sync.Mutex
	hosts  []*Host
	nlinks int
}

// Host is one network namespace.
type Host struct {
	lab  *Lab
	Name string // the test's name for it
	NS   string // the namespace's name
}

// Link is a veth pair between two hosts.
type Link struct {
	A, B         *Host
	DevA, DevB   string
	AddrA, AddrB string // without prefix length
}

// Available reports whether labs can be built here, and why not.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("netns: network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("netns: iproute2 'ip' not found: %w", err)
	}
	return nil
}

// New starts an empty lab; it fails the test if labs can't be built here.
func New(t testing.TB) *Lab {
	t.Helper()
	if err := Available(); err != nil {
		t.Fatal(err)
	}
	l := &Lab{t: t, id: fmt.Sprintf("%d-%d", os.Getpid(), seq.Add(1))}
	t.Cleanup(l.destroy)
	return l
}

func (l *Lab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// Host adds a namespace with its loopback up.
func (l *Lab) Host(name string) *Host {
	l.t.Helper()
	h := &Host{lab: l, Name: name, NS: fmt.Sprintf("nacre-%s-%s", l.id, name)}
	l.ip("netns", "add", h.NS)
	l.mu.Lock()
	l.hosts = append(l.hosts, h)
	l.mu.Unlock()
	l.ip("-n", h.NS, "link", "set", "lo", "up")
	return h
}

// Link joins a and b with a veth pair; addrA and addrB are CIDRs such as
// 10.254.1.1/24.
func (l *Lab) Link(a *Host, addrA string, b *Host, addrB string) *Link {
	l.t.Helper()
	l.mu.Lock()
	l.nlinks++
	n := l.nlinks
	l.mu.Unlock()
	// Interface names are at most 15 bytes: keep them short and unique.
	base := fmt.Sprintf("nv%x%d", os.Getpid()%0xffff, n)
	lk := &Link{A: a, B: b, DevA: base + "a", DevB: base + "b"}
	l.ip("link", "add", lk.DevA, "netns", a.NS, "type", "veth", "peer", "name", lk.DevB, "netns", b.NS)
	l.ip("-n", a.NS, "addr", "add", addrA, "dev", lk.DevA)
	l.ip("-n", b.NS, "addr", "add", addrB, "dev", lk.DevB)
	l.ip("-n", a.NS, "link", "set", lk.DevA, "up")
	l.ip("-n", b.NS, "link", "set", lk.DevB, "up")
	lk.AddrA, _, _ = strings.Cut(addrA, "/")
	lk.AddrB, _, _ = strings.Cut(addrB, "/")
	return lk
}

// SetUp brings both ends of the link up or down (a cable pulled or plugged).
func (lk *Link) SetUp(up bool) {
	state := "down"
	if up {
		state = "up"
	}
	lk.A.lab.ip("-n", lk.A.NS, "link", "set", lk.DevA, state)
	lk.B.lab.ip("-n", lk.B.NS, "link", "set", lk.DevB, state)
}

// Route adds a route inside h: dst CIDR via a gateway address.
func (h *Host) Route(dst, via string) { h.lab.ip("-n", h.NS, "route", "add", dst, "via", via) }

// Command prepares a process to run inside the namespace.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

func (l *Lab) destroy() {
	l.mu.Lock()
	hosts := l.hosts
	l.hosts = nil
	l.mu.Unlock()
	// Deleting a namespace deletes the veth ends inside it.
	for _, h := range hosts {
		if out, err := exec.Command("ip", "netns", "del", h.NS).CombinedOutput(); err != nil {
			l.t.Logf("netns: delete %s: %v: %s", h.NS, err, out)
		}
	}
}
