package mdt

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lnettest"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	"github.com/nacrefs/nacre/mds/mdd"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// childEnv tells the test binary to run as an MDS process:
// DIR,ADDR,PORT,OSSNID,NOSTS.
const childEnv = "NACRE_MDT_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

// crashCfg is the MDT config of the crash test's MDS: frequent commits
// and small pools, so that a kill meets every state; a short recovery
// window (each round's client is a new one, which replays nothing), in
// which unlinks leave orphans for its end.
func crashCfg(dir string, osts []OST) Config {
	return Config{Name: mdtName, UUID: "mdt0-uuid", Store: mdd.Config{Dir: dir, Logger: quiet}, OSTs: osts,
		SyncInterval: 50 * time.Millisecond, PrecreateMin: 8, PrecreateMax: 32, CallbackTimeout: 5 * time.Second, EvictTimeout: time.Minute,
		RecoveryWindow: 2 * time.Second}
}

// runChild serves an MDT until SIGTERM (a clean stop) or SIGKILL. It
// says "ready NID PID" once serving and "drained" once every OST's orphan
// cleanup has run, the recovery window has ended with the orphans nobody
// reopened destroyed, and the destroy log is empty.
func runChild(spec string) int {
	f := strings.Split(spec, ",")
	if len(f) != 5 {
		fmt.Println("bad spec", spec)
		return 2
	}
	port, _ := strconv.Atoi(f[2])
	nOSTs, _ := strconv.Atoi(f[4])
	nid, err := lwire.ParseNID(f[3])
	if err != nil {
		fmt.Println(err)
		return 2
	}
	ln, err := lnet.New(context.Background(), lnetConfig(f[1], port))
	if err != nil {
		fmt.Println("lnet:", err)
		return 2
	}
	srv, err := NewServer(ServerConfig{LNet: ln, Logger: quiet})
	if err != nil {
		fmt.Println("mds:", err)
		return 2
	}
	var osts []OST
	for i := range nOSTs {
		osts = append(osts, OST{Index: uint32(i), Name: ostLabel(i), Servers: []lwire.ProcessID{{NID: nid, PID: lwire.PIDLustre}}})
	}
	m, err := srv.AddMDT(crashCfg(f[0], osts))
	if err != nil {
		fmt.Println("mdt:", err)
		return 2
	}
	fmt.Printf("ready %s %d\n", ln.NIDs()[len(ln.NIDs())-1], ln.PID())
	go func() {
		for {
			time.Sleep(20 * time.Millisecond)
			ready := true
			m.ospMu.Lock()
			for _, p := range m.osps {
				p.mu.Lock()
				ready = ready && p.mu.ready
				p.mu.Unlock()
			}
			m.ospMu.Unlock()
			if !ready || m.tgt.Recovering() {
				continue
			}
			// Orphans first: their destroy records go to the log as they go.
			if o, err := m.store.Orphans(); err != nil || len(o) != 0 {
				continue
			}
			if m.Stats().PendingDestroys == 0 {
				fmt.Println("drained")
				return
			}
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Close(ctx); err != nil {
		fmt.Println("close:", err)
		return 1
	}
	ln.Close(ctx)
	return 0
}

// mdsChild is an MDS child process.
type mdsChild struct {
	cmd   *exec.Cmd
	id    lwire.ProcessID
	lines chan string
}

func startChild(t *testing.T, dir, addr string, port int, oss lwire.ProcessID, nOSTs int) *mdsChild {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d,%s,%d", childEnv, dir, addr, port, oss.NID, nOSTs))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ch := &mdsChild{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ch.lines <- sc.Text()
		}
		close(ch.lines)
	}()
	line := ch.wait(t, "ready")
	var nid string
	var pid uint32
	if _, err := fmt.Sscanf(line, "ready %s %d", &nid, &pid); err != nil {
		t.Fatalf("child said %q", line)
	}
	n, err := lwire.ParseNID(nid)
	if err != nil {
		t.Fatal(err)
	}
	ch.id = lwire.ProcessID{NID: n, PID: pid}
	return ch
}

// wait waits for a line of the child starting with prefix.
func (ch *mdsChild) wait(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-ch.lines:
			if !ok {
				t.Fatalf("the child exited before saying %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
			t.Logf("child: %s", l)
		case <-timeout:
			t.Fatalf("the child did not say %q", prefix)
		}
	}
}

// TestCrash kills the MDS process with SIGKILL during a storm of creates
// (with objects on 4 OSTs), unlinks, renames and mkdirs, twice, restarts
// it, and checks that the store passes Check, that every object a file
// names exists, and that once the destroy log has drained and the orphan
// cleanup has run no other object exists on the OSTs: none leaks.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	const nOSTs = 4
	addrs := []string{ossAddr}
	for i := range 6 {
		addrs = append(addrs, fmt.Sprintf("127.0.0.%d", 10+i), fmt.Sprintf("127.0.0.%d", clientBase+i))
	}
	port := lnettest.FreePort(t, addrs...)
	oss := startOSS(t, port, nOSTs, nil)
	dir := filepath.Join(t.TempDir(), "mdt")
	var ops atomic.Int64
	for round, delay := range []time.Duration{150 * time.Millisecond, 500 * time.Millisecond} {
		child := startChild(t, dir, fmt.Sprintf("127.0.0.%d", 10+round), port, oss.id, nOSTs)
		n := crashClient(t, port, clientBase+round, child.id)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() { storm(ctx, n, round, w, &ops) })
		}
		time.Sleep(delay)
		child.cmd.Process.Kill()
		child.cmd.Wait()
		cancel()
		wg.Wait()
		n.imp.Close(context.Background())
		t.Logf("round %d: killed after %v, %d operations so far", round, delay, ops.Load())
	}
	// Restart, let the orphan cleanup and the destroy log run, stop.
	child := startChild(t, dir, "127.0.0.15", port, oss.id, nOSTs)
	child.wait(t, "drained")
	child.cmd.Process.Signal(syscall.SIGTERM)
	if err := child.cmd.Wait(); err != nil {
		t.Fatalf("the MDS did not stop cleanly: %v", err)
	}

	s, err := mdd.Open(mdd.Config{Dir: dir, Now: time.Now, SeqWidth: mdd.DefaultSeqWidth, SuperWidth: mdd.DefaultSuperWidth,
		MaxInodes: 1 << 32, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatalf("Check after the crashes: %v", err)
	}
	if recs, _ := s.PendingDestroys(0, 10); len(recs) != 0 {
		t.Fatalf("destroy log not drained: %v", recs)
	}
	if o, _ := s.Orphans(); len(o) != 0 {
		t.Fatalf("orphans after restart: %v", o)
	}
	referenced := map[uint32]map[fid.FID]bool{}
	files := 0
	walkLayouts(t, s, mdd.RootFID, func(l layout.Layout) {
		files++
		for _, c := range l.Components {
			for _, o := range c.Objects {
				if referenced[o.OSTIndex] == nil {
					referenced[o.OSTIndex] = map[fid.FID]bool{}
				}
				referenced[o.OSTIndex][o.Object] = true
			}
		}
	})
	// Every object a file names exists.
	for ost, objs := range referenced {
		for f := range objs {
			if !oss.objectExists(t, ost, f) {
				t.Fatalf("object %v on OST%d of a surviving file is gone", f, ost)
			}
		}
	}
	// The pools' unused objects are the MDT's until its next start, whose
	// orphan cleanup destroys them: run it as the MDT would, then nothing
	// but the files' objects may exist.
	last := s.LastObjects()
	cli := ptlrpc.NewClient(lnettest.Start(t, fmt.Sprintf("127.0.0.%d", clientBase+5), port), ptlrpc.ClientConfig{ReplyPortal: ptlrpc.OSCReplyPortal, Logger: quiet})
	ctx := ctxT(t, time.Minute)
	extra := 0
	for ost := range uint32(nOSTs) {
		lo, ok := last[ost]
		if !ok {
			t.Fatalf("no last object for OST%d", ost)
		}
		imp, err := cli.NewImport(ptlrpc.ImportConfig{Target: ostLabel(int(ost)), Servers: []lwire.ProcessID{oss.id}, Portal: ptlrpc.OSTIOPortal, PingInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		for oid := lo.Oid + 1; oss.objectExists(t, ost, fid.FID{Seq: lo.Seq, Oid: oid}); oid++ {
			extra++
		}
		body, _ := proto.Marshal(&ostv1.CreateRequest{Seq: lo.Seq, DeleteOrphans: true, LastUsed: lo.Oid})
		if _, err := imp.Do(ctx, &ptlrpc.Req{Opcode: wire.OSTCreate, Body: body}); err != nil {
			t.Fatal(err)
		}
		imp.Close(ctx)
		for oid := uint32(1); oid <= lo.Oid+64; oid++ {
			f := fid.FID{Seq: lo.Seq, Oid: oid}
			if got, want := oss.objectExists(t, ost, f), referenced[ost][f]; got != want {
				t.Fatalf("OST%d object %v: exists %v, named by a file %v (last used %v)", ost, f, got, want, lo)
			}
		}
	}
	t.Logf("%d operations; %d files with objects survive; %d unused pool objects", ops.Load(), files, extra)
}

func crashClient(t *testing.T, port, host int, mds lwire.ProcessID) *node {
	n := &node{t: t, ln: lnettest.Start(t, fmt.Sprintf("127.0.0.%d", host), port)}
	n.pc = ptlrpc.NewClient(n.ln, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.MDCReplyPortal, Logger: quiet})
	icfg := mdc.ImportConfig(mdtName, mds)
	icfg.PingInterval, icfg.MinTimeout = -1, 500*time.Millisecond
	var err error
	if n.imp, err = n.pc.NewImport(icfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.imp.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	n.mdc = mdc.New(n.imp, nil)
	if n.root, err = n.mdc.GetRoot(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

// storm runs random namespace changes until ctx ends or the MDS stops
// answering.
func storm(ctx context.Context, n *node, round, w int, ops *atomic.Int64) {
	r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	dir, err := n.mdc.Mkdir(dctx, root, n.root, fmt.Sprintf("r%d-w%d", round, w), 0o755)
	cancel()
	if err != nil {
		return
	}
	var names []string
	layouts := []*mdc.CreateOptions{nil, {Layout: stripes(2, 1<<20, -1, "")}, {Layout: stripes(-1, 1<<20, -1, "")}}
	for i := 0; ; i++ {
		octx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var err error
		switch k := r.IntN(10); {
		case k < 5 || len(names) < 4:
			name := fmt.Sprintf("f%d", i)
			_, _, err = n.mdc.Create(octx, root, dir.FID, name, 0o644, layouts[r.IntN(len(layouts))])
			if err == nil {
				names = append(names, name)
			}
		case k < 7:
			j := r.IntN(len(names))
			err = n.mdc.Unlink(octx, root, dir.FID, names[j])
			names = append(names[:j], names[j+1:]...)
		case k < 9:
			// Rename, often over another file.
			j, o := r.IntN(len(names)), r.IntN(len(names))
			to := fmt.Sprintf("f%d", i)
			if j != o && r.IntN(2) == 0 {
				to = names[o]
			}
			err = n.mdc.Rename(octx, root, dir.FID, names[j], n.root, fmt.Sprintf("r%d-w%d-%s", round, w, to), 0)
			names = append(names[:j], names[j+1:]...)
		default:
			_, err = n.mdc.Mkdir(octx, root, dir.FID, fmt.Sprintf("d%d", i), 0o755)
		}
		cancel()
		if err != nil {
			var errno syscall.Errno
			if !errors.As(err, &errno) {
				return // the MDS is gone
			}
		}
		ops.Add(1)
	}
}

// walkLayouts calls fn with the layout of every regular file under d
// (once per file, whatever its links).
func walkLayouts(t *testing.T, s *mdd.Store, d fid.FID, fn func(layout.Layout)) {
	seen := map[fid.FID]bool{}
	var walk func(d fid.FID)
	walk = func(d fid.FID) {
		cookie := uint64(0)
		for cookie != mdd.DirEnd {
			ents, next, err := s.Readdir(mdd.Req{Cred: mdd.Root()}, d, cookie, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				switch {
				case e.Name == "." || e.Name == "..":
				case e.Type == mdd.DTDir:
					walk(e.FID)
				case e.Type == mdd.DTReg && !seen[e.FID]:
					seen[e.FID] = true
					if l, err := s.GetLayout(e.FID); err == nil {
						fn(l)
					} else if !errors.Is(err, syscall.ENODATA) {
						t.Fatal(err)
					}
				}
			}
			cookie = next
		}
	}
	walk(d)
}

// TestReplayBarrierStopsCommits: after a replay barrier the MDT tells its
// clients nothing more is committed, though its commits go on: a change
// after the barrier that a reply reported committed would be dropped from
// its client's replay list, and lost unreplayed once the store is put
// back as it was at the barrier.
func TestReplayBarrierStopsCommits(t *testing.T) {
	c := newCluster(t, 0, nil)
	n := c.client()
	ctx := ctxT(t, time.Minute)
	if _, err := n.mdc.Mkdir(ctx, root, n.root, "before", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.mdt.Store().ReplayBarrier(filepath.Join(t.TempDir(), "barrier")); err != nil {
		t.Fatal(err)
	}
	tgt := c.mdt.Target()
	barrier := tgt.LastCommitted()
	if barrier != tgt.LastTransno() {
		t.Fatalf("at the barrier: committed %d of %d", barrier, tgt.LastTransno())
	}
	if _, err := n.mdc.Mkdir(ctx, root, n.root, "after", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.mdt.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.mdc.Getattr(ctx, root, n.root); err != nil { // its reply says what is committed
		t.Fatal(err)
	}
	if got := tgt.LastCommitted(); got != barrier {
		t.Errorf("after the barrier the MDT reports %d committed, want %d (the barrier's)", got, barrier)
	}
	if un := n.imp.Uncommitted(); len(un) != 1 {
		t.Errorf("the client keeps %v for replay, want the change after the barrier", un)
	}
}
