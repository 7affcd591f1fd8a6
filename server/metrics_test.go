package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/jobstats"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/server"
)

// TestMetrics: a server's metrics, scraped over real HTTP and parsed by
// Prometheus's text parser, show a known workload: the bytes a job wrote
// (per target and per job id), OST_WRITE in the service histograms, the
// clients connected, LNet's NI.
func TestMetrics(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	st := c.Servers()[0]
	reg := prometheus.NewRegistry()
	if err := st.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr, err := server.ServeMetrics(ctx, "127.0.0.1:0", reg)
	if err != nil {
		t.Fatal(err)
	}
	fs := c.Mount(0)
	lay := layout.Plain(layout.RAID0{StripeCount: 2, StripeSize: 1 << 20, StripeOffset: -1})
	f, _, err := fs.Create(ctx, client.Root(), fs.Root(), "m", syscall.O_RDWR|syscall.O_CREAT, 0o644, &client.CreateOptions{Layout: &lay})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4 << 20
	if _, _, err := f.WriteAt(jobstats.WithJob(ctx, "metrics.42"), make([]byte, n), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, body)
	}
	sum := func(name string, match map[string]string) (float64, int) {
		var v float64
		k := 0
		for _, m := range fams[name].GetMetric() {
			ok := true
			for ln, lv := range match {
				if label(m, ln) != lv {
					ok = false
				}
			}
			if !ok {
				continue
			}
			k++
			switch {
			case m.Counter != nil:
				v += m.Counter.GetValue()
			case m.Gauge != nil:
				v += m.Gauge.GetValue()
			case m.Histogram != nil:
				v += float64(m.Histogram.GetSampleCount())
			}
		}
		return v, k
	}
	if v, k := sum("nacre_ost_bytes_total", map[string]string{"direction": "write"}); v != n || k != 2 {
		t.Fatalf("nacre_ost_bytes_total write: %v over %d targets, want %d over 2", v, k, n)
	}
	if v, _ := sum("nacre_job_bytes_total", map[string]string{"job": "metrics.42", "direction": "write"}); v != n {
		t.Fatalf("nacre_job_bytes_total for metrics.42: %v, want %d", v, n)
	}
	if v, _ := sum("nacre_ptlrpc_service_seconds", map[string]string{"service": "ost_io", "opcode": "OST_WRITE"}); v < 2 {
		t.Fatalf("OST_WRITE in the service histogram: %v", v)
	}
	if v, _ := sum("nacre_target_exports", map[string]string{"target": "nacre-MDT0000"}); v < 1 {
		t.Fatalf("MDT exports: %v", v)
	}
	if v, _ := sum("nacre_ptlrpc_hp_threads", map[string]string{"service": "ost_io"}); v != 2 {
		t.Fatalf("ost_io's high-priority threads: %v, want 2 (the lock cancels' own)", v)
	}
	for _, name := range []string{"nacre_lnet_ni_credits", "nacre_ldlm_locks", "nacre_ptlrpc_queued_requests", "nacre_ptlrpc_hp_queued_requests", "nacre_ost_granted_bytes"} {
		if _, k := sum(name, nil); k == 0 {
			t.Fatalf("no %s series", name)
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
