// Command nacre is Nacre's one binary: servers, the embedded cluster and the
// tools. It only wires cobra commands and viper configuration to packages.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

func main() {
	closeExecFD()
	root := newRoot()
	// Invoked as lnetctl, lctl or lfs (a symlink), behave as `nacre
	// lnetctl`, `nacre lctl` or `nacre lfs`, as Lustre's tools are
	// separate binaries.
	switch name := filepath.Base(os.Args[0]); name {
	case "lnetctl", "lctl", "lfs":
		root.SetArgs(append([]string{name}, os.Args[1:]...))
	case "mount.nacre":
		// mount(8)'s helper: mount -t nacre SOURCE DIR.
		args, ns, err := mountHelperArgs(os.Args[1:])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if args == nil {
			return // -f: a fake mount
		}
		if ns != "" {
			if err := enterMountNS(ns, args); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(32) // mount(8)'s "mount failure"
			}
		}
		root.SetArgs(args)
	}
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "nacre:", err)
		os.Exit(exitCode(err))
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "nacre",
		Short:         "Nacre, a parallel distributed file system",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("config", "", "YAML config file (flags win over NACRE_* environment variables, which win over the file)")
	root.PersistentFlags().String("log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().String("log-format", "text", "log format: text or json")
	root.AddCommand(newUpCmd(), newMGSCmd(), newVersionCmd(), newLNetCmd(), newLNetCtlCmd(), newLstCmd(), newMkfsCmd(), newTunefsCmd(), newServerCmd(), newMountCmd(), newBenchCmd(), newCopytoolCmd(), newLctlCmd(), newLfsCmd(), newPolicyCmd())
	return root
}

// configAnnotation marks a command that reads the config file (see
// readsConfig); its value lists the command's tool-only flags.
const configAnnotation = "nacre:config"

// readsConfig marks cmd as a command that reads the config file
// (loadConfig), and returns it: its flags are keys the file may set, but
// toolOnly, which say what one run of the tool does (bench's
// --stripe-count) and are refused in the file as unknown keys. Every
// command calling loadConfig must be marked.
func readsConfig(cmd *cobra.Command, toolOnly ...string) *cobra.Command {
	for _, name := range toolOnly {
		if cmd.Flags().Lookup(name) == nil {
			panic(fmt.Sprintf("nacre %s: no flag --%s", cmd.Name(), name))
		}
	}
	if cmd.Annotations == nil {
		cmd.Annotations = make(map[string]string)
	}
	cmd.Annotations[configAnnotation] = strings.Join(toolOnly, ",")
	return cmd
}

// loadConfig builds the command's viper: defaults from flag defaults, then
// the config file, then NACRE_* variables (NACRE_GRPC_ADDR, NACRE_TLS_CERT),
// then flags set on the command line. aliases maps flag names to nested keys.
func loadConfig(cmd *cobra.Command, aliases map[string]string) (*viper.Viper, error) {
	if _, ok := cmd.Annotations[configAnnotation]; !ok {
		return nil, fmt.Errorf("nacre %s reads the config file but is not marked so (readsConfig)", cmd.CommandPath())
	}
	v := viper.New()
	v.SetEnvPrefix("NACRE")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_", ".", "_"))
	v.AutomaticEnv()
	var bindErr error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		key := f.Name
		if k, ok := aliases[f.Name]; ok {
			key = k
		}
		if err := v.BindPFlag(key, f); err != nil {
			bindErr = err
		}
	})
	if bindErr != nil {
		return nil, bindErr
	}
	if file := v.GetString("config"); file != "" {
		v.SetConfigFile(file)
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("config %s: %w", file, err)
		}
		if err := checkConfigKeys(cmd, file); err != nil {
			return nil, err
		}
	}
	if err := checkConfigTypes(v, cmd.Flags(), aliases); err != nil {
		return nil, err
	}
	return v, nil
}

// configOnlyKeys are config-file keys that no flag stands for.
var configOnlyKeys = []string{"auth.tokens"}

// checkConfigKeys refuses a key of the config file that no command reads
// (recovery_window for recovery-window): viper would ignore it and the
// setting would silently do nothing. One file serves every command
// (nacre up, mgs, server, mkfs, mount...), so a key is known if any
// command that reads the file (readsConfig) has a flag for it, not only
// cmd; the flags of tools (lfs, lctl, bench's --stripe-count) are not
// keys, and are refused naming the command they belong to.
func checkConfigKeys(cmd *cobra.Command, file string) error {
	fv := viper.New()
	fv.SetConfigFile(file)
	if err := fv.ReadInConfig(); err != nil {
		return fmt.Errorf("config %s: %w", file, err)
	}
	known := map[string]bool{"config": true}
	for _, k := range configOnlyKeys {
		known[k] = true
	}
	tool := make(map[string]string) // a tool's flag: the command it belongs to
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		toolOnly, reads := c.Annotations[configAnnotation]
		add := func(f *pflag.Flag) {
			if !reads || slices.Contains(strings.Split(toolOnly, ","), f.Name) {
				if _, ok := tool[f.Name]; !ok {
					tool[f.Name] = c.CommandPath()
				}
				return
			}
			if k, ok := mgsFlagAliases[f.Name]; ok {
				known[k] = true
				return
			}
			known[f.Name] = true
		}
		c.Flags().VisitAll(add)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cmd.Root())
	// The root's persistent flags (log-level) are every command's.
	cmd.Root().PersistentFlags().VisitAll(func(f *pflag.Flag) { known[f.Name] = true })
	var bad []error
	for _, key := range fv.AllKeys() {
		if known[key] {
			continue
		}
		hint := ""
		if k, ok := mgsFlagAliases[key]; ok {
			hint = fmt.Sprintf(" (--%s is %q in a config file)", key, k)
		} else if c, ok := tool[key]; ok {
			hint = fmt.Sprintf(" (--%s is a flag of %s only, not a setting)", key, c)
		} else if near := nearestKey(key, known); near != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", near)
		}
		bad = append(bad, fmt.Errorf("config %s: unknown key %q%s", file, key, hint))
	}
	slices.SortFunc(bad, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(bad...)
}

// nearestKey is the known key closest to key by edit distance, if one is
// close enough to be a likely typo.
func nearestKey(key string, known map[string]bool) string {
	best, bestD := "", len(key)/2+1
	for k := range known {
		if d := editDistance(key, k); d < bestD || d == bestD && best != "" && k < best {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// checkConfigTypes refuses a value from the config file or a NACRE_*
// variable that does not parse as its flag's type: viper's getters read
// it as zero and say nothing (osts: four ran no OSTs at all, NACRE_PORT=abc
// the port 0). Flags on the command line were parsed already.
func checkConfigTypes(v *viper.Viper, fs *pflag.FlagSet, aliases map[string]string) error {
	var bad []error
	fs.VisitAll(func(f *pflag.Flag) {
		key := f.Name
		if k, ok := aliases[f.Name]; ok {
			key = k
		}
		if f.Changed || !v.IsSet(key) {
			return
		}
		s := fmt.Sprint(v.Get(key))
		var err error
		switch f.Value.Type() {
		case "int":
			_, err = strconv.ParseInt(s, 0, strconv.IntSize)
		case "uint32":
			_, err = strconv.ParseUint(s, 0, 32)
		case "duration":
			_, err = time.ParseDuration(s)
		case "bool":
			_, err = strconv.ParseBool(s)
		}
		if err != nil {
			bad = append(bad, fmt.Errorf("config %s (--%s): %q is not a %s: %w", key, f.Name, s, f.Value.Type(), err))
		}
	})
	return errors.Join(bad...)
}

func newLogger(v *viper.Viper) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(v.GetString("log-level"))); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch v.GetString("log-format") {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", v.GetString("log-format"))
}
