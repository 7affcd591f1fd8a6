package mdt

import (
	"context"
	"fmt"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
)

// run runs op(worker, i) for i in [0, n) over k workers and returns the
// time taken.
func run(b *testing.B, n, k int, op func(w, i int) error) time.Duration {
	return runRange(b, 0, n, k, op)
}

// runRange runs op(worker, i) for i in [from, to) over k workers and
// returns the time taken.
func runRange(b *testing.B, from, to, k int, op func(w, i int) error) time.Duration {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	start := time.Now()
	for w := range k {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= to {
					return
				}
				if err := op(w, i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkMDTest is mdtest over socklnd: files created, stat'ed
// (lookup) and unlinked per second, in one shared directory and in a
// directory per thread, by 1, 4 and 16 client threads, each against
// PtlRPC null RPCs (OBD_PING on the same import) at the same concurrency
// in the same run, the two alternating in ten rounds (goals: stat ≥ 0.8, create ≥ 0.5 x-vs-nullrpc). With
// osts=4 each file gets one object from the precreated pools of an OSS
// with 4 osd-file OSTs in the same process, the pools warmed up for the
// run (so that creates measure the MDS, not how fast the OSTs precreate),
// and every run starts once the objects of the files unlinked before are
// destroyed; with osts=0 files get no objects.
func BenchmarkMDTest(b *testing.B) {
	for _, osts := range []int{0, 4} {
		b.Run(fmt.Sprintf("osts=%d", osts), func(b *testing.B) { benchMDTest(b, osts) })
	}
}

// warmPools waits until every OST's pool has refilled and holds need
// objects above its refill mark, so that no refill competes with a run
// that takes need objects or fewer from each.
func warmPools(b *testing.B, m *MDT, need int) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		full := true
		m.ospMu.Lock()
		for _, p := range m.osps {
			p.mu.Lock()
			if p.mu.filling || p.availLocked() < need+int(p.mu.high)/2 {
				full = false
				p.mu.filling = true // fill up to the aim now, not at the refill mark
			}
			high := int(p.mu.high)
			p.mu.Unlock()
			p.wake()
			if need > high/2 {
				// Not with the locks held: Fatal ends this goroutine, and
				// the cluster's cleanup needs them.
				m.ospMu.Unlock()
				b.Fatalf("a run of %d objects per OST drains the pools of %d below their refill mark: use -benchtime %dx or less",
					need, high, (high/2-64)*max(len(m.osps), 1))
			}
		}
		m.ospMu.Unlock()
		if full {
			return
		}
		if time.Now().After(deadline) {
			m.ospMu.Lock()
			for _, p := range m.osps {
				p.mu.Lock()
				b.Logf("%s: seq %#x taken %d last %d reserved %d ready %v high %d", p.ost.Name, p.mu.seq, p.mu.taken, p.mu.last, p.mu.reserved, p.mu.ready, p.mu.high)
				p.mu.Unlock()
			}
			m.ospMu.Unlock()
			b.Fatal("the pools do not fill up")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drainDestroys waits until the MDT's destroy log is empty: the objects
// of the files an earlier run unlinked are destroyed on the OSTs in the
// background, and would otherwise compete with the next run for the CPUs
// and the disk (as warmPools keeps the OSTs' precreation out of a run).
func drainDestroys(b *testing.B, m *MDT) {
	deadline := time.Now().Add(10 * time.Minute)
	for m.Stats().PendingDestroys > 0 {
		if time.Now().After(deadline) {
			b.Fatalf("the destroy log does not drain: %d records left", m.Stats().PendingDestroys)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func benchMDTest(b *testing.B, nOSTs int) {
	// Pools of 2048 objects: a run of up to 3840 creates takes them from
	// the pools without a refill. (More would not help on one machine:
	// osd-file keeps up to 4096 objects of each OST open, and four OSTs
	// in one process come close to the file descriptor limit.)
	c := newCluster(b, nOSTs, func(cfg *Config) {
		cfg.PrecreateMin, cfg.PrecreateMax = 2048, 2048
		cfg.SyncInterval = DefaultSyncInterval
	})
	n := c.client()
	ctx := context.Background()
	m := n.mdc
	// Every thread's request in flight at once, as the null RPCs (pings,
	// which the limit does not count) are: an administrator running 16
	// threads raises mdc.*.max_rpcs_in_flight (8) the same way.
	if err := n.imp.SetMaxRPCsInFlight(16); err != nil {
		b.Fatal(err)
	}
	for _, shared := range []bool{true, false} {
		mode := "private"
		if shared {
			mode = "shared"
		}
		for _, k := range []int{1, 4, 16} {
			dirs := make([]fid.FID, k)
			setup := func(tag string) {
				for w := range k {
					if w > 0 && shared {
						dirs[w] = dirs[0]
						continue
					}
					d, err := m.Mkdir(ctx, root, n.root, fmt.Sprintf("%s-%s-%d-%d-%d", mode, tag, k, w, time.Now().UnixNano()), 0o755)
					if err != nil {
						b.Fatal(err)
					}
					dirs[w] = d.FID
				}
			}
			name := func(i int) string { return fmt.Sprintf("file.%d", i) }
			create := func(w, i int) error { _, _, err := m.Create(ctx, root, dirs[w], name(i), 0o644, nil); return err }
			stat := func(w, i int) error { _, err := m.Lookup(ctx, root, dirs[w], name(i)); return err }
			unlink := func(w, i int) error { return m.Unlink(ctx, root, dirs[w], name(i)) }
			ping := func(int, int) error { return n.imp.Ping(ctx) }
			// In a private directory each thread finds the files it made:
			// file i of a phase belongs to thread i%k.
			byOwner := func(op func(w, i int) error) func(w, i int) error {
				if shared {
					return op
				}
				return func(_, i int) error { return op(i%k, i) }
			}
			report := func(b *testing.B, el, null time.Duration, s0, s1 ptlrpc.ServiceStats) {
				// The MDS's part of each operation's latency: mean time in
				// the handler and waiting for one.
				var svc, queue time.Duration
				for op, s := range s1.Ops {
					if op == wire.OBDPing {
						continue
					}
					svc += s.ServiceTime - s0.Ops[op].ServiceTime
					queue += s.QueueTime - s0.Ops[op].QueueTime
				}
				b.ReportMetric(float64(svc.Microseconds())/float64(b.N), "srv-µs/op")
				b.ReportMetric(float64(queue.Microseconds())/float64(b.N), "queue-µs/op")
				if st := n.pc.Stats(); st.Resent > 0 || st.Timeouts > 0 {
					b.Logf("client stats %+v", st)
				}
				rate, nullRate := float64(b.N)/el.Seconds(), float64(b.N)/null.Seconds()
				b.ReportMetric(rate, "ops/s")
				b.ReportMetric(nullRate, "nullrpc-ops/s")
				b.ReportMetric(rate/nullRate, "x-vs-nullrpc")
			}
			// measure runs the b.N operations of op and as many null RPCs
			// in ten alternating rounds (so that a drift in the machine's
			// speed weighs on both alike) and reports them.
			measure := func(b *testing.B, op func(w, i int) error) {
				drainDestroys(b, c.mdt)
				const rounds = 10
				s0 := c.srv.Service().Stats()
				b.StartTimer()
				var el, null time.Duration
				for r := range rounds {
					from, to := r*b.N/rounds, (r+1)*b.N/rounds
					if r%2 == 1 {
						null += runRange(b, from, to, k, ping)
					}
					el += runRange(b, from, to, k, op)
					if r%2 == 0 {
						null += runRange(b, from, to, k, ping)
					}
				}
				b.StopTimer()
				report(b, el, null, s0, c.srv.Service().Stats())
			}
			b.Run(fmt.Sprintf("%s/create/threads=%d", mode, k), func(b *testing.B) {
				setup("c")
				warmPools(b, c.mdt, b.N/max(nOSTs, 1)+64)
				b.ResetTimer()
				b.StopTimer()
				measure(b, byOwner(create))
			})
			b.Run(fmt.Sprintf("%s/stat/threads=%d", mode, k), func(b *testing.B) {
				b.StopTimer()
				setup("s")
				run(b, b.N, k, byOwner(create))
				measure(b, byOwner(stat))
			})
			b.Run(fmt.Sprintf("%s/unlink/threads=%d", mode, k), func(b *testing.B) {
				b.StopTimer()
				setup("u")
				run(b, b.N, k, byOwner(create))
				measure(b, byOwner(unlink))
			})
		}
	}
}
