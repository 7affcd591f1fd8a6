package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/jobstats"
	"github.com/nacrefs/nacre/ldlm"
)

// MaxJobSeries caps the job ids a target exports as metric series (the
// busiest by bytes): job ids come from clients, and a series per job
// would let them grow a scrape without bound.
const MaxJobSeries = 100

// RegisterMetrics registers the server's live statistics with reg:
// per-opcode service and queue time histograms of its PtlRPC services, and
// a collector reading the targets (requests, bytes, grants, exports,
// per-job bytes), their lock servers (granted, waiting, callbacks) and
// LNet (credits, health, traffic) at each scrape.
func (s *Storage) RegisterMetrics(reg prometheus.Registerer) error {
	svcTime := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "nacre_ptlrpc_service_seconds", Help: "Time a request spent in its handler.",
		Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10)}, []string{"service", "opcode"})
	queueTime := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "nacre_ptlrpc_queue_seconds", Help: "Time a request waited for a handler.",
		Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10)}, []string{"service"})
	for _, c := range []prometheus.Collector{svcTime, queueTime, &storageCollector{s: s}} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("server: metrics: %w", err)
		}
	}
	observe := func(name string, svc *ptlrpc.Service) {
		q := queueTime.WithLabelValues(name)
		svc.SetObserver(func(op wire.Opcode, service, queue time.Duration) {
			svcTime.WithLabelValues(name, op.String()).Observe(service.Seconds())
			q.Observe(queue.Seconds())
		})
	}
	if s.OSS != nil {
		observe("ost_io", s.OSS.Service())
	}
	if s.MDS != nil {
		observe("mdt", s.MDS.Service())
	}
	return nil
}

// ServeMetrics serves reg's metrics at http://addr/metrics until ctx ends;
// it returns the address it listens on.
func ServeMetrics(ctx context.Context, addr string, reg *prometheus.Registry) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("server: metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}()
	go func() {
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return
		}
	}()
	return l.Addr().String(), nil
}

// storageCollector reads a Storage's counters at each scrape.
type storageCollector struct{ s *Storage }

var (
	descOSTOps      = prometheus.NewDesc("nacre_ost_requests_total", "Requests an OST served, by opcode.", []string{"target", "opcode"}, nil)
	descOSTBytes    = prometheus.NewDesc("nacre_ost_bytes_total", "Bulk bytes an OST read or wrote.", []string{"target", "direction"}, nil)
	descOSTGrant    = prometheus.NewDesc("nacre_ost_granted_bytes", "Space clients hold as grant.", []string{"target"}, nil)
	descOSTExports  = prometheus.NewDesc("nacre_target_exports", "Clients connected to a target.", []string{"target"}, nil)
	descOSTNoSpace  = prometheus.NewDesc("nacre_ost_nospace_total", "Writes refused with ENOSPC.", []string{"target"}, nil)
	descJobBytes    = prometheus.NewDesc("nacre_job_bytes_total", "Bytes read or written per job id (the busiest jobs of each target).", []string{"target", "job", "direction"}, nil)
	descJobOps      = prometheus.NewDesc("nacre_job_requests_total", "Metadata operations per job id (the busiest jobs of each MDT).", []string{"target", "job", "op"}, nil)
	descMDTOpens    = prometheus.NewDesc("nacre_mdt_open_files", "Open handles on an MDT.", []string{"target"}, nil)
	descMDTDestroys = prometheus.NewDesc("nacre_mdt_pending_destroys", "Objects of removed files waiting to be destroyed.", []string{"target"}, nil)
	descLocks       = prometheus.NewDesc("nacre_ldlm_locks", "Locks of a lock server, by state.", []string{"namespace", "state"}, nil)
	descLockASTs    = prometheus.NewDesc("nacre_ldlm_callbacks_total", "Callbacks a lock server sent, by kind.", []string{"namespace", "kind"}, nil)
	descLockTimeout = prometheus.NewDesc("nacre_ldlm_callback_timeouts_total", "Locks not given back in time (each evicted its holder).", []string{"namespace"}, nil)
	descSvcQueued   = prometheus.NewDesc("nacre_ptlrpc_queued_requests", "Requests waiting for a handler.", []string{"service"}, nil)
	descSvcThreads  = prometheus.NewDesc("nacre_ptlrpc_threads", "Handler threads running.", []string{"service"}, nil)
	descSvcHPQueued = prometheus.NewDesc("nacre_ptlrpc_hp_queued_requests", "High-priority requests (lock cancels) waiting for a handler.", []string{"service"}, nil)
	descSvcHPThread = prometheus.NewDesc("nacre_ptlrpc_hp_threads", "Handler threads of high-priority requests.", []string{"service"}, nil)
	descSvcReqs     = prometheus.NewDesc("nacre_ptlrpc_requests_total", "Requests handled, by opcode.", []string{"service", "opcode"}, nil)
	descSvcErrs     = prometheus.NewDesc("nacre_ptlrpc_request_errors_total", "Requests answered with an error, by opcode.", []string{"service", "opcode"}, nil)
	descNICredits   = prometheus.NewDesc("nacre_lnet_ni_credits", "Send credits left on a local NI (negative: messages waiting).", []string{"nid"}, nil)
	descNIHealth    = prometheus.NewDesc("nacre_lnet_ni_health", "Health of a local NI (1000: nothing went wrong).", []string{"nid"}, nil)
	descNIBytes     = prometheus.NewDesc("nacre_lnet_ni_bytes_total", "Payload bytes sent and received on a local NI.", []string{"nid", "direction"}, nil)
	descPeerHealth  = prometheus.NewDesc("nacre_lnet_peer_health", "Health of a peer NI.", []string{"peer"}, nil)
	descPeerCredits = prometheus.NewDesc("nacre_lnet_peer_credits", "Credits left for a peer NI.", []string{"peer"}, nil)
)

func (c *storageCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *storageCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if s.OSS != nil {
		for _, o := range s.OSS.OSTs() {
			name := o.Target().Name()
			st := o.Stats()
			for op, n := range st.Ops {
				counter(descOSTOps, n, name, op.String())
			}
			counter(descOSTBytes, st.ReadBytes.Sum, name, "read")
			counter(descOSTBytes, st.WriteBytes.Sum, name, "write")
			gauge(descOSTGrant, float64(st.Granted), name)
			gauge(descOSTExports, float64(len(o.Target().Exports())), name)
			counter(descOSTNoSpace, st.NoSpace, name)
			collectJobs(ch, name, o.JobStats())
			lockMetrics(ch, "filter-"+name, o.LockServer().Stats())
		}
		svcMetrics(ch, "ost_io", s.OSS.Service().Stats())
	}
	if s.MDS != nil {
		for _, m := range s.MDS.MDTs() {
			st := m.Stats()
			gauge(descMDTOpens, float64(st.Opens), m.Name())
			gauge(descMDTDestroys, float64(st.PendingDestroys), m.Name())
			gauge(descOSTExports, float64(len(m.Target().Exports())), m.Name())
			collectMDTJobs(ch, m.Name(), m.JobStats())
			lockMetrics(ch, "mdt-"+m.Name(), m.LockServer().Stats())
		}
		svcMetrics(ch, "mdt", s.MDS.Service().Stats())
	}
	if s.LNet != nil {
		ls := s.LNet.Stats()
		for _, ni := range ls.NIs {
			nid := ni.NID.String()
			gauge(descNICredits, float64(ni.Credits), nid)
			gauge(descNIHealth, float64(ni.Health), nid)
			counter(descNIBytes, ni.SendBytes, nid, "send")
			counter(descNIBytes, ni.RecvBytes, nid, "recv")
		}
		for i, p := range ls.Peers {
			if i == 4*MaxJobSeries {
				break // bounded like the job series
			}
			gauge(descPeerHealth, float64(p.Health), p.NID.String())
			gauge(descPeerCredits, float64(p.Credits), p.NID.String())
		}
	}
}

// collectJobs exports the busiest MaxJobSeries jobs of a target.
func collectJobs(ch chan<- prometheus.Metric, target string, js *jobstats.Stats) {
	jobs := js.Jobs()
	bytes := func(j jobstats.Job) uint64 { return j.Ops["read_bytes"].Sum + j.Ops["write_bytes"].Sum }
	sort.Slice(jobs, func(i, k int) bool { return bytes(jobs[i]) > bytes(jobs[k]) })
	for i, j := range jobs {
		if i == MaxJobSeries {
			break
		}
		ch <- prometheus.MustNewConstMetric(descJobBytes, prometheus.CounterValue, float64(j.Ops["read_bytes"].Sum), target, j.ID, "read")
		ch <- prometheus.MustNewConstMetric(descJobBytes, prometheus.CounterValue, float64(j.Ops["write_bytes"].Sum), target, j.ID, "write")
	}
}

// collectMDTJobs exports the MaxJobSeries jobs of an MDT with the most
// operations.
func collectMDTJobs(ch chan<- prometheus.Metric, target string, js *jobstats.Stats) {
	jobs := js.Jobs()
	ops := func(j jobstats.Job) (n uint64) {
		for _, c := range j.Ops {
			n += c.Samples
		}
		return n
	}
	sort.Slice(jobs, func(i, k int) bool { return ops(jobs[i]) > ops(jobs[k]) })
	for i, j := range jobs {
		if i == MaxJobSeries {
			break
		}
		for op, c := range j.Ops {
			ch <- prometheus.MustNewConstMetric(descJobOps, prometheus.CounterValue, float64(c.Samples), target, j.ID, op)
		}
	}
}

func lockMetrics(ch chan<- prometheus.Metric, ns string, st ldlm.ServerStats) {
	ch <- prometheus.MustNewConstMetric(descLocks, prometheus.GaugeValue, float64(st.Namespace.Granted), ns, "granted")
	ch <- prometheus.MustNewConstMetric(descLocks, prometheus.GaugeValue, float64(st.Namespace.Waiting), ns, "waiting")
	ch <- prometheus.MustNewConstMetric(descLockASTs, prometheus.CounterValue, float64(st.BlockingASTs), ns, "blocking")
	ch <- prometheus.MustNewConstMetric(descLockASTs, prometheus.CounterValue, float64(st.CompletionASTs), ns, "completion")
	ch <- prometheus.MustNewConstMetric(descLockASTs, prometheus.CounterValue, float64(st.GlimpseASTs), ns, "glimpse")
	ch <- prometheus.MustNewConstMetric(descLockTimeout, prometheus.CounterValue, float64(st.CallbackTimeouts), ns)
}

func svcMetrics(ch chan<- prometheus.Metric, name string, st ptlrpc.ServiceStats) {
	ch <- prometheus.MustNewConstMetric(descSvcQueued, prometheus.GaugeValue, float64(st.Queued), name)
	ch <- prometheus.MustNewConstMetric(descSvcThreads, prometheus.GaugeValue, float64(st.Threads), name)
	ch <- prometheus.MustNewConstMetric(descSvcHPQueued, prometheus.GaugeValue, float64(st.HPQueued), name)
	ch <- prometheus.MustNewConstMetric(descSvcHPThread, prometheus.GaugeValue, float64(st.HPThreads), name)
	for op, o := range st.Ops {
		ch <- prometheus.MustNewConstMetric(descSvcReqs, prometheus.CounterValue, float64(o.Count), name, op.String())
		ch <- prometheus.MustNewConstMetric(descSvcErrs, prometheus.CounterValue, float64(o.Errors), name, op.String())
	}
}
