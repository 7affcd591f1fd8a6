package llite

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nacrefs/nacre/client"
)

// notifier is the mount's client.Notifier: it passes the library's
// invalidations on to the kernel's caches, from worker goroutines of its
// own (see doc.go). Its methods never block for long and are safe for
// concurrent use.
type notifier struct {
	log   *slog.Logger
	meta  chan metaEvent  // attribute and entry invalidations
	data  chan client.FID // files whose pages go
	stopc chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	// metaLost and dataLost say a queue overflowed: everything the kernel
	// knows goes once the queue drained.
	metaLost, dataLost atomic.Bool

	mu struct {
		sync.Mutex
		srv     *fuse.Server // nil until the kernel has the mount
		root    *fs.Inode
		rootFID client.FID
		// pending are the data invalidations queued and not started, by
		// file: closed when done.
		pending map[client.FID]chan struct{}
		// io counts the FUSE reads and writes in progress per file.
		io map[client.FID]int
		// negs are the negative entries given to the kernel (rawFS.Lookup)
		// and not invalidated since, at most maxKernelNegatives: go-fuse's
		// tree has no node for them, so invalidateAll goes through these.
		negs map[negKey]struct{}
	}
}

type negKey struct {
	parent uint64 // the kernel's node ID
	name   string
}

// maxKernelNegatives bounds the negative entries the kernel is given; past
// it a missing name is answered without one.
const maxKernelNegatives = 2048

var _ client.Notifier = (*notifier)(nil)

type metaEvent struct {
	entry  bool // else attributes
	fid    client.FID
	parent client.FID
	name   string
}

const (
	queueLen = 4096
	// dataWait bounds how long a lock callback waits for the kernel to
	// drop a file's pages.
	dataWait    = 500 * time.Millisecond
	dataWorkers = 2
)

func newNotifier(lg *slog.Logger) *notifier {
	n := &notifier{log: lg, meta: make(chan metaEvent, queueLen), data: make(chan client.FID, queueLen), stopc: make(chan struct{})}
	n.mu.pending = make(map[client.FID]chan struct{})
	n.mu.io = make(map[client.FID]int)
	n.wg.Go(n.metaWorker)
	for range dataWorkers {
		n.wg.Go(n.dataWorker)
	}
	return n
}

// start points the notifier at the kernel's mount.
func (n *notifier) start(srv *fuse.Server, root *fs.Inode, rootFID client.FID) {
	n.mu.Lock()
	n.mu.srv, n.mu.root, n.mu.rootFID = srv, root, rootFID
	n.mu.Unlock()
}

// stop ends the workers (the mount is gone).
func (n *notifier) stop() {
	n.once.Do(func() {
		close(n.stopc)
		n.mu.Lock()
		n.mu.srv = nil
		n.mu.Unlock()
	})
	n.wg.Wait()
}

func (n *notifier) server() (*fuse.Server, client.FID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.srv, n.mu.rootFID
}

// InvalidateAttr implements client.Notifier.
func (n *notifier) InvalidateAttr(f client.FID) { n.push(metaEvent{fid: f}) }

// keepNegative records that the kernel gets a negative entry for name in
// the directory with node ID parent, and reports whether it may (room
// left). Its invalidation, or an overflow's invalidateAll, forgets it.
func (n *notifier) keepNegative(parent uint64, name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := negKey{parent, name}
	if _, ok := n.mu.negs[k]; ok {
		return true
	}
	if len(n.mu.negs) >= maxKernelNegatives {
		return false
	}
	if n.mu.negs == nil {
		n.mu.negs = make(map[negKey]struct{})
	}
	n.mu.negs[k] = struct{}{}
	return true
}

// madeName forgets a negative entry of the kernel's that a name this
// mount made (a create, mkdir, mknod, symlink, link or rename into the
// directory with node ID parent) replaced: no invalidation comes for it
// (see client.FS's makingName), and kept it would count against
// maxKernelNegatives for good.
func (n *notifier) madeName(parent uint64, name string) {
	n.mu.Lock()
	delete(n.mu.negs, negKey{parent, name})
	n.mu.Unlock()
}

// InvalidateEntry implements client.Notifier.
func (n *notifier) InvalidateEntry(parent client.FID, name string) {
	n.push(metaEvent{entry: true, parent: parent, name: name})
}

func (n *notifier) push(e metaEvent) {
	select {
	case n.meta <- e:
	default:
		n.metaLost.Store(true)
	}
}

// InvalidateData implements client.Notifier: the kernel drops f's pages
// (all of them: the library reports whole objects), and the caller waits
// for that, briefly, unless a read or write of f is in progress here.
func (n *notifier) InvalidateData(f client.FID, _, _ int64) {
	done, wait := n.queueData(f)
	if !wait {
		return
	}
	t := time.NewTimer(dataWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		n.log.Debug("page invalidation still waiting for the kernel", "fid", f)
	case <-n.stopc:
	}
}

// invalidateDataAsync queues f's pages to go without waiting.
func (n *notifier) invalidateDataAsync(f client.FID) { n.queueData(f) }

func (n *notifier) queueData(f client.FID) (done chan struct{}, wait bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.srv == nil {
		return nil, false // nothing in the kernel's cache yet, or any more
	}
	done = n.mu.pending[f]
	if done == nil {
		select {
		case n.data <- f:
			done = make(chan struct{})
			n.mu.pending[f] = done
		default:
			n.dataLost.Store(true)
			return nil, false
		}
	}
	return done, n.mu.io[f] == 0
}

// beginIO and endIO bracket a FUSE read or write of f (the kernel holds
// page locks of f meanwhile).
func (n *notifier) beginIO(f client.FID) {
	n.mu.Lock()
	n.mu.io[f]++
	n.mu.Unlock()
}

func (n *notifier) endIO(f client.FID) {
	n.mu.Lock()
	if n.mu.io[f]--; n.mu.io[f] <= 0 {
		delete(n.mu.io, f)
	}
	n.mu.Unlock()
}

func (n *notifier) metaWorker() {
	for {
		select {
		case <-n.stopc:
			return
		case e := <-n.meta:
			srv, root := n.server()
			if srv == nil {
				continue
			}
			var st fuse.Status
			if e.entry {
				id := nodeID(root, e.parent)
				n.mu.Lock()
				delete(n.mu.negs, negKey{id, e.name})
				n.mu.Unlock()
				st = srv.EntryNotify(id, e.name)
			} else {
				st = srv.InodeNotify(nodeID(root, e.fid), -1, 0)
			}
			n.logStatus(st, "invalidate", "fid", e.fid, "parent", e.parent, "name", e.name)
			if len(n.meta) == 0 && n.metaLost.Swap(false) {
				n.invalidateAll(false)
			}
		}
	}
}

func (n *notifier) dataWorker() {
	for {
		select {
		case <-n.stopc:
			return
		case f := <-n.data:
			n.mu.Lock()
			done := n.mu.pending[f]
			delete(n.mu.pending, f)
			srv, root := n.mu.srv, n.mu.rootFID
			n.mu.Unlock()
			if srv != nil {
				st := srv.InodeNotify(nodeID(root, f), 0, 0)
				n.logStatus(st, "invalidate pages", "fid", f)
			}
			if done != nil {
				close(done)
			}
			if len(n.data) == 0 && n.dataLost.Swap(false) {
				n.invalidateAll(true)
			}
		}
	}
}

func (n *notifier) logStatus(st fuse.Status, msg string, args ...any) {
	if st == fuse.OK || st == fuse.ENOENT || st == fuse.Status(syscall.ENOTCONN) || st == fuse.ENODEV {
		return // ENOENT: the kernel does not have it
	}
	if n.log.Enabled(context.Background(), slog.LevelDebug) {
		n.log.Debug(msg, append(args, "status", st)...)
	}
}

// invalidateAll drops what the kernel caches of every node it knows
// (those go-fuse's tree holds: every node the kernel has is reachable
// from the root): pages of regular files when data, else attributes
// and entries.
func (n *notifier) invalidateAll(data bool) {
	n.mu.Lock()
	srv, root := n.mu.srv, n.mu.root
	var negs map[negKey]struct{}
	if !data {
		negs, n.mu.negs = n.mu.negs, nil
	}
	n.mu.Unlock()
	if srv == nil {
		return
	}
	n.log.Info("invalidation queue overflowed: dropping the kernel's caches", "data", data)
	for k := range negs {
		srv.EntryNotify(k.parent, k.name)
	}
	seen := map[*fs.Inode]bool{root: true}
	stack := []*fs.Inode{root}
	for len(stack) > 0 {
		select {
		case <-n.stopc:
			return
		default:
		}
		in := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		id := in.StableAttr().Ino
		if in == root {
			id = fuse.FUSE_ROOT_ID
		}
		switch {
		case data && in.StableAttr().Mode == syscall.S_IFREG:
			srv.InodeNotify(id, 0, 0)
		case !data:
			srv.InodeNotify(id, -1, 0)
		}
		for name, ch := range in.Children() {
			if !data {
				srv.EntryNotify(id, name)
			}
			if !seen[ch] {
				seen[ch] = true
				stack = append(stack, ch)
			}
		}
	}
}
