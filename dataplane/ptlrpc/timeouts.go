package ptlrpc

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Timeouts are a node's RPC timeouts: Lustre's obd_timeout, at_min,
// at_max and at_history. Lustre keeps them per node (module parameters,
// `lctl set_param timeout=40`, persistently `lctl set_param -P` or
// `lctl conf_param FS.sys.timeout=40`); Nacre keeps one set per process.
// Imports, services and targets read them each time they need them, so a
// change applies at once, except where their own configuration fixes a
// value (ImportConfig.PingInterval and MaxTimeout, TargetConfig.EvictTimeout).
type Timeouts struct {
	// Obd is obd_timeout: idle imports ping every Obd/4 (at least every
	// second), a target evicts a client silent for six such intervals,
	// and, adaptive timeouts off, a request waits Obd for its reply.
	Obd time.Duration
	// ATMin is the least service time an adaptive timeout assumes, on
	// clients (request timeouts) and servers (early reply extensions).
	ATMin time.Duration
	// ATMax caps adaptive request timeouts and how long early replies
	// may keep a request going; 0 turns adaptive timeouts off (requests
	// wait Obd, clients ask for no early replies and ignore any sent,
	// servers send none).
	ATMax time.Duration
	// ATHistory is how long a peak service time or network latency is
	// remembered.
	ATHistory time.Duration
}

// Defaults of the node's Timeouts, Lustre's.
const (
	DefaultObdTimeout = 100 * time.Second
	DefaultATHistory  = 600 * time.Second
)

// DefaultTimeouts returns Lustre's defaults: obd_timeout 100 s, at_min 0,
// at_max 600 s, at_history 600 s.
func DefaultTimeouts() Timeouts {
	return Timeouts{Obd: DefaultObdTimeout, ATMax: DefaultMaxTimeout, ATHistory: DefaultATHistory}
}

// Validate checks t.
func (t Timeouts) Validate() error {
	switch {
	case t.Obd < time.Second:
		return fmt.Errorf("ptlrpc: timeout %v: want at least 1s", t.Obd)
	case t.ATMin < 0 || t.ATMax < 0:
		return fmt.Errorf("ptlrpc: at_min %v, at_max %v: negative", t.ATMin, t.ATMax)
	case t.ATMax > 0 && t.ATMin > t.ATMax:
		return fmt.Errorf("ptlrpc: at_min %v above at_max %v", t.ATMin, t.ATMax)
	case t.ATHistory < time.Second:
		return fmt.Errorf("ptlrpc: at_history %v: want at least 1s", t.ATHistory)
	}
	return nil
}

// PingInterval is how often an idle import pings (Lustre's PING_INTERVAL).
func (t Timeouts) PingInterval() time.Duration { return max(t.Obd/4, time.Second) }

// EvictTimeout is how long a target keeps the export of a client it does
// not hear from: six ping intervals, as Lustre's PING_EVICT_TIMEOUT (pings
// get lost on a loaded network, and an eviction costs the client its
// locks and cached changes).
func (t Timeouts) EvictTimeout() time.Duration { return 6 * t.PingInterval() }

var node struct {
	cur atomic.Pointer[Timeouts]
	mu  sync.Mutex    // serializes UpdateNodeTimeouts
	chg chan struct{} // closed at the next change; under mu
}

func init() {
	t := DefaultTimeouts()
	node.cur.Store(&t)
	node.chg = make(chan struct{})
}

// timeoutsChanged returns a channel closed when the node's timeouts next
// change: the loops that wait an interval derived from them (pinger,
// evictor) start their wait again.
func timeoutsChanged() <-chan struct{} {
	node.mu.Lock()
	defer node.mu.Unlock()
	return node.chg
}

// NodeTimeouts returns the process's timeouts.
func NodeTimeouts() Timeouts { return *node.cur.Load() }

// UpdateNodeTimeouts changes the process's timeouts with change, which
// gets the current ones; the result must pass Validate, or nothing
// changes.
func UpdateNodeTimeouts(change func(*Timeouts)) error {
	node.mu.Lock()
	defer node.mu.Unlock()
	t := *node.cur.Load()
	change(&t)
	if err := t.Validate(); err != nil {
		return err
	}
	node.cur.Store(&t)
	close(node.chg)
	node.chg = make(chan struct{})
	return nil
}
