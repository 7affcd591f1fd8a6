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

// Remote is the parameters of several processes (their sockets) seen as
// one, as lctl sees a node: answers are merged, a socket nobody listens
// on (a process that died) is skipped, and a pattern must match in at
// least one process.
type Remote struct {
	// Sockets are the processes' sockets.
	Sockets []string
	// Skipped, if not nil, hears of each socket skipped and why.
	Skipped func(path string, err error)
}

// ErrNoProcess: no live process answered.
var ErrNoProcess = errors.New("params: no Nacre process answers")

// answer is one process's response and the socket it came from.
type answer struct {
	Response
	socket string
}

// call sends req to every live socket; dead ones are skipped.
func (r *Remote) call(ctx context.Context, req Request) ([]answer, error) {
	var out []answer
	for _, s := range r.Sockets {
		resp, err := Call(ctx, s, req)
		if err != nil {
			if r.Skipped != nil {
				r.Skipped(s, err)
			}
			continue
		}
		out = append(out, answer{resp, s})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w (sockets tried: %s)", ErrNoProcess, strings.Join(r.Sockets, ", "))
	}
	return out, nil
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
	out := make([]Info, 0, len(seen))
	for _, i := range seen {
		out = append(out, i)
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
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

// Set is Registry.Set over every process, all or nothing: every process
// first validates the assignments (a dry run) and only if all accept and
// every pattern matched somewhere does each set them. A process that
// fails after the dry run passed (it changed meanwhile) is reported with
// what the others already set.
func (r *Remote) Set(ctx context.Context, assigns ...Assignment) ([]Value, error) {
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
	var out []Value
	for _, resp := range rs {
		if len(resp.Values) == 0 {
			continue // nothing of this process matched
		}
		got, err := Call(ctx, resp.socket, Request{Op: "set", Assign: assigns, Partial: true})
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
