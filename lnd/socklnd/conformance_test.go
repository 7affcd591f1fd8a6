package socklnd_test

import (
	"context"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/nacrefs/nacre/lnd/lolnd"
	_ "github.com/nacrefs/nacre/lnd/socklnd"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lndtest"
	"github.com/nacrefs/nacre/lnet/wire"
)

// confPort is the acceptor port of the current subtest's pair (a NID has no
// port, so both nodes of a pair share one). Subtests run one at a time.
var confPort atomic.Int32

func startLNet(t *testing.T, addr string, port int) *lnet.LNet {
	t.Helper()
	cfg := lnet.DefaultConfig()
	cfg.Networks = []lnet.NetConfig{{
		Net:   wire.Net{Type: wire.TCP},
		Addrs: []netip.Addr{netip.MustParseAddr(addr)},
		Options: map[string]string{"port": strconv.Itoa(port), "backoff_min": "20ms", "backoff_max": "200ms",
			"connect_timeout": "5s"},
	}}
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

// TestConformance runs the LND conformance suite over real TCP between
// 127.0.0.1 and 127.0.0.2, with a restart of the second node.
func TestConformance(t *testing.T) {
	confPort.Store(24000)
	lndtest.Run(t, lndtest.Harness{
		Name: "socklnd",
		Pair: func(t *testing.T) (a, b *lnet.LNet, bNID wire.NID) {
			port := int(confPort.Add(1))
			a = startLNet(t, "127.0.0.1", port)
			b = startLNet(t, "127.0.0.2", port)
			t.Cleanup(func() { confPort.Store(int32(port)) })
			return a, b, wire.MustParseNID("127.0.0.2@tcp")
		},
		Restart: func(t *testing.T, b *lnet.LNet) *lnet.LNet {
			port := int(confPort.Load())
			if err := b.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			return startLNet(t, "127.0.0.2", port)
		},
	})
}
