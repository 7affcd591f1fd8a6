package llite

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/client"
)

// Statahead (Lustre's llite statahead, the part `ls -l` needs): when the
// kernel reads a directory with READDIRPLUS, go-fuse looks every entry of
// the page up in turn, one RPC after the other. Once the first entry of a
// page is looked up, the rest of the page is looked up ahead, a few at a
// time, so that go-fuse's lookups find the attributes cached (under the
// locks the lookups were granted, as any lookup's). A lookup of a name
// being looked up ahead waits for that one instead of asking again. What
// starts it is the first two entries of the page looked up in order, as
// READDIRPLUS (or `ls -l` after a plain READDIR) does; a lookup of some
// name of the page does not.
//
// AGL (Lustre's asynchronous glimpse locks, run by its statahead thread):
// a regular file's attributes are not cached by the kernel, so `ls -l`
// sends a GETATTR for every file, and each needs the file's size from its
// OSTs, a glimpse, one after the other. Once two files of a page have had
// their GETATTRs in page order, the files after them are glimpsed ahead, a
// few at a time; each glimpse a lock server grants as a lock leaves the
// size cached, so the GETATTR that follows sends nothing. A GETATTR of a
// file being glimpsed ahead waits for that glimpse instead of asking
// again; lookups never wait for glimpses. A failed glimpse ahead is
// dropped (the GETATTR asks again and reports the error): the rest go on.

const (
	// statAheadWorkers is how many lookups one directory page runs ahead.
	statAheadWorkers = 8
	// statAheadMax bounds the lookups ahead of the whole mount at once.
	statAheadMax = 32
	// statAheadTimeout bounds one lookup ahead.
	statAheadTimeout = 30 * time.Second
)

// statAhead is the page of a directory last read, for its lookups and
// glimpses ahead. Its context ends when the page is replaced, the
// directory closed or the mount ends: the work ahead stops then.
type statAhead struct {
	ctx    context.Context
	cancel context.CancelFunc
	parent client.FID
	mu     sync.Mutex
	names  []string // the page's entries, in order
	index  map[string]int
	// lookups and glimpses are the two kinds of work ahead.
	lookups, glimpses ahead
	// gmiss counts the regular files glimpsed ahead in a row whose sizes
	// did not stay cached under locks.
	gmiss int
}

// ahead is one kind of work ahead of a page. Guarded by statAhead.mu.
type ahead struct {
	next   int  // names[next:] are not started yet
	begun  bool // the workers run
	flight map[string]chan struct{}
	// inOrder counts the requests that came in page order, last is the
	// index of the latest. Lookups count those from the first entry on,
	// one after the other (READDIRPLUS looks every entry up); glimpses
	// those at a later index than the one before (ls -l's GETATTRs skip
	// what is not a regular file).
	inOrder, last int
}

// aglProbe is how many glimpses ahead in a row may leave no size cached
// before the page's glimpses ahead stop: a file another client writes (or
// wrote and keeps the write locks of) cannot be granted a glimpse lock, so
// the GETATTR that follows glimpses it again, a second glimpse AST to the
// writer for nothing.
const aglProbe = 4

// newStatAhead returns the work ahead of a page of parent's entries,
// which ends with ctx.
func newStatAhead(ctx context.Context, parent client.FID, ents []client.DirEntry) *statAhead {
	sa := &statAhead{parent: parent, index: make(map[string]int, len(ents)),
		lookups:  ahead{flight: make(map[string]chan struct{}), last: -1},
		glimpses: ahead{flight: make(map[string]chan struct{}), last: -1}}
	sa.ctx, sa.cancel = context.WithCancel(ctx)
	for _, e := range ents {
		if e.Name == "." || e.Name == ".." {
			continue
		}
		sa.index[e.Name] = len(sa.names)
		sa.names = append(sa.names, e.Name)
	}
	return sa
}

// looking is called by a lookup of name in sa's directory: it waits for a
// lookup ahead of name in flight, and starts the lookups ahead of the
// names after it once the page is looked up in order.
func (sa *statAhead) looking(ctx context.Context, m *mount, cred client.Cred, name string) {
	sa.request(ctx, m, &sa.lookups, name, func(ctx context.Context, name string) bool {
		_, err := m.fs.LookupLazySize(ctx, cred, sa.parent, name) // (what it finds is cached)
		if err != nil && client.Errno(err) != syscall.ENOENT {
			return false // (an MDT in trouble: no more ahead)
		}
		m.statAheads.Add(1)
		return true
	})
}

// getattr is called by a GETATTR of name, a regular file of sa's page: it
// waits for a glimpse ahead of name in flight, and starts the glimpses
// ahead of the files after it once GETATTRs come in page order.
func (sa *statAhead) getattr(ctx context.Context, m *mount, cred client.Cred, name string) {
	sa.request(ctx, m, &sa.glimpses, name, func(ctx context.Context, name string) bool {
		// The entry is cached by the kernel's lookups (or the lookups
		// ahead); Lookup with the size glimpses a regular file, and
		// keeps what the glimpse learnt.
		a, err := m.fs.Lookup(ctx, cred, sa.parent, name)
		if err != nil {
			if sa.ctx.Err() == nil {
				m.log.Debug("llite: glimpse ahead failed", "parent", sa.parent, "name", name, "err", err)
			}
			return true // (only this file: its GETATTR asks again)
		}
		m.glimpsesAhead.Add(1)
		if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
			return true
		}
		held := m.fs.SizeHeld(a.FID)
		sa.mu.Lock()
		defer sa.mu.Unlock()
		if held {
			sa.gmiss = 0
		} else {
			sa.gmiss++
		}
		return sa.gmiss < aglProbe
	})
}

// request is a request of the kernel's for name that work a does ahead:
// it waits for a's work on name in flight, or, once requests come in page
// order, starts a's workers, each running do on the names after it in
// turn (with a context that ends with the page) until do says to stop.
func (sa *statAhead) request(ctx context.Context, m *mount, a *ahead, name string, do func(ctx context.Context, name string) bool) {
	wait, start := sa.note(a, name)
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
		}
		return
	}
	if !start {
		return
	}
	bg := context.WithoutCancel(ctx) // (the job id stays)
	for range statAheadWorkers {
		select {
		case m.statAhead <- struct{}{}:
		default:
			return // the mount's work ahead is at its bound
		}
		m.saWG.Go(func() {
			defer func() { <-m.statAhead }()
			for more := true; more && sa.ctx.Err() == nil; {
				name, ch := sa.take(a)
				if ch == nil {
					return
				}
				wctx, cancel := context.WithTimeout(bg, statAheadTimeout)
				stop := context.AfterFunc(sa.ctx, cancel)
				more = do(wctx, name)
				stop()
				cancel()
				sa.done(a, name, ch)
			}
		})
	}
}

// note records a request for name: wait is a's work on name in flight, if
// any; start says a's workers are to begin now.
func (sa *statAhead) note(a *ahead, name string) (wait chan struct{}, start bool) {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	i, ok := sa.index[name]
	if !ok {
		return nil, false
	}
	if ch := a.flight[name]; ch != nil {
		return ch, false
	}
	if a == &sa.lookups && i == a.inOrder || a == &sa.glimpses && i > a.last {
		a.inOrder++
	}
	a.last = i
	start = !a.begun && a.inOrder >= 2
	if start {
		a.begun = true
	}
	a.next = max(a.next, i+1) // this one the caller does
	return nil, start
}

// take returns the next name for a's work and marks it in flight; a nil
// channel when there is none.
func (sa *statAhead) take(a *ahead) (string, chan struct{}) {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	if a.next >= len(sa.names) || a == &sa.glimpses && sa.gmiss >= aglProbe {
		// (glimpses: aglProbe misses in a row, by any worker, stop them
		// all before the next entry, whatever the last one was)
		return "", nil
	}
	name := sa.names[a.next]
	a.next++
	ch := make(chan struct{})
	a.flight[name] = ch
	return name, ch
}

// done ends a's work on name.
func (sa *statAhead) done(a *ahead, name string, ch chan struct{}) {
	sa.mu.Lock()
	delete(a.flight, name)
	sa.mu.Unlock()
	close(ch)
}
