package mgs

import (
	"errors"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/nacrefs/nacre/internal/errs"
	"github.com/nacrefs/nacre/internal/params"
)

// Persistent parameters (Lustre's `lctl set_param -P` and `conf_param`) are
// named FSNAME.TARGET.PARAM:
//
//	nacre.OST0003.osc.max_dirty_mb=512   client-side osc tunable for one OST
//	nacre.OST*.ost.nrs_policies=tbf      server-side, every OST
//	*.MDT0000.mdt.hsm_control=enabled    every filesystem's MDT0
//	nacre.client.llite.max_read_ahead_mb=64
//	nacre.sys.timeout=200
//
// FSNAME and TARGET may be globs (path.Match syntax). PARAM is exact and must
// be in the catalog below; its scope decides which TARGET forms make sense.
// Later records win when several patterns match the same target, as Lustre
// applies its configuration log in order.

// Scope says what a parameter applies to.
type Scope uint8

// Scopes of parameters.
const (
	ScopeOST    Scope = iota + 1 // per OST: TARGET is OSTxxxx or a glob over them
	ScopeMDT                     // per MDT
	ScopeClient                  // every client of the filesystem: TARGET is "client"
	ScopeSys                     // the whole filesystem: TARGET is "sys"
)

func (s Scope) String() string {
	switch s {
	case ScopeOST:
		return "OST"
	case ScopeMDT:
		return "MDT"
	case ScopeClient:
		return "client"
	case ScopeSys:
		return "sys"
	}
	return "?"
}

// ParamType is the type of a parameter's value.
type ParamType uint8

// Value types.
const (
	TypeInt ParamType = iota + 1
	TypeBool
	TypeEnum
	TypeString
)

// ParamSpec describes one known parameter.
type ParamSpec struct {
	Name     string
	Scope    Scope
	Type     ParamType
	Min, Max int64          // TypeInt bounds, inclusive
	Enum     []string       // TypeEnum values
	Pattern  *regexp.Regexp // TypeString values must match
	Help     string
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// catalog is the set of parameters the MGS accepts. Layers that add
// tunables add them here so a typo is refused before it reaches etcd.
var catalog = []ParamSpec{
	{Name: "osc.max_rpcs_in_flight", Scope: ScopeOST, Type: TypeInt, Min: 1, Max: 256, Help: "concurrent BRW RPCs per OSC"},
	{Name: "osc.max_dirty_mb", Scope: ScopeOST, Type: TypeInt, Min: 1, Max: 2048, Help: "dirty data cached per OSC, MiB"},
	{Name: "osc.max_pages_per_rpc", Scope: ScopeOST, Type: TypeInt, Min: 1, Max: 4096, Help: "pages (4 KiB) per BRW RPC"},
	{Name: "osc.checksums", Scope: ScopeOST, Type: TypeBool, Help: "end-to-end data checksums"},
	{Name: "osc.checksum_type", Scope: ScopeOST, Type: TypeEnum, Enum: []string{"crc32", "crc32c"}, Help: "end-to-end checksum algorithm"},
	{Name: "ost.nrs_policies", Scope: ScopeOST, Type: TypeEnum, Enum: []string{"fifo", "tbf", "tbf nid", "tbf jobid", "tbf opcode"}, Help: "request scheduling policy of the OST I/O service"},
	{Name: "obdfilter.sync_journal", Scope: ScopeOST, Type: TypeBool, Help: "commit every write before replying"},
	{Name: "obdfilter.degraded", Scope: ScopeOST, Type: TypeBool, Help: "avoid this OST for new objects"},
	{Name: "mdc.max_rpcs_in_flight", Scope: ScopeMDT, Type: TypeInt, Min: 1, Max: 512, Help: "concurrent metadata RPCs per MDC"},
	{Name: "mdt.hsm_control", Scope: ScopeMDT, Type: TypeEnum, Enum: []string{"enabled", "disabled", "shutdown", "purge"}, Help: "HSM coordinator state"},
	{Name: "mdt.hsm.max_requests", Scope: ScopeMDT, Type: TypeInt, Min: 1, Max: 65536, Help: "HSM requests per agent at once"},
	{Name: "mdt.hsm.active_request_timeout", Scope: ScopeMDT, Type: TypeInt, Min: 1, Max: 7 * 86400, Help: "seconds before an HSM action is retried"},
	{Name: "lod.stripesize", Scope: ScopeMDT, Type: TypeInt, Min: 65536, Max: 4 << 30, Help: "default stripe size, bytes"},
	{Name: "lod.stripecount", Scope: ScopeMDT, Type: TypeInt, Min: -1, Max: 2000, Help: "default stripe count (-1: all OSTs)"},
	{Name: "lod.stripeoffset", Scope: ScopeMDT, Type: TypeInt, Min: -1, Max: MaxIndex, Help: "default first OST (-1: allocator's choice)"},
	{Name: "llite.max_read_ahead_mb", Scope: ScopeClient, Type: TypeInt, Min: 0, Max: 1 << 20, Help: "readahead budget per client, MiB"},
	{Name: "llite.max_read_ahead_per_file_mb", Scope: ScopeClient, Type: TypeInt, Min: 0, Max: 1 << 20, Help: "readahead per file, MiB"},
	{Name: "llite.max_cached_mb", Scope: ScopeClient, Type: TypeInt, Min: 1, Max: 1 << 24, Help: "client page cache, MiB"},
	{Name: "ldlm.lru_size", Scope: ScopeClient, Type: TypeInt, Min: 0, Max: 1 << 24, Help: "unused locks kept per namespace (0: dynamic)"},
	{Name: "ldlm.lru_max_age", Scope: ScopeClient, Type: TypeInt, Min: 1, Max: 1 << 31, Help: "milliseconds an unused lock is kept"},
	{Name: "jobid_var", Scope: ScopeClient, Type: TypeString, Pattern: envName, Help: "environment variable holding the job id, or procname_uid / nodelocal / disable"},
	{Name: "timeout", Scope: ScopeSys, Type: TypeInt, Min: 1, Max: 3600, Help: "obd_timeout, seconds"},
	{Name: "at_min", Scope: ScopeSys, Type: TypeInt, Min: 0, Max: 3600, Help: "adaptive timeout floor, seconds"},
	{Name: "at_max", Scope: ScopeSys, Type: TypeInt, Min: 0, Max: 3600, Help: "adaptive timeout ceiling, seconds (0 disables)"},
	{Name: "at_history", Scope: ScopeSys, Type: TypeInt, Min: 1, Max: 3600, Help: "adaptive timeout history, seconds"},
	{Name: "ldlm_timeout", Scope: ScopeSys, Type: TypeInt, Min: 1, Max: 3600, Help: "lock callback timeout, seconds"},
}

// Specs returns the catalog of known parameters, sorted by name.
func Specs() []ParamSpec {
	out := slices.Clone(catalog)
	slices.SortFunc(out, func(a, b ParamSpec) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func lookupSpec(name string) (ParamSpec, bool) {
	for _, s := range catalog {
		if s.Name == name {
			return s, true
		}
	}
	return ParamSpec{}, false
}

// ParamName is a parsed FSNAME.TARGET.PARAM.
type ParamName struct {
	FS, Target, Param string
	Spec              ParamSpec
}

// String is the name as stored: FSNAME.TARGET.PARAM.
func (p ParamName) String() string { return p.FS + "." + p.Target + "." + p.Param }

// MatchesFS reports whether the name's filesystem pattern covers fsname.
func (p ParamName) MatchesFS(fsname string) bool {
	ok, _ := path.Match(p.FS, fsname)
	return ok
}

// ParseParamName parses and checks FSNAME.TARGET.PARAM against the catalog.
func ParseParamName(name string) (ParamName, error) {
	fs, rest, ok1 := strings.Cut(name, ".")
	target, param, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || fs == "" || target == "" || param == "" {
		return ParamName{}, errs.Errorf(errs.Invalid, "parameter %q is not FSNAME.TARGET.PARAM (e.g. nacre.OST0000.osc.max_dirty_mb)", name)
	}
	if err := checkGlob(fs, "filesystem"); err != nil {
		return ParamName{}, errs.Errorf(errs.Invalid, "parameter %q: %w", name, err)
	}
	if !hasMeta(fs) {
		if err := ValidateFSName(fs); err != nil {
			return ParamName{}, errs.Errorf(errs.Invalid, "parameter %q: %w", name, err)
		}
	}
	spec, ok := lookupSpec(param)
	if !ok {
		return ParamName{}, errs.Errorf(errs.Invalid, "parameter %q: unknown parameter %q", name, param)
	}
	target, err := checkTarget(target, spec)
	if err != nil {
		return ParamName{}, errs.Errorf(errs.Invalid, "parameter %q: %w", name, err)
	}
	return ParamName{FS: fs, Target: target, Param: param, Spec: spec}, nil
}

// checkTarget checks a parameter's target against its scope and returns
// it as targets name themselves: OST000a for OSTa, OST000A or OST00000a,
// which no target would match (servers and clients compare names).
func checkTarget(target string, spec ParamSpec) (string, error) {
	if err := checkGlob(target, "target"); err != nil {
		return "", err
	}
	switch spec.Scope {
	case ScopeOST, ScopeMDT:
		if target == "*" {
			return target, nil
		}
		prefix := spec.Scope.String()
		if !strings.HasPrefix(target, prefix) {
			return "", errs.Errorf(errs.Invalid, "%s applies to %s targets; target %q should be %s0000, %s* or *", spec.Name, prefix, target, prefix, prefix)
		}
		if !hasMeta(target) {
			k, idx, err := ParseTargetName("", target)
			if err != nil || k.String() != prefix {
				return "", errs.Errorf(errs.Invalid, "bad target %q for %s (want e.g. %s0003)", target, spec.Name, prefix)
			}
			return TargetName(k, idx), nil
		}
	case ScopeClient, ScopeSys:
		if target != "*" && target != spec.Scope.String() {
			return "", errs.Errorf(errs.Invalid, "%s applies to %s; target %q should be %q", spec.Name, spec.Scope, target, spec.Scope.String())
		}
	}
	return target, nil
}

func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

func checkGlob(pattern, what string) error {
	if _, err := path.Match(pattern, ""); err != nil {
		return errs.Errorf(errs.Invalid, "bad %s pattern %q: %v", what, pattern, err)
	}
	return nil
}

// NormalizeValue checks a value against the spec and returns its canonical
// form (booleans as 0/1, integers without leading zeros).
func (s ParamSpec) NormalizeValue(v string) (string, error) {
	switch s.Type {
	case TypeInt:
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if shift, ok := params.SizeUnit(s.Name); ok && err != nil {
			// A size takes unit suffixes (max_dirty_mb=1G), stored
			// converted to the parameter's unit.
			if n, err = params.ParseSize(v, shift); err != nil {
				reason := err.Error()
				if pe := (*params.Error)(nil); errors.As(err, &pe) {
					reason = pe.Reason
				}
				return "", errs.Errorf(errs.Invalid, "%s wants a size, got %q: %s", s.Name, v, reason)
			}
		}
		if err != nil {
			return "", errs.Errorf(errs.Invalid, "%s wants an integer, got %q", s.Name, v)
		}
		if n < s.Min || n > s.Max {
			return "", errs.Errorf(errs.Invalid, "%s=%d is out of range [%d, %d]", s.Name, n, s.Min, s.Max)
		}
		return strconv.FormatInt(n, 10), nil
	case TypeBool:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "1", "on", "true", "yes":
			return "1", nil
		case "0", "off", "false", "no":
			return "0", nil
		}
		return "", errs.Errorf(errs.Invalid, "%s wants 0 or 1, got %q", s.Name, v)
	case TypeEnum:
		if slices.Contains(s.Enum, v) {
			return v, nil
		}
		return "", errs.Errorf(errs.Invalid, "%s wants one of %s, got %q", s.Name, strings.Join(s.Enum, ", "), v)
	case TypeString:
		if s.Pattern != nil && !s.Pattern.MatchString(v) {
			return "", errs.Errorf(errs.Invalid, "%s: value %q is not allowed (%s)", s.Name, v, s.Help)
		}
		return v, nil
	}
	return "", errs.Errorf(errs.Internal, "%s has no type", s.Name)
}
