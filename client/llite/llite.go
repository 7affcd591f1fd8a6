package llite

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/fid"
)

// Options are the FUSE layer's mount options (the library's are in
// client.Config).
type Options struct {
	// FSName is the mount's source as /proc/mounts shows it (the mount
	// source, "10.0.0.1@tcp:/nacre"); the type shows as fuse.nacre.
	FSName string
	// AllowOther lets every user use the mount (FUSE's allow_other; the
	// MDT checks their permissions). Mounts as root normally want it.
	AllowOther bool
	// Debug logs every FUSE request (go-fuse's debug output, to stderr).
	Debug bool
	// Kernel are mount options for the kernel: nosuid, nodev, noexec,
	// default_permissions, sync, dirsync ("ro" follows client.Config).
	Kernel []string
	// Logger receives the mount's logs; nil means slog.Default().
	Logger *slog.Logger
}

// ParseOptions takes the mount options client.Config.ParseOptions left
// for the FUSE layer: allow_other, debug, the kernel's (see
// Options.Kernel), and mount(8)'s own (defaults, noauto, _netdev, x-*,
// atime flags...), which it ignores. Anything else is an error.
func ParseOptions(opts []string) (Options, error) {
	var o Options
	for _, s := range opts {
		k, _, _ := strings.Cut(s, "=")
		switch {
		case s == "allow_other":
			o.AllowOther = true
		case s == "debug":
			o.Debug = true
		case s == "nosuid" || s == "suid" || s == "nodev" || s == "dev" || s == "noexec" || s == "exec" ||
			s == "default_permissions" || s == "sync" || s == "dirsync":
			o.Kernel = append(o.Kernel, s)
		case s == "defaults" || s == "auto" || s == "noauto" || s == "_netdev" || s == "nofail" || s == "user" ||
			s == "nouser" || s == "users" || s == "owner" || s == "group" || s == "async" || s == "atime" ||
			s == "noatime" || s == "relatime" || s == "norelatime" || s == "strictatime" || s == "nodiratime" ||
			s == "diratime" || s == "lazytime" || s == "nolazytime" || strings.HasPrefix(s, "x-") || k == "comment":
		default:
			return Options{}, fmt.Errorf("mount option %q: unknown", s)
		}
	}
	return o, nil
}

// Server is a mounted file system: the kernel's mount, the FUSE server
// answering it, and the library FS under it. Unmount or an external
// umount ends it; Wait waits for that.
type Server struct {
	dir  string
	fs   *client.FS
	srv  *fuse.Server
	m    *mount
	log  *slog.Logger
	done chan struct{} // closed when serving ended and the FS closed
	err  error         // of FS.Close, set before done closes
}

// Mount mounts the file system cfg names on dir: it mounts the library
// (client.Mount, with cfg.Notify set to the mount's notifier: the
// caller's is replaced), then the kernel's FUSE mount, and serves it
// until it is unmounted. It returns once the kernel has the mount: the
// file system is usable then. ctx bounds the library's mount.
func Mount(ctx context.Context, dir string, cfg client.Config, opts Options) (_ *Server, err error) {
	lg := opts.Logger
	if lg == nil {
		lg = slog.Default()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("llite: mount point %s: %w", dir, err)
	}
	if st, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("llite: mount point: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("llite: mount point %s: %w", abs, syscall.ENOTDIR)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("llite: no FUSE device (modprobe fuse?): %w", err)
	}
	fsName := opts.FSName
	if fsName == "" {
		fsName = cfg.FSName
	}
	// As mount.lustre refuses what mtab says is mounted: a second mount
	// stacked on the first would hide it, and one umount would leave it.
	if mountedOn(abs, fsName) {
		return nil, fmt.Errorf("llite: %s is already mounted on %s: %w", fsName, abs, syscall.EBUSY)
	}
	n := newNotifier(lg)
	defer func() {
		if err != nil {
			n.stop()
		}
	}()
	cfg.Notify = n
	fsys, err := client.Mount(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			fsys.Close(cctx)
		}
	}()
	m := newMount(fsys, n, lg)
	root := &node{m: m, fid: fsys.Root()}
	kopts := append([]string(nil), opts.Kernel...)
	if cfg.ReadOnly {
		kopts = append(kopts, "ro")
	}
	mo := fuse.MountOptions{
		AllowOther:   opts.AllowOther,
		Options:      kopts,
		FsName:       fsName,
		Name:         "nacre",
		MaxWrite:     1 << 20,
		MaxReadAhead: 1 << 20,
		// Readahead and async direct I/O in flight per mount.
		MaxBackground: 64,
		// Without it the kernel takes locks for this client alone: what
		// localflock asks for, and what a noflock mount must refuse
		// (ENOSYS, the library's answer) rather than grant against other
		// clients' locks.
		EnableLocks: !cfg.LocalFlock,
		// The kernel must not drop pages on its own when it sees mtime
		// change: invalidation follows the library's locks (see doc.go).
		ExplicitDataCacheControl: true,
		// Reads are answered from the library's memory, never from a file
		// descriptor: go-fuse would otherwise try a splice for each and
		// fall back (a 1 MiB read does not fit the largest pipe: a log
		// line every time).
		DisableSplice: true,
		// O_APPEND files use direct I/O; let them be mapped too. The
		// umask is the MDT's to apply (see rawFS.Create).
		ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP | fuse.CAP_DONT_MASK,
		// Root mounts with mount(2) (umount(8) ends it); others go through
		// fusermount3.
		DirectMount: os.Geteuid() == 0,
		Debug:       opts.Debug,
	}
	if opts.Debug {
		mo.Logger = log.New(os.Stderr, "fuse: ", log.Lmicroseconds)
	}
	fo := &fs.Options{
		MountOptions:    mo,
		NullPermissions: true,
		ExternalNodeID:  true,
		RootStableAttr:  &fs.StableAttr{Ino: inoOf(fsys.Root()), Gen: uint64(fsys.Root().Ver)},
	}
	raw := &rawFS{RawFileSystem: fs.NewNodeFS(root, fo), m: m}
	srv, err := fuse.NewServer(raw, abs, &fo.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("llite: mount %s on %s: %w", fsName, abs, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		srv.Unmount()
		return nil, fmt.Errorf("llite: mount %s on %s: %w", fsName, abs, err)
	}
	if err := setKernelReadAhead(abs, kernelReadAheadKB(cfg.Data.MaxReadAheadMB)); err != nil {
		lg.Info("kernel readahead window left at its default", "dir", abs, "err", err)
	}
	n.start(srv, root.EmbeddedInode(), fsys.Root())
	s := &Server{dir: abs, fs: fsys, srv: srv, m: m, log: lg, done: make(chan struct{})}
	go s.run()
	lg.Info("mounted", "dir", abs, "source", fsName)
	return s, nil
}

// mountedOn says whether the file system source (a Nacre mount's
// source) is mounted on dir.
func mountedOn(dir, source string) bool {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real // as the kernel shows it
	}
	ms, _ := Mounts() // none listed: the mount itself will tell
	for _, m := range ms {
		if m.Dir == dir && m.Source == source {
			return true
		}
	}
	return false
}

// run waits for the kernel to be done with the mount (umount, fusermount
// -u, Unmount, or the last file closed after a lazy umount), then
// unmounts the library. A library that cannot reach its servers gives up
// after a bounded time: an unmount never hangs.
func (s *Server) run() {
	defer close(s.done)
	s.srv.Wait()
	s.m.n.stop()
	s.m.saStop()
	// Work ahead whose RPC went to a server that just died is held by
	// LNet until its send times out, cancelled or not: wait for it only a
	// moment, then close the library, whose LNet ends it.
	ahead := make(chan struct{})
	go func() { s.m.saWG.Wait(); close(ahead) }()
	select {
	case <-ahead:
	case <-time.After(time.Second):
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	closed := make(chan error, 1)
	go func() {
		err := s.fs.Close(ctx)
		<-ahead // (ended by the library's LNet going)
		closed <- err
	}()
	select {
	case s.err = <-closed:
	case <-time.After(35 * time.Second):
		s.err = errors.New("llite: the library did not close within 35s")
	}
	if s.err != nil {
		s.log.Warn("unmount", "dir", s.dir, "err", s.err)
	} else {
		s.log.Info("unmounted", "dir", s.dir)
	}
}

// FS returns the library file system under the mount.
func (s *Server) FS() *client.FS { return s.fs }

// Dir returns the mount point (absolute).
func (s *Server) Dir() string { return s.dir }

// Done is closed once the mount is gone and the library closed.
func (s *Server) Done() <-chan struct{} { return s.done }

// Unmount unmounts: it fails (EBUSY) while files are open or a process's
// working directory is in the mount; otherwise it waits, up to ctx, for
// the library to close (writing back what is dirty).
func (s *Server) Unmount(ctx context.Context) error {
	select {
	case <-s.done:
		return s.err
	default:
	}
	if err := s.srv.Unmount(); err != nil {
		return fmt.Errorf("llite: unmount %s: %w", s.dir, err)
	}
	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
		return fmt.Errorf("llite: unmount %s: %w", s.dir, ctx.Err())
	}
}

// UnmountLazy detaches the mount from the namespace at once (umount -l);
// the FUSE server goes on serving the files still open, and the mount
// ends (Done) when the last closes.
func (s *Server) UnmountLazy() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	if os.Geteuid() == 0 {
		if err := syscall.Unmount(s.dir, syscall.MNT_DETACH); err == nil || errors.Is(err, syscall.EINVAL) {
			return nil // EINVAL: not mounted (any more)
		}
	}
	bin, err := exec.LookPath("fusermount3")
	if err != nil {
		bin = "fusermount"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, "-u", "-z", s.dir).CombinedOutput(); err != nil {
		return fmt.Errorf("llite: lazy unmount %s: %v: %s", s.dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Wait blocks until the mount is gone and the library closed, and
// returns the library's close error.
func (s *Server) Wait() error {
	<-s.done
	return s.err
}

// mount is what every node of a mount shares.
type mount struct {
	fs    *client.FS
	root  client.FID
	log   *slog.Logger
	n     *notifier
	creds creds
	jobs  jobs

	ro bool

	lk struct {
		sync.Mutex
		// owners are the lock owners that took locks on a node since
		// they last closed it, by node ID: their locks go at FLUSH.
		owners map[uint64]*lockOwners
	}
	noCap struct {
		sync.Mutex
		// at says when a file was seen without security.capability
		// (see Getxattr).
		at map[client.FID]time.Time
	}
	// umasks are the umasks of the creates in flight (rawFS.Create), by
	// request: go-fuse's node methods are not given them. A request's
	// cancel channel is its own while it runs; its caller's pid is not
	// (0 for every caller outside the daemon's pid namespace).
	umasks struct {
		sync.Mutex
		m map[<-chan struct{}]uint32
	}
	// writeFlags are the flags of the WRITEs in flight that have any the
	// handles look at, by request as umasks: FUSE_WRITE_CACHE (a write
	// back of cached pages, a shared mapping's, which goes where the
	// pages are even through an O_APPEND open) and FUSE_WRITE_KILL_SUIDGID
	// (the file's set-ID bits go); see handle.Write.
	writeFlags struct {
		sync.Mutex
		m map[<-chan struct{}]uint32
	}
	// statAhead holds a token per lookup-ahead worker running (at most
	// statAheadMax), saWG the workers, saCtx ends them at unmount;
	// statAheads counts the lookups ahead done, glimpsesAhead the
	// glimpses ahead (AGL).
	statAhead     chan struct{}
	saWG          sync.WaitGroup
	saCtx         context.Context
	saStop        context.CancelFunc
	statAheads    atomic.Uint64
	glimpsesAhead atomic.Uint64
}

type lockOwners struct {
	fid    client.FID
	owners map[uint64]struct{}
}

func newMount(fsys *client.FS, n *notifier, lg *slog.Logger) *mount {
	m := &mount{fs: fsys, root: fsys.Root(), log: lg, n: n, ro: fsys.Config().ReadOnly, statAhead: make(chan struct{}, statAheadMax)}
	m.saCtx, m.saStop = context.WithCancel(context.Background())
	m.creds.init()
	m.lk.owners = make(map[uint64]*lockOwners)
	m.noCap.at = make(map[client.FID]time.Time)
	m.umasks.m = make(map[<-chan struct{}]uint32)
	m.writeFlags.m = make(map[<-chan struct{}]uint32)
	return m
}

// capXattr is the extended attribute the kernel reads before every write
// (to drop file capabilities): a file found without it is taken to have
// none for noCapTTL, rather than asking the MDT at each write.
const (
	capXattr = "security.capability"
	noCapTTL = time.Second
	noCapMax = 4096
)

func (m *mount) knownNoCap(f client.FID) bool {
	m.noCap.Lock()
	defer m.noCap.Unlock()
	at, ok := m.noCap.at[f]
	return ok && time.Since(at) < noCapTTL
}

func (m *mount) setNoCap(f client.FID, none bool) {
	m.noCap.Lock()
	defer m.noCap.Unlock()
	if !none {
		delete(m.noCap.at, f)
		return
	}
	if len(m.noCap.at) >= noCapMax {
		clear(m.noCap.at)
	}
	m.noCap.at[f] = time.Now()
}

// inoOf is the inode number (and node ID) of f: seq<<24|oid where that
// is one to one, else a hash with the top bit set.
func inoOf(f client.FID) uint64 {
	if f.Ver == 0 && f.Seq != 0 && f.Seq < 1<<39 && f.Oid < 1<<24 {
		return f.Seq<<24 | uint64(f.Oid)
	}
	h := fnv.New64a()
	var b [fid.Size]byte
	f.Put(b[:])
	h.Write(b[:])
	ino := h.Sum64() | 1<<63
	if ino == ^uint64(0) {
		ino--
	}
	return ino
}

// nodeID is the kernel's ID of f.
func nodeID(root, f client.FID) uint64 {
	if f == root {
		return fuse.FUSE_ROOT_ID
	}
	return inoOf(f)
}

// errno maps err for the kernel, logging what is unexpected.
func (m *mount) errno(err error, op string, f client.FID, args ...any) syscall.Errno {
	e := client.Errno(err)
	switch {
	case e == 0:
		return 0
	case e == syscall.EIO:
		m.log.Warn(op, append([]any{"fid", f, "err", err}, args...)...)
	case m.log.Enabled(context.Background(), slog.LevelDebug):
		m.log.Debug(op, append([]any{"fid", f, "errno", e, "err", err}, args...)...)
	}
	return e
}

// interruptGrace is how long a request goes on after an interrupt (a
// signal to its caller, or the mount going away) before it gives up.
const interruptGrace = 2 * time.Second

// req returns the context a request's library call runs under, the
// caller's credentials, and a func to call when the request is done. An
// interrupt cancels the call only if it is still running interruptGrace
// later (see doc.go): Go programs are signalled all the time, and few of
// them retry EINTR, but a call waiting for a server that is down must
// end when its caller gives up or the mount goes.
func (m *mount) req(ctx context.Context) (context.Context, client.Cred, func()) {
	cred := m.cred(ctx)
	rctx, cancel := context.WithCancel(m.withJob(ctx, context.WithoutCancel(ctx)))
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(interruptGrace, cancel)
		context.AfterFunc(rctx, func() { t.Stop() })
	})
	return rctx, cred, func() {
		stop()
		cancel()
	}
}

// How long the kernel may cache what the library holds under a lock.
const cacheTTL = time.Hour

// splitTime splits a time in ns since the epoch into the seconds and
// nanoseconds FUSE gives the kernel: seconds as a two's complement s64
// (times before 1970 are negative, as ext4 keeps them), nanoseconds
// always in [0, 1e9).
func splitTime(ns int64) (uint64, uint32) {
	t := time.Unix(0, ns)
	return uint64(t.Unix()), uint32(t.Nanosecond())
}

// joinTime is the time FUSE gives as seconds (a two's complement s64)
// and nanoseconds, in ns since the epoch as the library keeps times:
// clamped to the whole seconds of that range (1677-09-21 to 2262-04-11),
// as the kernel clamps a time to the range a file system keeps
// (timestamp_truncate), rather than wrapped round (a touch to 2300 gave
// 1715).
func joinTime(sec uint64, nsec uint32) int64 {
	const maxSec, maxNsec = math.MaxInt64 / 1_000_000_000, math.MaxInt64 % 1_000_000_000 // 2262-04-11
	switch s := int64(sec); {
	case s > maxSec || s == maxSec && int64(nsec) > maxNsec:
		return math.MaxInt64
	case s < -maxSec:
		return -maxSec * 1_000_000_000
	default:
		return s*1e9 + int64(nsec)
	}
}

func fillAttr(a client.Attr, out *fuse.Attr) {
	out.Ino = inoOf(a.FID)
	out.Size = a.Size
	out.Blocks = a.Blocks
	out.Atime, out.Atimensec = splitTime(a.Atime)
	out.Mtime, out.Mtimensec = splitTime(a.Mtime)
	out.Ctime, out.Ctimensec = splitTime(a.Ctime)
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.UID, a.GID
	out.Rdev = uint32(a.Rdev)
	out.Blksize = 4096
	if a.Mode&syscall.S_IFMT == syscall.S_IFREG {
		// I/O in units of the RPC size.
		out.Blksize = 1 << 20
	}
}

// fillEntry fills a lookup's answer; locked says the library holds what
// it returned under a lock (a lock callback will tell the kernel to drop
// it), else the kernel must not cache it.
func fillEntry(a client.Attr, out *fuse.EntryOut, locked bool) {
	fillAttr(a, &out.Attr)
	out.Generation = uint64(a.FID.Ver)
	if locked {
		out.SetEntryTimeout(cacheTTL)
		if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
			out.SetAttrTimeout(cacheTTL)
		}
	}
}

// rawFS wraps go-fuse's bridge for what its node API does not pass on:
// the lock owner of FLUSH and RELEASE, whose locks must go then, and the
// umask of a create.
type rawFS struct {
	fuse.RawFileSystem
	m *mount
}

// Create, Mkdir and Mknod hand the caller's umask to the node's method
// (umaskOf), which sends it to the MDT with the mode as given: the MDT
// applies it unless the directory has a default ACL, which replaces it
// (posix_acl_create). The kernel leaves the umask to the mount since it
// granted CAP_DONT_MASK; without that it applied it already, and applying
// it again changes nothing.
func (r *rawFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer r.m.withUmask(cancel, in.Umask)()
	return r.RawFileSystem.Create(cancel, in, name, out)
}

func (r *rawFS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	defer r.m.withUmask(cancel, in.Umask)()
	return r.RawFileSystem.Tmpfile(cancel, in, out)
}

func (r *rawFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer r.m.withUmask(cancel, in.Umask)()
	return r.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (r *rawFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer r.m.withUmask(cancel, in.Umask)()
	return r.RawFileSystem.Mknod(cancel, in, name, out)
}

// withUmask records the umask of the create whose request has the cancel
// channel cancel for umaskOf, and returns the function that forgets it.
func (m *mount) withUmask(cancel <-chan struct{}, umask uint32) func() {
	m.umasks.Lock()
	defer m.umasks.Unlock()
	m.umasks.m[cancel] = umask & 0o777
	return func() {
		m.umasks.Lock()
		defer m.umasks.Unlock()
		delete(m.umasks.m, cancel)
	}
}

// createReq is req for a create (Create, Mkdir, Mknod): its credential
// carries the caller's umask (umaskOf).
func (m *mount) createReq(ctx context.Context) (context.Context, client.Cred, func()) {
	umask := m.umaskOf(ctx)
	ctx, cred, done := m.req(ctx)
	cred.Umask = umask
	return ctx, cred, done
}

// umaskOf returns the umask of the create whose request ctx is, as
// go-fuse's bridge hands it to the node (its Done is the request's cancel
// channel); 0 if none is recorded.
func (m *mount) umaskOf(ctx context.Context) uint32 {
	cancel := ctx.Done()
	if cancel == nil {
		return 0
	}
	m.umasks.Lock()
	defer m.umasks.Unlock()
	return m.umasks.m[cancel]
}

// Write and Writev note the flags of a write that handle.Write looks
// at: FUSE_WRITE_CACHE, the kernel's write-back of cached pages (it sends
// a shared mapping's dirty pages through any open of the file that may
// write, which may be an O_APPEND one, whose other writes are appends),
// and FUSE_WRITE_KILL_SUIDGID, which the kernel sets on a direct write by
// a caller without CAP_FSETID (an O_APPEND open's: the write must clear
// the file's set-ID bits, as a buffered one's SETATTR does).
func (r *rawFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if f := in.WriteFlags & writeFlagsNoted; f != 0 {
		defer r.m.withWriteFlags(cancel, f)()
	}
	return r.RawFileSystem.Write(cancel, in, data)
}

func (r *rawFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	if f := in.WriteFlags & writeFlagsNoted; f != 0 {
		defer r.m.withWriteFlags(cancel, f)()
	}
	return r.RawFileSystem.Writev(cancel, in, data)
}

// writeFlagsNoted are the write flags rawFS.Write records.
const writeFlagsNoted = fuse.WRITE_CACHE | fuse.WRITE_KILL_SUIDGID

// withWriteFlags records flags for the request with cancel channel
// cancel, and returns the function that forgets them.
func (m *mount) withWriteFlags(cancel <-chan struct{}, flags uint32) func() {
	m.writeFlags.Lock()
	defer m.writeFlags.Unlock()
	m.writeFlags.m[cancel] = flags
	return func() {
		m.writeFlags.Lock()
		defer m.writeFlags.Unlock()
		delete(m.writeFlags.m, cancel)
	}
}

// writeFlagsOf returns the noted write flags of the request of ctx.
func (m *mount) writeFlagsOf(ctx context.Context) uint32 {
	cancel := ctx.Done()
	if cancel == nil {
		return 0
	}
	m.writeFlags.Lock()
	defer m.writeFlags.Unlock()
	return m.writeFlags.m[cancel]
}

// isWriteBack reports whether ctx's request writes back cached pages.
func (m *mount) isWriteBack(ctx context.Context) bool {
	return m.writeFlagsOf(ctx)&fuse.WRITE_CACHE != 0
}

// releaseFlockUnlock is FUSE_RELEASE_FLOCK_UNLOCK: the file being
// released holds flock() locks of ReleaseIn.LockOwner.
const releaseFlockUnlock = 1 << 1

// Lookup turns a missing name that node.Lookup gave an entry timeout into
// a negative entry the kernel caches for that long (go-fuse's bridge knows
// only one timeout for every missing name).
func (r *rawFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	st := r.RawFileSystem.Lookup(cancel, h, name, out)
	if st == fuse.ENOENT && out.EntryTimeout() > 0 && r.m.n.keepNegative(h.NodeId, name) {
		*out = fuse.EntryOut{EntryValid: out.EntryValid, EntryValidNsec: out.EntryValidNsec}
		return fuse.OK
	}
	return st
}

func (r *rawFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	st := r.RawFileSystem.Flush(cancel, in)
	r.m.dropLocks(&fuse.Context{Caller: in.Caller, Cancel: cancel}, in.NodeId, in.LockOwner)
	return st
}

func (r *rawFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	if in.ReleaseFlags&releaseFlockUnlock != 0 {
		r.m.dropLocks(&fuse.Context{Caller: in.Caller, Cancel: cancel}, in.NodeId, in.LockOwner)
	}
	r.RawFileSystem.Release(cancel, in)
}

// noteLocker records that owner took a lock on the file of node id.
func (m *mount) noteLocker(id uint64, f client.FID, owner uint64) {
	m.lk.Lock()
	defer m.lk.Unlock()
	o := m.lk.owners[id]
	if o == nil {
		o = &lockOwners{fid: f, owners: make(map[uint64]struct{})}
		m.lk.owners[id] = o
	}
	o.owners[owner] = struct{}{}
}

// dropLocks gives back every lock owner holds on the file of node id
// (close(2) ends a process's POSIX locks on the file).
func (m *mount) dropLocks(ctx context.Context, id, owner uint64) {
	m.lk.Lock()
	o := m.lk.owners[id]
	var f client.FID
	held := false
	if o != nil {
		_, held = o.owners[owner]
		delete(o.owners, owner)
		f = o.fid
		if len(o.owners) == 0 {
			delete(m.lk.owners, id)
		}
	}
	m.lk.Unlock()
	if !held {
		return
	}
	ctx, _, done := m.req(ctx)
	defer done()
	err := m.fs.SetLock(ctx, f, owner, client.LockRange{Type: client.LockUnlock, Start: 0, End: client.EOF}, false)
	if err != nil {
		m.errno(err, "unlock at close", f, "owner", owner)
	}
}
