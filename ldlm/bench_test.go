package ldlm

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkEnqueueCancel measures an uncontended enqueue and cancel, one
// lock on its own resource (created and freed each time), for every lock
// type. It reports, from the same run, the ratio to the cheapest thing a
// lock table can do: inserting a handle into a map and deleting it.
func BenchmarkEnqueueCancel(b *testing.B) {
	base := mapBaseline()
	reqs := []Request{
		{Resource: Resource{ResID{1}, TypePlain}, Mode: PR, Owner: "c"},
		{Resource: Resource{ResID{1}, TypeExtent}, Mode: PW, Owner: "c", Policy: Policy{Extent: Extent{0, 4095}}},
		{Resource: Resource{ResID{1}, TypeIBits}, Mode: PR, Owner: "c", Policy: Policy{Bits: BitLookup | BitUpdate}},
		{Resource: Resource{ResID{1}, TypeFlock}, Mode: PW, Owner: "c", Policy: Policy{Extent: Extent{0, 99}, FlockOwner: 1}},
	}
	for _, req := range reqs {
		b.Run(req.Resource.Type.String(), func(b *testing.B) {
			ns := mustNew(b, DefaultConfig())
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				r, err := ns.Enqueue(req)
				if err != nil || r.Lock.State != Granted {
					b.Fatalf("enqueue: %v %v", r.Lock.State, err)
				}
				if _, err := ns.Cancel(r.Lock.Handle, req.Owner); err != nil {
					b.Fatal(err)
				}
			}
			if base > 0 {
				perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				b.ReportMetric(perOp/base, "x-vs-map")
			}
		})
	}
}

// mapBaseline times a map insert and delete of a handle, in nanoseconds.
// (testing.Benchmark cannot run inside a benchmark, so it is timed here.)
func mapBaseline() float64 {
	const n = 1 << 20
	m := make(map[Handle]*lock)
	l := &lock{}
	start := time.Now()
	for i := 0; i < n; i++ {
		m[Handle(i)] = l
		delete(m, Handle(i))
	}
	return float64(time.Since(start).Nanoseconds()) / n
}

// BenchmarkEnqueueCancelShared measures enqueue and cancel of a reader on a
// resource that already holds n compatible readers (each enqueue scans the
// granted queue).
func BenchmarkEnqueueCancelShared(b *testing.B) {
	for _, n := range []int{1, 16, 256} {
		b.Run(fmt.Sprint("readers=", n), func(b *testing.B) {
			ns := mustNew(b, DefaultConfig())
			res := Resource{ResID{1}, TypeExtent}
			for i := 0; i < n; i++ {
				if _, err := ns.Enqueue(Request{Resource: res, Mode: PR, Owner: Owner(fmt.Sprint("r", i)),
					Policy: Policy{Extent: Extent{0, 4095}}}); err != nil {
					b.Fatal(err)
				}
			}
			req := Request{Resource: res, Mode: PR, Owner: "c", Policy: Policy{Extent: Extent{8192, 12287}}}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				r, err := ns.Enqueue(req)
				if err != nil || r.Lock.State != Granted {
					b.Fatalf("enqueue: %v %v", r.Lock.State, err)
				}
				if _, err := ns.Cancel(r.Lock.Handle, req.Owner); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
