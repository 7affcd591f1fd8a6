package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	lnetv1 "github.com/nacrefs/nacre/proto/nacre/lnet/v1"
	"github.com/nacrefs/nacre/services/lnetctl"
)

// The YAML shapes below follow Lustre's lnetctl output, keys included.

type yamlNIStats struct {
	SendCount uint64 `yaml:"send_count"`
	RecvCount uint64 `yaml:"recv_count"`
	DropCount uint64 `yaml:"drop_count"`
}

type yamlTunables struct {
	PeerTimeout       int32 `yaml:"peer_timeout"`
	PeerCredits       int32 `yaml:"peer_credits"`
	PeerBufferCredits int32 `yaml:"peer_buffer_credits"`
	Credits           int32 `yaml:"credits"`
}

type yamlHealth struct {
	Value int32 `yaml:"health value"`
}

type yamlNI struct {
	NID        string         `yaml:"nid"`
	Status     string         `yaml:"status"`
	Interfaces map[int]string `yaml:"interfaces,omitempty"`
	Statistics *yamlNIStats   `yaml:"statistics,omitempty"`
	Tunables   *yamlTunables  `yaml:"tunables,omitempty"`
	Health     *yamlHealth    `yaml:"health stats,omitempty"`
	// LND are the LND's own counters (socklnd's writes, continuations,
	// connections).
	LND map[string]uint64 `yaml:"lnd statistics,omitempty"`
}

type yamlNet struct {
	NetType string   `yaml:"net type"`
	NIs     []yamlNI `yaml:"local NI(s)"`
}

type yamlPeerNI struct {
	NID                string `yaml:"nid"`
	State              string `yaml:"state"`
	MaxNITxCredits     int32  `yaml:"max_ni_tx_credits"`
	AvailableTxCredits int32  `yaml:"available_tx_credits"`
	MinTxCredits       int32  `yaml:"min_tx_credits"`
	TxQNumOfBuf        int32  `yaml:"tx_q_num_of_buf"`
	Health             int32  `yaml:"health value"`
	SendCount          uint64 `yaml:"send_count"`
	RecvCount          uint64 `yaml:"recv_count"`
}

type yamlPeer struct {
	PrimaryNID string       `yaml:"primary nid"`
	MultiRail  pyBool       `yaml:"Multi-Rail"`
	PeerNIs    []yamlPeerNI `yaml:"peer ni"`
	// Configured: made by lnetctl peer add (not shown otherwise).
	Configured pyBool `yaml:"configured,omitempty"`
}

// pyBool prints True/False unquoted, as lnetctl (Python-style) does; a
// plain string would be quoted by the encoder because YAML 1.1 reads it as
// a boolean.
type pyBool bool

// MarshalYAML implements yaml.Marshaler.
func (b pyBool) MarshalYAML() (any, error) {
	v := "False"
	if b {
		v = "True"
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: v}, nil
}

func boolWord(b bool) pyBool { return pyBool(b) }

// niYAML is one NI as net show and export print it: its NID, status and
// interfaces, and its tunables if asked for.
func niYAML(ni *lnetv1.NI, tunables bool) yamlNI {
	y := yamlNI{NID: ni.GetNid(), Status: ni.GetStatus()}
	if len(ni.GetInterfaces()) > 0 {
		y.Interfaces = map[int]string{}
		for i, name := range ni.GetInterfaces() {
			y.Interfaces[i] = name
		}
	}
	if tunables {
		t := ni.GetTunables()
		y.Tunables = &yamlTunables{t.GetPeerTimeout(), t.GetPeerCredits(), t.GetPeerBufferCredits(), t.GetCredits()}
	}
	return y
}

func peerYAML(p *lnetv1.Peer) yamlPeer {
	out := yamlPeer{PrimaryNID: p.GetPrimaryNid(), MultiRail: boolWord(p.GetMultiRail()), Configured: boolWord(p.GetConfigured())}
	for _, n := range p.GetPeerNis() {
		out.PeerNIs = append(out.PeerNIs, yamlPeerNI{NID: n.GetNid(), State: n.GetState(), MaxNITxCredits: n.GetMaxNiTxCredits(),
			AvailableTxCredits: n.GetAvailableTxCredits(), MinTxCredits: n.GetMinTxCredits(), TxQNumOfBuf: n.GetTxQNumOfBuf(),
			Health: n.GetHealthValue(), SendCount: n.GetSendCount(), RecvCount: n.GetRecvCount()})
	}
	return out
}

func printYAML(w io.Writer, v any) error {
	enc := yaml.NewEncoder(w)
	enc.SetIndent(4)
	if err := enc.Encode(v); err != nil {
		return err
	}
	return enc.Close()
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func newLNetCtlCmd() *cobra.Command {
	var socket string
	var timeout time.Duration
	client := func() (lnetv1.LNetControlClient, func(), error) {
		cc, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, err
		}
		return lnetv1.NewLNetControlClient(cc), func() { cc.Close() }, nil
	}
	// call runs one control RPC with the timeout and a readable error.
	call := func(cmd *cobra.Command, fn func(context.Context, lnetv1.LNetControlClient) (any, error)) error {
		c, done, err := client()
		if err != nil {
			return err
		}
		defer done()
		ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
		defer cancel()
		out, err := fn(ctx, c)
		if err != nil {
			// The node's own refusals (a NI that exists, a route in the
			// way) are shown as they are; the hint is for no answer.
			st := status.Convert(err)
			if st.Code() == codes.DeadlineExceeded || st.Code() == codes.Unavailable && strings.Contains(st.Message(), "connection error") {
				return fmt.Errorf("%s (is an LNet node serving %s?)", st.Message(), socket)
			}
			return errors.New(st.Message())
		}
		return printYAML(cmd.OutOrStdout(), out)
	}
	root := &cobra.Command{Use: "lnetctl", Short: "Show and change a running LNet node (Lustre's lnetctl)"}
	root.PersistentFlags().StringVar(&socket, "socket", lnetctl.DefaultSocket, "control socket of the LNet node")
	root.PersistentFlags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for an answer")

	net := &cobra.Command{Use: "net", Short: "Local networks and NIs"}
	var verbose bool
	netShow := &cobra.Command{
		Use: "show [-v]", Short: "List local NIs", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				r, err := c.ShowNets(ctx, &lnetv1.ShowNetsRequest{Verbose: verbose})
				if err != nil {
					return nil, err
				}
				out := struct {
					Net  []yamlNet        `yaml:"net"`
					RDMA []map[string]any `yaml:"rdma devices,omitempty"`
					Note string           `yaml:"rdma,omitempty"`
				}{Note: r.GetRdmaNote()}
				for _, n := range r.GetNets() {
					yn := yamlNet{NetType: n.GetNetType()}
					for _, ni := range n.GetLocalNis() {
						y := niYAML(ni, verbose)
						if verbose {
							s := ni.GetStatistics()
							y.Statistics = &yamlNIStats{s.GetSendCount(), s.GetRecvCount(), s.GetDropCount()}
							y.Health = &yamlHealth{ni.GetHealthValue()}
							for _, c := range ni.GetLndStatistics() {
								if y.LND == nil {
									y.LND = map[string]uint64{}
								}
								y.LND[c.GetName()] = c.GetValue()
							}
						}
						yn.NIs = append(yn.NIs, y)
					}
					out.Net = append(out.Net, yn)
				}
				for _, d := range r.GetRdmaDevices() {
					out.RDMA = append(out.RDMA, map[string]any{"device": d.GetName(), "net devices": d.GetNetDevices()})
				}
				return out, nil
			})
		},
	}
	netShow.Flags().BoolVarP(&verbose, "verbose", "v", false, "statistics, tunables, health and RDMA devices")
	var nNet string
	var nIf, nIP []string
	var nPeerCredits, nCredits, nPeerTimeout int32
	netAdd := &cobra.Command{
		Use: "add --net NET [--if IFACE,...] [--ip ADDR,...] [--peer-credits N] [--credits N] [--peer-timeout S]", Args: cobra.NoArgs,
		Short: "Bring up NIs on a running node: one per interface or address (none named: the first interface with an IPv4 address)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				r, err := c.AddNet(ctx, &lnetv1.AddNetRequest{Net: nNet, Interfaces: nIf, Addresses: nIP,
					PeerCredits: nPeerCredits, Credits: nCredits, PeerTimeout: nPeerTimeout})
				return struct {
					Added []string `yaml:"added"`
				}{r.GetNids()}, err
			})
		},
	}
	netAdd.Flags().StringVar(&nNet, "net", "", "the network, e.g. tcp1")
	netAdd.Flags().StringSliceVar(&nIf, "if", nil, "OS interfaces, comma-separated")
	netAdd.Flags().StringSliceVar(&nIP, "ip", nil, "IPv4 addresses, comma-separated")
	netAdd.Flags().Int32Var(&nPeerCredits, "peer-credits", 0, "sends in flight to one peer (0: the driver's default)")
	netAdd.Flags().Int32Var(&nCredits, "credits", 0, "sends in flight on the NI (0: the driver's default)")
	netAdd.Flags().Int32Var(&nPeerTimeout, "peer-timeout", 0, "seconds a peer may stay silent before it is dead (0: the driver's default)")
	netDel := &cobra.Command{
		Use: "del --net NET [--if IFACE,...]", Args: cobra.NoArgs,
		Short: "Shut NIs down on a running node: every NI of the net, or those on the interfaces (or addresses) named",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				r, err := c.DeleteNet(ctx, &lnetv1.DeleteNetRequest{Net: nNet, Interfaces: nIf})
				return struct {
					Deleted []string `yaml:"deleted"`
				}{r.GetNids()}, err
			})
		},
	}
	netDel.Flags().StringVar(&nNet, "net", "", "the network, e.g. tcp1")
	netDel.Flags().StringSliceVar(&nIf, "if", nil, "only the NIs on these interfaces or addresses, comma-separated")
	net.AddCommand(netShow, netAdd, netDel)

	peer := &cobra.Command{Use: "peer", Short: "Known peers"}
	peer.AddCommand(&cobra.Command{
		Use: "show", Short: "List peers and their NIs", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				r, err := c.ShowPeers(ctx, &lnetv1.ShowPeersRequest{})
				if err != nil {
					return nil, err
				}
				out := struct {
					Peer []yamlPeer `yaml:"peer"`
				}{Peer: []yamlPeer{}}
				for _, p := range r.GetPeers() {
					out.Peer = append(out.Peer, peerYAML(p))
				}
				return out, nil
			})
		},
	})

	var pPrim string
	var pNIDs []string
	var pNonMR bool
	peerAdd := &cobra.Command{
		Use: "add --prim_nid NID [--nid NID,...] [--non_mr]", Short: "Configure a peer: its NIDs, kept however idle", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				_, err := c.AddPeer(ctx, &lnetv1.AddPeerRequest{PrimaryNid: pPrim, Nids: pNIDs, NonMr: pNonMR})
				return struct{}{}, err
			})
		},
	}
	peerAdd.Flags().StringVar(&pPrim, "prim_nid", "", "the peer's primary NID")
	peerAdd.Flags().StringSliceVar(&pNIDs, "nid", nil, "the peer's other NIDs, comma-separated")
	peerAdd.Flags().BoolVar(&pNonMR, "non_mr", false, "a peer that is not multi-rail (one NID)")
	peerDel := &cobra.Command{
		Use: "del --prim_nid NID [--nid NID,...]", Short: "Delete a peer, or some of its NIDs", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				_, err := c.DeletePeer(ctx, &lnetv1.DeletePeerRequest{PrimaryNid: pPrim, Nids: pNIDs})
				return struct{}{}, err
			})
		},
	}
	peerDel.Flags().StringVar(&pPrim, "prim_nid", "", "the peer's primary NID")
	peerDel.Flags().StringSliceVar(&pNIDs, "nid", nil, "NIDs to delete from the peer, comma-separated (none: the whole peer)")
	peer.AddCommand(peerAdd, peerDel)

	route := &cobra.Command{Use: "route", Short: "Routes to remote networks"}
	route.AddCommand(&cobra.Command{
		Use: "show", Short: "List routes", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				r, err := c.ShowRoutes(ctx, &lnetv1.ShowRoutesRequest{})
				if err != nil {
					return nil, err
				}
				out := struct {
					Route []yamlRoute `yaml:"route"`
				}{Route: []yamlRoute{}}
				for _, rt := range r.GetRoutes() {
					out.Route = append(out.Route, yamlRoute{rt.GetNet(), rt.GetGateway(), rt.GetHop(), rt.GetPriority(), rt.GetState()})
				}
				return out, nil
			})
		},
	})
	var rNet, rGW string
	var rHop int32
	var rPrio uint32
	routeAdd := &cobra.Command{
		Use: "add --net NET --gateway NID [--hop N] [--priority P]", Short: "Add a route", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				_, err := c.AddRoute(ctx, &lnetv1.AddRouteRequest{Route: &lnetv1.Route{Net: rNet, Gateway: rGW, Hop: rHop, Priority: rPrio}})
				return struct{}{}, err
			})
		},
	}
	routeAdd.Flags().StringVar(&rNet, "net", "", "remote network, e.g. tcp2")
	routeAdd.Flags().StringVar(&rGW, "gateway", "", "router NID on a local network")
	routeAdd.Flags().Int32Var(&rHop, "hop", -1, "hop count (-1: unknown)")
	routeAdd.Flags().Uint32Var(&rPrio, "priority", 0, "priority (lower is preferred)")
	routeDel := &cobra.Command{
		Use: "del --net NET [--gateway NID]", Short: "Delete routes", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				_, err := c.DeleteRoute(ctx, &lnetv1.DeleteRouteRequest{Net: rNet, Gateway: rGW})
				return struct{}{}, err
			})
		},
	}
	routeDel.Flags().StringVar(&rNet, "net", "", "remote network")
	routeDel.Flags().StringVar(&rGW, "gateway", "", "router NID (empty: every route to the net)")
	route.AddCommand(routeAdd, routeDel)

	ping := &cobra.Command{
		Use: "ping NID", Short: "LNet ping: a peer's NIDs and the round trip", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				r, err := c.Ping(ctx, &lnetv1.PingRequest{Nid: args[0], TimeoutMs: timeout.Milliseconds()})
				if err != nil {
					return nil, err
				}
				type pni struct {
					NID string `yaml:"nid"`
				}
				p := struct {
					Primary   string `yaml:"primary nid"`
					MultiRail pyBool `yaml:"Multi-Rail"`
					PeerNIs   []pni  `yaml:"peer ni"`
					RTT       string `yaml:"rtt"`
				}{Primary: r.GetPrimaryNid(), MultiRail: boolWord(r.GetMultiRail()), RTT: (time.Duration(r.GetRttUs()) * time.Microsecond).String()}
				for _, n := range r.GetPeerNis() {
					p.PeerNIs = append(p.PeerNIs, pni{n})
				}
				return map[string]any{"ping": []any{p}}, nil
			})
		},
	}
	discover := &cobra.Command{
		Use: "discover NID", Short: "Discover a peer's NIDs (multi-rail)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				r, err := c.Discover(ctx, &lnetv1.DiscoverRequest{Nid: args[0], TimeoutMs: timeout.Milliseconds()})
				if err != nil {
					return nil, err
				}
				return map[string]any{"discover": []any{peerYAML(r.GetPeer())}}, nil
			})
		},
	}
	stats := &cobra.Command{Use: "stats", Short: "Global counters"}
	stats.AddCommand(&cobra.Command{
		Use: "show", Short: "Show global counters", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				r, err := c.ShowStats(ctx, &lnetv1.ShowStatsRequest{})
				if err != nil {
					return nil, err
				}
				return struct {
					Statistics yamlStats `yaml:"statistics"`
				}{statsYAML(r.GetStatistics())}, nil
			})
		},
	})
	showGlobals := func(g *lnetv1.Globals) any {
		return struct {
			Global yamlGlobals `yaml:"global"`
		}{globalsYAML(g)}
	}
	global := &cobra.Command{Use: "global", Short: "Global settings"}
	global.AddCommand(&cobra.Command{
		Use: "show", Short: "Show the global settings", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				r, err := c.ShowGlobals(ctx, &lnetv1.ShowGlobalsRequest{})
				if err != nil {
					return nil, err
				}
				return showGlobals(r.GetGlobals()), nil
			})
		},
	})
	set := &cobra.Command{Use: "set", Short: "Change a global setting (printed back, as global show does)"}
	for _, g := range []struct {
		name, use, short string
		req              func(v string) (*lnetv1.SetGlobalsRequest, error)
	}{
		{"discovery", "discovery 0|1", "Turn automatic peer discovery off or on", func(v string) (*lnetv1.SetGlobalsRequest, error) {
			b, err := parseBit(v)
			return &lnetv1.SetGlobalsRequest{Discovery: &b}, err
		}},
		{"retry_count", "retry_count N", "Resends of a send that failed on its connection (0-100)", func(v string) (*lnetv1.SetGlobalsRequest, error) {
			n, err := int32Arg(v)
			return &lnetv1.SetGlobalsRequest{RetryCount: n}, err
		}},
		{"transaction_timeout", "transaction_timeout SECONDS", "The time a whole LNet operation may take", func(v string) (*lnetv1.SetGlobalsRequest, error) {
			f, err := secondsArg(v)
			return &lnetv1.SetGlobalsRequest{TransactionTimeout: f}, err
		}},
		{"health_sensitivity", "health_sensitivity N", "Health lost per failed send, out of 1000 (0: health off)", func(v string) (*lnetv1.SetGlobalsRequest, error) {
			n, err := int32Arg(v)
			return &lnetv1.SetGlobalsRequest{HealthSensitivity: n}, err
		}},
		{"recovery_interval", "recovery_interval SECONDS", "How often unhealthy NIs and peer NIs are pinged", func(v string) (*lnetv1.SetGlobalsRequest, error) {
			f, err := secondsArg(v)
			return &lnetv1.SetGlobalsRequest{RecoveryInterval: f}, err
		}},
	} {
		set.AddCommand(&cobra.Command{
			Use: g.use, Short: g.short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				req, err := g.req(args[0])
				if err != nil {
					return fmt.Errorf("lnetctl set %s %q: not a valid value", g.name, args[0])
				}
				return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
					r, err := c.SetGlobals(ctx, req)
					if err != nil {
						return nil, err
					}
					return showGlobals(r.GetGlobals()), nil
				})
			},
		})
	}
	root.AddCommand(net, peer, route, ping, discover, stats, global, set)
	root.AddCommand(exportImportCmds(call)...)
	return root
}

// yamlGlobals are the global settings as lnetctl global show prints them
// (times in seconds, discovery as 0 or 1).
type yamlGlobals struct {
	Discovery          int     `yaml:"discovery"`
	RetryCount         int32   `yaml:"retry_count"`
	TransactionTimeout float64 `yaml:"transaction_timeout"`
	HealthSensitivity  int32   `yaml:"health_sensitivity"`
	RecoveryInterval   float64 `yaml:"recovery_interval"`
}

func globalsYAML(g *lnetv1.Globals) yamlGlobals {
	d := 0
	if g.GetDiscovery() {
		d = 1
	}
	return yamlGlobals{Discovery: d, RetryCount: g.GetRetryCount(), TransactionTimeout: g.GetTransactionTimeout(),
		HealthSensitivity: g.GetHealthSensitivity(), RecoveryInterval: g.GetRecoveryInterval()}
}

// int32Arg and secondsArg read lnetctl set's integer and seconds values.
func int32Arg(v string) (*int32, error) {
	n, err := strconv.ParseInt(v, 10, 32)
	n32 := int32(n)
	return &n32, err
}

func secondsArg(v string) (*float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	return &f, err
}

// parseBit reads 0 or 1, as lnetctl set discovery takes them.
func parseBit(v string) (bool, error) {
	switch v {
	case "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, fmt.Errorf("%q: want 0 or 1", v)
}

// yamlStats lists the counters in the order lnetctl prints them.
type yamlStats struct {
	MsgsAlloc            uint64 `yaml:"msgs_alloc"`
	MsgsMax              uint64 `yaml:"msgs_max"`
	Errors               uint64 `yaml:"errors"`
	SendCount            uint64 `yaml:"send_count"`
	ResendCount          uint64 `yaml:"resend_count"`
	ResponseTimeoutCount uint64 `yaml:"response_timeout_count"`
	LocalInterruptCount  uint64 `yaml:"local_interrupt_count"`
	LocalDroppedCount    uint64 `yaml:"local_dropped_count"`
	LocalAbortedCount    uint64 `yaml:"local_aborted_count"`
	LocalNoRouteCount    uint64 `yaml:"local_no_route_count"`
	LocalTimeoutCount    uint64 `yaml:"local_timeout_count"`
	LocalErrorCount      uint64 `yaml:"local_error_count"`
	RemoteDroppedCount   uint64 `yaml:"remote_dropped_count"`
	RemoteErrorCount     uint64 `yaml:"remote_error_count"`
	RemoteTimeoutCount   uint64 `yaml:"remote_timeout_count"`
	NetworkTimeoutCount  uint64 `yaml:"network_timeout_count"`
	RecvCount            uint64 `yaml:"recv_count"`
	RouteCount           uint64 `yaml:"route_count"`
	DropCount            uint64 `yaml:"drop_count"`
	SendLength           uint64 `yaml:"send_length"`
	RecvLength           uint64 `yaml:"recv_length"`
	RouteLength          uint64 `yaml:"route_length"`
	DropLength           uint64 `yaml:"drop_length"`
}

func statsYAML(s *lnetv1.Statistics) yamlStats {
	return yamlStats{
		MsgsAlloc: s.GetMsgsAlloc(), MsgsMax: s.GetMsgsMax(), Errors: s.GetErrors(), SendCount: s.GetSendCount(),
		ResendCount: s.GetResendCount(), ResponseTimeoutCount: s.GetResponseTimeoutCount(),
		LocalInterruptCount: s.GetLocalInterruptCount(), LocalDroppedCount: s.GetLocalDroppedCount(),
		LocalAbortedCount: s.GetLocalAbortedCount(), LocalNoRouteCount: s.GetLocalNoRouteCount(),
		LocalTimeoutCount: s.GetLocalTimeoutCount(), LocalErrorCount: s.GetLocalErrorCount(),
		RemoteDroppedCount: s.GetRemoteDroppedCount(), RemoteErrorCount: s.GetRemoteErrorCount(),
		RemoteTimeoutCount: s.GetRemoteTimeoutCount(), NetworkTimeoutCount: s.GetNetworkTimeoutCount(),
		RecvCount: s.GetRecvCount(), RouteCount: s.GetRouteCount(), DropCount: s.GetDropCount(),
		SendLength: s.GetSendLength(), RecvLength: s.GetRecvLength(), RouteLength: s.GetRouteLength(), DropLength: s.GetDropLength(),
	}
}
