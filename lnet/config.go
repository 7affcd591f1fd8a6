package lnet

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nacrefs/nacre/lnet/wire"
)

// Defaults, after Lustre's module parameters.
const (
	// DefaultTransactionTimeout is lnet_transaction_timeout.
	DefaultTransactionTimeout = 50 * time.Second
	// DefaultRetryCount is lnet_retry_count.
	DefaultRetryCount = 2
	// DefaultCredits is how many sends one NI has in flight at most.
	DefaultCredits = 256
	// DefaultPeerCredits is how many sends one peer NI has in flight at most.
	DefaultPeerCredits = 8
	// DefaultHealthSensitivity is how much one failure lowers the health of
	// an NI or peer NI, out of 1000 (lnet_health_sensitivity).
	DefaultHealthSensitivity = 100
	// DefaultRecoveryInterval is how often NIs and peer NIs below full
	// health are pinged to see whether they work again
	// (lnet_recovery_interval).
	DefaultRecoveryInterval = time.Second
	// DefaultRouterCheckInterval is how often each gateway is pinged.
	DefaultRouterCheckInterval = 5 * time.Second
	// DefaultRouterPingTimeout is how long a ping (of a gateway, a
	// recovering interface or a peer being discovered) may go unanswered
	// before it counts as failed (router_ping_timeout).
	DefaultRouterPingTimeout = 10 * time.Second
	// DefaultRouterBuffers is how many MTU-size buffers a router forwards
	// through at once (large_router_buffers).
	DefaultRouterBuffers = 256
	// DefaultPeerAge is how long a peer with nothing in flight stays known
	// after its last traffic.
	DefaultPeerAge = 10 * time.Minute
	// DefaultMaxPeers bounds the peer table.
	DefaultMaxPeers = 16384
)

// Config configures one LNet instance. Start from DefaultConfig.
type Config struct {
	// Networks are the NIs to bring up besides 0@lo, which is always there
	// (Lustre's "networks=" module parameter; see ParseNetworks).
	Networks []NetConfig
	// PID is this node's process id on every NI; 0 means wire.PIDLustre.
	PID uint32
	// TransactionTimeout bounds a whole operation: a message waiting for
	// credits, and a PUT waiting for its ACK or a GET for its REPLY, fail with
	// ErrTimeout once it passes. 0 means DefaultTransactionTimeout. It can be
	// changed at run time with (*LNet).SetTransactionTimeout.
	TransactionTimeout time.Duration
	// RetryCount is how many times a PUT or GET whose send failed with a
	// connection error is sent again, within the transaction timeout
	// (lnet_retry_count). Negative means 0.
	RetryCount int
	// MaxWaiting bounds the messages one NI holds waiting for credits. When
	// it is reached, Put and Get block until a message leaves the queue or
	// their context ends. 0 means four times the NI's credits.
	MaxWaiting int
	// Routes are the routes to remote networks configured at startup
	// (Lustre's "routes=" module parameter); more can be added with
	// (*LNet).AddRoute. Each gateway must be on a network of this node.
	Routes []Route
	// Routing makes this node a router: it forwards messages addressed to
	// other nodes between its networks (Lustre's "forwarding=enabled").
	// Without it such messages are dropped and counted.
	Routing bool
	// RouterBuffers is how many MTU-size buffers a router forwards payloads
	// through; a message waits for one before its payload is read off the
	// network, which stalls the connection it came on (back-pressure).
	// Messages without payload need none. 0 means DefaultRouterBuffers.
	// Buffers are allocated when first needed and kept.
	RouterBuffers int
	// RouterCheckInterval is how often each gateway of a route is pinged; 0
	// means DefaultRouterCheckInterval.
	RouterCheckInterval time.Duration
	// RouterPingTimeout bounds every ping LNet sends on its own (gateway
	// liveness, health recovery, automatic discovery): unanswered by then,
	// the ping has failed. 0 means DefaultRouterPingTimeout.
	RouterPingTimeout time.Duration
	// HealthSensitivity is how much one failed send lowers the health of the
	// NI or peer NI at fault, out of 1000; a success raises it back by as
	// much. 0 means DefaultHealthSensitivity; negative turns health off
	// (nothing is ever lowered, so nothing is recovered either).
	HealthSensitivity int
	// RecoveryInterval is how often NIs and peer NIs below full health are
	// pinged, and how often the NIs' links are checked; 0 means
	// DefaultRecoveryInterval.
	RecoveryInterval time.Duration
	// DisableDiscovery stops LNet from pinging a peer the first time it
	// sends to it to learn its other NIDs (lnetctl set discovery 0).
	// Discover still works.
	DisableDiscovery bool
	// PeerAge is how long a peer with nothing queued, no credits out and no
	// traffic stays in the peer table (never less than the transaction
	// timeout); 0 means DefaultPeerAge.
	PeerAge time.Duration
	// MaxPeers bounds the peer NIs LNet knows (every NID of another node it
	// has sent to, heard from or discovered). At the bound, a message that
	// needs a new one fails with ErrPeerTableFull (or is dropped, if it
	// came in) until idle peers age out. 0 means DefaultMaxPeers.
	MaxPeers int
	// Logger receives LNet's logs; nil discards them.
	Logger *slog.Logger
	// Registerer, if not nil, receives LNet's metrics (see Stats); they are
	// unregistered by Close.
	Registerer prometheus.Registerer
}

// NetConfig is one LNet network of the node and the interfaces it uses on
// it: Lustre's "tcp1(eth0,eth1)". Every (net, address) becomes one NI;
// several NIs on one net are multi-rail.
type NetConfig struct {
	// Net is the network, e.g. tcp1.
	Net wire.Net
	// Interfaces are OS interface names, resolved to their first IPv4
	// address when LNet starts.
	Interfaces []string
	// Addrs are addresses given literally.
	Addrs []netip.Addr
	// Tunables are handed to the driver for each NI of this net.
	Tunables Tunables
	// Options are driver-specific settings handed to the driver.
	Options map[string]string
}

// DefaultConfig returns a configuration with only 0@lo and Lustre's defaults.
func DefaultConfig() Config {
	return Config{
		PID:                 wire.PIDLustre,
		TransactionTimeout:  DefaultTransactionTimeout,
		RetryCount:          DefaultRetryCount,
		RouterBuffers:       DefaultRouterBuffers,
		RouterCheckInterval: DefaultRouterCheckInterval,
		RouterPingTimeout:   DefaultRouterPingTimeout,
		HealthSensitivity:   DefaultHealthSensitivity,
		RecoveryInterval:    DefaultRecoveryInterval,
		PeerAge:             DefaultPeerAge,
		MaxPeers:            DefaultMaxPeers,
	}
}

// Validate checks the configuration without touching the system (interface
// names are resolved only by New).
func (c Config) Validate() error {
	if c.TransactionTimeout < 0 {
		return fmt.Errorf("%w: config: transaction timeout %v is negative", ErrInvalid, c.TransactionTimeout)
	}
	if c.MaxWaiting < 0 {
		return fmt.Errorf("%w: config: max waiting %d is negative", ErrInvalid, c.MaxWaiting)
	}
	switch {
	case c.RouterBuffers < 0:
		return fmt.Errorf("%w: config: router buffers %d is negative", ErrInvalid, c.RouterBuffers)
	case c.MaxPeers < 0:
		return fmt.Errorf("%w: config: max peers %d is negative", ErrInvalid, c.MaxPeers)
	case c.HealthSensitivity > healthMax:
		return fmt.Errorf("%w: config: health sensitivity %d over %d", ErrInvalid, c.HealthSensitivity, healthMax)
	case c.RouterCheckInterval < 0, c.RouterPingTimeout < 0, c.RecoveryInterval < 0, c.PeerAge < 0:
		return fmt.Errorf("%w: config: negative interval", ErrInvalid)
	}
	for _, r := range c.Routes {
		if err := r.validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	seen := map[netip.Addr]wire.Net{}
	for _, n := range c.Networks {
		if err := n.Net.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if n.Net.Type == wire.LO && (len(n.Interfaces) > 0 || len(n.Addrs) > 0) {
			return fmt.Errorf("%w: config: net lo takes no interfaces", ErrInvalid)
		}
		t := n.Tunables
		if t.Credits < 0 || t.PeerCredits < 0 || t.PeerTimeout < 0 {
			return fmt.Errorf("%w: config: net %v: negative tunable %+v", ErrInvalid, n.Net, t)
		}
		if t.Credits > 0 && t.PeerCredits > t.Credits {
			return fmt.Errorf("%w: config: net %v: peer credits %d over credits %d", ErrInvalid, n.Net, t.PeerCredits, t.Credits)
		}
		for _, name := range n.Interfaces {
			if name == "" || strings.ContainsAny(name, " ,()") {
				return fmt.Errorf("%w: config: net %v: bad interface name %q", ErrInvalid, n.Net, name)
			}
		}
		for _, a := range n.Addrs {
			a = a.Unmap()
			if !a.IsValid() || a.Zone() != "" || a.IsUnspecified() {
				return fmt.Errorf("%w: config: net %v: bad address %v", ErrInvalid, n.Net, a)
			}
			if other, dup := seen[a]; dup {
				return fmt.Errorf("%w: config: address %v given twice (nets %v and %v)", ErrInvalid, a, other, n.Net)
			}
			seen[a] = n.Net
		}
	}
	return nil
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if c.PID == 0 {
		c.PID = wire.PIDLustre
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = DefaultTransactionTimeout
	}
	if c.RetryCount < 0 {
		c.RetryCount = 0
	}
	if c.RouterBuffers == 0 {
		c.RouterBuffers = DefaultRouterBuffers
	}
	if c.RouterCheckInterval == 0 {
		c.RouterCheckInterval = DefaultRouterCheckInterval
	}
	if c.RouterPingTimeout == 0 {
		c.RouterPingTimeout = DefaultRouterPingTimeout
	}
	if c.HealthSensitivity == 0 {
		c.HealthSensitivity = DefaultHealthSensitivity
	} else if c.HealthSensitivity < 0 {
		c.HealthSensitivity = -1
	}
	if c.RecoveryInterval == 0 {
		c.RecoveryInterval = DefaultRecoveryInterval
	}
	if c.PeerAge == 0 {
		c.PeerAge = DefaultPeerAge
	}
	if c.MaxPeers == 0 {
		c.MaxPeers = DefaultMaxPeers
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// ParseNetworks parses Lustre's "networks=" syntax: comma-separated nets,
// each optionally followed by a parenthesised, comma-separated list of
// interface names and IP addresses:
//
//	tcp(eth0,eth1), tcp1(10.0.0.1)
//	tcp1(10.0.0.1,10.0.0.2)
//	o2ib(ib0)
//	tcp
//
// A bare net uses the first non-loopback interface that is up. A net named
// twice has its lists merged. "lo" is accepted and ignored: 0@lo is always
// configured. Errors wrap ErrInvalid or wire.ErrBadNet and quote the input.
func ParseNetworks(s string) ([]NetConfig, error) {
	var out []NetConfig
	rest := s
	for {
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			break
		}
		end := strings.IndexAny(rest, ",(")
		if end < 0 {
			end = len(rest)
		}
		name := strings.TrimSpace(rest[:end])
		rest = rest[end:]
		var items []string
		if strings.HasPrefix(rest, "(") {
			closing := strings.IndexByte(rest, ')')
			if closing < 0 {
				return nil, fmt.Errorf("%w: networks %q: missing ')' after %q", ErrInvalid, s, name)
			}
			inner := rest[1:closing]
			if strings.ContainsAny(inner, "()") {
				return nil, fmt.Errorf("%w: networks %q: nested parentheses", ErrInvalid, s)
			}
			for _, it := range strings.Split(inner, ",") {
				it = strings.TrimSpace(it)
				if it == "" {
					return nil, fmt.Errorf("%w: networks %q: empty interface in %s(...)", ErrInvalid, s, name)
				}
				items = append(items, it)
			}
			rest = strings.TrimLeft(rest[closing+1:], " \t")
		}
		if rest != "" {
			if rest[0] != ',' {
				return nil, fmt.Errorf("%w: networks %q: unexpected %q after %q", ErrInvalid, s, rest, name)
			}
			rest = rest[1:]
			if strings.TrimSpace(rest) == "" {
				return nil, fmt.Errorf("%w: networks %q: trailing comma", ErrInvalid, s)
			}
		}
		if name == "" {
			return nil, fmt.Errorf("%w: networks %q: empty net name", ErrInvalid, s)
		}
		n, err := wire.ParseNet(name)
		if err != nil {
			return nil, fmt.Errorf("networks %q: %w", s, err)
		}
		if n.Type == wire.LO {
			if len(items) > 0 {
				return nil, fmt.Errorf("%w: networks %q: lo takes no interfaces", ErrInvalid, s)
			}
			continue
		}
		i := slices.IndexFunc(out, func(c NetConfig) bool { return c.Net == n })
		if i < 0 {
			out = append(out, NetConfig{Net: n})
			i = len(out) - 1
		}
		c := &out[i]
		for _, it := range items {
			if a, err := netip.ParseAddr(it); err == nil {
				a = a.Unmap()
				if a.Zone() != "" || a.IsUnspecified() {
					return nil, fmt.Errorf("%w: networks %q: bad address %q", ErrInvalid, s, it)
				}
				if slices.Contains(c.Addrs, a) {
					return nil, fmt.Errorf("%w: networks %q: %s given twice on %v", ErrInvalid, s, it, n)
				}
				c.Addrs = append(c.Addrs, a)
				continue
			}
			if strings.ContainsAny(it, " \t") {
				return nil, fmt.Errorf("%w: networks %q: bad interface %q", ErrInvalid, s, it)
			}
			if slices.Contains(c.Interfaces, it) {
				return nil, fmt.Errorf("%w: networks %q: %s given twice on %v", ErrInvalid, s, it, n)
			}
			c.Interfaces = append(c.Interfaces, it)
		}
	}
	return out, nil
}

// niSpec is one NI to start: a NID and what the driver needs for it.
type niSpec struct {
	nid   wire.NID
	iface string
	tun   Tunables
	opts  map[string]string
}

// resolver looks up interfaces; tests replace it.
type resolver struct {
	byName func(name string) ([]netip.Addr, error)
	first  func() (string, []netip.Addr, error)
}

var osResolver = resolver{byName: osIfaceAddrs, first: osFirstIface}

// resolveNIs turns the configured networks into NIs, 0@lo first.
func resolveNIs(nets []NetConfig, r resolver) ([]niSpec, error) {
	specs := []niSpec{{nid: wire.LoNID}}
	add := func(n NetConfig, addr netip.Addr, iface string) error {
		nid := wire.NID{Net: n.Net, Addr: addr.Unmap()}
		if err := nid.Validate(); err != nil {
			return fmt.Errorf("net %v: %w", n.Net, err)
		}
		if slices.ContainsFunc(specs, func(s niSpec) bool { return s.nid == nid }) {
			return fmt.Errorf("%w: NI %v configured twice", ErrInvalid, nid)
		}
		specs = append(specs, niSpec{nid: nid, iface: iface, tun: n.Tunables, opts: n.Options})
		return nil
	}
	for _, n := range nets {
		if n.Net.Type == wire.LO {
			specs[0].tun, specs[0].opts = n.Tunables, n.Options
			continue
		}
		if len(n.Interfaces) == 0 && len(n.Addrs) == 0 {
			name, addrs, err := r.first()
			if err != nil {
				return nil, fmt.Errorf("net %v: %w", n.Net, err)
			}
			a, err := firstIPv4(name, addrs)
			if err != nil {
				return nil, fmt.Errorf("net %v: %w", n.Net, err)
			}
			if err := add(n, a, name); err != nil {
				return nil, err
			}
			continue
		}
		for _, name := range n.Interfaces {
			addrs, err := r.byName(name)
			if err != nil {
				return nil, fmt.Errorf("net %v: interface %s: %w", n.Net, name, err)
			}
			a, err := firstIPv4(name, addrs)
			if err != nil {
				return nil, fmt.Errorf("net %v: %w", n.Net, err)
			}
			if err := add(n, a, name); err != nil {
				return nil, err
			}
		}
		for _, a := range n.Addrs {
			if err := add(n, a, ""); err != nil {
				return nil, err
			}
		}
	}
	return specs, nil
}

func firstIPv4(name string, addrs []netip.Addr) (netip.Addr, error) {
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: interface %s has no IPv4 address", ErrInvalid, name)
}

func osIfaceAddrs(name string) ([]netip.Addr, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	return ifaceAddrs(ifi)
}

func ifaceAddrs(ifi *net.Interface) ([]netip.Addr, error) {
	as, err := ifi.Addrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range as {
		if p, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(p.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

// osFirstIface finds the first interface that is up, not loopback, and has
// an IPv4 address.
func osFirstIface() (string, []netip.Addr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", nil, err
	}
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifaceAddrs(&ifi)
		if err != nil {
			continue
		}
		if _, err := firstIPv4(ifi.Name, addrs); err == nil {
			return ifi.Name, addrs, nil
		}
	}
	return "", nil, errors.New("lnet: no non-loopback interface with an IPv4 address is up")
}
