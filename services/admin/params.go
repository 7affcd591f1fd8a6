package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/nacrefs/nacre/internal/errs"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/mgs"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
	"github.com/nacrefs/nacre/services/rpcstatus"
)

// The admin API's live parameters are those of the whole cluster: its own
// process's registry and, through their status ports, every server's
// (params.Remote merges them as lctl merges a node's processes). A
// set_param is all or nothing over them.

// statusEndpoint reaches a server's registry on its status port.
type statusEndpoint struct {
	addr, token string
	c           *stateClient
}

// Call implements params.Endpoint.
func (e statusEndpoint) Call(ctx context.Context, req params.Request) (params.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, ServerTimeout)
	defer cancel()
	b, err := json.Marshal(req)
	if err != nil {
		return params.Response{}, err
	}
	if b, err = e.c.exchange(ctx, http.MethodPost, "http://"+e.addr+ParamsPath, b, e.token); err != nil {
		return params.Response{}, fmt.Errorf("server %s: parameters: %w", e.addr, err)
	}
	var out params.Response
	if err := json.Unmarshal(b, &out); err != nil {
		return params.Response{}, fmt.Errorf("server %s: parameters: %w", e.addr, err)
	}
	return out, nil
}

func (e statusEndpoint) String() string { return "server " + e.addr }

// cluster is the parameters of this process and of every server whose
// targets are up.
func (s *Server) cluster(ctx context.Context) (*params.Remote, error) {
	r := &params.Remote{Endpoints: []params.Endpoint{params.Local{Registry: s.params}},
		Skipped: func(ep string, err error) { s.log.Info("parameters of a server unavailable", "server", ep, "err", err) }}
	fss, err := s.store.ListFilesystems(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, fs := range fss {
		ts, err := s.store.ListTargets(ctx, fs.Name)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			if !t.Up || t.StatusAddr == "" || t.StatusToken == "" || seen[t.StatusAddr] {
				continue
			}
			seen[t.StatusAddr] = true
			r.Endpoints = append(r.Endpoints, statusEndpoint{addr: t.StatusAddr, token: t.StatusToken, c: s.nodes})
		}
	}
	return r, nil
}

// EvictClient implements adminv1.AdminServer: set_param of the target's
// evict_client, on the server that serves it.
func (s *Server) EvictClient(ctx context.Context, req *adminv1.EvictClientRequest) (*adminv1.EvictClientResponse, error) {
	t, err := s.store.GetTarget(ctx, req.GetFsname(), req.GetName())
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	if req.GetClient() == "" {
		return nil, rpcstatus.Error(errs.Errorf(errs.Invalid, "evict from %s: no client (a uuid, or nid:NID)", t.Label()))
	}
	layer := "obdfilter"
	if t.Kind == mgs.KindMDT {
		layer = "mdt"
	} else if t.Kind != mgs.KindOST {
		return nil, rpcstatus.Error(errs.Errorf(errs.Invalid, "evict from %s: not an MDT or OST", t.Label()))
	}
	if !t.Up {
		return nil, rpcstatus.Error(errs.Errorf(errs.Unavailable, "evict from %s: the target is down", t.Label()))
	}
	c, err := s.cluster(ctx)
	if err != nil {
		return nil, rpcstatus.Error(err)
	}
	name := layer + "." + t.Label() + ".evict_client"
	if _, err := c.Set(ctx, params.Assignment{Pattern: name, Value: req.GetClient()}); err != nil {
		s.log.Info("evict refused", "target", t.Label(), "client", req.GetClient(), "err", err)
		return nil, paramsError(err)
	}
	s.log.Info("client evicted", "target", t.Label(), "client", req.GetClient())
	return &adminv1.EvictClientResponse{}, nil
}
