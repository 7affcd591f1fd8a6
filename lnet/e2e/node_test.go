package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/netns"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// The test binary doubles as an LNet node running in a network namespace:
// with NACRE_E2E_NODE set to a nodeConf in JSON, TestMain runs the node
// instead of the tests. The node prints one JSON line when it is up, then
// answers one JSON line per command read from stdin:
//
//	stream TARGET N WINDOW SIZE  start PUTting sequence numbers 0..N-1 to
//	                             TARGET (WINDOW at a time), each retried
//	                             until ACKed, as PtlRPC resends
//	status                       counters (nodeStatus)
//	quit                         shut down and exit
//
// It exits when stdin closes.

const nodeEnv = "NACRE_E2E_NODE"

// nodeConf configures a helper node.
type nodeConf struct {
	Name    string
	Nets    string   // Lustre networks= syntax
	Routes  []string // NET:GATEWAY
	Routing bool
	// SinkN and SinkSize: accept PUTs of sequence numbers below SinkN, of
	// SinkSize bytes each, on portal 5.
	SinkN, SinkSize int
}

// nodeStatus is what a node answers to status.
type nodeStatus struct {
	Acked, Fails int64
	Done         bool
	NIs          map[string]niStatus
	Peers        map[string]niStatus
	Routes       map[string]bool // gateway -> up
	Routed       uint64          // messages forwarded
	Seen         int
	Missing      []uint64 // the first few
	NMissing     int
	Bad          []string
}

type niStatus struct {
	Sends  uint64
	Health int
	Status string `json:",omitempty"`
}

func TestMain(m *testing.M) {
	if conf := os.Getenv(nodeEnv); conf != "" {
		if err := runNode(conf); err != nil {
			fmt.Fprintln(os.Stderr, "node:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// nodePort is the acceptor port of the helper nodes: each has a network
// namespace to itself.
const nodePort = 988

func runNode(confJSON string) error {
	var conf nodeConf
	if err := json.Unmarshal([]byte(confJSON), &conf); err != nil {
		return err
	}
	cfg, err := testConfig(conf.Nets, nodePort)
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", conf.Name)
	cfg.Routing = conf.Routing
	cfg.TransactionTimeout = 2 * time.Second
	cfg.RouterCheckInterval = 200 * time.Millisecond
	cfg.RouterPingTimeout = time.Second
	cfg.RecoveryInterval = 200 * time.Millisecond
	for _, r := range conf.Routes {
		n, gw, _ := strings.Cut(r, ":")
		cfg.Routes = append(cfg.Routes, via(n, gw))
	}
	ln, err := lnet.New(context.Background(), cfg)
	if err != nil {
		return err
	}
	defer ln.Close(context.Background())
	var sink *seqSink
	if conf.SinkN > 0 {
		sink = &seqSink{seen: map[uint64]int{}}
		if err := attachSinkTo(ln, sink, 5, conf.SinkN, conf.SinkSize); err != nil {
			return err
		}
	}
	out := json.NewEncoder(os.Stdout)
	out.Encode(map[string]any{"ready": true, "nids": fmt.Sprint(ln.NIDs())})
	var st streamer
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "stream":
			target, err := wire.ParseNID(f[1])
			if err != nil {
				out.Encode(map[string]any{"err": err.Error()})
				continue
			}
			n, _ := strconv.Atoi(f[2])
			window, _ := strconv.Atoi(f[3])
			size, _ := strconv.Atoi(f[4])
			go st.run(ln, wire.ProcessID{NID: target, PID: wire.PIDLustre}, n, window, size)
			out.Encode(map[string]any{"ok": true})
		case "status":
			out.Encode(st.status(ln, sink, conf.SinkN))
		case "quit":
			out.Encode(map[string]any{"ok": true})
			return nil
		default:
			out.Encode(map[string]any{"err": "unknown command " + f[0]})
		}
	}
	return nil
}

// attachSinkTo is attachSink for the helper nodes.
func attachSinkTo(ln *lnet.LNet, s *seqSink, portal uint32, n, size int) error {
	_, err := ln.Attach(portal, lnet.AnyProcess, 0, 0, lnet.InsertLast, lnet.MD{
		Buffers: [][]byte{make([]byte, n*size)}, Threshold: lnet.ThresholdInfinite,
		Options: lnet.MDOpPut | lnet.MDManageRemote,
		Handler: func(ev lnet.Event) {
			if ev.Type != lnet.EventPut {
				return
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if ev.Status != nil {
				s.failed++
				return
			}
			s.seen[ev.HdrData]++
		},
	})
	return err
}

// streamer PUTs sequence numbers with ACK, retrying each until it is
// ACKed.
type streamer struct {
	acked, fails atomic.Int64
	done         atomic.Bool
}

func (s *streamer) run(ln *lnet.LNet, target wire.ProcessID, n, window, size int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, window)
	for seq := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			data := pattern(uint64(seq), size)
			for {
				err := putWait(ln, target, 5, uint64(seq), uint32(seq*size), data)
				if err == nil {
					s.acked.Add(1)
					return
				}
				s.fails.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	s.done.Store(true)
}

func (s *streamer) status(ln *lnet.LNet, sink *seqSink, n int) nodeStatus {
	st := ln.Stats()
	out := nodeStatus{
		Acked: s.acked.Load(), Fails: s.fails.Load(), Done: s.done.Load(),
		NIs: map[string]niStatus{}, Peers: map[string]niStatus{}, Routes: map[string]bool{},
		Routed: st.Router.RouteCount,
	}
	for _, x := range st.NIs {
		out.NIs[x.NID.String()] = niStatus{x.SendCount, x.Health, x.Status.String()}
	}
	for _, x := range st.Peers {
		out.Peers[x.NID.String()] = niStatus{Sends: x.SendCount, Health: x.Health}
	}
	for _, r := range ln.Routes() {
		out.Routes[r.Gateway.String()] = r.Up
	}
	if sink != nil {
		miss, seen, bad := sink.missing(n)
		out.Seen, out.NMissing, out.Bad = seen, len(miss), bad
		out.Missing = miss[:min(len(miss), 10)]
	}
	return out
}

// node is a helper node process, seen from the test.
type node struct {
	t    *testing.T
	name string
	proc *os.Process
	in   io.WriteCloser
	out  *json.Decoder
	log  *logBuf
	dead bool
}

// startNode runs a helper node in h and waits until it is up.
func startNode(t *testing.T, ctx context.Context, h *netns.Host, conf nodeConf) *node {
	t.Helper()
	conf.Name = h.Name
	cj, _ := json.Marshal(conf)
	cmd := h.Command(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(cj))
	n := &node{t: t, name: h.Name, log: &logBuf{}}
	cmd.Stderr = n.log
	var err error
	if n.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	n.out = json.NewDecoder(stdout)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.proc = cmd.Process
	waited := make(chan struct{})
	go func() { cmd.Wait(); close(waited) }()
	t.Cleanup(func() {
		n.in.Close()
		select {
		case <-waited:
		case <-time.After(5 * time.Second):
			n.proc.Kill()
			<-waited
		}
		if t.Failed() {
			t.Logf("log of %s:\n%s", n.name, tail(n.log.String(), 60))
		}
	})
	var ready map[string]any
	if err := n.out.Decode(&ready); err != nil || ready["ready"] != true {
		t.Fatalf("node %s did not start: %v %v\n%s", n.name, ready, err, n.log.String())
	}
	return n
}

// call sends a command and decodes the answer into v.
func (n *node) call(cmd string, v any) {
	n.t.Helper()
	if _, err := fmt.Fprintln(n.in, cmd); err != nil {
		n.t.Fatalf("%s: %s: %v", n.name, cmd, err)
	}
	if err := n.out.Decode(v); err != nil {
		n.t.Fatalf("%s: %s: %v\n%s", n.name, cmd, err, tail(n.log.String(), 40))
	}
}

func (n *node) status() nodeStatus {
	n.t.Helper()
	var s nodeStatus
	n.call("status", &s)
	return s
}

// kill kills the node's process at once, as a crash would.
func (n *node) kill() {
	n.t.Helper()
	if err := n.proc.Kill(); err != nil {
		n.t.Fatal(err)
	}
	n.dead = true
}

// waitStream polls a streaming node until pred holds, or fails the test
// after limit.
func (n *node) waitStream(what string, limit time.Duration, pred func(nodeStatus) bool) nodeStatus {
	n.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		s := n.status()
		if pred(s) {
			return s
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s: timed out after %v waiting for %s; status %+v", n.name, limit, what, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func needLab(t *testing.T) {
	t.Helper()
	if err := netns.Available(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err) // CI has root and iproute2 (.ci/run installs it): never skip there
		}
		t.Skip(err)
	}
	if testing.Short() {
		t.Skip("network namespace tests are slow; -short skips them")
	}
}
