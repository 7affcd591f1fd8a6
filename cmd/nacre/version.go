package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			version, rev := "(devel)", "unknown"
			if bi, ok := debug.ReadBuildInfo(); ok {
				version = bi.Main.Version
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						rev = s.Value
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "nacre %s (commit %s)\n", version, rev)
		},
	}
}
