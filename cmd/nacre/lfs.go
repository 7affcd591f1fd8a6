package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/llite"
)

// newLfsCmd is Lustre's lfs for Nacre mounts (the FUSE mount of nacre
// mount, mount -t nacre): the same subcommands, flags and output shapes,
// without ioctls. lfs asks the mount through extended attributes of the
// lustre.* namespace, which the client library answers itself (see
// client.XattrLOV and the others): the layout of a file or the default of
// a directory (lustre.lov, which setstripe also sets), FIDs and paths, the
// MDT's attributes of a directory's entries (find), and what only the
// mount knows — every target's space (df), its targets (osts, mdts) and
// the file system's pools (pool_list), read from the mount's root.
func newLfsCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "lfs",
		Short: "Lustre's lfs: layouts, space, FIDs and find on Nacre mounts",
		Long: `lfs works on Nacre mounts (nacre mount, mount -t nacre) as Lustre's lfs does on
Lustre's, with the same commands, options and output: setstripe, getstripe,
migrate, find, df, mkdir, path2fid, fid2path, getname, osts, mdts, data_version,
pool_list. It needs no ioctl: it asks the mount through extended attributes of
the lustre.* namespace (getfattr -n lustre.lov FILE shows one). The hsm_*
commands do too (lustre.hsm, lustre.hsm_release), and send requests to the
coordinator on the mount's MGS; with --source they reach the file system
through the client library instead, without a mount.`,
	}
	root.AddCommand(newLfsSetstripeCmd(), newLfsGetstripeCmd(), newLfsMigrateCmd(), newLfsFindCmd(), newLfsDfCmd(),
		newLfsMkdirCmd(), newLfsPath2fidCmd(), newLfsFid2pathCmd(), newLfsGetnameCmd(), newLfsTargetsCmd("osts"),
		newLfsTargetsCmd("mdts"), newLfsDataVersionCmd(), newLfsPoolListCmd())
	root.AddCommand(newLfsHSMCmds()...)
	root.AddCommand(newLfsChangelogCmds()...)
	return root
}

// lfsMount is a Nacre mount of this host.
type lfsMount llite.Mounted

// fsName returns the mount's file system name, from its instance name
// (FSNAME-INSTANCE: the instance has no '-').
func (m lfsMount) fsName() (string, error) {
	inst, err := getxattr(m.Dir, client.XattrInstance)
	if err != nil {
		return "", fmt.Errorf("%s: %w", m.Dir, err)
	}
	s := string(inst)
	if i := strings.LastIndexByte(s, '-'); i > 0 {
		return s[:i], nil
	}
	return s, nil
}

// nacreMounts lists the Nacre mounts of this host, in /proc/self/mounts
// order.
func nacreMounts() ([]lfsMount, error) {
	ms, err := llite.Mounts()
	out := make([]lfsMount, len(ms))
	for i, m := range ms {
		out[i] = lfsMount(m)
	}
	return out, err
}

// mountOf returns the Nacre mount holding path.
func mountOf(path string) (lfsMount, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return lfsMount{}, err
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	ms, err := nacreMounts()
	if err != nil {
		return lfsMount{}, err
	}
	best := -1
	for i, m := range ms {
		if abs == m.Dir || strings.HasPrefix(abs, strings.TrimSuffix(m.Dir, "/")+"/") {
			if best < 0 || len(m.Dir) >= len(ms[best].Dir) {
				best = i
			}
		}
	}
	if best < 0 {
		return lfsMount{}, fmt.Errorf("%s: not on a Nacre mount", path)
	}
	return ms[best], nil
}

// mountsFor returns the mount holding path, or every mount when path is
// empty (an error if there is none).
func mountsFor(path string) ([]lfsMount, error) {
	if path != "" {
		m, err := mountOf(path)
		if err != nil {
			return nil, err
		}
		return []lfsMount{m}, nil
	}
	ms, err := nacreMounts()
	if err == nil && len(ms) == 0 {
		err = errors.New("no Nacre file system is mounted here")
	}
	return ms, err
}

// mountByName returns the mount of file system name (the first one that
// answers: a mount whose daemon died is skipped).
func mountByName(name string) (lfsMount, error) {
	ms, err := nacreMounts()
	if err != nil {
		return lfsMount{}, err
	}
	for _, m := range ms {
		var st unix.Statfs_t
		if n, err := m.fsName(); err == nil && n == name && unix.Statfs(m.Dir, &st) == nil {
			return m, nil
		}
	}
	return lfsMount{}, fmt.Errorf("no mount of file system %q here", name)
}

// getxattr reads an extended attribute, following symlinks.
func getxattr(path, name string) ([]byte, error) { return xattrGet(unix.Getxattr, path, name) }

// lgetxattr reads an extended attribute of path itself.
func lgetxattr(path, name string) ([]byte, error) { return xattrGet(unix.Lgetxattr, path, name) }

func xattrGet(get func(string, string, []byte) (int, error), path, name string) ([]byte, error) {
	size := 4096
	for {
		buf := make([]byte, size)
		n, err := get(path, name, buf)
		if err == nil {
			return buf[:n], nil
		}
		if !errors.Is(err, unix.ERANGE) || size >= 1<<20 {
			return nil, err
		}
		if n, err := get(path, name, nil); err == nil && n > size {
			size = n
		} else {
			size *= 4
		}
	}
}

// getJSON reads a JSON extended attribute into v.
func getJSON(path, name string, v any) error {
	b, err := getxattr(path, name)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s of %s: %w", name, path, err)
	}
	return nil
}

// errnoText is an errno as C's strerror spells it (capitalized).
func errnoText(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		s := e.Error()
		if s != "" {
			return strings.ToUpper(s[:1]) + s[1:]
		}
	}
	return err.Error()
}

// lfsErrorf returns an lfs error as lfs words them ("lfs CMD: ...").
func lfsErrorf(cmd *cobra.Command, format string, args ...any) error {
	return fmt.Errorf("lfs %s: %s", cmd.Name(), fmt.Sprintf(format, args...))
}

// lfsWarnf prints an error about one of several arguments, which the
// command goes on after, and returns the error it ends with.
func lfsWarnf(cmd *cobra.Command, format string, args ...any) error {
	err := lfsErrorf(cmd, format, args...)
	fmt.Fprintln(cmd.ErrOrStderr(), err)
	return &exitError{code: 1, err: fmt.Errorf("lfs %s: failed for some arguments", cmd.Name())}
}

// df

// lfs df's flags (Lustre's MNTDF_*).
const (
	dfInodes  = 1 << iota // inodes, not space
	dfCooked              // sizes in K, M, G...
	dfVerbose             // inactive targets too (a mount has none)
)

// dfRow prints one line of lfs df as Lustre's showdf does.
func dfRow(w io.Writer, st client.TargetStatfs, mnt string, flags int, typ string) {
	if st.Error != "" {
		msg := st.Error
		if st.Errno != 0 {
			msg = errnoText(syscall.Errno(st.Errno))
		}
		fmt.Fprintf(w, "%-20s: %s\n", st.UUID, msg)
		return
	}
	var avail, used, total uint64
	if flags&dfInodes != 0 {
		avail, used, total = st.Ffree, st.Files-min(st.Ffree, st.Files), st.Files
	} else {
		shift := uint(10)
		if flags&dfCooked != 0 {
			shift = 0
		}
		bs := uint64(st.Bsize)
		avail = st.Bavail * bs >> shift
		used = (st.Blocks - min(st.Bfree, st.Blocks)) * bs >> shift
		total = st.Blocks * bs >> shift
	}
	ratio := 0.0
	if used+avail > 0 {
		ratio = float64(used) / float64(used+avail)
	}
	num := func(v uint64) string {
		if flags&dfCooked == 0 {
			return fmt.Sprintf("%11d", v)
		}
		f, i := float64(v), 0
		for f > 1024 {
			f /= 1024
			i++
		}
		if i == 0 {
			return fmt.Sprintf("%11d", v)
		}
		return fmt.Sprintf("%8.1f%c", f, "KMGTPEZY"[i-1])
	}
	fmt.Fprintf(w, "%-20s %11s %11s %11s %4s %s", st.UUID, num(total), num(used), num(avail), fmt.Sprintf("%3d%%", int(ratio*100+0.5)), mnt)
	if typ != "" {
		fmt.Fprintf(w, "[%s:%d]", typ, st.Index)
	}
	fmt.Fprintln(w)
}

// mntdf prints lfs df of one mount; it returns an error if a target did
// not answer (its line says why).
func mntdf(w io.Writer, m lfsMount, pool string, flags int) error {
	var sts []client.TargetStatfs
	if err := getJSON(m.Dir, client.XattrStatfs, &sts); err != nil {
		return fmt.Errorf("%s: %w", m.Dir, err)
	}
	var inPool map[uint32]bool
	if pool != "" {
		if _, p, ok := strings.Cut(pool, "."); ok {
			pool = p
		}
		var pools []client.PoolInfo
		if err := getJSON(m.Dir, client.XattrPools, &pools); err != nil {
			return err
		}
		inPool = map[uint32]bool{}
		for _, p := range pools {
			if p.Name == pool {
				for _, i := range p.OSTs {
					inPool[i] = true
				}
			}
		}
	}
	if flags&dfInodes != 0 {
		fmt.Fprintf(w, "%-20s %11s %11s %11s %4s %s\n", "UUID", "Inodes", "IUsed", "IFree", "IUse%", "Mounted on")
	} else {
		h := "1K-blocks"
		if flags&dfCooked != 0 {
			h = "bytes"
		}
		fmt.Fprintf(w, "%-20s %11s %11s %11s %4s %s\n", "UUID", h, "Used", "Available", "Use%", "Mounted on")
	}
	sum := client.TargetStatfs{UUID: "filesystem_summary:", Bsize: 1}
	var ostFfree uint64
	var failed []string
	for _, typ := range []string{"MDT", "OST"} {
		for _, st := range sts {
			if st.Type != typ || (typ == "OST" && inPool != nil && !inPool[st.Index]) {
				continue
			}
			dfRow(w, st, m.Dir, flags, typ)
			if st.Error != "" {
				failed = append(failed, st.UUID)
				continue
			}
			if typ == "MDT" {
				sum.Files += st.Files
				sum.Ffree += st.Ffree
			} else {
				bs := uint64(st.Bsize)
				sum.Blocks += st.Blocks * bs
				sum.Bfree += st.Bfree * bs
				sum.Bavail += st.Bavail * bs
				ostFfree += st.Ffree
			}
		}
	}
	// Fewer objects free on the OSTs than inodes on the MDT: the inodes
	// that can still be made are the objects (as Lustre's df shows them).
	if ostFfree < sum.Ffree {
		sum.Files = sum.Files - sum.Ffree + ostFfree
		sum.Ffree = ostFfree
	}
	fmt.Fprintln(w)
	dfRow(w, sum, m.Dir, flags, "")
	fmt.Fprintln(w)
	if len(failed) > 0 {
		return fmt.Errorf("%s: no answer from %s", m.Dir, strings.Join(failed, ", "))
	}
	return nil
}

func newLfsDfCmd() *cobra.Command {
	var human, inodes, lazy, verbose bool
	var pool string
	cmd := &cobra.Command{
		Use:   "df [-h] [-i] [-l] [-v] [-p POOL] [PATH]",
		Short: "Space (or inodes, -i) of every MDT and OST and of the file system",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := ""
			if len(args) == 1 {
				path = args[0]
			}
			ms, err := mountsFor(path)
			if err != nil {
				return lfsErrorf(cmd, "%v", err)
			}
			flags := 0
			if human {
				flags |= dfCooked
			}
			if inodes {
				flags |= dfInodes
			}
			if verbose {
				flags |= dfVerbose
			}
			var errs []error
			for _, m := range ms {
				if err := mntdf(cmd.OutOrStdout(), m, pool, flags); err != nil {
					errs = append(errs, err)
				}
			}
			if len(errs) > 0 {
				return lfsErrorf(cmd, "%v", errors.Join(errs...))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&human, "human-readable", "h", false, "sizes in powers of 1024 (K, M, G...)")
	f.BoolVarP(&inodes, "inodes", "i", false, "inodes rather than space")
	f.BoolVarP(&lazy, "lazy", "l", false, "skip targets that do not answer soon (the mount's lazystatfs decides)")
	f.BoolVarP(&verbose, "verbose", "v", false, "also list inactive targets")
	f.StringVarP(&pool, "pool", "p", "", "only the OSTs of pool [FSNAME.]POOL")
	cmd.Flags().BoolP("help", "", false, "help for df")
	return cmd
}

// mkdir

func newLfsMkdirCmd() *cobra.Command {
	var count, index int
	var mode string
	cmd := &cobra.Command{
		Use:     "mkdir [-c MDT_COUNT] [-i MDT_INDEX] [-m MODE] DIR...",
		Aliases: []string{"setdirstripe"},
		Short:   "Make directories (on MDT0: the file system has one MDT)",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < -1 || count > 1 {
				return lfsErrorf(cmd, "a directory striped over %d MDTs: the file system has one MDT", count)
			}
			if index != -1 && index != 0 {
				return lfsErrorf(cmd, "MDT index %d: the file system has one MDT (index 0)", index)
			}
			perm := uint32(0o777)
			if mode != "" {
				p, err := strconv.ParseUint(mode, 8, 32)
				if err != nil || p > 0o7777 {
					return lfsErrorf(cmd, "bad mode %q", mode)
				}
				perm = uint32(p)
			}
			for _, d := range args {
				// Lustre's asks the parent's file system to make it
				// (an ioctl), which a file system other than Lustre
				// refuses.
				if _, err := mountOf(filepath.Dir(d)); err != nil {
					return lfsErrorf(cmd, "dirstripe error on '%s': %v", d, err)
				}
				if err := unix.Mkdir(d, perm); err != nil {
					return lfsErrorf(cmd, "dirstripe error on '%s': %s", d, errnoText(err))
				}
				if mode != "" {
					// An explicit mode is not subject to the umask.
					if err := unix.Chmod(d, perm); err != nil {
						return lfsErrorf(cmd, "chmod '%s': %s", d, errnoText(err))
					}
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVarP(&count, "mdt-count", "c", 0, "MDTs to stripe the directory over (0, 1 or -1: the one MDT)")
	f.IntVarP(&index, "mdt-index", "i", -1, "MDT to make the directory on (0)")
	f.StringVarP(&mode, "mode", "m", "", "permission bits, octal (not subject to the umask)")
	return cmd
}

// path2fid, fid2path, getname

func newLfsPath2fidCmd() *cobra.Command {
	var parents bool
	cmd := &cobra.Command{
		Use:   "path2fid [--parents] PATH...",
		Short: "Show the FID of each file (--parents: its parent's FID and its name)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			var failed error
			for _, p := range args {
				var out string
				if parents {
					abs, err := filepath.Abs(p)
					if err != nil {
						return err
					}
					dir, base := filepath.Split(abs)
					f, err := lgetxattr(dir, client.XattrFID)
					if err != nil {
						failed = lfsWarnf(cmd, "can't get parent FID of '%s': %s", p, errnoText(err))
						continue
					}
					out = string(f) + "/" + base
				} else {
					f, err := lgetxattr(p, client.XattrFID)
					if err != nil {
						failed = lfsWarnf(cmd, "can't get fid for %s: %s", p, errnoText(err))
						continue
					}
					out = string(f)
				}
				if len(args) > 1 {
					fmt.Fprintf(w, "%s: %s\n", p, out)
				} else {
					fmt.Fprintln(w, out)
				}
			}
			return failed
		},
	}
	cmd.Flags().BoolVar(&parents, "parents", false, "show the parent's FID and the name")
	return cmd
}

func newLfsFid2pathCmd() *cobra.Command {
	var link int
	var printFID bool
	cmd := &cobra.Command{
		Use:   "fid2path [--link N] [-f] FSNAME|MOUNT_POINT FID...",
		Short: "Show the paths of files given by FID",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var m lfsMount
			var err error
			printMnt := strings.HasPrefix(args[0], "/") || strings.HasPrefix(args[0], ".")
			if printMnt {
				m, err = mountOf(args[0])
			} else {
				m, err = mountByName(args[0])
			}
			if err != nil {
				return lfsErrorf(cmd, "%v", err)
			}
			w := cmd.OutOrStdout()
			printFID = printFID || len(args) > 2
			var failed error
			for _, f := range args[1:] {
				s := strings.TrimSpace(f)
				if !strings.HasPrefix(s, "[") {
					s = "[" + s + "]"
				}
				var paths [][]byte
				if err := getJSON(m.Dir, client.XattrFID2PathPrefix+s, &paths); err != nil {
					failed = lfsWarnf(cmd, "cannot find %s %s: %s", args[0], f, errnoText(err))
					continue
				}
				for i, p := range paths {
					if link >= 0 && i != link {
						continue
					}
					out := strings.TrimPrefix(string(p), "/")
					if printMnt {
						out = filepath.Join(m.Dir, out)
					}
					if printFID {
						fmt.Fprintf(w, "%s ", s)
					}
					fmt.Fprintln(w, out)
				}
			}
			return failed
		},
	}
	cmd.Flags().IntVarP(&link, "link", "l", -1, "only link N (0: the first)")
	cmd.Flags().BoolVarP(&printFID, "print-fid", "f", false, "print each FID before its paths")
	return cmd
}

func newLfsGetnameCmd() *cobra.Command {
	var onlyFS, onlyInstance bool
	cmd := &cobra.Command{
		Use:   "getname [-n|-i] [PATH...]",
		Short: "Show each mount's name, FSNAME-INSTANCE, and mount point (or PATH)",
		RunE: func(cmd *cobra.Command, args []string) error {
			type item struct{ at, show string }
			var items []item
			if len(args) == 0 {
				ms, err := mountsFor("")
				if err != nil {
					return lfsErrorf(cmd, "%v", err)
				}
				for _, m := range ms {
					items = append(items, item{m.Dir, m.Dir})
				}
			}
			for _, a := range args {
				items = append(items, item{a, a})
			}
			w := cmd.OutOrStdout()
			for _, it := range items {
				b, err := getxattr(it.at, client.XattrInstance)
				if err != nil {
					return lfsErrorf(cmd, "cannot get name for `%s': %s", it.at, errnoText(err))
				}
				name := string(b)
				fsname, inst := name, ""
				if i := strings.LastIndexByte(name, '-'); i > 0 {
					fsname, inst = name[:i], name[i+1:]
				}
				switch {
				case onlyFS:
					fmt.Fprintf(w, "%s %s\n", fsname, it.show)
				case onlyInstance:
					fmt.Fprintf(w, "%s %s\n", inst, it.show)
				default:
					fmt.Fprintf(w, "%s %s\n", name, it.show)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&onlyFS, "name", "n", false, "the file system name only")
	cmd.Flags().BoolVarP(&onlyInstance, "instance", "i", false, "the instance only")
	return cmd
}

// osts, mdts

func newLfsTargetsCmd(which string) *cobra.Command {
	typ, head := "OST", "OBDS:"
	if which == "mdts" {
		typ, head = "MDT", "MDTS:"
	}
	return &cobra.Command{
		Use:   which + " [PATH]",
		Short: "List the " + typ + "s of each mount (or of PATH's) and whether they are active",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := ""
			if len(args) == 1 {
				path = args[0]
			}
			ms, err := mountsFor(path)
			if err != nil {
				return lfsErrorf(cmd, "%v", err)
			}
			w := cmd.OutOrStdout()
			for _, m := range ms {
				var ts []client.TargetInfo
				if err := getJSON(m.Dir, client.XattrTargets, &ts); err != nil {
					return lfsErrorf(cmd, "%s: %s", m.Dir, errnoText(err))
				}
				fmt.Fprintln(w, head)
				for _, t := range ts {
					if t.Type != typ {
						continue
					}
					state := "ACTIVE"
					if !t.Active {
						state = "INACTIVE"
					}
					fmt.Fprintf(w, "%d: %s %s\n", t.Index, t.UUID, state)
				}
			}
			return nil
		},
	}
}

// data_version

func newLfsDataVersionCmd() *cobra.Command {
	var noFlush, readFlush, writeFlush bool
	cmd := &cobra.Command{
		Use:   "data_version [-n|-r|-w] FILE",
		Short: "Show a file's data version (it changes with every change of the data the MDT records)",
		Long: `data_version prints the file's data version, which the MDT bumps with every
change of the data it records: a close after writes, a truncate. Writes through
an open that has not closed yet do not count until it closes, so -n, -r and -w
(which flush clients' caches first in Lustre) change nothing here.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := getxattr(args[0], client.XattrDataVersion)
			if err != nil {
				return lfsErrorf(cmd, "cannot get version for '%s': %s", args[0], errnoText(err))
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&noFlush, "no-flush", "n", false, "do not flush (nothing to flush here)")
	f.BoolVarP(&readFlush, "read", "r", false, "flush dirty data first (nothing to flush here)")
	f.BoolVarP(&writeFlush, "write", "w", false, "flush all cached data first (nothing to flush here)")
	return cmd
}

// pool_list

func newLfsPoolListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pool_list FSNAME[.POOL] | PATH",
		Short: "List the OST pools of a file system, or the OSTs of one pool",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := args[0]
			var m lfsMount
			var fsname, pool string
			var err error
			if strings.Contains(arg, "/") || arg == "." || arg == ".." {
				if m, err = mountOf(arg); err == nil {
					fsname, err = m.fsName()
				}
			} else {
				fsname, pool, _ = strings.Cut(arg, ".")
				m, err = mountByName(fsname)
			}
			if err != nil {
				return lfsErrorf(cmd, "%v", err)
			}
			var pools []client.PoolInfo
			if err := getJSON(m.Dir, client.XattrPools, &pools); err != nil {
				return lfsErrorf(cmd, "%s: %s", m.Dir, errnoText(err))
			}
			sort.Slice(pools, func(i, j int) bool { return pools[i].Name < pools[j].Name })
			w := cmd.OutOrStdout()
			if pool == "" {
				fmt.Fprintf(w, "Pools from %s:\n", fsname)
				for _, p := range pools {
					fmt.Fprintf(w, "%s.%s\n", fsname, p.Name)
				}
				return nil
			}
			for _, p := range pools {
				if p.Name != pool {
					continue
				}
				fmt.Fprintf(w, "Pool: %s.%s\n", fsname, p.Name)
				for _, i := range p.OSTs {
					fmt.Fprintf(w, "%s-OST%04x_UUID\n", fsname, i)
				}
				return nil
			}
			return lfsErrorf(cmd, "pool %s.%s not found", fsname, pool)
		},
	}
}
