package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	_ "github.com/nacrefs/nacre/lnd/lolnd"
	_ "github.com/nacrefs/nacre/lnd/socklnd"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/selftest"
	"github.com/nacrefs/nacre/lnet/wire"
	"github.com/nacrefs/nacre/services/lnetctl"
)

// addLNetFlags are the flags of every command that runs an LNet node.
func addLNetFlags(f *pflag.FlagSet) {
	f.StringArray("nid", nil, "a local NID to serve, e.g. 192.168.1.5@tcp (repeat for several NIs, multi-rail)")
	f.String("networks", "", "Lustre networks= syntax, e.g. 'tcp(eth0,eth1), tcp1(10.0.0.1)'")
	f.Int("port", 988, "socklnd acceptor port (every node of a cluster uses the same)")
	f.Duration("transaction-timeout", 50*time.Second, "LNet transaction timeout")
}

// lnetConfigFrom builds an LNet config from --nid and --networks.
func lnetConfigFrom(v *viper.Viper) (lnet.Config, error) {
	cfg := lnet.DefaultConfig()
	cfg.TransactionTimeout = v.GetDuration("transaction-timeout")
	opts := map[string]string{"port": strconv.Itoa(v.GetInt("port"))}
	if s := v.GetString("networks"); s != "" {
		nets, err := lnet.ParseNetworks(s)
		if err != nil {
			return cfg, fmt.Errorf("--networks: %w", err)
		}
		cfg.Networks = append(cfg.Networks, nets...)
	}
	for _, s := range v.GetStringSlice("nid") {
		nid, err := wire.ParseNID(s)
		if err != nil {
			return cfg, fmt.Errorf("--nid: %w", err)
		}
		if nid.Net.Type == wire.LO {
			continue // 0@lo is always there
		}
		found := false
		for i := range cfg.Networks {
			if cfg.Networks[i].Net == nid.Net {
				cfg.Networks[i].Addrs = append(cfg.Networks[i].Addrs, nid.Addr)
				found = true
			}
		}
		if !found {
			cfg.Networks = append(cfg.Networks, lnet.NetConfig{Net: nid.Net, Addrs: []netip.Addr{nid.Addr}})
		}
	}
	for i := range cfg.Networks {
		if cfg.Networks[i].Net.Type == wire.TCP {
			cfg.Networks[i].Options = opts
		}
	}
	return cfg, nil
}

// lnetCommandConfig loads a command's configuration and the LNet config
// with its logger, for every command that runs an LNet node.
func lnetCommandConfig(cmd *cobra.Command) (*viper.Viper, lnet.Config, error) {
	v, err := loadConfig(cmd, nil)
	if err != nil {
		return nil, lnet.Config{}, err
	}
	log, err := newLogger(v)
	if err != nil {
		return nil, lnet.Config{}, err
	}
	cfg, err := lnetConfigFrom(v)
	cfg.Logger = log
	return v, cfg, err
}

// closeLNet shuts a command's LNet node down within a bounded time.
func closeLNet(ln *lnet.LNet) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln.Close(ctx)
}

// parseRoute reads NET:GATEWAY[:HOPS[:PRIORITY]], e.g. tcp2:10.0.0.2@tcp1.
func parseRoute(s string) (lnet.Route, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 4 {
		return lnet.Route{}, fmt.Errorf("route %q: want NET:GATEWAY[:HOPS[:PRIORITY]], e.g. tcp2:10.0.0.2@tcp1", s)
	}
	n, err := wire.ParseNet(parts[0])
	if err != nil {
		return lnet.Route{}, fmt.Errorf("route %q: %w", s, err)
	}
	gw, err := wire.ParseNID(parts[1])
	if err != nil {
		return lnet.Route{}, fmt.Errorf("route %q: %w", s, err)
	}
	r := lnet.Route{Net: n, Gateway: gw, Hops: -1}
	if len(parts) > 2 {
		if r.Hops, err = strconv.Atoi(parts[2]); err != nil {
			return lnet.Route{}, fmt.Errorf("route %q: hops: %w", s, err)
		}
	}
	if len(parts) > 3 {
		p, err := strconv.ParseUint(parts[3], 10, 32)
		if err != nil {
			return lnet.Route{}, fmt.Errorf("route %q: priority: %w", s, err)
		}
		r.Priority = uint32(p)
	}
	return r, nil
}

func newLNetCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "lnet", Short: "Run a standalone LNet node"}
	serve := &cobra.Command{
		Use:   "serve --nid NID [--nid NID...] [--route NET:GWNID] [--routing]",
		Short: "Run an LNet node (router, selftest target) until stopped",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, cfg, err := lnetCommandConfig(cmd)
			if err != nil {
				return err
			}
			log := cfg.Logger
			cfg.Routing = v.GetBool("routing")
			if n := v.GetInt("router-buffers"); n > 0 {
				cfg.RouterBuffers = n
			}
			for _, s := range v.GetStringSlice("route") {
				r, err := parseRoute(s)
				if err != nil {
					return err
				}
				cfg.Routes = append(cfg.Routes, r)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ln, err := lnet.New(ctx, cfg)
			if err != nil {
				return err
			}
			defer closeLNet(ln)
			st, err := selftest.Serve(ln)
			if err != nil {
				return err
			}
			defer st.Close()
			sock := v.GetString("socket")
			ctl, err := lnetctl.Listen(sock, lnetctl.New(ln), log)
			if err != nil {
				return err
			}
			defer ctl.Close()
			nids := make([]string, 0)
			for _, n := range ln.NIDs() {
				nids = append(nids, n.String())
			}
			routing := "off"
			if cfg.Routing {
				routing = "on"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "nacre lnet serve: NIDs %s; routing %s; %d routes; control socket %s\nready\n", strings.Join(nids, ", "), routing, len(cfg.Routes), sock)
			<-ctx.Done()
			fmt.Fprintln(cmd.OutOrStdout(), "nacre: shutting down")
			return nil
		},
	}
	f := serve.Flags()
	addLNetFlags(f)
	f.StringArray("route", nil, "a route NET:GATEWAY[:HOPS[:PRIORITY]] (repeatable)")
	f.Bool("routing", false, "forward messages between this node's networks (be a router)")
	f.Int("router-buffers", 0, "forwarding buffers of MTU size (0: default)")
	f.String("socket", lnetctl.DefaultSocket, "control socket for nacre lnetctl")
	cmd.AddCommand(readsConfig(serve))
	return cmd
}

func newLstCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "lst", Short: "LNet selftest: bulk read/write and ping between NIDs"}
	run := &cobra.Command{
		Use:   "run --nid LOCALNID --peer NID --op read|write|ping [--size 1M] [--concurrency N] [--duration 10s]",
		Short: "Drive selftest traffic at a peer and print MB/s, RPC/s and latency",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, cfg, err := lnetCommandConfig(cmd)
			if err != nil {
				return err
			}
			peer, err := wire.ParseNID(v.GetString("peer"))
			if err != nil {
				return fmt.Errorf("--peer: %w", err)
			}
			size, err := parseSize(v.GetString("size"))
			if err != nil {
				return err
			}
			tc := selftest.Config{Peer: wire.ProcessID{NID: peer, PID: wire.PIDLustre}, Op: selftest.Op(v.GetString("op")),
				Size: size, Concurrency: v.GetInt("concurrency"), Duration: v.GetDuration("duration")}
			if err := tc.Validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ln, err := lnet.New(ctx, cfg)
			if err != nil {
				return err
			}
			defer closeLNet(ln)
			r, err := selftest.Run(ctx, ln, tc)
			if v.GetBool("json") {
				printJSON(cmd.OutOrStdout(), r)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "lst %s %s: size %d, concurrency %d, %.2fs\n  ops %d  errors %d\n  %.1f MB/s  %.1f RPC/s\n  latency p50 %.0fus  p90 %.0fus  p99 %.0fus  max %.0fus\n",
					r.Op, r.Peer, r.Size, r.Concurrency, r.Elapsed.Seconds(), r.Ops, r.Errors, r.MBps, r.RPCps, r.P50us, r.P90us, r.P99us, r.PMaxus)
				if r.FirstError != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "  first error: %s\n", r.FirstError)
				}
			}
			return err
		},
	}
	f := run.Flags()
	addLNetFlags(f)
	f.String("peer", "", "NID of the node to test (running nacre lnet serve or any Nacre server)")
	f.String("op", "write", "read, write or ping")
	f.String("size", "1M", "bytes per operation (K, M suffixes), at most 1M")
	f.Int("concurrency", 8, "operations in flight")
	f.Duration("duration", 10*time.Second, "how long to run")
	f.Bool("json", false, "print the result as JSON")
	cmd.AddCommand(readsConfig(run, "peer", "op", "size", "concurrency", "duration", "json"))
	return cmd
}

// parseSize reads 4096, 64K, 1M.
func parseSize(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"), strings.HasSuffix(s, "k"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"), strings.HasSuffix(s, "m"):
		mult, s = 1<<20, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("--size %q: want a byte count such as 4096, 64K or 1M", s)
	}
	return n * mult, nil
}
