package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/nacrefs/nacre/server"
)

func newUpCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a whole Nacre cluster in this process: embedded etcd, MGS, Admin API and REST gateway",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd, mgsFlagAliases)
			if err != nil {
				return err
			}
			log, err := newLogger(v)
			if err != nil {
				return err
			}
			cfg := server.DefaultUpConfig()
			cfg.DataDir = v.GetString("data")
			cfg.FSName = v.GetString("fsname")
			cfg.EtcdClientURL = v.GetString("etcd-client-url")
			cfg.EtcdPeerURL = v.GetString("etcd-peer-url")
			if cfg.MGS, err = mgsConfigFrom(v); err != nil {
				return err
			}
			cfg.MGS.Logger = log
			cfg.OSTs = v.GetInt("osts")
			if cfg.OSTs > 0 {
				if cfg.LNet, err = lnetConfigFrom(v); err != nil {
					return err
				}
				if len(cfg.LNet.Networks) == 0 {
					cfg.LNet.Networks = server.DefaultUpConfig().LNet.Networks
					for i := range cfg.LNet.Networks {
						cfg.LNet.Networks[i].Options = map[string]string{"port": strconv.Itoa(v.GetInt("port"))}
					}
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			n, err := server.Up(ctx, cfg)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			abs, _ := filepath.Abs(cfg.DataDir)
			fmt.Fprintf(out, "nacre up: filesystem %q\n", cfg.FSName)
			fmt.Fprintf(out, "  etcd   %s (data %s)\n", cfg.EtcdClientURL, filepath.Join(abs, "etcd"))
			fmt.Fprintf(out, "  grpc   %s (MGS, Admin, health, reflection)\n", n.MGS.GRPCAddr())
			fmt.Fprintf(out, "  rest   http://%s/api/v1 (also /openapi.json, /healthz, /metrics)\n", n.MGS.HTTPAddr())
			if n.Storage != nil {
				if n.Storage.MDS != nil {
					for _, m := range n.Storage.MDS.MDTs() {
						fmt.Fprintf(out, "  mdt    %s on %v\n", m.Name(), n.Storage.LNet.NIDs())
					}
				}
				for _, o := range n.Storage.OSS.OSTs() {
					fmt.Fprintf(out, "  ost    %s on %v\n", o.Target().Name(), n.Storage.LNet.NIDs())
				}
			}
			switch {
			case n.TokenFile != "":
				fmt.Fprintf(out, "  token  %s (role admin; send 'Authorization: Bearer <token>')\n", n.TokenFile)
			case cfg.MGS.Auth.Disabled:
				fmt.Fprintln(out, "  auth   disabled")
			}
			fmt.Fprintln(out, "ready")
			select {
			case <-ctx.Done():
			case err := <-n.EtcdErr():
				log.Error("embedded etcd failed", "err", err)
			}
			return shutdown(cmd, n.Close)
		},
	}
	d := server.DefaultUpConfig()
	f := cmd.Flags()
	addMGSFlags(f)
	f.String("data", d.DataDir, "data directory (etcd data, admin token)")
	f.String("fsname", d.FSName, "filesystem to create on first start")
	f.String("etcd-client-url", d.EtcdClientURL, "embedded etcd client URL")
	f.String("etcd-peer-url", d.EtcdPeerURL, "embedded etcd peer URL")
	f.Int("osts", d.OSTs, "OSTs to serve (formatted under DATA/ostN on first start), with MDT0 (DATA/mdt0); 0: control plane only")
	addLNetFlags(f)
	return cmd
}
