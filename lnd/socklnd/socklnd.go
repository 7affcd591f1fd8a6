package socklnd

// Setup and teardown of one NI, and the driver's settings (Lustre's
// socklnd.c ksocknal_startup/ksocknal_shutdown and socklnd_modparams.c).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

func init() { lnet.Register(&Driver{}) }

// Driver is socklnd's lnet.Driver: it makes TCP NIs. It is registered for
// wire.TCP in init, so importing the package (for its side effect) is enough
// for LNet to bring up "tcp" networks. It holds no state; every NI it starts
// is independent.
type Driver struct{}

var _ lnet.Driver = (*Driver)(nil)

// Type returns wire.TCP.
func (Driver) Type() wire.NetType { return wire.TCP }

// Startup parses cfg.Options (see ParseOptions) and starts an NI with Start.
func (Driver) Startup(ctx context.Context, cfg lnet.NIConfig, host lnet.Host) (lnet.LND, error) {
	c, err := ParseOptions(cfg.Options)
	if err != nil {
		return nil, err
	}
	ni, err := Start(ctx, cfg, c, host)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return ni, nil
}

// Config is socklnd's own settings for one NI, beyond lnet.NIConfig. The
// zero Config is not usable; start from DefaultConfig. Names in parentheses
// are the lnet.NIConfig.Options keys ParseOptions reads (Lustre's module
// parameter names where socklnd has one).
type Config struct {
	// Port is the TCP port every node of the net listens on and dials
	// ("port", default 988, Lustre's acceptor port). A NID carries no port,
	// so all the nodes of one net must agree on it.
	Port int
	// MinBulk is the payload size from which a message goes on the bulk
	// connection instead of the control one ("min_bulk", default 64 KiB).
	// Smaller messages may be written by Send itself, and read through
	// the connection's read buffer (see the package doc, Data path).
	MinBulk int
	// TypedConns selects one control and two bulk connections per peer
	// ("typed_conns", default true); false uses a single connection of type
	// wire.ConnAny for everything this side sends.
	TypedConns bool
	// ConnectTimeout bounds how long a message waits for a connection to be
	// made when its Deadline is zero ("connect_timeout", default 50s).
	ConnectTimeout time.Duration
	// BackoffMin and BackoffMax bound the wait between failed connection
	// attempts to one peer, doubling from min to max ("backoff_min",
	// "backoff_max", default 100ms and 5s).
	BackoffMin, BackoffMax time.Duration
	// HandshakeTimeout bounds a dial plus the hello exchange
	// ("handshake_timeout", default 10s).
	HandshakeTimeout time.Duration
	// Timeout bounds one message's write, and one message's read once its
	// first bytes have arrived (the rest of its header, then its payload):
	// a connection making no progress for that long is dropped
	// ("sock_timeout", default 50s, as Lustre's).
	Timeout time.Duration
	// KeepAliveIdle, KeepAliveInterval and KeepAliveCount configure TCP
	// keepalive on every connection, which is how a silent dead peer is
	// found ("keepalive_idle", "keepalive_intvl", "keepalive_count",
	// default 30s, 5s and 5, as Lustre's).
	KeepAliveIdle, KeepAliveInterval time.Duration
	KeepAliveCount                   int
	// MaxHandshakes bounds the incoming connections whose hello is being
	// read at once; more are closed at once ("max_handshakes", default 64).
	MaxHandshakes int
	// MaxPeers bounds the peer table ("max_peers", default 16384): beyond
	// it a send to a new peer fails with lnet.ErrPeerUnreachable and a
	// handshake from a new peer is refused, each with a log line, until
	// idle peers are dropped.
	MaxPeers int
	// PeerIdleAge is how long a peer with no connection and nothing queued
	// is kept after it was last used ("peer_idle_age", default 10m). Its
	// incarnation is forgotten with it: a peer that comes back after that
	// is a new peer, not a restarted one.
	PeerIdleAge time.Duration
}

// DefaultConfig returns the settings socklnd uses for options not given.
func DefaultConfig() Config {
	return Config{
		Port:              988,
		MinBulk:           64 << 10,
		TypedConns:        true,
		ConnectTimeout:    50 * time.Second,
		BackoffMin:        100 * time.Millisecond,
		BackoffMax:        5 * time.Second,
		HandshakeTimeout:  10 * time.Second,
		Timeout:           50 * time.Second,
		KeepAliveIdle:     30 * time.Second,
		KeepAliveInterval: 5 * time.Second,
		KeepAliveCount:    5,
		MaxHandshakes:     64,
		MaxPeers:          16384,
		PeerIdleAge:       10 * time.Minute,
	}
}

// Validate reports the first setting out of its domain.
func (c *Config) Validate() error {
	switch {
	case c.Port < 1 || c.Port > 65535:
		return fmt.Errorf("socklnd: port %d: want 1..65535", c.Port)
	case c.MinBulk < 1:
		return fmt.Errorf("socklnd: min_bulk %d: want at least 1", c.MinBulk)
	case c.ConnectTimeout <= 0, c.BackoffMin <= 0, c.HandshakeTimeout <= 0, c.Timeout <= 0,
		c.KeepAliveIdle <= 0, c.KeepAliveInterval <= 0, c.PeerIdleAge <= 0:
		return errors.New("socklnd: timeouts and intervals must be positive")
	case c.BackoffMax < c.BackoffMin:
		return fmt.Errorf("socklnd: backoff_max %v is below backoff_min %v", c.BackoffMax, c.BackoffMin)
	case c.KeepAliveCount < 1:
		return fmt.Errorf("socklnd: keepalive_count %d: want at least 1", c.KeepAliveCount)
	case c.MaxHandshakes < 1:
		return fmt.Errorf("socklnd: max_handshakes %d: want at least 1", c.MaxHandshakes)
	case c.MaxPeers < 1:
		return fmt.Errorf("socklnd: max_peers %d: want at least 1", c.MaxPeers)
	}
	return nil
}

// options maps each option key to the Config field it sets.
var options = map[string]func(c *Config, v string) error{
	"port":              intOpt(func(c *Config) *int { return &c.Port }),
	"min_bulk":          intOpt(func(c *Config) *int { return &c.MinBulk }),
	"keepalive_count":   intOpt(func(c *Config) *int { return &c.KeepAliveCount }),
	"max_handshakes":    intOpt(func(c *Config) *int { return &c.MaxHandshakes }),
	"max_peers":         intOpt(func(c *Config) *int { return &c.MaxPeers }),
	"peer_idle_age":     durOpt(func(c *Config) *time.Duration { return &c.PeerIdleAge }),
	"connect_timeout":   durOpt(func(c *Config) *time.Duration { return &c.ConnectTimeout }),
	"backoff_min":       durOpt(func(c *Config) *time.Duration { return &c.BackoffMin }),
	"backoff_max":       durOpt(func(c *Config) *time.Duration { return &c.BackoffMax }),
	"handshake_timeout": durOpt(func(c *Config) *time.Duration { return &c.HandshakeTimeout }),
	"sock_timeout":      durOpt(func(c *Config) *time.Duration { return &c.Timeout }),
	"keepalive_idle":    durOpt(func(c *Config) *time.Duration { return &c.KeepAliveIdle }),
	"keepalive_intvl":   durOpt(func(c *Config) *time.Duration { return &c.KeepAliveInterval }),
	"typed_conns": func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		c.TypedConns = b
		return err
	},
}

func intOpt(f func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		*f(c) = n
		return err
	}
}

// durOpt accepts a Go duration ("250ms") or, as Lustre's module parameters
// do, a bare number of seconds.
func durOpt(f func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		if n, err := strconv.Atoi(v); err == nil {
			if n > math.MaxInt64/int(time.Second) || n < math.MinInt64/int(time.Second) {
				return fmt.Errorf("%d seconds is out of range", n)
			}
			*f(c) = time.Duration(n) * time.Second
			return nil
		}
		d, err := time.ParseDuration(v)
		*f(c) = d
		return err
	}
}

// ParseOptions returns DefaultConfig with the given options applied, then
// validated. Keys are those named on Config's fields; an unknown key or a
// value that does not parse is an error naming it, so a typo in a
// configuration is not silently ignored.
func ParseOptions(opts map[string]string) (Config, error) {
	c := DefaultConfig()
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the same error for the same map
	for _, k := range keys {
		set, ok := options[k]
		if !ok {
			known := make([]string, 0, len(options))
			for name := range options {
				known = append(known, name)
			}
			sort.Strings(known)
			return Config{}, fmt.Errorf("socklnd: unknown option %q (known: %s)", k, strings.Join(known, ", "))
		}
		if err := set(&c, opts[k]); err != nil {
			return Config{}, fmt.Errorf("socklnd: option %s=%q: %w", k, opts[k], err)
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Default tunables, Lustre's socklnd defaults.
const (
	defaultCredits     = 256
	defaultPeerCredits = 8
	defaultPeerTimeout = 180 * time.Second
)

// NI is one running socklnd network interface: a listener on the NID's
// address and the connections to its peers. It implements lnet.LND; all its
// methods are safe for concurrent use.
//
// Every goroutine it starts (acceptor, handshakes, dialers, one reader and
// one writer per connection) is counted in wg and stopped by Shutdown.
type NI struct {
	nid  wire.NID
	pid  uint32
	inc  uint64
	ips  []netip.Addr // announced in hellos
	conf Config
	tun  lnet.Tunables
	qcap int // bound of one per-peer, per-type tx queue
	host lnet.Host
	log  *slog.Logger

	ln     net.Listener
	listen netip.AddrPort // ln's address, in listeners while ln is open
	dialer net.Dialer
	ctx    context.Context // canceled by Shutdown: stops dials, backoffs, handshakes
	cancel context.CancelFunc
	hsSem  chan struct{} // one token per passive handshake in progress
	closed atomic.Bool   // set first thing in Shutdown; checked under peer.mu
	done   chan struct{} // closed when Shutdown has finished
	wg     sync.WaitGroup
	stats  counters
	cont   watchdog // of the readers that run continuations (cont.go)

	mu struct {
		sync.Mutex
		closing bool               // set by Shutdown: no goroutine may start
		peers   map[wire.NID]*peer // at most Config.MaxPeers; idle ones are reaped
		// fullLogged is when a refusal for a full table was last logged.
		fullLogged time.Time
	}
}

var _ lnet.LND = (*NI)(nil)

// Start brings up an NI on cfg.NID's address with the given socklnd
// settings, for callers that build a Config themselves (Driver.Startup is
// Start with ParseOptions(cfg.Options)). It returns once the NI accepts
// connections, or an error if cfg is unusable or the address cannot be
// listened on. ctx bounds only the startup; the NI runs until Shutdown.
//
// The NI listens on, and dials from, the NID's address; cfg.Interface is
// not used beyond that. A zero cfg.Incarnation is replaced by the start
// time, since peers read 0 as "unknown" and would miss a restart.
func Start(ctx context.Context, cfg lnet.NIConfig, c Config, host lnet.Host) (*NI, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if cfg.NID.Net.Type != wire.TCP || !cfg.NID.Addr.IsValid() {
		return nil, fmt.Errorf("socklnd: NID %v is not a tcp NID", cfg.NID)
	}
	if host == nil {
		return nil, errors.New("socklnd: no host")
	}
	ni := &NI{
		nid:  cfg.NID,
		pid:  cfg.PID,
		inc:  cfg.Incarnation,
		ips:  []netip.Addr{cfg.NID.Addr},
		conf: c,
		tun:  cfg.Tunables,
		host: host,
		log:  cfg.Logger,
		done: make(chan struct{}),
	}
	ni.cont.ni = ni
	if ni.tun.Credits <= 0 {
		ni.tun.Credits = defaultCredits
	}
	if ni.tun.PeerCredits <= 0 {
		ni.tun.PeerCredits = defaultPeerCredits
	}
	if ni.tun.PeerTimeout == 0 {
		ni.tun.PeerTimeout = defaultPeerTimeout
	}
	if ni.inc == 0 {
		ni.inc = uint64(time.Now().UnixNano())
	}
	ni.qcap = 2 * ni.tun.PeerCredits
	if ni.log == nil {
		ni.log = slog.New(slog.DiscardHandler)
	}
	ni.log = ni.log.With("ni", ni.nid.String())
	ni.mu.peers = make(map[wire.NID]*peer)
	ni.hsSem = make(chan struct{}, c.MaxHandshakes)

	ka := net.KeepAliveConfig{
		Enable:   true,
		Idle:     c.KeepAliveIdle,
		Interval: c.KeepAliveInterval,
		Count:    c.KeepAliveCount,
	}
	ni.dialer = net.Dialer{
		// Dial from the NID's address so the peer and lnetctl see the
		// address the NID names, not whatever the routing table picks.
		LocalAddr:       &net.TCPAddr{IP: ni.nid.Addr.AsSlice(), Zone: ni.nid.Addr.Zone()},
		KeepAliveConfig: ka,
	}
	lc := net.ListenConfig{KeepAliveConfig: ka}
	addr := netip.AddrPortFrom(ni.nid.Addr, uint16(c.Port)).String()
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("socklnd: %v: listen: %w", ni.nid, err)
	}
	ni.ln = ln
	ni.listen = netip.AddrPortFrom(ni.nid.Addr, uint16(c.Port))
	listeners.add(ni.listen)
	ni.ctx, ni.cancel = context.WithCancel(context.WithoutCancel(ctx))
	ni.spawn(ni.acceptLoop)
	ni.spawn(ni.reapLoop)
	ni.log.Info("socklnd: NI up", "listen", addr, "incarnation", ni.inc)
	return ni, nil
}

// NID returns the NI's NID.
func (ni *NI) NID() wire.NID { return ni.nid }

// Tunables returns the credits and timeouts the NI runs with: those it was
// configured with, zero fields replaced by socklnd's defaults (Lustre's:
// 256 credits, 8 peer credits, 180s peer timeout). socklnd itself uses only
// PeerCredits, to bound its queues; it finds dead peers by TCP keepalive
// (Config.KeepAlive*), and leaves PeerTimeout to LNet.
func (ni *NI) Tunables() lnet.Tunables { return ni.tun }

// spawn runs f on a goroutine owned by the NI, unless Shutdown has begun;
// it reports whether f was started. It may be called with a peer's lock
// held (ni.mu is taken after peer.mu, never before).
func (ni *NI) spawn(f func()) bool {
	if !ni.join() {
		return false
	}
	go func() {
		defer ni.wg.Done()
		f()
	}()
	return true
}

// join counts one more goroutine as the NI's, which Shutdown waits for
// (it calls ni.wg.Done when it is no longer), unless Shutdown has begun.
func (ni *NI) join() bool {
	ni.mu.Lock()
	defer ni.mu.Unlock()
	if ni.mu.closing {
		return false
	}
	ni.wg.Add(1)
	return true
}

// Shutdown stops the NI: it stops accepting, closes every connection,
// finalizes every message it still holds with lnet.ErrShutdown (queued ones
// here, those being written by their writer as the socket closes) and waits
// for its goroutines. It returns nil once all of that is done, after which
// the NI never calls the host again; or ctx's error if ctx ends first (a
// host callback that does not return, such as a Parse that blocks, keeps
// the NI from finishing), in which case the NI goes on winding down in the
// background. Further calls wait for the first one. Sends after Shutdown
// began are finalized with lnet.ErrShutdown at once.
func (ni *NI) Shutdown(ctx context.Context) error {
	if ni.closed.Swap(true) {
		select {
		case <-ni.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ni.cancel()
	ni.ln.Close()
	listeners.remove(ni.listen)
	ni.mu.Lock()
	ni.mu.closing = true
	peers := make([]*peer, 0, len(ni.mu.peers))
	for _, p := range ni.mu.peers {
		peers = append(peers, p)
	}
	ni.mu.Unlock()

	down := fmt.Errorf("socklnd: %v shutting down: %w", ni.nid, lnet.ErrShutdown)
	for _, p := range peers {
		var d deferred
		p.mu.Lock()
		for t, c := range p.mu.conns {
			if c != nil {
				p.mu.conns[t] = nil
				d.shut(c, lnet.ErrShutdown, "NI shutting down")
			}
		}
		for t := range p.mu.txq {
			d.fail(&p.mu.txq[t], down, all)
		}
		p.mu.up = false
		p.mu.Unlock()
		ni.run(p, &d)
	}

	go func() {
		ni.wg.Wait()
		ni.log.Info("socklnd: NI down")
		close(ni.done)
	}()
	select {
	case <-ni.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("socklnd: %v: shutdown: %w", ni.nid, ctx.Err())
	}
}

// listenSet is the addresses the NIs of this process listen on, with how
// many listen at each (an NI being shut down may overlap its successor).
type listenSet struct {
	mu sync.Mutex
	m  map[netip.AddrPort]int
}

// peersElsewhere, set by tests before NIs start, has connections treat
// every peer as another process's, to test that path in one process.
var peersElsewhere atomic.Bool

// listeners are this process's: a peer whose NID and port are among them
// runs in this process (conn.inProc).
var listeners = listenSet{m: make(map[netip.AddrPort]int)}

func (l *listenSet) add(a netip.AddrPort) {
	l.mu.Lock()
	l.m[a]++
	l.mu.Unlock()
}

func (l *listenSet) remove(a netip.AddrPort) {
	l.mu.Lock()
	if l.m[a]--; l.m[a] <= 0 {
		delete(l.m, a)
	}
	l.mu.Unlock()
}

func (l *listenSet) has(a netip.AddrPort) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[a] > 0
}
