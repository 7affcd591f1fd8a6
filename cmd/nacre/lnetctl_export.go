package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nacrefs/nacre/lnet/wire"
	lnetv1 "github.com/nacrefs/nacre/proto/nacre/lnet/v1"
)

// lnetConfig is what lnetctl export prints and import reads: the node's
// configuration in the shape of Lustre's lnetctl export (nets with their
// NIs and tunables, routes, configured peers, globals), without counters.
type lnetConfig struct {
	Net    []yamlNet    `yaml:"net,omitempty"`
	Route  []yamlRoute  `yaml:"route,omitempty"`
	Peer   []exportPeer `yaml:"peer,omitempty"`
	Global *yamlGlobals `yaml:"global,omitempty"`
}

// exportPeer is a configured peer as lnetctl export prints it: its NIDs,
// without peer show's counters.
type exportPeer struct {
	PrimaryNID string `yaml:"primary nid"`
	MultiRail  pyBool `yaml:"Multi-Rail"`
	PeerNIs    []struct {
		NID string `yaml:"nid"`
	} `yaml:"peer ni"`
}

type yamlRoute struct {
	Net      string `yaml:"net"`
	Gateway  string `yaml:"gateway"`
	Hop      int32  `yaml:"hop"`
	Priority uint32 `yaml:"priority"`
	State    string `yaml:"state,omitempty"`
}

// caller runs one control RPC (newLNetCtlCmd's call).
type caller func(cmd *cobra.Command, fn func(context.Context, lnetv1.LNetControlClient) (any, error)) error

// exportConfig reads the node's configuration.
func exportConfig(ctx context.Context, c lnetv1.LNetControlClient) (*lnetConfig, error) {
	out := &lnetConfig{}
	nets, err := c.ShowNets(ctx, &lnetv1.ShowNetsRequest{Verbose: true})
	if err != nil {
		return nil, err
	}
	for _, n := range nets.GetNets() {
		if n.GetNetType() == wire.LO.String() {
			continue // always there
		}
		yn := yamlNet{NetType: n.GetNetType()}
		for _, ni := range n.GetLocalNis() {
			yn.NIs = append(yn.NIs, niYAML(ni, true))
		}
		out.Net = append(out.Net, yn)
	}
	routes, err := c.ShowRoutes(ctx, &lnetv1.ShowRoutesRequest{})
	if err != nil {
		return nil, err
	}
	for _, r := range routes.GetRoutes() {
		out.Route = append(out.Route, yamlRoute{Net: r.GetNet(), Gateway: r.GetGateway(), Hop: r.GetHop(), Priority: r.GetPriority()})
	}
	peers, err := c.ShowPeers(ctx, &lnetv1.ShowPeersRequest{})
	if err != nil {
		return nil, err
	}
	for _, p := range peers.GetPeers() {
		if !p.GetConfigured() {
			continue // what traffic and discovery found is found again
		}
		yp := exportPeer{PrimaryNID: p.GetPrimaryNid(), MultiRail: boolWord(p.GetMultiRail())}
		for _, n := range p.GetPeerNis() {
			yp.PeerNIs = append(yp.PeerNIs, struct {
				NID string `yaml:"nid"`
			}{n.GetNid()})
		}
		out.Peer = append(out.Peer, yp)
	}
	g, err := c.ShowGlobals(ctx, &lnetv1.ShowGlobalsRequest{})
	if err != nil {
		return nil, err
	}
	gy := globalsYAML(g.GetGlobals())
	out.Global = &gy
	return out, nil
}

// importSummary is what import prints: what it did and what was there.
type importSummary struct {
	Added   []string `yaml:"added,omitempty"`
	Deleted []string `yaml:"deleted,omitempty"`
	Present []string `yaml:"already there,omitempty"`
	Absent  []string `yaml:"not there,omitempty"`
}

// importConfig applies cfg to the node (del: takes away what it lists).
// What is there already (or, deleting, is not) is skipped, so an import
// can be run again.
func importConfig(ctx context.Context, c lnetv1.LNetControlClient, cfg *lnetConfig, del bool) (*importSummary, error) {
	sum := &importSummary{}
	// done records what one RPC did, or that it had nothing to do (the
	// code missing says so), or fails.
	done := func(err error, missing codes.Code, what string) error {
		switch status.Code(err) {
		case codes.OK:
			if del {
				sum.Deleted = append(sum.Deleted, what)
			} else {
				sum.Added = append(sum.Added, what)
			}
			return nil
		case missing:
			if del {
				sum.Absent = append(sum.Absent, what)
			} else {
				sum.Present = append(sum.Present, what)
			}
			return nil
		}
		return fmt.Errorf("%s: %s", what, status.Convert(err).Message())
	}
	routes := func() error {
		for _, r := range cfg.Route {
			what := "route " + r.Net + " via " + r.Gateway
			var err error
			if del {
				_, err = c.DeleteRoute(ctx, &lnetv1.DeleteRouteRequest{Net: r.Net, Gateway: r.Gateway})
			} else {
				// (An existing route takes the hop count and priority.)
				_, err = c.AddRoute(ctx, &lnetv1.AddRouteRequest{Route: &lnetv1.Route{Net: r.Net, Gateway: r.Gateway, Hop: r.Hop, Priority: r.Priority}})
			}
			if err := done(err, codes.NotFound, what); err != nil {
				return err
			}
		}
		return nil
	}
	if del { // routes first: their gateways keep their nets
		if err := routes(); err != nil {
			return sum, err
		}
	}
	for _, n := range cfg.Net {
		if n.NetType == wire.LO.String() {
			continue
		}
		for _, ni := range n.NIs {
			nid, err := wire.ParseNID(ni.NID)
			if err != nil {
				return sum, fmt.Errorf("net %s: %w", n.NetType, err)
			}
			what := "net " + ni.NID
			if del {
				_, err = c.DeleteNet(ctx, &lnetv1.DeleteNetRequest{Net: nid.Net.String(), Interfaces: []string{nid.Addr.String()}})
			} else {
				// By address, not interface: the NID is what peers know.
				req := &lnetv1.AddNetRequest{Net: nid.Net.String(), Addresses: []string{nid.Addr.String()}}
				if t := ni.Tunables; t != nil {
					req.PeerCredits, req.Credits, req.PeerTimeout = t.PeerCredits, t.Credits, t.PeerTimeout
				}
				_, err = c.AddNet(ctx, req)
			}
			missing := codes.AlreadyExists
			if del {
				missing = codes.NotFound
			}
			if err := done(err, missing, what); err != nil {
				return sum, err
			}
		}
	}
	if !del { // routes after nets: their gateways need them
		if err := routes(); err != nil {
			return sum, err
		}
	}
	for _, p := range cfg.Peer {
		what := "peer " + p.PrimaryNID
		var err error
		if del {
			_, err = c.DeletePeer(ctx, &lnetv1.DeletePeerRequest{PrimaryNid: p.PrimaryNID})
		} else {
			var nids []string
			for _, n := range p.PeerNIs {
				if n.NID != p.PrimaryNID {
					nids = append(nids, n.NID)
				}
			}
			_, err = c.AddPeer(ctx, &lnetv1.AddPeerRequest{PrimaryNid: p.PrimaryNID, Nids: nids, NonMr: !bool(p.MultiRail)})
		}
		if err := done(err, codes.NotFound, what); err != nil {
			return sum, err
		}
	}
	if g := cfg.Global; g != nil && !del {
		disc := g.Discovery != 0
		req := &lnetv1.SetGlobalsRequest{Discovery: &disc, RetryCount: &g.RetryCount, HealthSensitivity: &g.HealthSensitivity}
		if g.TransactionTimeout > 0 {
			req.TransactionTimeout = &g.TransactionTimeout
		}
		if g.RecoveryInterval > 0 {
			req.RecoveryInterval = &g.RecoveryInterval
		}
		_, err := c.SetGlobals(ctx, req)
		if err := done(err, codes.OK, "global"); err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// readConfig reads an export from path, or standard input for "-".
func readConfig(path string, stdin io.Reader) (*lnetConfig, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	cfg := &lnetConfig{}
	if err := yaml.Unmarshal(b, cfg); err != nil {
		return nil, fmt.Errorf("%s: not an lnetctl export: %w", path, err)
	}
	if len(cfg.Net) == 0 && len(cfg.Route) == 0 && len(cfg.Peer) == 0 && cfg.Global == nil {
		return nil, errors.New(path + ": no net, route, peer or global section")
	}
	return cfg, nil
}

// exportImportCmds are lnetctl export and import.
func exportImportCmds(call caller) []*cobra.Command {
	export := &cobra.Command{
		Use: "export", Short: "Print the node's configuration (nets, routes, configured peers, globals) as import reads it", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				return exportConfig(ctx, c)
			})
		},
	}
	var del bool
	imp := &cobra.Command{
		Use: "import [--del] FILE|-", Short: "Apply an export to the node (--del: take away what it lists); what is already so is skipped", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := readConfig(args[0], cmd.InOrStdin())
			if err != nil {
				return err
			}
			return call(cmd, func(ctx context.Context, c lnetv1.LNetControlClient) (any, error) {
				sum, err := importConfig(ctx, c, cfg, del)
				if err != nil && (len(sum.Added) > 0 || len(sum.Deleted) > 0) {
					// Say what was done before the error, which stops
					// the import there.
					var done bytes.Buffer
					if perr := printYAML(&done, sum); perr == nil {
						err = status.Errorf(status.Code(err), "%s\ndone before it:\n%s", status.Convert(err).Message(), strings.TrimRight(done.String(), "\n"))
					}
				}
				return sum, err
			})
		},
	}
	imp.Flags().BoolVar(&del, "del", false, "delete the nets, routes and peers the file lists")
	return []*cobra.Command{export, imp}
}
