package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/layout"
)

// newBenchCmd is `nacre bench`: the workloads of deploy/bench's fio jobs
// and an mdtest-style metadata run, driven through the library client (no
// FUSE) or, with --path, through plain system calls on a directory (the
// FUSE mount, go-fuse's loopback, a local disk), so that one piece of code
// measures every side of a comparison.
func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench [MGSNID[:PORT]:/FSNAME]",
		Short: "Measure the library client (or, with --path, a directory) with fio-like and mdtest-like workloads",
		Long: `Runs one workload and prints one machine-readable line per figure, e.g.

  lib seqwrite jobs=4 bs=1048576 size=268435456 secs=2.41 MiB/s=425.3 IOPS=425.3
  lib mdtest.create jobs=1 files=2000 secs=1.20 ops/s=1666.7

Workloads (each job is a goroutine on its own file, NAME.JOB.0 in --dir, as
fio's numjobs with separate files):
  seqwrite   create (truncate), write --size bytes in --bs blocks, fsync; the
             time includes the fsync (fio --end_fsync=1), not the open
  seqread    read the files back in --bs blocks (files missing or shorter
             than --size are written first, untimed)
  randwrite  --bs writes at random aligned offsets of the first --size
             bytes for --runtime, then fsync
  randread   --bs reads at random offsets likewise
  mdtest     per job a directory DIR/mdtest.JOB: create --files empty files,
             stat them all, unlink them all; ops/s for each phase
  mkdir      only make --dir (with --stripe-count, as its default layout,
             which files made in it later through a mount inherit)

A library run mounts afresh, so its reads start with nothing cached on the
client.`,
		Args: cobra.MaximumNArgs(1),
		RunE: runBench,
	}
	f := cmd.Flags()
	f.String("workload", "", "seqwrite, seqread, randwrite, randread, mdtest or mkdir")
	f.Int("jobs", 1, "concurrent jobs, each on its own file (or directory, for mdtest)")
	f.String("size", "256M", "bytes per job file (K, M, G suffixes: powers of 1024)")
	f.String("bs", "1M", "block size of each read or write")
	f.Int("files", 1000, "files per job for mdtest")
	f.Duration("runtime", 10*time.Second, "duration of the random workloads")
	f.String("dir", "bench", "directory (under the root, or --path) holding the files")
	f.String("name", "seq", "file name prefix: files are NAME.JOB.0, as fio names them")
	f.Int("stripe-count", 0, "library: stripe new files (and --dir's default layout) over this many OSTs, 1 MiB stripes; -1 all; 0 the file system's default")
	f.Int("port", client.DefaultPort, "socklnd port of the file system's nodes")
	f.StringP("options", "o", "", "mount options, as nacre mount takes them (max_cached_mb=128,nid=...)")
	f.String("path", "", "measure this directory with system calls instead of the library (no SOURCE)")
	f.String("label", "", `first word of each output line ("lib", or "path" with --path)`)
	return readsConfig(cmd, "workload", "jobs", "size", "bs", "files", "runtime", "dir", "name", "stripe-count", "path", "label")
}

func runBench(cmd *cobra.Command, args []string) error {
	v, err := loadConfig(cmd, nil)
	if err != nil {
		return err
	}
	log, err := newLogger(v)
	if err != nil {
		return err
	}
	var o benchOpts
	o.workload = v.GetString("workload")
	o.jobs = v.GetInt("jobs")
	o.files = v.GetInt("files")
	o.runtime = v.GetDuration("runtime")
	o.dir = strings.Trim(v.GetString("dir"), "/")
	o.name = v.GetString("name")
	o.label = v.GetString("label")
	if o.size, err = parseBytes(v.GetString("size")); err != nil {
		return fmt.Errorf("--size: %w", err)
	}
	if o.bs, err = parseBytes(v.GetString("bs")); err != nil {
		return fmt.Errorf("--bs: %w", err)
	}
	switch {
	case o.jobs < 1:
		return fmt.Errorf("--jobs %d: want at least 1", o.jobs)
	case o.bs < 1 || o.size < o.bs:
		return fmt.Errorf("--bs %d, --size %d: want 0 < bs <= size", o.bs, o.size)
	case o.files < 1:
		return fmt.Errorf("--files %d: want at least 1", o.files)
	case o.dir == "" || o.name == "" || strings.Contains(o.name, "/"):
		return errors.New("--dir and --name must be set (--name without /)")
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var t benchTarget
	switch p := v.GetString("path"); {
	case p != "" && len(args) == 0:
		if o.label == "" {
			o.label = "path"
		}
		t = pathTarget(p)
	case p == "" && len(args) == 1:
		if o.label == "" {
			o.label = "lib"
		}
		cfg := client.DefaultConfig()
		cfg.Logger = log
		if err := cfg.ParseSource(args[0]); err != nil {
			return err
		}
		cfg.Port = v.GetInt("port")
		rest, err := cfg.ParseOptions(v.GetString("options"))
		if err != nil {
			return err
		}
		if len(rest) > 0 {
			log.Info("bench: mount options of the FUSE layer ignored", "options", rest)
		}
		fsys, err := client.Mount(ctx, cfg)
		if err != nil {
			return err
		}
		lt := &libTarget{fs: fsys, dirs: map[string]client.FID{"": fsys.Root()}}
		if c := v.GetInt("stripe-count"); c != 0 {
			lay := layout.Plain(layout.RAID0{StripeCount: int32(c), StripeSize: 1 << 20, StripeOffset: layout.AnyOffset})
			lt.opts = &client.CreateOptions{Layout: &lay}
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := fsys.Close(cctx); err != nil {
				log.Warn("bench: unmount", "err", err)
			}
		}()
		t = lt
	default:
		return errors.New("want a mount source (the library) or --path DIR, not both")
	}
	if err := t.MkdirAll(ctx, o.dir); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	switch o.workload {
	case "mkdir":
		return nil
	case "seqwrite", "seqread", "randwrite", "randread":
		r, err := benchData(ctx, t, o)
		if err != nil {
			return err
		}
		secs := r.elapsed.Seconds()
		fmt.Fprintf(out, "%s %s jobs=%d bs=%d size=%d secs=%.3f MiB/s=%.1f IOPS=%.1f\n", o.label, o.workload, o.jobs, o.bs, o.size,
			secs, float64(r.bytes)/(1<<20)/secs, float64(r.ops)/secs)
		return nil
	case "mdtest":
		return benchMeta(ctx, t, o, func(phase string, d time.Duration) {
			fmt.Fprintf(out, "%s mdtest.%s jobs=%d files=%d secs=%.3f ops/s=%.1f\n", o.label, phase, o.jobs, o.files,
				d.Seconds(), float64(o.jobs*o.files)/d.Seconds())
		})
	}
	return fmt.Errorf("--workload %q: want seqwrite, seqread, randwrite, randread, mdtest or mkdir", o.workload)
}

// benchOpts is one run's workload.
type benchOpts struct {
	workload, dir, name, label string
	jobs, files                int
	size, bs                   int64
	runtime                    time.Duration
}

// file returns job j's file, as fio names it (JOBNAME.JOBNUM.FILENUM).
func (o benchOpts) file(j int) string { return fmt.Sprintf("%s/%s.%d.0", o.dir, o.name, j) }

// parseBytes reads a byte count with an optional K, M, G or T suffix
// (powers of 1024, as fio's).
func parseBytes(s string) (int64, error) {
	t := strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B")
	t = strings.TrimSuffix(t, "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		if i := strings.IndexByte("KMGT", t[n-1]); i >= 0 {
			mult, t = int64(1)<<(10*(i+1)), t[:n-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q: want a byte count such as 4096, 4K or 256M", s)
	}
	return n * mult, nil
}

// benchTarget is what a workload runs on: the library by FID, or a
// directory by system calls. Paths are slash-separated and relative to
// the target's root. Safe for concurrent use.
type benchTarget interface {
	// MkdirAll makes dir and its parents, as needed.
	MkdirAll(ctx context.Context, dir string) error
	// Create opens p for reading and writing, made if missing: truncated,
	// or, with excl, failing if it exists.
	Create(ctx context.Context, p string, excl bool) (benchFile, error)
	// Open opens p for reading and writing and returns its size.
	Open(ctx context.Context, p string) (benchFile, int64, error)
	Stat(ctx context.Context, p string) error
	Unlink(ctx context.Context, p string) error
	Rmdir(ctx context.Context, dir string) error
}

// benchFile is an open file of a benchTarget; one job uses it at a time.
type benchFile interface {
	WriteAt(ctx context.Context, p []byte, off int64) error
	// ReadAt reads len(p) bytes at off, fewer only at the end of the file.
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	Sync(ctx context.Context) error
	Close(ctx context.Context) error
}

// dataResult is what a data workload moved and how long it took.
type dataResult struct {
	bytes, ops int64
	elapsed    time.Duration
}

// benchData runs a data workload: every job opens its file first; the
// clock runs from the moment all start until the last is done (with its
// fsync, for writes).
func benchData(ctx context.Context, t benchTarget, o benchOpts) (dataResult, error) {
	write := o.workload == "seqwrite" || o.workload == "randwrite"
	random := strings.HasPrefix(o.workload, "rand")
	files := make([]benchFile, o.jobs)
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close(ctx)
			}
		}
	}()
	for j := range files {
		var err error
		if o.workload == "seqwrite" {
			files[j], err = t.Create(ctx, o.file(j), false)
		} else {
			files[j], err = openLaidOut(ctx, t, o.file(j), o.size, o.bs)
		}
		if err != nil {
			return dataResult{}, err
		}
	}
	type jobResult struct {
		bytes, ops int64
		end        time.Time
		err        error
	}
	res := make([]jobResult, o.jobs)
	begin := make(chan struct{})
	var wg sync.WaitGroup
	for j, f := range files {
		wg.Go(func() {
			r := &res[j]
			<-begin
			buf := make([]byte, o.bs)
			fillRandom(buf, uint64(j))
			rng := rand.New(rand.NewPCG(uint64(j), 42))
			blocks := o.size / o.bs
			deadline := time.Now().Add(o.runtime)
			for i := int64(0); ; i++ {
				if r.err = ctx.Err(); r.err != nil {
					return
				}
				off := i * o.bs
				if random {
					if i%64 == 0 && time.Now().After(deadline) {
						break
					}
					off = rng.Int64N(blocks) * o.bs
				} else if off >= o.size {
					break
				}
				n := len(buf)
				if !random && o.size-off < int64(n) {
					n = int(o.size - off)
				}
				if write {
					r.err = f.WriteAt(ctx, buf[:n], off)
				} else {
					n, r.err = f.ReadAt(ctx, buf[:n], off)
					if r.err == nil && n == 0 {
						r.err = fmt.Errorf("read at %d: unexpected end of file", off)
					}
				}
				if r.err != nil {
					return
				}
				r.bytes += int64(n)
				r.ops++
			}
			if write {
				r.err = f.Sync(ctx)
			}
			r.end = time.Now()
		})
	}
	start := time.Now()
	close(begin)
	wg.Wait()
	var out dataResult
	for j, r := range res {
		if r.err != nil {
			return out, fmt.Errorf("%s %s: %w", o.workload, o.file(j), r.err)
		}
		out.bytes += r.bytes
		out.ops += r.ops
		out.elapsed = max(out.elapsed, r.end.Sub(start))
	}
	return out, nil
}

// openLaidOut opens p, first writing it whole (untimed) when it is missing
// or shorter than size, as fio lays out the files of a read job.
func openLaidOut(ctx context.Context, t benchTarget, p string, size, bs int64) (benchFile, error) {
	f, have, err := t.Open(ctx, p)
	if err == nil && have >= size {
		return f, nil
	}
	if err == nil {
		f.Close(ctx)
	} else if !errors.Is(err, fs.ErrNotExist) && client.Errno(err) != syscall.ENOENT {
		return nil, err
	}
	if f, err = t.Create(ctx, p, false); err != nil {
		return nil, err
	}
	buf := make([]byte, bs)
	fillRandom(buf, 7)
	for off := int64(0); off < size && err == nil; off += bs {
		err = f.WriteAt(ctx, buf[:min(bs, size-off)], off)
	}
	if err == nil {
		err = f.Sync(ctx)
	}
	if cerr := f.Close(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("lay out %s: %w", p, err)
	}
	f, _, err = t.Open(ctx, p)
	return f, err
}

func fillRandom(p []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for i := 0; i+8 <= len(p); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			p[i+k] = byte(v >> (8 * k))
		}
	}
}

// benchMeta is the mdtest-style run: in a directory per job, create
// o.files empty files, then stat them all, then unlink them all, every
// job at once in each phase; report hears each phase's time.
func benchMeta(ctx context.Context, t benchTarget, o benchOpts, report func(phase string, d time.Duration)) error {
	dirs := make([]string, o.jobs)
	for j := range dirs {
		dirs[j] = fmt.Sprintf("%s/mdtest.%d", o.dir, j)
		if err := t.MkdirAll(ctx, dirs[j]); err != nil {
			return err
		}
	}
	phase := func(name string, op func(p string) error) error {
		errs := make([]error, o.jobs)
		var wg sync.WaitGroup
		start := time.Now()
		for j := range o.jobs {
			wg.Go(func() {
				for i := range o.files {
					if err := op(fmt.Sprintf("%s/f.%d", dirs[j], i)); err != nil {
						errs[j] = fmt.Errorf("mdtest %s: %w", name, err)
						return
					}
				}
			})
		}
		wg.Wait()
		d := time.Since(start)
		if err := errors.Join(errs...); err != nil {
			return err
		}
		report(name, d)
		return nil
	}
	err := phase("create", func(p string) error {
		f, err := t.Create(ctx, p, true)
		if err != nil {
			return err
		}
		return f.Close(ctx)
	})
	if err == nil {
		err = phase("stat", func(p string) error { return t.Stat(ctx, p) })
	}
	if err == nil {
		err = phase("unlink", func(p string) error { return t.Unlink(ctx, p) })
	}
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := t.Rmdir(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// pathTarget is a directory reached by system calls.
type pathTarget string

func (r pathTarget) join(p string) string { return filepath.Join(string(r), filepath.FromSlash(p)) }

func (r pathTarget) MkdirAll(_ context.Context, dir string) error {
	return os.MkdirAll(r.join(dir), 0o755)
}

func (r pathTarget) Create(_ context.Context, p string, excl bool) (benchFile, error) {
	flags := os.O_RDWR | os.O_CREATE | os.O_TRUNC
	if excl {
		flags = os.O_RDWR | os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(r.join(p), flags, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (r pathTarget) Open(_ context.Context, p string) (benchFile, int64, error) {
	f, err := os.OpenFile(r.join(p), os.O_RDWR, 0)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return osFile{f}, st.Size(), nil
}

func (r pathTarget) Stat(_ context.Context, p string) error {
	_, err := os.Stat(r.join(p))
	return err
}

func (r pathTarget) Unlink(_ context.Context, p string) error { return syscall.Unlink(r.join(p)) }

func (r pathTarget) Rmdir(_ context.Context, dir string) error { return syscall.Rmdir(r.join(dir)) }

type osFile struct{ f *os.File }

func (f osFile) WriteAt(_ context.Context, p []byte, off int64) error {
	_, err := f.f.WriteAt(p, off)
	return err
}

func (f osFile) ReadAt(_ context.Context, p []byte, off int64) (int, error) {
	n, err := f.f.ReadAt(p, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

func (f osFile) Sync(context.Context) error  { return f.f.Sync() }
func (f osFile) Close(context.Context) error { return f.f.Close() }

// libTarget is the library client, paths resolved to FIDs through the
// directories MkdirAll made or found.
type libTarget struct {
	fs   *client.FS
	opts *client.CreateOptions // nil: the directory's default layout

	mu   sync.Mutex            // guards dirs
	dirs map[string]client.FID // "" is the root
}

func (t *libTarget) MkdirAll(ctx context.Context, dir string) error {
	cred := client.Root()
	cur := ""
	for _, name := range strings.Split(dir, "/") {
		parent, err := t.dir(cur)
		if err != nil {
			return err
		}
		cur = path.Join(cur, name)
		if _, err := t.dir(cur); err == nil {
			continue
		}
		a, err := t.fs.Lookup(ctx, cred, parent, name)
		if client.Errno(err) == syscall.ENOENT {
			a, err = t.fs.Mkdir(ctx, cred, parent, name, 0o755)
			if client.Errno(err) == syscall.EEXIST {
				a, err = t.fs.Lookup(ctx, cred, parent, name)
			}
		}
		if err != nil {
			return fmt.Errorf("mkdir %s: %w", cur, err)
		}
		if cur == dir && t.opts != nil {
			// The directory's default layout, so that files made in it
			// through a mount are striped alike.
			if _, err := t.fs.SetLayout(ctx, cred, a.FID, *t.opts.Layout); err != nil {
				return fmt.Errorf("set the default layout of %s: %w", cur, err)
			}
		}
		t.mu.Lock()
		t.dirs[cur] = a.FID
		t.mu.Unlock()
	}
	return nil
}

func (t *libTarget) dir(p string) (client.FID, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.dirs[p]
	if !ok {
		return client.FID{}, fmt.Errorf("bench: directory %q not made: %w", p, syscall.ENOENT)
	}
	return f, nil
}

// split returns p's directory's FID and p's name.
func (t *libTarget) split(p string) (client.FID, string, error) {
	d, name := path.Split(p)
	f, err := t.dir(strings.TrimSuffix(d, "/"))
	return f, name, err
}

func (t *libTarget) Create(ctx context.Context, p string, excl bool) (benchFile, error) {
	parent, name, err := t.split(p)
	if err != nil {
		return nil, err
	}
	flags := uint64(syscall.O_RDWR | syscall.O_CREAT | syscall.O_TRUNC)
	if excl {
		flags = syscall.O_RDWR | syscall.O_CREAT | syscall.O_EXCL
	}
	f, _, err := t.fs.Create(ctx, client.Root(), parent, name, flags, 0o644, t.opts)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", p, err)
	}
	return libFile{f}, nil
}

func (t *libTarget) Open(ctx context.Context, p string) (benchFile, int64, error) {
	parent, name, err := t.split(p)
	if err != nil {
		return nil, 0, err
	}
	a, err := t.fs.Lookup(ctx, client.Root(), parent, name)
	if err != nil {
		return nil, 0, fmt.Errorf("open %s: %w", p, err)
	}
	f, a, err := t.fs.Open(ctx, client.Root(), a.FID, syscall.O_RDWR)
	if err != nil {
		return nil, 0, fmt.Errorf("open %s: %w", p, err)
	}
	return libFile{f}, int64(a.Size), nil
}

func (t *libTarget) Stat(ctx context.Context, p string) error {
	parent, name, err := t.split(p)
	if err != nil {
		return err
	}
	_, err = t.fs.Lookup(ctx, client.Root(), parent, name)
	return err
}

func (t *libTarget) Unlink(ctx context.Context, p string) error {
	parent, name, err := t.split(p)
	if err != nil {
		return err
	}
	return t.fs.Unlink(ctx, client.Root(), parent, name)
}

func (t *libTarget) Rmdir(ctx context.Context, dir string) error {
	parent, name, err := t.split(dir)
	if err != nil {
		return err
	}
	if err := t.fs.Rmdir(ctx, client.Root(), parent, name); err != nil {
		return err
	}
	t.mu.Lock()
	delete(t.dirs, dir)
	t.mu.Unlock()
	return nil
}

type libFile struct{ f *client.File }

func (f libFile) WriteAt(ctx context.Context, p []byte, off int64) error {
	_, _, err := f.f.WriteAt(ctx, p, off)
	return err
}

func (f libFile) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := f.f.ReadAt(ctx, p, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

func (f libFile) Sync(ctx context.Context) error  { return f.f.Sync(ctx) }
func (f libFile) Close(ctx context.Context) error { return f.f.Close(ctx) }
