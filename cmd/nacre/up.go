package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nacrefs/nacre/client/llite"
	"github.com/nacrefs/nacre/server"
	"github.com/nacrefs/nacre/services/hsm"
	"github.com/nacrefs/nacre/services/lnetctl"
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
			cfg.RestoreReplayBarrier = v.GetBool("restore-replay-barrier")
			mountDir := v.GetString("mount")
			if mountDir != "" && cfg.OSTs == 0 {
				return errors.New("--mount needs a data plane: --osts > 0")
			}
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
			fmt.Fprintf(out, "  rest   http://%s/api/v1 (also /openapi.json, /healthz, /metrics of the cluster)\n", n.MGS.HTTPAddr())
			fmt.Fprintf(out, "  web    http://%s/dashboard (give it the admin token)\n", n.MGS.HTTPAddr())
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
			var lnetCtl *lnetctl.Listener // closed before the servers (and their LNet) are
			if sock := v.GetString("socket"); sock != "" && n.Storage != nil {
				// Not fatal: a node with one cluster's socket may run another
				// for a test; lnetctl then takes --socket.
				if ctl, err := lnetctl.Listen(sock, lnetctl.New(n.Storage.LNet), log); err != nil {
					log.Warn("nacre up: no lnetctl socket", "socket", sock, "err", err)
				} else {
					lnetCtl = ctl
					fmt.Fprintf(out, "  lnet   %v (nacre lnetctl --socket %s)\n", n.Storage.LNet.NIDs(), sock)
				}
			}
			var mnt *llite.Server
			if mountDir != "" {
				if mnt, err = upMount(ctx, n, cfg.FSName, v.GetInt("port"), mountDir, v.GetString("mount-options"), log); err != nil {
					if lnetCtl != nil {
						lnetCtl.Close()
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					n.Close(ctx)
					return err
				}
				fmt.Fprintf(out, "  mount  %s (%s)\n", mnt.Dir(), upSource(n, cfg.FSName))
			}
			switch {
			case n.TokenFile != "":
				fmt.Fprintf(out, "  token  %s (role admin; send 'Authorization: Bearer <token>')\n", n.TokenFile)
			case cfg.MGS.Auth.Disabled:
				fmt.Fprintln(out, "  auth   disabled")
			}
			fmt.Fprintln(out, "ready")
			var mntDone <-chan struct{}
			if mnt != nil {
				mntDone = mnt.Done()
			}
			select {
			case <-ctx.Done():
			case err := <-n.EtcdErr():
				log.Error("embedded etcd failed", "err", err)
			case <-mntDone:
				log.Warn("the file system was unmounted from outside; the servers go on", "dir", mountDir)
				select {
				case <-ctx.Done():
				case err := <-n.EtcdErr():
					log.Error("embedded etcd failed", "err", err)
				}
			}
			if mnt != nil {
				upUnmount(mnt, log)
			}
			if lnetCtl != nil {
				lnetCtl.Close()
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
	f.Int("osts", d.OSTs, "OSTs to serve at least (DATA/ost0 to ostN-1, formatted if they are not), with MDT0 (DATA/mdt0) and every OST formatted in DATA before; 0: control plane only")
	f.String("mount", "", "mount the file system (FUSE) on this directory once it is up; unmounted at shutdown")
	f.String("mount-options", "", "mount options for --mount (as nacre mount -o)")
	f.Bool("restore-replay-barrier", false, "put MDT0 and the OSTs back as they were at their replay barrier (mdt.*.replay_barrier, obdfilter.*.replay_barrier), if they set one: later changes are lost, for the clients to replay (testing recovery)")
	addLNetFlags(f)
	f.String("socket", lnetctl.DefaultSocket, "control socket for nacre lnetctl (empty: none)")
	return readsConfig(cmd)
}

// upSource is the mount source of the embedded cluster: its MGS by NID
// with the gRPC port.
func upSource(n *server.Node, fsname string) string {
	_, port, _ := net.SplitHostPort(n.MGS.GRPCAddr())
	return "127.0.0.1@tcp:" + port + ":/" + fsname
}

// upMount mounts the embedded cluster's file system on dir, in this
// process, on the servers' LNet.
func upMount(ctx context.Context, n *server.Node, fsname string, port int, dir, opts string, log *slog.Logger) (*llite.Server, error) {
	src := upSource(n, fsname)
	if opts != "" {
		opts += ","
	}
	cfg, lo, err := mountConfig(src, opts+"port="+strconv.Itoa(port), false, log)
	if err != nil {
		return nil, err
	}
	// The servers' own LNet: requests to them go through 0@lo.
	cfg.LNet = n.Storage.LNet
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	srv, err := llite.Mount(mctx, dir, cfg, lo)
	if err != nil {
		return nil, err
	}
	if hc, err := hsm.NewClient(cfg.MGS); err == nil {
		// The restorer's connection lives as long as the process.
		srv.FS().SetHSMRestorer(hc)
	}
	return srv, nil
}

// upUnmount unmounts before the servers stop (so dirty data reaches
// them); a busy mount is detached lazily: its users get errors once the
// servers are gone.
func upUnmount(mnt *llite.Server, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := mnt.Unmount(ctx); err != nil {
		log.Warn("unmount failed; detaching lazily", "dir", mnt.Dir(), "err", err)
		if err := mnt.UnmountLazy(); err != nil {
			log.Error("lazy unmount", "dir", mnt.Dir(), "err", err)
		}
	}
}
