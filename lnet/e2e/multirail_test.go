package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// TestMultiRailLoopback: two NIs per node on one net. The first send to B
// discovers B's second NID; from then on sends spread over both of A's NIs
// and both of B's, each pair a socklnd connection of its own.
func TestMultiRailLoopback(t *testing.T) {
	port := freePort(t, "127.0.3.1", "127.0.3.2", "127.0.4.1", "127.0.4.2")
	a := start(t, "A", "tcp(127.0.3.1,127.0.3.2)", port, nil)
	b := start(t, "B", "tcp(127.0.4.1,127.0.4.2)", port, nil)
	const size, n = 4096, 200
	s := attachSink(t, b, 5, n, size, true)
	target := proc("127.0.4.1@tcp")
	deadline := time.Now().Add(30 * time.Second)

	if f := putRetry(t, a, target, 5, 0, size, deadline); f != 0 {
		t.Fatalf("first PUT failed %d times", f)
	}
	waitFor(t, "B discovered", 5*time.Second, func() bool {
		ps := a.Peers()
		return len(ps) == 1 && ps[0].MultiRail && len(ps[0].NIs) == 2
	})
	if p := a.Peers()[0]; p.Primary != nid("127.0.4.1@tcp") || p.NIs[1].NID != nid("127.0.4.2@tcp") {
		t.Fatalf("peer %+v", p)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := 1; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			putRetry(t, a, target, 5, uint64(i), size, deadline)
		}()
	}
	wg.Wait()
	// An ACK leaves once the data is in place, maybe before B's handler
	// has seen the last events.
	waitFor(t, "B's handler", 10*time.Second, func() bool { miss, _, _ := s.missing(n); return len(miss) == 0 })
	if miss, _, bad := s.missing(n); len(miss) > 0 || len(bad) > 0 {
		t.Fatalf("missing %v, bad %v", miss, bad)
	}
	for _, x := range []string{"127.0.3.1@tcp", "127.0.3.2@tcp"} {
		if c := niSends(a, nid(x)); c < n/4 {
			t.Errorf("A's NI %s sent %d of %d", x, c, n)
		}
	}
	for _, x := range []string{"127.0.4.1@tcp", "127.0.4.2@tcp"} {
		if c := peerSends(a, nid(x)); c < n/4 {
			t.Errorf("A sent %d of %d to B's %s", c, n, x)
		}
	}
	// B answered each PUT from the NI it came in on, to the NI it came
	// from: its sends to A's NIs are spread as well.
	for _, x := range []string{"127.0.3.1@tcp", "127.0.3.2@tcp"} {
		if c := peerSends(b, nid(x)); c < n/4 {
			t.Errorf("B sent %d ACKs to A's %s", c, x)
		}
	}
	// Discover says the same; lnetctl peer show lists one peer.
	pi, err := a.Discover(context.Background(), nid("127.0.4.2@tcp"))
	if err != nil || pi.Primary != nid("127.0.4.2@tcp") || !pi.MultiRail || len(pi.NIs) != 2 {
		t.Fatalf("Discover: %+v %v", pi, err)
	}
	if ps := a.Peers(); len(ps) != 1 {
		t.Fatalf("peers %+v", ps)
	}
}

// TestDeadPeerNIResent: over socklnd, a peer configured with a second NID
// that nobody answers on. A send that selection puts on that NID is given
// up by socklnd after its share of the transaction timeout (the timeout
// over retry_count+1, Lustre's lnd_timeout) and resent on the live NID,
// so every ping succeeds, none takes the whole timeout, and the dead NID
// loses health.
func TestDeadPeerNIResent(t *testing.T) {
	port := freePort(t, "127.0.5.1", "127.0.5.2")
	const timeout = 3 * time.Second
	a := start(t, "a", "tcp(127.0.5.1)", port, func(c *lnet.Config) {
		c.TransactionTimeout, c.RetryCount, c.DisableDiscovery = timeout, 2, true
	})
	start(t, "b", "tcp(127.0.5.2)", port, nil)
	live, dead := nid("127.0.5.2@tcp"), nid("127.0.5.99@tcp")
	if err := a.AddPeer(live, []wire.NID{dead}, true); err != nil {
		t.Fatal(err)
	}
	var slow time.Duration
	for i := range 6 {
		t0 := time.Now()
		if _, _, err := a.Ping(context.Background(), live); err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
		slow = max(slow, time.Since(t0))
	}
	if slow < timeout/4 || slow > timeout*2/3 {
		t.Fatalf("slowest ping %v: want about %v, one try on the dead NID", slow, timeout/3)
	}
	for _, p := range a.Peers() {
		for _, n := range p.NIs {
			if n.NID == dead && n.Health >= 1000 {
				t.Fatalf("the dead NID keeps full health: %+v", p)
			}
		}
	}
}
