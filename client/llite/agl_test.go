package llite_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/ldlm"
)

// ostLockStats sums the lock servers' counters of the OSTs served in the
// test's process.
func ostLockStats(c *clustertest.Cluster) (st ldlm.ServerStats) {
	for _, s := range c.Servers() {
		if s.OSS == nil {
			continue
		}
		for _, o := range s.OSS.OSTs() {
			x := o.LockServer().Stats()
			st.Enqueues += x.Enqueues
			st.GlimpseASTs += x.GlimpseASTs
			st.GlimpseLocks += x.GlimpseLocks
			st.BlockingASTs += x.BlockingASTs
		}
	}
	return st
}

// writeFiles makes dir with n files, f0 to f<n-1>, file i of i+1 bytes.
func writeFiles(t *testing.T, dir string, n int) {
	t.Helper()
	mkdir(t, dir, 0o755)
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), bytes.Repeat([]byte{'x'}, i+1), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAGLWriterHoldsLocks: b wrote the files of a directory and keeps its
// write locks (as a running job does, or any client that wrote and did not
// need its locks back): no glimpse of a's can be granted as a lock, so a
// glimpse ahead leaves nothing cached and a's GETATTR glimpses the file
// again. Each file of an `ls -l` on a should cost one glimpse (one glimpse
// AST to b), as before AGL, not two.
func TestAGLWriterHoldsLocks(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, Clients: 3})
	a := mountT(t, c, 0)
	b := mountT(t, c, 1)
	const n = 100
	writeFiles(t, filepath.Join(b.Dir(), "w"), n)
	before := ostLockStats(c)
	out, err := exec.Command("ls", "-ln", filepath.Join(a.Dir(), "w")).CombinedOutput()
	if err != nil {
		t.Fatalf("ls -l: %v: %s", err, out)
	}
	after := ostLockStats(c)
	asts, locks, enq := after.GlimpseASTs-before.GlimpseASTs, after.GlimpseLocks-before.GlimpseLocks, after.Enqueues-before.Enqueues
	t.Logf("ls -l of %d files: %d glimpse ASTs to the writer, %d glimpses granted as locks, %d enqueues on the OSTs", n, asts, locks, enq)
	// One glimpse per file, as before AGL, plus at most a probe of the
	// glimpses ahead (a batch of workers).
	if asts > n+16 {
		t.Errorf("ls -l of %d files another client writes cost %d glimpse ASTs to that client (want about %d: one glimpse per file)", n, asts, n)
	}
}

// TestAGLWriterGone: the writer gave its locks back (unmounted): the
// glimpses ahead are granted as locks, and each file is glimpsed once.
func TestAGLWriterGone(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, Clients: 3})
	a := mountT(t, c, 0)
	b := mountT(t, c, 1)
	const n = 100
	writeFiles(t, filepath.Join(b.Dir(), "w"), n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Unmount(ctx); err != nil {
		t.Fatal(err)
	}
	before, g := ostLockStats(c), a.GlimpsesAhead()
	out, err := exec.Command("ls", "-ln", filepath.Join(a.Dir(), "w")).CombinedOutput()
	if err != nil {
		t.Fatalf("ls -l: %v: %s", err, out)
	}
	after := ostLockStats(c)
	t.Logf("ls -l of %d files: %d glimpsed ahead, %d glimpse locks, %d enqueues", n, a.GlimpsesAhead()-g, after.GlimpseLocks-before.GlimpseLocks, after.Enqueues-before.Enqueues)
	if ahead := a.GlimpsesAhead() - g; ahead < n/2 {
		t.Errorf("%d of %d files glimpsed ahead", ahead, n)
	}
}
