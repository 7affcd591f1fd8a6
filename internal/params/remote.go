package params

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// socketName is how Serve names sockets: PID.sock or PID-N.sock (other
// sockets share the directory: lnetctl's lnet.sock).
var socketName = regexp.MustCompile(`^[0-9]+(-[0-9]+)?\.sock$`)

// Sockets returns the parameter sockets in dirs, sorted; a missing
// directory has none.
func Sockets(dirs ...string) ([]string, error) {
	var out []string
	for _, d := range dirs {
		m, err := filepath.Glob(filepath.Join(d, "*.sock"))
		if err != nil {
			return nil, err
		}
		for _, p := range m {
			if socketName.MatchString(filepath.Base(p)) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Call sends one request to the socket at path and returns the answer.
func Call(ctx context.Context, path string, req Request) (Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return Response{}, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(time.Minute))
	}
	b, err := json.Marshal(req)
	if err != nil {
		return Response{}, err
	}
	if _, err := c.Write(append(b, '\n')); err != nil {
		return Response{}, err
	}
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return Response{}, err
		}
		return Response{}, errors.New("connection closed without an answer")
	}
	var resp Response
	if err := json.Unmarshal(sc.Bytes(), &resp); err != nil {
		return Response{}, fmt.Errorf("bad answer: %w", err)
	}
	return resp, nil
}

// Endpoint reaches one process's registry.
type Endpoint interface {
	Call(ctx context.Context, req Request) (Response, error)
	String() string
}

// Socket is the endpoint of a process's unix socket.
type Socket string

// Call implements Endpoint.
func (s Socket) Call(ctx context.Context, req Request) (Response, error) {
	return Call(ctx, string(s), req)
}

func (s Socket) String() string { return string(s) }

// Local is the endpoint of a registry of this process.
type Local struct{ *Registry }

// Call implements Endpoint.
func (l Local) Call(_ context.Context, req Request) (Response, error) {
	return Handle(l.Registry, req), nil
}

func (l Local) String() string { return "this process" }

// Remote is the parameters of several processes (their sockets, or other
// endpoints) seen as one, as lctl sees a node or the admin API a cluster:
// answers are merged (a registry reached twice counts once), an endpoint
// that does not answer (a process that died) is skipped, and a pattern
// must match in at least one process.
type Remote struct {
	// Sockets are the processes' sockets; Endpoints are other ways to
	// reach processes. Both are asked.
	Sockets   []string
	Endpoints []Endpoint
	// Skipped, if not nil, hears of each endpoint skipped and why.
	Skipped func(endpoint string, err error)
}

// ErrNoProcess: no live process answered.
var ErrNoProcess = errors.New("params: no Nacre process answers")

// answer is one process's response and the endpoint it came from.
type answer struct {
	Response
	ep Endpoint
}

// endpoints are the sockets and the other endpoints.
func (r *Remote) endpoints() []Endpoint {
	out := make([]Endpoint, 0, len(r.Sockets)+len(r.Endpoints))
	for _, s := range r.Sockets {
		out = append(out, Socket(s))
	}
	return append(out, r.Endpoints...)
}

// call sends req to every live endpoint; dead ones are skipped, and so
// are answers of a registry that answered already. A socket whose process
// is gone is removed.
func (r *Remote) call(ctx context.Context, req Request) ([]answer, error) {
	var out []answer
	seen := map[string]bool{}
	eps := r.endpoints()
	var failed []string
	gone := 0
	for _, e := range eps {
		resp, err := e.Call(ctx, req)
		if err != nil {
			if r.Skipped != nil {
				r.Skipped(e.String(), err)
			}
			if s, ok := e.(Socket); ok && refused(err) && stale(string(s)) {
				os.Remove(string(s))
				gone++
			} else {
				failed = append(failed, e.String())
			}
			continue
		}
		if resp.Instance != "" {
			if seen[resp.Instance] {
				continue
			}
			seen[resp.Instance] = true
		}
		out = append(out, answer{resp, e})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w%s", ErrNoProcess, triedText(failed, gone))
	}
	return out, nil
}

// triedText says which endpoints did not answer, naming at most a few.
func triedText(failed []string, gone int) string {
	const most = 4
	var parts []string
	switch {
	case len(failed) > most:
		parts = append(parts, fmt.Sprintf("tried: %s and %d more", strings.Join(failed[:most], ", "), len(failed)-most))
	case len(failed) > 0:
		parts = append(parts, "tried: "+strings.Join(failed, ", "))
	}
	if gone > 0 {
		parts = append(parts, fmt.Sprintf("removed %d sockets of processes that are gone", gone))
	}
	if len(parts) == 0 {
		return " (none to ask)"
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// firstErr returns the first process's error.
func firstErr(rs []answer) error {
	for _, r := range rs {
		if r.Error != nil {
			return r.Error.Err()
		}
	}
	return nil
}

// List is Registry.List over every process.
func (r *Remote) List(ctx context.Context, recursive bool, patterns ...string) ([]Info, error) {
	seen := map[string]Info{}
	for _, pat := range patterns {
		rs, err := r.call(ctx, Request{Op: "list", Patterns: []string{pat}, Recursive: recursive, Partial: true})
		if err != nil {
			return nil, err
		}
		if err := firstErr(rs); err != nil {
			return nil, err
		}
		n := 0
		for _, resp := range rs {
			for _, i := range resp.Params {
				seen[i.Name] = i
				n++
			}
		}
		if n == 0 {
			return nil, newError(ErrNoMatch, pat, "", "", nil)
		}
	}
	return slices.SortedFunc(maps.Values(seen), byName), nil
}

// Get is Registry.Get over every process: values in pattern order, then
// process order, then by name.
func (r *Remote) Get(ctx context.Context, patterns ...string) ([]Value, error) {
	var out []Value
	for _, pat := range patterns {
		rs, err := r.call(ctx, Request{Op: "get", Patterns: []string{pat}, Partial: true})
		if err != nil {
			return nil, err
		}
		if err := firstErr(rs); err != nil {
			return nil, err
		}
		n := len(out)
		for _, resp := range rs {
			out = append(out, resp.Values...)
		}
		if len(out) == n {
			return nil, newError(ErrNoMatch, pat, "", "", nil)
		}
	}
	return out, nil
}

// GetPartial is Get in one request to each process, where a pattern may
// match nothing anywhere (the names of a List).
func (r *Remote) GetPartial(ctx context.Context, patterns ...string) ([]Value, error) {
	rs, err := r.call(ctx, Request{Op: "get", Patterns: patterns, Partial: true})
	if err != nil {
		return nil, err
	}
	if err := firstErr(rs); err != nil {
		return nil, err
	}
	var out []Value
	for _, resp := range rs {
		out = append(out, resp.Values...)
	}
	return out, nil
}

// Set is Registry.Set over every process, all or nothing: every process
// first validates the assignments (a dry run) and only if all accept and
// every pattern matched somewhere does each set them. A process that
// fails after the dry run passed (it changed meanwhile) is reported with
// what the others already set.
func (r *Remote) Set(ctx context.Context, assigns ...Assignment) ([]Value, error) {
	rs, err := r.dryRun(ctx, assigns)
	if err != nil {
		return nil, err
	}
	var out []Value
	for _, resp := range rs {
		if len(resp.Values) == 0 {
			continue // nothing of this process matched
		}
		got, err := resp.ep.Call(ctx, Request{Op: "set", Assign: assigns, Partial: true})
		if err == nil && got.Error != nil {
			err = got.Error.Err()
		}
		if err != nil {
			if len(out) > 0 {
				var done []string
				for _, v := range out {
					done = append(done, v.Name)
				}
				return out, fmt.Errorf("%w (already set in other processes: %s)", err, strings.Join(done, ", "))
			}
			return nil, err
		}
		out = append(out, got.Values...)
	}
	return out, nil
}

// DryRun is Set's validation alone: what Set would set, or why not.
func (r *Remote) DryRun(ctx context.Context, assigns ...Assignment) ([]Value, error) {
	rs, err := r.dryRun(ctx, assigns)
	if err != nil {
		return nil, err
	}
	var out []Value
	for _, resp := range rs {
		out = append(out, resp.Values...)
	}
	return out, nil
}

// dryRun has every process validate assigns and checks that each matched
// somewhere.
func (r *Remote) dryRun(ctx context.Context, assigns []Assignment) ([]answer, error) {
	rs, err := r.call(ctx, Request{Op: "set", Assign: assigns, Partial: true, DryRun: true})
	if err != nil {
		return nil, err
	}
	if err := firstErr(rs); err != nil {
		return nil, err
	}
	for _, a := range assigns {
		found := false
		for _, resp := range rs {
			for _, v := range resp.Values {
				if ok, _ := Match(a.Pattern, v.Name); ok {
					found = true
				}
			}
		}
		if !found {
			return nil, newError(ErrNoMatch, a.Pattern, "", "", nil)
		}
	}
	return rs, nil
}

// Devices returns every process's devices, renumbered in order (process
// by process) as one node's list.
func (r *Remote) Devices(ctx context.Context) ([]DeviceInfo, error) {
	rs, err := r.call(ctx, Request{Op: "devices"})
	if err != nil {
		return nil, err
	}
	var out []DeviceInfo
	for _, resp := range rs {
		for _, d := range resp.Devices {
			d.Index = len(out)
			out = append(out, d)
		}
	}
	return out, nil
}

// LocalSockets returns the sockets lctl reads by default: those in
// RunDir(), and in FallbackRunDir() unless NACRE_RUN_DIR is set.
func LocalSockets() ([]string, error) {
	dirs := []string{RunDir()}
	if os.Getenv(RunDirEnv) == "" {
		dirs = append(dirs, FallbackRunDir())
	}
	return Sockets(dirs...)
}
