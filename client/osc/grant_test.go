package osc

import (
	"math/rand/v2"
	"testing"
)

// simRPC is a write RPC in the grant simulation.
type simRPC struct {
	n        int64 // from-grant bytes
	want     uint64
	t        grantTicket
	consumed bool
	replyG   uint64
	replied  bool
	shrink   bool // a grant shrink: the OST takes up to n, adds nothing
}

// TestGrantNeverOvercommits drives the client's grant accounting against
// a model of the OST's (oss/ofd: a write consumes its from-grant bytes
// when it starts, and when it ends adds up to what the client asked for
// and reports the total), with RPCs started, finished and answered in
// random orders, with grant shrinks among them (shrink.go: n bytes of
// avail charged and sent; ofd shrinkGrant takes up to n). Every from-grant
// write must find its bytes in the OST's grant: the client never charges
// what the OST does not hold for it.
func TestGrantNeverOvercommits(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		const pg = PageSize
		srv := uint64(r.IntN(64)+1) * pg * 16 // the OST's grant for the client
		spare := uint64(r.IntN(1<<16)) * pg   // free space it may grant from
		var g grant
		g.reset(srv)
		var rpcs []*simRPC
		target := int64(r.IntN(256)+16) * pg
		for step := range 4000 {
			switch r.IntN(8) {
			case 0, 1: // dirty some pages
				k := int64(r.IntN(64) + 1)
				g.charge(k * pg)
			case 2: // send some of the unsent
				if g.unsent == 0 {
					continue
				}
				n := (int64(r.IntN(int(g.unsent/pg))) + 1) * pg
				rp := &simRPC{n: n}
				rp.t = g.send(n)
				rp.want = g.want(target)
				rpcs = append(rpcs, rp)
			case 7: // give some grant back
				if g.avail < pg {
					continue
				}
				n := int64(r.IntN(int(g.avail/pg))+1) * pg
				g.charge(n)
				rp := &simRPC{n: n, shrink: true}
				rp.t = g.send(n)
				rpcs = append(rpcs, rp)
			case 3: // the OST starts one: consume
				if rp := pick(r, rpcs, func(rp *simRPC) bool { return !rp.consumed }); rp != nil {
					if rp.shrink {
						srv -= min(uint64(rp.n), srv)
						rp.consumed = true
						continue
					}
					if srv < uint64(rp.n) {
						t.Fatalf("seed %d step %d: a from-grant write of %d bytes found %d of grant on the OST", seed, step, rp.n, srv)
					}
					srv -= uint64(rp.n)
					rp.consumed = true
				}
			case 4: // the OST ends one: more grant, reply
				if rp := pick(r, rpcs, func(rp *simRPC) bool { return rp.consumed && !rp.replied && rp.replyG == 0 }); rp != nil {
					add := min(rp.want, spare/4) &^ (pg - 1)
					srv += add
					spare -= add
					rp.replyG = srv + 1 // +1: mark as computed even when 0
				}
			case 5: // the client gets a reply
				if rp := pick(r, rpcs, func(rp *simRPC) bool { return rp.replyG != 0 && !rp.replied }); rp != nil {
					rp.replied = true
					g.reply(rp.t, rp.replyG-1)
				}
			case 6: // drop unsent dirty pages (truncate)
				if g.unsent > 0 {
					g.uncharge((int64(r.IntN(int(g.unsent/pg))) + 1) * pg)
				}
			}
			if g.avail < 0 || g.unsent < 0 {
				t.Fatalf("seed %d step %d: avail %d unsent %d", seed, step, g.avail, g.unsent)
			}
			rpcs = slicesDeleteFunc(rpcs, func(rp *simRPC) bool { return rp.replied })
		}
	}
}

func pick(r *rand.Rand, rpcs []*simRPC, ok func(*simRPC) bool) *simRPC {
	var c []*simRPC
	for _, rp := range rpcs {
		if ok(rp) {
			c = append(c, rp)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[r.IntN(len(c))]
}

func slicesDeleteFunc(s []*simRPC, del func(*simRPC) bool) []*simRPC {
	out := s[:0]
	for _, x := range s {
		if !del(x) {
			out = append(out, x)
		}
	}
	return out
}

// TestGrantExactWhenSerial: with one RPC at a time (the OSC's low-space
// mode) every reply gives the exact grant back.
func TestGrantExactWhenSerial(t *testing.T) {
	var g grant
	g.reset(100 * PageSize)
	if !g.charge(60*PageSize) || g.charge(41*PageSize) {
		t.Fatalf("charges against a grant of 100 pages: %+v", g)
	}
	tk := g.send(60 * PageSize)
	// The OST consumed 60 pages and added 30: 70 left.
	g.reply(tk, 70*PageSize)
	if g.avail != 70*PageSize || g.unsent != 0 {
		t.Fatalf("after an exact reply: %+v", g)
	}
	g.charge(10 * PageSize)
	tk = g.send(0) // a sync write: no grant used
	g.reply(tk, 70*PageSize)
	if g.avail != 60*PageSize || g.unsent != 10*PageSize {
		t.Fatalf("a reply with dirty pages unsent: %+v", g)
	}
	g.failed(g.send(10*PageSize), true)
	if g.avail != 0 {
		t.Fatalf("after ENOSPC the grant must be taken as gone: %+v", g)
	}
	if w := g.want(200 * PageSize); w != 130*PageSize {
		t.Fatalf("want %d", w)
	}
}

// TestGrantResetCountsInflight: the OST restarts with from-grant writes of
// the client in flight, and takes it back with a new grant. Those writes
// are resent to it after the recovery, before anything sent later, and
// take their bytes from the new grant: the client may charge only what is
// left after them. Counted as free, every page the client charged on top
// would be sent from grant the OST no longer holds for it.
func TestGrantResetCountsInflight(t *testing.T) {
	var g grant
	g.reset(100 * PageSize)
	if !g.charge(60 * PageSize) {
		t.Fatalf("charge 60 pages of 100: %+v", g)
	}
	tk := g.send(40 * PageSize) // in flight as the OST restarts
	g.reset(100 * PageSize)     // its grant after the restart
	charged := int64(0)
	for g.charge(PageSize) {
		charged += PageSize
	}
	// The resent write consumes its 40 pages first; the 20 unsent and
	// what was charged since must fit in the rest.
	if need := 40*PageSize + g.unsent; need > 100*PageSize {
		t.Fatalf("charged %d bytes after the restart: the OST must hold %d bytes of grant, it holds %d", charged, need, 100*PageSize)
	}
	// The resent write's reply is exact again: 60 pages left of the
	// 100, all charged.
	g.reply(tk, 60*PageSize)
	if g.avail != 0 || g.unsent != 60*PageSize {
		t.Fatalf("after the resent write's reply: %+v", g)
	}
}
