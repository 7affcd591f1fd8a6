package client

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nacrefs/nacre/client/osc"
	"github.com/nacrefs/nacre/internal/mgsnode"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/lnet"
)

// Config is what Mount needs: where the MGS is, which file system, how
// this client appears on LNet, and the tunables of its caches.
type Config struct {
	// MGS are the MGS's gRPC addresses, one per failover node.
	MGS []string
	// FSName is the file system to mount.
	FSName string
	// NID is this client's LNet NID ("192.168.1.7@tcp"); "" picks the
	// address the host reaches the MGS from, or, when that is a loopback
	// address (a cluster on this host), a free one of 127.0.x.y.
	NID string
	// Port is the socklnd port of the file system's nodes; 0 means 988.
	Port int
	// Data holds the data path's tunables (max_dirty_mb, max_pages_per_rpc,
	// max_rpcs_in_flight, max_read_ahead_mb, max_cached_mb, checksums).
	Data osc.Config
	// Timeout is how long an operation waits for a server that does not
	// answer (while its import reconnects) before failing with EIO; 0
	// means DefaultTimeout.
	Timeout time.Duration
	// ReadOnly refuses every change with EROFS.
	ReadOnly bool
	// Flock enables POSIX and BSD locks through the LDLM (on by default;
	// "noflock" turns them off: ENOSYS).
	Flock bool
	// LocalFlock ("localflock", Flock off) has a FUSE mount's locks kept
	// by its kernel: they exclude the processes of this client only, as
	// Lustre's localflock, at no cost to the servers. The library alone
	// has no local lock table: its lock calls get ENOSYS.
	LocalFlock bool
	// UserXattr allows user.* extended attributes (on by default).
	UserXattr bool
	// LazyStatfs answers statfs from the targets that answer, without
	// waiting for the others.
	LazyStatfs bool
	// JobIDVar says what tags requests with a job id for the servers'
	// job_stats (Lustre's jobid_var): "procname_uid" (the default: the
	// process's name and uid, as "dd.1000"), "disable", or the name of an
	// environment variable of the calling process (SLURM_JOB_ID, ...).
	// The FUSE mount applies it; library callers use jobstats.WithJob.
	JobIDVar string
	// LRUSize bounds the unused locks kept per target; 0 means ldlm's
	// default.
	LRUSize int
	// Notify, if not nil, hears of cached state going stale (a lock
	// called back), so a layer with caches of its own (the kernel's, under
	// FUSE) drops them.
	Notify Notifier
	// LNet, if set, is the LNet the mount uses instead of starting one of
	// its own (NID and Port are then unused): a mount in the servers'
	// process (nacre up --mount) shares theirs, and its requests to the
	// targets of this node go through 0@lo, around the sockets, as a
	// Lustre client's on a server node do. Close leaves it running.
	LNet *lnet.LNet
	// Params is where the mount registers its live tunables and devices
	// (llite, lov, lmv, mdc, osc, ldlm namespaces) for lctl; nil means
	// params.Default, the process's registry.
	Params *params.Registry
	// Logger receives the client's logs; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultTimeout is how long an operation waits for a server that is down
// before it fails (Lustre waits forever by default; Nacre bounds it so a
// mount never hangs for good).
const DefaultTimeout = 5 * time.Minute

// DefaultPort is the socklnd port, as Lustre's.
const DefaultPort = 988

// DefaultConfig returns a Config with Lustre's defaults and nothing to
// mount yet.
func DefaultConfig() Config {
	return Config{Port: DefaultPort, Data: osc.DefaultConfig(), Timeout: DefaultTimeout, Flock: true, UserXattr: true,
		JobIDVar: "procname_uid"}
}

// Notifier hears of cached state going stale.
type Notifier interface {
	// InvalidateAttr: f's attributes (and, for a directory, its entries)
	// may have changed.
	InvalidateAttr(f FID)
	// InvalidateEntry: name in parent may lead elsewhere now, or nowhere.
	InvalidateEntry(parent FID, name string)
	// InvalidateData: f's data in [off, off+n) may have changed (n 0: to
	// the end).
	InvalidateData(f FID, off, n int64)
}

// ParseSource fills c.MGS and c.FSName from a mount source,
// MGSNID[:MGSNID]:/FSNAME (a NID may carry the MGS's gRPC port:
// "10.0.0.1@tcp:9999:/fs").
func (c *Config) ParseSource(src string) error {
	addrs, fs, err := mgsnode.ParseSource(src)
	if err != nil {
		return err
	}
	c.MGS, c.FSName = addrs, fs
	return nil
}

// ParseOptions applies mount options, Lustre's where they exist
// (comma-separated; unknown ones are an error). Options of the FUSE layer
// (allow_other, ...) are returned for it.
func (c *Config) ParseOptions(opts string) (rest []string, err error) {
	for _, o := range strings.Split(opts, ",") {
		if o == "" {
			continue
		}
		k, v, hasV := strings.Cut(o, "=")
		num := func(lo, hi int) (int, error) {
			n, err := strconv.Atoi(v)
			if !hasV || err != nil || n < lo || n > hi {
				return 0, fmt.Errorf("mount option %q: want %s=N with %d <= N <= %d", o, k, lo, hi)
			}
			return n, nil
		}
		switch k {
		case "ro", "rw", "flock", "localflock", "noflock", "user_xattr", "nouser_xattr", "lazystatfs", "nolazystatfs":
			if hasV {
				// ro=0 would turn it on all the same.
				return nil, fmt.Errorf("mount option %q: %s takes no value", o, k)
			}
		}
		switch k {
		case "ro":
			c.ReadOnly = true
		case "rw":
			c.ReadOnly = false
		case "flock":
			c.Flock, c.LocalFlock = true, false
		case "localflock":
			c.Flock, c.LocalFlock = false, true
		case "noflock":
			c.Flock, c.LocalFlock = false, false
		case "user_xattr":
			c.UserXattr = true
		case "nouser_xattr":
			c.UserXattr = false
		case "lazystatfs":
			c.LazyStatfs = true
		case "nolazystatfs":
			c.LazyStatfs = false
		case "max_read_ahead_mb":
			c.Data.MaxReadAheadMB, err = num(0, 1<<20)
		case "max_read_ahead_per_file_mb":
			c.Data.MaxReadAheadPerFileMB, err = num(0, 1<<20)
		case "max_dirty_mb":
			c.Data.MaxDirtyMB, err = num(1, 1<<20)
		case "max_cached_mb":
			c.Data.MaxCachedMB, err = num(1, 1<<24)
		case "max_pages_per_rpc":
			c.Data.MaxPagesPerRPC, err = num(1, 4096)
		case "max_rpcs_in_flight":
			c.Data.MaxRPCsInFlight, err = num(1, 256)
		case "checksums":
			c.Data.Checksums = true
		case "nochecksums":
			c.Data.Checksums = false
		case "jobid_var":
			if !hasV || v == "" || strings.ContainsAny(v, "=\x00") {
				return nil, fmt.Errorf("mount option %q: want jobid_var=procname_uid|disable|ENVVAR", o)
			}
			c.JobIDVar = v
		case "lru_size":
			c.LRUSize, err = num(0, 1<<20)
		case "timeout":
			var s int
			s, err = num(1, 1<<20)
			c.Timeout = time.Duration(s) * time.Second
		case "nid":
			if !hasV || v == "" {
				return nil, fmt.Errorf("mount option %q: want nid=ADDR@NET", o)
			}
			c.NID = v
		case "port":
			c.Port, err = num(1, 65535)
		default:
			rest = append(rest, o)
		}
		if err != nil {
			return nil, err
		}
	}
	return rest, nil
}
