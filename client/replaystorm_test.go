package client_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/clustertest"
)

// stormModel is the namespace the storm's clients were told they made:
// every change acknowledged, whatever the MDT has committed. Each entry
// is changed only by the client that made it, and no directory is
// removed, so the clients' changes commute and the model is the same in
// any order they went in.
type stormModel struct {
	mu      sync.Mutex
	entries map[string]*stormNode // path from the root → what it names
	dirs    []string              // every directory, for anyone to create in
}

// stormNode is a file, directory or symlink; a file's hard links share
// one node.
type stormNode struct {
	kind   uint32 // S_IFREG, S_IFDIR, S_IFLNK
	mode   uint32 // permission bits
	target string // a symlink's
	xattr  []byte // trusted.storm, nil if none
	fid    client.FID
}

// stormClient is one client's part of the storm: what it made.
type stormClient struct {
	fs    *client.FS
	name  string
	files []string // paths of its files' links (each may share a node)
	dirs  []string
	// private are directories only it creates in (empty ones go again);
	// with how many entries.
	private map[string]int
	seq     int
}

func (m *stormModel) put(p string, n *stormNode) {
	m.mu.Lock()
	m.entries[p] = n
	if n.kind == syscall.S_IFDIR {
		m.dirs = append(m.dirs, p)
	}
	m.mu.Unlock()
}

func (m *stormModel) get(p string) *stormNode {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.entries[p]
}

func (m *stormModel) anyDir(r *rand.Rand) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dirs[r.IntN(len(m.dirs))]
}

// lookupPath resolves p (from the root) on fs.
func lookupPath(ctx context.Context, fs *client.FS, p string) (client.Attr, error) {
	a, err := fs.Getattr(ctx, client.Root(), fs.Root())
	for _, name := range splitPath(p) {
		if err != nil {
			return a, err
		}
		a, err = fs.Lookup(ctx, client.Root(), a.FID, name)
	}
	return a, err
}

func splitPath(p string) []string {
	var out []string
	for p != "" && p != "." {
		d, f := path.Split(p)
		out = append([]string{f}, out...)
		p = path.Clean(d)
		if p == "/" || d == "" {
			break
		}
	}
	return out
}

// step makes one random change on c's behalf and records it in m.
func (c *stormClient) step(ctx context.Context, t *testing.T, m *stormModel, r *rand.Rand) {
	root := client.Root()
	c.seq++
	name := fmt.Sprintf("%s-%d", c.name, c.seq)
	// Where a new entry goes: one of c's directories, or anyone's (a
	// change that depends on another client's).
	dir := c.dirs[r.IntN(len(c.dirs))]
	if r.IntN(3) == 0 {
		dir = m.anyDir(r)
	}
	parent := func(p string) client.FID {
		t.Helper()
		a, err := lookupPath(ctx, c.fs, p)
		if err != nil {
			t.Fatalf("%s: lookup %s: %v", c.name, p, err)
		}
		return a.FID
	}
	op := r.IntN(12)
	if len(c.files) == 0 {
		op = r.IntN(5) // nothing to unlink, rename, link or change yet
	}
	if op >= 10 { // a private directory: made, or removed if empty, or a file moved in
		c.private2(ctx, t, m, r, name, parent)
		return
	}
	switch {
	case op < 1: // mkdir
		p := path.Join(dir, name)
		a, err := c.fs.Mkdir(ctx, root, parent(dir), name, 0o755)
		if err != nil {
			t.Fatalf("%s: mkdir %s: %v", c.name, p, err)
		}
		c.dirs = append(c.dirs, p)
		m.put(p, &stormNode{kind: syscall.S_IFDIR, mode: 0o755, fid: a.FID})
	case op < 4: // a file
		p := path.Join(dir, name)
		a, err := c.fs.Mknod(ctx, root, parent(dir), name, syscall.S_IFREG|0o640, 0)
		if err != nil {
			t.Fatalf("%s: mknod %s: %v", c.name, p, err)
		}
		c.files = append(c.files, p)
		m.put(p, &stormNode{kind: syscall.S_IFREG, mode: 0o640, fid: a.FID})
	case op < 5: // a symlink
		p := path.Join(dir, name)
		target := fmt.Sprintf("../%s/%d", c.name, r.Uint32())
		if _, err := c.fs.Symlink(ctx, root, parent(dir), name, target); err != nil {
			t.Fatalf("%s: symlink %s: %v", c.name, p, err)
		}
		m.put(p, &stormNode{kind: syscall.S_IFLNK, mode: 0o777, target: target})
	case op < 6: // unlink one of its links
		i := r.IntN(len(c.files))
		p := c.files[i]
		if err := c.fs.Unlink(ctx, root, parent(path.Dir(p)), path.Base(p)); err != nil {
			t.Fatalf("%s: unlink %s: %v", c.name, p, err)
		}
		c.files = slices.Delete(c.files, i, i+1)
		m.mu.Lock()
		delete(m.entries, p)
		m.mu.Unlock()
	case op < 7: // rename one of its links, to a new name or over another of its links
		i := r.IntN(len(c.files))
		p, np := c.files[i], path.Join(dir, name)
		over := -1
		if j := r.IntN(len(c.files)); r.IntN(2) == 0 && m.get(c.files[j]) != m.get(p) {
			over, np = j, c.files[j] // (rename of one link of a file over another is a no-op)
		}
		if err := c.fs.Rename(ctx, root, parent(path.Dir(p)), path.Base(p), parent(path.Dir(np)), path.Base(np), 0); err != nil {
			t.Fatalf("%s: rename %s %s: %v", c.name, p, np, err)
		}
		m.mu.Lock()
		m.entries[np] = m.entries[p]
		delete(m.entries, p)
		m.mu.Unlock()
		if over >= 0 {
			c.files = slices.Delete(c.files, i, i+1)
		} else {
			c.files[i] = np
		}
	case op < 8: // hard link
		p, np := c.files[r.IntN(len(c.files))], path.Join(dir, name)
		n := m.get(p)
		if _, err := c.fs.Link(ctx, root, n.fid, parent(dir), name); err != nil {
			t.Fatalf("%s: link %s %s: %v", c.name, p, np, err)
		}
		c.files = append(c.files, np)
		m.put(np, n)
	case op < 9: // chmod
		p := c.files[r.IntN(len(c.files))]
		n := m.get(p)
		mode := uint32(0o600 | r.IntN(0o100))
		if _, err := c.fs.Setattr(ctx, root, n.fid, client.SetAttr{Valid: mdc.AttrMode, Mode: mode}); err != nil {
			t.Fatalf("%s: chmod %s: %v", c.name, p, err)
		}
		m.mu.Lock()
		n.mode = mode
		m.mu.Unlock()
	default: // xattr
		p := c.files[r.IntN(len(c.files))]
		n := m.get(p)
		v := fmt.Appendf(nil, "%s %d", c.name, r.Uint64())
		if err := c.fs.Setxattr(ctx, root, n.fid, "trusted.storm", v, 0); err != nil {
			t.Fatalf("%s: setxattr %s: %v", c.name, p, err)
		}
		m.mu.Lock()
		n.xattr = v
		m.mu.Unlock()
	}
}

// private2 makes a private directory, removes an empty one, or moves one
// of c's files into one (a rename whose replay needs the mkdir before it,
// and makes the rmdir after it fail if replayed out of order).
func (c *stormClient) private2(ctx context.Context, t *testing.T, m *stormModel, r *rand.Rand, name string, parent func(string) client.FID) {
	root := client.Root()
	var empty, any []string
	for _, d := range slices.Sorted(maps.Keys(c.private)) {
		any = append(any, d)
		if c.private[d] == 0 {
			empty = append(empty, d)
		}
	}
	switch {
	case len(any) == 0 || r.IntN(3) == 0:
		p := path.Join(c.name, "p"+name)
		a, err := c.fs.Mkdir(ctx, root, parent(c.name), "p"+name, 0o700)
		if err != nil {
			t.Fatalf("%s: mkdir %s: %v", c.name, p, err)
		}
		c.private[p] = 0
		m.mu.Lock()
		m.entries[p] = &stormNode{kind: syscall.S_IFDIR, mode: 0o700, fid: a.FID}
		m.mu.Unlock()
	case len(empty) > 0 && r.IntN(2) == 0:
		p := empty[r.IntN(len(empty))]
		if err := c.fs.Rmdir(ctx, root, parent(c.name), path.Base(p)); err != nil {
			t.Fatalf("%s: rmdir %s: %v", c.name, p, err)
		}
		delete(c.private, p)
		m.mu.Lock()
		delete(m.entries, p)
		m.mu.Unlock()
	case len(c.files) > 0:
		d := any[r.IntN(len(any))]
		i := r.IntN(len(c.files))
		p, np := c.files[i], path.Join(d, name)
		if err := c.fs.Rename(ctx, root, parent(path.Dir(p)), path.Base(p), parent(d), name, 0); err != nil {
			t.Fatalf("%s: rename %s %s: %v", c.name, p, np, err)
		}
		if n, ok := c.private[path.Dir(p)]; ok {
			c.private[path.Dir(p)] = n - 1
		}
		c.private[d]++
		c.files[i] = np
		m.mu.Lock()
		m.entries[np] = m.entries[p]
		delete(m.entries, p)
		m.mu.Unlock()
	}
}

// TestReplayStorm: three clients make some hundreds of random namespace
// changes at once — directories, files, symlinks, unlinks, renames,
// hard links, chmods, xattrs; a third of them in the other clients' new
// directories — all after a replay barrier, so that the MDS restarted
// from it has lost every one, and the clients replay them, interleaved.
// After recovery a new client finds exactly what the clients were told:
// every name, type, mode, symlink target, link count and xattr.
func TestReplayStorm(t *testing.T) { replayStorm(t, false) }

// TestReplayStormRestartInRecovery: the same, but the MDS fails again
// in the middle of recovery — two clients back and replaying, what they
// replayed so far committed, the third not back yet — and the clients
// replay what is left to its third life. Nothing may be taken for
// committed that was not made.
func TestReplayStormRestartInRecovery(t *testing.T) { replayStorm(t, true) }

func replayStorm(t *testing.T, again bool) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, ChildMDS: true, RecoveryWindow: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root := client.Root()
	m := &stormModel{entries: map[string]*stormNode{}}
	var clients []*stormClient
	for i := range 3 {
		fs := c.Mount(i)
		sc := &stormClient{fs: fs, name: fmt.Sprint("c", i), private: map[string]int{}}
		a, err := fs.Mkdir(ctx, root, fs.Root(), sc.name, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		sc.dirs = []string{sc.name}
		m.put(sc.name, &stormNode{kind: syscall.S_IFDIR, mode: 0o755, fid: a.FID})
		clients = append(clients, sc)
	}
	if err := c.ReplayBarrierMDS(ctx); err != nil {
		t.Fatal(err)
	}
	const steps = 150
	var wg sync.WaitGroup
	// With again, the late client starts once the others are half done:
	// their first changes, replayed in the second life before its first,
	// are committed there.
	half := make(chan struct{})
	for i, sc := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 42))
			if again && i == 2 {
				<-half
			}
			for k := range steps {
				if i == 0 && k == steps/2 {
					close(half)
				}
				sc.step(ctx, t, m, r)
				if t.Failed() {
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if again {
		late := clients[2].fs
		client.SetNoImperativeRecovery(late) // back only when it asks
		t.Cleanup(func() { client.SetNoImperativeRecovery(nil) })
		if err := c.FailMDS(); err != nil {
			t.Fatal(err)
		}
		for _, sc := range clients[:2] {
			_ = backAfterRestart(ctx, sc.fs) // they wait for the late one
			waitReplaying(t, sc.fs)
		}
		time.Sleep(300 * time.Millisecond) // their replays run up to the late one's first
		if late.MDCState() != ptlrpc.StateFull {
			t.Fatalf("the late client is %v: back before its time", late.MDCState())
		}
		st, err := c.MDSParam(ctx, "mdt.nacre-MDT0000.recovery_status")
		if err != nil {
			t.Fatal(err)
		}
		var replayed int
		if _, err := fmt.Sscanf(st[strings.Index(st, "replayed_requests:"):], "replayed_requests: %d", &replayed); err != nil ||
			!strings.HasPrefix(st, "status: RECOVERING\n") || replayed < 100 || !strings.Contains(st, "\nqueued_requests: 2\n") {
			t.Fatalf("recovery before the second failure, want 100 replays or more made and two waiting for the late client's:\n%s", st)
		}
		t.Logf("the MDS fails again in recovery:\n%s", st)
		if err := c.ReplayBarrierMDS(ctx); err != nil { // commits what was replayed
			t.Fatal(err)
		}
		client.SetNoImperativeRecovery(nil)
	}
	if err := c.FailMDS(); err != nil {
		t.Fatal(err)
	}
	for _, sc := range clients { // each back and done replaying
		if _, err := sc.fs.FID2Path(ctx, root, sc.fs.Root()); err != nil {
			t.Fatal(err)
		}
	}
	fresh := c.Mount(len(clients)) // nothing cached
	got := map[string]client.Attr{}
	var walk func(dir string, d client.FID)
	walk = func(dir string, d client.FID) {
		for cookie := uint64(0); cookie != client.DirEnd; {
			ents, next, err := fresh.ReadDir(ctx, root, d, cookie, 0)
			if err != nil {
				t.Fatalf("readdir %q: %v", dir, err)
			}
			for _, e := range ents {
				if e.Name == "." || e.Name == ".." {
					continue
				}
				a, err := fresh.Lookup(ctx, root, d, e.Name)
				if err != nil {
					t.Fatalf("lookup %s in %q: %v", e.Name, dir, err)
				}
				p := path.Join(dir, e.Name)
				got[p] = a
				if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
					walk(p, a.FID)
				}
			}
			cookie = next
		}
	}
	walk("", fresh.Root())
	for _, p := range slices.Sorted(maps.Keys(m.entries)) {
		if _, ok := got[p]; !ok {
			t.Errorf("%s lost", p)
		}
	}
	links := map[*stormNode]uint32{}
	for _, n := range m.entries {
		links[n]++
	}
	for _, p := range slices.Sorted(maps.Keys(got)) {
		a, n := got[p], m.entries[p]
		switch {
		case n == nil:
			t.Errorf("%s: there, never made (or unlinked, renamed)", p)
			continue
		case a.Mode&syscall.S_IFMT != n.kind || a.Mode&0o7777 != n.mode:
			t.Errorf("%s: mode %o, want %o", p, a.Mode, n.kind|n.mode)
		case n.kind == syscall.S_IFREG && a.Nlink != links[n]:
			t.Errorf("%s: %d links, want %d", p, a.Nlink, links[n])
		case n.kind != syscall.S_IFLNK && a.FID != n.fid:
			t.Errorf("%s: FID %v, want %v", p, a.FID, n.fid)
		}
		switch n.kind {
		case syscall.S_IFLNK:
			if target, err := fresh.Readlink(ctx, root, a.FID); err != nil || target != n.target {
				t.Errorf("%s: symlink to %q (%v), want %q", p, target, err, n.target)
			}
		case syscall.S_IFREG:
			v, err := fresh.Getxattr(ctx, root, a.FID, "trusted.storm")
			if n.xattr == nil && err == nil || n.xattr != nil && (err != nil || !bytes.Equal(v, n.xattr)) {
				t.Errorf("%s: xattr %q (%v), want %q", p, v, err, n.xattr)
			}
		}
	}
	t.Logf("%d entries after %d changes replayed", len(got), steps*len(clients))
}
