package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nacrefs/nacre/server"
	"github.com/nacrefs/nacre/services/admin"
	"github.com/nacrefs/nacre/services/lnetctl"
)

func newMkfsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mkfs --ost|--mdt --fsname NAME --index N --mgsnode NID[,NID] DIR",
		Short: "Format a directory as a storage target (its identity, label and store)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// As every command: flags, then NACRE_* variables, then the
			// config file (NACRE_MGSNODE=a@tcp,b@tcp, mgsnode: in the file).
			v, err := loadConfig(cmd, nil)
			if err != nil {
				return err
			}
			ost, mdt := v.GetBool("ost"), v.GetBool("mdt")
			if ost == mdt {
				return fmt.Errorf("mkfs: give exactly one of --ost and --mdt")
			}
			var nodes []string
			for _, n := range v.GetStringSlice("mgsnode") {
				// A variable is split on spaces only; a flag on commas too.
				for _, s := range strings.Split(n, ",") {
					if s = strings.TrimSpace(s); s != "" {
						nodes = append(nodes, s)
					}
				}
			}
			id := server.TargetIdentity{FSName: v.GetString("fsname"), Index: v.GetUint32("index"), MGSNodes: nodes, Backend: v.GetString("backend")}
			format := server.FormatOST
			if mdt {
				format = server.FormatMDT
			}
			id, err = format(cmd.Context(), args[0], id)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "formatted %s as %s (uuid %s, mgs %s)\n", args[0], id.Label, id.UUID, strings.Join(id.MGSNodes, ","))
			return nil
		},
	}
	f := cmd.Flags()
	f.Bool("ost", false, "format an object storage target")
	f.Bool("mdt", false, "format a metadata target")
	f.String("fsname", "nacre", "filesystem name (1-8 of [A-Za-z0-9_-])")
	f.Uint32("index", 0, "target index")
	f.StringSlice("mgsnode", nil, "MGS NID or host:port (repeat or comma-separate for failover partners)")
	f.String("backend", "file", "OSD backend of an OST (an MDT's store is pebble)")
	return readsConfig(cmd)
}

func newServerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "server DIR... [--nid NID | --networks SPEC]",
		Short: "Serve formatted targets on LNet and register them with the MGS",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, lcfg, err := lnetCommandConfig(cmd)
			if err != nil {
				return err
			}
			if len(lcfg.Networks) == 0 {
				return fmt.Errorf("server: give the NIDs to serve on (--nid 192.168.1.5@tcp or --networks)")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			st, err := server.StartServer(ctx, server.ServerConfig{Dirs: args, LNet: lcfg, Logger: lcfg.Logger,
				CallbackTimeout: v.GetDuration("ldlm-timeout"), EvictTimeout: v.GetDuration("evict-timeout"),
				RecoveryWindow: v.GetDuration("recovery-window"), StatusAddr: v.GetString("metrics-addr"),
				RestoreReplayBarrier: v.GetBool("restore-replay-barrier")})
			if err != nil {
				return err
			}
			sock := v.GetString("socket")
			ctl, err := lnetctl.Listen(sock, lnetctl.New(st.LNet), lcfg.Logger)
			if err != nil {
				st.Close(context.Background())
				return err
			}
			defer ctl.Close()
			if at := st.StatusAddr(); at != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "nacre server: metrics at http://%s/metrics, state at http://%s%s\n", at, at, admin.StatePath)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "nacre server: %s on %v\nready\n", strings.Join(st.Targets(), ", "), st.LNet.NIDs())
			<-ctx.Done()
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return st.Close(cctx)
		},
	}
	f := cmd.Flags()
	addLNetFlags(f)
	f.Duration("ldlm-timeout", 0, "how long a client has to give a lock back before eviction (0: default)")
	f.Duration("evict-timeout", 0, "how long a silent client keeps its export (0: default)")
	f.Duration("recovery-window", 0, "how long a restarted target waits for its clients to reconnect and replay (0: default 90s, negative: none)")
	f.Bool("restore-replay-barrier", false, "put each target that set a replay barrier (mdt.*.replay_barrier, obdfilter.*.replay_barrier) back as it was then: later changes are lost, for the clients to replay (testing recovery)")
	f.String("socket", lnetctl.DefaultSocket, "control socket for nacre lnetctl")
	f.String("metrics-addr", "127.0.0.1:9882", "the status port: Prometheus metrics at http://ADDR/metrics and the live state the MGS's admin API reads, registered with the targets; the MGS must reach it: on several hosts, 0.0.0.0:9882 (advertised at the first NID's address) (\"\": none; :0 picks a port)")
	return readsConfig(cmd)
}
