// Package server assembles Nacre's servers inside one process: the MGS with
// its gRPC services and REST gateway over an etcd cluster (`nacre mgs`), and
// the embedded single-node cluster (`nacre up`). It wires packages together
// and owns their lifetimes; the logic lives in the packages it wires.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/nacrefs/nacre/gateway"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/mgs"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
	"github.com/nacrefs/nacre/services/admin"
	"github.com/nacrefs/nacre/services/auth"
	"github.com/nacrefs/nacre/services/hsm"
	"github.com/nacrefs/nacre/services/mgssvc"
)

// MGSConfig configures the management server process.
type MGSConfig struct {
	// GRPCAddr serves MGS, Admin, health and reflection.
	GRPCAddr string
	// HTTPAddr serves the REST gateway, /openapi.json, /healthz and /metrics.
	HTTPAddr string
	// EtcdEndpoints of the resource database.
	EtcdEndpoints []string
	// EtcdPrefix separates clusters sharing one etcd.
	EtcdPrefix string
	// LeaseTTL of target liveness; RequestTimeout of every etcd call.
	LeaseTTL       time.Duration
	RequestTimeout time.Duration
	Auth           auth.Config
	// TLS of the gRPC listener (mutual TLS when a client CA is set).
	TLS auth.TLSConfig
	// HTTPTLS of the gateway listener.
	HTTPTLS auth.TLSConfig
	Logger  *slog.Logger
	// Params is the parameter registry whose live parameters and devices
	// the Admin API serves (lctl over REST); nil means params.Default, the
	// process's registry.
	Params *params.Registry
	// Registry receives and serves the MGS's metrics; nil makes a fresh one
	// with Go and process collectors. (An embedded etcd serves its own
	// metrics at its client URL: its gRPC metric names collide with ours.)
	Registry *prometheus.Registry
}

// DefaultMGSConfig binds everything to loopback.
func DefaultMGSConfig() MGSConfig {
	d := mgs.DefaultConfig()
	return MGSConfig{
		GRPCAddr:       "127.0.0.1:9880",
		HTTPAddr:       "127.0.0.1:9881",
		EtcdEndpoints:  []string{"http://127.0.0.1:2379"},
		EtcdPrefix:     d.Prefix,
		LeaseTTL:       d.LeaseTTL,
		RequestTimeout: d.RequestTimeout,
	}
}

// Validate checks the configuration.
func (c MGSConfig) Validate() error {
	if len(c.EtcdEndpoints) == 0 {
		return errors.New("mgs: no etcd endpoints")
	}
	if c.GRPCAddr == "" || c.HTTPAddr == "" {
		return errors.New("mgs: grpc and http addresses are required")
	}
	if !c.Auth.Disabled && len(c.Auth.Tokens) == 0 {
		return errors.New("mgs: no auth tokens configured; configure auth.tokens or disable auth explicitly (auth.disabled: true / --no-auth)")
	}
	return c.Auth.Validate()
}

// MGS is a running management server.
type MGS struct {
	cfg   MGSConfig
	log   *slog.Logger
	cli   *clientv3.Client
	store *mgs.Store
	grpc  *grpc.Server
	http  *http.Server
	gl    net.Listener
	hl    net.Listener

	stop context.CancelFunc
	wg   sync.WaitGroup // serving goroutines and the health prober
	// undev removes the MGS from the device list (lctl dl).
	undev func()
	// coord is the HSM coordinator; hsmParams the filesystems whose
	// mdt.FS-MDT0000.hsm_control and hsm.actions are registered, and how
	// to unregister them.
	coord     *hsm.Coordinator
	preg      *params.Registry
	hsmMu     sync.Mutex
	hsmParams map[string]func()
}

// StartMGS connects to etcd, starts the gRPC and HTTP listeners and returns
// once both accept connections. Close stops everything it started.
func StartMGS(ctx context.Context, cfg MGSConfig) (_ *MGS, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := &MGS{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			m.Close(context.Background())
		}
	}()

	m.cli, err = clientv3.New(clientv3.Config{
		Endpoints:   cfg.EtcdEndpoints,
		DialTimeout: 5 * time.Second,
		Context:     context.Background(),
		Logger:      zap.NewNop(),
		// Fail over between members quickly when one dies.
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("mgs: etcd client for %v: %w", cfg.EtcdEndpoints, err)
	}
	scfg := mgs.DefaultConfig()
	scfg.Client, scfg.Prefix, scfg.Logger = m.cli, cfg.EtcdPrefix, log
	if cfg.LeaseTTL > 0 {
		scfg.LeaseTTL = cfg.LeaseTTL
	}
	if cfg.RequestTimeout > 0 {
		scfg.RequestTimeout = cfg.RequestTimeout
	}
	if m.store, err = mgs.New(scfg); err != nil {
		return nil, err
	}
	authz, err := auth.New(cfg.Auth)
	if err != nil {
		return nil, err
	}

	srvMetrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	reg.MustRegister(srvMetrics)
	panicked := func(ctx context.Context, p any) error {
		log.Error("panic in gRPC handler", "panic", p)
		return status.Errorf(codes.Internal, "internal error")
	}
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(
			srvMetrics.UnaryServerInterceptor(),
			recovery.UnaryServerInterceptor(recovery.WithRecoveryHandlerContext(panicked)),
			authz.UnaryInterceptor(admin.MethodPolicy),
		),
		grpc.ChainStreamInterceptor(
			srvMetrics.StreamServerInterceptor(),
			recovery.StreamServerInterceptor(recovery.WithRecoveryHandlerContext(panicked)),
			authz.StreamInterceptor(admin.MethodPolicy),
		),
	}
	if cfg.TLS.Enabled() {
		tc, err := cfg.TLS.ServerConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	m.grpc = grpc.NewServer(opts...)
	preg := cfg.Params
	if preg == nil {
		preg = params.Default
	}
	m.undev = preg.RegisterDevice(params.Device{Type: "mgs", Name: "MGS", UUID: "MGS"})
	adminSrv := admin.New(m.store, preg, log)
	mgsv1.RegisterMGSServer(m.grpc, mgssvc.New(m.store, log))
	adminv1.RegisterAdminServer(m.grpc, adminSrv)
	// The HSM coordinator: its queue in etcd, one active instance per
	// cluster by election (the MGS of a standby node answers UNAVAILABLE).
	hcfg := hsm.DefaultConfig()
	hcfg.Etcd, hcfg.Prefix, hcfg.Name, hcfg.Logger = m.cli, cfg.EtcdPrefix+"hsm/", cfg.GRPCAddr, log
	coord, err := hsm.New(hcfg)
	if err != nil {
		return nil, err
	}
	coord.Register(m.grpc)
	m.coord, m.preg, m.hsmParams = coord, preg, map[string]func(){}
	if fss, err := m.store.ListFilesystems(ctx); err == nil {
		for _, fs := range fss {
			m.RegisterHSMParams(fs.Name)
		}
	}
	hs := health.NewServer()
	healthpb.RegisterHealthServer(m.grpc, hs)
	reflection.Register(m.grpc)
	srvMetrics.InitializeMetrics(m.grpc)

	if m.gl, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("mgs: listen grpc %s: %w", cfg.GRPCAddr, err)
	}
	if m.hl, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("mgs: listen http %s: %w", cfg.HTTPAddr, err)
	}
	gwCtx, stop := context.WithCancel(context.Background())
	m.stop = stop
	go coord.Run(gwCtx)
	handler, err := gateway.New(gwCtx, gateway.Config{
		Admin:      adminSrv,
		HSM:        coord,
		Auth:       authz,
		Healthz:    m.healthz,
		Gatherer:   reg,
		Registerer: reg,
		Servers:    adminSrv.StatusAddrs,
		Instance:   m.hl.Addr().String(),
		Logger:     log,
	})
	if err != nil {
		return nil, err
	}
	m.http = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	if cfg.HTTPTLS.Enabled() {
		if m.http.TLSConfig, err = cfg.HTTPTLS.ServerConfig(); err != nil {
			return nil, err
		}
	}

	// The first probe happens before serving, so a health check never finds
	// the services unknown.
	m.setHealth(ctx, hs)
	m.wg.Go(func() {
		if err := m.grpc.Serve(m.gl); err != nil {
			log.Error("grpc server stopped", "err", err)
		}
	})
	m.wg.Go(func() {
		var err error
		if m.http.TLSConfig != nil {
			err = m.http.ServeTLS(m.hl, "", "")
		} else {
			err = m.http.Serve(m.hl)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "err", err)
		}
	})
	m.wg.Go(func() { m.probeHealth(gwCtx, hs) })
	// Every filesystem has its HSM parameters here, those created after
	// the MGS started too: a new cluster's filesystem comes with its
	// first target's registration, which any MGS node may take.
	m.wg.Go(func() {
		followed := map[string]bool{} // only this goroutine's
		m.store.WatchFilesystems(gwCtx, func(fs mgs.Filesystem) {
			m.RegisterHSMParams(fs.Name)
			if !followed[fs.Name] {
				followed[fs.Name] = true
				m.wg.Go(func() { m.followHSMParams(gwCtx, fs.Name) })
			}
		})
	})
	log.Info("mgs started", "grpc", m.gl.Addr().String(), "http", m.hl.Addr().String(), "etcd", cfg.EtcdEndpoints, "tls", cfg.TLS.Enabled(), "auth", !cfg.Auth.Disabled)
	return m, nil
}

// probeHealth keeps the gRPC health service in step with etcd's quorum, so
// load balancers and `grpc_health_probe` see a MGS that can't serve.
func (m *MGS) probeHealth(ctx context.Context, hs *health.Server) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			hs.Shutdown()
			return
		case <-t.C:
			m.setHealth(ctx, hs)
		}
	}
}

// setHealth sets every service's gRPC health from one probe of etcd.
func (m *MGS) setHealth(ctx context.Context, hs *health.Server) {
	st := healthpb.HealthCheckResponse_SERVING
	if ok, _, _ := m.store.Health(ctx); !ok {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	for _, svc := range []string{"", mgsv1.MGS_ServiceDesc.ServiceName, adminv1.Admin_ServiceDesc.ServiceName} {
		hs.SetServingStatus(svc, st)
	}
}

func (m *MGS) healthz(ctx context.Context) error {
	if ok, _, _ := m.store.Health(ctx); !ok {
		return errors.New("resource database has no quorum")
	}
	return nil
}

// GRPCAddr is the bound gRPC address.
func (m *MGS) GRPCAddr() string { return m.gl.Addr().String() }

// HTTPAddr is the bound HTTP address.
func (m *MGS) HTTPAddr() string { return m.hl.Addr().String() }

// Store is the resource database the MGS serves.
func (m *MGS) Store() *mgs.Store { return m.store }

// RegisterHSMParams registers filesystem fsname's HSM coordinator
// parameters as Lustre names them on the MDT: mdt.FS-MDT0000.hsm_control
// (enabled, disabled, purge), mdt.FS-MDT0000.hsm.actions (the actions
// not finished), mdt.FS-MDT0000.hsm.agents (the copytool agents) and
// mdt.FS-MDT0000.hsm.grace_delay (seconds finished actions are kept). Once per filesystem; the coordinator serves every one.
func (m *MGS) RegisterHSMParams(fsname string) {
	m.hsmMu.Lock()
	defer m.hsmMu.Unlock()
	// hsmParams is nil once Close took them away: the filesystem watch
	// may still be delivering one then.
	if m.coord == nil || m.hsmParams == nil || m.hsmParams[fsname] != nil {
		return
	}
	p := "mdt." + mgs.TargetLabel(fsname, mgs.KindMDT, 0) + "."
	coord := m.coord
	unreg, err := m.preg.RegisterAll(
		params.Enum(p+"hsm_control", "the HSM coordinator: enabled, disabled (queue kept), purge (cancel every action)",
			coord.ControlState, func(v string) error {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return coord.Control(ctx, v)
			}, hsm.ControlEnabled, hsm.ControlDisabled, hsm.ControlPurge),
		params.ReadOnly(p+"hsm.actions", "HSM actions not finished", coord.ActionsText),
		params.ReadOnly(p+"hsm.agents", "HSM copytool agents registered", coord.AgentsText),
		params.Int(p+"hsm.grace_delay", "seconds a finished HSM action stays in the queue before it is deleted",
			func() int64 { return int64(coord.GraceDelay() / time.Second) },
			func(v int64) error { return coord.SetGraceDelay(time.Duration(v) * time.Second) }, 0, 30*24*3600, nil),
		params.Int(p+"hsm.active_request_timeout", "seconds a started HSM action may go unheard of before another agent gets it",
			func() int64 { return int64(coord.ActiveRequestTimeout() / time.Second) },
			func(v int64) error { return coord.SetActiveRequestTimeout(time.Duration(v) * time.Second) }, 1, 7*24*3600, nil),
		params.Int(p+"hsm.max_requests", "HSM actions an agent that names no limit is given at once",
			func() int64 { return int64(coord.MaxRequests()) },
			func(v int64) error { return coord.SetMaxRequests(int(v)) }, 1, 65536, nil),
	)
	if err != nil {
		m.log.Warn("hsm parameters", "fs", fsname, "err", err)
		return
	}
	m.hsmParams[fsname] = unreg
}

// followHSMParams applies fsname's persistent parameters of the HSM
// coordinator (FS.MDT0000.mdt.hsm_control, mdt.hsm.*) to the MGS's
// registry, those stored now and as they change, until ctx ends. The
// coordinator lives in the MGS, not on the MDS, whose server applies the
// rest of mdt.*; each parameter is applied once per revision, oldest
// first, as servers apply theirs.
func (m *MGS) followHSMParams(ctx context.Context, fsname string) {
	mdt := mgs.TargetName(mgs.KindMDT, 0)
	applied := map[string]int64{}
	apply := func(p mgs.Param) {
		if p.Revision <= applied[p.Name] {
			return
		}
		applied[p.Name] = p.Revision
		pn, err := mgs.ParseParamName(p.Name)
		if err != nil || !pn.MatchesFS(fsname) || !isHSMParam(pn.Param) {
			return
		}
		if ok, _ := path.Match(pn.Target, mdt); !ok {
			return
		}
		name := "mdt." + mgs.TargetLabel(fsname, mgs.KindMDT, 0) + "." + strings.TrimPrefix(pn.Param, "mdt.")
		if _, err := m.preg.Set(params.SetOptions{Partial: true}, params.Assignment{Pattern: name, Value: p.Value}); err != nil {
			m.log.Warn("persistent parameter refused", "param", p.Name, "value", p.Value, "err", err)
			return
		}
		m.log.Info("persistent parameter", "param", p.Name, "value", p.Value)
	}
	for ctx.Err() == nil {
		cfg, err := m.store.GetConfig(ctx, fsname)
		if err == nil {
			for _, p := range cfg.Params {
				apply(p)
			}
			// Compacted or broken: read the configuration again.
			err = m.store.Watch(ctx, fsname, cfg.Revision+1, func(e mgs.Event) error {
				if e.Param != nil && e.Type == mgs.EventPut {
					apply(*e.Param)
				}
				return nil
			})
		}
		if ctx.Err() != nil {
			return
		}
		m.log.Info("persistent HSM parameters: configuration watch broke", "fs", fsname, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// isHSMParam reports whether a persistent parameter (LAYER.NAME) is the
// HSM coordinator's: mdt.hsm_control and mdt.hsm.*.
func isHSMParam(param string) bool {
	return param == "mdt.hsm_control" || strings.HasPrefix(param, "mdt.hsm.")
}

// mgsStopGrace is how long Close lets the MGS's gRPC calls in progress
// finish.
const mgsStopGrace = 2 * time.Second

// Close stops serving (gracefully for mgsStopGrace at most, and until ctx
// ends) and releases everything.
func (m *MGS) Close(ctx context.Context) error {
	if m.stop != nil {
		m.stop()
	}
	m.hsmMu.Lock()
	for _, unreg := range m.hsmParams {
		unreg()
	}
	m.hsmParams = nil
	m.hsmMu.Unlock()
	if m.undev != nil {
		m.undev()
	}
	var errs []error
	if m.http != nil {
		if err := m.http.Shutdown(ctx); err != nil {
			errs = append(errs, err)
			m.http.Close()
		}
	}
	if m.grpc != nil {
		// Calls in progress get a moment to finish; streams such as
		// WatchConfig never end on their own, so a graceful stop would
		// wait out ctx whenever a client watches.
		grace, cancel := context.WithTimeout(ctx, mgsStopGrace)
		defer cancel()
		done := make(chan struct{})
		go func() { m.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-grace.Done():
			m.grpc.Stop()
			<-done
		}
	}
	for _, l := range []net.Listener{m.gl, m.hl} {
		if l != nil {
			l.Close()
		}
	}
	m.wg.Wait()
	if m.cli != nil {
		if err := m.cli.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
