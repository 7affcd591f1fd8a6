package admin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nacrefs/nacre/internal/errs"
	"github.com/nacrefs/nacre/mgs"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
	"github.com/nacrefs/nacre/services/rpcstatus"
)

// The cluster's live state: targets from the resource database, their
// figures from the status ports of the servers serving them (see
// StatePath), merged at each request.

// targetKey orders targets as the overview lists them: MDTs, then OSTs,
// by index.
func targetKey(t mgs.Target) string {
	k := "1"
	if t.Kind == mgs.KindMDT {
		k = "0"
	}
	return fmt.Sprintf("%s%05d", k, t.Index)
}

// GetClusterOverview implements adminv1.AdminServer.
func (s *Server) GetClusterOverview(ctx context.Context, req *adminv1.GetClusterOverviewRequest) (*adminv1.ClusterOverview, error) {
	md := (&adminv1.ClusterOverview{}).ProtoReflect().Descriptor()
	mask, err := parseMask(md, req.GetReadMask(), nil)
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	// Without a mask, everything but the per-client detail.
	withClients := len(req.GetReadMask().GetPaths()) > 0 && mask.has("targets", "clients")
	v, err := s.gather(ctx, req.GetFsname(), nil, &adminv1.ServerStateRequest{Clients: withClients})
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	out := &adminv1.ClusterOverview{Fsname: v.fsname, Time: timestamppb.Now(), Total: &adminv1.Usage{},
		TotalIo: &adminv1.TargetIO{Ops: map[string]uint64{}}}
	all := make([]*adminv1.TargetStatus, 0, len(v.targets))
	for _, t := range v.targets {
		ts := &adminv1.TargetStatus{Name: t.Label(), Kind: mgsv1.TargetKind(t.Kind), Index: t.Index, Nids: t.NIDs,
			Server: t.StatusAddr, State: mgsv1.TargetState_TARGET_STATE_DOWN}
		if t.Up {
			ts.State = mgsv1.TargetState_TARGET_STATE_UP
			out.TargetsUp++
		} else {
			out.TargetsDown++
		}
		l, err := v.live(t)
		if err != nil {
			ts.LiveError = err.Error()
			all = append(all, ts)
			continue
		}
		ts.Usage, ts.ConnectedClients, ts.Recovery, ts.Io = l.GetUsage(), l.GetConnectedClients(), l.GetRecovery(), l.GetIo()
		if withClients {
			ts.Clients = l.GetClients()
		}
		if l.GetError() != "" {
			ts.LiveError = l.GetError()
		}
		switch t.Kind {
		case mgs.KindOST:
			addUsage(out.Total, ts.Usage)
			addIO(out.TotalIo, ts.Io)
		case mgs.KindMDT:
			// Every mount connects to every MDT.
			out.Clients = max(out.Clients, ts.ConnectedClients)
		}
		all = append(all, ts)
	}
	for _, sv := range v.servers {
		out.Servers = append(out.Servers, serverStatus(v, sv))
	}
	keys := make(map[*adminv1.TargetStatus]string, len(all))
	for i, t := range v.targets {
		keys[all[i]] = targetKey(t)
	}
	out.Targets, out.NextPageToken, err = page(all, func(t *adminv1.TargetStatus) string { return keys[t] },
		req.GetPageSize(), req.GetPageToken(), "overview:"+v.fsname)
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	next := out.NextPageToken
	mask.apply(out.ProtoReflect())
	out.NextPageToken = next // paging works whatever the mask
	return out, nil
}

// serverStatus is what the overview says of one server.
func serverStatus(v *clusterView, sv *serverView) *adminv1.ServerStatus {
	st := &adminv1.ServerStatus{Address: sv.addr}
	if sv.err != nil {
		st.Error = sv.err.Error()
		return st
	}
	st.Pid, st.Lnet = sv.state.GetPid(), sv.state.GetLnet()
	for _, t := range v.targets {
		if t.StatusAddr == sv.addr && t.Up {
			st.Targets = append(st.Targets, t.Label())
		}
	}
	return st
}

func addUsage(sum, u *adminv1.Usage) {
	if u == nil {
		return
	}
	sum.TotalBytes += u.GetTotalBytes()
	sum.FreeBytes += u.GetFreeBytes()
	sum.AvailBytes += u.GetAvailBytes()
	sum.TotalInodes += u.GetTotalInodes()
	sum.FreeInodes += u.GetFreeInodes()
	sum.AvailInodes += u.GetAvailInodes()
}

func addIO(sum, io *adminv1.TargetIO) {
	if io == nil {
		return
	}
	sum.ReadBytes += io.GetReadBytes()
	sum.WriteBytes += io.GetWriteBytes()
	sum.ReadOps += io.GetReadOps()
	sum.WriteOps += io.GetWriteOps()
	for op, n := range io.GetOps() {
		sum.Ops[op] += n
	}
}

// oneTarget reads the live state of one target, for the lists of one
// target's detail.
func (s *Server) oneTarget(ctx context.Context, fsname, name string, req *adminv1.ServerStateRequest) (mgs.Target, *adminv1.TargetLive, error) {
	t, err := s.store.GetTarget(ctx, fsname, name)
	if err != nil {
		return t, nil, err
	}
	v, err := s.gather(ctx, fsname, &t, req)
	if err != nil {
		return t, nil, err
	}
	l, err := v.live(t)
	if err != nil {
		return t, nil, errs.Errorf(errs.Unavailable, "%v", err)
	}
	return t, l, nil
}

// ListTargetClients implements adminv1.AdminServer.
func (s *Server) ListTargetClients(ctx context.Context, req *adminv1.ListTargetClientsRequest) (*adminv1.ListTargetClientsResponse, error) {
	t, l, err := s.oneTarget(ctx, req.GetFsname(), req.GetName(), &adminv1.ServerStateRequest{Clients: true})
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	cs := slices.Clone(l.GetClients())
	slices.SortFunc(cs, func(a, b *adminv1.ClientStats) int { return strings.Compare(a.GetUuid(), b.GetUuid()) })
	out := &adminv1.ListTargetClientsResponse{}
	out.Clients, out.NextPageToken, err = page(cs, (*adminv1.ClientStats).GetUuid, req.GetPageSize(), req.GetPageToken(), "clients:"+t.Label())
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	return out, nil
}

// ListJobStats implements adminv1.AdminServer.
func (s *Server) ListJobStats(ctx context.Context, req *adminv1.ListJobStatsRequest) (*adminv1.ListJobStatsResponse, error) {
	var only *mgs.Target
	query := "jobs:" + req.GetFsname()
	if req.GetTarget() != "" {
		t, err := s.store.GetTarget(ctx, req.GetFsname(), req.GetTarget())
		if err != nil {
			return nil, rpcstatus.Error(err)
		}
		only, query = &t, "jobs:"+t.Label()
	}
	v, err := s.gather(ctx, req.GetFsname(), only, &adminv1.ServerStateRequest{Jobs: true})
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	var jobs []*adminv1.JobStats
	for _, t := range v.targets {
		if only != nil && (t.Kind != only.Kind || t.Index != only.Index) {
			continue
		}
		l, err := v.live(t)
		if err != nil {
			if !t.Up {
				continue // a target down has no job stats to lose
			}
			return nil, rpcstatus.Error(errs.Errorf(errs.Unavailable, "job stats: %v", err))
		}
		jobs = append(jobs, l.GetJobs()...)
	}
	key := func(j *adminv1.JobStats) string { return j.GetTarget() + "\x00" + j.GetJobId() }
	slices.SortFunc(jobs, func(a, b *adminv1.JobStats) int { return strings.Compare(key(a), key(b)) })
	out := &adminv1.ListJobStatsResponse{}
	out.Jobs, out.NextPageToken, err = page(jobs, key, req.GetPageSize(), req.GetPageToken(), query)
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	return out, nil
}

// ListServers implements adminv1.AdminServer.
func (s *Server) ListServers(ctx context.Context, req *adminv1.ListServersRequest) (*adminv1.ListServersResponse, error) {
	v, err := s.gather(ctx, req.GetFsname(), nil, &adminv1.ServerStateRequest{})
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	all := make([]*adminv1.ServerStatus, 0, len(v.servers))
	for _, sv := range v.servers {
		all = append(all, serverStatus(v, sv))
	}
	out := &adminv1.ListServersResponse{}
	out.Servers, out.NextPageToken, err = page(all, (*adminv1.ServerStatus).GetAddress, req.GetPageSize(), req.GetPageToken(), "servers:"+v.fsname)
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	return out, nil
}

// ListLNetPeers implements adminv1.AdminServer.
func (s *Server) ListLNetPeers(ctx context.Context, req *adminv1.ListLNetPeersRequest) (*adminv1.ListLNetPeersResponse, error) {
	v, err := s.gather(ctx, req.GetFsname(), nil, &adminv1.ServerStateRequest{Peers: true})
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	var peers []*adminv1.LNetPeer
	for _, sv := range v.servers {
		if sv.err != nil {
			return nil, rpcstatus.Error(errs.Errorf(errs.Unavailable, "lnet peers: %v", sv.err))
		}
		for _, p := range sv.state.GetPeers() {
			p.Server = sv.addr
			peers = append(peers, p)
		}
	}
	key := func(p *adminv1.LNetPeer) string { return p.GetServer() + "\x00" + p.GetNid() }
	slices.SortFunc(peers, func(a, b *adminv1.LNetPeer) int { return strings.Compare(key(a), key(b)) })
	out := &adminv1.ListLNetPeersResponse{}
	out.Peers, out.NextPageToken, err = page(peers, key, req.GetPageSize(), req.GetPageToken(), "peers:"+v.fsname)
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	return out, nil
}

// ListChangelogUsers implements adminv1.AdminServer.
func (s *Server) ListChangelogUsers(ctx context.Context, req *adminv1.ListChangelogUsersRequest) (*adminv1.ListChangelogUsersResponse, error) {
	v, err := s.gather(ctx, req.GetFsname(), nil, &adminv1.ServerStateRequest{})
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	byKey := map[string]*adminv1.ChangelogUser{}
	for _, t := range v.targets {
		if t.Kind != mgs.KindMDT {
			continue
		}
		l, err := v.live(t)
		if err != nil {
			return nil, rpcstatus.Error(errs.Errorf(errs.Unavailable, "changelog users: %v", err))
		}
		for _, u := range l.GetChangelogUsers() {
			var n uint64
			fmt.Sscanf(u.GetId(), "cl%d", &n)
			byKey[fmt.Sprintf("%s\x00%010d", targetKey(t), n)] = u
		}
	}
	keys := slices.Sorted(maps.Keys(byKey))
	users := make([]*adminv1.ChangelogUser, len(keys))
	keyOf := make(map[*adminv1.ChangelogUser]string, len(keys))
	for i, k := range keys {
		users[i], keyOf[byKey[k]] = byKey[k], k
	}
	out := &adminv1.ListChangelogUsersResponse{}
	out.Users, out.NextPageToken, err = page(users, func(u *adminv1.ChangelogUser) string { return keyOf[u] },
		req.GetPageSize(), req.GetPageToken(), "changelog:"+v.fsname)
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	return out, nil
}
