package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
)

// Lustre's O_LOV_DELAY_CREATE: open(O_CREAT) with it makes a regular file
// without objects, which setting lustre.lov then gives its layout.
const oLovDelayCreate = unix.O_NOCTTY | unix.O_ASYNC

// stripeOpts are one component's options as given (nil: not given).
type stripeOpts struct {
	end    uint64
	count  *int32
	size   *uint32
	offset *int32
	pool   *string
}

func (o *stripeOpts) isSet() bool {
	return o.count != nil || o.size != nil || o.offset != nil || o.pool != nil
}

// layoutArgs is what setstripe and migrate were told: a plain layout's
// options (one entry in comps), or a composite layout's components (-E).
type layoutArgs struct {
	comps     []stripeOpts
	composite bool
	yaml      string          // --yaml: a template in getstripe -y's format
	bools     map[string]bool // the command's own switches, by long name
	paths     []string
}

// given says whether any layout option was.
func (a *layoutArgs) given() bool {
	return a.composite || a.yaml != "" || (len(a.comps) > 0 && a.comps[0].isSet())
}

// parseLfsSize reads N[kMGTPE] (powers of 1024; no suffix: bytes).
func parseLfsSize(s string) (uint64, error) {
	mult := uint64(1)
	t := strings.TrimSuffix(strings.TrimSuffix(s, "B"), "i")
	if n := len(t); n > 0 {
		if i := strings.IndexByte("kmgtpe", lower(t[n-1])); i >= 0 {
			mult = 1 << (10 * (i + 1))
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseUint(t, 0, 64)
	if err != nil || v > (1<<64-1)/mult {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return v * mult, nil
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// parseLayoutArgs parses setstripe's and migrate's arguments as Lustre's
// getopt does (options and paths in any order; -E starts a component, and
// the options after it are that component's). bools maps the command's
// own switches, long name to short letter.
func parseLayoutArgs(args []string, bools map[string]string) (*layoutArgs, error) {
	la := &layoutArgs{comps: []stripeOpts{{end: layout.EOF}}, bools: map[string]bool{}}
	short := map[string]string{"c": "stripe-count", "S": "stripe-size", "i": "stripe-index", "p": "pool", "E": "component-end", "y": "yaml"}
	long := map[string]string{"stripe-count": "stripe-count", "stripe_count": "stripe-count", "count": "stripe-count",
		"stripe-size": "stripe-size", "stripe_size": "stripe-size", "size": "stripe-size",
		"stripe-index": "stripe-index", "stripe_index": "stripe-index", "stripe-offset": "stripe-index", "index": "stripe-index",
		"pool": "pool", "component-end": "component-end", "comp-end": "component-end", "yaml": "yaml"}
	boolShort := map[string]string{}
	for l, s := range bools {
		boolShort[s] = l
	}
	cur := func() *stripeOpts { return &la.comps[len(la.comps)-1] }
	seenE := false
	set := func(name, v string) error {
		switch name {
		case "component-end":
			var end uint64
			if v == "-1" || strings.EqualFold(v, "eof") {
				end = layout.EOF
			} else {
				n, err := parseLfsSize(v)
				if err != nil {
					return fmt.Errorf("bad component end %q", v)
				}
				end = n
			}
			if !seenE {
				if cur().isSet() {
					return errors.New("options before the first -E: give them after it, for that component")
				}
				seenE, la.composite = true, true
				cur().end = end
				return nil
			}
			la.comps = append(la.comps, stripeOpts{end: end})
		case "stripe-count":
			n, err := strconv.ParseInt(v, 0, 32)
			if err != nil || n < -1 || n > layout.MaxStripeCount {
				return fmt.Errorf("bad stripe count %q", v)
			}
			c := int32(n)
			cur().count = &c
		case "stripe-size":
			n, err := parseLfsSize(v)
			if err != nil || n > layout.MaxStripeSize {
				return fmt.Errorf("bad stripe size %q", v)
			}
			if n != 0 && n%layout.StripeAlign != 0 {
				return fmt.Errorf("stripe size %d is not a multiple of %d (64 KiB)", n, layout.StripeAlign)
			}
			s := uint32(n)
			cur().size = &s
		case "stripe-index":
			n, err := strconv.ParseInt(v, 0, 32)
			if err != nil || n < -1 || n > layout.MaxOSTIndex {
				return fmt.Errorf("bad stripe index %q", v)
			}
			i := int32(n)
			cur().offset = &i
		case "pool":
			if _, p, ok := strings.Cut(v, "."); ok {
				v = p // FSNAME.POOL
			}
			if err := layout.ValidPool(v); err != nil {
				return err
			}
			cur().pool = &v
		case "yaml":
			la.yaml = v
		}
		return nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			la.paths = append(la.paths, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "--"):
			name, v, hasV := strings.Cut(a[2:], "=")
			if b, ok := bools[name]; ok && b != "" && !hasV {
				la.bools[name] = true
				continue
			}
			n, ok := long[name]
			if !ok {
				return nil, fmt.Errorf("unknown option %q", a)
			}
			if !hasV {
				if i+1 >= len(args) {
					return nil, fmt.Errorf("option %s needs a value", a)
				}
				i++
				v = args[i]
			}
			if err := set(n, v); err != nil {
				return nil, err
			}
		case len(a) > 1 && a[0] == '-':
			letter := a[1:2]
			if n, ok := short[letter]; ok {
				v := a[2:]
				if v == "" {
					if i+1 >= len(args) {
						return nil, fmt.Errorf("option %s needs a value", a)
					}
					i++
					v = args[i]
				}
				if err := set(n, v); err != nil {
					return nil, err
				}
				continue
			}
			for _, c := range a[1:] {
				l, ok := boolShort[string(c)]
				if !ok {
					if c == 'o' {
						return nil, errors.New("-o (a list of OSTs) is not supported: give -i for the first OST and -c for the count")
					}
					return nil, fmt.Errorf("unknown option %q", a)
				}
				la.bools[l] = true
			}
		default:
			la.paths = append(la.paths, a)
		}
	}
	return la, nil
}

// template builds the layout template la asks for; what it does not say
// comes from def (the directory's default: its first component), and a
// component's unset count, size and pool from the component before it,
// as Lustre's lfs does.
func (la *layoutArgs) template(def layout.RAID0) (layout.Layout, error) {
	base := layout.RAID0{StripeCount: def.StripeCount, StripeSize: def.StripeSize, StripeOffset: layout.AnyOffset}
	apply := func(r *layout.RAID0, o stripeOpts) {
		if o.count != nil && *o.count != 0 {
			r.StripeCount = *o.count
		}
		if o.size != nil && *o.size != 0 {
			r.StripeSize = *o.size
		}
		if o.offset != nil {
			r.StripeOffset = *o.offset
		}
		if o.pool != nil {
			r.Pool = *o.pool
		}
	}
	var l layout.Layout
	if !la.composite {
		r := base
		apply(&r, la.comps[0])
		l = layout.Plain(r)
	} else {
		l.Composite = true
		start, prev := uint64(0), base
		for i, o := range la.comps {
			r := layout.RAID0{StripeCount: prev.StripeCount, StripeSize: prev.StripeSize, StripeOffset: layout.AnyOffset, Pool: prev.Pool}
			apply(&r, o)
			l.Components = append(l.Components, layout.Component{ID: uint32(i + 1), Pattern: layout.PatternRAID0, Start: start, End: o.end, RAID0: r})
			start, prev = o.end, r
		}
	}
	if err := l.Validate(); err != nil {
		return layout.Layout{}, err
	}
	return l, nil
}

// layoutOf reads path's lustre.lov: nil without one (ENODATA).
func layoutOf(path string, follow bool) (*layout.Layout, error) {
	get := lgetxattr
	if follow {
		get = getxattr
	}
	b, err := get(path, client.XattrLOV)
	if errors.Is(err, unix.ENODATA) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	l, err := layout.Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("%s of %s: %w", client.XattrLOV, path, err)
	}
	return &l, nil
}

// builtinDefault is the file system's default layout when no directory
// has one (the MDT's).
func builtinDefault() layout.Layout {
	return layout.Plain(layout.RAID0{StripeCount: layout.DefaultStripeCount, StripeSize: layout.DefaultStripeSize, StripeOffset: layout.AnyOffset})
}

// dirDefault returns the layout new files in dir get: its default, else
// the mount root's, else the file system's; own says it is dir's own.
func dirDefault(dir string) (l layout.Layout, own bool, err error) {
	d, err := layoutOf(dir, true)
	if err != nil {
		return layout.Layout{}, false, err
	}
	if d != nil {
		return *d, true, nil
	}
	if m, err := mountOf(dir); err == nil && m.Dir != dir {
		if r, err := layoutOf(m.Dir, true); err == nil && r != nil {
			return *r, false, nil
		}
	}
	return builtinDefault(), false, nil
}

// firstRAID0 is the striping of l's first component.
func firstRAID0(l layout.Layout) layout.RAID0 { return l.Components[0].RAID0 }

// loadYAMLTemplate reads a template in getstripe -y's format (the
// components' extents, stripe counts, sizes, offsets and pools).
func loadYAMLTemplate(file string) (*layoutArgs, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	l, err := parseGetstripeYAML(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	la := &layoutArgs{composite: l.Composite, bools: map[string]bool{}}
	for _, c := range l.Components {
		count, size, off, pool := c.StripeCount, c.StripeSize, c.StripeOffset, c.Pool
		la.comps = append(la.comps, stripeOpts{end: c.End, count: &count, size: &size, offset: &off, pool: &pool})
	}
	return la, nil
}

func newLfsSetstripeCmd() *cobra.Command {
	return &cobra.Command{
		Use: "setstripe {[--component-end|-E END] [-c COUNT] [-S SIZE] [-i INDEX] [-p POOL]}... FILE|DIR...\n" +
			"  setstripe -d DIR...\n  setstripe --yaml TEMPLATE FILE|DIR...",
		Short: "Give new files a layout, or set (-d: drop) a directory's default layout",
		Long: `setstripe makes each FILE that does not exist with the layout given (a file that
exists keeps the layout it has: its layout is chosen once, before it holds data;
lfs migrate changes it), or sets the default layout of each DIR for the files
made there later. -c is the stripe count (-1: every OST), -S the stripe size
(a multiple of 64 KiB, with k, M, G suffixes), -i the first OST (-1: any), -p an
OST pool. -E END (-1 or eof: the end of the file) starts a component of a
composite layout (PFL), the options after it being that component's; a
component's unset count, size and pool are the previous one's. What is not
given comes from the directory's default (else the file system's).
--yaml takes the layout from lfs getstripe -y's output.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			la, err := parseLayoutArgs(args, map[string]string{"delete": "d", "help": "h"})
			if err != nil {
				return lfsErrorf(cmd, "%v", err)
			}
			if la.bools["help"] {
				return cmd.Help()
			}
			if len(la.paths) == 0 {
				return lfsErrorf(cmd, "no file or directory given")
			}
			if la.bools["delete"] {
				if la.given() {
					return lfsErrorf(cmd, "-d takes no layout options")
				}
				for _, p := range la.paths {
					if err := unix.Removexattr(p, client.XattrLOV); err != nil && !errors.Is(err, unix.ENODATA) {
						return lfsErrorf(cmd, "cannot delete the default layout of '%s': %s", p, errnoText(err))
					}
				}
				return nil
			}
			if la.yaml != "" {
				if la.composite || la.comps[0].isSet() {
					return lfsErrorf(cmd, "--yaml takes no other layout options")
				}
				y, err := loadYAMLTemplate(la.yaml)
				if err != nil {
					return lfsErrorf(cmd, "%v", err)
				}
				y.paths = la.paths
				la = y
			}
			for _, p := range la.paths {
				if err := setstripe(p, la); err != nil {
					return lfsErrorf(cmd, "%v", err)
				}
			}
			return nil
		},
	}
}

// setstripe gives path the layout la says: a new file, or a directory's
// default.
func setstripe(path string, la *layoutArgs) error {
	st, err := os.Stat(path)
	isDir := err == nil && st.IsDir()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var def layout.Layout
	if isDir {
		m, err := mountOf(path)
		if err != nil {
			return err
		}
		if def, _, err = dirDefault(m.Dir); err != nil {
			return err
		}
	} else if def, _, err = dirDefault(filepath.Dir(path)); err != nil {
		return err
	}
	tmpl, err := la.template(firstRAID0(def))
	if err != nil {
		return fmt.Errorf("'%s': %w", path, err)
	}
	val, err := tmpl.Marshal()
	if err != nil {
		return err
	}
	if isDir {
		if err := unix.Setxattr(path, client.XattrLOV, val, 0); err != nil {
			return fmt.Errorf("unable to set the default layout of '%s': %s", path, errnoText(err))
		}
		return nil
	}
	return createStriped(path, val, 0o644)
}

// createStriped makes the regular file path with layout val, as Lustre's
// llapi_file_open does: open(O_CREAT|O_LOV_DELAY_CREATE), then set the
// layout; an existing file keeps its (EEXIST: "stripe already set"). A new
// file is removed again if it cannot have the layout.
func createStriped(path string, val []byte, perm uint32) error {
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|oLovDelayCreate, perm)
	if errors.Is(err, unix.EEXIST) {
		if err := unix.Setxattr(path, client.XattrLOV, val, unix.XATTR_CREATE); err != nil {
			if errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("setstripe error for '%s': stripe already set", path)
			}
			return fmt.Errorf("setstripe error for '%s': %s", path, errnoText(err))
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot create '%s': %s", path, errnoText(err))
	}
	serr := unix.Fsetxattr(fd, client.XattrLOV, val, unix.XATTR_CREATE)
	cerr := unix.Close(fd)
	if serr != nil || cerr != nil {
		unix.Unlink(path)
		return fmt.Errorf("setstripe error for '%s': %s", path, errnoText(errors.Join(serr, cerr)))
	}
	return nil
}

// getstripe

// verbose bits: which fields getstripe prints (Lustre's VERBOSE_*).
type verbose uint32

const (
	vObjID verbose = 1 << iota
	vCount
	vSize
	vOffset
	vPool
	vDetail
	vGen
	vPattern
	vCompCount
	vCompFlags
	vCompStart
	vCompEnd
	vCompID
	vDFID
	vMirrorCount
	vMirrorID

	vDefault = vCount | vSize | vOffset | vPool | vObjID | vGen | vPattern | vCompCount | vCompFlags | vCompStart | vCompEnd |
		vCompID | vMirrorCount | vMirrorID
)

// dumpFlags say how a sub-layout prints (Lustre's LDF_*).
type dumpFlags uint32

const (
	ldfIsDir dumpFlags = 1 << iota
	ldfIndent
	ldfSkipObjs
	ldfYAML
	ldfReleased // an HSM released file: a layout without objects
)

// gsParams are getstripe's choices.
type gsParams struct {
	v        verbose
	yaml     bool
	depth    int // 0: the paths only, without their names; 1: and a directory's entries; -1: all below
	ost      int // -1: every file; else only files with an object there, marked
	compID   uint32
	hasComp  bool
	mdtIndex bool
}

// Lustre's layout magic numbers, shown by -v.
const (
	lovMagicV1   = 0x0BD10BD0
	lovMagicV3   = 0x0BD30BD0
	lovMagicComp = 0x0BD60BD0
)

// lmmSize is the size of a sub-layout in Lustre's encoding (for -v's
// lcm_size, lcme_offset and lcme_size).
func lmmSize(c *layout.Component) uint32 {
	n := uint32(32)
	if c.Pool != "" {
		n = 48
	}
	return n + 24*uint32(len(c.Objects))
}

// dumpLMM prints one sub-layout (a plain layout, or a component's) as
// Lustre's lov_dump_user_lmm_v1v3 does.
func dumpLMM(w io.Writer, path string, f fid.FID, c *layout.Component, gen uint32, flags dumpFlags, p gsParams) {
	isDir, indent, skip, yaml := flags&ldfIsDir != 0, flags&ldfIndent != 0, flags&ldfSkipObjs != 0, flags&ldfYAML != 0
	v := p.v
	if p.ost >= 0 && !skip && !isDir {
		on := false
		for _, o := range c.Objects {
			on = on || int(o.OSTIndex) == p.ost
		}
		if !on {
			return
		}
	}
	prefix, space, sep := "lmm_", "", ""
	if isDir {
		prefix = ""
	}
	if indent {
		space = "      "
	}
	label := func(bit verbose, name string) {
		if v&^bit != 0 {
			fmt.Fprintf(w, "%s%s%s", space, prefix, name)
		}
	}
	dirSep := func() string {
		if !yaml && isDir {
			return " "
		}
		return "\n"
	}
	if !yaml && !indent && p.depth != 0 && path != "" && (v != vObjID || !isDir) {
		fmt.Fprintln(w, path)
	}
	if v&vDetail != 0 && !isDir {
		magic := lovMagicV1
		if c.Pool != "" {
			magic = lovMagicV3
		}
		fmt.Fprintf(w, "%s%smagic:         0x%08X\n", space, prefix, magic)
		fmt.Fprintf(w, "%s%sseq:           %#x\n", space, prefix, f.Seq)
		fmt.Fprintf(w, "%s%sobject_id:     %#x\n", space, prefix, f.Oid)
	}
	if v&(vDetail|vDFID) != 0 && !isDir {
		if v&^vDFID != 0 {
			fmt.Fprintf(w, "%slmm_fid:           ", space)
		}
		if yaml {
			fmt.Fprintf(w, "%#x:%#x:%#x\n", f.Seq, f.Oid, f.Ver)
		} else {
			fmt.Fprintln(w, f.String())
		}
	}
	if v&vCount != 0 {
		label(vCount, "stripe_count:  ")
		fmt.Fprintf(w, "%d", c.StripeCount)
		sep = dirSep()
	}
	if v&vSize != 0 {
		fmt.Fprint(w, sep)
		label(vSize, "stripe_size:   ")
		fmt.Fprintf(w, "%d", c.StripeSize)
		sep = dirSep()
	}
	if v&vPattern != 0 {
		fmt.Fprint(w, sep)
		label(vPattern, "pattern:       ")
		if flags&ldfReleased != 0 {
			fmt.Fprint(w, "released")
		} else {
			fmt.Fprint(w, "raid0")
		}
		sep = dirSep()
	}
	if v&vGen != 0 && !isDir {
		fmt.Fprint(w, sep)
		label(vGen, "layout_gen:    ")
		if skip {
			gen = 0
		}
		fmt.Fprintf(w, "%d", gen)
		sep = "\n"
	}
	if v&vOffset != 0 {
		fmt.Fprint(w, sep)
		label(vOffset, "stripe_offset: ")
		if isDir || skip || len(c.Objects) == 0 {
			fmt.Fprintf(w, "%d", c.StripeOffset)
		} else {
			fmt.Fprintf(w, "%d", c.Objects[0].OSTIndex)
		}
		sep = dirSep()
	}
	if v&vPool != 0 && c.Pool != "" {
		fmt.Fprint(w, sep)
		label(vPool, "pool:          ")
		fmt.Fprint(w, c.Pool)
		sep = dirSep()
	}
	if sep != "" {
		fmt.Fprintln(w)
	}
	if !isDir && !skip && v&vObjID != 0 && len(c.Objects) > 0 {
		switch {
		case indent:
			fmt.Fprintf(w, "%6slmm_objects:\n", " ")
		case yaml:
			fmt.Fprintln(w, "lmm_objects:")
		default:
			fmt.Fprint(w, "\tobdidx\t\t objid\t\t objid\t\t group\n")
		}
		for i, o := range c.Objects {
			if p.ost >= 0 && int(o.OSTIndex) != p.ost {
				continue
			}
			of := o.Object
			switch {
			case yaml:
				fmt.Fprintf(w, "      - l_ost_idx: %d\n", o.OSTIndex)
				fmt.Fprintf(w, "%8sl_fid:     %#x:%#x:%#x\n", " ", of.Seq, of.Oid, of.Ver)
			case indent:
				fmt.Fprintf(w, "      - %d: { l_ost_idx: %d, l_fid: %s }\n", i, o.OSTIndex, of)
			default:
				group := fmt.Sprintf("%#14x", of.Seq)
				if of.Seq <= 11 { // Lustre's reserved and MDT0 sequences print in decimal
					group = fmt.Sprintf("%14d", of.Seq)
				}
				mark := ""
				if p.ost >= 0 {
					mark = " *"
				}
				fmt.Fprintf(w, "\t%6d\t%14d\t%#13x\t%s%s\n", o.OSTIndex, of.Oid, of.Oid, group, mark)
			}
		}
	}
	fmt.Fprintln(w)
}

// dumpComposite prints a composite layout as Lustre's lov_dump_comp_v1
// does.
func dumpComposite(w io.Writer, path string, f fid.FID, l *layout.Layout, flags dumpFlags, p gsParams) {
	isDir, yaml := flags&ldfIsDir != 0, flags&ldfYAML != 0
	v := p.v
	init := func(c *layout.Component) bool { return !isDir && c.Instantiated() }
	if p.ost >= 0 {
		on := false
		for i := range l.Components {
			for _, o := range l.Components[i].Objects {
				on = on || (!isDir && int(o.OSTIndex) == p.ost)
			}
		}
		if !on {
			return
		}
	}
	gen := l.Gen
	if isDir {
		gen = 0
	}
	if p.depth != 0 && path != "" && (v != vObjID || !isDir) && !yaml {
		fmt.Fprintln(w, path)
	}
	if v&vDetail != 0 {
		size := uint32(32 + 48*len(l.Components))
		for i := range l.Components {
			size += lmmSize(&l.Components[i])
		}
		fmt.Fprintln(w, "composite_header:")
		fmt.Fprintf(w, "%2slcm_magic:         0x%08X\n", " ", lovMagicComp)
		fmt.Fprintf(w, "%2slcm_size:          %d\n", " ", size)
		if isDir {
			fmt.Fprintf(w, "%2slcm_flags:         %s\n", " ", "")
		} else {
			fmt.Fprintf(w, "%2slcm_flags:         %s\n", " ", "0")
		}
	}
	if v&vGen != 0 {
		if v&^vGen != 0 {
			fmt.Fprintf(w, "%2slcm_layout_gen:    ", " ")
		}
		fmt.Fprintf(w, "%d\n", gen)
	}
	if v&vMirrorCount != 0 {
		if v&^vMirrorCount != 0 {
			fmt.Fprintf(w, "%2slcm_mirror_count:  ", " ")
		}
		fmt.Fprintln(w, 1)
	}
	if v&vCompCount != 0 {
		if v&^vCompCount != 0 {
			fmt.Fprintf(w, "%2slcm_entry_count:   ", " ")
		}
		fmt.Fprintln(w, len(l.Components))
	}
	if v&vDetail != 0 && !yaml {
		fmt.Fprintln(w, "components:")
	}
	flags |= ldfIndent
	lastInit := v&vDefault != vDefault && !p.hasComp
	offset := uint32(32 + 48*len(l.Components))
	entry := func(i int) {
		c := &l.Components[i]
		fl := flags &^ ldfSkipObjs
		if !init(c) {
			fl |= ldfSkipObjs
		}
		dumpCompEntry(w, i, c, isDir, init(c), offset, v, yaml)
		dumpLMM(w, path, f, c, 0, fl, p)
	}
	i := 0
	for ; i < len(l.Components); i++ {
		c := &l.Components[i]
		if p.hasComp && c.ID != p.compID {
			offset += lmmSize(c)
			continue
		}
		if lastInit {
			if init(c) {
				offset += lmmSize(c)
				continue
			}
			break
		}
		if p.ost >= 0 {
			on := false
			for _, o := range c.Objects {
				on = on || int(o.OSTIndex) == p.ost
			}
			if !init(c) || !on {
				offset += lmmSize(c)
				continue
			}
		}
		entry(i)
		offset += lmmSize(c)
	}
	if lastInit {
		// Part of the layout asked for: the last instantiated component's
		// (a directory's last).
		if i == 0 {
			i = len(l.Components) - 1
		} else {
			i--
		}
		entry(i)
	}
}

// dumpCompEntry prints a component's header (lov_dump_comp_v1_entry).
func dumpCompEntry(w io.Writer, index int, c *layout.Component, isDir, init bool, offset uint32, v verbose, yaml bool) {
	sep := ""
	if yaml {
		fmt.Fprintf(w, "%2scomponent%d:\n", " ", index)
	}
	id, mirror := strconv.FormatUint(uint64(c.ID), 10), strconv.FormatUint(uint64(c.ID>>16), 10)
	if isDir {
		id, mirror = "N/A", "N/A"
	}
	if v&vCompID != 0 {
		switch {
		case v&vDetail != 0 && !yaml:
			fmt.Fprintf(w, "%slcme_id:             ", "  - ")
		case v&^vCompID != 0:
			fmt.Fprintf(w, "%4slcme_id:             ", " ")
		}
		fmt.Fprint(w, id)
		sep = "\n"
	}
	if v&vMirrorID != 0 {
		fmt.Fprint(w, sep)
		if v&^vMirrorID != 0 {
			fmt.Fprintf(w, "%4slcme_mirror_id:      ", " ")
		}
		fmt.Fprint(w, mirror)
		sep = "\n"
	}
	if v&vCompFlags != 0 {
		fmt.Fprint(w, sep)
		if v&^vCompFlags != 0 {
			fmt.Fprintf(w, "%4slcme_flags:          ", " ")
		}
		if init {
			fmt.Fprint(w, "init")
		} else {
			fmt.Fprint(w, "0")
		}
		sep = "\n"
	}
	if v&vCompStart != 0 {
		fmt.Fprint(w, sep)
		if v&^vCompStart != 0 {
			fmt.Fprintf(w, "%4slcme_extent.e_start: ", " ")
		}
		fmt.Fprintf(w, "%d", c.Start)
		sep = "\n"
	}
	if v&vCompEnd != 0 {
		fmt.Fprint(w, sep)
		if v&^vCompEnd != 0 {
			fmt.Fprintf(w, "%4slcme_extent.e_end:   ", " ")
		}
		if c.End == layout.EOF {
			fmt.Fprint(w, "EOF")
		} else {
			fmt.Fprintf(w, "%d", c.End)
		}
		sep = "\n"
	}
	switch {
	case yaml:
		fmt.Fprint(w, sep)
		fmt.Fprintf(w, "%4ssub_layout:\n", " ")
	case v&vDetail != 0:
		fmt.Fprint(w, sep)
		fmt.Fprintf(w, "%4slcme_offset:         %d\n", " ", offset)
		fmt.Fprintf(w, "%4slcme_size:           %d\n", " ", lmmSize(c))
		fmt.Fprintf(w, "%4ssub_layout:\n", " ")
	default:
		fmt.Fprint(w, sep)
	}
}

// dumpLayout prints path's layout (a directory's default) as lfs
// getstripe does.
func dumpLayout(w io.Writer, path string, f fid.FID, l *layout.Layout, isDir bool, p gsParams) {
	var flags dumpFlags
	if isDir {
		flags |= ldfIsDir
	}
	if p.yaml {
		flags |= ldfYAML
	}
	if released(l) && !isDir {
		flags |= ldfReleased
	}
	if l.Composite || p.hasComp || (p.v&^vDetail != vDefault && p.v&(vCompCount|vCompID|vCompStart|vCompEnd|vCompFlags) != 0) {
		dumpComposite(w, path, f, l, flags, p)
		return
	}
	dumpLMM(w, path, f, &l.Components[0], l.Gen, flags, p)
}

// released says whether a file's layout has no objects at all: its data
// were released to an HSM archive (a new file gets its first
// component's objects when it is made).
func released(l *layout.Layout) bool {
	for i := range l.Components {
		if l.Components[i].Instantiated() {
			return false
		}
	}
	return true
}

func newLfsGetstripeCmd() *cobra.Command {
	var count, size, index, pool, gen, dir, recursive, verb, yaml, quiet, fidFlag, mdt, pattern, compCount bool
	var ost string
	var compID uint32
	cmd := &cobra.Command{
		Use:   "getstripe [-c|-S|-i|-p|-g|-L|-F|-m] [-d] [-r] [-v] [-y] [-q] [-O OST] [-I ID] FILE|DIR...",
		Short: "Show the layout of files, and the default layout of directories",
		Long: `getstripe prints each FILE's layout (its stripes: obdidx, objid, group) and each
DIR's default layout followed by its entries' (-d: the directory only; -r: all
below), as Lustre's lfs getstripe does. -c, -S, -i, -p, -g, -L, -F and -m print
one field each; -v adds the magic numbers and the FID; -y prints YAML (which
setstripe --yaml takes back); -O shows only files with an object on that OST.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := gsParams{depth: 1, ost: -1, yaml: yaml}
			one := func(set bool, bit verbose) {
				if set && p.v&vDetail == 0 {
					p.v |= bit
					p.depth = 0
				}
			}
			if verb {
				p.v = vDefault | vDetail
			}
			one(count, vCount)
			one(size, vSize)
			one(index, vOffset)
			one(pool, vPool)
			one(gen, vGen)
			one(pattern, vPattern)
			one(fidFlag, vDFID)
			one(compCount, vCompCount)
			if dir {
				p.depth = 0
			}
			if recursive {
				p.depth = -1
			} else if verb {
				p.depth = 1
			}
			if p.v == 0 {
				p.v = vDefault
			}
			if quiet {
				p.v = vObjID
			}
			if cmd.Flags().Changed("component-id") {
				p.compID, p.hasComp = compID, true
			}
			if ost != "" {
				s := ost
				if i := strings.Index(s, "OST"); i >= 0 {
					s = strings.TrimSuffix(s[i+3:], "_UUID")
					n, err := strconv.ParseUint(s, 16, 32)
					if err != nil {
						return lfsErrorf(cmd, "bad OST %q", ost)
					}
					p.ost = int(n)
				} else {
					n, err := strconv.ParseUint(s, 0, 32)
					if err != nil {
						return lfsErrorf(cmd, "bad OST %q", ost)
					}
					p.ost = int(n)
				}
			}
			w := cmd.OutOrStdout()
			var failed error
			for _, a := range args {
				if mdt {
					b, err := getxattr(a, client.XattrMDTIndex)
					if err != nil {
						failed = lfsWarnf(cmd, "%s: %s", a, errnoText(err))
						continue
					}
					fmt.Fprintln(w, string(b))
					continue
				}
				if err := getstripe(w, cmd, a, p, 0); err != nil {
					failed = err
				}
			}
			return failed
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&count, "stripe-count", "c", false, "the stripe count only")
	f.BoolVarP(&size, "stripe-size", "S", false, "the stripe size only")
	f.BoolVarP(&index, "stripe-index", "i", false, "the first OST only")
	f.BoolVarP(&pool, "pool", "p", false, "the pool only")
	f.BoolVarP(&gen, "generation", "g", false, "the layout generation only")
	f.BoolVarP(&pattern, "layout", "L", false, "the pattern only")
	f.BoolVarP(&fidFlag, "fid", "F", false, "the FID only")
	f.BoolVarP(&mdt, "mdt-index", "m", false, "the MDT index only")
	f.BoolVar(&compCount, "component-count", false, "the number of components only")
	f.BoolVarP(&dir, "directory", "d", false, "a directory's default layout, not its entries'")
	f.BoolVarP(&recursive, "recursive", "r", false, "every file below the directories")
	f.BoolVarP(&verb, "verbose", "v", false, "every field, the magic numbers and FID too")
	f.BoolVarP(&yaml, "yaml", "y", false, "YAML")
	f.BoolVarP(&quiet, "quiet", "q", false, "the objects only")
	f.StringVarP(&ost, "ost", "O", "", "only files with an object on this OST (index or UUID)")
	f.Uint32VarP(&compID, "component-id", "I", 0, "only this component")
	return cmd
}

// getstripe prints path's layout and, for a directory within the depth,
// its entries'.
func getstripe(w io.Writer, cmd *cobra.Command, path string, p gsParams, level int) error {
	st, err := os.Stat(path)
	if err != nil {
		return lfsWarnf(cmd, "%s: %s", path, errnoText(err))
	}
	if !st.IsDir() {
		if !st.Mode().IsRegular() {
			return nil
		}
		l, err := layoutOf(path, true)
		if err != nil {
			return lfsWarnf(cmd, "%s: %s", path, errnoText(err))
		}
		if l == nil {
			return lfsWarnf(cmd, "%s has no stripe info", path)
		}
		var f fid.FID
		if p.v&(vDetail|vDFID) != 0 {
			b, err := getxattr(path, client.XattrFID)
			if err != nil {
				return lfsWarnf(cmd, "%s: %s", path, errnoText(err))
			}
			if f, err = fid.Parse(string(b)); err != nil {
				return lfsWarnf(cmd, "%s: %v", path, err)
			}
		}
		dumpLayout(w, path, f, l, false, p)
		return nil
	}
	if p.ost < 0 {
		l, _, err := dirDefault(path)
		if err != nil {
			return lfsWarnf(cmd, "%s: %s", path, errnoText(err))
		}
		dumpLayout(w, path, fid.FID{}, &l, true, p)
	}
	if p.depth == 0 || (p.depth > 0 && level >= p.depth) {
		return nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return lfsWarnf(cmd, "%s: %s", path, errnoText(err))
	}
	var failed error
	for _, e := range ents {
		if e.Type()&os.ModeSymlink != 0 {
			continue
		}
		child := filepath.Join(path, e.Name())
		if e.IsDir() && p.depth > 0 && level+1 >= p.depth {
			// A subdirectory at the depth: its default, not its entries.
			if p.ost < 0 {
				if l, _, err := dirDefault(child); err == nil {
					dumpLayout(w, child, fid.FID{}, &l, true, p)
				}
			}
			continue
		}
		if err := getstripe(w, cmd, child, p, level+1); err != nil {
			failed = err
		}
	}
	return failed
}

// parseGetstripeYAML reads a layout from getstripe -y's output.
func parseGetstripeYAML(b []byte) (layout.Layout, error) {
	var l layout.Layout
	var cur *layout.Component
	plain := layout.Component{Pattern: layout.PatternRAID0, End: layout.EOF, RAID0: layout.RAID0{StripeOffset: layout.AnyOffset}}
	cur = &plain
	for _, line := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "-") || strings.HasPrefix(t, "l_fid:") {
			continue
		}
		k, v, ok := strings.Cut(t, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		num := func() (int64, error) { return strconv.ParseInt(v, 0, 64) }
		switch k {
		case "lcm_entry_count":
			l.Composite = true
		case "lcme_id":
			l.Composite = true
			l.Components = append(l.Components, layout.Component{Pattern: layout.PatternRAID0, RAID0: layout.RAID0{StripeOffset: layout.AnyOffset}})
			cur = &l.Components[len(l.Components)-1]
			if n, err := num(); err == nil {
				cur.ID = uint32(n)
			}
		case "lcme_extent.e_start":
			n, err := strconv.ParseUint(v, 0, 64)
			if err != nil {
				return l, fmt.Errorf("bad %s %q", k, v)
			}
			cur.Start = n
		case "lcme_extent.e_end":
			if v == "EOF" {
				cur.End = layout.EOF
				break
			}
			n, err := strconv.ParseUint(v, 0, 64)
			if err != nil {
				return l, fmt.Errorf("bad %s %q", k, v)
			}
			cur.End = n
		case "lmm_stripe_count", "stripe_count":
			n, err := num()
			if err != nil {
				return l, fmt.Errorf("bad %s %q", k, v)
			}
			cur.StripeCount = int32(n)
		case "lmm_stripe_size", "stripe_size":
			n, err := num()
			if err != nil {
				return l, fmt.Errorf("bad %s %q", k, v)
			}
			cur.StripeSize = uint32(n)
		case "lmm_stripe_offset", "stripe_offset":
			n, err := num()
			if err != nil {
				return l, fmt.Errorf("bad %s %q", k, v)
			}
			cur.StripeOffset = int32(n)
		case "lmm_pool", "pool":
			cur.Pool = v
		}
	}
	if !l.Composite {
		l.Components = []layout.Component{plain}
	}
	for i := range l.Components {
		if l.Components[i].ID == 0 && l.Composite {
			l.Components[i].ID = uint32(i + 1)
		}
	}
	if len(l.Components) == 0 {
		return l, errors.New("no layout in the template")
	}
	return l, l.Validate()
}

// migrate

func newLfsMigrateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate [-c COUNT] [-S SIZE] [-i INDEX] [-p POOL] [{-E END ...}...] [-n] [-v] FILE...",
		Short: "Move a file's data to a new layout (the directory's default if none is given)",
		Long: `migrate copies each FILE's data into a new file with the layout given (setstripe's
options; the directory's default if none), then has the MDT swap the two
files' layouts (MDS_SWAP_LAYOUTS): FILE keeps its FID, hard links, owner,
mode, extended attributes and times, and gets the new objects; the copy, with
the old objects, is removed. A process reading FILE meanwhile reads the same
bytes from the new objects from its next read on (the MDT calls its layout
lock back). The data version is checked before the swap, again by the MDT: a
file changed meanwhile is left as it was (EBUSY; run migrate again). The MDT
also refuses the swap while any client has FILE open for write (what a writer
has not written back yet belongs to the old objects): migrate then fails with
EBUSY and FILE keeps its layout and every byte its writers write; run it again
once they closed it. -n (do not wait for writers) is the only mode.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			la, err := parseLayoutArgs(args, map[string]string{"non-block": "n", "verbose": "v", "help": "h"})
			if err != nil {
				return lfsErrorf(cmd, "%v", err)
			}
			if la.bools["help"] {
				return cmd.Help()
			}
			if len(la.paths) == 0 {
				return lfsErrorf(cmd, "no file given")
			}
			if la.yaml != "" {
				y, err := loadYAMLTemplate(la.yaml)
				if err != nil {
					return lfsErrorf(cmd, "%v", err)
				}
				y.paths, y.bools = la.paths, la.bools
				la = y
			}
			var failed error
			for _, p := range la.paths {
				if err := migrate(p, la); err != nil {
					failed = lfsWarnf(cmd, "cannot migrate '%s': %v", p, err)
					continue
				}
				if la.bools["verbose"] {
					fmt.Fprintln(cmd.OutOrStdout(), p)
				}
			}
			return failed
		},
	}
}

// fileState is what migrate compares before the rename.
type fileState struct {
	dv    string
	size  int64
	mtime unix.Timespec
}

func stateOf(fd int, path string) (fileState, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fileState{}, err
	}
	dv, err := getxattr(path, client.XattrDataVersion)
	if err != nil {
		return fileState{}, fmt.Errorf("data version: %w", err)
	}
	return fileState{dv: string(dv), size: st.Size, mtime: st.Mtim}, nil
}

// migrate restripes path (see newLfsMigrateCmd): its data are copied into
// a new file with the layout wanted, then the two swap layouts on the MDT,
// and the copy, which has the old objects now, is unlinked.
func migrate(path string, la *layoutArgs) (err error) {
	src, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return errnoErr(err)
	}
	defer unix.Close(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return errnoErr(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("not a regular file")
	}
	before, err := stateOf(src, path)
	if err != nil {
		return err
	}
	dir, base := filepath.Split(path)
	if len(base) > 200 {
		base = base[:200]
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.lfs-migrate.%d.%d", base, os.Getpid(), time.Now().UnixNano()%1e6))
	if la.given() {
		def, _, err := dirDefault(filepath.Dir(path))
		if err != nil {
			return err
		}
		tmpl, err := la.template(firstRAID0(def))
		if err != nil {
			return err
		}
		val, err := tmpl.Marshal()
		if err != nil {
			return err
		}
		if err := createStriped(tmp, val, 0o600); err != nil {
			return err
		}
	} else {
		fd, err := unix.Open(tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return errnoErr(err)
		}
		unix.Close(fd)
	}
	// The copy goes in the end, with the old objects after the swap (or
	// with the new ones if something failed).
	defer unix.Unlink(tmp)
	dst, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return errnoErr(err)
	}
	if err := copyData(dst, src, st.Size); err != nil {
		unix.Close(dst)
		return err
	}
	if err := unix.Fsync(dst); err != nil {
		unix.Close(dst)
		return errnoErr(err)
	}
	// The copy's objects get the file's times (as Lustre's lfs migrate
	// does): the file keeps its own after the swap, and a stat takes the
	// newest of its times and its objects'.
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, tmp, []unix.Timespec{st.Atim, st.Mtim}, 0); err != nil {
		unix.Close(dst)
		return errnoErr(err)
	}
	if err := unix.Close(dst); err != nil {
		return errnoErr(err)
	}
	// The copy's lazy size goes to the file with its objects: wait until
	// the mount has recorded it (FUSE releases a file after close(2)
	// returns).
	waitLSOM(tmp, st.Size)
	after, err := stateOf(src, path)
	if err != nil {
		return err
	}
	if after != before {
		return fmt.Errorf("it changed during the migration (data version %s → %s, size %d → %d): %w; try again",
			before.dv, after.dv, before.size, after.size, unix.EBUSY)
	}
	tmpFID, err := getxattr(tmp, client.XattrFID)
	if err != nil {
		return fmt.Errorf("FID of the copy: %w", err)
	}
	// The MDT checks the data version again, under its locks, and refuses
	// while either file is open for write: a writer's pages not yet
	// written back belong to the old objects, which go with the copy.
	// Our own copy's open may still be ending (FUSE releases after
	// close(2) returns): a refusal while nothing changed is tried again
	// for a moment.
	for try := 0; ; try++ {
		err := unix.Setxattr(path, client.XattrSwapLayouts, []byte(string(tmpFID)+" "+before.dv), 0)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("swap layouts: %s", errnoText(err))
		}
		now, serr := stateOf(src, path)
		switch {
		case serr != nil:
			return serr
		case now != before:
			return fmt.Errorf("it changed during the migration: %w; try again", unix.EBUSY)
		case try == swapTries-1:
			return fmt.Errorf("it is open for write (or the MDT is still recovering from a restart): %w; try again once the writers closed it", unix.EBUSY)
		}
		time.Sleep(swapRetry)
	}
}

// swapTries and swapRetry bound how long migrate waits for a refused
// swap of an unchanged file: about a second.
const (
	swapTries = 20
	swapRetry = 50 * time.Millisecond
)

func errnoErr(err error) error { return errors.New(errnoText(err)) }

// copyData copies size bytes of src to dst, leaving holes where src reads
// as zeros.
func copyData(dst, src int, size int64) error {
	buf := make([]byte, 4<<20)
	var off int64
	for off < size {
		n, err := unix.Pread(src, buf, off)
		if err != nil {
			return fmt.Errorf("read: %s", errnoText(err))
		}
		if n == 0 {
			break
		}
		if !allZero(buf[:n]) {
			for w := 0; w < n; {
				m, err := unix.Pwrite(dst, buf[w:n], off+int64(w))
				if err != nil {
					return fmt.Errorf("write: %s", errnoText(err))
				}
				w += m
			}
		}
		off += int64(n)
	}
	if err := unix.Ftruncate(dst, off); err != nil {
		return fmt.Errorf("truncate: %s", errnoText(err))
	}
	return nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	return len(bytes.Trim(b, "\x00")) == 0
}

// waitLSOM waits (a few seconds at most) until the MDT has path's size
// from the close of its writer.
func waitLSOM(path string, size int64) {
	if size == 0 {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var a client.MDTAttr
		if err := getJSON(path, client.XattrLSOM, &a); err == nil && a.Size == uint64(size) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
