package ptlrpc

import (
	"context"
	"testing"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

func benchTmp(b *testing.B, mode string, k int) {
	e := sockEnv(b)
	ts := NewTargetSet()
	tgt, _ := ts.NewTarget(TargetConfig{Name: "bench", AutoCommit: true, Logger: quiet})
	defer tgt.Close(context.Background())
	s, _ := NewService(e.srv, ServiceConfig{Name: "bench", RequestPortal: reqPortal, MinThreads: 8, Targets: ts, Logger: quiet,
		Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: echo, Flags: NoExport}, opInc: {Fn: echo}}})
	defer s.Close(context.Background())
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
	ctx := context.Background()
	call := func() error {
		_, err := c.Call(ctx, e.target, reqPortal, opEcho, nil)
		return err
	}
	if mode == "import" {
		imp, _ := c.NewImport(ImportConfig{Target: "bench", Servers: []lwire.ProcessID{e.target}, Portal: reqPortal})
		defer imp.Close(context.Background())
		req := &Req{Opcode: opInc}
		call = func() error {
			_, err := imp.Do(ctx, req)
			return err
		}
	}
	for range 100 {
		call()
	}
	b.ResetTimer()
	inFlight(b, b.N, k, call)
}

func BenchmarkTmpImport64(b *testing.B) { benchTmp(b, "import", 64) }
func BenchmarkTmpNone64(b *testing.B)   { benchTmp(b, "none", 64) }
func BenchmarkTmpImport1(b *testing.B)  { benchTmp(b, "import", 1) }
func BenchmarkTmpNone1(b *testing.B)    { benchTmp(b, "none", 1) }
