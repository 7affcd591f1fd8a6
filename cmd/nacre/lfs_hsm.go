package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/mgsnode"
	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
	"github.com/nacrefs/nacre/services/hsm"
)

// The lfs hsm_* commands. As Lustre's, they take paths on a mount (the
// FUSE mount, mount -t nacre): they read and change the file's HSM state
// through the mount's lustre.hsm and lustre.hsm_release attributes and
// its FID through lustre.fid. With --source (MGSNID:/FSNAME, or
// $NACRE_SOURCE) they reach the file system through the client library
// instead, without a mount, and each FILE is a path from the file
// system's root ("/dir/file") or a FID ("[0x200000401:0x1:0x0]").
// Requests go to the coordinator on the MGS's gRPC addresses (the
// mount's, or the source's) unless --coordinator says.

func parseFID(s string) (client.FID, error) { return fid.Parse(s) }

// newLfsHSMCmds returns the lfs hsm_* subcommands.
func newLfsHSMCmds() []*cobra.Command {
	state := hsmCmd("hsm_state", "Show files' HSM state", func(ctx context.Context, e *hsmEnv, f client.FID, name string) error {
		st, err := e.files.state(ctx, name, f)
		if err != nil {
			return err
		}
		s := hsm.FormatState(st.Flags, st.ArchiveID)
		if s != "" {
			s = " " + s
		}
		fmt.Fprintf(e.out, "%s: (0x%08x)%s\n", name, st.Flags, s)
		return nil
	})
	set := hsmFlagCmd("hsm_set", "Set HSM flags on files", true)
	clear := hsmFlagCmd("hsm_clear", "Clear HSM flags of files", false)
	release := hsmCmd("hsm_release", "Release archived files' data from the OSTs", func(ctx context.Context, e *hsmEnv, f client.FID, p string) error {
		return e.files.release(ctx, p, f)
	})
	action := hsmCmd("hsm_action", "Show the HSM action running on files", func(ctx context.Context, e *hsmEnv, f client.FID, name string) error {
		as, err := e.hc.Actions(ctx, true)
		if err != nil {
			return err
		}
		for _, a := range as {
			if hsm.FIDFrom(a.Fid) == f {
				st := "waiting"
				if a.State == hsmv1.ActionState_ACTION_STATE_STARTED {
					st = "running"
				}
				fmt.Fprintf(e.out, "%s: %s %s (%d bytes moved)\n", name, actionName(a.Kind), st, a.BytesDone)
				return nil
			}
		}
		fmt.Fprintf(e.out, "%s: NOOP\n", name)
		return nil
	})
	cmds := []*cobra.Command{state, set, clear, release, action}
	for _, k := range []struct {
		name, short string
		kind        hsmv1.ActionKind
	}{
		{"hsm_archive", "Archive files (queue ARCHIVE actions)", hsmv1.ActionKind_ACTION_KIND_ARCHIVE},
		{"hsm_restore", "Restore released files ahead of use", hsmv1.ActionKind_ACTION_KIND_RESTORE},
		{"hsm_remove", "Remove files' archive copies", hsmv1.ActionKind_ACTION_KIND_REMOVE},
		{"hsm_cancel", "Cancel the HSM actions on files", hsmv1.ActionKind_ACTION_KIND_CANCEL},
	} {
		cmds = append(cmds, hsmRequestCmd(k.name, k.short, k.kind))
	}
	return cmds
}

func actionName(k hsmv1.ActionKind) string {
	switch k {
	case hsmv1.ActionKind_ACTION_KIND_ARCHIVE:
		return "ARCHIVE"
	case hsmv1.ActionKind_ACTION_KIND_RESTORE:
		return "RESTORE"
	case hsmv1.ActionKind_ACTION_KIND_REMOVE:
		return "REMOVE"
	case hsmv1.ActionKind_ACTION_KIND_CANCEL:
		return "CANCEL"
	case hsmv1.ActionKind_ACTION_KIND_RELEASE:
		return "RELEASE"
	}
	return "NOOP"
}

type hsmEnv struct {
	files hsmFiles
	hc    *hsm.Client
	out   io.Writer
}

// hsmFiles is how the hsm_* commands reach a FILE (named p on the command
// line): through a mount (mountFiles) or the client library (libFiles).
type hsmFiles interface {
	resolve(ctx context.Context, p string) (client.FID, error)
	state(ctx context.Context, p string, f client.FID) (client.HSMState, error)
	release(ctx context.Context, p string, f client.FID) error
	setFlags(ctx context.Context, p string, f client.FID, set, clear, archiveID uint32) error
}

// libFiles reaches files through the client library: p is a path from
// the file system's root or a FID.
type libFiles struct{ fs *client.FS }

func (l libFiles) resolve(ctx context.Context, p string) (client.FID, error) {
	return resolve(ctx, l.fs, p)
}

func (l libFiles) state(ctx context.Context, _ string, f client.FID) (client.HSMState, error) {
	return l.fs.HSMState(ctx, client.Root(), f)
}

func (l libFiles) release(ctx context.Context, _ string, f client.FID) error {
	_, err := l.fs.HSMRelease(ctx, client.Root(), f)
	return err
}

func (l libFiles) setFlags(ctx context.Context, _ string, f client.FID, set, clear, archiveID uint32) error {
	_, err := l.fs.HSMSetFlags(ctx, client.Root(), f, set, clear, archiveID)
	return err
}

// mountFiles reaches files through the mount holding them: p is a path
// on it, and the mount's lustre.* attributes answer as the caller.
type mountFiles struct{}

func (mountFiles) resolve(_ context.Context, p string) (client.FID, error) {
	b, err := getxattr(p, client.XattrFID)
	if err != nil {
		return client.FID{}, err
	}
	return fid.Parse(string(b))
}

func (mountFiles) state(_ context.Context, p string, _ client.FID) (client.HSMState, error) {
	var h client.HSMInfo
	if err := getJSON(p, client.XattrHSM, &h); err != nil {
		return client.HSMState{}, err
	}
	return client.HSMState{Flags: h.Flags, ArchiveID: h.ArchiveID, DataVersion: h.DataVersion, ArchivedVersion: h.ArchivedVersion}, nil
}

func (mountFiles) release(_ context.Context, p string, _ client.FID) error {
	return unix.Setxattr(p, client.XattrHSMRelease, []byte("1"), 0)
}

func (mountFiles) setFlags(_ context.Context, p string, _ client.FID, set, clear, archiveID uint32) error {
	v, err := json.Marshal(client.HSMFlagsChange{Set: set, Clear: clear, ArchiveID: archiveID})
	if err != nil {
		return err
	}
	return unix.Setxattr(p, client.XattrHSM, v, 0)
}

func hsmFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.String("source", os.Getenv("NACRE_SOURCE"), "reach the file system without a mount, MGSNID:/FSNAME (default $NACRE_SOURCE): FILEs are then paths from its root or FIDs")
	f.StringSlice("coordinator", nil, "coordinator gRPC addresses (default: the MGS's)")
}

// withHSM runs fn on the file system of files: through the client library
// when --source names it (mounted, then unmounted), else through the
// Nacre mount holding the first of files.
func withHSM(cmd *cobra.Command, files []string, fn func(ctx context.Context, e *hsmEnv) error) error {
	src, _ := cmd.Flags().GetString("source")
	coords, _ := cmd.Flags().GetStringSlice("coordinator")
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if src != "" {
		fsys, hc, err := hsmMount(ctx, src, 0, coords)
		if err != nil {
			return err
		}
		defer fsys.Close(context.WithoutCancel(ctx))
		defer hc.Close()
		return fn(ctx, &hsmEnv{files: libFiles{fsys}, hc: hc, out: cmd.OutOrStdout()})
	}
	m, err := mountOf(files[0])
	if err != nil {
		return fmt.Errorf("%w (--source MGSNID:/FSNAME or NACRE_SOURCE reaches a file system without a mount)", err)
	}
	if len(coords) == 0 {
		if coords, _, err = mgsnode.ParseSource(m.Source); err != nil {
			return fmt.Errorf("the coordinator of mount %s: %w (say --coordinator)", m.Dir, err)
		}
	}
	hc, err := hsm.NewClient(coords)
	if err != nil {
		return err
	}
	defer hc.Close()
	return fn(ctx, &hsmEnv{files: mountFiles{}, hc: hc, out: cmd.OutOrStdout()})
}

// hsmCmd is a command running fn on each FILE, going on after errors
// (reported as lfs does) and failing at the end if any failed.
func hsmCmd(name, short string, fn func(ctx context.Context, e *hsmEnv, f client.FID, name string) error) *cobra.Command {
	cmd := &cobra.Command{Use: name + " [flags] FILE...", Short: short, Args: cobra.MinimumNArgs(1)}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return withHSM(cmd, args, func(ctx context.Context, e *hsmEnv) error {
			failed := 0
			for _, p := range args {
				f, err := e.files.resolve(ctx, p)
				if err == nil {
					err = fn(ctx, e, f, p)
				}
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "lfs %s: %s: %v\n", name, p, err)
					failed++
				}
			}
			if failed > 0 {
				return fmt.Errorf("lfs %s: %d of %d files failed", name, failed, len(args))
			}
			return nil
		})
	}
	hsmFlags(cmd)
	return cmd
}

func hsmFlagCmd(name, short string, set bool) *cobra.Command {
	var cmd *cobra.Command
	cmd = hsmCmd(name, short, func(ctx context.Context, e *hsmEnv, f client.FID, p string) error {
		var mask uint32
		for _, n := range []string{"exists", "dirty", "archived", "lost", "norelease", "noarchive"} {
			if ok, _ := cmd.Flags().GetBool(n); ok {
				b, _ := hsm.ParseFlag(n)
				mask |= b
			}
		}
		arch, _ := cmd.Flags().GetUint32("archive-id")
		if mask == 0 && arch == 0 {
			return fmt.Errorf("no flag given")
		}
		if set {
			return e.files.setFlags(ctx, p, f, mask, 0, arch)
		}
		return e.files.setFlags(ctx, p, f, 0, mask, 0)
	})
	fl := cmd.Flags()
	for _, n := range []string{"exists", "dirty", "archived", "lost", "norelease", "noarchive"} {
		fl.Bool(n, false, "the "+n+" flag")
	}
	if set {
		fl.Uint32("archive-id", 0, "set the archive id too")
	} else {
		fl.Uint32("archive-id", 0, "ignored")
		fl.MarkHidden("archive-id")
	}
	return cmd
}

func hsmRequestCmd(name, short string, kind hsmv1.ActionKind) *cobra.Command {
	cmd := &cobra.Command{Use: name + " [flags] FILE...", Short: short, Args: cobra.MinimumNArgs(1)}
	cmd.Flags().Uint32P("archive", "a", 0, "archive id (hsm_archive: default 1)")
	cmd.Flags().Bool("wait", false, "wait for the actions to end")
	hsmFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		arch, _ := cmd.Flags().GetUint32("archive")
		wait, _ := cmd.Flags().GetBool("wait")
		if arch == 0 && kind == hsmv1.ActionKind_ACTION_KIND_ARCHIVE {
			arch = 1
		}
		return withHSM(cmd, args, func(ctx context.Context, e *hsmEnv) error {
			var fids []client.FID
			for _, p := range args {
				f, err := e.files.resolve(ctx, p)
				if err != nil {
					return fmt.Errorf("lfs %s: %s: %w", name, p, err)
				}
				// Refuse what the MDT would refuse (directories, missing
				// files) before anything is queued.
				st, err := e.files.state(ctx, p, f)
				if err != nil {
					return fmt.Errorf("lfs %s: %s: %w", name, p, err)
				}
				if kind == hsmv1.ActionKind_ACTION_KIND_RESTORE && arch == 0 {
					arch = st.ArchiveID
				}
				fids = append(fids, f)
			}
			ids, err := e.hc.Submit(ctx, kind, arch, fids...)
			if err != nil || !wait || kind == hsmv1.ActionKind_ACTION_KIND_CANCEL {
				return err
			}
			for i, id := range ids {
				if err := e.hc.Wait(ctx, id); err != nil {
					return fmt.Errorf("lfs %s: %s: %w", name, args[i], err)
				}
			}
			return nil
		})
	}
	return cmd
}
