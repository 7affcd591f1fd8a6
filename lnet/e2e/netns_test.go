package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/netns"
)

// Both tests stream sequence-numbered PUTs, each retried by the sender
// until ACKed, and break something mid-stream: the destination must end
// up with every sequence number. Addresses are 10.254.0.0/16, inside the
// lab's namespaces only.

const (
	streamN    = 3000
	streamW    = 8
	streamSize = 4096
)

// TestNetnsRouterKilled: A (tcp1) reaches B (tcp2) through routers R1 and
// R2, each its own process on both nets; R1 is killed mid-stream, and
// traffic goes on through R2.
//
//	  10.254.21.0/24      10.254.23.0/24
//	A ---------------- R1 --------------- B
//	|                                     |
//	+----------------- R2 ----------------+
//	  10.254.22.0/24      10.254.24.0/24
//
// A has an NI on each of its links, both on tcp1; B likewise on tcp2. The
// routers get kernel routes back to the other subnet of each side, so any
// of a host's NIs can reach either router.
func TestNetnsRouterKilled(t *testing.T) {
	needLab(t)
	start := time.Now()
	lab := netns.New(t)
	a, r1, r2, b := lab.Host("a"), lab.Host("r1"), lab.Host("r2"), lab.Host("b")
	lab.Link(a, "10.254.21.1/24", r1, "10.254.21.2/24")
	lab.Link(a, "10.254.22.1/24", r2, "10.254.22.2/24")
	lab.Link(r1, "10.254.23.1/24", b, "10.254.23.2/24")
	lab.Link(r2, "10.254.24.1/24", b, "10.254.24.2/24")
	r1.Route("10.254.22.0/24", "10.254.21.1")
	r1.Route("10.254.24.0/24", "10.254.23.2")
	r2.Route("10.254.21.0/24", "10.254.22.1")
	r2.Route("10.254.23.0/24", "10.254.24.2")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	nr1 := startNode(t, ctx, r1, nodeConf{Nets: "tcp1(10.254.21.2),tcp2(10.254.23.1)", Routing: true})
	nr2 := startNode(t, ctx, r2, nodeConf{Nets: "tcp1(10.254.22.2),tcp2(10.254.24.1)", Routing: true})
	nb := startNode(t, ctx, b, nodeConf{Nets: "tcp2(10.254.23.2,10.254.24.2)",
		Routes: []string{"tcp1:10.254.23.1@tcp2", "tcp1:10.254.24.1@tcp2"}, SinkN: streamN, SinkSize: streamSize})
	na := startNode(t, ctx, a, nodeConf{Nets: "tcp1(10.254.21.1,10.254.22.1)",
		Routes: []string{"tcp2:10.254.21.2@tcp1", "tcp2:10.254.22.2@tcp1"}})

	var ok map[string]any
	na.call(fmt.Sprintf("stream 10.254.23.2@tcp2 %d %d %d", streamN, streamW, streamSize), &ok)
	na.waitStream("a third of the stream", 20*time.Second, func(s nodeStatus) bool { return s.Acked >= streamN/3 })
	f1, f2 := nr1.status().Routed, nr2.status().Routed
	if f1 == 0 || f2 == 0 {
		t.Fatalf("before the kill R1 forwarded %d, R2 %d: want both used", f1, f2)
	}
	nr1.kill()
	killed := time.Now()
	sa := na.waitStream("the whole stream", 25*time.Second, func(s nodeStatus) bool { return s.Done })
	sb := nb.status()
	if sb.NMissing != 0 || sb.Seen != streamN {
		t.Fatalf("B saw %d of %d sequence numbers; missing %v...", sb.Seen, streamN, sb.Missing)
	}
	if sa.Routes["10.254.21.2@tcp1"] || !sa.Routes["10.254.22.2@tcp1"] {
		t.Fatalf("A's routes after the kill: %v", sa.Routes)
	}
	f2after := nr2.status().Routed
	if f2after-f2 < streamN/2 {
		t.Fatalf("R2 forwarded %d messages after the kill", f2after-f2)
	}
	t.Logf("R1 forwarded %d and R2 %d before the kill; %d PUTs retried; the rest took %v; total %v",
		f1, f2, sa.Fails, time.Since(killed).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// TestNetnsMultiRailLinkDown: A and B are joined by two links, one subnet
// each, with an NI of tcp on each end; A streams to B over both rails, one
// link goes down mid-stream, and traffic moves to the other.
func TestNetnsMultiRailLinkDown(t *testing.T) {
	needLab(t)
	start := time.Now()
	lab := netns.New(t)
	a, b := lab.Host("a"), lab.Host("b")
	l1 := lab.Link(a, "10.254.31.1/24", b, "10.254.31.2/24")
	lab.Link(a, "10.254.32.1/24", b, "10.254.32.2/24")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	nb := startNode(t, ctx, b, nodeConf{Nets: "tcp(10.254.31.2,10.254.32.2)", SinkN: streamN, SinkSize: streamSize})
	na := startNode(t, ctx, a, nodeConf{Nets: "tcp(10.254.31.1,10.254.32.1)"})
	const a1, a2 = "10.254.31.1@tcp", "10.254.32.1@tcp"

	var ok map[string]any
	na.call(fmt.Sprintf("stream 10.254.31.2@tcp %d %d %d", streamN, streamW, streamSize), &ok)
	s1 := na.waitStream("a third of the stream", 20*time.Second, func(s nodeStatus) bool { return s.Acked >= streamN/3 })
	if s1.NIs[a1].Sends < streamN/12 || s1.NIs[a2].Sends < streamN/12 {
		t.Fatalf("A's NI sends before the link went down: %v; want both rails used", s1.NIs)
	}
	if s1.Peers["10.254.31.2@tcp"].Sends == 0 || s1.Peers["10.254.32.2@tcp"].Sends == 0 {
		t.Fatalf("A's sends to B's NIs: %v; want both", s1.Peers)
	}
	l1.SetUp(false)
	down := time.Now()
	s2 := na.waitStream("the whole stream", 25*time.Second, func(s nodeStatus) bool { return s.Done })
	sb := nb.status()
	if sb.NMissing != 0 || sb.Seen != streamN {
		t.Fatalf("B saw %d of %d sequence numbers; missing %v...", sb.Seen, streamN, sb.Missing)
	}
	// What was left of the stream when the link went down: the snapshot
	// that took it down may come well after the first third on a busy
	// machine (it is polled), so "most of the rest" is measured from it.
	left := streamN - int(s1.NIs[a1].Sends+s1.NIs[a2].Sends)
	moved := s2.NIs[a2].Sends - s1.NIs[a2].Sends
	stuck := s2.NIs[a1].Sends - s1.NIs[a1].Sends
	if left < streamN/6 {
		t.Fatalf("the link went down with only %d of %d PUTs left: too late to tell", left, streamN)
	}
	if int(moved) < left*3/4 || stuck > moved/4 {
		t.Fatalf("after the link went down (%d PUTs left) A sent %d on %s and %d on %s", left, moved, a2, stuck, a1)
	}
	if st := s2.NIs[a1].Status; st != "down" {
		t.Fatalf("A's NI on the down link is %q", st)
	}
	t.Logf("before: %v; after the link went down: %d sent on %s, %d on %s, %d PUTs retried, took %v; total %v",
		s1.NIs, moved, a2, stuck, a1, s2.Fails, time.Since(down).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
