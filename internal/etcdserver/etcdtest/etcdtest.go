// Package etcdtest runs real embedded etcd members for tests: one member for
// most tests, three for quorum tests, each killable and restartable.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/nacrefs/nacre/internal/etcdserver"
)

// Cluster is a set of embedded members on loopback.
type Cluster struct {
	t       testing.TB
	mu      sync.Mutex
	members []etcdserver.Member
	servers []*etcdserver.Server // nil while a member is stopped
}

// Start starts an n-member cluster whose data lives in t.TempDir() and which
// is stopped when the test ends.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	// A port found free may be taken before the member binds it (tests of
	// other packages pick ports at the same time): then the cluster
	// starts again on other ports, in a new directory.
	const tries = 5
	for try := 1; ; try++ {
		c, err := start(t, n)
		if err == nil {
			t.Cleanup(c.Close)
			return c
		}
		if !errors.Is(err, syscall.EADDRINUSE) || try == tries {
			t.Fatal(err)
		}
		t.Logf("etcdtest: %v; starting again on other ports", err)
	}
}

// start starts the members of an n-member cluster, or none.
func start(t testing.TB, n int) (*Cluster, error) {
	c := &Cluster{t: t, servers: make([]*etcdserver.Server, n)}
	dir := t.TempDir()
	for i := 0; i < n; i++ {
		cu, err := etcdserver.FreeLoopbackURL()
		if err != nil {
			return nil, err
		}
		pu, err := etcdserver.FreeLoopbackURL()
		if err != nil {
			return nil, err
		}
		c.members = append(c.members, etcdserver.Member{Name: fmt.Sprintf("m%d", i), Dir: fmt.Sprintf("%s/m%d", dir, i), ClientURL: cu, PeerURL: pu})
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range c.members {
		wg.Go(func() { errs[i] = c.start(i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(i int) error {
	cfg := etcdserver.Config{Member: c.members[i], Peers: c.members, Token: "nacre-test", LogLevel: "error", StartTimeout: 60 * time.Second}
	s, err := etcdserver.Start(context.Background(), cfg)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.servers[i] = s
	c.mu.Unlock()
	return nil
}

// Endpoints are the client URLs of every member, running or not.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.ClientURL
	}
	return out
}

// Client returns a client of every member, closed when the test ends.
func (c *Cluster) Client() *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli
}

// Stop kills member i (its data stays).
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Close()
	}
}

// Restart starts a stopped member i again on its old data. With the others
// of a quorum stopped too, it returns when enough members are back: call it
// from several goroutines, or use RestartAll.
func (c *Cluster) Restart(i int) error { return c.start(i) }

// RestartAll restarts the given stopped members at once so they can form a
// quorum together.
func (c *Cluster) RestartAll(idx ...int) {
	c.t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(idx))
	for j, i := range idx {
		wg.Go(func() { errs[j] = c.start(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.t.Fatal(err)
		}
	}
}

// Close stops every member.
func (c *Cluster) Close() {
	for i := range c.servers {
		c.Stop(i)
	}
}
