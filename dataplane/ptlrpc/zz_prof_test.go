package ptlrpc

import (
	"context"
	"testing"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

func BenchmarkZZImport1(b *testing.B) {
	e := sockEnv(b)
	ts := NewTargetSet()
	tgt, err := ts.NewTarget(TargetConfig{Name: "bench", AutoCommit: true, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer tgt.Close(context.Background())
	s, err := NewService(e.srv, ServiceConfig{Name: "bench", RequestPortal: reqPortal, MinThreads: 8, Targets: ts, Logger: quiet,
		Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: echo, Flags: NoExport}, opInc: {Fn: echo}}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal, Logger: quiet})
	ctx := context.Background()
	imp, err := c.NewImport(ImportConfig{Target: "bench", Servers: []lwire.ProcessID{e.target}, Portal: reqPortal})
	if err != nil {
		b.Fatal(err)
	}
	defer imp.Close(context.Background())
	req := &Req{Opcode: opInc}
	for range 100 {
		imp.Do(ctx, req)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := imp.Do(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

func BenchmarkZZRaw1(b *testing.B) {
	raw := newRawEcho(b, wire.HeaderSize)
	b.ResetTimer()
	el := raw.pingPong(b, b.N, 1)
	b.ReportMetric(float64(b.N)/el.Seconds(), "calls/s")
}
