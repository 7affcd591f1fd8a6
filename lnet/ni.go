package lnet

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/nacrefs/nacre/lnet/wire"
)

// niTable is the node's NIs. It is never changed once stored: AddNet and
// DelNet store a new one.
type niTable struct {
	nis   []*ni // nis[0] is 0@lo; then in configuration order, NIs added at run time last
	byNID map[wire.NID]*ni
	byNet map[wire.Net][]*ni // the NIs of each net but lo, in the order of nis
	nets  []NetConfig        // what Config reports as Networks
}

func newNITable(nis []*ni, nets []NetConfig) *niTable {
	t := &niTable{nis: nis, byNID: make(map[wire.NID]*ni, len(nis)), byNet: map[wire.Net][]*ni{}, nets: nets}
	for _, n := range nis {
		t.byNID[n.nid] = n
		if n.nid.Net.Type != wire.LO {
			t.byNet[n.nid.Net] = append(t.byNet[n.nid.Net], n)
		}
	}
	return t
}

// nis returns the node's NIs, 0@lo first. The slice is shared: read it,
// never change it.
func (ln *LNet) nis() []*ni { return ln.nit.Load().nis }

// newNIs makes the NIs of specs, not yet started, with the drivers that
// start them.
func (ln *LNet) newNIs(specs []niSpec) ([]Driver, []*ni, error) {
	drivers := make([]Driver, len(specs))
	nis := make([]*ni, len(specs))
	for i, s := range specs {
		d, ok := LookupDriver(s.nid.Net.Type)
		if !ok {
			return nil, nil, fmt.Errorf("%w: no LND registered for net type %v (import its driver package, e.g. lnd/lolnd or lnd/socklnd)", ErrInvalid, s.nid.Net.Type)
		}
		drivers[i] = d
		n := &ni{ln: ln, nid: s.nid, iface: s.iface, opts: s.opts, health: healthMax}
		n.host = &niHost{ln: ln, ni: n}
		n.setTunablesLocked(s.tun.withDefaults(), ln.cfg.MaxWaiting)
		nis[i] = n
	}
	return drivers, nis, nil
}

// startNI brings n up with its driver. n is in the NI table already: a
// message that comes in while the driver starts may be answered (its
// answer waits for the driver); the caller drains n once it holds no
// lock (handlers may run).
func (ln *LNet) startNI(ctx context.Context, d Driver, n *ni, s niSpec) error {
	lnd, err := d.Startup(ctx, NIConfig{
		NID:         s.nid,
		Interface:   s.iface,
		PID:         ln.pid,
		Incarnation: ln.incarnation,
		Tunables:    s.tun,
		Options:     s.opts,
		Logger:      ln.cfg.Logger.With("ni", s.nid.String()),
	}, n.host)
	if err != nil {
		return fmt.Errorf("lnet: start NI %v: %w", s.nid, err)
	}
	ln.net.Lock()
	n.lnd = lnd
	n.setTunablesLocked(lnd.Tunables().withDefaults(), ln.cfg.MaxWaiting)
	ln.net.Unlock()
	ln.log.Info("NI up", "nid", n.nid, "interface", n.iface, "credits", n.tun.Credits, "peer_credits", n.tun.PeerCredits)
	return nil
}

// AddNet brings up the NIs of nc on a running node (lnetctl net add): one
// per interface or address, or on the first interface with an IPv4
// address if nc names none. Options left nil are those of the node's
// first NI of the same type, or of its first configured net of that type
// (a TCP port is the node's, as Lustre's socklnd port is the module's).
// It returns the new NIDs, and fails with ErrExist if any of them is the
// node's already, ErrInvalid for lo or past wire.MaxPingNIDs NIs, and
// with the driver's error if one does not start (the node is then as it
// was; messages sent meanwhile go another way). The node's ping answer
// lists the new NIDs, and it pushes them to its peers (push.go).
func (ln *LNet) AddNet(ctx context.Context, nc NetConfig) ([]wire.NID, error) {
	if nc.Net.Type == wire.LO {
		return nil, fmt.Errorf("%w: 0@lo is always there", ErrInvalid)
	}
	nis, undo, err := ln.addNet(ctx, nc)
	if undo != nil {
		undo.finish(ctx)
	}
	if err != nil {
		return nil, err
	}
	nids := make([]wire.NID, len(nis))
	for i, n := range nis {
		ln.drain(n) // what was sent while the driver started
		nids[i] = n.nid
	}
	ln.niChanged()
	return nids, nil
}

// addNet is AddNet under niMu; a removal it returns is to be finished
// once niMu is released.
func (ln *LNet) addNet(ctx context.Context, nc NetConfig) ([]*ni, *niRemoval, error) {
	ln.niMu.Lock()
	defer ln.niMu.Unlock()
	if ln.closing() { // (set before Close takes niMu)
		return nil, nil, ErrShutdown
	}
	old := ln.nit.Load()
	if nc.Options == nil {
		nc.Options = ln.typeOptions(old, nc.Net.Type)
	}
	specs, err := resolveNIs([]NetConfig{nc}, osResolver)
	if err != nil {
		return nil, nil, err
	}
	specs = specs[1:] // (0@lo's)
	if len(specs) == 0 {
		return nil, nil, fmt.Errorf("%w: net %v: no interface or address", ErrInvalid, nc.Net)
	}
	for _, s := range specs {
		if old.byNID[s.nid] != nil {
			return nil, nil, fmt.Errorf("%w: NI %v", ErrExist, s.nid)
		}
	}
	if n := len(old.nis) + len(specs); n > wire.MaxPingNIDs {
		return nil, nil, fmt.Errorf("%w: %d NIs: a ping answer lists at most %d", ErrInvalid, n, wire.MaxPingNIDs)
	}
	drivers, nis, err := ln.newNIs(specs)
	if err != nil {
		return nil, nil, err
	}
	nets := append(slices.Clone(old.nets), nc)
	ln.publish(newNITable(append(slices.Clone(old.nis), nis...), nets))
	for i, n := range nis {
		if err := ln.startNI(ctx, drivers[i], n, specs[i]); err != nil {
			// Those that started go again, the rest never ran, even if
			// a route came to rely on them meanwhile (its sends find no
			// NI and fail).
			undo, _ := ln.detachNIs(nis, old.nets, true)
			return nil, undo, err
		}
	}
	ln.checkLinks(osLinks()) // (the ping info the caller posts says what it found)
	return nis, nil, nil
}

// typeOptions returns the driver options of the node's first NI of type
// t, or, with none left, those of the first net of type t LNet started
// with: options such as socklnd's port are the node's, not one NI's.
func (ln *LNet) typeOptions(t *niTable, typ wire.NetType) map[string]string {
	for _, n := range t.nis {
		if n.nid.Net.Type == typ {
			return maps.Clone(n.opts)
		}
	}
	for _, nc := range ln.cfg.Networks {
		if nc.Net.Type == typ {
			return maps.Clone(nc.Options)
		}
	}
	return nil
}

// DelNet shuts down the NIs of net on a running node (lnetctl net del):
// all of them, or those on the given OS interfaces (configured on one,
// or holding one of its addresses) or addresses. Messages waiting on them
// are sent another way if the node has one (another NI on the net, or
// another NID of a multi-rail peer), failed otherwise; the driver fails
// what it holds. It returns the NIDs deleted, and fails with ErrNotFound
// if none matched, ErrInvalid for lo, and ErrBusy while a route's gateway
// is reached only through them (delete the route first). The node pushes
// its NIDs to its peers.
func (ln *LNet) DelNet(ctx context.Context, net wire.Net, ifaces []string) ([]wire.NID, error) {
	if net.Type == wire.LO {
		return nil, fmt.Errorf("%w: 0@lo cannot be deleted", ErrInvalid)
	}
	del, r, err := ln.delNet(net, ifaces)
	if err != nil {
		return nil, err
	}
	r.finish(ctx)
	ln.niChanged()
	nids := make([]wire.NID, len(del))
	for i, n := range del {
		nids[i] = n.nid
	}
	return nids, nil
}

// delNet is DelNet under niMu; the removal it returns is to be finished
// once niMu is released.
func (ln *LNet) delNet(net wire.Net, ifaces []string) ([]*ni, *niRemoval, error) {
	ln.niMu.Lock()
	defer ln.niMu.Unlock()
	if ln.closing() { // (set before Close takes niMu)
		return nil, nil, ErrShutdown
	}
	old := ln.nit.Load()
	var del []*ni
	for _, n := range old.byNet[net] {
		if len(ifaces) == 0 || slices.ContainsFunc(ifaces, func(name string) bool { return onInterface(n, name) }) {
			del = append(del, n)
		}
	}
	if len(del) == 0 {
		if len(ifaces) > 0 {
			return nil, nil, fmt.Errorf("%w: no NI of net %v on %v", ErrNotFound, net, ifaces)
		}
		return nil, nil, fmt.Errorf("%w: net %v is not configured", ErrNotFound, net)
	}
	r, err := ln.detachNIs(del, netsWithout(old.nets, net, del, len(del) == len(old.byNet[net])), false)
	if err != nil {
		return nil, nil, err
	}
	return del, r, nil
}

// onInterface reports whether n is on the OS interface (or address)
// name: configured on it, or holding one of its addresses.
func onInterface(n *ni, name string) bool {
	if n.iface == name || n.nid.Addr.String() == name {
		return true
	}
	addrs, err := osResolver.byName(name)
	return err == nil && slices.Contains(addrs, n.nid.Addr)
}

// niChanged tells the world of a change of the node's NIs: the ping
// answer, and a push to the peers that discovered the node.
func (ln *LNet) niChanged() {
	// One change at a time: the ping answer posted last is the newest,
	// and so is the push numbered last. The pushes go out after: sending
	// may complete other messages here, whose handlers may push.
	ln.pushMu.Lock()
	if ln.changed != nil { // (NIChanges)
		close(ln.changed)
		ln.changed = nil
	}
	if err := ln.refreshPingMD(); err != nil {
		ln.pushMu.Unlock()
		ln.log.Warn("cannot update the ping buffer", "err", err)
		return
	}
	ln.pushSeq = max(ln.pushSeq+1, uint64(time.Now().UnixNano()))
	info, seq := ln.pingInfo(), ln.pushSeq
	ln.pushMu.Unlock()
	ln.pushPeers(info, seq)
}

// publish stores t as the NI table; selection (under ln.net) sees either
// the old table or t, whole.
func (ln *LNet) publish(t *niTable) {
	ln.net.Lock()
	ln.nit.Store(t)
	ln.net.Unlock()
}

// niRemoval is what detachNIs took out of the node, to finish once
// niMu is released: finish completes messages, and so runs their
// handlers, which may call AddNet, DelNet or Close.
type niRemoval struct {
	ln    *LNet
	del   []*ni
	moved []movedMsg
	drain []*ni
}

// movedMsg is a message taken off a deleted NI, with that NI's NID.
type movedMsg struct {
	m   *msg
	nid wire.NID
}

// detachNIs takes del out of the NI table, which then has nets as what
// Config reports, under LNet.net so that path selection never sees half
// of it, and takes back the messages waiting on them for credits. Unless force, it fails with ErrBusy, changing nothing,
// if a route's gateway is on a net del would leave without an NI. The
// caller holds niMu, and runs finish once it has released it.
func (ln *LNet) detachNIs(del []*ni, nets []NetConfig, force bool) (*niRemoval, error) {
	gone := make(map[*ni]bool, len(del))
	for _, n := range del {
		gone[n] = true
	}
	old := ln.nit.Load()
	keep := slices.DeleteFunc(slices.Clone(old.nis), func(n *ni) bool { return gone[n] })
	t := newNITable(keep, nets)
	r := &niRemoval{ln: ln, del: del}

	ln.net.Lock()
	defer ln.net.Unlock()
	// Under ln.net, as AddRoute's check that the gateway is on a net of
	// ours: no route can come to rely on what goes here.
	for _, rs := range ln.net.routes {
		for _, rt := range rs {
			if gw := rt.Gateway; !force && len(old.byNet[gw.Net]) > 0 && len(t.byNet[gw.Net]) == 0 {
				return nil, fmt.Errorf("%w: the route to %v goes through gateway %v on net %v: delete it first", ErrBusy, rt.Net, gw, gw.Net)
			}
		}
	}
	ln.nit.Store(t)
	for _, n := range del {
		n.gone = true
	}
	r.moved = ln.takeBackLocked(del, func(n *ni) bool { return gone[n] }, &r.drain)
	ln.niDown.Add(1)
	return r, nil
}

// takeBackLocked waits until no goroutine hands nis' ready messages to
// their drivers, then takes every message waiting for credits on an NI
// that taken accepts (ready to go, or queued on one of nis or on a peer
// NI) off its queue, giving its credits back (to drains' NIs, unless
// LNet is closed), and returns them with the NI each waited on. Peer
// queues first, so that credits given back go to nobody waiting on a
// taken NI. Senders blocked on a full queue of one of nis are woken.
func (ln *LNet) takeBackLocked(nis []*ni, taken func(*ni) bool, drains *[]*ni) []movedMsg {
	for _, n := range nis {
		for n.sending {
			ln.net.idle.Wait()
		}
	}
	var out []movedMsg
	for _, lp := range ln.net.peers {
		for m := lp.txq.head; m != nil; {
			next := m.qnext
			if taken(m.ni) {
				nid := m.ni.nid
				ln.unqueueLocked(m, drains)
				out = append(out, movedMsg{m, nid})
			}
			m = next
		}
	}
	for _, n := range nis {
		for n.txq.n > 0 {
			m := n.txq.head
			ln.unqueueLocked(m, drains)
			out = append(out, movedMsg{m, n.nid})
		}
	}
	for _, n := range nis {
		for _, m := range n.ready {
			ln.returnCreditsLocked(m, drains)
			out = append(out, movedMsg{m, n.nid})
		}
		n.ready = nil
		if n.spaceCh != nil {
			close(n.spaceCh)
			n.spaceCh = nil
		}
	}
	return out
}

// finish sends the messages taken off the NIs another way (the node's
// path selection no longer has the NIs; a message with no other way
// fails with ErrLocalNI), fails the operations awaiting an ACK or REPLY
// that was to come back to their NIDs, and shuts their drivers down.
func (r *niRemoval) finish(ctx context.Context) {
	ln := r.ln
	defer ln.niDown.Done()
	ln.drainAll(r.drain)
	for _, mv := range r.moved {
		ln.reroute(mv.m, fmt.Errorf("%w: NI %v deleted", ErrLocalNI, mv.nid))
	}

	// (m.ni is read under ln.net, the map under ln.res: one lock at a
	// time.)
	ln.res.Lock()
	pending := slices.Collect(maps.Values(ln.res.pending))
	ln.res.Unlock()
	var fail []movedMsg
	ln.net.Lock()
	for _, m := range pending {
		if slices.Contains(r.del, m.ni) {
			fail = append(fail, movedMsg{m, m.ni.nid})
		}
	}
	ln.net.Unlock()
	var d dispatchList
	ln.res.Lock()
	for _, f := range fail {
		ln.respFailLocked(f.m, fmt.Errorf("%w: NI %v deleted", ErrShutdown, f.nid), &d)
	}
	ln.res.Unlock()
	ln.dispatch(&d, false)

	for _, n := range r.del {
		if err := ln.shutdownNI(ctx, n); err != nil {
			ln.log.Warn("NI shutdown", "err", err)
		}
		ln.log.Info("NI down", "nid", n.nid, "interface", n.iface)
	}
}

// reroute sends m, taken off a deleted NI before the driver had it, on
// the path selection picks now, or fails it with err if there is none.
// A response follows its request's path where it can (another NI on the
// net it came in on).
func (ln *LNet) reroute(m *msg, err error) {
	if ln.resend(m) {
		return
	}
	ln.completeSend(m, err)
}

// shutdownNI stops n's driver, if it started.
func (ln *LNet) shutdownNI(ctx context.Context, n *ni) error {
	ln.net.Lock()
	lnd := n.lnd
	ln.net.Unlock()
	if lnd == nil {
		return nil
	}
	if err := lnd.Shutdown(ctx); err != nil {
		return fmt.Errorf("lnet: shut down NI %v: %w", n.nid, err)
	}
	return nil
}

// netsWithout returns nets without the NIs del of net: every entry of the
// net if all went, or their interfaces and addresses.
func netsWithout(nets []NetConfig, net wire.Net, del []*ni, all bool) []NetConfig {
	out := make([]NetConfig, 0, len(nets))
	for _, nc := range nets {
		if nc.Net != net {
			out = append(out, nc)
			continue
		}
		if all {
			continue
		}
		named := len(nc.Interfaces) > 0 || len(nc.Addrs) > 0
		nc.Interfaces = slices.DeleteFunc(slices.Clone(nc.Interfaces), func(name string) bool {
			return slices.ContainsFunc(del, func(n *ni) bool { return n.iface == name })
		})
		nc.Addrs = slices.DeleteFunc(slices.Clone(nc.Addrs), func(a netip.Addr) bool {
			return slices.ContainsFunc(del, func(n *ni) bool { return n.nid.Addr == a.Unmap() })
		})
		if named && len(nc.Interfaces) == 0 && len(nc.Addrs) == 0 {
			continue
		}
		out = append(out, nc)
	}
	return out
}
