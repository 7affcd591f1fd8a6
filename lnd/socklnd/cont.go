package socklnd

// Continuations (lnet.Continuer): the handler of a message may leave work
// to the connection's reader goroutine, to be done once LNet is done with
// the message. A PtlRPC service runs a request's handler so when nothing
// waits before it: handing the request to a handler goroutine would make
// that goroutine runnable, which wakes an idle CPU, and at one RPC in
// flight that wakeup (and the other CPU it keeps spinning) costs more than
// the handler.
//
// While the reader runs a continuation nothing reads the connection. A
// continuation that waits for a message on the same connection — a reply
// to an RPC it sends back to the peer, a lock the peer's next request
// gives back — would then wait forever; one that runs long would hold up
// everything the peer sends after. So a continuation about to wait calls
// its lnet.Releaser, which starts a new reader for the connection at once,
// and one that has run for handoffAfter without doing so has the reading
// taken from it by a watchdog; either way the old goroutine ends when its
// continuation does. The watchdog is a timer armed only while
// continuations run, so an idle NI has nothing ticking.

import (
	"sync"
	"time"

	"github.com/nacrefs/nacre/lnet"
)

// handoffAfter is how long a continuation runs before the watchdog starts
// a new reader for its connection. A small RPC's handler takes tens of
// microseconds; a message that waits behind a longer one waits at most
// about this long (two of it, with the timer's lateness).
const handoffAfter = time.Millisecond

// Continuable reports whether the message may leave a continuation: it is
// being parsed, has not left one, and nothing more from the peer is in the
// read buffer already (a peer with requests pipelined has them handed to
// handler goroutines, which serve them in parallel).
func (r *rx) Continuable() bool {
	return r.parsing && r.later == nil && r.c.rb.buffered() == 0
}

// Continue takes c to run on the reader goroutine after the message.
func (r *rx) Continue(c lnet.Continuation) bool {
	if c == nil || !r.Continuable() {
		return false
	}
	r.later = c
	return true
}

// continued returns r if it left a continuation, else nil.
func (r *rx) continued() *rx {
	if r.later == nil {
		return nil
	}
	return r
}

// Release gives r's connection a new reader now, if r's continuation is
// still its reader (lnet.Releaser): the continuation is about to wait.
func (r *rx) Release() { r.c.ni.cont.release(r) }

// startReader starts a reader goroutine for c or, once Shutdown has begun,
// closes c.
func (c *conn) startReader() {
	if !c.ni.join() {
		c.shut(lnet.ErrShutdown)
		return
	}
	go c.read()
}

// read is a reader goroutine of c: it reads, and runs the continuations the
// messages leave, until c ends or a continuation's reading goes to another
// goroutine (release, or the watchdog). It is not the NI's while it runs
// a continuation, which is the upper layer's work: Shutdown does not wait
// for it (and closes c meanwhile, so the goroutine does not read on).
func (c *conn) read() {
	ni := c.ni
	for {
		r, more := c.readLoop()
		ni.wg.Done()
		if r == nil {
			return
		}
		if !more {
			r.later.Continue(noRelease{})
			return
		}
		ni.stats.rxContinued.Add(1)
		ni.cont.watch(c, r)
		r.later.Continue(r)
		if !ni.cont.unwatch(c, r) || !ni.join() {
			return
		}
	}
}

// noRelease is the Releaser of a continuation whose connection is no
// longer read.
type noRelease struct{}

func (noRelease) Release() {}

// watchdog starts a new reader for the connections whose continuation has
// run for handoffAfter. It holds at most one entry per connection.
type watchdog struct {
	ni *NI
	mu sync.Mutex
	// running are the connections whose reader runs a continuation, each
	// at its conn.watchIdx.
	running []*conn
	timer   *time.Timer // made on first use; armed while running is not empty
	armed   bool
}

// watch registers c, whose reader is about to run r's continuation.
func (w *watchdog) watch(c *conn, r *rx) {
	now := time.Now()
	w.mu.Lock()
	if c.watchIdx >= 0 {
		// Not expected (one reader registers at a time, and an entry goes
		// when its continuation is replaced or returns), but one entry per
		// connection is what removeLocked relies on.
		w.removeLocked(c)
	}
	c.contSince, c.watchIdx, c.contRx = now, len(w.running), r
	w.running = append(w.running, c)
	if !w.armed {
		w.armed = true
		if w.timer == nil {
			w.timer = time.AfterFunc(handoffAfter, w.fire)
		} else {
			w.timer.Reset(handoffAfter)
		}
	}
	w.mu.Unlock()
}

// unwatch is called by the goroutine that ran r's continuation on c when
// it has returned; it reports whether that goroutine is still c's reader
// (r's reading was not handed to another). Only r's own entry is removed:
// a reader started meanwhile may have registered a continuation of its own.
func (w *watchdog) unwatch(c *conn, r *rx) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.watchIdx >= 0 && c.contRx == r {
		w.removeLocked(c)
	}
	r.returned = true // a late Release (from work the continuation left running) does nothing
	return !r.replaced
}

// release hands r's connection to a new reader if r's continuation is
// still its reader.
func (w *watchdog) release(r *rx) {
	c := r.c
	w.mu.Lock()
	if r.replaced || r.returned {
		w.mu.Unlock()
		return
	}
	if c.watchIdx >= 0 && c.contRx == r {
		w.removeLocked(c)
	}
	r.replaced = true
	w.mu.Unlock()
	w.ni.stats.rxReleased.Add(1)
	c.startReader()
}

func (w *watchdog) removeLocked(c *conn) {
	i, last := c.watchIdx, len(w.running)-1
	w.running[i] = w.running[last]
	w.running[i].watchIdx = i
	w.running[last] = nil
	w.running = w.running[:last]
	c.watchIdx, c.contRx = -1, nil
}

// fire starts new readers for the connections whose continuation has run
// too long, and arms the timer again for the next one due.
func (w *watchdog) fire() {
	type lateConn struct {
		c   *conn
		ran time.Duration
	}
	now := time.Now()
	var late []lateConn
	w.mu.Lock()
	next := handoffAfter
	for i := 0; i < len(w.running); {
		c := w.running[i]
		ran := now.Sub(c.contSince)
		if ran < handoffAfter {
			next = min(next, handoffAfter-ran)
			i++
			continue
		}
		r := c.contRx
		w.removeLocked(c) // moves the last entry to i
		if r != nil && !r.replaced {
			r.replaced = true
			late = append(late, lateConn{c, ran})
		}
	}
	w.armed = len(w.running) > 0
	if w.armed {
		w.timer.Reset(next)
	}
	w.mu.Unlock()
	for _, l := range late {
		w.ni.stats.rxHandoffs.Add(1)
		w.ni.log.Debug("socklnd: a continuation runs long: a new reader takes the connection",
			"peer", l.c.p.nid.String(), "type", l.c.typ.String(), "ran", l.ran)
		l.c.startReader()
	}
}
