package lnet_test

import (
	"context"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// BenchmarkPutLoopback measures PUTs of 64 KiB through 0@lo, waiting for
// each target event, against the one copy the loopback must make.
func BenchmarkPutLoopback(b *testing.B) {
	const size = 64 << 10
	ln, err := lnet.New(context.Background(), lnet.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close(context.Background())
	self := wire.ProcessID{NID: wire.LoNID, PID: ln.PID()}
	landed := make(chan struct{}, 1024)
	if _, err := ln.Attach(1, lnet.AnyProcess, 0, 0, lnet.InsertLast, lnet.MD{
		Buffers: [][]byte{make([]byte, size)}, Threshold: lnet.ThresholdInfinite,
		Options: lnet.MDOpPut | lnet.MDManageRemote,
		Handler: func(ev lnet.Event) {
			if ev.Type == lnet.EventPut {
				landed <- struct{}{}
			}
		},
	}); err != nil {
		b.Fatal(err)
	}
	src, _ := ln.Bind(lnet.MD{Buffers: [][]byte{make([]byte, size)}, Threshold: lnet.ThresholdInfinite})

	// Baseline: the copy alone.
	from, to := make([]byte, size), make([]byte, size)
	start := time.Now()
	for range b.N {
		copy(to, from)
	}
	copyTime := time.Since(start)

	b.SetBytes(size)
	b.ResetTimer()
	start = time.Now()
	const window = 64
	inflight := 0
	for range b.N {
		if inflight == window {
			<-landed
			inflight--
		}
		if err := ln.Put(context.Background(), src, lnet.NoAckReq, self, 1, 0, 0, 0); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for ; inflight > 0; inflight-- {
		<-landed
	}
	b.StopTimer()
	if copyTime > 0 {
		b.ReportMetric(float64(time.Since(start))/float64(copyTime), "x-vs-memcpy")
	}
}
