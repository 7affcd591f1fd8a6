package osc

// Grant accounting (Lustre's cl_avail_grant, osc_consume_write_grant,
// osc_update_grant), pure logic: the OSC and its tests drive it.
//
// The OST reserves space for each client (its grant) so that the client
// can cache dirty data that is sure to fit. The OST tells the client its
// grant at CONNECT and in every BRW reply; a write marked from_grant
// consumes grant on the OST, other writes need free space there.
//
// The client charges PageSize of grant for every page it dirties and may
// never charge more than it is sure the OST holds for it. The OST reports
// its total in each reply, but replies of concurrent RPCs arrive in any
// order and the OST processed them in some other order, so a total is
// only known to be true at the moment the OST sent it. The client keeps a
// lower bound instead:
//
//	avail = total - unsent - uncertain
//
// where unsent is what dirty pages not yet sent have charged, and
// uncertain is every from-grant byte whose RPC overlapped the one that
// brought the total (in flight when it was sent, or sent since): those the
// OST may or may not have consumed when it computed the total, so they
// count as not consumed. Since the OST changes a client's grant only when
// that client's RPCs consume or add to it, any reply gives a lower bound
// of what is left, however old (TestGrantNeverOvercommits drives this
// against a model of the OST with every ordering). A reply whose RPC was
// sent after the last "anchor" reply was processed is newer than it and
// replaces avail (so avail can grow again); an older one can only lower it.
//
// The one thing the client cannot see coming is the OST shrinking a grant
// on its own as the target fills (oss/ofd moreGrant): a reply computed
// before the RPC that shrank it may overstate the grant by the amount
// shrunk, until that RPC's reply comes. To keep the window small the OSC
// sends one write RPC at a time while the grant is below a full pipeline
// of RPCs (lowSpace), so that every reply is exact; an async write the OST
// still refuses for space fails with ENOSPC, which the next Sync reports.
type grant struct {
	avail  int64  // grant the client may still charge for new dirty pages
	unsent int64  // charged by dirty pages not yet in an RPC
	sent   uint64 // from-grant bytes sent, ever
	done   uint64 // from-grant bytes whose RPC finished, ever
	// replies counts the write replies processed; anchor is its value
	// right after the last reply that replaced avail.
	replies, anchor uint64
	// total is the grant the OST reported last.
	total uint64
}

// grantTicket is what an RPC carries from send to reply.
type grantTicket struct {
	bytes          int64  // grant charged by the RPC's pages
	inflightBefore uint64 // from-grant bytes in flight when it was sent
	sentBefore     uint64 // grant.sent before it
	repliesAtSend  uint64 // grant.replies when it was sent
}

// reset starts over from a grant the OST reported at CONNECT: what is
// still charged by dirty pages is deducted, and so is what is in flight.
// After an OST restart those RPCs are resent to the new export once the
// recovery is over, before anything sent later, and take their bytes from
// this grant (after an eviction they fail instead, and the next reply
// gives back what they did not take).
func (g *grant) reset(total uint64) {
	g.total = total
	g.anchor = g.replies
	g.avail = max(int64(total)-g.unsent-g.inflight(), 0)
}

// charge takes n bytes of grant for new dirty pages, if there is that much.
func (g *grant) charge(n int64) bool {
	if n > g.avail {
		return false
	}
	g.avail -= n
	g.unsent += n
	return true
}

// uncharge gives back the grant of dirty pages dropped before being sent
// (truncated, discarded): the OST still holds it.
func (g *grant) uncharge(n int64) {
	g.avail += n
	g.unsent -= n
}

// send moves n charged bytes into an RPC and returns its ticket. An RPC
// that does not write from grant (a read, a sync write) sends 0 bytes: its
// reply still reports the total.
func (g *grant) send(n int64) grantTicket {
	t := grantTicket{bytes: n, inflightBefore: g.sent - g.done, sentBefore: g.sent, repliesAtSend: g.replies}
	g.unsent -= n
	g.sent += uint64(n)
	return t
}

// reply records the total the OST sent in the reply to t's RPC.
func (g *grant) reply(t grantTicket, total uint64) {
	uncertain := t.inflightBefore + (g.sent - t.sentBefore - uint64(t.bytes))
	g.done += uint64(t.bytes)
	g.replies++
	g.total = total
	cand := max(int64(total)-g.unsent-int64(uncertain), 0)
	if t.repliesAtSend >= g.anchor {
		g.avail = cand
		g.anchor = g.replies
	} else {
		g.avail = min(g.avail, cand)
	}
}

// failed records that t's RPC brought no reply. After ENOSPC the client
// assumes it has no grant left until a reply says otherwise.
func (g *grant) failed(t grantTicket, nospace bool) {
	g.done += uint64(t.bytes)
	if nospace {
		g.avail = 0
	}
}

// inflight returns the from-grant bytes in RPCs not yet answered.
func (g *grant) inflight() int64 { return int64(g.sent - g.done) }

// held is the grant the client holds: what it may still charge, what its
// dirty pages charged, and what its RPCs in flight carry (what it tells
// the OST at CONNECT).
func (g *grant) held() uint64 { return uint64(max(g.avail, 0) + g.unsent + g.inflight()) }

// want returns how much more grant to ask for so that the client holds
// target, going by the total the OST reported last (the lower bound in
// avail understates it while RPCs overlap, and asking by it would make the
// grant grow without end).
func (g *grant) want(target int64) uint64 {
	if int64(g.total) >= target {
		return 0
	}
	return uint64(target - int64(g.total))
}
