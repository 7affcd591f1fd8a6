package client

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nacrefs/nacre/client/osc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/internal/timeouts"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/mgs"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
)

// A mount's live parameters, named as Lustre names a client's (lctl
// get_param / set_param), and its devices (lctl dl):
//
//	llite.FS-ID.{max_read_ahead_mb,max_read_ahead_per_file_mb,max_cached_mb,read_ahead_stats,uuid}
//	lov.FS-clilov-ID.{target_obd,numobd,activeobd}
//	osc.FS-OSTxxxx-osc-ID.{max_rpcs_in_flight,max_dirty_mb,max_pages_per_rpc,
//	    checksums,checksum_type,grant_shrink,grant_shrink_interval,cur_grant_bytes,cur_dirty_bytes,
//	    stats,rpc_stats,import,ost_server_uuid}
//	mdc.FS-MDT0000-mdc-ID.{import,mds_server_uuid}
//	ldlm.namespaces.{FS-OSTxxxx-osc-ID,FS-MDT0000-mdc-ID}.{lru_size,lock_count,lock_unused_count}
//	timeout, at_min, at_max, at_history, ldlm_timeout (the node's: internal/timeouts)
//
// ID is the mount's instance, ffff followed by 12 hex digits of its uuid
// (Lustre shows its super block's address there). The persistent
// parameters of the file system (lctl set_param -P, held by the MGS) are
// set through the same entries, at mount, on every OSC that appears, and
// whenever the MGS's configuration brings a new one.

// clientParams is what a mount registered, and which persistent
// parameters it applied.
type clientParams struct {
	// timeout and jobIDVar are Config.Timeout and Config.JobIDVar as
	// llite.*.timeout and llite.*.jobid_var have them now.
	timeout  atomic.Int64 // time.Duration
	jobIDVar atomic.Pointer[string]
	mu       struct {
		sync.Mutex
		// undo unregisters what the mount registered.
		undo []func()
		// applied is the revision of each persistent parameter applied,
		// by its MGS name.
		applied map[string]int64
		closed  bool
	}
}

// registry returns the registry the mount registers in.
func (fs *FS) registry() *params.Registry {
	if fs.cfg.Params != nil {
		return fs.cfg.Params
	}
	return params.Default
}

// Instance returns the mount's instance, the last part of its device
// names (nacre-OST0000-osc-INSTANCE).
func (fs *FS) Instance() string {
	u := strings.ReplaceAll(fs.rpc.UUID(), "-", "")
	if len(u) > 12 {
		u = u[:12]
	}
	return "ffff" + u
}

// keep records unregister functions to run at Close; after Close they run
// at once.
func (fs *FS) keep(undo ...func()) {
	fs.params.mu.Lock()
	closed := fs.params.mu.closed
	if !closed {
		fs.params.mu.undo = append(fs.params.mu.undo, undo...)
	}
	fs.params.mu.Unlock()
	if closed {
		for _, u := range undo {
			u()
		}
	}
}

// register adds ps to the registry; a failure is logged, not fatal: the
// mount works without its parameters.
func (fs *FS) register(ps ...params.Param) {
	u, err := fs.registry().RegisterAll(ps...)
	if err != nil {
		fs.log.Warn("parameters not registered", "err", err)
		return
	}
	fs.keep(u)
}

// share adds ps to the registry as parameters of the node (the process),
// which every mount and server in it registers alike (params.Registry.Share).
func (fs *FS) share(ps ...params.Param) {
	for _, p := range ps {
		u, err := fs.registry().Share(p)
		if err != nil {
			fs.log.Warn("parameter not registered", "err", err)
			continue
		}
		fs.keep(u)
	}
}

// registerParams registers the mount's client-wide parameters and
// devices; registerOSC adds each OSC's.
func (fs *FS) registerParams(mdt *mgsv1.Target) {
	fs.share(timeouts.Params()...)
	reg, id, name := fs.registry(), fs.Instance(), fs.cfg.FSName
	uuid := fs.rpc.UUID()
	fs.keep(reg.RegisterDevice(params.Device{Type: "mgc", Name: "MGC" + fs.cfg.MGS[0], UUID: strings.Join(fs.cfg.MGS, ",")}))
	fs.keep(reg.RegisterDevice(params.Device{Type: "lov", Name: name + "-clilov-" + id, UUID: uuid,
		Refs: func() int { return 1 + len(fs.OSTs()) }}))
	fs.keep(reg.RegisterDevice(params.Device{Type: "lmv", Name: name + "-clilmv-" + id, UUID: uuid}))
	llite := "llite." + name + "-" + id + "."
	cache := fs.data
	fs.register(
		params.Int(llite+"max_read_ahead_mb", "read-ahead budget of the client, MiB",
			func() int64 { _, ra := cache.Limits(); return int64(ra) },
			func(n int64) error { mb, _ := cache.Limits(); return cache.SetLimits(mb, int(n)) },
			0, 1<<20, func(n int64) error { mb, _ := cache.Limits(); return cache.CheckLimits(mb, int(n)) }),
		params.Int(llite+"max_read_ahead_per_file_mb", "read-ahead window of a file read sequentially, MiB, split between the objects it is striped over",
			func() int64 { return int64(cache.ReadAheadPerFile()) },
			func(n int64) error { return cache.SetReadAheadPerFile(int(n)) },
			0, 1<<20, nil),
		params.Param{Name: llite + "max_cached_mb", Help: "page cache of the client, MiB",
			Get: func() (string, error) { return cachedMBText(cache), nil },
			Validate: func(v string) error {
				n, err := parseMB(v)
				if err != nil {
					return err
				}
				_, ra := cache.Limits()
				return cache.CheckLimits(n, ra)
			},
			Set: func(v string) error {
				n, err := parseMB(v)
				if err != nil {
					return err
				}
				_, ra := cache.Limits()
				return cache.SetLimits(n, ra)
			}},
		params.ReadOnly(llite+"read_ahead_stats", "read-ahead and cache hits", fs.readAheadStats),
		params.Int(llite+"timeout", "seconds an operation waits for a server that does not answer before it fails with EIO (sys.timeout)",
			func() int64 { return int64(fs.Timeout() / time.Second) },
			func(n int64) error { fs.params.timeout.Store(int64(time.Duration(n) * time.Second)); return nil },
			1, 1<<20, nil),
		params.Param{Name: llite + "jobid_var", Help: "what tags requests with a job id: procname_uid, disable, or an environment variable",
			Get:      func() (string, error) { return fs.JobIDVar(), nil },
			Validate: checkJobIDVar,
			Set: func(v string) error {
				if err := checkJobIDVar(v); err != nil {
					return err
				}
				fs.params.jobIDVar.Store(&v)
				return nil
			}},
		params.ReadOnly(llite+"uuid", "the client's uuid", func() string { return uuid }),
		params.ReadOnly("lov."+name+"-clilov-"+id+".target_obd", "the OSTs and their state", fs.targetOBD),
		params.ReadOnly("lov."+name+"-clilov-"+id+".numobd", "OSTs", func() string { return strconv.Itoa(len(fs.OSTs())) }),
		params.ReadOnly("lov."+name+"-clilov-"+id+".activeobd", "OSTs connected", func() string {
			n := 0
			for _, i := range fs.OSTs() {
				if o, err := fs.OSC(i); err == nil && o.Import().State() == ptlrpc.StateFull {
					n++
				}
			}
			return strconv.Itoa(n)
		}),
	)
	dev := mdt.GetName() + "-mdc-" + id
	imp := fs.mdc.Import()
	fs.keep(reg.RegisterDevice(params.Device{Type: "mdc", Name: dev, UUID: uuid, Status: importStatus(imp)}))
	fs.register(
		params.ReadOnly("mdc."+dev+".import", "the connection to the MDT", func() string { return importText(dev, targetUUID(mdt), imp) }),
		params.ReadOnly("mdc."+dev+".mds_server_uuid", "the MDT and the connection's state", func() string {
			return targetUUID(mdt) + "\t" + imp.State().String()
		}),
		params.Int("mdc."+dev+".max_rpcs_in_flight", "metadata RPCs in flight at once",
			func() int64 { n, _ := imp.MaxRPCsInFlight(); return int64(n) },
			func(n int64) error { return imp.SetMaxRPCsInFlight(int(n)) }, 1, 512, nil),
	)
	fs.register(namespaceParams(fs.lk, dev, imp)...)
}

// registerOSC registers an OSC's parameters and device.
func (fs *FS) registerOSC(o *osc.Client, t *mgsv1.Target) string {
	reg, id := fs.registry(), fs.Instance()
	dev := t.GetName() + "-osc-" + id
	p := "osc." + dev + "."
	fs.keep(reg.RegisterDevice(params.Device{Type: "osc", Name: dev, UUID: fs.rpc.UUID(), Status: importStatus(o.Import()),
		Refs: func() int { return 1 + o.Stats().Objects }}))
	tunable := func(name, help string, lo, hi int64, get func(osc.Tunables) int64, set func(*osc.Tunables, int64)) params.Param {
		with := func(n int64) osc.Tunables { t := o.Tunables(); set(&t, n); return t }
		return params.Int(p+name, help, func() int64 { return get(o.Tunables()) },
			func(n int64) error { return o.SetTunables(with(n)) }, lo, hi,
			func(n int64) error { return o.CheckTunables(with(n)) })
	}
	fs.register(
		tunable("max_rpcs_in_flight", "bulk RPCs in flight, each way", 1, osc.MaxRPCsInFlightLimit,
			func(t osc.Tunables) int64 { return int64(t.MaxRPCsInFlight) }, func(t *osc.Tunables, n int64) { t.MaxRPCsInFlight = int(n) }),
		tunable("max_dirty_mb", "dirty data cached, MiB", 1, osc.MaxDirtyMBLimit,
			func(t osc.Tunables) int64 { return int64(t.MaxDirtyMB) }, func(t *osc.Tunables, n int64) { t.MaxDirtyMB = int(n) }),
		tunable("max_pages_per_rpc", "pages of a full bulk RPC", 1, osc.MaxPagesPerRPCLimit,
			func(t osc.Tunables) int64 { return int64(t.MaxPagesPerRPC) }, func(t *osc.Tunables, n int64) { t.MaxPagesPerRPC = int(n) }),
		params.Bool(p+"checksums", "end-to-end checksums of bulk data", func() bool { return o.Tunables().Checksums },
			func(b bool) error { t := o.Tunables(); t.Checksums = b; return o.SetTunables(t) }),
		params.Param{Name: p + "checksum_type", Help: "checksum algorithms the OST agreed to, the one in use in brackets",
			Get: func() (string, error) { return o.Import().ChecksumTypes().List(o.ChecksumType()), nil },
			Set: func(v string) error {
				ct, err := ptlrpc.ParseChecksumType(strings.TrimSpace(v))
				if err != nil {
					return err
				}
				// The preference is kept either way, as Lustre keeps
				// cl_preferred_cksum_type: an OSC not connected yet, or
				// connecting later to an OST that agrees to it, uses it
				// then. Named to a connected OST that refused it, it is
				// an error all the same.
				t := o.Tunables()
				t.ChecksumType = ct
				if err := o.SetTunables(t); err != nil {
					return err
				}
				if agreed := o.Import().ChecksumTypes(); o.Import().Info().ConnCount > 0 && ct&agreed == 0 {
					return fmt.Errorf("checksum type %v: the OST agreed to %v only", ct, agreed)
				}
				return nil
			}},
		params.Bool(p+"grant_shrink", "give back unused grant after grant_shrink_interval without a write", func() bool { return o.Tunables().GrantShrink },
			func(b bool) error { t := o.Tunables(); t.GrantShrink = b; return o.SetTunables(t) }),
		tunable("grant_shrink_interval", "seconds without a write before unused grant goes back", 1, 1<<31,
			func(t osc.Tunables) int64 { return int64(t.GrantShrinkInterval / time.Second) },
			func(t *osc.Tunables, n int64) { t.GrantShrinkInterval = time.Duration(n) * time.Second }),
		params.Int(p+"cur_grant_bytes", "grant the OST gave; a lower value gives the unused part back", func() int64 { return int64(o.Stats().Grant) },
			func(n int64) error {
				ctx, cancel := context.WithTimeout(context.Background(), fs.cfg.Timeout)
				defer cancel()
				_, err := o.ShrinkGrant(ctx, uint64(n))
				return err
			}, 0, math.MaxInt64, nil),
		params.ReadOnly(p+"cur_dirty_bytes", "dirty data charged", func() string { return strconv.FormatInt(o.Stats().DirtyBytes, 10) }),
		params.ReadOnly(p+"stats", "bulk I/O counters", func() string { return oscStats(o.Stats()) }),
		params.Param{Name: p + "rpc_stats", Help: "RPC histograms; any write clears them",
			Get: func() (string, error) { return rpcStatsText(o.RPCStats()), nil },
			Set: func(string) error { o.ClearRPCStats(); return nil }},
		params.ReadOnly(p+"import", "the connection to the OST", func() string { return importText(dev, targetUUID(t), o.Import()) }),
		params.ReadOnly(p+"ost_server_uuid", "the OST and the connection's state", func() string {
			return targetUUID(t) + "\t" + o.Import().State().String()
		}),
	)
	fs.register(namespaceParams(fs.lk, dev, o.Import())...)
	return dev
}

// namespaceParams are a client namespace's ldlm.namespaces.DEV.*.
func namespaceParams(lk *ldlm.Client, dev string, imp *ptlrpc.Import) []params.Param {
	p := "ldlm.namespaces." + dev + "."
	return []params.Param{
		params.Int(p+"lru_size", "unused locks kept (0: the default)", func() int64 { return int64(lk.LRUSize(imp)) },
			func(n int64) error { return lk.SetLRUSize(imp, int(n)) }, 0, 1<<24, nil),
		params.Int(p+"lru_max_age", "milliseconds an unused lock is kept", func() int64 { return lk.LRUMaxAge(imp).Milliseconds() },
			func(n int64) error { return lk.SetLRUMaxAge(imp, time.Duration(n)*time.Millisecond) }, 1, 1<<31, nil),
		params.ReadOnly(p+"lock_count", "locks held", func() string { n, _ := lk.NamespaceStats(imp); return strconv.Itoa(n) }),
		params.ReadOnly(p+"lock_unused_count", "unused locks in the LRU", func() string { _, n := lk.NamespaceStats(imp); return strconv.Itoa(n) }),
	}
}

func targetUUID(t *mgsv1.Target) string {
	if u := t.GetUuid(); u != "" {
		return u
	}
	return t.GetName() + "_UUID"
}

// importStatus is the dl status of a device over imp: UP, or IN once
// closed.
func importStatus(imp *ptlrpc.Import) func() string {
	return func() string {
		if imp.State() == ptlrpc.StateClosed {
			return "IN"
		}
		return "UP"
	}
}

// importText shows an import as Lustre's osc.*.import does (a subset of
// its YAML).
func importText(dev, target string, imp *ptlrpc.Import) string {
	ci := imp.Info()
	var b strings.Builder
	fmt.Fprintf(&b, "import:\n    name: %s\n    target: %s\n    state: %s\n", dev, target, ci.State)
	fmt.Fprintf(&b, "    connect_flags: %#x\n    instance: %d\n", ci.Features, ci.Instance)
	nids := make([]string, len(ci.Servers))
	for i, s := range ci.Servers {
		nids[i] = s.NID.String()
	}
	fmt.Fprintf(&b, "    connection:\n       failover_nids: [%s]\n       current_connection: %s\n       generation: %d\n       failed_connects: %d\n",
		strings.Join(nids, ", "), ci.Server.NID, ci.ConnCount, ci.FailedConnects)
	fmt.Fprintf(&b, "    service_estimates:\n       services: %d usec\n       network: %d usec\n       timeout: %d usec\n",
		ci.ServiceEstimate.Microseconds(), ci.NetLatency.Microseconds(), ci.Timeout.Microseconds())
	fmt.Fprintf(&b, "    transactions:\n       last_committed: %d\n       uncommitted: %d", ci.LastCommitted, ci.Uncommitted)
	return b.String()
}

// oscStats formats osc.*.stats.
func oscStats(s osc.Stats) string {
	st := params.NewStats(s.Since)
	st.Sum("read_bytes", s.ReadRPCs, "bytes", s.MinReadRPC, s.MaxReadRPC, s.ReadBytes)
	st.Sum("write_bytes", s.WriteRPCs, "bytes", s.MinWriteRPC, s.MaxWriteRPC, s.WriteBytes)
	st.Count("ost_read", s.ReadRPCs, "reqs")
	st.Count("ost_write", s.WriteRPCs, "reqs")
	st.Count("sync_write", s.SyncWrites, "reqs")
	st.Count("write_error", s.WriteErrors, "reqs")
	st.Count("grant_wait", s.GrantWaits, "events")
	st.Count("grant_shrink", s.GrantShrinks, "reqs")
	st.Count("lost_page", s.LostPages, "pages")
	return st.String()
}

// rpcStatsText formats osc.*.rpc_stats as Lustre's osc_rpc_stats_seq_show
// does: the RPCs in flight and pending pages, then the histograms of
// pages per RPC and of RPCs in flight, reads and writes side by side.
func rpcStatsText(s osc.RPCStats) string {
	var b strings.Builder
	now := time.Now()
	fmt.Fprintf(&b, "snapshot_time:         %d.%09d (secs.nsecs)\n", now.Unix(), now.Nanosecond())
	fmt.Fprintf(&b, "read RPCs in flight:  %d\n", s.InFlight[0])
	fmt.Fprintf(&b, "write RPCs in flight: %d\n", s.InFlight[1])
	fmt.Fprintf(&b, "pending write pages:  %d\n", s.PendingPages[1])
	fmt.Fprintf(&b, "pending read pages:   %d\n", s.PendingPages[0])
	hist := func(title string, h [2][]uint64, label func(i int) int) {
		fmt.Fprintf(&b, "\n\t\t\tread\t\t\twrite\n")
		fmt.Fprintf(&b, "%-22srpcs   %% cum %% |       rpcs   %% cum %%\n", title)
		var tot [2]uint64
		for d := range 2 {
			for _, v := range h[d] {
				tot[d] += v
			}
		}
		pct := func(a, t uint64) uint64 {
			if t == 0 {
				return 0
			}
			return a * 100 / t
		}
		var cum [2]uint64
		for i := range h[0] {
			r, w := h[0][i], h[1][i]
			cum[0] += r
			cum[1] += w
			fmt.Fprintf(&b, "%d:\t\t%10d %3d %3d   | %10d %3d %3d\n", label(i), r, pct(r, tot[0]), pct(cum[0], tot[0]),
				w, pct(w, tot[1]), pct(cum[1], tot[1]))
			if cum[0] == tot[0] && cum[1] == tot[1] {
				break
			}
		}
	}
	hist("pages per rpc", s.ByPages, func(i int) int { return 1 << i })
	hist("rpcs in flight", s.ByInFlight, func(i int) int { return i })
	return strings.TrimSuffix(b.String(), "\n")
}

// readAheadStats formats llite.*.read_ahead_stats over the OSCs.
func (fs *FS) readAheadStats() string {
	var hits, misses, ra, raHits uint64
	var since time.Time
	for _, i := range fs.OSTs() {
		o, err := fs.OSC(i)
		if err != nil {
			continue
		}
		s := o.Stats()
		hits, misses, ra, raHits = hits+s.CacheHits, misses+s.CacheMisses, ra+s.ReadAheadPages, raHits+s.ReadAheadHits
		if since.IsZero() || s.Since.Before(since) {
			since = s.Since
		}
	}
	st := params.NewStats(since)
	st.Count("hits", hits, "pages")
	st.Count("misses", misses, "pages")
	st.Count("readahead_pages", ra, "pages")
	st.Count("readahead_hits", raHits, "pages")
	return st.String()
}

// cachedMBText formats llite.*.max_cached_mb as Lustre does.
func cachedMBText(c *osc.Cache) string {
	mb, _ := c.Limits()
	st := c.Stats()
	used := st.Pages * osc.PageSize >> 20
	return fmt.Sprintf("users: %d\nmax_cached_mb: %d\nused_mb: %d\nunused_mb: %d\nreclaim_count: %d",
		c.Users(), mb, used, mb-used, st.Evictions)
}

// parseMB reads a size in MiB as max_cached_mb takes it: MiB, or with a
// unit suffix (params.ParseSize: 4G is 4096).
func parseMB(v string) (int, error) {
	v = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), "max_cached_mb:"))
	n, err := params.ParseSize(v, 20)
	if err != nil || n < 1 || n > 1<<24 {
		return 0, &params.Error{Kind: params.ErrBadValue, Reason: fmt.Sprintf("want MiB from 1 to %d (K, M, G, T suffixes taken)", 1<<24)}
	}
	return int(n), nil
}

// targetOBD formats lov.*.target_obd: each OST's index, uuid and state.
func (fs *FS) targetOBD() string {
	var b strings.Builder
	for _, i := range fs.OSTs() {
		o, err := fs.OSC(i)
		if err != nil {
			continue
		}
		state := "ACTIVE"
		if o.Import().State() != ptlrpc.StateFull {
			state = "INACTIVE"
		}
		fmt.Fprintf(&b, "%d: %s %s\n", i, o.Import().Target()+"_UUID", state)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// unregisterParams removes everything the mount registered.
func (fs *FS) unregisterParams() {
	fs.params.mu.Lock()
	undo := fs.params.mu.undo
	fs.params.mu.undo, fs.params.mu.closed = nil, true
	fs.params.mu.Unlock()
	for _, u := range undo {
		u()
	}
}

// localParam turns a persistent parameter of the MGS into the patterns
// of this mount's live parameters, none if it is not the client's.
func (fs *FS) localParam(pn mgs.ParamName) []string {
	id, name := fs.Instance(), fs.cfg.FSName
	layer, rest, _ := strings.Cut(pn.Param, ".")
	switch {
	case pn.Spec.Scope == mgs.ScopeOST && layer == "osc":
		return []string{"osc." + name + "-" + pn.Target + "-osc-" + id + "." + rest}
	case pn.Spec.Scope == mgs.ScopeMDT && layer == "mdc":
		return []string{"mdc." + name + "-" + pn.Target + "-mdc-" + id + "." + rest}
	case pn.Spec.Scope == mgs.ScopeClient && layer == "llite":
		return []string{"llite." + name + "-" + id + "." + rest}
	case pn.Spec.Scope == mgs.ScopeClient && layer == "ldlm":
		return []string{"ldlm.namespaces." + name + "-*-" + id + "." + rest}
	case pn.Spec.Scope == mgs.ScopeSys && pn.Param == "timeout":
		// The node's obd_timeout, and the mount's own wait for a server
		// (which its timeout= mount option sets alone).
		return []string{"timeout", "llite." + name + "-" + id + ".timeout"}
	case timeouts.Persistent(pn):
		return []string{pn.Param} // the node's
	case pn.Spec.Scope == mgs.ScopeClient && pn.Param == "jobid_var":
		// Node-wide in Lustre; each mount's here.
		return []string{"llite." + name + "-" + id + "." + pn.Param}
	}
	return nil
}

// applyParams sets the persistent parameters of c this mount has not
// applied at their revision yet, oldest first (as Lustre's client replays
// its params log), through the registry; newOSCs are devices that appeared
// since the last call: every OSC parameter of c, and every lock namespace
// one (ldlm.lru_size, ldlm.lru_max_age), applies to them again.
// Parameters the client does not implement are skipped; a refused value
// is logged.
func (fs *FS) applyParams(c *mgsv1.ClientConfig, newOSCs ...string) {
	reg := fs.registry()
	fs.params.mu.Lock()
	defer fs.params.mu.Unlock()
	if fs.params.mu.applied == nil {
		fs.params.mu.applied = make(map[string]int64)
	}
	var again []func() // node timeouts refused in the log's order
	for _, p := range c.GetParams() {
		pn, err := mgs.ParseParamName(p.GetName())
		if err != nil || !pn.MatchesFS(fs.cfg.FSName) {
			continue
		}
		local := fs.localParam(pn)
		if len(local) == 0 {
			continue
		}
		var names []string
		if p.GetRevision() > fs.params.mu.applied[p.GetName()] {
			fs.params.mu.applied[p.GetName()] = p.GetRevision()
			names = local
		} else if len(local) == 1 {
			// A new OSC brings its osc.DEV.* and its lock namespace's
			// ldlm.namespaces.DEV.*: both are the OSC's to apply.
			_, rest, _ := strings.Cut(pn.Param, ".")
			for _, dev := range newOSCs {
				for _, n := range []string{"osc." + dev + "." + rest, "ldlm.namespaces." + dev + "." + rest} {
					if ok, _ := params.Match(local[0], n); ok {
						names = append(names, n)
					}
				}
			}
		}
		nodeWide := timeouts.Persistent(pn)
		for _, n := range names {
			if !reg.SetPersistent(fs.log, p.GetName(), p.GetValue(), n, !nodeWide) && nodeWide {
				// One of the node's timeouts, refused for another (at_min
				// above the at_max a later parameter raises): again once
				// the others are in, and at every configuration until
				// it is taken.
				again = append(again, func() {
					if !reg.SetPersistent(fs.log, p.GetName(), p.GetValue(), n, true) {
						delete(fs.params.mu.applied, p.GetName())
					}
				})
			}
		}
	}
	for _, set := range again {
		set()
	}
}

// Timeout returns how long an operation waits for a server that does not
// answer (Config.Timeout, or llite.*.timeout as set since).
func (fs *FS) Timeout() time.Duration {
	if t := fs.params.timeout.Load(); t > 0 {
		return time.Duration(t)
	}
	return fs.cfg.Timeout
}

// JobIDVar returns what tags requests with a job id (Config.JobIDVar, or
// llite.*.jobid_var as set since).
func (fs *FS) JobIDVar() string {
	if v := fs.params.jobIDVar.Load(); v != nil {
		return *v
	}
	return fs.cfg.JobIDVar
}

// checkJobIDVar refuses a jobid_var that is neither a mode nor the name of
// an environment variable.
func checkJobIDVar(v string) error {
	if v == "" || len(v) > 64 || strings.ContainsAny(v, "=\x00 \t\n") {
		return fmt.Errorf("jobid_var %q: want procname_uid, disable, or an environment variable's name", v)
	}
	return nil
}
