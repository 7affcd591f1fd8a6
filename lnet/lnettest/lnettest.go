// Package lnettest starts LNet nodes on loopback TCP for the tests of the
// layers above LNet (PtlRPC users: LDLM, OSS, MDS, client), so each does
// not carry its own copy.
package lnettest

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
)

// Quiet is a logger that drops everything, for tests.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// nextPort starts at a random place so test binaries running in parallel
// rarely try the same ports. Ports stay below Linux's ephemeral range
// (32768-60999), where outgoing connections could take them between the
// check and the bind.
var nextPort atomic.Int32

const (
	firstPort = 10000
	lastPort  = 32767
)

func init() { nextPort.Store(int32(firstPort + rand.IntN(lastPort-firstPort))) }

// FreePort returns a TCP port that is free on every address given, for
// socklnd nodes that must share one acceptor port.
func FreePort(t testing.TB, addrs ...string) int {
	t.Helper()
	for range 200 {
		port := int(nextPort.Add(1))
		if port > lastPort {
			nextPort.Store(firstPort)
			continue
		}
		ok := true
		for _, a := range addrs {
			l, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("lnettest: no free port")
	return 0
}

// Config is an LNet config for one socklnd NI on addr (an IPv4 loopback
// address) with acceptor port port, a 5 s transaction timeout, and quiet
// logs.
func Config(addr string, port int) lnet.Config {
	cfg := lnet.DefaultConfig()
	cfg.Logger = Quiet
	cfg.TransactionTimeout = 5 * time.Second
	nc, err := lnet.ParseNetworks("tcp(" + addr + ")")
	if err != nil {
		panic(err)
	}
	nc[0].Options = map[string]string{"port": strconv.Itoa(port)}
	cfg.Networks = nc
	return cfg
}

// Start starts an LNet node on addr:port (the socklnd driver must be linked
// into the test) and closes it when the test ends.
func Start(t testing.TB, addr string, port int) *lnet.LNet {
	t.Helper()
	return StartConfig(t, Config(addr, port))
}

// StartConfig starts an LNet node with cfg and closes it when the test
// ends.
func StartConfig(t testing.TB, cfg lnet.Config) *lnet.LNet {
	t.Helper()
	ln, err := lnet.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ln.Close(ctx)
	})
	return ln
}
