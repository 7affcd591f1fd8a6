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

	"github.com/nacrefs/nacre/internal/mmp"
	"github.com/nacrefs/nacre/server"
	"github.com/nacrefs/nacre/services/admin"
	"github.com/nacrefs/nacre/services/lnetctl"
)

func newMkfsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mkfs --ost|--mdt --fsname NAME --index N --mgsnode NID[,NID] [--failnode NID[,NID]] DIR",
		Short: "Format a directory as a storage target (its identity, label and store)",
		Long: `Format a directory as a storage target (its identity, label and store).

A target on storage that more than one server reaches (the shared disk of a
failover pair) names the servers that may serve it: --servicenode lists
them all, --failnode the partners of the one formatting it (as mkfs.lustre).
Clients try them in turn when the server they talk to stops answering. Such
a target gets multiple-mount protection (--mmp, on by default with failover
nodes): the server serving it rewrites a heartbeat block in the directory
every --mmp-interval, and a server starting it writes a sequence of its own
and watches the block for twice that and a second to make sure no other
node serves it (after a crash it first watches the old block as long).`,
		Args: cobra.ExactArgs(1),
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
			nodes := splitList(v.GetStringSlice("mgsnode"))
			id := server.TargetIdentity{FSName: v.GetString("fsname"), Index: v.GetUint32("index"), MGSNodes: nodes, Backend: v.GetString("backend"),
				FailNodes: append(splitList(v.GetStringSlice("servicenode")), splitList(v.GetStringSlice("failnode"))...)}
			id.MMP = len(id.FailNodes) > 0
			if cmd.Flags().Changed("mmp") || v.IsSet("mmp") {
				id.MMP = v.GetBool("mmp")
			}
			id.MMPInterval = v.GetDuration("mmp-interval")
			format := server.FormatOST
			if mdt {
				format = server.FormatMDT
			}
			id, err = format(cmd.Context(), args[0], id)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "formatted %s as %s (uuid %s, mgs %s)\n", args[0], id.Label, id.UUID, strings.Join(id.MGSNodes, ","))
			if len(id.FailNodes) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "service nodes %s\n", strings.Join(id.FailNodes, ","))
			}
			if id.MMP {
				fmt.Fprintf(cmd.OutOrStdout(), "multiple-mount protection on, update interval %v\n", id.MMPInterval)
			}
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
	f.StringSlice("servicenode", nil, "NID of a server that may serve the target, this one included (repeat or comma-separate)")
	f.StringSlice("failnode", nil, "NID of a failover partner of this server (repeat or comma-separate)")
	f.Bool("mmp", false, "multiple-mount protection (default: on with --servicenode or --failnode)")
	f.Duration("mmp-interval", 0, "how often the serving server rewrites the MMP block (0: 5s)")
	return readsConfig(cmd)
}

func newTunefsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tunefs [--servicenode NID]... [--failnode NID]... [--erase-params] [--mmp[=false]] [--mmp-interval D] [--print] DIR",
		Short: "Show or change the failover settings of a stopped target (tunefs.lustre)",
		Long: `Show or change the failover settings of a stopped target (tunefs.lustre).

--servicenode and --failnode add NIDs to the servers that may serve the
target (--erase-params drops those it had first); a target that gets some
gets multiple-mount protection too, unless --mmp=false. A target this host
serves is refused; one with MMP is first watched as a server starting it
would watch it, so one another node serves is refused after the wait.
--print (or no change) shows the settings and the MMP block and changes
nothing.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := loadConfig(cmd, nil)
			if err != nil {
				return err
			}
			dir, f := args[0], cmd.Flags()
			nodes := append(splitList(v.GetStringSlice("servicenode")), splitList(v.GetStringSlice("failnode"))...)
			changes := len(nodes) > 0 || f.Changed("erase-params") || f.Changed("mmp") || f.Changed("mmp-interval")
			id, err := server.ReadTarget(dir)
			if err != nil {
				return err
			}
			if changes && !v.GetBool("print") {
				id, err = server.Tunefs(cmd.Context(), dir, func(id *server.TargetIdentity) {
					if v.GetBool("erase-params") {
						id.FailNodes = nil
					}
					hadNodes := len(id.FailNodes) > 0
					id.FailNodes = append(id.FailNodes, nodes...)
					switch {
					case f.Changed("mmp"):
						id.MMP = v.GetBool("mmp")
					case len(id.FailNodes) > 0 && !hadNodes:
						id.MMP = true // as mkfs with failover nodes
					}
					if f.Changed("mmp-interval") {
						id.MMPInterval = v.GetDuration("mmp-interval")
					}
				})
				if err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "target %s (uuid %s) in %s\n", id.Label, id.UUID, dir)
			if len(id.FailNodes) > 0 {
				fmt.Fprintf(out, "service nodes %s\n", strings.Join(id.FailNodes, ","))
			} else {
				fmt.Fprintln(out, "service nodes: none (no failover)")
			}
			if !id.MMP {
				fmt.Fprintln(out, "multiple-mount protection off")
				return nil
			}
			fmt.Fprintf(out, "multiple-mount protection on, update interval %v\n", id.MMPInterval)
			switch b, err := mmp.Read(dir); {
			case err != nil:
				fmt.Fprintf(out, "MMP block: %v\n", err)
			case b.Clean():
				fmt.Fprintf(out, "MMP block: clean (last written by %s at %s)\n", b.Node, b.Time.UTC().Format(time.RFC3339))
			default:
				fmt.Fprintf(out, "MMP block: written by node %s (%s) %v ago, every %v: served there unless that node died\n",
					b.Node, b.Detail, time.Since(b.Time).Round(time.Millisecond), b.Interval)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSlice("servicenode", nil, "add the NID of a server that may serve the target (repeat or comma-separate)")
	f.StringSlice("failnode", nil, "add the NID of a failover partner (repeat or comma-separate)")
	f.Bool("erase-params", false, "drop the target's service nodes before adding those given")
	f.Bool("mmp", false, "multiple-mount protection (default: on when service nodes are added to a target that had none)")
	f.Duration("mmp-interval", 0, "how often the serving server rewrites the MMP block (0: 5s)")
	f.Bool("print", false, "show the settings; change nothing")
	return readsConfig(cmd)
}

// splitList splits list values on commas too: a variable is split on
// spaces only, a flag on commas too.
func splitList(vals []string) []string {
	var out []string
	for _, n := range vals {
		for _, s := range strings.Split(n, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
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
			select {
			case <-ctx.Done():
			case err := <-st.Lost():
				// Another node serves the target now: not one more write
				// to its store, not even a clean close's (ldiskfs aborts).
				lcfg.Logger.Error("nacre server: a target was taken over by another node; exiting at once", "err", err)
				fmt.Fprintf(cmd.ErrOrStderr(), "nacre server: %v\n", err)
				os.Exit(3)
			}
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
