// Package lolnd is the loopback LND: the NI 0@lo through which a node talks
// to itself (Lustre's lolnd). Every message sent on it is delivered to the
// same LNet's Host.Parse, and the receive copies the payload from the
// sender's MD into the receiver's, the one copy a loopback cannot avoid.
//
// It registers itself for wire.LO in init; LNet always starts 0@lo, so
// every program using LNet imports this package for its side effect:
//
//	import _ "github.com/nacrefs/nacre/lnd/lolnd"
//
// Deliveries run on one goroutine per NI, in the order Send was called, so
// Send never re-enters LNet and the messages of the node to itself stay in
// order. The goroutine's queue holds at most the credits LNet has given
// out. It owns nothing else: no sockets, no peers, no state across starts.
package lolnd

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

func init() { lnet.Register(Driver{}) }

// Driver makes loopback NIs.
type Driver struct{}

var _ lnet.Driver = (*Driver)(nil)

// Type returns wire.LO.
func (Driver) Type() wire.NetType { return wire.LO }

// Startup starts the delivery goroutine of a loopback NI. cfg.NID must be
// 0@lo.
func (Driver) Startup(_ context.Context, cfg lnet.NIConfig, host lnet.Host) (lnet.LND, error) {
	if cfg.NID != wire.LoNID {
		return nil, fmt.Errorf("lolnd: NID %v: the loopback NI is 0@lo", cfg.NID)
	}
	n := &ni{host: host, tun: cfg.Tunables, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if n.tun.Credits <= 0 {
		n.tun.Credits = lnet.DefaultCredits
	}
	if n.tun.PeerCredits <= 0 {
		n.tun.PeerCredits = lnet.DefaultPeerCredits
	}
	n.tun.PeerTimeout = 0 // the node cannot lose itself
	go n.run()
	return n, nil
}

// ni is one running loopback NI.
type ni struct {
	host lnet.Host
	tun  lnet.Tunables
	wake chan struct{} // capacity 1: there is work in mu.q
	done chan struct{} // closed when run returns

	mu struct {
		sync.Mutex
		q      []*lnet.Msg // sent, not yet delivered; bounded by LNet's credits
		closed bool
	}
}

var _ lnet.LND = (*ni)(nil)

// Send queues msg for delivery and returns at once.
func (n *ni) Send(msg *lnet.Msg) {
	n.mu.Lock()
	if n.mu.closed {
		n.mu.Unlock()
		n.host.Finalize(msg, lnet.ErrShutdown)
		return
	}
	n.mu.q = append(n.mu.q, msg)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Tunables returns the credits the NI runs with.
func (n *ni) Tunables() lnet.Tunables { return n.tun }

// Shutdown stops delivering, finalizes what is still queued with
// lnet.ErrShutdown, and waits for a delivery in progress (which may be in a
// handler) to finish, or for ctx.
func (n *ni) Shutdown(ctx context.Context) error {
	n.mu.Lock()
	if n.mu.closed {
		n.mu.Unlock()
		return nil
	}
	n.mu.closed = true
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
	select {
	case <-n.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("lolnd: shutdown: a delivery is still running: %w", ctx.Err())
	}
}

func (n *ni) run() {
	defer close(n.done)
	for range n.wake {
		for {
			n.mu.Lock()
			if n.mu.closed {
				q := n.mu.q
				n.mu.q = nil
				n.mu.Unlock()
				for _, m := range q {
					n.host.Finalize(m, lnet.ErrShutdown)
				}
				return
			}
			if len(n.mu.q) == 0 {
				n.mu.Unlock()
				break
			}
			m := n.mu.q[0]
			n.mu.q[0] = nil
			n.mu.q = n.mu.q[1:]
			n.mu.Unlock()
			n.deliver(m)
		}
	}
}

// deliver hands one message to the host, which calls Recv on it (now or
// later); Recv finalizes the send.
func (n *ni) deliver(m *lnet.Msg) {
	r := &rx{n: n, m: m}
	hdr := m.Hdr // the receiver gets its own copy, as from a wire
	_ = n.host.Parse(&hdr, wire.LoNID, r)
}

// rx is a message on its way through the loopback.
type rx struct {
	n    *ni
	m    *lnet.Msg
	once sync.Once
}

var errRecvTwice = errors.New("lolnd: Recv called twice")

// Recv copies the first mlen payload bytes into dst, and finalizes the
// sender's message: its payload buffers are free once copied.
func (r *rx) Recv(dst [][]byte, mlen int) error {
	return r.RecvObserved(dst, mlen, nil)
}

var _ lnet.ObservingRx = (*rx)(nil)

// RecvObserved is Recv showing seen each piece as soon as it is copied,
// while the piece is in the processor's cache: an observer that reads
// the bytes (a bulk checksum) then costs no second trip to memory.
func (r *rx) RecvObserved(dst [][]byte, mlen int, seen func([]byte)) error {
	err := errRecvTwice
	r.once.Do(func() {
		err = copyPayload(dst, r.m.Payload, mlen, seen)
		r.n.host.Finalize(r.m, err)
	})
	return err
}

// observedCopy is the most copied at once before the observer sees it: a
// piece that stays in a core's L2 cache (512 KiB and more on the CPUs
// servers have), and in L1 mostly.
const observedCopy = 32 << 10

// copyPayload copies mlen bytes from the src views into the dst views,
// showing seen (if not nil) every piece copied, in order.
func copyPayload(dst, src [][]byte, mlen int, seen func([]byte)) error {
	if mlen < 0 {
		return fmt.Errorf("lolnd: negative receive length %d", mlen)
	}
	step := mlen
	if seen != nil {
		step = observedCopy
	}
	var si, so int
	for _, d := range dst {
		for len(d) > 0 && mlen > 0 {
			for si < len(src) && so == len(src[si]) {
				si, so = si+1, 0
			}
			if si == len(src) {
				return fmt.Errorf("lolnd: receive of %d bytes past the payload", mlen)
			}
			c := copy(d[:min(len(d), mlen, step)], src[si][so:])
			if seen != nil {
				seen(d[:c])
			}
			d, so, mlen = d[c:], so+c, mlen-c
		}
	}
	if mlen > 0 {
		return fmt.Errorf("lolnd: receive buffers %d bytes short", mlen)
	}
	return nil
}
