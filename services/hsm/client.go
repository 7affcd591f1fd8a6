package hsm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/internal/fid"
	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
)

// Client talks to whichever of the coordinator addresses is active,
// moving on when one answers UNAVAILABLE (a standby, or down) until ctx
// ends. Safe for concurrent use.
type Client struct {
	addrs []string
	opts  []grpc.DialOption

	mu    sync.Mutex
	conns []*grpc.ClientConn
	cur   int // the address that answered last
}

// NewClient returns a client of the coordinators at addrs (gRPC
// host:port, the MGS's); opts add to insecure transport credentials.
func NewClient(addrs []string, opts ...grpc.DialOption) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("hsm: no coordinator address")
	}
	c := &Client{addrs: addrs, opts: append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)}
	for _, a := range addrs {
		cc, err := grpc.NewClient(a, c.opts...)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("hsm: coordinator %s: %w", a, err)
		}
		c.conns = append(c.conns, cc)
	}
	return c, nil
}

// Close drops the connections.
func (c *Client) Close() error {
	for _, cc := range c.conns {
		cc.Close()
	}
	return nil
}

// retryable reports whether err says to try another coordinator.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// do runs fn against the active coordinator.
func (c *Client) do(ctx context.Context, fn func(ctx context.Context, cc hsmv1.CoordinatorClient) error) error {
	c.mu.Lock()
	i := c.cur
	c.mu.Unlock()
	backoff := 20 * time.Millisecond
	for tries := 0; ; tries++ {
		cc := hsmv1.NewCoordinatorClient(c.conns[i%len(c.conns)])
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(actx, cc)
		cancel()
		if err == nil {
			c.mu.Lock()
			c.cur = i % len(c.conns)
			c.mu.Unlock()
			return nil
		}
		if !retryable(err) || ctx.Err() != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("hsm: %w (last: %v)", ctx.Err(), err)
			}
			return err
		}
		i++
		if i%len(c.conns) == 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("hsm: no active coordinator: %w (last: %v)", ctx.Err(), err)
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
		}
	}
}

// FIDTo converts a FID for the coordinator's API.
func FIDTo(f fid.FID) *hsmv1.FID { return &hsmv1.FID{Seq: f.Seq, Oid: f.Oid, Ver: f.Ver} }

// FIDFrom converts the API's FID.
func FIDFrom(f *hsmv1.FID) fid.FID {
	return fid.FID{Seq: f.GetSeq(), Oid: f.GetOid(), Ver: f.GetVer()}
}

// Submit queues kind for fids in archive archiveID and returns the
// action ids.
func (c *Client) Submit(ctx context.Context, kind hsmv1.ActionKind, archiveID uint32, fids ...fid.FID) ([]uint64, error) {
	q := &hsmv1.SubmitRequest{Kind: kind, ArchiveId: archiveID}
	for _, f := range fids {
		q.Fids = append(q.Fids, FIDTo(f))
	}
	return c.SubmitRequest(ctx, q)
}

// SubmitRequest submits q and returns the action ids.
func (c *Client) SubmitRequest(ctx context.Context, q *hsmv1.SubmitRequest) ([]uint64, error) {
	var ids []uint64
	err := c.do(ctx, func(ctx context.Context, cc hsmv1.CoordinatorClient) error {
		rep, err := cc.Submit(ctx, q)
		if err == nil {
			ids = rep.Ids
		}
		return err
	})
	return ids, err
}

// Action returns action id.
func (c *Client) Action(ctx context.Context, id uint64) (*hsmv1.Action, error) {
	var a *hsmv1.Action
	err := c.do(ctx, func(ctx context.Context, cc hsmv1.CoordinatorClient) (err error) {
		a, err = cc.GetAction(ctx, &hsmv1.GetActionRequest{Id: id})
		return err
	})
	return a, err
}

// Actions lists the actions (only the active ones with active), every
// page of them.
func (c *Client) Actions(ctx context.Context, activeOnly bool) ([]*hsmv1.Action, error) {
	return c.ListActions(ctx, &hsmv1.ListActionsRequest{Active: activeOnly})
}

// ListActions lists the actions that pass q's filters, every page from
// q's page token on.
func (c *Client) ListActions(ctx context.Context, q *hsmv1.ListActionsRequest) ([]*hsmv1.Action, error) {
	q = proto.Clone(q).(*hsmv1.ListActionsRequest)
	var as []*hsmv1.Action
	for {
		var rep *hsmv1.ListActionsResponse
		err := c.do(ctx, func(ctx context.Context, cc hsmv1.CoordinatorClient) (err error) {
			rep, err = cc.ListActions(ctx, q)
			return err
		})
		if err != nil {
			return nil, err
		}
		as = append(as, rep.Actions...)
		if rep.NextPageToken == "" {
			return as, nil
		}
		q.PageToken = rep.NextPageToken
	}
}

// Stats returns each archive's statistics.
func (c *Client) Stats(ctx context.Context) ([]*hsmv1.ArchiveStats, error) {
	var st []*hsmv1.ArchiveStats
	err := c.do(ctx, func(ctx context.Context, cc hsmv1.CoordinatorClient) error {
		rep, err := cc.GetStats(ctx, &hsmv1.GetStatsRequest{})
		if err == nil {
			st = rep.Archives
		}
		return err
	})
	return st, err
}

// Agents lists the registered agents.
func (c *Client) Agents(ctx context.Context) ([]*hsmv1.AgentInfo, error) {
	var as []*hsmv1.AgentInfo
	err := c.do(ctx, func(ctx context.Context, cc hsmv1.CoordinatorClient) error {
		rep, err := cc.ListAgents(ctx, &hsmv1.ListAgentsRequest{})
		if err == nil {
			as = rep.Agents
		}
		return err
	})
	return as, err
}

// ErrActionFailed: the action ended FAILED or CANCELED.
var ErrActionFailed = errors.New("hsm: action failed")

// Wait polls action id until it ends: nil when it succeeded, an error
// wrapping ErrActionFailed when it failed or was canceled, NOT_FOUND if
// the coordinator has no such action (or no more: finished actions are
// deleted after grace_delay).
func (c *Client) Wait(ctx context.Context, id uint64) error {
	poll := 10 * time.Millisecond
	for {
		a, err := c.Action(ctx, id)
		if err != nil {
			return err
		}
		switch a.State {
		case hsmv1.ActionState_ACTION_STATE_SUCCEED:
			return nil
		case hsmv1.ActionState_ACTION_STATE_FAILED, hsmv1.ActionState_ACTION_STATE_CANCELED:
			return fmt.Errorf("%w: %v %v: %v: %s", ErrActionFailed, a.Kind, FIDFrom(a.Fid), a.State, a.Error)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hsm: waiting for action %d: %w", id, ctx.Err())
		case <-time.After(poll):
		}
		poll = min(2*poll, 200*time.Millisecond)
	}
}

// Restore asks for f's restore and waits for it (client.HSMRestorer).
func (c *Client) Restore(ctx context.Context, f fid.FID, archiveID uint32) error {
	ids, err := c.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_RESTORE, archiveID, f)
	if err != nil {
		return err
	}
	return c.Wait(ctx, ids[0])
}
