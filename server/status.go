package server

import (
	"context"
	crand "crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/jobstats"
	"github.com/nacrefs/nacre/internal/params"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
	"github.com/nacrefs/nacre/services/admin"
)

// A server's status port is an HTTP listener serving its Prometheus
// metrics at /metrics and its live state (adminv1.ServerState, read from
// the layers at each request) at admin.StatePath. Its address goes to the
// MGS with every target's registration, which is how the Admin API and
// the gateway reach the live state of every server: the counters stay in
// the layers that keep them, and nothing copies them.

// startStatus serves the status port on addr (nothing if addr is empty)
// until Close, with the server's metrics in reg (nil: a fresh registry
// with the Go and process collectors).
func (s *Storage) startStatus(addr string, reg *prometheus.Registry) error {
	if addr == "" {
		return nil
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if err := s.RegisterMetrics(reg); err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		// Another server of this host has the port: serve on, without
		// metrics and live state (the overview says so).
		s.log.Warn("status port not served: no metrics or live state for the admin API", "addr", addr, "err", err)
		return nil
	}
	var tok [32]byte
	crand.Read(tok[:])
	s.statusToken = hex.EncodeToString(tok[:])
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET "+admin.StatePath, s.serveState)
	mux.HandleFunc("POST "+admin.ParamsPath, s.serveParams)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	s.status = s.advertise(l.Addr().(*net.TCPAddr))
	s.wg.Go(func() {
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("status port stopped", "addr", s.status, "err", err)
		}
	})
	s.wg.Go(func() {
		<-s.stop
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
	})
	s.log.Info("status port", "addr", s.status)
	return nil
}

// advertise is the address the MGS should reach the status port at: the
// bound one, or, bound to every interface (0.0.0.0:PORT), the address of
// the server's first NID that has one.
func (s *Storage) advertise(a *net.TCPAddr) string {
	if a.IP.IsUnspecified() && s.LNet != nil {
		for _, n := range s.LNet.NIDs() {
			if n.Net.Type != lwire.LO && n.Addr.IsValid() && !n.Addr.IsUnspecified() {
				return net.JoinHostPort(n.Addr.String(), strconv.Itoa(a.Port))
			}
		}
	}
	return a.String()
}

// StatusAddr is the bound address of the server's status port, "" if it
// has none.
func (s *Storage) StatusAddr() string { return s.status }

// StatusPort is a server's status port as its registrations give it to
// the MGS: the address, and the bearer token changes made there need.
type StatusPort struct{ Addr, Token string }

// StatusPort is the status port the server registers with its targets.
func (s *Storage) StatusPort() StatusPort { return StatusPort{Addr: s.status, Token: s.statusToken} }

// serveParams answers POST admin.ParamsPath: one params.Request (JSON) on
// the server's registry, as its lctl socket answers it, for the admin
// API's cluster-wide get_param, set_param and dl. It needs the status
// token the server gave the MGS: parameters change the server's
// behaviour (evict_client) and may name clients.
func (s *Storage) serveParams(w http.ResponseWriter, r *http.Request) {
	got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.statusToken)) != 1 {
		s.log.Info("status port: parameters request without the token", "from", r.RemoteAddr)
		http.Error(w, "parameters need the server's status token", http.StatusUnauthorized)
		return
	}
	var req params.Request
	if err := json.NewDecoder(io.LimitReader(r.Body, admin.MaxParamsRequest)).Decode(&req); err != nil {
		http.Error(w, "parameters request: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp := params.Handle(s.params.reg, req)
	if resp.Error != nil && req.Op == "set" && !req.DryRun {
		s.log.Info("set_param from the admin API refused", "err", resp.Error.Reason)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// serveState answers GET admin.StatePath: the server's state as
// application/x-protobuf, or protojson with format=json (for people).
func (s *Storage) serveState(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	flag := func(name string) bool { b, _ := strconv.ParseBool(q.Get(name)); return b }
	st := s.State(r.Context(), &adminv1.ServerStateRequest{Clients: flag("clients"), Jobs: flag("jobs"), Peers: flag("peers")})
	var b []byte
	var err error
	if q.Get("format") == "json" {
		w.Header().Set("Content-Type", "application/json")
		b, err = protojson.MarshalOptions{UseProtoNames: true}.Marshal(st)
	} else {
		w.Header().Set("Content-Type", admin.StateContentType)
		b, err = proto.Marshal(st)
	}
	if err != nil {
		http.Error(w, "state: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Write(b)
}

// State reads the server's live state from its layers: every target's
// usage, clients, recovery and I/O, and LNet's counters; with req's
// flags, per-client detail, job stats and LNet peers too. Safe for
// concurrent use.
func (s *Storage) State(ctx context.Context, req *adminv1.ServerStateRequest) *adminv1.ServerState {
	out := &adminv1.ServerState{Pid: int64(os.Getpid()), Time: timestamppb.Now()}
	if s.MDS != nil {
		for _, m := range s.MDS.MDTs() {
			t := &adminv1.TargetLive{Name: m.Name(), Io: &adminv1.TargetIO{Ops: m.OpStats()}}
			if sfs, err := m.Statfs(); err != nil {
				t.Error = fmt.Sprintf("statfs: %v", err)
			} else {
				bs := uint64(sfs.Bsize)
				t.Usage = &adminv1.Usage{TotalBytes: sfs.Blocks * bs, FreeBytes: sfs.Bfree * bs, AvailBytes: sfs.Bavail * bs,
					TotalInodes: sfs.Files, FreeInodes: sfs.Ffree, AvailInodes: sfs.Ffree}
			}
			liveTarget(t, m.Target(), req, m.JobStats())
			last := m.Store().ChangelogLast()
			for _, u := range m.Store().ChangelogUsers() {
				t.ChangelogUsers = append(t.ChangelogUsers, &adminv1.ChangelogUser{Target: m.Name(),
					Id: "cl" + strconv.FormatUint(uint64(u.ID), 10), PurgeIndex: u.Cleared, CurrentIndex: last})
			}
			out.Targets = append(out.Targets, t)
		}
	}
	if s.OSS != nil {
		for _, o := range s.OSS.OSTs() {
			tgt := o.Target()
			st := o.Stats()
			io := &adminv1.TargetIO{ReadBytes: st.ReadBytes.Sum, WriteBytes: st.WriteBytes.Sum, ReadOps: st.ReadBytes.Count,
				WriteOps: st.WriteBytes.Count, Ops: opNames(st.Ops)}
			t := &adminv1.TargetLive{Name: tgt.Name(), Io: io}
			if sfs, err := o.Statfs(ctx); err != nil {
				t.Error = fmt.Sprintf("statfs: %v", err)
			} else {
				bs := uint64(sfs.BSize)
				t.Usage = &adminv1.Usage{TotalBytes: sfs.Blocks * bs, FreeBytes: sfs.BFree * bs, AvailBytes: sfs.BAvail * bs,
					TotalInodes: sfs.Files, FreeInodes: sfs.FFree, AvailInodes: sfs.FFree}
			}
			liveTarget(t, tgt, req, o.JobStats())
			out.Targets = append(out.Targets, t)
		}
	}
	if s.LNet != nil {
		ls := s.LNet.Stats()
		out.Lnet = &adminv1.LNetStats{Mds: int64(ls.MDs), Pending: int64(ls.Pending), Peers: int64(len(ls.Peers))}
		for _, ni := range ls.NIs {
			status := "up"
			if ni.Status == lwire.NIStatusDown {
				status = "down"
			}
			out.Lnet.Nis = append(out.Lnet.Nis, &adminv1.LNetNI{Nid: ni.NID.String(), Status: status, Credits: int64(ni.Credits),
				MinCredits: int64(ni.MinCredits), Queued: int64(ni.Queued), Health: int64(ni.Health),
				SendCount: ni.SendCount, SendBytes: ni.SendBytes, SendErrors: ni.SendErrors,
				RecvCount: ni.RecvCount, RecvBytes: ni.RecvBytes, DropCount: ni.DropCount, DropBytes: ni.DropBytes})
		}
		if req.GetPeers() {
			for _, p := range ls.Peers {
				out.Peers = append(out.Peers, &adminv1.LNetPeer{Nid: p.NID.String(), Credits: int64(p.Credits),
					MinCredits: int64(p.MinCredits), MaxCredits: int64(p.MaxCredits), Queued: int64(p.Queued), Health: int64(p.Health),
					SendCount: p.SendCount, SendBytes: p.SendBytes, RecvCount: p.RecvCount, RecvBytes: p.RecvBytes})
			}
		}
	}
	return out
}

// liveTarget fills in what every target has: clients, recovery, and on
// request the per-client detail and job stats.
func liveTarget(t *adminv1.TargetLive, tgt *ptlrpc.Target, req *adminv1.ServerStateRequest, js *jobstats.Stats) {
	exps := tgt.Exports()
	t.ConnectedClients = uint32(len(exps))
	t.Recovery = adminv1.RecoveryState_RECOVERY_STATE_COMPLETE
	if tgt.Recovering() {
		t.Recovery = adminv1.RecoveryState_RECOVERY_STATE_RECOVERING
	}
	if req.GetClients() {
		for _, e := range exps {
			t.Clients = append(t.Clients, &adminv1.ClientStats{Uuid: e.UUID, Nid: e.Peer.NID.String(), ConnectionCount: e.ConnCount,
				LastRequestTime: timestamppb.New(e.LastSeen), Ops: opNames(e.Ops), ReadBytes: e.ReadBytes, WriteBytes: e.WriteBytes})
		}
	}
	if req.GetJobs() {
		jobs := js.Jobs()
		slices.SortFunc(jobs, func(a, b jobstats.Job) int { return strings.Compare(a.ID, b.ID) })
		for _, j := range jobs {
			p := &adminv1.JobStats{Target: tgt.Name(), JobId: j.ID, SnapshotTime: timestamppb.New(j.Snapshot),
				Ops: make(map[string]*adminv1.JobCounter, len(j.Ops))}
			for op, c := range j.Ops {
				p.Ops[op] = &adminv1.JobCounter{Unit: c.Unit, Samples: c.Samples, Min: c.Min, Max: c.Max, Sum: c.Sum}
			}
			t.Jobs = append(t.Jobs, p)
		}
	}
}

// opNames names request counts by opcode as Lustre's stats files do
// ("ost_write", "mds_reint").
func opNames(ops map[wire.Opcode]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(ops))
	for op, n := range ops {
		out[strings.ToLower(op.String())] = n
	}
	return out
}
