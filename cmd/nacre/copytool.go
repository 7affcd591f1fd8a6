package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/services/hsm"
	"github.com/nacrefs/nacre/services/hsm/posix"
)

func newCopytoolCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "copytool --archive-id N --hsm-root DIR MGSNID[:MGSNID]:/FSNAME",
		Short: "Run the POSIX HSM copytool: archive files into DIR and restore them from it",
		Long: `Mounts the file system through the client library (no FUSE), registers as an
agent with the HSM coordinator (by default on the MGS's gRPC addresses) and runs
the archive, restore, remove and release actions it is given until SIGINT or
SIGTERM. Archive copies go to a FID-named tree under --hsm-root with a SHA-256
beside each; several copytools may serve one archive id.

  nacre copytool --archive-id 1 --hsm-root /archive 10.0.0.1@tcp:/nacre`,
		Args: cobra.ExactArgs(1),
		RunE: runCopytool,
	}
	f := cmd.Flags()
	f.UintSlice("archive-id", nil, "archive ids served (repeatable; none: all)")
	f.String("hsm-root", "", "the archive's directory (required)")
	f.StringSlice("coordinator", nil, "coordinator gRPC addresses (default: the MGS's)")
	f.Int("max-requests", 0, "actions at once (0: the coordinator's max_requests)")
	f.String("uuid", "", "agent UUID (default: a new one)")
	cmd.MarkFlagRequired("hsm-root")
	return cmd
}

func runCopytool(cmd *cobra.Command, args []string) error {
	f := cmd.Flags()
	root, _ := f.GetString("hsm-root")
	ids, _ := f.GetUintSlice("archive-id")
	coords, _ := f.GetStringSlice("coordinator")
	maxReq, _ := f.GetInt("max-requests")
	id, _ := f.GetString("uuid")
	if id == "" {
		id = uuid.NewString()
	}
	var archives []uint32
	for _, a := range ids {
		if a == 0 || a > 1<<31 {
			return fmt.Errorf("archive id %d: want 1..%d", a, 1<<31)
		}
		archives = append(archives, uint32(a))
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fsys, hc, err := hsmMount(ctx, args[0], 0, coords)
	if err != nil {
		return err
	}
	defer fsys.Close(context.WithoutCancel(ctx))
	defer hc.Close()
	lg := slog.Default()
	ct, err := posix.New(posix.Config{FS: fsys, Root: root, Logger: lg})
	if err != nil {
		return err
	}
	lg.Info("copytool: serving", "uuid", id, "archives", archives, "root", root)
	err = hsm.RunAgent(ctx, hsm.AgentConfig{Client: hc, UUID: id, ArchiveIDs: archives, MaxRequests: maxReq, Handler: ct, Logger: lg})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// hsmMount mounts source through the library and connects to the
// coordinator (coords, or the MGS's addresses); the mount restores
// released files through it.
func hsmMount(ctx context.Context, source string, port int, coords []string) (*client.FS, *hsm.Client, error) {
	fsys, err := mountLibrary(ctx, source, port, nil)
	if err != nil {
		return nil, nil, err
	}
	if len(coords) == 0 {
		coords = fsys.Config().MGS
	}
	hc, err := hsm.NewClient(coords)
	if err != nil {
		fsys.Close(ctx)
		return nil, nil, err
	}
	fsys.SetHSMRestorer(hc)
	return fsys, hc, nil
}

// resolve turns a path in the file system ("/dir/file", from its root) or
// a FID ("[0x200000401:0x1:0x0]") into a FID.
func resolve(ctx context.Context, fsys *client.FS, p string) (client.FID, error) {
	if strings.HasPrefix(p, "[") || strings.HasPrefix(p, "0x") {
		return parseFID(p)
	}
	f := fsys.Root()
	for _, name := range strings.Split(p, "/") {
		if name == "" || name == "." {
			continue
		}
		a, err := fsys.Lookup(ctx, client.Root(), f, name)
		if err != nil {
			return client.FID{}, fmt.Errorf("%s: %w", p, err)
		}
		f = a.FID
	}
	return f, nil
}
