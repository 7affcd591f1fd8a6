// Package mgssvc serves the MGS gRPC service (target registration and
// liveness, client configuration and its watch) over an mgs.Store. It only
// converts between the wire and the store; the rules live in package mgs.
package mgssvc

import (
	"context"
	"log/slog"
	"math"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/nacrefs/nacre/mgs"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
	"github.com/nacrefs/nacre/services/rpcstatus"
)

// Server implements mgsv1.MGSServer. Safe for concurrent use.
type Server struct {
	mgsv1.UnimplementedMGSServer
	store *mgs.Store
	log   *slog.Logger
}

var _ mgsv1.MGSServer = (*Server)(nil)

// New returns a Server over store.
func New(store *mgs.Store, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{store: store, log: log.With("service", "mgs")}
}

// kindOf converts a wire kind. mgs.Kind is a byte and the wire's an int32:
// a plain conversion would take 256+OST for OST, so anything out of range
// becomes 0, which the store refuses as Invalid.
func kindOf(k mgsv1.TargetKind) mgs.Kind {
	if k < 0 || k > math.MaxUint8 {
		return 0
	}
	return mgs.Kind(k)
}

// RegisterTarget implements mgsv1.MGSServer.
func (s *Server) RegisterTarget(ctx context.Context, req *mgsv1.RegisterTargetRequest) (*mgsv1.RegisterTargetResponse, error) {
	r := mgs.Registration{
		FSName:       req.GetFsname(),
		Kind:         kindOf(req.GetKind()),
		Index:        req.Index,
		NIDs:         req.GetNids(),
		FailoverNIDs: req.GetFailoverNids(),
		Path:         req.GetPath(),
		UUID:         req.GetUuid(),
		StatusAddr:   req.GetStatusAddr(),
		StatusToken:  req.GetStatusToken(),
	}
	t, lease, cfg, err := s.store.RegisterTarget(ctx, r)
	if err != nil {
		s.log.Warn("register target refused", "fsname", r.FSName, "kind", r.Kind.String(), "err", err)
		return nil, rpcstatus.Error(err)
	}
	return &mgsv1.RegisterTargetResponse{
		Target:          TargetProto(t),
		LeaseId:         int64(lease.ID),
		LeaseTtlSeconds: int64(lease.TTL.Seconds()),
		Config:          ConfigProto(cfg),
	}, nil
}

// Heartbeat implements mgsv1.MGSServer.
func (s *Server) Heartbeat(ctx context.Context, req *mgsv1.HeartbeatRequest) (*mgsv1.HeartbeatResponse, error) {
	ttl, err := s.store.Heartbeat(ctx, req.GetFsname(), kindOf(req.GetKind()), req.GetIndex(), clientv3.LeaseID(req.GetLeaseId()))
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	return &mgsv1.HeartbeatResponse{TtlSeconds: int64(ttl.Seconds())}, nil
}

// GetClientConfig implements mgsv1.MGSServer.
func (s *Server) GetClientConfig(ctx context.Context, req *mgsv1.GetClientConfigRequest) (*mgsv1.GetClientConfigResponse, error) {
	cfg, err := s.store.GetConfig(ctx, req.GetFsname())
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	return &mgsv1.GetClientConfigResponse{Config: ConfigProto(cfg)}, nil
}

// WatchConfig implements mgsv1.MGSServer. Events are sent as the store
// delivers them, so a slow client slows its own watch and nothing queues.
func (s *Server) WatchConfig(req *mgsv1.WatchConfigRequest, stream mgsv1.MGS_WatchConfigServer) error {
	ctx := stream.Context()
	if _, err := s.store.GetFilesystem(ctx, req.GetFsname()); err != nil {
		return rpcstatus.Error(err)
	}
	err := s.store.Watch(ctx, req.GetFsname(), req.GetStartRevision(), func(e mgs.Event) error {
		return stream.Send(EventProto(e))
	})
	if ctx.Err() != nil {
		return nil // the client went away
	}
	return rpcstatus.Error(err)
}
