package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/nacrefs/nacre/internal/params"
)

// Changelog users, registered on the MDS as Lustre's lctl does it:
// changelog_register [--device MDT] and changelog_deregister [--device
// MDT] clN, through the MDT's mdd.MDT.changelog_users parameter.
func newChangelogCmds(remote func(*cobra.Command) (paramSource, context.Context, func(), error)) []*cobra.Command {
	var device string
	users := func(cmd *cobra.Command) (string, map[string]bool, error) {
		src, ctx, done, err := remote(cmd)
		if err != nil {
			return "", nil, err
		}
		defer done()
		vals, err := src.Get(ctx, "mdd."+device+".changelog_users")
		if err != nil {
			return "", nil, err
		}
		if len(vals) != 1 {
			return "", nil, fmt.Errorf("%d MDTs match %q: name one with --device", len(vals), device)
		}
		ids := map[string]bool{}
		for _, m := range userLine.FindAllStringSubmatch(vals[0].Value, -1) {
			ids[m[1]] = true
		}
		return vals[0].Name, ids, nil
	}
	set := func(cmd *cobra.Command, name, v string) error {
		src, ctx, done, err := remote(cmd)
		if err != nil {
			return err
		}
		defer done()
		_, err = src.Set(ctx, params.Assignment{Pattern: name, Value: v})
		return err
	}
	mdtOf := func(param string) string {
		return regexp.MustCompile(`^mdd\.(.*)\.changelog_users$`).ReplaceAllString(param, "$1")
	}
	reg := &cobra.Command{Use: "changelog_register [--device MDT]", Short: "Register a changelog user (clN) on an MDT", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			name, before, err := users(cmd)
			if err != nil {
				return fmt.Errorf("changelog_register: %w", err)
			}
			if err := set(cmd, name, "register"); err != nil {
				return fmt.Errorf("changelog_register: %w", err)
			}
			_, after, err := users(cmd)
			if err != nil {
				return fmt.Errorf("changelog_register: %w", err)
			}
			for id := range after {
				if !before[id] {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: Registered changelog userid '%s'\n", mdtOf(name), id)
					return nil
				}
			}
			return fmt.Errorf("changelog_register: the new user did not appear")
		}}
	dereg := &cobra.Command{Use: "changelog_deregister [--device MDT] clN", Short: "Deregister a changelog user", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m := regexp.MustCompile(`^cl(\d+)$`).FindStringSubmatch(args[0])
			if m == nil {
				return fmt.Errorf("changelog_deregister: %q: want clN", args[0])
			}
			name, ids, err := users(cmd)
			if err != nil {
				return fmt.Errorf("changelog_deregister: %w", err)
			}
			if !ids[args[0]] {
				return fmt.Errorf("changelog_deregister: %s: no such user on %s", args[0], mdtOf(name))
			}
			if err := set(cmd, name, "deregister "+args[0]); err != nil {
				return fmt.Errorf("changelog_deregister: %w", err)
			}
			n, _ := strconv.Atoi(m[1])
			fmt.Fprintf(cmd.OutOrStdout(), "%s: Deregistered changelog user #%d\n", mdtOf(name), n)
			return nil
		}}
	for _, c := range []*cobra.Command{reg, dereg} {
		c.Flags().StringVar(&device, "device", "*", "the MDT (e.g. nacre-MDT0000; needed when the node serves several)")
	}
	return []*cobra.Command{reg, dereg}
}

var userLine = regexp.MustCompile(`(?m)^(cl\d+)\s+\d+$`)
