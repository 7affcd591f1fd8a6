package lnet

import (
	"net"
	"net/netip"
	"time"

	"github.com/nacrefs/nacre/lnet/wire"
)

// This file is LNet's housekeeping goroutine (Lustre's monitor thread,
// lnet_monitor_thread): one goroutine, owned by LNet and stopped by Close,
// that on each tick
//
//   - checks the OS link of every NI: an NI whose interface is down ranks
//     last in selection and is reported down in our ping info until the
//     link is back;
//   - pings each gateway every Config.RouterCheckInterval (router liveness);
//   - pings each NI and peer NI below full health every
//     Config.RecoveryInterval (health recovery), at most maxRecoveryPings at
//     a time;
//   - drops the peers idle for Config.PeerAge.
//
// Pings are asynchronous GETs; their handlers record the outcome, so the
// goroutine never waits on the network.

// maxRecoveryPings bounds the recovery pings one tick starts.
const maxRecoveryPings = 64

// recovery is the housekeeping goroutine's state.
type recovery struct {
	quit chan struct{}
	done chan struct{}
	// Owned by the goroutine.
	lastSweep time.Time
	lastLinks time.Time
}

func (ln *LNet) startRecovery() {
	ln.rec.quit = make(chan struct{})
	ln.rec.done = make(chan struct{})
	go ln.recoveryLoop()
}

func (ln *LNet) stopRecovery() {
	if ln.rec.quit == nil {
		return
	}
	close(ln.rec.quit)
	<-ln.rec.done
}

func (ln *LNet) tickInterval() time.Duration {
	return max(min(ln.recoveryInterval(), ln.cfg.RouterCheckInterval, ln.sweepInterval()), 10*time.Millisecond)
}

func (ln *LNet) sweepInterval() time.Duration {
	return min(max(ln.cfg.PeerAge/4, 10*time.Millisecond), time.Minute)
}

func (ln *LNet) recoveryLoop() {
	defer close(ln.rec.done)
	t := time.NewTicker(ln.tickInterval())
	defer t.Stop()
	for {
		select {
		case <-ln.rec.quit:
			return
		case now := <-t.C:
			ln.recoveryTick(now)
			t.Reset(ln.tickInterval()) // (the recovery interval may change)
		}
	}
}

// recoveryTick does one round of housekeeping.
func (ln *LNet) recoveryTick(now time.Time) {
	if len(ln.nis()) > 1 && now.Sub(ln.rec.lastLinks) >= ln.recoveryInterval() {
		ln.rec.lastLinks = now
		if ln.checkLinks(osLinks()) {
			ln.niChanged()
		}
	}
	type ping struct {
		nid wire.NID
		o   pingOpts
		fn  pingDone
	}
	var pings []ping
	deadline := now.Add(ln.cfg.RouterPingTimeout)
	ln.net.Lock()
	if ln.net.closed {
		ln.net.Unlock()
		return
	}
	for _, gw := range ln.net.gateways {
		if gw.pinging || now.Before(gw.nextPing) {
			continue
		}
		gw.pinging = true
		gw.nextPing = now.Add(ln.cfg.RouterCheckInterval)
		g := gw
		pings = append(pings, ping{g.nid, pingOpts{deadline: deadline, noBlock: true}, func(info wire.PingInfo, _ time.Duration, err error) {
			ln.gatewayPinged(g, info, err)
		}})
	}
	if ln.healthSensitivity() > 0 {
		for _, n := range ln.nis()[1:] {
			if n.health >= healthMax || n.linkDown || n.recovering || now.Before(n.nextRecovery) {
				continue
			}
			n.nextRecovery = now.Add(ln.recoveryInterval())
			// Ping the healthiest peer NI on the NI's net through it; with
			// no peer to try it against, nothing says it is broken.
			var target *peerNI
			for _, lp := range ln.net.peers {
				if lp.nid.Net == n.nid.Net && (target == nil || lp.health > target.health) {
					target = lp
					if lp.health == healthMax {
						break
					}
				}
			}
			if target == nil {
				n.health = healthMax
				continue
			}
			n.recovering = true
			pn := n
			pings = append(pings, ping{target.nid, pingOpts{deadline: deadline, forceNI: n, exact: true, noBlock: true},
				func(_ wire.PingInfo, _ time.Duration, err error) { ln.niRecovered(pn, err) }})
		}
		for lp := range ln.net.recovery {
			if len(pings) >= maxRecoveryPings {
				break
			}
			if ln.net.peers[lp.nid] != lp || lp.health >= healthMax {
				delete(ln.net.recovery, lp)
				continue
			}
			if lp.recovering || now.Before(lp.nextRecovery) {
				continue
			}
			lp.recovering = true
			lp.nextRecovery = now.Add(ln.recoveryInterval())
			q := lp
			pings = append(pings, ping{lp.nid, pingOpts{deadline: deadline, exact: true, noBlock: true},
				func(_ wire.PingInfo, _ time.Duration, err error) { ln.peerNIRecovered(q, err) }})
		}
	}
	if now.Sub(ln.rec.lastSweep) >= ln.sweepInterval() {
		ln.rec.lastSweep = now
		ln.agePeersLocked(now)
	}
	ln.net.Unlock()
	for _, p := range pings {
		if err := ln.pingAsync(p.nid, p.o, p.fn); err != nil {
			p.fn(wire.PingInfo{}, 0, err)
		}
	}
}

// niRecovered ends a recovery ping of a local NI. Success needs nothing
// more: the REPLY received on the NI raised its health.
func (ln *LNet) niRecovered(n *ni, err error) {
	ln.net.Lock()
	n.recovering = false
	ln.net.Unlock()
	if err != nil {
		ln.log.Debug("NI recovery ping failed", "ni", n.nid, "err", err)
	}
}

// peerNIRecovered ends a recovery ping of a peer NI. A success raised its
// health when the REPLY came in; a failure lowered it when the ping's send
// or transaction failed.
func (ln *LNet) peerNIRecovered(lp *peerNI, err error) {
	ln.net.Lock()
	lp.recovering = false
	h := lp.health
	ln.net.Unlock()
	if err != nil {
		ln.log.Debug("peer NI recovery ping failed", "peer_ni", lp.nid, "health", h, "err", err)
	}
}

// agePeersLocked drops the peers with nothing in flight whose every peer
// NI has been idle for Config.PeerAge (at least the transaction timeout,
// so nothing awaited can still come from them); gateways stay.
func (ln *LNet) agePeersLocked(now time.Time) {
	idle := max(ln.cfg.PeerAge, ln.TransactionTimeout())
	ln.net.sweep++
	gen := ln.net.sweep
	var drop []*peer
	for _, lp := range ln.net.peers {
		p := lp.peer
		if p.sweep == gen {
			continue
		}
		p.sweep = gen
		if lp.nid == wire.LoNID || p.configured {
			continue
		}
		old := true
		for _, q := range p.nis {
			if n := q.sendCount + q.recvCount; n != q.seenCount {
				q.seenCount, q.lastActive = n, now // (every NI's, hence no break)
			}
			if !q.idleLocked() || now.Sub(q.lastActive) < idle || ln.net.gateways[q.nid] != nil {
				old = false
			}
		}
		if old {
			drop = append(drop, p)
		}
	}
	for _, p := range drop {
		ln.dropPeerLocked(p)
	}
	if len(drop) > 0 {
		ln.log.Debug("idle peers dropped", "peers", len(drop), "left", len(ln.net.peers))
	}
}

// osLinks maps every address of the host's interfaces to whether its
// interface is up and running (carrier on); nil if it cannot tell. Tests
// replace it.
var osLinks = func() map[netip.Addr]bool {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	out := map[netip.Addr]bool{}
	for _, ifi := range ifs {
		as, err := ifaceAddrs(&ifi)
		if err != nil {
			continue
		}
		up := ifi.Flags&net.FlagUp != 0 && ifi.Flags&net.FlagRunning != 0
		for _, a := range as {
			out[a] = out[a] || up
		}
	}
	return out
}

// checkLinks updates each NI's link state from links (Lustre's link-state
// handling, ni_fatal_error_on: an NI on a down interface ranks below every
// other in selection until the link is back, and the ping info says it is
// down). It reports whether any changed.
func (ln *LNet) checkLinks(links map[netip.Addr]bool) bool {
	if links == nil {
		return false
	}
	changed := false
	for _, n := range ln.nis()[1:] {
		if !n.nid.Addr.IsValid() {
			continue
		}
		ok, known := links[n.nid.Addr]
		if !known {
			// Not an interface address (127.0.0.2 on lo's 127/8, a test's
			// fake): nothing to watch.
			continue
		}
		ln.net.Lock()
		if n.linkDown == !ok {
			ln.net.Unlock()
			continue
		}
		changed = true
		n.linkDown = !ok
		ln.net.Unlock()
		if ok {
			ln.log.Info("NI link up: recovering", "ni", n.nid)
		} else {
			ln.log.Warn("NI link down", "ni", n.nid)
		}
	}
	return changed
}
