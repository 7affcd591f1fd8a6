package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/layout"
)

// findTest is one test of lfs find, negated by a "!" before it.
type findTest struct {
	neg   bool
	kind  string // name, type, size, mtime, uid, gid, stripe-count, ost, pool
	pat   string
	typ   byte
	sign  int // +1: more than, -1: less than, 0: exactly
	n     int64
	units int64
	osts  map[uint32]bool
}

// finder is an lfs find run.
type finder struct {
	tests    []findTest
	maxDepth int // -1: no limit
	minDepth int
	lazy     bool
	print0   bool
	now      time.Time
	w        io.Writer
	warn     func(format string, args ...any) error
	failed   error
}

// findEntry is what find knows of a file without asking an OST: its name
// and type from the directory, and the MDT's attributes and layout.
type findEntry struct {
	path  string
	name  string
	mode  uint32 // S_IFMT bits
	attr  *client.MDTAttr
	lay   *layout.Layout
	depth int
}

// findOptions are lfs find's options (either "-name" or "--name") and
// their short letters; the bool ones take no value.
var findOptions = map[string]string{
	"name": "n", "type": "t", "size": "s", "mtime": "M", "uid": "u", "gid": "g", "user": "", "group": "",
	"stripe-count": "c", "stripe_count": "c", "ost": "O", "obd": "O", "pool": "", "maxdepth": "D", "mindepth": "",
}

var findBools = map[string]string{"lazy": "l", "print0": "0", "print": "P"}

func newLfsFindCmd() *cobra.Command {
	return &cobra.Command{
		Use: "find DIR|FILE... [[!] -name PATTERN] [[!] -type [fdlpsbc]] [[!] -size [+-]N[kMGTPE]] [[!] -mtime [+-]DAYS]\n" +
			"  [[!] -uid N] [[!] -gid N] [[!] -stripe-count [+-]N] [[!] -ost IDX[,IDX]] [[!] -pool NAME]\n" +
			"  [-maxdepth N] [-mindepth N] [-lazy] [-print0]",
		Short: "Find files by name, type, size, time, owner and layout (from the MDT where it can)",
		Long: `find walks the directories as Lustre's lfs find does and prints the files every
test accepts (a test after "!" must fail). Options take one dash or two.

Everything but the size is decided from what the MDT has — each directory's
entries come with their attributes and layouts in pages (the lustre.readdir.*
attribute) — so no OST is asked. A file's size on the MDT is its lazy size
(LSOM), recorded by the last close that wrote: with -lazy find uses it;
without, the size of a file every other test accepted is read from its OSTs
(stat). -stripe-count matches a composite file if any component's count does;
-ost a file with an object on any OST listed; -pool any component's pool.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			fd := &finder{maxDepth: -1, now: time.Now(), w: cmd.OutOrStdout()}
			fd.warn = func(format string, a ...any) error { return lfsWarnf(cmd, format, a...) }
			paths, err := fd.parse(args)
			if err != nil {
				return lfsErrorf(cmd, "%v", err)
			}
			if paths == nil {
				return cmd.Help()
			}
			for _, p := range paths {
				fd.start(p)
			}
			return fd.failed
		},
	}
}

// parse reads the tests and options, and returns the paths (nil for
// --help).
func (fd *finder) parse(args []string) ([]string, error) {
	var paths []string
	neg := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "!" || a == "--not" {
			neg = !neg
			continue
		}
		if a == "--help" || a == "-h" {
			return nil, nil
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if neg {
				return nil, fmt.Errorf("\"!\" before %q: it goes before a test", a)
			}
			paths = append(paths, a)
			continue
		}
		name, v, hasV := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if len(a) == 2 { // a short letter
			for l, s := range findOptions {
				if s == name {
					name = l
				}
			}
			for l, s := range findBools {
				if s == name {
					name = l
				}
			}
		}
		if _, ok := findBools[name]; ok {
			switch name {
			case "lazy":
				fd.lazy = true
			case "print0":
				fd.print0 = true
			}
			continue
		}
		if _, ok := findOptions[name]; !ok {
			return nil, fmt.Errorf("unknown option %q", a)
		}
		if !hasV {
			if i+1 >= len(args) {
				return nil, fmt.Errorf("option %s needs a value", a)
			}
			i++
			v = args[i]
		}
		if name == "maxdepth" || name == "mindepth" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("bad %s %q", name, v)
			}
			if name == "maxdepth" {
				fd.maxDepth = n
			} else {
				fd.minDepth = n
			}
			continue
		}
		t, err := parseFindTest(name, v)
		if err != nil {
			return nil, err
		}
		t.neg, neg = neg, false
		fd.tests = append(fd.tests, t)
	}
	if neg {
		return nil, errors.New("\"!\" at the end: it goes before a test")
	}
	if len(paths) == 0 {
		return nil, errors.New("no directory or file given")
	}
	return paths, nil
}

// signed splits [+-]N.
func signed(v string) (int, string) {
	switch {
	case strings.HasPrefix(v, "+"):
		return 1, v[1:]
	case strings.HasPrefix(v, "-"):
		return -1, v[1:]
	}
	return 0, v
}

func parseFindTest(name, v string) (findTest, error) {
	t := findTest{kind: name}
	bad := func() (findTest, error) { return findTest{}, fmt.Errorf("bad -%s %q", name, v) }
	switch name {
	case "name":
		if _, err := filepath.Match(v, ""); err != nil {
			return bad()
		}
		t.pat = v
	case "type":
		if len(v) != 1 || !strings.Contains("fdlpsbc", v) {
			return bad()
		}
		t.typ = v[0]
	case "size":
		sign, s := signed(v)
		t.sign, t.units = sign, 1
		if n := len(s); n > 0 {
			if i := strings.IndexByte("kmgtpe", lower(s[n-1])); i >= 0 {
				t.units = 1 << (10 * (i + 1))
				s = s[:n-1]
			}
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 || n > math.MaxInt64/t.units {
			return bad() // (past any size: the limit would wrap around)
		}
		t.n = n
	case "mtime", "stripe-count", "stripe_count":
		sign, s := signed(v)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return bad()
		}
		t.sign, t.n = sign, n
		if name == "stripe_count" {
			t.kind = "stripe-count"
		}
	case "uid", "gid", "user", "group":
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			var id string
			switch name {
			case "uid", "user":
				u, lerr := user.Lookup(v)
				if lerr != nil {
					return bad()
				}
				id = u.Uid
			default:
				g, lerr := user.LookupGroup(v)
				if lerr != nil {
					return bad()
				}
				id = g.Gid
			}
			if n, err = strconv.ParseUint(id, 10, 32); err != nil {
				return bad()
			}
		}
		t.n = int64(n)
		t.kind = map[string]string{"user": "uid", "group": "gid"}[name]
		if t.kind == "" {
			t.kind = name
		}
	case "ost", "obd":
		t.kind = "ost"
		t.osts = map[uint32]bool{}
		for _, s := range strings.Split(v, ",") {
			if i := strings.Index(s, "OST"); i >= 0 {
				n, err := strconv.ParseUint(strings.TrimSuffix(s[i+3:], "_UUID"), 16, 32)
				if err != nil {
					return bad()
				}
				t.osts[uint32(n)] = true
				continue
			}
			n, err := strconv.ParseUint(s, 0, 32)
			if err != nil {
				return bad()
			}
			t.osts[uint32(n)] = true
		}
	case "pool":
		if _, p, ok := strings.Cut(v, "."); ok {
			v = p
		}
		t.pat = v
	}
	return t, nil
}

// cmpSigned compares x with n as [+-]N asks.
func cmpSigned(x int64, sign int, n int64) bool {
	switch sign {
	case 1:
		return x > n
	case -1:
		return x < n
	}
	return x == n
}

// typeLetter is find's letter for a mode's type.
func typeLetter(mode uint32) byte {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return 'f'
	case unix.S_IFDIR:
		return 'd'
	case unix.S_IFLNK:
		return 'l'
	case unix.S_IFIFO:
		return 'p'
	case unix.S_IFSOCK:
		return 's'
	case unix.S_IFBLK:
		return 'b'
	case unix.S_IFCHR:
		return 'c'
	}
	return '?'
}

// dtMode is the S_IFMT bits of a DT_* type.
func dtMode(dt uint8) uint32 { return uint32(dt) << 12 }

// mdtTest says what a test that needs no OST says of e; ok false for the
// size test of a regular file that is not -lazy.
func (fd *finder) mdtTest(t *findTest, e *findEntry) (match, ok bool) {
	lay := e.lay
	switch t.kind {
	case "name":
		m, _ := filepath.Match(t.pat, e.name)
		return m, true
	case "type":
		return typeLetter(e.mode) == t.typ, true
	case "uid":
		return e.attr != nil && int64(e.attr.UID) == t.n, true
	case "gid":
		return e.attr != nil && int64(e.attr.GID) == t.n, true
	case "mtime":
		if e.attr == nil {
			return false, true
		}
		days := int64(fd.now.Sub(time.Unix(0, e.attr.Mtime)) / (24 * time.Hour))
		return cmpSigned(days, t.sign, t.n), true
	case "stripe-count":
		if lay == nil {
			return false, true
		}
		for _, c := range lay.Components {
			if cmpSigned(int64(c.StripeCount), t.sign, t.n) {
				return true, true
			}
		}
		return false, true
	case "ost":
		if lay == nil {
			return false, true
		}
		for _, c := range lay.Components {
			for _, o := range c.Objects {
				if t.osts[o.OSTIndex] {
					return true, true
				}
			}
		}
		return false, true
	case "pool":
		if lay == nil {
			return false, true
		}
		for _, c := range lay.Components {
			if c.Pool == t.pat {
				return true, true
			}
		}
		return false, true
	case "size":
		if e.attr == nil {
			return false, true
		}
		if e.mode&unix.S_IFMT == unix.S_IFREG && !fd.lazy {
			return false, false
		}
		return sizeMatch(int64(e.attr.Size), t), true
	}
	return false, true
}

// sizeMatch is Lustre's size test: N in units matches sizes in
// ((N-1)*units, N*units], +N larger, -N at most (N-1)*units.
func sizeMatch(size int64, t *findTest) bool {
	limit := t.n * t.units
	switch t.sign {
	case 1:
		return size > limit
	case -1:
		return size+t.units <= limit
	}
	return size <= limit && size+t.units > limit
}

// matches runs the tests on e: the MDT's first, then (only if they all
// passed) the sizes that need the OSTs.
func (fd *finder) matches(e *findEntry) bool {
	var later []*findTest
	for i := range fd.tests {
		t := &fd.tests[i]
		m, ok := fd.mdtTest(t, e)
		if !ok {
			later = append(later, t)
			continue
		}
		if m == t.neg {
			return false
		}
	}
	if len(later) == 0 {
		return true
	}
	var st unix.Stat_t
	if err := unix.Lstat(e.path, &st); err != nil {
		fd.failed = fd.warn("%s: %s", e.path, errnoText(err))
		return false
	}
	for _, t := range later {
		if sizeMatch(st.Size, t) == t.neg {
			return false
		}
	}
	return true
}

func (fd *finder) emit(e *findEntry) {
	if e.depth < fd.minDepth || !fd.matches(e) {
		return
	}
	end := "\n"
	if fd.print0 {
		end = "\x00"
	}
	fmt.Fprint(fd.w, e.path+end)
}

// start evaluates a path given on the command line and walks it.
func (fd *finder) start(path string) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		fd.failed = fd.warn("%s: %s", path, errnoText(err))
		return
	}
	e := &findEntry{path: path, name: filepath.Base(path), mode: st.Mode & unix.S_IFMT}
	var a client.MDTAttr
	if err := getJSON(path, client.XattrLSOM, &a); err == nil {
		e.attr = &a
	} else {
		// Not on a Nacre mount: what stat says.
		e.attr = &client.MDTAttr{Mode: st.Mode, UID: st.Uid, GID: st.Gid, Nlink: uint32(st.Nlink), Size: uint64(st.Size),
			Blocks: uint64(st.Blocks), Mtime: st.Mtim.Nano()}
	}
	if e.mode == unix.S_IFREG || e.mode == unix.S_IFDIR {
		if l, err := layoutOf(path, false); err == nil {
			e.lay = l
		}
	}
	fd.emit(e)
	if e.mode == unix.S_IFDIR {
		fd.walk(path, 1)
	}
}

// walk evaluates the entries of dir (at depth) page by page, from the
// MDT, going down into each directory among them after evaluating it.
func (fd *finder) walk(dir string, depth int) {
	if fd.maxDepth >= 0 && depth > fd.maxDepth {
		return
	}
	for cookie := uint64(0); cookie != client.DirEnd; {
		var page client.DirPage
		if err := getJSON(dir, client.XattrReaddirPrefix+strconv.FormatUint(cookie, 16), &page); err != nil {
			fd.failed = fd.warn("%s: %s", dir, errnoText(err))
			return
		}
		for _, pe := range page.Entries {
			e := &findEntry{path: filepath.Join(dir, string(pe.Name)), name: string(pe.Name), mode: dtMode(pe.Type), attr: pe.Attr, depth: depth}
			if pe.Attr != nil {
				e.mode = pe.Attr.Mode & unix.S_IFMT
			}
			if len(pe.Layout) > 0 {
				if l, err := layout.Unmarshal(pe.Layout); err == nil {
					e.lay = &l
				}
			}
			fd.emit(e)
			if e.mode == unix.S_IFDIR {
				fd.walk(e.path, depth+1)
			}
		}
		if page.Next <= cookie && page.Next != client.DirEnd {
			fd.failed = fd.warn("%s: the directory's pages go back (cookie %#x after %#x)", dir, page.Next, cookie)
			return
		}
		cookie = page.Next
	}
}
