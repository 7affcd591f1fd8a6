// Package etcdserver starts an embedded etcd member inside a Nacre process:
// the resource database of `nacre up` and of tests. Production clusters run
// etcd on their own and Nacre only dials it; this package owns nothing but the
// embedded member's start and stop.
package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Member describes one embedded etcd member.
type Member struct {
	Name      string // unique in the cluster
	Dir       string // data directory; kept across restarts
	ClientURL string // e.g. http://127.0.0.1:2379
	PeerURL   string // e.g. http://127.0.0.1:2380
}

// Config configures an embedded member.
type Config struct {
	Member
	// Peers are every member of the initial cluster, this one included.
	// Empty means a one-member cluster.
	Peers []Member
	// Token tells clusters apart on the wire.
	Token string
	// LogLevel of etcd's own logger: debug, info, warn, error.
	LogLevel string
	// StartTimeout bounds the wait for the member to join a quorum.
	StartTimeout time.Duration
}

// DefaultConfig is a one-member cluster on etcd's usual loopback ports.
func DefaultConfig(dir string) Config {
	return Config{
		Member:       Member{Name: "nacre", Dir: dir, ClientURL: "http://127.0.0.1:2379", PeerURL: "http://127.0.0.1:2380"},
		Token:        "nacre",
		LogLevel:     "error",
		StartTimeout: 60 * time.Second,
	}
}

// Server is a running embedded member.
type Server struct {
	e   *embed.Etcd
	cfg Config
}

// Start starts a member and waits until it has joined a quorum, the context
// ends, or StartTimeout passes. A member whose Dir already holds data
// rejoins its cluster; Peers then only matter to a new member.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Name == "" || cfg.Dir == "" {
		return nil, errors.New("etcdserver: member needs a name and a data directory")
	}
	curl, err := url.Parse(cfg.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("etcdserver: client url %q: %w", cfg.ClientURL, err)
	}
	purl, err := url.Parse(cfg.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("etcdserver: peer url %q: %w", cfg.PeerURL, err)
	}
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.ListenClientUrls = []url.URL{*curl}
	ec.AdvertiseClientUrls = []url.URL{*curl}
	ec.ListenPeerUrls = []url.URL{*purl}
	ec.AdvertisePeerUrls = []url.URL{*purl}
	peers := cfg.Peers
	if len(peers) == 0 {
		peers = []Member{cfg.Member}
	}
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = p.Name + "=" + p.PeerURL
	}
	ec.InitialCluster = strings.Join(parts, ",")
	ec.InitialClusterToken = cfg.Token
	ec.ClusterState = embed.ClusterStateFlagNew
	ec.LogLevel = cfg.LogLevel
	if ec.LogLevel == "" {
		ec.LogLevel = "error"
	}
	lvl, err := zap.ParseAtomicLevel(ec.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("etcdserver: log level %q: %w", ec.LogLevel, err)
	}
	zc := zap.NewProductionConfig()
	zc.Level = lvl
	zc.DisableStacktrace = true // etcd logs its own orderly shutdown as errors
	zc.Sampling = nil
	zl, err := zc.Build(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return quietShutdown{c} }))
	if err != nil {
		return nil, fmt.Errorf("etcdserver: logger: %w", err)
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zl)
	// Keep a day of history for watchers that reconnect, then compact.
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = "24h"

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("etcdserver: start member %s in %s: %w", cfg.Name, cfg.Dir, err)
	}
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return &Server{e: e, cfg: cfg}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdserver: member %s: %w", cfg.Name, err)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("etcdserver: member %s: %w", cfg.Name, ctx.Err())
	case <-t.C:
		e.Close()
		return nil, fmt.Errorf("etcdserver: member %s did not join a quorum within %v", cfg.Name, timeout)
	}
}

// ClientURL is where clients reach this member.
func (s *Server) ClientURL() string { return s.cfg.ClientURL }

// Err reports a fatal error of the running member.
func (s *Server) Err() <-chan error { return s.e.Err() }

// Close stops the member; its data stays in Dir.
func (s *Server) Close() { s.e.Close() }

// FreeLoopbackURL returns an http URL on a loopback port that was free a
// moment ago. The port is drawn below Linux's ephemeral range
// (32768-60999): a port the kernel hands out for :0 can be taken again by
// any outgoing connection before the caller binds it.
func FreeLoopbackURL() (string, error) {
	for range 100 {
		port := 10000 + rand.IntN(32768-10000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return "http://" + l.Addr().String(), nil
	}
	return "", errors.New("etcdserver: no free loopback port below the ephemeral range")
}

// quietShutdown drops the errors etcd logs about its own listeners closing
// during an orderly Close; a real failure to serve also reaches Err().
type quietShutdown struct{ zapcore.Core }

func (q quietShutdown) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Message == "setting up serving from embedded etcd failed." {
		return ce
	}
	return q.Core.Check(e, ce)
}

func (q quietShutdown) With(f []zapcore.Field) zapcore.Core { return quietShutdown{q.Core.With(f)} }
