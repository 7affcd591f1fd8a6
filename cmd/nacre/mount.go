package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/llite"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/services/hsm"
	"github.com/nacrefs/nacre/services/lnetctl"
)

// mountHelper is where mount(8) looks for the helper of type nacre.
const mountHelper = "/sbin/mount.nacre"

// exitError carries the exit status a command wants (mount(8) helpers:
// 1 for bad usage, 32 for a failed mount).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func newMountCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mount MGSNID[:MGSNID]:/FSNAME DIR [-o OPTIONS]",
		Short: "Mount a Nacre file system (FUSE) and serve it until it is unmounted",
		Long: `Mounts the file system on DIR through FUSE and serves it in the foreground
until it is unmounted (umount DIR, fusermount3 -u DIR) or the process gets
SIGINT or SIGTERM (then it unmounts, writing back dirty data first; a busy
mount is detached lazily and served until its last file closes).

The source is Lustre's: MGS NIDs (failover nodes separated by ':', a gRPC port
after a NID when it is not the default), then ':/' and the file system name:

  nacre mount 10.0.0.1@tcp:/nacre /mnt/nacre
  nacre mount 127.0.0.1@tcp:9880:/nacre /mnt/nacre -o port=9888,noflock

Options (-o, comma-separated): Lustre's (ro, rw, flock, noflock, user_xattr,
nouser_xattr, lazystatfs, max_read_ahead_mb=N, max_read_ahead_per_file_mb=N, max_dirty_mb=N, max_cached_mb=N,
max_pages_per_rpc=N, max_rpcs_in_flight=N, checksums, lru_size=N, timeout=SECS,
nid=ADDR@NET, port=SOCKLND_PORT), lnet_socket=PATH (serve the mount's LNet to
nacre lnetctl --socket PATH; none by default) and FUSE's (allow_other, on by default for
root; debug; nosuid, nodev, noexec, default_permissions, sync, dirsync).

With --background (what mount.nacre does) it returns once the mount is live,
leaving a server process behind. "nacre mount --install-helper" links
` + mountHelper + ` to this binary, so that "mount -t nacre SOURCE DIR" and
/etc/fstab entries of type nacre work.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if ok, _ := cmd.Flags().GetBool("install-helper"); ok {
				return cobra.NoArgs(cmd, args)
			}
			if len(args) != 2 {
				return fmt.Errorf("want a source and a mount point (nacre mount MGSNID:/FSNAME DIR), got %d arguments", len(args))
			}
			return nil
		},
		RunE: runMount,
	}
	f := cmd.Flags()
	f.StringP("options", "o", "", "mount options, comma-separated (see above)")
	f.Bool("background", false, "return once mounted, serving from a background process")
	f.String("log-file", "", "with --background: file the server process logs to (default: none)")
	f.Bool("sloppy", false, "ignore unknown mount options (mount -s)")
	f.Bool("install-helper", false, "make "+mountHelper+" a link to this binary and exit")
	f.Int("ready-fd", 0, "descriptor to report readiness on (used by --background)")
	f.MarkHidden("ready-fd")
	return readsConfig(cmd, "install-helper", "ready-fd")
}

// lnetSocketOption takes lnet_socket=PATH out of a mount's options: the
// control socket the mount serves its LNet on (nacre lnetctl --socket
// PATH), as a client node's lnetctl reaches its LNet. None by default:
// the node's default socket is its server's.
func lnetSocketOption(opts string) (rest, socket string, err error) {
	var kept []string
	for _, o := range strings.Split(opts, ",") {
		k, v, hasV := strings.Cut(o, "=")
		if k != "lnet_socket" {
			kept = append(kept, o)
			continue
		}
		if !hasV || v == "" || !filepath.IsAbs(v) {
			return "", "", fmt.Errorf("mount option %q: want lnet_socket=/ABSOLUTE/PATH", o)
		}
		socket = v
	}
	return strings.Join(kept, ","), socket, nil
}

// mountConfig parses the source and options into the library's and the
// FUSE layer's configurations.
func mountConfig(src, opts string, sloppy bool, log *slog.Logger) (client.Config, llite.Options, error) {
	cfg := client.DefaultConfig()
	if err := cfg.ParseSource(src); err != nil {
		return cfg, llite.Options{}, fmt.Errorf("mount: source %q: %w (want MGSNID[:MGSNID]:/FSNAME)", src, err)
	}
	opts, _, err := lnetSocketOption(opts)
	if err != nil {
		return cfg, llite.Options{}, fmt.Errorf("mount: %w", err)
	}
	rest, err := cfg.ParseOptions(opts)
	if err != nil {
		return cfg, llite.Options{}, fmt.Errorf("mount: %w", err)
	}
	if sloppy {
		var kept []string
		for _, o := range rest {
			if _, err := llite.ParseOptions([]string{o}); err == nil {
				kept = append(kept, o)
			} else {
				log.Warn("ignoring mount option", "option", o)
			}
		}
		rest = kept
	}
	lo, err := llite.ParseOptions(rest)
	if err != nil {
		return cfg, llite.Options{}, fmt.Errorf("mount: %w", err)
	}
	if os.Geteuid() == 0 {
		lo.AllowOther = true
	}
	lo.FSName = src
	cfg.Logger, cfg.Data.Logger, lo.Logger = log, log, log
	return cfg, lo, nil
}

func runMount(cmd *cobra.Command, args []string) error {
	f := cmd.Flags()
	if ok, _ := f.GetBool("install-helper"); ok {
		return installHelper(cmd.OutOrStdout())
	}
	v, err := loadConfig(cmd, nil)
	if err != nil {
		return err
	}
	log, err := newLogger(v)
	if err != nil {
		return err
	}
	src, dir := args[0], args[1]
	opts, _ := f.GetString("options")
	sloppy, _ := f.GetBool("sloppy")
	readyFD, _ := f.GetInt("ready-fd")
	var ready *os.File
	if readyFD > 0 {
		ready = os.NewFile(uintptr(readyFD), "ready")
	}
	fail := func(err error) error {
		if ready != nil {
			fmt.Fprintf(ready, "%v\n", err)
			ready.Close()
		}
		return &exitError{code: 32, err: err}
	}
	cfg, lo, err := mountConfig(src, opts, sloppy, log)
	if err != nil {
		return fail(err)
	}
	if st, err := os.Stat(dir); err != nil {
		return fail(fmt.Errorf("mount: mount point: %w", err))
	} else if !st.IsDir() {
		return fail(fmt.Errorf("mount: mount point %s is not a directory", dir))
	}
	if bg, _ := f.GetBool("background"); bg && ready == nil {
		logFile, _ := f.GetString("log-file")
		return mountBackground(cmd, src, dir, opts, sloppy, logFile, v.GetString("log-level"), cfg.Timeout)
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel() // a signal during the mount gives up
		case <-ctx.Done():
		}
	}()
	srv, err := llite.Mount(ctx, dir, cfg, lo)
	cancel()
	if err != nil {
		return fail(err)
	}
	// Opening a file HSM released waits for the coordinator (on the
	// MGS) to restore it.
	if hc, err := hsm.NewClient(cfg.MGS); err != nil {
		log.Warn("no HSM coordinator: released files cannot be restored", "err", err)
	} else {
		srv.FS().SetHSMRestorer(hc)
		defer hc.Close()
	}
	// lctl reaches the mount's tunables (llite.*, osc.*, ldlm.*) here.
	if stop, err := params.Serve(context.Background(), params.Default); err != nil {
		log.Warn("parameters not served to lctl", "err", err)
	} else {
		defer stop()
	}
	// lnetctl reaches its LNet here (lnet_socket=PATH): not fatal, the
	// file system works without it.
	if _, sock, _ := lnetSocketOption(opts); sock != "" {
		if ctl, err := lnetctl.Listen(sock, lnetctl.New(srv.FS().LNet()), log); err != nil {
			log.Warn("mount: no lnetctl socket", "socket", sock, "err", err)
		} else {
			defer ctl.Close()
		}
	}
	if ready != nil {
		fmt.Fprintln(ready, "ok")
		ready.Close()
	}
	select {
	case <-srv.Done():
	case <-sigs:
		log.Info("signal: unmounting", "dir", srv.Dir())
		uctx, ucancel := context.WithTimeout(context.Background(), time.Minute)
		err := srv.Unmount(uctx)
		ucancel()
		if err != nil {
			log.Warn("unmount failed; detaching the mount lazily (served until its files close; a second signal exits now)", "dir", srv.Dir(), "err", err)
			if err := srv.UnmountLazy(); err != nil {
				log.Error("lazy unmount", "err", err)
			}
			select {
			case <-srv.Done():
			case <-sigs:
				return errors.New("mount: second signal: exiting with the mount still busy")
			}
		}
	}
	return srv.Wait()
}

// mountBackground runs `nacre mount` again in a new session, detached
// from the terminal, and returns once it reports the mount live (or its
// error): what mount(8) expects of a helper.
func mountBackground(cmd *cobra.Command, src, dir, opts string, sloppy bool, logFile, level string, timeout time.Duration) error {
	// This very binary, whatever its path (in another mount namespace,
	// entered by mount -N, its path may not exist).
	exe := "/proc/self/exe"
	if _, err := os.Stat(exe); err != nil {
		if exe, err = os.Executable(); err != nil {
			return &exitError{code: 32, err: fmt.Errorf("mount: %w", err)}
		}
	}
	args := []string{"mount", "--ready-fd=3", "--log-level=" + level, src, dir}
	if opts != "" {
		args = append(args, "-o", opts)
	}
	if sloppy {
		args = append(args, "--sloppy")
	}
	r, w, err := os.Pipe()
	if err != nil {
		return &exitError{code: 32, err: fmt.Errorf("mount: %w", err)}
	}
	defer r.Close()
	c := exec.Command(exe, args...)
	c.Args[0] = "nacre" // (what ps shows, rather than /proc/self/exe)
	if logFile != "" {
		lf, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
		if err != nil {
			w.Close()
			return &exitError{code: 32, err: fmt.Errorf("mount: log file: %w", err)}
		}
		defer lf.Close()
		c.Stdout, c.Stderr = lf, lf
	}
	c.ExtraFiles = []*os.File{w}
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	c.Dir = "/"
	if err := c.Start(); err != nil {
		w.Close()
		return &exitError{code: 32, err: fmt.Errorf("mount: start the server process: %w", err)}
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(r).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	// The server bounds its own mount by the timeout; this is a backstop.
	select {
	case s := <-line:
		if s == "ok" {
			fmt.Fprintf(cmd.ErrOrStderr(), "nacre: mounted %s on %s (server pid %d)\n", src, dir, c.Process.Pid)
			return nil
		}
		if s == "" {
			s = "the server process exited: " + describeExit(<-exited)
		}
		return &exitError{code: 32, err: errors.New(s)}
	case <-time.After(timeout + time.Minute):
		c.Process.Kill()
		return &exitError{code: 32, err: fmt.Errorf("mount: not mounted within %v", timeout+time.Minute)}
	}
}

func describeExit(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// installHelper links mountHelper to this binary.
func installHelper(out io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return err
	}
	if fi, err := os.Lstat(mountHelper); err == nil {
		if fi.Mode()&os.ModeSymlink == 0 {
			return fmt.Errorf("%s exists and is not a symbolic link; remove it first", mountHelper)
		}
		if err := os.Remove(mountHelper); err != nil {
			return err
		}
	}
	if err := os.Symlink(exe, mountHelper); err != nil {
		return fmt.Errorf("install %s: %w", mountHelper, err)
	}
	fmt.Fprintf(out, "%s -> %s\n", mountHelper, exe)
	return nil
}

// mountHelperArgs turns mount(8)'s call of a helper,
//
//	mount.nacre SOURCE DIR [-sfnv] [-N NAMESPACE] [-o OPTIONS] [-t TYPE]
//
// into `nacre mount --background` arguments, and the mount namespace -N
// names (mount -N: a PID or a namespace file; "" for none); nil arguments
// mean there is nothing to do (-f: a fake mount).
func mountHelperArgs(argv []string) (args []string, ns string, err error) {
	var pos, opts []string
	sloppy, verbose := false, false
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-o" || a == "-t" || a == "-N":
			if i+1 >= len(argv) {
				return nil, "", fmt.Errorf("mount.nacre: %s needs an argument", a)
			}
			i++
			switch a {
			case "-o":
				opts = append(opts, argv[i])
			case "-N":
				ns = argv[i]
			}
		case strings.HasPrefix(a, "-o"):
			opts = append(opts, a[2:])
		case strings.HasPrefix(a, "-N"):
			ns = a[2:]
		case strings.HasPrefix(a, "-t"):
		case len(a) > 1 && a[0] == '-':
			for _, c := range a[1:] {
				switch c {
				case 's':
					sloppy = true
				case 'f':
					return nil, "", nil
				case 'n':
				case 'v':
					verbose = true
				default:
					return nil, "", fmt.Errorf("mount.nacre: unknown flag -%c", c)
				}
			}
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return nil, "", fmt.Errorf("mount.nacre: want SOURCE DIR [-sfnv] [-N NAMESPACE] [-o OPTIONS], got %q", argv)
	}
	out := []string{"mount", "--background", pos[0], pos[1]}
	if len(opts) > 0 {
		out = append(out, "-o", strings.Join(opts, ","))
	}
	if sloppy {
		out = append(out, "--sloppy")
	}
	if !verbose {
		out = append(out, "--log-level=warn")
	}
	if lf := os.Getenv("NACRE_MOUNT_LOG"); lf != "" {
		out = append(out, "--log-file="+lf)
	}
	return out, ns, nil
}

// enterMountNS runs `nacre args` in the mount namespace ns (mount -N: a
// PID, or a namespace file such as /proc/PID/ns/mnt) by replacing this
// process with nsenter(1), which enters it: a Go process, threaded from
// its start, cannot setns(2) into another mount namespace itself. It
// returns nil at once if ns is this process's own namespace.
func enterMountNS(ns string, args []string) error {
	path := ns
	if _, err := strconv.Atoi(ns); err == nil {
		path = "/proc/" + ns + "/ns/mnt"
	}
	var want, self syscall.Stat_t
	if err := syscall.Stat(path, &want); err != nil {
		return fmt.Errorf("mount.nacre: -N %s: %w", ns, err)
	}
	if err := syscall.Stat("/proc/self/ns/mnt", &self); err != nil {
		return fmt.Errorf("mount.nacre: -N %s: this process's namespace: %w", ns, err)
	}
	if want.Dev == self.Dev && want.Ino == self.Ino {
		return nil
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("mount.nacre: -N %s: entering another mount namespace needs nsenter(1) (util-linux): %w", ns, err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("mount.nacre: -N %s: %w", ns, err)
	}
	// The binary by a descriptor nsenter inherits (no O_CLOEXEC), not by
	// its path, which the other namespace may not have.
	fd, err := syscall.Open(exe, syscall.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("mount.nacre: -N %s: %w", ns, err)
	}
	fdPath := "/proc/self/fd/" + strconv.Itoa(fd)
	argv := append([]string{"nsenter", "--mount=" + path, "--", fdPath}, args...)
	env := append(os.Environ(), execFDEnv+"="+strconv.Itoa(fd))
	err = syscall.Exec(nsenter, argv, env)
	syscall.Close(fd)
	return fmt.Errorf("mount.nacre: -N %s: exec %s: %w", ns, nsenter, err)
}

// execFDEnv names the descriptor of its own binary a process exec'd by
// enterMountNS inherited, which it closes (closeExecFD).
const execFDEnv = "NACRE_EXEC_FD"

// closeExecFD closes the descriptor enterMountNS left this process.
func closeExecFD() {
	if v, ok := os.LookupEnv(execFDEnv); ok {
		if fd, err := strconv.Atoi(v); err == nil && fd > 2 {
			syscall.Close(fd)
		}
		os.Unsetenv(execFDEnv)
	}
}

// exitCode is err's exit status.
func exitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return 1
}
