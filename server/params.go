package server

import (
	"context"
	"fmt"
	"github.com/nacrefs/nacre/internal/jobstats"
	"github.com/nacrefs/nacre/mds/mdd"
	"math"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nacrefs/nacre/dataplane/nrs"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/internal/timeouts"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/mds/mdt"
	"github.com/nacrefs/nacre/mgs"
	"github.com/nacrefs/nacre/oss/ofd"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
)

// A server's live parameters, named as Lustre names an OSS's and an
// MDS's (lctl get_param / set_param), and its devices (lctl dl):
//
//	ost.OSS.ost_io.{nrs_policies,nrs_tbf_rule,stats,threads_started,threads_min,threads_max}
//	obdfilter.FS-OSTxxxx.{stats,tot_granted,num_exports,uuid,recovery_status,abort_recovery,replay_barrier,job_stats}
//	mds.MDS.mdt.{nrs_policies,nrs_tbf_rule,stats,threads_started,threads_min,threads_max}
//	mdt.FS-MDTxxxx.{md_stats,num_exports,uuid,recovery_status,abort_recovery,replay_barrier,job_stats}
//	ldlm.namespaces.{filter,mdt}-FS-{OST,MDT}xxxx_UUID.{lock_count,resource_count}
//	timeout, at_min, at_max, at_history, ldlm_timeout (the node's: internal/timeouts)
//
// The persistent parameters of the file system that apply to servers
// (ost.nrs_policies; obdfilter.* and mdt.* once their layers have them)
// are set through the same entries at start and whenever the MGS's
// configuration changes.

// serverParams is what a Storage registered, and which persistent
// parameters it applied.
type serverParams struct {
	reg *params.Registry
	// since is when the Storage started: the counters of its services
	// and namespaces count from then.
	since time.Time
	mu    struct {
		sync.Mutex
		undo    []func()
		applied map[string]int64
	}
}

// keep records unregister functions to run at Close.
func (p *serverParams) keep(undo ...func()) {
	p.mu.Lock()
	p.mu.undo = append(p.mu.undo, undo...)
	p.mu.Unlock()
}

// add registers ps; shared ones (a service several Storages of one test
// process have alike) with Share. A failure is logged: the server runs
// without its parameters.
func (s *Storage) addParams(shared bool, ps ...params.Param) {
	for _, p := range ps {
		reg := s.params.reg.Register
		if shared {
			reg = s.params.reg.Share
		}
		u, err := reg(p)
		if err != nil {
			s.log.Warn("parameter not registered", "err", err)
			continue
		}
		s.params.keep(u)
	}
}

// closeParams removes what the Storage registered.
func (s *Storage) closeParams() {
	s.params.mu.Lock()
	undo := s.params.mu.undo
	s.params.mu.undo = nil
	s.params.mu.Unlock()
	for _, u := range undo {
		u()
	}
}

// serviceParams are a PtlRPC service's: its NRS policy and TBF rules,
// its per-opcode stats, its threads.
func serviceParams(prefix string, svc *ptlrpc.Service, minT, maxT int, since time.Time) []params.Param {
	head := svc.NRS()
	return []params.Param{
		params.Enum(prefix+"nrs_policies", "request scheduling policy: fifo, tbf, tbf nid, tbf jobid, tbf opcode",
			func() string { return nrsPoliciesText(head) }, head.SetPolicy,
			nrs.PolicyFIFO, nrs.PolicyTBF, nrs.PolicyTBFNID, nrs.PolicyTBFJobID, nrs.PolicyTBFOpcode),
		{Name: prefix + "nrs_tbf_rule", Help: `TBF rules: "start NAME nid={...} rate=N", "change NAME rate=N", "stop NAME"`,
			Get: func() (string, error) { return tbfRulesText(head), nil },
			Validate: func(v string) error {
				_, err := nrs.ParseRule(v)
				return err
			},
			Set: func(v string) error {
				cmd, err := nrs.ParseRule(v)
				if err != nil {
					return err
				}
				return head.Apply(cmd)
			}},
		params.ReadOnly(prefix+"stats", "requests served, by opcode, and their service times", func() string { return serviceStatsText(svc.Stats(), since) }),
		params.ReadOnly(prefix+"threads_started", "handler threads running", func() string { return strconv.Itoa(svc.Stats().Threads) }),
		params.ReadOnly(prefix+"threads_min", "handler threads always running", func() string { return strconv.Itoa(minT) }),
		params.ReadOnly(prefix+"threads_max", "most handler threads", func() string { return strconv.Itoa(maxT) }),
	}
}

// nrsPoliciesText shows a head's policies as Lustre's nrs_policies does
// (its regular_requests part): every policy, the active one started, with
// the requests it holds and (in place of Lustre's active count, which
// Nacre does not keep) those it has released.
func nrsPoliciesText(h *nrs.Head) string {
	st := h.Stats()
	var b strings.Builder
	b.WriteString("\nregular_requests:\n")
	for i, p := range []string{nrs.PolicyFIFO, nrs.PolicyTBF} {
		name, state, queued := p, "stopped", 0
		if st.Policy == p || (p == nrs.PolicyTBF && strings.HasPrefix(st.Policy, p)) {
			name, state, queued = st.Policy, "started", st.Queued
		}
		var dispatched uint64
		for q, n := range st.ByPolicy {
			if q == p || (p == nrs.PolicyTBF && strings.HasPrefix(q, p)) {
				dispatched += n
			}
		}
		fallback := "no"
		if p == nrs.PolicyFIFO {
			fallback = "yes"
		}
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "  - name: %s\n    state: %s\n    fallback: %s\n    queued: %d\n    dispatched: %d\n",
			name, state, fallback, queued, dispatched)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// tbfRulesText shows a head's TBF rules as nrs_tbf_rule does.
func tbfRulesText(h *nrs.Head) string {
	var b strings.Builder
	b.WriteString("regular_requests:")
	for _, r := range h.Rules() {
		b.WriteString("\n")
		b.WriteString(r.String())
	}
	return b.String()
}

// serviceStatsText formats a service's stats file: one line per opcode,
// its service times in usecs.
func serviceStatsText(st ptlrpc.ServiceStats, since time.Time) string {
	out := params.NewStats(since)
	ops := make([]int, 0, len(st.Ops))
	for op := range st.Ops {
		ops = append(ops, int(op))
	}
	slices.Sort(ops)
	var wait ofd.SizeStats
	for _, op := range ops {
		s := st.Ops[wire.Opcode(op)]
		if s.Count == 0 {
			continue
		}
		lo, hi := uint64(s.MinQueueTime.Microseconds()), uint64(s.MaxQueueTime.Microseconds())
		if wait.Count == 0 || lo < wait.Min {
			wait.Min = lo
		}
		wait.Max = max(wait.Max, hi)
		wait.Count += s.Count
		wait.Sum += uint64(s.QueueTime.Microseconds())
	}
	out.Sum("req_waittime", wait.Count, "usec", wait.Min, wait.Max, wait.Sum)
	out.Count("req_busy", st.Busy, "reqs")
	out.Count("req_direct", st.Direct, "reqs") // handled by the goroutine that received them
	out.Count("req_timeout", st.EarlyReplies, "reqs")
	for _, op := range ops {
		s := st.Ops[wire.Opcode(op)]
		out.Sum(strings.ToLower(wire.Opcode(op).String()), s.Count, "usec",
			uint64(s.MinServiceTime.Microseconds()), uint64(s.MaxServiceTime.Microseconds()), uint64(s.ServiceTime.Microseconds()))
	}
	return out.String()
}

// registerOSS registers the OSS's service and device.
func (s *Storage) registerOSS() {
	s.params.keep(s.params.reg.RegisterDevice(params.Device{Type: "ost", Name: "OSS", UUID: "OSS_uuid"}))
	lo, hi := s.OSS.Threads()
	s.addParams(true, serviceParams("ost.OSS.ost_io.", s.OSS.Service(), lo, hi, s.params.since)...)
}

// registerMGC lists the MGS a target registers with as an mgc device
// (its name, MGC and the first MGS address, is how lctl set_param -P
// finds the MGS).
func (s *Storage) registerMGC(id TargetIdentity) {
	if len(id.MGSNodes) > 0 {
		s.params.keep(s.params.reg.RegisterDevice(params.Device{Type: "mgc", Name: "MGC" + id.MGSNodes[0], UUID: strings.Join(id.MGSNodes, ",")}))
	}
}

// registerOST registers an OST's device and parameters.
func (s *Storage) registerOST(o *ofd.OFD, id TargetIdentity, dir string) {
	s.registerMGC(id)
	name := id.Label
	p := "obdfilter." + name + "."
	tgt := o.Target()
	s.params.keep(s.params.reg.RegisterDevice(params.Device{Type: "obdfilter", Name: name, UUID: id.UUID,
		Refs: func() int { return 1 + len(tgt.Exports()) }}))
	s.addParams(false,
		params.ReadOnly(p+"stats", "requests served and bulk bytes", func() string { return ofdStatsText(o.Stats()) }),
		params.ReadOnly(p+"tot_granted", "grant held by clients, bytes", func() string { return strconv.FormatUint(o.Stats().Granted, 10) }),
		params.ReadOnly(p+"num_exports", "clients connected", func() string { return strconv.Itoa(len(tgt.Exports())) }),
		params.ReadOnly(p+"uuid", "the target's uuid", func() string { return id.UUID }),
		params.ReadOnly(p+"recovery_status", "recovery after a restart", func() string { return recoveryText(tgt) }),
		s.abortRecoveryParam(p, name, tgt),
		s.replayBarrierParam(p, name, func(d string) error { return o.ReplayBarrier(context.Background(), d) }, dir),
		jobStatsParam(p+"job_stats", o.JobStats(), "read_bytes", "write_bytes"),
		params.Bool(p+"sync_journal", "commit every modifying request before its reply", o.SyncJournal,
			func(on bool) error { o.SetSyncJournal(on); return nil }),
		params.Bool(p+"degraded", "give this OST new objects only when too few others can take them", o.Degraded,
			func(on bool) error { o.SetDegraded(on); return nil }),
	)
	s.addParams(false, exportParams(p, tgt)...)
	s.addParams(false, s.mmpParams(p, id)...)
	s.addParams(false, lockServerParams("filter-"+name+"_UUID", o.LockServer(), s.params.since)...)
	if dw, ok := o.Device().(directWriter); ok {
		s.addParams(false, params.Int("osd-file."+name+".direct_write_min_kb",
			"bulk writes of at least this many KiB go around the OSS page cache (O_DIRECT); 0: all through it",
			func() int64 { return int64(dw.DirectWriteMin() >> 10) },
			func(n int64) error { return dw.SetDirectWriteMin(int(n) << 10) },
			0, 1<<20, nil),
			params.Int("osd-file."+name+".direct_read_min_kb",
				"bulk reads of at least this many KiB of data the OSS page cache does not hold go around it (O_DIRECT); 0: all through it",
				func() int64 { return int64(dw.DirectReadMin() >> 10) },
				func(n int64) error { return dw.SetDirectReadMin(int(n) << 10) },
				0, 1<<20, nil))
	}
}

// directWriter is an OSD backend whose bulk I/O can bypass the page cache
// (osd-file).
type directWriter interface {
	DirectWriteMin() int
	SetDirectWriteMin(int) error
	DirectReadMin() int
	SetDirectReadMin(int) error
}

// registerMDS registers the MDS's service and device.
func (s *Storage) registerMDS() {
	s.params.keep(s.params.reg.RegisterDevice(params.Device{Type: "mds", Name: "MDS", UUID: "MDS_uuid"}))
	lo, hi := s.MDS.Threads()
	s.addParams(true, serviceParams("mds.MDS.mdt.", s.MDS.Service(), lo, hi, s.params.since)...)
}

// registerMDT registers an MDT's device and parameters.
func (s *Storage) registerMDT(m *mdt.MDT, id TargetIdentity, dir string) {
	s.registerMGC(id)
	name := id.Label
	p := "mdt." + name + "."
	tgt := m.Target()
	s.addParams(false, s.mmpParams(p, id)...)
	s.params.keep(s.params.reg.RegisterDevice(params.Device{Type: "mdt", Name: name, UUID: id.UUID,
		Refs: func() int { return 1 + len(tgt.Exports()) }}))
	s.addParams(false,
		params.ReadOnly(p+"md_stats", "metadata counters", func() string {
			st := m.Stats()
			out := params.NewStats(s.params.since)
			out.Count("open", uint64(st.Opens), "handles")
			out.Count("precreate", st.Precreated, "objects")
			out.Count("destroy", st.Destroyed, "objects")
			out.Count("destroy_pending", uint64(st.PendingDestroys), "records")
			return out.String()
		}),
		params.ReadOnly(p+"num_exports", "clients connected", func() string { return strconv.Itoa(len(tgt.Exports())) }),
		params.ReadOnly(p+"uuid", "the target's uuid", func() string { return id.UUID }),
		params.ReadOnly(p+"recovery_status", "recovery after a restart", func() string { return recoveryText(tgt) }),
		s.abortRecoveryParam(p, name, tgt),
		s.replayBarrierParam(p, name, m.Store().ReplayBarrier, dir),
		jobStatsParam(p+"job_stats", m.JobStats(), mdtJobOps...),
		changelogUsersParam("mdd."+name+".changelog_users", m.Store()),
	)
	s.addParams(false, lodParams("lod."+name+"-mdtlov.", m)...)
	s.addParams(false, exportParams(p, tgt)...)
	s.addParams(false, lockServerParams("mdt-"+name+"_UUID", m.LockServer(), s.params.since)...)
}

// replayBarrierParam is PREFIX.replay_barrier, Lustre's replay_barrier
// (lctl notransno and readonly) for tests of recovery: 1 copies the
// target's store as it is durable now (save) to replay_barrier under the
// target directory dir, and has the target report no more commits, so
// that its clients keep every later change to replay to the target put
// back as it was (RestoreReplayBarrier).
func (s *Storage) replayBarrierParam(p, name string, save func(dir string) error, dir string) params.Param {
	return params.Bool(p+"replay_barrier", "1 saves the store as it is now and stops reporting commits (recovery tests; see RestoreReplayBarrier)",
		func() bool { return false },
		func(on bool) error {
			if !on {
				return nil
			}
			d := filepath.Join(dir, replayBarrierDir)
			if err := save(d); err != nil {
				return err
			}
			s.log.Warn("replay barrier: the target reports no more commits", "target", name, "saved", d)
			return nil
		})
}

// abortRecoveryParam is PREFIX.abort_recovery, Lustre's lctl --device
// TARGET abort_recovery: 1 stops waiting for the clients of the previous
// life not back yet (they are evicted), and lets the others go on.
func (s *Storage) abortRecoveryParam(p, name string, tgt *ptlrpc.Target) params.Param {
	return params.Bool(p+"abort_recovery", "1 ends the recovery window now", func() bool { return false },
		func(on bool) error {
			if on {
				if n := tgt.EndRecovery(); n > 0 {
					s.log.Warn("recovery aborted", "target", name, "clients_evicted", n)
				}
			}
			return nil
		})
}

// lodParams are the file system's default striping, lod.NAME-mdtlov.*:
// each changes one field of it, for files created from then on.
func lodParams(p string, m *mdt.MDT) []params.Param {
	field := func(name, help string, get func(layout.RAID0) int64, set func(*layout.RAID0, int64), lo, hi int64) params.Param {
		return params.Int(p+name, help, func() int64 { return get(m.DefaultStripe()) },
			func(n int64) error { r := m.DefaultStripe(); set(&r, n); return m.SetDefaultStripe(r) },
			lo, hi, func(n int64) error {
				r := m.DefaultStripe()
				set(&r, n)
				return layout.Plain(r).Validate()
			})
	}
	return []params.Param{
		field("stripesize", "default stripe size of new files, bytes",
			func(r layout.RAID0) int64 { return int64(r.StripeSize) }, func(r *layout.RAID0, n int64) { r.StripeSize = uint32(n) }, 65536, 1<<32-65536),
		field("stripecount", "default stripe count of new files (-1: all OSTs)",
			func(r layout.RAID0) int64 { return int64(r.StripeCount) }, func(r *layout.RAID0, n int64) { r.StripeCount = int32(n) }, -1, 2000),
		field("stripeoffset", "default first OST of new files (-1: the allocator's choice)",
			func(r layout.RAID0) int64 { return int64(r.StripeOffset) }, func(r *layout.RAID0, n int64) { r.StripeOffset = int32(n) }, -1, 65535),
	}
}

// lockServerParams are a server namespace's ldlm.namespaces.NS.*.
func lockServerParams(ns string, ls *ldlm.Server, since time.Time) []params.Param {
	p := "ldlm.namespaces." + ns + "."
	return []params.Param{
		params.ReadOnly(p+"lock_count", "granted locks", func() string { return strconv.Itoa(ls.Stats().Namespace.Granted) }),
		params.ReadOnly(p+"resource_count", "resources with locks", func() string { return strconv.Itoa(ls.Stats().Namespace.Resources) }),
		params.ReadOnly(p+"stats", "lock requests and callbacks", func() string {
			st := ls.Stats()
			out := params.NewStats(since)
			out.Count("ldlm_enqueue", st.Enqueues, "reqs")
			out.Count("ldlm_cancel", st.Cancels, "reqs")
			out.Count("ldlm_convert", st.Converts, "reqs")
			out.Count("ldlm_bl_callback", st.BlockingASTs, "reqs")
			out.Count("ldlm_cp_callback", st.CompletionASTs, "reqs")
			out.Count("ldlm_gl_callback", st.GlimpseASTs, "reqs")
			out.Count("ldlm_glimpse_lock", st.GlimpseLocks, "locks") // glimpses granted as locks
			out.Count("ldlm_timeout", st.CallbackTimeouts, "locks")
			return out.String()
		}),
	}
}

// recoveryText shows a target's recovery state as Lustre's
// recovery_status does: the status; for a target that restarted with a
// recovery window, when it started, the seconds left of it (or its
// length, once over) and the clients of the previous life that came back
// (and, while it waits for known ones, of how many, and those done).
func recoveryText(t *ptlrpc.Target) string {
	return recoveryTextAt(t.RecoveryStatus(), time.Now())
}

// recoveryTextAt is recoveryText's text for st at now.
func recoveryTextAt(st ptlrpc.RecoveryStatus, now time.Time) string {
	var b strings.Builder
	if st.Recovering {
		b.WriteString("status: RECOVERING\n")
	} else {
		b.WriteString("status: COMPLETE\n")
	}
	if st.Start.IsZero() {
		return strings.TrimSuffix(b.String(), "\n")
	}
	fmt.Fprintf(&b, "recovery_start: %d\n", st.Start.Unix())
	if !st.Recovering {
		fmt.Fprintf(&b, "recovery_duration: %d\n", int64(st.End.Sub(st.Start).Round(time.Second)/time.Second))
		fmt.Fprintf(&b, "completed_clients: %d\n", st.Clients)
		// Those the window's end (or abort_recovery) evicted: not back,
		// or not done replaying.
		fmt.Fprintf(&b, "evicted_clients: %d\n", st.Evicted)
		fmt.Fprintf(&b, "replayed_requests: %d", st.Replayed)
		return b.String()
	}
	fmt.Fprintf(&b, "time_remaining: %d\n", int64(math.Ceil(st.End.Sub(now).Seconds())))
	if st.Of < 0 {
		// The clients of the previous life are not known.
		fmt.Fprintf(&b, "connected_clients: %d", st.Clients)
		return b.String()
	}
	// Lustre's: those reconnected, of those expected; those replaying
	// requests, then locks; those done (replayed, connected afresh or
	// gone); the requests replayed in transno order, those waiting for
	// their turn, and the transno whose turn it is.
	fmt.Fprintf(&b, "connected_clients: %d/%d\n", st.Clients, st.Of)
	fmt.Fprintf(&b, "req_replay_clients: %d\n", st.ReqReplay)
	fmt.Fprintf(&b, "lock_repay_clients: %d\n", st.LockReplay) // (sic: Lustre's name)
	fmt.Fprintf(&b, "completed_clients: %d\n", st.Of-st.Waiting)
	fmt.Fprintf(&b, "evicted_clients: %d\n", st.Evicted)
	fmt.Fprintf(&b, "replayed_requests: %d\n", st.Replayed)
	fmt.Fprintf(&b, "queued_requests: %d\n", st.Queued)
	fmt.Fprintf(&b, "next_transno: %d", st.NextTransno)
	return b.String()
}

// ofdStatsText formats obdfilter.*.stats.
func ofdStatsText(st ofd.Stats) string {
	out := params.NewStats(st.Since)
	out.Sum("read_bytes", st.ReadBytes.Count, "bytes", st.ReadBytes.Min, st.ReadBytes.Max, st.ReadBytes.Sum)
	out.Sum("write_bytes", st.WriteBytes.Count, "bytes", st.WriteBytes.Min, st.WriteBytes.Max, st.WriteBytes.Sum)
	ops := make([]int, 0, len(st.Ops))
	for op := range st.Ops {
		ops = append(ops, int(op))
	}
	slices.Sort(ops)
	for _, op := range ops {
		name := strings.ToLower(strings.TrimPrefix(wire.Opcode(op).String(), "OST_"))
		out.Count(name, st.Ops[wire.Opcode(op)], "reqs")
	}
	out.Count("no_space", st.NoSpace, "reqs")
	return out.String()
}

// localParams turns a persistent parameter of the MGS into the names of
// this server's live parameters it applies to, none if it is not a
// server's or no target of this Storage matches.
func (s *Storage) localParams(pn mgs.ParamName, ids []TargetIdentity) []string {
	layer, rest, _ := strings.Cut(pn.Param, ".")
	var out []string
	ossWide := false
	for _, id := range ids {
		if !pn.MatchesFS(id.FSName) {
			continue
		}
		if timeouts.Persistent(pn) {
			return []string{pn.Param} // the node's
		}
		if ok, _ := path.Match(pn.Target, mgs.TargetName(id.Kind, id.Index)); !ok {
			continue
		}
		switch {
		case id.Kind == mgs.KindOST && layer == "ost":
			ossWide = true
		case id.Kind == mgs.KindOST && layer == "obdfilter":
			out = append(out, "obdfilter."+id.Label+"."+rest)
		case id.Kind == mgs.KindMDT && layer == "mdt" && isHSMParam(pn.Param):
			// The coordinator's: the MGS applies them (followHSMParams).
		case id.Kind == mgs.KindMDT && layer == "mdt":
			out = append(out, "mdt."+id.Label+"."+rest)
		case id.Kind == mgs.KindMDT && layer == "lod":
			out = append(out, "lod."+id.Label+"-mdtlov."+rest)
		}
	}
	if ossWide {
		out = append(out, "ost.OSS.ost_io."+rest)
	}
	return out
}

// applyParams sets the persistent parameters of c this Storage has not
// applied at their revision yet, oldest first, through the registry.
// Parameters no layer implements are skipped; a refused value is logged.
func (s *Storage) applyParams(c *mgsv1.ClientConfig, ids []TargetIdentity) {
	s.params.mu.Lock()
	defer s.params.mu.Unlock()
	if s.params.mu.applied == nil {
		s.params.mu.applied = make(map[string]int64)
	}
	var again []func() // node timeouts refused in the log's order
	for _, p := range c.GetParams() {
		if p.GetRevision() <= s.params.mu.applied[p.GetName()] {
			continue
		}
		s.params.mu.applied[p.GetName()] = p.GetRevision()
		pn, err := mgs.ParseParamName(p.GetName())
		if err != nil {
			continue
		}
		nodeWide := timeouts.Persistent(pn)
		for _, n := range s.localParams(pn, ids) {
			if !s.params.reg.SetPersistent(s.log, p.GetName(), p.GetValue(), n, !nodeWide) && nodeWide {
				// One of the node's timeouts, refused for another (at_min
				// above the at_max a later parameter raises): again once
				// the others are in, and at every configuration until
				// it is taken.
				again = append(again, func() {
					if !s.params.reg.SetPersistent(s.log, p.GetName(), p.GetValue(), n, true) {
						delete(s.params.mu.applied, p.GetName())
					}
				})
			}
		}
	}
	for _, set := range again {
		set()
	}
}

// startParams applies the persistent parameters the registrations
// brought, follows the MGS's configuration for more (one watch per file
// system the Storage serves, until Close), and serves the registry on the
// process's socket.
func (s *Storage) startParams(ids []TargetIdentity) {
	s.addParams(true, timeouts.Params()...)
	byFS := map[string]*Registrar{}
	for _, r := range s.regs {
		if _, ok := byFS[r.id.FSName]; !ok {
			byFS[r.id.FSName] = r
		}
		s.applyParams(r.Config(), ids)
	}
	if len(byFS) > 0 {
		ctx, cancel := context.WithCancel(context.Background())
		s.wg.Go(func() {
			<-s.stop
			cancel()
		})
		for _, r := range byFS {
			s.wg.Go(func() {
				r.Watch(ctx, DefaultConfigInterval, func(c *mgsv1.ClientConfig) { s.applyParams(c, ids) }, nil)
			})
		}
	}
	stop, err := params.Serve(context.Background(), s.params.reg)
	if err != nil {
		s.log.Warn("parameters not served to lctl", "err", err)
		return
	}
	s.params.keep(stop)
}

// mdtJobOps are the operations an MDT's job_stats counts, in Lustre's
// order.
var mdtJobOps = []string{"open", "close", "mknod", "link", "unlink", "mkdir", "rmdir", "rename", "getattr",
	"setattr", "getxattr", "setxattr", "statfs", "sync", "readdir", "layout_intent"}

// jobStatsParam is a target's job_stats: Lustre's YAML, cleared by
// writing "clear".
func jobStatsParam(name string, js *jobstats.Stats, ops ...string) params.Param {
	return params.Param{Name: name, Help: "per-job statistics by the clients' jobid_var (write clear to reset)",
		Get: func() (string, error) { return strings.TrimSuffix(js.YAML(ops...), "\n"), nil },
		Validate: func(v string) error {
			if v != "clear" {
				return fmt.Errorf("want clear")
			}
			return nil
		},
		Set: func(string) error { js.Clear(); return nil }}
}

// changelogUsersParam is an MDT's changelog users as Lustre prints
// mdd.*.changelog_users; writing "register" adds a user (lctl
// changelog_register), "deregister clN" removes one.
func changelogUsersParam(name string, st *mdd.Store) params.Param {
	parse := func(v string) (uint32, bool, error) {
		if v == "register" {
			return 0, true, nil
		}
		id, ok := strings.CutPrefix(v, "deregister cl")
		n, err := strconv.ParseUint(id, 10, 32)
		if !ok || err != nil || n == 0 {
			return 0, false, fmt.Errorf("want register or deregister clN")
		}
		return uint32(n), false, nil
	}
	return params.Param{Name: name, Help: "changelog users and how far each has read; write register or deregister clN",
		Get: func() (string, error) {
			var b strings.Builder
			fmt.Fprintf(&b, "current_index: %d\n", st.ChangelogLast())
			fmt.Fprintf(&b, "%-30s %12s\n", "ID", "purge_index")
			for _, u := range st.ChangelogUsers() {
				fmt.Fprintf(&b, "%-30s %12d\n", "cl"+strconv.FormatUint(uint64(u.ID), 10), u.Cleared)
			}
			return strings.TrimSuffix(b.String(), "\n"), nil
		},
		Validate: func(v string) error { _, _, err := parse(v); return err },
		Set: func(v string) error {
			id, reg, err := parse(v)
			if err != nil {
				return err
			}
			if reg {
				_, err = st.ChangelogRegister()
				return err
			}
			return st.ChangelogDeregister(id)
		}}
}

// exportParams are a target's clients (exports: uuid, NID, connection
// count, last request) and evict_client, which evicts one by uuid (or
// "nid:NID", every client from that NID), as Lustre's
// obdfilter.*.evict_client and mdt.*.evict_client do.
func exportParams(prefix string, tgt *ptlrpc.Target) []params.Param {
	return []params.Param{
		params.ReadOnly(prefix+"exports", "connected clients: uuid, nid, connection count, seconds since the last request", func() string {
			var b strings.Builder
			for _, e := range tgt.Exports() {
				fmt.Fprintf(&b, "%s %s conn=%d idle=%ds\n", e.UUID, e.Peer.NID, e.ConnCount, int(time.Since(e.LastSeen).Seconds()))
			}
			return strings.TrimSuffix(b.String(), "\n")
		}),
		{Name: prefix + "evict_client", Help: "write a client uuid (or nid:NID) to evict it",
			Get: func() (string, error) { return "", nil },
			Validate: func(v string) error {
				if v == "" {
					return fmt.Errorf("want a client uuid or nid:NID")
				}
				for _, e := range tgt.Exports() {
					if e.UUID == v || "nid:"+e.Peer.NID.String() == v {
						return nil
					}
				}
				return fmt.Errorf("no client %q on %s", v, tgt.Name())
			},
			Set: func(v string) error {
				for _, e := range tgt.Exports() {
					if e.UUID == v || "nid:"+e.Peer.NID.String() == v {
						if err := tgt.Evict(e.UUID); err != nil {
							return err
						}
					}
				}
				return nil
			}},
	}
}

// mmpParams are a target's TARGET.mmp (its multiple-mount protection, if
// it has any) and failover_nids (the other servers that may serve it).
func (s *Storage) mmpParams(p string, id TargetIdentity) []params.Param {
	out := []params.Param{params.ReadOnly(p+"failover_nids", "the other servers that may serve the target (mkfs/tunefs --servicenode, --failnode)",
		func() string { return strings.Join(failoverNIDs(id.FailNodes, s.curNIDs()), ",") })}
	g := s.guardBy[id.Label]
	if g == nil {
		return out
	}
	return append(out, params.ReadOnly(p+"mmp", "multiple-mount protection: this server's heartbeat in the target's MMP block", func() string {
		st := g.Status()
		return fmt.Sprintf("seq: %#x\nlast_write: %s (%v ago)\ninterval: %v\nrecorded_interval: %v\nlost: %v\n",
			st.Seq, st.LastWrite.UTC().Format(time.RFC3339Nano), time.Since(st.LastWrite).Round(time.Millisecond), id.MMPInterval, st.Recorded, st.Lost)
	}))
}
