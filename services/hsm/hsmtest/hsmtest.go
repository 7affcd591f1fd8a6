// Package hsmtest runs HSM coordinators and copytool agents for the tests
// of the packages that use them.
package hsmtest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/etcdserver/etcdtest"
	"github.com/nacrefs/nacre/services/hsm"
	"github.com/nacrefs/nacre/services/hsm/posix"
)

// Coord is one coordinator instance serving on its own address.
type Coord struct {
	C    *hsm.Coordinator
	Addr string
	Stop func()
	// Etcd is the etcd client the coordinators share.
	Etcd *clientv3.Client
}

// StartCoordinators starts n coordinators sharing one etcd (one leads, the
// others stand by); timeout is their active_request_timeout.
func StartCoordinators(t testing.TB, n int, timeout time.Duration) ([]*Coord, []string) {
	t.Helper()
	ec := etcdtest.Start(t, 1)
	var out []*Coord
	var addrs []string
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg := hsm.DefaultConfig()
		cfg.Etcd, cfg.Name, cfg.ActiveRequestTimeout, cfg.SessionTTL = ec.Client(), lis.Addr().String(), timeout, 1
		cfg.Logger = clustertest.Quiet
		cfg.MaxRequests = 4
		c, err := hsm.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		c.Register(s)
		go s.Serve(lis)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Run(ctx)
		}()
		var once sync.Once
		co := &Coord{C: c, Addr: lis.Addr().String(), Etcd: ec.Client(), Stop: func() {
			once.Do(func() {
				cancel()
				<-done
				s.Stop()
			})
		}}
		t.Cleanup(co.Stop)
		out = append(out, co)
		addrs = append(addrs, co.Addr)
	}
	return out, addrs
}

// StartAgent runs a POSIX copytool agent for archive 1 on fsys, archiving
// under root, until the returned stop is called (or the test ends). wrap,
// if not nil, wraps its handler.
func StartAgent(t testing.TB, fsys *client.FS, addrs []string, uuid, root string, wrap func(hsm.Handler) hsm.Handler) (stop func()) {
	t.Helper()
	ct, err := posix.New(posix.Config{FS: fsys, Root: root, Logger: clustertest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	hc, err := hsm.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	var h hsm.Handler = ct
	if wrap != nil {
		h = wrap(ct)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		hsm.RunAgent(ctx, hsm.AgentConfig{Client: hc, UUID: uuid, ArchiveIDs: []uint32{1}, MaxRequests: 4, Handler: h, Logger: clustertest.Quiet})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			hc.Close()
		})
	}
	t.Cleanup(stop)
	return stop
}
