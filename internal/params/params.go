package params

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/nacrefs/nacre/internal/errs"
)

// Param is one live tunable or statistic. Name is its dotted Lustre name;
// Get reads it (a value may span several lines, as Lustre's stats files
// do). Set, if not nil, changes it; Validate, if not nil, says whether Set
// would accept a value without changing anything, and the registry calls
// it for every target of a set_param before it calls any Set. A Param
// without Set is read-only. The functions may be called from any
// goroutine, concurrently with each other (the registry serializes Sets).
type Param struct {
	Name     string
	Help     string
	Get      func() (string, error)
	Set      func(value string) error
	Validate func(value string) error
	// Group, if not nil, ties the parameter to others whose values are
	// checked against each other (see Group).
	Group *Group
}

// Group ties parameters whose values are only valid together, such as a
// node's at_min, which may not exceed its at_max: a set_param that
// assigns several members (at_min=100 at_max=200) checks them against
// the values they set together, not one by one against the values they
// replace, and sets them in one step. Each member's own Validate still
// checks its value alone (syntax, range) first; members are told apart by
// their Name. The functions may be called from any goroutine.
type Group struct {
	// Validate says whether the values assigned, by parameter name, with
	// the present values of the members not assigned, are consistent.
	Validate func(values map[string]string) error
	// Set sets the values assigned, by parameter name: all of them or,
	// with an error, none. Not nil.
	Set func(values map[string]string) error
}

// Info describes a registered parameter, or (Dir) a component that
// holds parameters, as list_param shows them.
type Info struct {
	Name     string `json:"name"`
	Writable bool   `json:"writable,omitempty"`
	Dir      bool   `json:"dir,omitempty"`
	Help     string `json:"help,omitempty"`
}

// Value is a parameter's value as read (Get) or as set (Set). Err is the
// error its Get returned, if any; the value is then empty.
type Value struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Err   string `json:"error,omitempty"`
}

// Assignment is one NAME=VALUE of a set_param, NAME possibly a pattern.
type Assignment struct {
	Pattern string `json:"pattern"`
	Value   string `json:"value"`
}

// ParseAssignment splits "NAME=VALUE" (the value may contain '=').
func ParseAssignment(s string) (Assignment, error) {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return Assignment{}, newError(ErrBadName, s, "", "want NAME=VALUE", nil)
	}
	return Assignment{Pattern: name, Value: value}, nil
}

// The errors of the registry, wrapped by every *Error.
var (
	// ErrNoMatch: a pattern names no registered parameter.
	ErrNoMatch = errors.New("no parameter matches")
	// ErrReadOnly: set_param of a parameter without Set.
	ErrReadOnly = errors.New("read-only parameter")
	// ErrBadValue: Validate or Set refused the value.
	ErrBadValue = errors.New("bad value")
	// ErrBadName: a name or pattern is malformed.
	ErrBadName = errors.New("bad parameter name")
	// ErrExists: Register of a name already registered.
	ErrExists = errors.New("parameter already registered")
)

// Error is a registry error about one parameter or pattern. It wraps one
// of the Err* sentinels (errors.Is) and, when a layer refused a value, the
// layer's own error.
type Error struct {
	// Kind is ErrNoMatch, ErrReadOnly, ErrBadValue, ErrBadName or ErrExists.
	Kind error
	// Name is the parameter, or the pattern that matched nothing.
	Name string
	// Value is the value refused, for ErrBadValue.
	Value string
	// Reason says why, for a person.
	Reason string
	// Err is the layer's error, if any.
	Err error
}

func newError(kind error, name, value, reason string, err error) *Error {
	return &Error{Kind: kind, Name: name, Value: value, Reason: reason, Err: err}
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Name)
	if errors.Is(e.Kind, ErrBadValue) {
		fmt.Fprintf(&b, "=%s", e.Value)
	}
	b.WriteString(": ")
	b.WriteString(e.Kind.Error())
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	} else if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the sentinel and the layer's error.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

// ErrKind maps the error to Nacre's vocabulary (for the admin API's codes).
func (e *Error) ErrKind() errs.Kind {
	switch e.Kind {
	case ErrNoMatch:
		return errs.NotExist
	case ErrReadOnly:
		return errs.Permission
	case ErrExists:
		return errs.Exist
	}
	return errs.Invalid
}

// Registry holds the live parameters and devices of one process (Lustre's
// lprocfs/sysfs tree and obd device list). Layers register what they
// expose when they start and unregister it when they stop; lctl and the
// admin API read and change the same entries. Safe for concurrent use.
type Registry struct {
	mu struct {
		sync.RWMutex
		// params are the registered parameters by name.
		params map[string]*entry
		// devs are the registered devices by index.
		devs map[int]*Device
	}
	// setMu serializes set_param so that the validation of every target
	// and the changes are one step for other set_params.
	setMu sync.Mutex
	// instance tells this registry from others in answers reaching a
	// caller by several ways (a process's socket and its status port).
	instance string
}

// entry is one registered parameter; refs counts Share registrations.
type entry struct {
	p    Param
	refs int
}

// New returns an empty registry.
func New() *Registry {
	r := &Registry{instance: fmt.Sprintf("%016x", rand.Uint64())}
	r.mu.params = make(map[string]*entry)
	r.mu.devs = make(map[int]*Device)
	return r
}

// Default is the registry of this process: the one its servers and
// mounts register in unless they are given another, and the one served
// on the process's socket.
var Default = New()

// checkName refuses names lctl could not address: empty components,
// blanks, '=', '/' and glob characters.
func checkName(name string) error {
	if name == "" {
		return newError(ErrBadName, name, "", "empty name", nil)
	}
	for c := range strings.SplitSeq(name, ".") {
		if c == "" {
			return newError(ErrBadName, name, "", "empty component", nil)
		}
	}
	if i := strings.IndexAny(name, "=/*?[]\\ \t\n"); i >= 0 {
		return newError(ErrBadName, name, "", fmt.Sprintf("character %q not allowed in a name", name[i]), nil)
	}
	return nil
}

// Register adds p. It returns the function that removes it again (call
// it once, when the layer goes away), or an error wrapping ErrBadName (a
// malformed name, no Get) or ErrExists.
func (r *Registry) Register(p Param) (unregister func(), err error) {
	return r.register(p, false)
}

// Share adds p unless a parameter of the same name was added by Share
// before, in which case that one stays and only a reference is counted:
// for what several owners in one process provide alike (an OSS service
// shared by two servers in one test process, an MGC). The returned
// function drops the reference; the last one removes the parameter.
func (r *Registry) Share(p Param) (unregister func(), err error) {
	return r.register(p, true)
}

func (r *Registry) register(p Param, shared bool) (func(), error) {
	if err := checkName(p.Name); err != nil {
		return nil, err
	}
	if p.Get == nil {
		return nil, newError(ErrBadName, p.Name, "", "no Get", nil)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.mu.params[p.Name]
	switch {
	case e == nil:
		e = &entry{p: p, refs: 1}
		if !shared {
			e.refs = -1
		}
		r.mu.params[p.Name] = e
	case shared && e.refs > 0:
		e.refs++
	default:
		return nil, newError(ErrExists, p.Name, "", "", nil)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.mu.params[p.Name] != e {
				return
			}
			if e.refs > 1 {
				e.refs--
				return
			}
			delete(r.mu.params, p.Name)
		})
	}, nil
}

// RegisterAll registers every p and returns one function removing them
// all; on an error, those registered are removed again.
func (r *Registry) RegisterAll(ps ...Param) (unregister func(), err error) {
	var undo []func()
	all := func() {
		for _, u := range undo {
			u()
		}
	}
	for _, p := range ps {
		u, err := r.Register(p)
		if err != nil {
			all()
			return nil, err
		}
		undo = append(undo, u)
	}
	return all, nil
}

// Normalize turns a name or pattern as lctl takes it into the dotted
// form: '/' separates components as '.' does (lctl accepts both).
func Normalize(pattern string) string {
	return strings.ReplaceAll(strings.TrimSpace(pattern), "/", ".")
}

// Match reports whether name matches pattern: both are split at dots and
// each component of the name must match the pattern's component of the
// same rank with path.Match (*, ?, [...], \ escapes); the counts must be
// equal. A malformed pattern is an error wrapping ErrBadName.
func Match(pattern, name string) (bool, error) {
	pc := strings.Split(Normalize(pattern), ".")
	nc := strings.Split(name, ".")
	if err := checkPattern(pattern, pc); err != nil {
		return false, err
	}
	if len(pc) != len(nc) {
		return false, nil
	}
	return matchComponents(pc, nc), nil
}

func checkPattern(pattern string, pc []string) error {
	for _, c := range pc {
		if c == "" {
			return newError(ErrBadName, pattern, "", "empty component", nil)
		}
		if _, err := path.Match(c, ""); err != nil {
			return newError(ErrBadName, pattern, "", fmt.Sprintf("bad pattern component %q", c), err)
		}
	}
	return nil
}

// matchComponents matches the first len(pc) components of nc.
func matchComponents(pc, nc []string) bool {
	if len(nc) < len(pc) {
		return false
	}
	for i, p := range pc {
		if ok, _ := path.Match(p, nc[i]); !ok {
			return false
		}
	}
	return true
}

// lookup returns the entries pattern matches, sorted by name.
func (r *Registry) lookup(pattern string) ([]Param, error) {
	pc := strings.Split(Normalize(pattern), ".")
	if err := checkPattern(pattern, pc); err != nil {
		return nil, err
	}
	r.mu.RLock()
	var out []Param
	for name, e := range r.mu.params {
		nc := strings.Split(name, ".")
		if len(nc) == len(pc) && matchComponents(pc, nc) {
			out = append(out, e.p)
		}
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b Param) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ListOptions qualify List.
type ListOptions struct {
	// Recursive lists every parameter under what a pattern names, as
	// list_param -R: "osc.*" lists all OSC parameters, not the OSCs.
	Recursive bool
	// Partial allows a pattern to match nothing (the caller merges the
	// answers of several registries and checks the union).
	Partial bool
}

// List returns the names patterns match, sorted and each once, as
// list_param: a pattern with fewer components than a parameter names the
// "directory" that holds it (osc.* gives the OSC devices, with Writable
// false), or, Recursive, every parameter below. A pattern that matches
// nothing is an error wrapping ErrNoMatch (unless opts.Partial).
func (r *Registry) List(opts ListOptions, patterns ...string) ([]Info, error) {
	seen := map[string]Info{}
	for _, pat := range patterns {
		pc := strings.Split(Normalize(pat), ".")
		if err := checkPattern(pat, pc); err != nil {
			return nil, err
		}
		n := 0
		r.mu.RLock()
		for name, e := range r.mu.params {
			nc := strings.Split(name, ".")
			if !matchComponents(pc, nc) {
				continue
			}
			n++
			switch {
			case len(nc) == len(pc) || opts.Recursive:
				seen[name] = Info{Name: name, Writable: e.p.Set != nil, Help: e.p.Help}
			default:
				dir := strings.Join(nc[:len(pc)], ".")
				if _, ok := seen[dir]; !ok {
					seen[dir] = Info{Name: dir, Dir: true}
				}
			}
		}
		r.mu.RUnlock()
		if n == 0 && !opts.Partial {
			return nil, newError(ErrNoMatch, pat, "", "", nil)
		}
	}
	return slices.SortedFunc(maps.Values(seen), byName), nil
}

// Get reads every parameter the patterns match, in pattern order and by
// name within a pattern (a parameter matched twice is read twice, as
// lctl does). A Get that fails gives a Value with Err set; it is not an
// error of the call. A pattern that matches nothing is an error wrapping
// ErrNoMatch, unless partial.
func (r *Registry) Get(partial bool, patterns ...string) ([]Value, error) {
	var out []Value
	for _, pat := range patterns {
		ps, err := r.lookup(pat)
		if err != nil {
			return nil, err
		}
		if len(ps) == 0 && !partial {
			return nil, newError(ErrNoMatch, pat, "", "", nil)
		}
		for _, p := range ps {
			v, err := p.Get()
			val := Value{Name: p.Name, Value: v}
			if err != nil {
				val.Value, val.Err = "", err.Error()
			}
			out = append(out, val)
		}
	}
	return out, nil
}

// SetOptions qualify Set.
type SetOptions struct {
	// DryRun validates every target without changing any.
	DryRun bool
	// Partial allows an assignment to match nothing here (the caller
	// checked that the union over several registries matches).
	Partial bool
}

// Set carries out a set_param: every assignment's pattern must match at
// least one parameter (unless opts.Partial), every match must be
// writable, and its Validate must accept the value, and the members of a
// Group assigned must be consistent together; only then are the values
// set, in order (a group's at its first member), and the values set
// returned (Value holds the value given). If any check fails nothing is
// changed and the error (wrapping ErrNoMatch, ErrReadOnly, ErrBadValue or
// ErrBadName) names the first parameter at fault, or the group's members
// assigned. A Set that fails after every check passed (the layer changed
// its mind) stops there: the error says which parameters were already
// set.
func (r *Registry) Set(opts SetOptions, assigns ...Assignment) ([]Value, error) {
	r.setMu.Lock()
	defer r.setMu.Unlock()
	type target struct {
		p     Param
		value string
	}
	var todo []target
	// The values assigned to each group's members, groups in the order
	// their first member comes.
	grouped := make(map[*Group]map[string]string)
	var groups []*Group
	for _, a := range assigns {
		ps, err := r.lookup(a.Pattern)
		if err != nil {
			return nil, err
		}
		if len(ps) == 0 && !opts.Partial {
			return nil, newError(ErrNoMatch, a.Pattern, "", "", nil)
		}
		for _, p := range ps {
			if p.Set == nil {
				return nil, newError(ErrReadOnly, p.Name, "", "", nil)
			}
			if p.Validate != nil {
				if err := p.Validate(a.Value); err != nil {
					return nil, badValue(p.Name, a.Value, err)
				}
			}
			todo = append(todo, target{p, a.Value})
			if g := p.Group; g != nil {
				if grouped[g] == nil {
					grouped[g] = make(map[string]string)
					groups = append(groups, g)
				}
				grouped[g][p.Name] = a.Value
			}
		}
	}
	// members lists a group's assignments in the order given, for errors.
	members := func(g *Group) (names, values string) {
		var ns, vs []string
		for _, t := range todo {
			if t.p.Group == g && !slices.Contains(ns, t.p.Name) {
				ns = append(ns, t.p.Name)
				vs = append(vs, grouped[g][t.p.Name])
			}
		}
		return strings.Join(ns, ","), strings.Join(vs, ",")
	}
	for _, g := range groups {
		if g.Validate == nil {
			continue
		}
		if err := g.Validate(grouped[g]); err != nil {
			names, values := members(g)
			return nil, badValue(names, values, err)
		}
	}
	out := make([]Value, 0, len(todo))
	for _, t := range todo {
		out = append(out, Value{Name: t.p.Name, Value: t.value})
	}
	if opts.DryRun {
		return out, nil
	}
	var done []string
	for i, t := range todo {
		g := t.p.Group
		var err error
		switch {
		case g == nil:
			err = t.p.Set(t.value)
		case slices.Contains(done, t.p.Name):
			continue // set with its group's first member
		default:
			err = g.Set(grouped[g])
		}
		if err != nil {
			name, value := t.p.Name, t.value
			if g != nil {
				name, value = members(g)
			}
			e := badValue(name, value, err)
			if len(done) > 0 {
				e.Reason = fmt.Sprintf("%v (already set: %s)", err, strings.Join(done, ", "))
			}
			return out[:i], e
		}
		if g != nil {
			for _, m := range todo {
				if m.p.Group == g && !slices.Contains(done, m.p.Name) {
					done = append(done, m.p.Name)
				}
			}
		} else {
			done = append(done, t.p.Name)
		}
	}
	return out, nil
}

// badValue wraps a layer's refusal; a *Error from a helper keeps its
// reason.
func badValue(name, value string, err error) *Error {
	var pe *Error
	if errors.As(err, &pe) {
		return newError(ErrBadValue, name, value, pe.Reason, pe.Err)
	}
	return newError(ErrBadValue, name, value, "", err)
}

// byName orders parameters by name.
func byName(a, b Info) int { return strings.Compare(a.Name, b.Name) }

// SetPersistent sets the live parameters pattern matches to value, that of
// the persistent parameter name (lctl set_param -P, as the MGS hands it
// out), and says whether they took it. A refusal is logged if final: the
// caller may try again once other parameters are in.
func (r *Registry) SetPersistent(lg *slog.Logger, name, value, pattern string, final bool) bool {
	set, err := r.Set(SetOptions{Partial: true}, Assignment{Pattern: pattern, Value: value})
	switch {
	case err != nil:
		if final {
			lg.Warn("persistent parameter refused", "param", name, "value", value, "err", err)
		}
		return false
	case len(set) > 0:
		lg.Info("persistent parameter", "param", name, "value", value, "set", len(set))
	}
	return true
}
