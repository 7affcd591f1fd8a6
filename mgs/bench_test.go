package mgs

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkSetParam measures a persistent-parameter update (catalog check,
// filesystem check, etcd write) against its floor: a bare etcd Put of the
// same key and value on the same member, measured in the same run.
func BenchmarkSetParam(b *testing.B) {
	c := newBenchStore(b)
	ctx := context.Background()
	if _, err := c.s.CreateFilesystem(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	const rounds = 300
	start := time.Now()
	for i := 0; i < rounds; i++ {
		if _, err := c.cli.Put(ctx, c.s.paramKey("bench.OST0000.osc.max_dirty_mb"), fmt.Sprint(i%2000+1)); err != nil {
			b.Fatal(err)
		}
	}
	raw := time.Since(start) / rounds
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := c.s.SetParam(ctx, "bench.OST0000.osc.max_dirty_mb", fmt.Sprint(i%2000+1)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(raw)/float64(per), "x-vs-etcdput")
}

// BenchmarkRegisterTarget measures a registration (index choice, lease
// grant, guarded transaction, config snapshot) against a bare etcd Put.
func BenchmarkRegisterTarget(b *testing.B) {
	c := newBenchStore(b)
	ctx := context.Background()
	const rounds = 300
	start := time.Now()
	for i := 0; i < rounds; i++ {
		if _, err := c.cli.Put(ctx, c.s.prefix+"raw", "x"); err != nil {
			b.Fatal(err)
		}
	}
	raw := time.Since(start) / rounds
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		// A fresh filesystem every 100 targets keeps each snapshot small.
		if _, _, _, err := c.s.RegisterTarget(ctx, ost(fmt.Sprintf("b%d", i/100), nil, "10.0.0.1@tcp")); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(raw)/float64(per), "x-vs-etcdput")
}
