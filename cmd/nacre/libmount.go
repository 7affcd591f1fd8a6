package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nacrefs/nacre/client"
)

// mountLibrary mounts the file system of source (MGSNID[:PORT]:/FSNAME)
// through the client library, for the tools that work without FUSE
// (copytool, policy, lfs changelog): port is the socklnd port (0: the
// default), lg its logger (nil: slog.Default()).
func mountLibrary(ctx context.Context, source string, port int, lg *slog.Logger) (*client.FS, error) {
	cfg := client.DefaultConfig()
	if err := cfg.ParseSource(source); err != nil {
		return nil, err
	}
	if port != 0 {
		cfg.Port = port
	}
	if lg == nil {
		lg = slog.Default()
	}
	cfg.Logger, cfg.Data.Logger = lg, lg
	fsys, err := client.Mount(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", source, err)
	}
	return fsys, nil
}
