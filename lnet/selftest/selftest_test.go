package selftest

import (
	"context"
	"testing"
	"time"

	_ "github.com/nacrefs/nacre/lnd/lolnd"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

func newLNet(t *testing.T) *lnet.LNet {
	t.Helper()
	cfg := lnet.DefaultConfig()
	ln, err := lnet.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(context.Background()) })
	return ln
}

func TestRunOverLoopback(t *testing.T) {
	ln := newLNet(t)
	srv, err := Serve(ln)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	peer := wire.ProcessID{NID: wire.LoNID, PID: ln.PID()}
	for _, tc := range []Config{
		{Peer: peer, Op: OpWrite, Size: 64 << 10, Concurrency: 4, Duration: 300 * time.Millisecond},
		{Peer: peer, Op: OpRead, Size: wire.MTU, Concurrency: 2, Duration: 300 * time.Millisecond},
		{Peer: peer, Op: OpPing, Concurrency: 8, Duration: 300 * time.Millisecond},
	} {
		t.Run(string(tc.Op), func(t *testing.T) {
			r, err := Run(context.Background(), ln, tc)
			if err != nil {
				t.Fatal(err)
			}
			if r.Ops == 0 || r.Errors != 0 || r.Bytes != r.Ops*uint64(tc.Size) || r.RPCps <= 0 || r.P50 <= 0 || r.PMax < r.P99 {
				t.Fatalf("result %+v", r)
			}
		})
	}
}

func TestRunAgainstNoServer(t *testing.T) {
	ln := newLNet(t)
	ln.SetTransactionTimeout(200 * time.Millisecond)
	// Nothing is attached on the selftest portal: every write times out.
	r, err := Run(context.Background(), ln, Config{Peer: wire.ProcessID{NID: wire.LoNID, PID: ln.PID()}, Op: OpWrite, Size: 4096, Concurrency: 2, Duration: 700 * time.Millisecond})
	if err == nil || r.Ops != 0 || r.Errors == 0 {
		t.Fatalf("run without a server: %+v %v", r, err)
	}
}

func TestConfigValidate(t *testing.T) {
	peer := wire.ProcessID{NID: wire.LoNID}
	for _, c := range []Config{
		{Peer: peer, Op: "copy", Size: 1, Concurrency: 1, Duration: time.Second},
		{Peer: peer, Op: OpWrite, Size: 0, Concurrency: 1, Duration: time.Second},
		{Peer: peer, Op: OpWrite, Size: wire.MTU + 1, Concurrency: 1, Duration: time.Second},
		{Peer: peer, Op: OpRead, Size: 1, Concurrency: SlotCount + 1, Duration: time.Second},
		{Peer: peer, Op: OpPing, Concurrency: 1},
		{Op: OpPing, Concurrency: 1, Duration: time.Second},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
