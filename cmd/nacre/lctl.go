package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/mgs"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
	lnetv1 "github.com/nacrefs/nacre/proto/nacre/lnet/v1"
	"github.com/nacrefs/nacre/server"
	"github.com/nacrefs/nacre/services/lnetctl"
)

// newLctlCmd is Lustre's lctl over the parameters of the Nacre processes
// of this node (their sockets in the run directory), or of the process
// serving an admin API (--admin), and, for persistent parameters, the
// MGS's admin API.
func newLctlCmd() *cobra.Command {
	var socket, adminAddr string
	var token, tokenFile string
	var timeout time.Duration
	root := &cobra.Command{
		Use:   "lctl",
		Short: "Show and change the live parameters of this node's Nacre processes (Lustre's lctl)",
		Long: `lctl reads and changes the live parameters of every Nacre process on this node
(servers, nacre up, mounts): each serves them on a socket in $NACRE_RUN_DIR
(default ` + params.DefaultRunDir + `). Names are Lustre's, dot-separated, with globs per
component: osc.*.max_rpcs_in_flight, ost.OSS.ost_io.nrs_policies. With --admin it
reads those of the process serving that admin API (the MGS's, or nacre up) instead.`,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&socket, "socket", "", "one process's parameter socket (default: every socket in the run directory)")
	pf.StringVar(&adminAddr, "admin", "", "use the admin API at HOST:PORT (the MGS's gRPC address) instead of local sockets")
	pf.StringVar(&token, "token", "", "admin token for --admin and -P (default: $NACRE_TOKEN)")
	pf.StringVar(&tokenFile, "token-file", "", "file holding the admin token (nacre up writes DATA/admin.token)")
	pf.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for an answer")

	// remote returns where the parameters are and a context with the
	// timeout; done closes what it opened.
	remote := func(cmd *cobra.Command) (src paramSource, ctx context.Context, done func(), err error) {
		ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
		if adminAddr != "" {
			conn, err := grpc.NewClient(adminAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				cancel()
				return nil, nil, nil, fmt.Errorf("admin API %s: %w", adminAddr, err)
			}
			if ctx, err = withToken(ctx, persistentConn{token: token, tokenFile: tokenFile}); err != nil {
				conn.Close()
				cancel()
				return nil, nil, nil, err
			}
			return adminSource{adminv1.NewAdminClient(conn)}, ctx, func() { conn.Close(); cancel() }, nil
		}
		socks := []string{socket}
		if socket == "" {
			if socks, err = params.LocalSockets(); err != nil {
				cancel()
				return nil, nil, nil, err
			}
			if len(socks) == 0 {
				cancel()
				return nil, nil, nil, fmt.Errorf("no Nacre process serves parameters in %s (is a server or a mount running? set %s, --socket or --admin)",
					params.RunDir(), params.RunDirEnv)
			}
		}
		return &params.Remote{Sockets: socks}, ctx, cancel, nil
	}
	conn := func() persistentConn {
		return persistentConn{mgs: mgsAddrsOr(adminAddr), token: token, tokenFile: tokenFile, timeout: timeout, socket: socket}
	}

	var mgsAddrs []string
	var recursive, dirMarks, catalog bool
	list := &cobra.Command{
		Use: "list_param [-R] [-F] PATTERN... | list_param -P", Short: "List parameter names (-P: those set_param -P can store)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if catalog {
				for _, s := range mgs.Specs() {
					fmt.Fprintf(cmd.OutOrStdout(), "%-36s %-7s %s\n", s.Name, s.Scope, s.Help)
				}
				return nil
			}
			if len(args) == 0 {
				return errors.New("list_param: give at least one PATTERN (e.g. osc.*)")
			}
			r, ctx, cancel, err := remote(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			infos, err := r.List(ctx, recursive, args...)
			if err != nil {
				return fmt.Errorf("list_param: %w", err)
			}
			out := cmd.OutOrStdout()
			for _, i := range infos {
				mark := ""
				switch {
				case !dirMarks:
				case i.Dir:
					mark = "/"
				case i.Writable:
					mark = "="
				}
				fmt.Fprintln(out, i.Name+mark)
			}
			return nil
		},
	}
	list.Flags().BoolVarP(&recursive, "recursive", "R", false, "list every parameter below the names")
	list.Flags().BoolVarP(&dirMarks, "classify", "F", false, "mark components holding parameters with '/' and writable parameters with '='")
	list.Flags().BoolVarP(&catalog, "persistent", "P", false, "list the parameters the MGS stores (set_param -P, conf_param), with their scope")

	var onlyValue, onlyName bool
	get := &cobra.Command{
		Use: "get_param [-n] [-N] PATTERN...", Short: "Show parameter values", Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, ctx, cancel, err := remote(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			vals, err := r.Get(ctx, args...)
			if err != nil {
				return fmt.Errorf("get_param: %w", err)
			}
			var failed []string
			for _, v := range vals {
				if v.Err != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "error: get_param: %s: %s\n", v.Name, v.Err)
					failed = append(failed, v.Name)
					continue
				}
				printValue(cmd.OutOrStdout(), v, onlyName, onlyValue)
			}
			if len(failed) > 0 {
				return fmt.Errorf("get_param: %d parameters could not be read: %s", len(failed), strings.Join(failed, ", "))
			}
			return nil
		},
	}
	get.Flags().BoolVarP(&onlyValue, "no-name", "n", false, "print values only")
	get.Flags().BoolVarP(&onlyName, "only-name", "N", false, "print names only")

	var persistent, del, quiet bool
	set := &cobra.Command{
		Use:   "set_param [-n] [-P [-d]] NAME=VALUE...",
		Short: "Change parameters, on every process at once (all or none), or persistently with -P",
		Long: `set_param changes live parameters: every NAME (a pattern) must match somewhere and
every value must be accepted by every parameter it matches, or nothing changes.
With -P the change is stored by the MGS for the whole file system (see nacre lctl
list_param -P for what can be) and applied by every server and client, now and at
every start; -d removes a stored parameter (later starts keep their defaults).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if persistent {
				return setPersistent(cmd, "set_param -P", args, del, mgs.PersistentName, withMGS(conn(), mgsAddrs))
			}
			if del {
				return errors.New("set_param: -d goes with -P")
			}
			var as []params.Assignment
			for _, a := range args {
				pa, err := params.ParseAssignment(a)
				if err != nil {
					return fmt.Errorf("set_param: %w", err)
				}
				as = append(as, pa)
			}
			r, ctx, cancel, err := remote(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			done, err := r.Set(ctx, as...)
			if !quiet {
				for _, v := range done {
					printValue(cmd.OutOrStdout(), v, false, false)
				}
			}
			if err != nil {
				return fmt.Errorf("set_param: %w", err)
			}
			return nil
		},
	}
	set.Flags().BoolVarP(&persistent, "persistent", "P", false, "store in the MGS for every server and client of the file system")
	set.Flags().BoolVarP(&del, "delete", "d", false, "with -P: remove the stored parameter")
	set.Flags().BoolVarP(&quiet, "no-print", "n", false, "do not print what was set")
	set.Flags().StringSliceVar(&mgsAddrs, "mgs", nil, "MGS gRPC address(es) (default: --admin, $NACRE_MGS, or the MGS this node's processes use)")

	var confDel bool
	conf := &cobra.Command{
		Use:   "conf_param [-d] FSNAME-TARGET.LAYER.PARAM=VALUE...",
		Short: "Store a parameter in the MGS, older syntax (nacre-OST0000.osc.max_dirty_mb=512, nacre.sys.timeout=40)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setPersistent(cmd, "conf_param", args, confDel, mgs.ConfParamName, withMGS(conn(), mgsAddrs))
		},
	}
	conf.Flags().BoolVarP(&confDel, "delete", "d", false, "remove the stored parameter")
	conf.Flags().StringSliceVar(&mgsAddrs, "mgs", nil, "MGS gRPC address(es) (default: --admin, $NACRE_MGS, or the MGS this node's processes use)")

	dl := &cobra.Command{
		Use: "dl", Aliases: []string{"device_list"}, Short: "List the devices of this node's processes", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, ctx, cancel, err := remote(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			devs, err := r.Devices(ctx)
			if err != nil {
				return fmt.Errorf("dl: %w", err)
			}
			for _, d := range devs {
				fmt.Fprintf(cmd.OutOrStdout(), "%3d %s %s %s %s %d\n", d.Index, d.Status, d.Type, d.Name, d.UUID, d.Refs)
			}
			return nil
		},
	}

	var lnetSocket string
	ping := &cobra.Command{
		Use: "ping NID [TIMEOUT_SECONDS]", Short: "LNet ping a peer through this node's LNet (its lnetctl socket)", Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			wait := timeout
			if len(args) == 2 {
				s, err := strconv.Atoi(args[1])
				if err != nil || s <= 0 || s > maxPingTimeout {
					return fmt.Errorf("ping: timeout %q: want whole seconds from 1 to %d", args[1], maxPingTimeout)
				}
				wait = time.Duration(s) * time.Second
			}
			cc, err := grpc.NewClient("unix://"+lnetSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return err
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), wait+5*time.Second)
			defer cancel()
			r, err := lnetv1.NewLNetControlClient(cc).Ping(ctx, &lnetv1.PingRequest{Nid: args[0], TimeoutMs: wait.Milliseconds()})
			if err != nil {
				return fmt.Errorf("ping: failed to ping %s: %s (is an LNet node serving %s?)", args[0], status.Convert(err).Message(), lnetSocket)
			}
			for _, n := range r.GetPeerNis() {
				fmt.Fprintf(cmd.OutOrStdout(), "12345-%s\n", n)
			}
			return nil
		},
	}
	ping.Flags().StringVar(&lnetSocket, "lnet-socket", lnetctl.DefaultSocket, "control socket of this node's LNet")

	root.AddCommand(list, get, set, conf, dl, ping)
	root.AddCommand(newPoolCmds(conn)...)
	root.AddCommand(newChangelogCmds(func(cmd *cobra.Command) (paramSource, context.Context, func(), error) {
		src, ctx, done, err := remote(cmd)
		return src, ctx, done, err
	})...)
	return root
}

// maxPingTimeout is the longest TIMEOUT lctl ping takes, in seconds
// (Lustre's jt_ptl_ping refuses more).
const maxPingTimeout = 120

// printValue prints a parameter as lctl does: name=value, a value of
// several lines after "name=" on a line of its own.
func printValue(w io.Writer, v params.Value, onlyName, onlyValue bool) {
	switch {
	case onlyName:
		fmt.Fprintln(w, v.Name)
	case onlyValue:
		fmt.Fprintln(w, v.Value)
	case strings.Contains(v.Value, "\n"):
		fmt.Fprintf(w, "%s=\n%s\n", v.Name, v.Value)
	default:
		fmt.Fprintf(w, "%s=%s\n", v.Name, v.Value)
	}
}

// mgsAddrsOr returns addr as a list, none if empty.
func mgsAddrsOr(addr string) []string {
	if addr == "" {
		return nil
	}
	return []string{addr}
}

// withMGS returns pc with the MGS addresses of --mgs, if given.
func withMGS(pc persistentConn, addrs []string) persistentConn {
	if len(addrs) > 0 {
		pc.mgs = addrs
	}
	return pc
}

// persistentConn is how set_param -P and conf_param reach the MGS.
type persistentConn struct {
	mgs              []string
	token, tokenFile string
	timeout          time.Duration
	socket           string
}

// setPersistent stores (or, del, removes) parameters in the MGS: every
// name is mapped and every value checked before the first is sent.
func setPersistent(cmd *cobra.Command, what string, args []string, del bool, mapName func(string) (string, error), pc persistentConn) error {
	type rec struct{ name, value string }
	var recs []rec
	for _, a := range args {
		name, value, ok := strings.Cut(a, "=")
		if del {
			name, ok = strings.TrimSuffix(a, "="), true
		}
		if !ok || name == "" {
			return fmt.Errorf("%s: %q: want NAME=VALUE", what, a)
		}
		stored, err := mapName(name)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !del {
			pn, err := mgs.ParseParamName(stored)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			if value, err = pn.Spec.NormalizeValue(value); err != nil {
				return fmt.Errorf("%s: %s: %w", what, name, err)
			}
		}
		recs = append(recs, rec{stored, value})
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), pc.timeout)
	defer cancel()
	conn, addr, err := dialMGS(ctx, pc)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer conn.Close()
	if ctx, err = withToken(ctx, pc); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	admin := adminv1.NewAdminClient(conn)
	var done []string
	for _, r := range recs {
		if del {
			_, err = admin.DeleteParam(ctx, &adminv1.DeleteParamRequest{Name: r.name})
		} else {
			_, err = admin.SetParam(ctx, &adminv1.SetParamRequest{Name: r.name, Value: r.value})
		}
		if err != nil {
			err = fmt.Errorf("%s: %s: %s (MGS %s)", what, r.name, status.Convert(err).Message(), addr)
			if len(done) > 0 {
				err = fmt.Errorf("%w; already stored: %s", err, strings.Join(done, ", "))
			}
			return err
		}
		done = append(done, r.name)
		if del {
			fmt.Fprintf(cmd.OutOrStdout(), "%s deleted\n", r.name)
		} else {
			fmt.Fprintf(cmd.OutOrStdout(), "%s=%s\n", r.name, r.value)
		}
	}
	return nil
}

// dialMGS connects to the MGS: --mgs, $NACRE_MGS, or the MGS of an mgc
// device of this node's processes.
func dialMGS(ctx context.Context, pc persistentConn) (*grpc.ClientConn, string, error) {
	addrs := pc.mgs
	if len(addrs) == 0 {
		if env := os.Getenv("NACRE_MGS"); env != "" {
			addrs = strings.Split(env, ",")
		}
	}
	if len(addrs) == 0 {
		socks := []string{pc.socket}
		if pc.socket == "" {
			socks, _ = params.LocalSockets()
		}
		if len(socks) > 0 {
			devs, _ := (&params.Remote{Sockets: socks}).Devices(ctx)
			for _, d := range devs {
				if d.Type == "mgc" {
					addrs = strings.Split(d.UUID, ",")
					break
				}
			}
		}
	}
	if len(addrs) == 0 {
		return nil, "", errors.New("no MGS known: give --mgs HOST:PORT (or set NACRE_MGS)")
	}
	addr := strings.TrimSpace(addrs[0])
	if a, err := server.ParseMGSNode(addr); err == nil {
		addr = a
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, "", fmt.Errorf("MGS %s: %w", addr, err)
	}
	return conn, addr, nil
}

// withToken adds the admin token to ctx's outgoing metadata.
func withToken(ctx context.Context, pc persistentConn) (context.Context, error) {
	tok := pc.token
	if tok == "" && pc.tokenFile != "" {
		b, err := os.ReadFile(pc.tokenFile)
		if err != nil {
			return ctx, fmt.Errorf("admin token: %w", err)
		}
		tok = strings.TrimSpace(string(b))
	}
	if tok == "" {
		tok = os.Getenv("NACRE_TOKEN")
	}
	if tok == "" {
		return ctx, nil
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok), nil
}

// paramSource is where lctl finds parameters: this node's processes
// (params.Remote) or the process behind an admin API.
type paramSource interface {
	List(ctx context.Context, recursive bool, patterns ...string) ([]params.Info, error)
	Get(ctx context.Context, patterns ...string) ([]params.Value, error)
	Set(ctx context.Context, assigns ...params.Assignment) ([]params.Value, error)
	Devices(ctx context.Context) ([]params.DeviceInfo, error)
}

var _ paramSource = (*params.Remote)(nil)

// adminSource reads the registry of the process serving an admin API.
type adminSource struct{ c adminv1.AdminClient }

// apiError keeps the server's message, without gRPC's decoration.
func apiError(err error) error { return errors.New(status.Convert(err).Message()) }

// List implements paramSource: the API lists values, and the names are
// arranged as list_param does.
func (a adminSource) List(ctx context.Context, recursive bool, patterns ...string) ([]params.Info, error) {
	r, err := a.c.GetLiveParams(ctx, &adminv1.GetLiveParamsRequest{})
	if err != nil {
		return nil, apiError(err)
	}
	names := params.New()
	for _, p := range r.GetParams() {
		names.Register(params.ReadOnly(p.GetName(), "", func() string { return "" }))
	}
	return names.List(params.ListOptions{Recursive: recursive}, patterns...)
}

// Get implements paramSource.
func (a adminSource) Get(ctx context.Context, patterns ...string) ([]params.Value, error) {
	r, err := a.c.GetLiveParams(ctx, &adminv1.GetLiveParamsRequest{Patterns: patterns})
	if err != nil {
		return nil, apiError(err)
	}
	out := make([]params.Value, 0, len(r.GetParams()))
	for _, p := range r.GetParams() {
		out = append(out, params.Value{Name: p.GetName(), Value: p.GetValue(), Err: p.GetError()})
	}
	return out, nil
}

// Set implements paramSource.
func (a adminSource) Set(ctx context.Context, assigns ...params.Assignment) ([]params.Value, error) {
	req := &adminv1.SetLiveParamsRequest{}
	for _, as := range assigns {
		req.Assignments = append(req.Assignments, &adminv1.LiveAssignment{Pattern: as.Pattern, Value: as.Value})
	}
	r, err := a.c.SetLiveParams(ctx, req)
	if err != nil {
		return nil, apiError(err)
	}
	out := make([]params.Value, 0, len(r.GetParams()))
	for _, p := range r.GetParams() {
		out = append(out, params.Value{Name: p.GetName(), Value: p.GetValue()})
	}
	return out, nil
}

// Devices implements paramSource.
func (a adminSource) Devices(ctx context.Context) ([]params.DeviceInfo, error) {
	r, err := a.c.ListDevices(ctx, &adminv1.ListDevicesRequest{})
	if err != nil {
		return nil, apiError(err)
	}
	out := make([]params.DeviceInfo, 0, len(r.GetDevices()))
	for _, d := range r.GetDevices() {
		out = append(out, params.DeviceInfo{Index: int(d.GetIndex()), Status: d.GetStatus(), Type: d.GetType(), Name: d.GetName(),
			UUID: d.GetUuid(), Refs: int(d.GetRefs())})
	}
	return out, nil
}
