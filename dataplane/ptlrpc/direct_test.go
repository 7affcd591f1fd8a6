package ptlrpc

import (
	"bytes"
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// A handler that runs on the goroutine that received its request (over
// socklnd, when nothing is queued) may call back to the requester over the
// same connection and wait for the answer, as a lock server's handler
// waits for a client to give a lock back: the connection goes on being
// read.
func TestDirectHandlerCallsBack(t *testing.T) {
	e := sockEnv(t)
	cliNID := e.cli.NIDs()[len(e.cli.NIDs())-1]
	callback := lwire.ProcessID{NID: cliNID, PID: e.cli.PID()}
	// The client's own service, answering the server's call-backs.
	back := startService(t, e.cli, reqPortal+10)
	srvClient := NewClient(e.srv, ClientConfig{ReplyPortal: rplPortal + 10})
	var withReleaser atomic.Int64
	s, err := NewService(e.srv, ServiceConfig{Name: "outer", RequestPortal: reqPortal, Logger: quiet,
		Handlers: map[wire.Opcode]HandlerSpec{opEcho: {Fn: func(ctx context.Context, req *Request) ([]byte, int32) {
			if _, ok := ctx.Value(releaserKey{}).(lnet.Releaser); ok {
				withReleaser.Add(1) // so its call-back's wait releases the connection (Blocking)
			}
			got, err := srvClient.Call(ctx, callback, reqPortal+10, opEcho, req.Body)
			if err != nil {
				t.Errorf("call-back: %v", err)
				return nil, -5
			}
			return slices.Concat(got, []byte("+srv")), 0
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.Close(ctx)
	})
	c := NewClient(e.cli, ClientConfig{ReplyPortal: rplPortal})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 20
	for i := range n {
		body := pattern(100+i*97, i)
		got, err := c.Call(ctx, e.target, reqPortal, opEcho, body)
		if err != nil {
			t.Fatalf("call %d: %v; outer %+v back %+v", i, err, s.Stats(), back.Stats())
		}
		if want := slices.Concat(body, []byte("+srv")); !bytes.Equal(got, want) {
			t.Fatalf("call %d: reply differs", i)
		}
	}
	// Most of them ran where they arrived (the first may come before the
	// connection's reader is idle), and so did the call-backs.
	if st := s.Stats(); st.Direct < n/2 || st.Ops[opEcho].Count != n || uint64(withReleaser.Load()) != st.Direct {
		t.Errorf("outer service: %d direct of %d, want most; %d handlers had a Releaser, want the direct ones", st.Direct, st.Ops[opEcho].Count, withReleaser.Load())
	}
	if st := back.Stats(); st.Direct < n/2 || st.Ops[opEcho].Count != n {
		t.Errorf("call-back service: %d direct of %d, want most", st.Direct, st.Ops[opEcho].Count)
	}
}

type countReleaser struct{ n int }

func (c *countReleaser) Release() { c.n++ }

// Blocking finds the Releaser of a direct handler's context through the
// contexts derived from it, and does nothing with any other context.
func TestBlocking(t *testing.T) {
	var r countReleaser
	base, cancel := context.WithCancel(context.Background())
	h := &handlerCtx{Context: base, rel: &r}
	derived, stop := context.WithTimeout(context.WithValue(h, struct{}{}, 1), time.Hour)
	defer stop()
	Blocking(derived)
	Blocking(h)
	Blocking(context.Background())
	Blocking(base)
	if r.n != 2 {
		t.Errorf("Release called %d times, want 2", r.n)
	}
	// The handler's context ends with the service's.
	cancel()
	select {
	case <-derived.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a context derived from a handler's did not end with the service's")
	}
}
