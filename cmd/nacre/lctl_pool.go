package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"

	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
)

// OST pools through the MGS, with Lustre's lctl syntax: pool_new
// FSNAME.POOL, pool_add FSNAME.POOL OST..., pool_remove, pool_destroy,
// pool_list FSNAME[.POOL]. OSTs are named as lctl names them: an index
// ("3"), a label ("nacre-OST0003", "OST0003") or a range
// ("OST[0-3]", "nacre-OST[0,2]").
func newPoolCmds(conn func() persistentConn) []*cobra.Command {
	run := func(what string, fn func(ctx context.Context, admin adminv1.AdminClient, fs, pool string, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			fs, pool, ok := strings.Cut(args[0], ".")
			if what != "pool_list" && (!ok || fs == "" || pool == "") {
				return fmt.Errorf("%s: %q: want FSNAME.POOL", what, args[0])
			}
			pc := conn()
			ctx, cancel := context.WithTimeout(cmd.Context(), pc.timeout)
			defer cancel()
			c, addr, err := dialMGS(ctx, pc)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			defer c.Close()
			if ctx, err = withToken(ctx, pc); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			if err := fn(ctx, adminv1.NewAdminClient(c), fs, pool, args[1:]); err != nil {
				if s, ok := status.FromError(err); ok {
					return fmt.Errorf("%s: %s (MGS %s)", what, s.Message(), addr)
				}
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		}
	}
	out := func(cmd *cobra.Command) func(format string, a ...any) {
		return func(format string, a ...any) { fmt.Fprintf(cmd.OutOrStdout(), format, a...) }
	}
	newCmd := &cobra.Command{Use: "pool_new FSNAME.POOL", Short: "Create an OST pool", Args: cobra.ExactArgs(1)}
	newCmd.RunE = run("pool_new", func(ctx context.Context, a adminv1.AdminClient, fs, pool string, _ []string) error {
		_, err := a.CreatePool(ctx, &adminv1.CreatePoolRequest{Fsname: fs, Name: pool})
		if err == nil {
			out(newCmd)("Pool %s.%s created\n", fs, pool)
		}
		return err
	})
	addCmd := &cobra.Command{Use: "pool_add FSNAME.POOL OST...", Short: "Add OSTs to a pool", Args: cobra.MinimumNArgs(2)}
	addCmd.RunE = run("pool_add", func(ctx context.Context, a adminv1.AdminClient, fs, pool string, args []string) error {
		osts, err := parseOSTs(fs, args)
		if err != nil {
			return err
		}
		if _, err := a.AddToPool(ctx, &adminv1.AddToPoolRequest{Fsname: fs, Name: pool, Osts: osts}); err != nil {
			return err
		}
		for _, i := range osts {
			out(addCmd)("OST %s-OST%04x_UUID added to pool %s.%s\n", fs, i, fs, pool)
		}
		return nil
	})
	rmCmd := &cobra.Command{Use: "pool_remove FSNAME.POOL OST...", Short: "Remove OSTs from a pool", Args: cobra.MinimumNArgs(2)}
	rmCmd.RunE = run("pool_remove", func(ctx context.Context, a adminv1.AdminClient, fs, pool string, args []string) error {
		osts, err := parseOSTs(fs, args)
		if err != nil {
			return err
		}
		if _, err := a.RemoveFromPool(ctx, &adminv1.RemoveFromPoolRequest{Fsname: fs, Name: pool, Osts: osts}); err != nil {
			return err
		}
		for _, i := range osts {
			out(rmCmd)("OST %s-OST%04x_UUID removed from pool %s.%s\n", fs, i, fs, pool)
		}
		return nil
	})
	destroyCmd := &cobra.Command{Use: "pool_destroy FSNAME.POOL", Short: "Destroy an empty OST pool", Args: cobra.ExactArgs(1)}
	destroyCmd.RunE = run("pool_destroy", func(ctx context.Context, a adminv1.AdminClient, fs, pool string, _ []string) error {
		_, err := a.DestroyPool(ctx, &adminv1.DestroyPoolRequest{Fsname: fs, Name: pool})
		if err == nil {
			out(destroyCmd)("Pool %s.%s destroyed\n", fs, pool)
		}
		return err
	})
	listCmd := &cobra.Command{Use: "pool_list FSNAME[.POOL]", Short: "List the pools of a file system, or the OSTs of one", Args: cobra.ExactArgs(1)}
	listCmd.RunE = run("pool_list", func(ctx context.Context, a adminv1.AdminClient, fs, pool string, _ []string) error {
		rep, err := a.ListPools(ctx, &adminv1.ListPoolsRequest{Fsname: fs})
		if err != nil {
			return err
		}
		p := out(listCmd)
		if pool == "" {
			p("Pools from %s:\n", fs)
			for _, pl := range rep.GetPools() {
				p("%s.%s\n", fs, pl.GetName())
			}
			return nil
		}
		for _, pl := range rep.GetPools() {
			if pl.GetName() == pool {
				p("Pool: %s.%s\n", fs, pool)
				for _, i := range pl.GetOsts() {
					p("%s-OST%04x_UUID\n", fs, i)
				}
				return nil
			}
		}
		return fmt.Errorf("pool %s.%s does not exist", fs, pool)
	})
	return []*cobra.Command{newCmd, addCmd, rmCmd, destroyCmd, listCmd}
}

var ostRange = regexp.MustCompile(`^(?:([A-Za-z0-9_-]{1,8})-)?OST\[([0-9a-fA-F,\-]+)\]$`)

// parseOSTs turns lctl's OST names into indexes.
func parseOSTs(fs string, args []string) ([]uint32, error) {
	var out []uint32
	for _, a := range args {
		if m := ostRange.FindStringSubmatch(a); m != nil {
			if m[1] != "" && m[1] != fs {
				return nil, fmt.Errorf("OST %q is not of file system %s", a, fs)
			}
			for _, part := range strings.Split(m[2], ",") {
				lo, hi, isRange := strings.Cut(part, "-")
				l, err1 := strconv.ParseUint(lo, 16, 16)
				h := l
				var err2 error
				if isRange {
					h, err2 = strconv.ParseUint(hi, 16, 16)
				}
				if err1 != nil || err2 != nil || h < l || h-l > 1024 {
					return nil, fmt.Errorf("OST range %q", a)
				}
				for i := l; i <= h; i++ {
					out = append(out, uint32(i))
				}
			}
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(a, fs+"-"), "_UUID")
		hex := strings.TrimPrefix(name, "OST")
		base := 10
		if hex != name {
			base = 16
		}
		i, err := strconv.ParseUint(hex, base, 16)
		if err != nil || hex == "" {
			return nil, fmt.Errorf("OST %q: want an index, FSNAME-OSTxxxx or OST[a-b]", a)
		}
		out = append(out, uint32(i))
	}
	return out, nil
}
