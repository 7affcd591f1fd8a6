package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/mgsnode"
)

// lfs changelog MDT [STARTREC [ENDREC]] and lfs changelog_clear MDT clN
// ENDREC, read through the client library (root's credentials): the
// MDT's changelog in Lustre's text shape.
func newLfsChangelogCmds() []*cobra.Command {
	mount := func(cmd *cobra.Command, mdt string) (*client.FS, context.Context, func(), error) {
		src, _ := cmd.Flags().GetString("source")
		port, _ := cmd.Flags().GetInt("port")
		fsname, _, ok := strings.Cut(mdt, "-MDT")
		if !ok {
			return nil, nil, nil, fmt.Errorf("%q: want FSNAME-MDTnnnn", mdt)
		}
		if src == "" {
			return nil, nil, nil, fmt.Errorf("no file system: --source MGSNID:/%s or NACRE_SOURCE", fsname)
		}
		if _, fs, err := mgsnode.ParseSource(src); err != nil {
			return nil, nil, nil, err
		} else if fs != fsname {
			return nil, nil, nil, fmt.Errorf("%s is not of file system %s", mdt, fs)
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		fsys, err := mountLibrary(ctx, src, port, slog.New(slog.DiscardHandler))
		if err != nil {
			stop()
			return nil, nil, nil, err
		}
		return fsys, ctx, func() { fsys.Close(context.WithoutCancel(ctx)); stop() }, nil
	}
	flags := func(c *cobra.Command) {
		c.Flags().String("source", os.Getenv("NACRE_SOURCE"), "the file system, MGSNID[:PORT]:/FSNAME (default $NACRE_SOURCE)")
		c.Flags().Int("port", 0, "the socklnd port of the file system's nodes (default 988)")
	}
	read := &cobra.Command{Use: "changelog [--follow] FSNAME-MDTnnnn [STARTREC [ENDREC]]", Short: "Print the MDT's changelog records",
		Args: cobra.RangeArgs(1, 3)}
	read.Flags().Bool("follow", false, "keep printing records as they come")
	flags(read)
	read.RunE = func(cmd *cobra.Command, args []string) error {
		var from, to uint64 = 1, ^uint64(0)
		var err error
		if len(args) > 1 {
			if from, err = strconv.ParseUint(args[1], 10, 64); err != nil {
				return fmt.Errorf("changelog: start record %q", args[1])
			}
		}
		if len(args) > 2 {
			if to, err = strconv.ParseUint(args[2], 10, 64); err != nil || to < from {
				return fmt.Errorf("changelog: end record %q", args[2])
			}
		}
		follow, _ := cmd.Flags().GetBool("follow")
		fsys, ctx, done, err := mount(cmd, args[0])
		if err != nil {
			return fmt.Errorf("changelog: %w", err)
		}
		defer done()
		for from <= to {
			recs, _, err := fsys.ChangelogRead(ctx, client.Root(), from, 0)
			if err != nil {
				return fmt.Errorf("changelog: %w", err)
			}
			for _, r := range recs {
				if r.Index > to {
					return nil
				}
				printChangelog(cmd.OutOrStdout(), r)
				from = r.Index + 1
			}
			if len(recs) == 0 {
				if !follow {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Second):
				}
			}
		}
		return nil
	}
	clear := &cobra.Command{Use: "changelog_clear FSNAME-MDTnnnn clN ENDREC", Short: "Tell the MDT a changelog user has read up to ENDREC (0: all)",
		Args: cobra.ExactArgs(3)}
	flags(clear)
	clear.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := strconv.ParseUint(strings.TrimPrefix(args[1], "cl"), 10, 32)
		if err != nil || !strings.HasPrefix(args[1], "cl") {
			return fmt.Errorf("changelog_clear: %q: want clN", args[1])
		}
		end, err := strconv.ParseUint(args[2], 10, 64)
		if err != nil {
			return fmt.Errorf("changelog_clear: end record %q", args[2])
		}
		fsys, ctx, done, err := mount(cmd, args[0])
		if err != nil {
			return fmt.Errorf("changelog_clear: %w", err)
		}
		defer done()
		if err := fsys.ChangelogClear(ctx, client.Root(), uint32(id), end); err != nil {
			return fmt.Errorf("changelog_clear: %w", err)
		}
		return nil
	}
	return []*cobra.Command{read, clear}
}

// printChangelog prints one record as lfs changelog does:
// index NNTYPE time date flags t=[fid] ... p=[pfid] name.
func printChangelog(w io.Writer, r client.ChangelogRecord) {
	t := time.Unix(0, r.Time)
	fmt.Fprintf(w, "%d %s %s %s 0x%x u=%d:%d t=%v", r.Index, r.Type, t.Format("15:04:05.000000000"), t.Format("2006.01.02"),
		r.Flags, r.UID, r.GID, r.TFID)
	if !r.PFID.IsZero() || r.Name != "" {
		fmt.Fprintf(w, " p=%v %s", r.PFID, r.Name)
	}
	if r.SName != "" {
		fmt.Fprintf(w, " s=%v sp=%v %s", r.SFID, r.SPFID, r.SName)
	}
	fmt.Fprintln(w)
}
