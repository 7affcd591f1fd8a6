package socklnd

import (
	"errors"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
)

// TestPeerTableBound: at max_peers a new peer is refused both ways, with a
// log line; peers unused for peer_idle_age go, taking their incarnation
// with them, and make room.
func TestPeerTableBound(t *testing.T) {
	port := testPort(t, "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")
	a := startNode(t, "127.0.0.1", port, map[string]string{"max_peers": "2", "peer_idle_age": "300ms"})
	b := startNode(t, "127.0.0.2", port, nil)
	c := startNode(t, "127.0.0.3", port, nil)
	d := startNode(t, "127.0.0.4", port, map[string]string{"connect_timeout": "500ms"})

	for i, to := range []*node{b, c} {
		a.h.send(t, a.ni, put(a.nid, to.nid, uint64(i), pattern(1, 100)))
		if f := a.h.nextFin(t); f.err != nil {
			t.Fatalf("send to %v: %v", to.nid, f.err)
		}
		to.h.nextRx(t)
	}
	if st := a.ni.Stats(); st.Peers != 2 {
		t.Fatalf("%d peers, want 2", st.Peers)
	}

	// A third peer is refused: a's send fails at once, d's handshake is
	// closed (d's message fails when its connect timeout runs out).
	a.h.send(t, a.ni, put(a.nid, d.nid, 3, pattern(2, 10)))
	if f := a.h.nextFin(t); !errors.Is(f.err, lnet.ErrPeerUnreachable) {
		t.Fatalf("send to a third peer: %v, want ErrPeerUnreachable", f.err)
	}
	a.log.waitLine(t, "peer table full", "peer=127.0.0.4@tcp", "max_peers=2")
	d.h.send(t, d.ni, put(d.nid, a.nid, 4, pattern(3, 10)))
	if f := d.h.nextFin(t); !errors.Is(f.err, lnet.ErrPeerUnreachable) {
		t.Fatalf("d's send to a full a: %v, want ErrPeerUnreachable", f.err)
	}
	if st := a.ni.Stats(); st.Peers != 2 || st.PeersRefused < 2 {
		t.Fatalf("stats %+v: want 2 peers and refusals counted", st)
	}

	// b and c go away: once idle for peer_idle_age they are dropped, and d
	// fits.
	binc := b.inc
	b.stop(t)
	c.stop(t)
	deadline := time.Now().Add(10 * time.Second)
	for a.ni.Stats().Peers != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("idle peers not dropped: %+v", a.ni.Peers())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := a.ni.Stats(); st.PeersReaped != 2 {
		t.Fatalf("stats %+v: want 2 peers reaped", st)
	}
	a.h.send(t, a.ni, put(a.nid, d.nid, 5, pattern(4, 10)))
	if f := a.h.nextFin(t); f.err != nil {
		t.Fatalf("send to d once there is room: %v", f.err)
	}
	d.h.nextRx(t)

	// b comes back with a new incarnation: a forgot the old one, so b is a
	// new peer (PeerUp), not a restarted one.
	for len(a.h.events) > 0 {
		<-a.h.events
	}
	b2 := startNode(t, "127.0.0.2", port, nil)
	if b2.inc == binc {
		t.Fatal("same incarnation")
	}
	a.h.send(t, a.ni, put(a.nid, b2.nid, 6, pattern(5, 10)))
	if f := a.h.nextFin(t); f.err != nil {
		t.Fatalf("send to b's new instance: %v", f.err)
	}
	b2.h.nextRx(t)
	for {
		select {
		case e := <-a.h.events:
			if e.peer == b2.nid && e.ev == lnet.PeerRestarted {
				t.Fatal("a reported b restarted after forgetting it")
			}
			if e.peer == b2.nid && e.ev == lnet.PeerUp {
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no PeerUp for b's new instance")
		}
	}
}
