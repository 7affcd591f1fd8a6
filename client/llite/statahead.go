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
