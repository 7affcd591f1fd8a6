package hsm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
)

// Handler runs actions for an agent: the copytool. Handle gets the
// action and a progress func (bytes done, total) and returns the copy's
// checksum; ctx ends when the action is canceled or the agent stops.
// Called concurrently, up to the agent's MaxRequests at once.
type Handler interface {
	Handle(ctx context.Context, a *hsmv1.Action, progress func(done, total uint64)) (checksum string, err error)
}

// AgentConfig configures an agent.
type AgentConfig struct {
	// Client reaches the coordinators; required.
	Client *Client
	// UUID identifies the agent; required, stable across reconnects so
	// that the actions it runs stay its own.
	UUID string
	// ArchiveIDs are the archives it serves (empty: all).
	ArchiveIDs []uint32
	// MaxRequests bounds its actions at once; 0 means the coordinator's.
	MaxRequests int
	// Handler runs the actions; required.
	Handler Handler
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// RunAgent registers with the active coordinator and runs the actions it
// hands out until ctx ends, reconnecting (to a new leader after a
// failover) as needed. Completions not acknowledged are sent again after
// a reconnect. It returns ctx's error.
func RunAgent(ctx context.Context, cfg AgentConfig) error {
	if cfg.Client == nil || cfg.UUID == "" || cfg.Handler == nil {
		return errors.New("hsm: agent needs a client, a UUID and a handler")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &agentRun{cfg: cfg, log: cfg.Logger.With("agent", cfg.UUID), running: map[uint64]context.CancelFunc{}, pending: map[uint64]*hsmv1.Done{}}
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		r.wg.Wait()
	}()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := r.session(ctx)
		if ctx.Err() != nil {
			break
		}
		r.log.Debug("hsm: agent session ended", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
	return ctx.Err()
}

type agentRun struct {
	cfg AgentConfig
	log *slog.Logger
	wg  sync.WaitGroup

	mu      sync.Mutex
	stream  agentStream // the current session's, nil between sessions
	sendMu  sync.Mutex  // one Send at a time
	running map[uint64]context.CancelFunc
	pending map[uint64]*hsmv1.Done // completions not acknowledged yet
}

type agentStream interface {
	Send(*hsmv1.AgentRequest) error
}

func (r *agentRun) send(m *hsmv1.AgentRequest) error {
	r.mu.Lock()
	s := r.stream
	r.mu.Unlock()
	if s == nil {
		return errors.New("hsm: no session")
	}
	r.sendMu.Lock()
	defer r.sendMu.Unlock()
	return s.Send(m)
}

// session is one stream to the active coordinator.
func (r *agentRun) session(ctx context.Context) error {
	var conns []hsmv1.CoordinatorClient
	for _, cc := range r.cfg.Client.conns {
		conns = append(conns, hsmv1.NewCoordinatorClient(cc))
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stream hsmv1.Coordinator_AgentClient
	var err error
	for _, cc := range conns {
		s, e := cc.Agent(sctx)
		if e != nil {
			err = e
			continue
		}
		if e = s.Send(&hsmv1.AgentRequest{Msg: &hsmv1.AgentRequest_Register{Register: &hsmv1.Register{Uuid: r.cfg.UUID,
			ArchiveIds: r.cfg.ArchiveIDs, MaxRequests: uint32(max(r.cfg.MaxRequests, 0))}}}); e != nil {
			err = e
			continue
		}
		m, e := s.Recv()
		if e != nil {
			err = e
			continue
		}
		if m.GetRegistered() == nil {
			err = fmt.Errorf("hsm: coordinator answered %v to a registration", m)
			continue
		}
		stream = s
		break
	}
	if stream == nil {
		return err
	}
	r.mu.Lock()
	r.stream = stream
	var resend []*hsmv1.Done
	for _, d := range r.pending {
		resend = append(resend, d)
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.stream = nil
		r.mu.Unlock()
	}()
	for _, d := range resend {
		if err := r.send(&hsmv1.AgentRequest{Msg: &hsmv1.AgentRequest_Done{Done: d}}); err != nil {
			return err
		}
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		switch x := m.Msg.(type) {
		case *hsmv1.AgentResponse_Action:
			r.start(ctx, x.Action)
		case *hsmv1.AgentResponse_Cancel:
			r.mu.Lock()
			if c := r.running[x.Cancel.Id]; c != nil {
				c()
			}
			r.mu.Unlock()
		case *hsmv1.AgentResponse_Ack:
			var again *hsmv1.Done
			r.mu.Lock()
			if d := r.pending[x.Ack.Id]; d != nil && x.Ack.Done {
				// Acknowledged, or refused for good (not ours any more).
				if x.Ack.Errno != int32(syscall.EAGAIN) {
					delete(r.pending, x.Ack.Id)
				} else {
					again = d
				}
			}
			r.mu.Unlock()
			if again != nil {
				// Refused for now (the coordinator could not save it):
				// sent again shortly, not only after a reconnect, or the
				// action would wait for its timeout with its file busy.
				time.AfterFunc(doneRetry, func() {
					r.mu.Lock()
					still := r.pending[again.Id] == again
					r.mu.Unlock()
					if still {
						r.send(&hsmv1.AgentRequest{Msg: &hsmv1.AgentRequest_Done{Done: again}})
					}
				})
			}
			if x.Ack.Errno != 0 {
				r.log.Info("hsm: coordinator refused a report", "action", x.Ack.Id, "err", x.Ack.Error)
			}
		}
	}
}

// doneRetry is how long an agent waits to report again a completion the
// coordinator refused for now (EAGAIN).
const doneRetry = time.Second

// start runs action a in its own goroutine (the coordinator bounds how
// many it sends).
func (r *agentRun) start(ctx context.Context, a *hsmv1.Action) {
	r.mu.Lock()
	if r.running[a.Id] != nil || r.pending[a.Id] != nil {
		r.mu.Unlock()
		return // given again after a reconnect: running, or done and reported
	}
	actx, cancel := context.WithCancel(ctx)
	r.running[a.Id] = cancel
	r.mu.Unlock()
	r.wg.Go(func() {
		defer cancel()
		var lastSent time.Time
		progress := func(done, total uint64) {
			if time.Since(lastSent) < 200*time.Millisecond {
				return
			}
			lastSent = time.Now()
			r.send(&hsmv1.AgentRequest{Msg: &hsmv1.AgentRequest_Progress{Progress: &hsmv1.Progress{Id: a.Id, BytesDone: done, BytesTotal: total}}})
		}
		sum, err := r.cfg.Handler.Handle(actx, a, progress)
		d := &hsmv1.Done{Id: a.Id, Checksum: sum}
		if err != nil {
			d.Errno, d.Error = int32(errnoOf(err)), err.Error()
		}
		// From running to pending at once: an action given again meanwhile
		// must find one or the other.
		r.mu.Lock()
		delete(r.running, a.Id)
		if ctx.Err() == nil {
			r.pending[a.Id] = d
		}
		r.mu.Unlock()
		if ctx.Err() != nil {
			return // the agent stops: the coordinator retries elsewhere
		}
		if err := r.send(&hsmv1.AgentRequest{Msg: &hsmv1.AgentRequest_Done{Done: d}}); err != nil {
			r.log.Debug("hsm: report later", "action", a.Id, "err", err)
		}
	})
}

// errnoOf is err's errno, EIO if it carries none.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	if errors.Is(err, context.Canceled) {
		return syscall.ECANCELED
	}
	return syscall.EIO
}
