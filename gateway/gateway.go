// Package gateway is Nacre's HTTP front: the Admin API as REST under /api/v1
// (grpc-gateway v2 over the in-process Admin server), the HSM coordinator's
// queue, agents and statistics under /api/v1/hsm, their OpenAPI document at
// /openapi.json, /healthz, Prometheus /metrics (the cluster's: its own and
// every server's, federated) and the web dashboard at /dashboard, with
// bearer-token auth on /api. It holds no state; every answer comes from the
// services behind it.
package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/nacrefs/nacre/gateway/openapi"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
	"github.com/nacrefs/nacre/services/auth"
)

// MaxBodyBytes bounds a REST request body.
const MaxBodyBytes = 1 << 20

// Config wires the gateway to the services it fronts.
type Config struct {
	Admin adminv1.AdminServer
	// HSM, if set, is the HSM coordinator served under /api/v1/hsm.
	HSM  hsmv1.CoordinatorServer
	Auth *auth.Authorizer
	// Healthz answers /healthz: nil error is 200, otherwise 503 with the message.
	Healthz func(context.Context) error
	// Gatherer is scraped at /metrics; Registerer receives the gateway's own metrics.
	Gatherer   prometheus.Gatherer
	Registerer prometheus.Registerer
	Logger     *slog.Logger

	// Servers, if not nil, lists the status ports of the cluster's
	// servers, whose metrics /metrics adds to the gateway's own, labelled
	// instance=HOST:PORT; Instance labels the gateway's own.
	Servers  func(context.Context) ([]string, error)
	Instance string
}

// New returns the gateway's handler.
func New(ctx context.Context, cfg Config) (http.Handler, error) {
	if cfg.Admin == nil || cfg.Auth == nil {
		return nil, fmt.Errorf("gateway: config needs Admin and Auth")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "gateway")
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
		runtime.WithRoutingErrorHandler(routingError),
	)
	if err := adminv1.RegisterAdminHandlerServer(ctx, gw, cfg.Admin); err != nil {
		return nil, fmt.Errorf("gateway: register admin handlers: %w", err)
	}
	if cfg.HSM != nil {
		if err := hsmv1.RegisterCoordinatorHandlerServer(ctx, gw, cfg.HSM); err != nil {
			return nil, fmt.Errorf("gateway: register hsm handlers: %w", err)
		}
	}

	m := newMetrics(cfg.Registerer)
	mux := http.NewServeMux()
	mux.Handle("/api/", authorize(cfg.Auth, gw, log))
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(openapi.Spec)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if cfg.Healthz != nil {
			if err := cfg.Healthz(r.Context()); err != nil {
				http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	switch {
	case cfg.Gatherer != nil && cfg.Servers != nil:
		mux.Handle("GET /metrics", &federation{own: cfg.Gatherer, self: cfg.Instance, servers: cfg.Servers,
			http: &http.Client{Timeout: ScrapeTimeout}, log: log})
	case cfg.Gatherer != nil:
		mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /dashboard", serveDashboard)
	return m.wrap(mux, log), nil
}

// authorize checks the bearer token of every /api request; GET and HEAD read,
// every other method changes state and needs role admin. Refusals are JSON
// in the same shape as the gateway's own errors.
func authorize(a *auth.Authorizer, next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mutating := r.Method != http.MethodGet && r.Method != http.MethodHead
		tok, err := a.Check(r.Header.Get("Authorization"), mutating)
		if err != nil {
			log.Info("request refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "err", status.Convert(err).Message())
			writeError(w, err)
			return
		}
		// Admin requests are small; a larger body is a mistake or an attack.
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		if mutating {
			log.Info("admin change", "method", r.Method, "path", r.URL.Path, "token", tok.Name, "remote", r.RemoteAddr)
		}
		next.ServeHTTP(w, r)
	})
}

// routingError answers a known path with an unknown method with 405 (the
// gateway's default says 501, as if the server could not do it at all).
func routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, code int) {
	if code == http.StatusMethodNotAllowed {
		writeErrorStatus(w, http.StatusMethodNotAllowed, codes.Unimplemented, "method "+r.Method+" is not allowed on "+r.URL.Path)
		return
	}
	runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, code)
}

func writeError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	if st.Code() == codes.Unauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="nacre"`)
	}
	writeErrorStatus(w, runtime.HTTPStatusFromCode(st.Code()), st.Code(), st.Message())
}

// writeErrorStatus writes an error in the gateway's JSON error shape.
func writeErrorStatus(w http.ResponseWriter, httpStatus int, code codes.Code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	json.NewEncoder(w).Encode(map[string]any{"code": int(code), "message": msg, "details": []any{}})
}

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "nacre", Subsystem: "gateway", Name: "requests_total",
			Help: "HTTP requests by method and status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "nacre", Subsystem: "gateway", Name: "request_seconds",
			Help: "HTTP request latency by method.", Buckets: prometheus.DefBuckets,
		}, []string{"method"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency)
	}
	return m
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (m *metrics) wrap(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		m.requests.WithLabelValues(r.Method, strconv.Itoa(sw.code)).Inc()
		m.latency.WithLabelValues(r.Method).Observe(time.Since(start).Seconds())
		if sw.code >= 500 {
			log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "code", sw.code)
		}
	})
}
