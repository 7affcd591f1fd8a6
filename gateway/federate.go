package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"
)

// The cluster's metrics: /metrics on the gateway is its own process's
// metrics and every server's, scraped from their status ports at each
// request (nothing is kept between scrapes), each series labelled with
// instance="HOST:PORT" of the process it came from, and
// nacre_federation_up{instance} saying whether a server answered.

// Bounds of a federated scrape.
const (
	// ScrapeTimeout bounds one server's answer.
	ScrapeTimeout = 5 * time.Second
	// maxScrapeBytes bounds one server's metrics.
	maxScrapeBytes = 32 << 20
	// maxConcurrentScrapes bounds the servers scraped at once.
	maxConcurrentScrapes = 16
	// instanceLabel names the process a series came from; a series that
	// has one already keeps it as exported_instance.
	instanceLabel = "instance"
)

// federation serves the cluster's metrics.
type federation struct {
	own     prometheus.Gatherer
	self    string
	servers func(context.Context) ([]string, error)
	http    *http.Client
	log     *slog.Logger
}

func (f *federation) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fams, err := f.gather(r.Context())
	if err != nil {
		http.Error(w, "metrics: "+err.Error(), http.StatusInternalServerError)
		return
	}
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	w.Header().Set("Content-Type", string(format))
	enc := expfmt.NewEncoder(w, format)
	for _, mf := range fams {
		if err := enc.Encode(mf); err != nil {
			f.log.Info("metrics: write", "err", err)
			return
		}
	}
}

// gather merges the gateway's families and every server's, by name.
func (f *federation) gather(ctx context.Context) ([]*dto.MetricFamily, error) {
	own, err := f.own.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather own metrics: %w", err)
	}
	byName := map[string]*dto.MetricFamily{}
	add := func(instance string, fams []*dto.MetricFamily) {
		for _, mf := range fams {
			for _, m := range mf.GetMetric() {
				setInstance(m, instance)
			}
			have := byName[mf.GetName()]
			switch {
			case have == nil:
				byName[mf.GetName()] = mf
			case have.GetType() != mf.GetType():
				f.log.Info("metrics: family with two types", "family", mf.GetName(), "instance", instance)
			default:
				have.Metric = append(have.Metric, mf.GetMetric()...)
			}
		}
	}
	add(f.self, own)
	var addrs []string
	if f.servers != nil {
		if addrs, err = f.servers(ctx); err != nil {
			// The resource database is out: still the gateway's own.
			f.log.Info("metrics: servers unknown", "err", err)
		}
	}
	results := make([][]*dto.MetricFamily, len(addrs))
	errs := make([]error, len(addrs))
	sem := make(chan struct{}, maxConcurrentScrapes)
	var wg sync.WaitGroup
	for i, addr := range addrs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i], errs[i] = f.scrape(ctx, addr)
		})
	}
	wg.Wait()
	up := &dto.MetricFamily{Name: proto.String("nacre_federation_up"), Help: proto.String("Whether a server's metrics were scraped (1) or not (0) by the gateway's /metrics."),
		Type: dto.MetricType_GAUGE.Enum()}
	for i, addr := range addrs {
		v := 1.0
		if errs[i] != nil {
			v = 0
			f.log.Info("metrics: server not scraped", "server", addr, "err", errs[i])
		} else {
			add(addr, results[i])
		}
		up.Metric = append(up.Metric, &dto.Metric{Label: []*dto.LabelPair{{Name: proto.String(instanceLabel), Value: proto.String(addr)}},
			Gauge: &dto.Gauge{Value: proto.Float64(v)}})
	}
	if len(up.Metric) > 0 {
		byName[up.GetName()] = up
	}
	out := make([]*dto.MetricFamily, 0, len(byName))
	for _, mf := range byName {
		out = append(out, mf)
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

// scrape reads a server's metrics.
func (f *federation) scrape(ctx context.Context, addr string) ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, ScrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := f.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, maxScrapeBytes))
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	out := make([]*dto.MetricFamily, 0, len(fams))
	for _, mf := range fams {
		out = append(out, mf)
	}
	return out, nil
}

// setInstance labels m with the process it came from.
func setInstance(m *dto.Metric, instance string) {
	for _, l := range m.GetLabel() {
		if l.GetName() == instanceLabel {
			l.Name = proto.String("exported_" + instanceLabel)
		}
	}
	m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(instanceLabel), Value: proto.String(instance)})
	slices.SortFunc(m.Label, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
}
