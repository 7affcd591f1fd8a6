package llite

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/client"
)

// Statahead (Lustre's llite statahead and AGL, the part `ls -l` needs):
// when the kernel reads a directory with READDIRPLUS, go-fuse looks every
// entry of the page up in turn, one RPC after the other, and the kernel
// then asks each regular file's attributes, which glimpses its objects.
// Once the first entry of a page is looked up, the rest of the page is
// looked up ahead, a few at a time, so that go-fuse's lookups find the
// attributes cached (under the locks the lookups were granted, as any
// lookup's); the files are glimpsed ahead too, as long as the glimpses
// are granted locks that keep the sizes for the kernel's GETATTRs. A lookup of a name
// being looked up ahead waits for that one instead of asking again. What
// starts it is the first two entries of the page looked up in order, as
// READDIRPLUS (or `ls -l` after a plain READDIR) does; a lookup of some
// name of the page does not.

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
	// Glimpses ahead: tried counts the regular files glimpsed ahead, held
	// those whose sizes stayed cached under locks.
	tried, held int
}

// aglProbe is how many glimpses ahead of a page may find no lock before
// the rest of the page is looked up without: a file another client
// writes keeps its write locks, a glimpse behind them is not cached, and
// the kernel's GETATTR would glimpse again.
const aglProbe = 4

// glimpsing reports whether the next lookup ahead glimpses too (Lustre's
// AGL): while the first ones have not all come back without a lock.
func (sa *statAhead) glimpsing() bool {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	return sa.tried < aglProbe || sa.held > 0
}

// glimpsed records a lookup ahead that glimpsed: held says the size stayed
// cached under locks.
func (sa *statAhead) glimpsed(held bool) {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	sa.tried++
	if held {
		sa.held++
	}
}

// newStatAhead returns the lookups ahead of a page of parent's entries,
// which end with ctx.
func newStatAhead(ctx context.Context, parent client.FID, ents []client.DirEntry) *statAhead {
	sa := &statAhead{parent: parent, index: make(map[string]int, len(ents)), flight: make(map[string]chan struct{})}
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
				glimpse := sa.glimpsing()
				a, held, err := m.fs.LookupAhead(lctx, cred, sa.parent, name, glimpse) // (what it finds is cached)
				if glimpse && err == nil && a.Mode&syscall.S_IFMT == syscall.S_IFREG {
					sa.glimpsed(held)
				}
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
