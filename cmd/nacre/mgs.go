package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/nacrefs/nacre/server"
	"github.com/nacrefs/nacre/services/auth"
)

// mgsFlagAliases maps flags to their nested config keys.
var mgsFlagAliases = map[string]string{
	"no-auth":       "auth.disabled",
	"tls-cert":      "tls.cert",
	"tls-key":       "tls.key",
	"tls-client-ca": "tls.client-ca",
	"http-tls-cert": "http-tls.cert",
	"http-tls-key":  "http-tls.key",
}

func addMGSFlags(fs *pflag.FlagSet) {
	d := server.DefaultMGSConfig()
	fs.String("grpc-addr", d.GRPCAddr, "gRPC listen address (MGS, Admin, health, reflection)")
	fs.String("http-addr", d.HTTPAddr, "REST gateway listen address (/api/v1, /openapi.json, /healthz, /metrics)")
	fs.String("etcd-prefix", d.EtcdPrefix, "etcd key prefix of this cluster")
	fs.Duration("lease-ttl", d.LeaseTTL, "target liveness lease; a dead server's targets show down after this")
	fs.Duration("request-timeout", d.RequestTimeout, "bound on every etcd call")
	fs.Bool("no-auth", false, "disable REST and Admin authentication (config: auth.disabled)")
	fs.String("tls-cert", "", "gRPC TLS certificate (PEM)")
	fs.String("tls-key", "", "gRPC TLS key (PEM)")
	fs.String("tls-client-ca", "", "CA of client certificates; set to require mutual TLS")
	fs.String("http-tls-cert", "", "REST TLS certificate (PEM)")
	fs.String("http-tls-key", "", "REST TLS key (PEM)")
}

func mgsConfigFrom(v *viper.Viper) (server.MGSConfig, error) {
	c := server.DefaultMGSConfig()
	c.GRPCAddr = v.GetString("grpc-addr")
	c.HTTPAddr = v.GetString("http-addr")
	c.EtcdPrefix = v.GetString("etcd-prefix")
	c.LeaseTTL = v.GetDuration("lease-ttl")
	c.RequestTimeout = v.GetDuration("request-timeout")
	c.Auth.Disabled = v.GetBool("auth.disabled")
	if err := v.UnmarshalKey("auth.tokens", &c.Auth.Tokens); err != nil {
		return c, fmt.Errorf("auth.tokens: %w", err)
	}
	c.TLS = auth.TLSConfig{CertFile: v.GetString("tls.cert"), KeyFile: v.GetString("tls.key"), ClientCAFile: v.GetString("tls.client-ca")}
	c.HTTPTLS = auth.TLSConfig{CertFile: v.GetString("http-tls.cert"), KeyFile: v.GetString("http-tls.key")}
	return c, nil
}

func newMGSCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mgs --etcd-endpoints URL[,URL...]",
		Short: "Run the management server (MGS, Admin API, REST gateway) against an etcd cluster",
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
			cfg, err := mgsConfigFrom(v)
			if err != nil {
				return err
			}
			cfg.EtcdEndpoints = v.GetStringSlice("etcd-endpoints")
			cfg.Logger = log
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			m, err := server.StartMGS(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "nacre mgs: grpc %s, rest http://%s/api/v1, etcd %v\n", m.GRPCAddr(), m.HTTPAddr(), cfg.EtcdEndpoints)
			<-ctx.Done()
			return shutdown(cmd, m.Close)
		},
	}
	addMGSFlags(cmd.Flags())
	cmd.Flags().StringSlice("etcd-endpoints", []string{"http://127.0.0.1:2379"}, "etcd cluster client URLs")
	return readsConfig(cmd)
}

// shutdown stops a server with a bounded grace period.
func shutdown(cmd *cobra.Command, closeFn func(context.Context) error) error {
	fmt.Fprintln(cmd.OutOrStdout(), "nacre: shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return closeFn(ctx)
}
