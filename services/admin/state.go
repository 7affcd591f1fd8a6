package admin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/mgs"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
)

// Every server process has a status port (HTTP) that it registers with
// its targets: Prometheus metrics at /metrics and its live state at
// StatePath. The Admin API reads the live state of the cluster there, at
// each request; it keeps no copy of any counter.
const (
	// StatePath serves a server's adminv1.ServerState; query parameters
	// clients, jobs and peers (true/false) ask for the detail of
	// adminv1.ServerStateRequest, format=json for protojson.
	StatePath = "/nacre/v1/state"
	// StateContentType is the state's media type: a binary
	// adminv1.ServerState.
	StateContentType = "application/x-protobuf"
	// MetricsPath serves a server's Prometheus metrics.
	MetricsPath = "/metrics"
	// ParamsPath takes a POSTed params.Request (JSON) with the server's
	// status token as a bearer token and answers its params.Response:
	// the server's parameter registry, as its lctl socket serves it.
	ParamsPath = "/nacre/v1/params"
	// MaxParamsRequest bounds a parameters request.
	MaxParamsRequest = 1 << 20
)

// Bounds of reading the servers.
const (
	// ServerTimeout bounds one server's answer.
	ServerTimeout = 5 * time.Second
	// maxStateBytes bounds one server's state.
	maxStateBytes = 64 << 20
	// maxConcurrentServers bounds the servers asked at once.
	maxConcurrentServers = 16
)

// stateClient asks servers for their state over HTTP.
type stateClient struct {
	http *http.Client
}

func newStateClient() *stateClient {
	return &stateClient{http: &http.Client{Timeout: ServerTimeout}}
}

// state asks the server at addr for its state.
func (c *stateClient) state(ctx context.Context, addr string, req *adminv1.ServerStateRequest) (*adminv1.ServerState, error) {
	ctx, cancel := context.WithTimeout(ctx, ServerTimeout)
	defer cancel()
	q := url.Values{}
	q.Set("clients", fmt.Sprint(req.GetClients()))
	q.Set("jobs", fmt.Sprint(req.GetJobs()))
	q.Set("peers", fmt.Sprint(req.GetPeers()))
	b, err := c.exchange(ctx, http.MethodGet, "http://"+addr+StatePath+"?"+q.Encode(), nil, "")
	if err != nil {
		return nil, fmt.Errorf("server %s: state: %w", addr, err)
	}
	st := &adminv1.ServerState{}
	if err := proto.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("server %s: bad state: %w", addr, err)
	}
	return st, nil
}

// exchange sends one request to a status port (body and bearer token if
// not empty) and returns the answer's body, bounded by maxStateBytes; an
// answer other than 200 is an error naming its status and what it said.
func (c *stateClient) exchange(ctx context.Context, method, url string, body []byte, token string) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hr, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.http.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxStateBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s: %s", resp.Status, bytes.TrimSpace(b[:min(len(b), 512)]))
	}
	if len(b) > maxStateBytes {
		return nil, fmt.Errorf("answer over %d bytes", maxStateBytes)
	}
	return b, nil
}

// serverView is one server's answer.
type serverView struct {
	addr  string
	state *adminv1.ServerState
	err   error
}

// clusterView is a file system's targets as the MGS knows them, with the
// state of the servers serving those that are up.
type clusterView struct {
	fsname  string
	targets []mgs.Target // MDTs, then OSTs, by index
	servers []*serverView
	byAddr  map[string]*serverView
}

// live returns what t's server reports of t, or why there is nothing.
func (v *clusterView) live(t mgs.Target) (*adminv1.TargetLive, error) {
	switch {
	case !t.Up:
		return nil, fmt.Errorf("%s is down", t.Label())
	case t.StatusAddr == "":
		return nil, fmt.Errorf("the server of %s has no status port", t.Label())
	}
	sv := v.byAddr[t.StatusAddr]
	if sv == nil || sv.err != nil {
		err := fmt.Errorf("server %s not asked", t.StatusAddr)
		if sv != nil {
			err = sv.err
		}
		return nil, err
	}
	for _, l := range sv.state.GetTargets() {
		if l.GetName() == t.Label() {
			return l, nil
		}
	}
	return nil, fmt.Errorf("server %s does not serve %s", t.StatusAddr, t.Label())
}

// gather reads fsname's targets from the store, then the state of every
// server of a target that is up (only those of only, if not nil), at
// most maxConcurrentServers at once.
func (s *Server) gather(ctx context.Context, fsname string, only *mgs.Target, req *adminv1.ServerStateRequest) (*clusterView, error) {
	ts, err := s.store.ListTargets(ctx, fsname)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ts, compareTargets)
	v := &clusterView{fsname: fsname, targets: ts, byAddr: map[string]*serverView{}}
	for _, t := range ts {
		if !t.Up || t.StatusAddr == "" || v.byAddr[t.StatusAddr] != nil {
			continue
		}
		if only != nil && (t.Kind != only.Kind || t.Index != only.Index) {
			continue
		}
		sv := &serverView{addr: t.StatusAddr}
		v.byAddr[t.StatusAddr] = sv
		v.servers = append(v.servers, sv)
	}
	slices.SortFunc(v.servers, func(a, b *serverView) int { return strings.Compare(a.addr, b.addr) })
	sem := make(chan struct{}, maxConcurrentServers)
	var wg sync.WaitGroup
	for _, sv := range v.servers {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			sv.state, sv.err = s.nodes.state(ctx, sv.addr, req)
			if sv.err != nil {
				s.log.Info("server state unavailable", "server", sv.addr, "err", sv.err)
			}
		})
	}
	wg.Wait()
	return v, nil
}

// StatusAddrs returns the status ports of the servers of every target that
// is up, in every file system, sorted: where the cluster's metrics are.
func (s *Server) StatusAddrs(ctx context.Context) ([]string, error) {
	fss, err := s.store.ListFilesystems(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, fs := range fss {
		ts, err := s.store.ListTargets(ctx, fs.Name)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			if t.Up && t.StatusAddr != "" {
				out = append(out, t.StatusAddr)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func compareTargets(a, b mgs.Target) int {
	if a.Kind != b.Kind {
		// MDTs first, as lfs df lists them.
		if a.Kind == mgs.KindMDT {
			return -1
		}
		if b.Kind == mgs.KindMDT {
			return 1
		}
		return int(a.Kind) - int(b.Kind)
	}
	return int(a.Index) - int(b.Index)
}
