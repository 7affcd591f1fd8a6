package params

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// RunDirEnv names the environment variable that overrides DefaultRunDir
// (tests, unprivileged users).
const RunDirEnv = "NACRE_RUN_DIR"

// DefaultRunDir is where processes put their parameter sockets.
const DefaultRunDir = "/run/nacre"

// RunDir returns the directory of the parameter sockets: $NACRE_RUN_DIR,
// or DefaultRunDir.
func RunDir() string {
	if d := os.Getenv(RunDirEnv); d != "" {
		return d
	}
	return DefaultRunDir
}

// FallbackRunDir is where a process that may not write DefaultRunDir
// (not root) puts its socket, and where lctl looks besides.
func FallbackRunDir() string {
	return filepath.Join(os.TempDir(), "nacre-"+strconv.Itoa(os.Getuid()))
}

// The wire protocol on a parameter socket: one JSON request line, one
// JSON response line, then the server closes the connection.

// Request is what lctl asks a process.
type Request struct {
	// Op is "list", "get", "set" or "devices".
	Op       string       `json:"op"`
	Patterns []string     `json:"patterns,omitempty"`
	Assign   []Assignment `json:"assign,omitempty"`
	// Recursive: list -R. Partial: patterns may match nothing here.
	// DryRun: set only validates.
	Recursive bool `json:"recursive,omitempty"`
	Partial   bool `json:"partial,omitempty"`
	DryRun    bool `json:"dry_run,omitempty"`
}

// Response is a process's answer.
type Response struct {
	PID int `json:"pid"`
	// Instance is the answering registry's: answers of one registry
	// reached by several endpoints count once.
	Instance string       `json:"instance,omitempty"`
	Command  string       `json:"command,omitempty"`
	Params   []Info       `json:"params,omitempty"`
	Values   []Value      `json:"values,omitempty"`
	Devices  []DeviceInfo `json:"devices,omitempty"`
	Error    *WireError   `json:"error,omitempty"`
}

// WireError is an *Error on the wire.
type WireError struct {
	Kind   string `json:"kind"`
	Name   string `json:"name,omitempty"`
	Value  string `json:"value,omitempty"`
	Reason string `json:"reason,omitempty"`
}

var kindNames = map[error]string{ErrNoMatch: "nomatch", ErrReadOnly: "readonly", ErrBadValue: "badvalue",
	ErrBadName: "badname", ErrExists: "exists"}

func toWire(err error) *WireError {
	var pe *Error
	if errors.As(err, &pe) {
		reason := pe.Reason
		if reason == "" && pe.Err != nil {
			reason = pe.Err.Error()
		}
		return &WireError{Kind: kindNames[pe.Kind], Name: pe.Name, Value: pe.Value, Reason: reason}
	}
	return &WireError{Kind: "other", Reason: err.Error()}
}

// Err turns the wire error back into an *Error (or a plain error for a
// kind this side does not know).
func (w *WireError) Err() error {
	for k, n := range kindNames {
		if n == w.Kind {
			return &Error{Kind: k, Name: w.Name, Value: w.Value, Reason: w.Reason}
		}
	}
	return errors.New(w.Reason)
}

// Handle answers one request from reg.
func Handle(reg *Registry, req Request) Response {
	resp := Response{PID: os.Getpid(), Command: filepath.Base(os.Args[0]), Instance: reg.instance}
	var err error
	switch req.Op {
	case "list":
		resp.Params, err = reg.List(ListOptions{Recursive: req.Recursive, Partial: req.Partial}, req.Patterns...)
	case "get":
		resp.Values, err = reg.Get(req.Partial, req.Patterns...)
	case "set":
		resp.Values, err = reg.Set(SetOptions{DryRun: req.DryRun, Partial: req.Partial}, req.Assign...)
	case "devices":
		resp.Devices = reg.Devices()
	default:
		err = fmt.Errorf("params: unknown op %q", req.Op)
	}
	if err != nil {
		resp.Error = toWire(err)
	}
	return resp
}

// maxConns bounds the requests a socket serves at once.
const maxConns = 8

// maxRequest bounds a request line.
const maxRequest = 1 << 20

// listener is one served socket, shared by every Serve of its registry.
type listener struct {
	path string
	l    net.Listener
	refs int // guarded by servers.mu
	wg   sync.WaitGroup
}

// servers are the sockets this process serves, by registry.
var servers struct {
	sync.Mutex
	byReg map[*Registry]*listener
}

// Serve serves reg on a unix socket in RunDir() (or FallbackRunDir() if
// RunDir() cannot be written and NACRE_RUN_DIR is not set) named
// <pid>.sock (<pid>-N.sock for a second registry), mode 0600, for lctl.
// Serving one registry again only counts a reference, so that every part
// of a process assembly (servers, mounts) may call it: the socket goes
// away with the last stop, or when ctx ends. stop may be called more than
// once.
func Serve(ctx context.Context, reg *Registry) (stop func(), err error) {
	servers.Lock()
	defer servers.Unlock()
	if servers.byReg == nil {
		servers.byReg = make(map[*Registry]*listener)
	}
	ln := servers.byReg[reg]
	if ln == nil {
		if ln, err = listen(reg, len(servers.byReg)); err != nil {
			return nil, err
		}
		servers.byReg[reg] = ln
	}
	ln.refs++
	done := make(chan struct{})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			servers.Lock()
			ln.refs--
			last := ln.refs == 0
			if last {
				delete(servers.byReg, reg)
			}
			servers.Unlock()
			if last {
				ln.l.Close()
				ln.wg.Wait()
				os.Remove(ln.path)
			}
		})
	}
	go func() {
		select {
		case <-ctx.Done():
			stop()
		case <-done:
		}
	}()
	return stop, nil
}

func listen(reg *Registry, n int) (*listener, error) {
	name := strconv.Itoa(os.Getpid())
	if n > 0 {
		name += "-" + strconv.Itoa(n)
	}
	name += ".sock"
	dirs := []string{RunDir()}
	if os.Getenv(RunDirEnv) == "" {
		dirs = append(dirs, FallbackRunDir())
	}
	var errs []error
	for _, dir := range dirs {
		l, path, err := listenIn(dir, name)
		if err == nil {
			ln := &listener{path: path, l: l}
			ln.wg.Go(func() { ln.accept(reg) })
			return ln, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("params: serve: %w", errors.Join(errs...))
}

func listenIn(dir, name string) (net.Listener, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	removeStale(dir)
	path := filepath.Join(dir, name)
	os.Remove(path) // a socket of a dead process with our pid
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, "", err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, "", err
	}
	return l, path, nil
}

func (ln *listener) accept(reg *Registry) {
	sem := make(chan struct{}, maxConns)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.l.Accept()
		if err != nil {
			return
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			serveConn(reg, c)
		})
	}
}

func serveConn(reg *Registry, c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), maxRequest)
	if !sc.Scan() {
		return
	}
	var req Request
	var resp Response
	if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
		resp = Response{PID: os.Getpid(), Error: &WireError{Kind: "other", Reason: "params: bad request: " + err.Error()}}
	} else {
		resp = Handle(reg, req)
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return
	}
	c.Write(append(b, '\n'))
}
