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

// statAhead is the page of a directory last read, for its lookups ahead.
// Its context ends when the page is replaced, the directory closed or the
// mount ends: the lookups ahead stop then.
type statAhead struct {
	ctx    context.Context
	cancel context.CancelFunc
	parent client.FID
	mu     sync.Mutex
	names  []string // the page's entries, in order
	index  map[string]int
	next   int  // names[next:] are not started yet
	seq    int  // the entries looked up in order from the first
	begun  bool // lookups ahead run
	flight map[string]chan struct{}
	// The glimpses ahead (AGL): gnext, glast as next and seq are for the
	// lookups; ghits counts GETATTRs that came in page order.
	gnext, glast, ghits int
	gbegun              bool
	gflight             map[string]chan struct{}
	// gmiss counts the regular files glimpsed ahead in a row whose sizes
	// did not stay cached under locks.
	gmiss int
}

// aglProbe is how many glimpses ahead in a row may leave no size cached
// before the page's glimpses ahead stop: a file another client writes (or
// wrote and keeps the write locks of) cannot be granted a glimpse lock, so
// the GETATTR that follows glimpses it again, a second glimpse AST to the
// writer for nothing.
const aglProbe = 4

// glimpsing reports whether the page's glimpses ahead go on.
func (sa *statAhead) glimpsing() bool {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	return sa.gmiss < aglProbe
}

// glimpsed records a glimpse ahead of a regular file; held says its size
// stayed cached.
func (sa *statAhead) glimpsed(held bool) {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	if held {
		sa.gmiss = 0
	} else {
		sa.gmiss++
	}
}

// newStatAhead returns the lookups ahead of a page of parent's entries,
// which end with ctx.
func newStatAhead(ctx context.Context, parent client.FID, ents []client.DirEntry) *statAhead {
	sa := &statAhead{parent: parent, index: make(map[string]int, len(ents)), flight: make(map[string]chan struct{}),
		gflight: make(map[string]chan struct{}), glast: -1}
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
	wait, start := sa.note(name)
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
			return // the mount's lookups ahead are at their bound
		}
		m.saWG.Go(func() {
			defer func() { <-m.statAhead }()
			for sa.ctx.Err() == nil {
				name, ch := sa.take()
				if ch == nil {
					return
				}
				lctx, cancel := context.WithTimeout(bg, statAheadTimeout)
				stop := context.AfterFunc(sa.ctx, cancel)
				_, err := m.fs.LookupLazySize(lctx, cred, sa.parent, name) // (what it finds is cached)
				stop()
				cancel()
				sa.done(name, ch)
				if err != nil && client.Errno(err) != syscall.ENOENT {
					return // (an MDT in trouble: no more ahead)
				}
				m.statAheads.Add(1)
			}
		})
	}
}

// note records a lookup of name: wait is the lookup ahead of name in
// flight, if any; start says the lookups ahead are to begin now.
func (sa *statAhead) note(name string) (wait chan struct{}, start bool) {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	i, ok := sa.index[name]
	if !ok {
		return nil, false
	}
	if ch := sa.flight[name]; ch != nil {
		return ch, false
	}
	if i == sa.seq {
		sa.seq++
	}
	start = !sa.begun && sa.seq >= 2
	if start {
		sa.begun = true
	}
	sa.next = max(sa.next, i+1) // this one is looked up by the caller
	return nil, start
}

// take returns the next name to look up ahead and marks it in flight; a
// nil channel when there is none.
func (sa *statAhead) take() (string, chan struct{}) {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	if sa.next >= len(sa.names) {
		return "", nil
	}
	name := sa.names[sa.next]
	sa.next++
	ch := make(chan struct{})
	sa.flight[name] = ch
	return name, ch
}

// done ends the lookup ahead of name.
func (sa *statAhead) done(name string, ch chan struct{}) {
	sa.mu.Lock()
	delete(sa.flight, name)
	sa.mu.Unlock()
	close(ch)
}

// getattr is called by a GETATTR of name, a regular file of sa's page: it
// waits for a glimpse ahead of name in flight, and starts the glimpses
// ahead of the files after it once GETATTRs come in page order.
func (sa *statAhead) getattr(ctx context.Context, m *mount, cred client.Cred, name string) {
	wait, start := sa.noteGetattr(name)
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
			for sa.ctx.Err() == nil && sa.glimpsing() {
				name, ch := sa.takeGlimpse()
				if ch == nil {
					return
				}
				gctx, cancel := context.WithTimeout(bg, statAheadTimeout)
				stop := context.AfterFunc(sa.ctx, cancel)
				// The entry is cached by the kernel's lookups (or the
				// lookups ahead); Lookup with the size glimpses a regular
				// file, and keeps what the glimpse learnt.
				a, err := m.fs.Lookup(gctx, cred, sa.parent, name)
				stop()
				cancel()
				if err == nil && a.Mode&syscall.S_IFMT == syscall.S_IFREG {
					sa.glimpsed(m.fs.SizeHeld(a.FID))
				}
				sa.doneGlimpse(name, ch)
				if err == nil {
					m.glimpsesAhead.Add(1)
				} else if sa.ctx.Err() == nil {
					m.log.Debug("llite: glimpse ahead failed", "parent", sa.parent, "name", name, "err", err)
				}
			}
		})
	}
}

// noteGetattr records a GETATTR of name: wait is the glimpse ahead of
// name in flight, if any; start says the glimpses ahead are to begin now.
func (sa *statAhead) noteGetattr(name string) (wait chan struct{}, start bool) {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	i, ok := sa.index[name]
	if !ok {
		return nil, false
	}
	if ch := sa.gflight[name]; ch != nil {
		return ch, false
	}
	if i > sa.glast {
		sa.ghits++ // in page order (directories between files have none)
	}
	sa.glast = i
	start = !sa.gbegun && sa.ghits >= 2
	if start {
		sa.gbegun = true
	}
	sa.gnext = max(sa.gnext, i+1) // this one the caller glimpses
	return nil, start
}

// takeGlimpse returns the next name to glimpse ahead and marks it in
// flight; a nil channel when there is none.
func (sa *statAhead) takeGlimpse() (string, chan struct{}) {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	if sa.gnext >= len(sa.names) {
		return "", nil
	}
	name := sa.names[sa.gnext]
	sa.gnext++
	ch := make(chan struct{})
	sa.gflight[name] = ch
	return name, ch
}

// doneGlimpse ends the glimpse ahead of name.
func (sa *statAhead) doneGlimpse(name string, ch chan struct{}) {
	sa.mu.Lock()
	delete(sa.gflight, name)
	sa.mu.Unlock()
	close(ch)
}
