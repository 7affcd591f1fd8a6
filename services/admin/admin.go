// Package admin serves the Admin gRPC service, the operator's view of the
// resource database and of the cluster's live state, which the gateway
// also exposes as REST. It converts between the wire and package mgs; the
// rules live there. The live state (usage, clients, I/O, job stats, LNet)
// it reads at each request from the status port of every server, whose
// address the server registered with its targets (StatePath).
package admin

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/nacrefs/nacre/internal/errs"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/mgs"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
	"github.com/nacrefs/nacre/services/mgssvc"
	"github.com/nacrefs/nacre/services/rpcstatus"
)

// Server implements adminv1.AdminServer. Safe for concurrent use.
type Server struct {
	adminv1.UnimplementedAdminServer
	store  *mgs.Store
	params *params.Registry
	log    *slog.Logger
	// nodes reads the servers' state on their status ports.
	nodes *stateClient
}

var _ adminv1.AdminServer = (*Server)(nil)

// New returns a Server over store, whose live parameters and devices are
// those of reg (nil: params.Default, the process's registry).
func New(store *mgs.Store, reg *params.Registry, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = params.Default
	}
	return &Server{store: store, params: reg, log: log.With("service", "admin"), nodes: newStateClient()}
}

// MethodPolicy is the authorization table of the Admin service: every method
// needs a token; those not named Get/List/Health change state. Other
// services (MGS, health, reflection) are not token-guarded.
func MethodPolicy(fullMethod string) (guarded, mutating bool) {
	prefix := "/" + adminv1.Admin_ServiceDesc.ServiceName + "/"
	name, ok := strings.CutPrefix(fullMethod, prefix)
	if !ok {
		return false, false
	}
	readOnly := strings.HasPrefix(name, "Get") || strings.HasPrefix(name, "List") || name == "Health"
	return true, !readOnly
}

// ListFilesystems implements adminv1.AdminServer.
func (s *Server) ListFilesystems(ctx context.Context, _ *adminv1.ListFilesystemsRequest) (*adminv1.ListFilesystemsResponse, error) {
	list, err := s.store.ListFilesystems(ctx)
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	out := &adminv1.ListFilesystemsResponse{Filesystems: make([]*mgsv1.Filesystem, 0, len(list))}
	for _, fs := range list {
		out.Filesystems = append(out.Filesystems, mgssvc.FilesystemProto(fs))
	}
	return out, nil
}

// GetFilesystem implements adminv1.AdminServer.
func (s *Server) GetFilesystem(ctx context.Context, req *adminv1.GetFilesystemRequest) (*mgsv1.Filesystem, error) {
	fs, err := s.store.GetFilesystem(ctx, req.GetName())
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	return mgssvc.FilesystemProto(fs), nil
}

// CreateFilesystem implements adminv1.AdminServer.
func (s *Server) CreateFilesystem(ctx context.Context, req *adminv1.CreateFilesystemRequest) (*mgsv1.Filesystem, error) {
	fs, err := s.store.CreateFilesystem(ctx, req.GetName())
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	return mgssvc.FilesystemProto(fs), nil
}

// ListTargets implements adminv1.AdminServer.
func (s *Server) ListTargets(ctx context.Context, req *adminv1.ListTargetsRequest) (*adminv1.ListTargetsResponse, error) {
	ts, err := s.store.ListTargets(ctx, req.GetFsname())
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	out := &adminv1.ListTargetsResponse{Targets: make([]*mgsv1.Target, 0, len(ts))}
	for _, t := range ts {
		out.Targets = append(out.Targets, mgssvc.TargetProto(t))
	}
	return out, nil
}

// GetTarget implements adminv1.AdminServer.
func (s *Server) GetTarget(ctx context.Context, req *adminv1.GetTargetRequest) (*mgsv1.Target, error) {
	t, err := s.store.GetTarget(ctx, req.GetFsname(), req.GetName())
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	return mgssvc.TargetProto(t), nil
}

// GetParam implements adminv1.AdminServer.
func (s *Server) GetParam(ctx context.Context, req *adminv1.GetParamRequest) (*mgsv1.Param, error) {
	p, err := s.store.GetParam(ctx, req.GetName())
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	return mgssvc.ParamProto(p), nil
}

// SetParam implements adminv1.AdminServer.
func (s *Server) SetParam(ctx context.Context, req *adminv1.SetParamRequest) (*mgsv1.Param, error) {
	p, err := s.store.SetParam(ctx, req.GetName(), req.GetValue())
	if err != nil {
		s.log.Info("set_param refused", "param", req.GetName(), "err", err)
		return nil, rpcstatus.Error(err)
	}
	return mgssvc.ParamProto(p), nil
}

// ListParams implements adminv1.AdminServer.
func (s *Server) ListParams(ctx context.Context, req *adminv1.ListParamsRequest) (*adminv1.ListParamsResponse, error) {
	ps, err := s.store.ListParams(ctx, req.GetPattern())
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	out := &adminv1.ListParamsResponse{Params: make([]*mgsv1.Param, 0, len(ps))}
	for _, p := range ps {
		out.Params = append(out.Params, mgssvc.ParamProto(p))
	}
	return out, nil
}

// DeleteParam implements adminv1.AdminServer.
func (s *Server) DeleteParam(ctx context.Context, req *adminv1.DeleteParamRequest) (*adminv1.DeleteParamResponse, error) {
	if err := s.store.DeleteParam(ctx, req.GetName()); err != nil {
		return nil, rpcstatus.Error(err)
	}
	return &adminv1.DeleteParamResponse{}, nil
}

// ListPools implements adminv1.AdminServer.
func (s *Server) ListPools(ctx context.Context, req *adminv1.ListPoolsRequest) (*adminv1.ListPoolsResponse, error) {
	ps, err := s.store.ListPools(ctx, req.GetFsname())
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	out := &adminv1.ListPoolsResponse{Pools: make([]*mgsv1.Pool, 0, len(ps))}
	for _, p := range ps {
		out.Pools = append(out.Pools, mgssvc.PoolProto(p))
	}
	return out, nil
}

// CreatePool implements adminv1.AdminServer.
func (s *Server) CreatePool(ctx context.Context, req *adminv1.CreatePoolRequest) (*mgsv1.Pool, error) {
	p, err := s.store.CreatePool(ctx, req.GetFsname(), req.GetName())
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	return mgssvc.PoolProto(p), nil
}

// AddToPool implements adminv1.AdminServer.
func (s *Server) AddToPool(ctx context.Context, req *adminv1.AddToPoolRequest) (*mgsv1.Pool, error) {
	p, err := s.store.AddToPool(ctx, req.GetFsname(), req.GetName(), req.GetOsts())
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	return mgssvc.PoolProto(p), nil
}

// RemoveFromPool implements adminv1.AdminServer.
func (s *Server) RemoveFromPool(ctx context.Context, req *adminv1.RemoveFromPoolRequest) (*mgsv1.Pool, error) {
	p, err := s.store.RemoveFromPool(ctx, req.GetFsname(), req.GetName(), req.GetOsts())
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	return mgssvc.PoolProto(p), nil
}

// DestroyPool implements adminv1.AdminServer.
func (s *Server) DestroyPool(ctx context.Context, req *adminv1.DestroyPoolRequest) (*adminv1.DestroyPoolResponse, error) {
	if err := s.store.DestroyPool(ctx, req.GetFsname(), req.GetName()); err != nil {
		return nil, rpcstatus.Error(err)
	}
	return &adminv1.DestroyPoolResponse{}, nil
}

// Health implements adminv1.AdminServer. It answers even when etcd does not.
func (s *Server) Health(ctx context.Context, _ *adminv1.HealthRequest) (*adminv1.HealthResponse, error) {
	ok, rev, members := s.store.Health(ctx)
	out := &adminv1.HealthResponse{Status: "ok", Revision: rev}
	if !ok {
		out.Status = "degraded"
	}
	for _, m := range members {
		out.Etcd = append(out.Etcd, &adminv1.EtcdMember{Endpoint: m.Endpoint, Healthy: m.Healthy, Error: m.Err})
	}
	return out, nil
}

// paramsError gives a registry error its kind, for the status code.
func paramsError(err error) error {
	var pe *params.Error
	if errors.As(err, &pe) {
		return rpcstatus.Error(errs.Errorf(pe.ErrKind(), "%w", err))
	}
	return rpcstatus.Error(err)
}

// GetLiveParams implements adminv1.AdminServer (lctl get_param).
func (s *Server) GetLiveParams(ctx context.Context, req *adminv1.GetLiveParamsRequest) (*adminv1.GetLiveParamsResponse, error) {
	c, err := s.cluster(ctx)
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	var vals []params.Value
	if patterns := req.GetPatterns(); len(patterns) > 0 {
		vals, err = c.Get(ctx, patterns...)
	} else {
		var all []params.Info
		if all, err = c.List(ctx, true, "*"); err == nil {
			names := make([]string, len(all))
			for i, p := range all {
				names[i] = p.Name
			}
			vals, err = c.GetPartial(ctx, names...)
		}
	}
	if err != nil {
		return nil, paramsError(err)
	}
	out := &adminv1.GetLiveParamsResponse{Params: make([]*adminv1.LiveParam, 0, len(vals))}
	for _, v := range vals {
		out.Params = append(out.Params, &adminv1.LiveParam{Name: v.Name, Value: v.Value, Error: v.Err})
	}
	return out, nil
}

// SetLiveParams implements adminv1.AdminServer (lctl set_param): all or
// nothing, over every process of the cluster.
func (s *Server) SetLiveParams(ctx context.Context, req *adminv1.SetLiveParamsRequest) (*adminv1.SetLiveParamsResponse, error) {
	as := make([]params.Assignment, 0, len(req.GetAssignments()))
	for _, a := range req.GetAssignments() {
		as = append(as, params.Assignment{Pattern: a.GetPattern(), Value: a.GetValue()})
	}
	if len(as) == 0 {
		return nil, rpcstatus.Error(errs.Errorf(errs.Invalid, "set_param: no assignment"))
	}
	c, err := s.cluster(ctx)
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	var vals []params.Value
	if req.GetDryRun() {
		vals, err = c.DryRun(ctx, as...)
	} else {
		vals, err = c.Set(ctx, as...)
	}
	if err != nil {
		s.log.Info("set_param refused", "err", err)
		return nil, paramsError(err)
	}
	if !req.GetDryRun() {
		s.log.Info("set_param", "params", len(vals))
	}
	out := &adminv1.SetLiveParamsResponse{Params: make([]*adminv1.LiveParam, 0, len(vals))}
	for _, v := range vals {
		out.Params = append(out.Params, &adminv1.LiveParam{Name: v.Name, Value: v.Value})
	}
	return out, nil
}

// ListDevices implements adminv1.AdminServer (lctl dl).
func (s *Server) ListDevices(ctx context.Context, _ *adminv1.ListDevicesRequest) (*adminv1.ListDevicesResponse, error) {
	c, err := s.cluster(ctx)
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	devs, err := c.Devices(ctx)
	if err != nil {
		return nil, paramsError(err)
	}
	out := &adminv1.ListDevicesResponse{Devices: make([]*adminv1.Device, 0, len(devs))}
	for _, d := range devs {
		out.Devices = append(out.Devices, &adminv1.Device{Index: int32(d.Index), Status: d.Status, Type: d.Type, Name: d.Name,
			Uuid: d.UUID, Refs: int32(d.Refs)})
	}
	return out, nil
}
