package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/nacrefs/nacre/internal/mgsnode"
	"github.com/nacrefs/nacre/services/hsm/policy"
)

// newPolicyCmd is `nacre policy`: the HSM policy engine, reading the
// MDT's changelog as a registered user (lctl changelog_register) and
// applying the rules of a YAML file:
//
//	archive_id: 1
//	archive_after: 30m     # archive files not modified for 30 minutes
//	high_watermark: 85     # % of the OSTs used: release archived files...
//	low_watermark: 70      # ...least recently modified first, down to 70%
//	remove_deleted: true   # remove the archive copies of deleted files
func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy --rules FILE --user clN MGSNID[:PORT]:/FSNAME",
		Short: "Run the HSM policy engine: archive, release and remove by rules, from the MDT changelog",
		Args:  cobra.ExactArgs(1),
	}
	f := cmd.Flags()
	f.String("rules", "", "YAML file of rules (archive_id, archive_after, high_watermark, low_watermark, remove_deleted)")
	f.String("user", "", "the changelog user to read as (clN, from lctl changelog_register)")
	f.StringSlice("coordinator", nil, "HSM coordinator gRPC addresses (default: the MGS's)")
	f.Duration("interval", 30*time.Second, "how often to read the changelog and apply the rules")
	f.Int("port", 0, "the socklnd port of the file system's nodes (default 988)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		rulesFile, _ := f.GetString("rules")
		userArg, _ := f.GetString("user")
		id, err := strconv.ParseUint(strings.TrimPrefix(userArg, "cl"), 10, 32)
		if err != nil || !strings.HasPrefix(userArg, "cl") || id == 0 {
			return fmt.Errorf("policy: --user %q: want clN", userArg)
		}
		var rules policy.Rules
		if rulesFile != "" {
			v := viper.New()
			v.SetConfigFile(rulesFile)
			if err := v.ReadInConfig(); err != nil {
				return fmt.Errorf("policy: rules: %w", err)
			}
			if err := v.UnmarshalExact(&rules); err != nil {
				return fmt.Errorf("policy: rules %s: %w", rulesFile, err)
			}
		}
		if _, _, err := mgsnode.ParseSource(args[0]); err != nil {
			return fmt.Errorf("policy: %w", err)
		}
		port, _ := f.GetInt("port")
		coords, _ := f.GetStringSlice("coordinator")
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		fsys, hc, err := hsmMount(ctx, args[0], port, coords)
		if err != nil {
			return fmt.Errorf("policy: %w", err)
		}
		defer fsys.Close(context.WithoutCancel(ctx))
		defer hc.Close()
		e, err := policy.New(policy.Config{FS: fsys, HSM: hc, User: uint32(id), Rules: rules, Logger: slog.Default()})
		if err != nil {
			return err
		}
		every, _ := f.GetDuration("interval")
		fmt.Fprintf(cmd.OutOrStdout(), "nacre policy: reading the changelog of %s as %s every %v\n", fsys.Config().FSName, userArg, every)
		return e.Run(ctx, every)
	}
	return cmd
}
