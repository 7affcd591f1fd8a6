package params

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SizeUnit says whether the parameter name (its last component) holds a
// size in MiB (a name ending in _mb: max_dirty_mb), KiB (_kb:
// direct_write_min_kb) or bytes (_bytes: cur_grant_bytes), and returns the
// unit as a power of two (20, 10, 0).
func SizeUnit(name string) (shift uint, ok bool) {
	switch {
	case strings.HasSuffix(name, "_mb"):
		return 20, true
	case strings.HasSuffix(name, "_kb"):
		return 10, true
	case strings.HasSuffix(name, "_bytes"):
		return 0, true
	}
	return 0, false
}

// sizeSuffixes are the unit suffixes a size takes, each 1024 times the
// one before it, from KiB.
const sizeSuffixes = "kmgtpe"

// ParseSize reads the value of a size parameter whose unit is 1<<shift
// bytes (see SizeUnit), as Lustre's lprocfs_str_with_units_to_u64: a
// plain integer (decimal, 0x hex or 0 octal) is in the parameter's unit;
// a decimal number followed by K, M, G, T, P or E (either case) is KiB,
// MiB... converted to it, rounded down (max_dirty_mb=1G is 1024,
// max_dirty_mb=512M is 512). A suffixed value that is less than one
// unit (100K for a MiB parameter), or does not fit an int64, is an error.
func ParseSize(v string, shift uint) (int64, error) {
	v = strings.TrimSpace(v)
	if n, err := strconv.ParseInt(v, 0, 64); err == nil {
		return n, nil
	}
	bad := &Error{Kind: ErrBadValue, Reason: "want an integer, or one with a K, M, G, T, P or E suffix"}
	if v == "" {
		return 0, bad
	}
	i := strings.IndexByte(sizeSuffixes, strings.ToLower(v[len(v)-1:])[0])
	if i < 0 {
		return 0, bad
	}
	n, err := strconv.ParseUint(v[:len(v)-1], 10, 64)
	if err != nil {
		return 0, bad
	}
	suffix := 10 * uint(i+1)
	if suffix < shift {
		u := n >> (shift - suffix)
		if n != 0 && u == 0 {
			return 0, &Error{Kind: ErrBadValue, Reason: fmt.Sprintf("%s is less than one unit (%s)", v, unitName(shift))}
		}
		return int64(u), nil
	}
	up := suffix - shift
	if up >= 63 || n > math.MaxInt64>>up {
		return 0, &Error{Kind: ErrBadValue, Reason: fmt.Sprintf("%s is too large", v)}
	}
	return int64(n << up), nil
}

// unitName names the unit 1<<shift bytes.
func unitName(shift uint) string {
	if shift >= 10 && shift%10 == 0 && shift/10 <= uint(len(sizeSuffixes)) {
		return strings.ToUpper(sizeSuffixes[shift/10-1:shift/10]) + "iB"
	}
	return fmt.Sprintf("%d bytes", uint64(1)<<shift)
}

// Int returns a parameter holding an integer in [lo, hi], as Lustre's
// numeric tunables: Validate parses and checks the range, then check (if
// not nil) says whether the layer takes the value in its present state
// (max_dirty_mb below one RPC...). set nil makes it read-only. A size
// parameter (name ending in _mb or _kb) takes unit suffixes (ParseSize).
func Int(name, help string, get func() int64, set func(int64) error, lo, hi int64, check func(int64) error) Param {
	shift, size := SizeUnit(name)
	parse := func(v string) (int64, error) {
		var n int64
		var err error
		if size {
			if n, err = ParseSize(v, shift); err != nil {
				return 0, err
			}
		} else if n, err = strconv.ParseInt(strings.TrimSpace(v), 0, 64); err != nil {
			return 0, &Error{Kind: ErrBadValue, Reason: fmt.Sprintf("want an integer from %d to %d", lo, hi)}
		}
		if n < lo || n > hi {
			return 0, &Error{Kind: ErrBadValue, Reason: fmt.Sprintf("%d is out of range [%d, %d]", n, lo, hi)}
		}
		if check != nil {
			if err := check(n); err != nil {
				return 0, err
			}
		}
		return n, nil
	}
	p := Param{Name: name, Help: help, Get: func() (string, error) { return strconv.FormatInt(get(), 10), nil }}
	if set != nil {
		p.Validate = func(v string) error { _, err := parse(v); return err }
		p.Set = func(v string) error {
			n, err := parse(v)
			if err != nil {
				return err
			}
			return set(n)
		}
	}
	return p
}

// ParseBool reads a boolean as lctl writes one: 1/0, on/off, yes/no,
// true/false, enabled/disabled.
func ParseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "on", "yes", "true", "enabled", "enable":
		return true, nil
	case "0", "off", "no", "false", "disabled", "disable":
		return false, nil
	}
	return false, &Error{Kind: ErrBadValue, Reason: "want 0 or 1"}
}

// Bool returns a parameter holding a boolean, shown as 1 or 0 as Lustre
// shows its flags. set nil makes it read-only.
func Bool(name, help string, get func() bool, set func(bool) error) Param {
	p := Param{Name: name, Help: help, Get: func() (string, error) {
		if get() {
			return "1", nil
		}
		return "0", nil
	}}
	if set != nil {
		p.Validate = func(v string) error { _, err := ParseBool(v); return err }
		p.Set = func(v string) error {
			b, err := ParseBool(v)
			if err != nil {
				return err
			}
			return set(b)
		}
	}
	return p
}

// Enum returns a parameter taking one of values (compared after folding
// blanks and case, as lctl's nrs_policies does).
func Enum(name, help string, get func() string, set func(string) error, values ...string) Param {
	canon := func(v string) (string, error) {
		c := strings.ToLower(strings.Join(strings.Fields(v), " "))
		if !slices.Contains(values, c) {
			return "", &Error{Kind: ErrBadValue, Reason: "want one of " + strings.Join(values, ", ")}
		}
		return c, nil
	}
	p := Param{Name: name, Help: help, Get: func() (string, error) { return get(), nil }}
	if set != nil {
		p.Validate = func(v string) error { _, err := canon(v); return err }
		p.Set = func(v string) error {
			c, err := canon(v)
			if err != nil {
				return err
			}
			return set(c)
		}
	}
	return p
}

// ReadOnly returns a read-only parameter whose value get formats.
func ReadOnly(name, help string, get func() string) Param {
	return Param{Name: name, Help: help, Get: func() (string, error) { return get(), nil }}
}

// Stats formats a Lustre stats file (lprocfs_stats_seq_show): the
// snapshot, start and elapsed times, then one line per counter:
//
//	snapshot_time             1700000000.123456789 secs.nsecs
//	start_time                1699999000.000000001 secs.nsecs
//	elapsed_time              1000.123456788 secs.nsecs
//	read_bytes                12 samples [bytes] 4096 1048576 8392704
//	ost_write                 3 samples [reqs]
//
// Counters with no samples are left out, as Lustre does.
type Stats struct {
	b strings.Builder
}

// NewStats starts a stats file read now for counters kept since start.
func NewStats(start time.Time) *Stats {
	s := &Stats{}
	now := time.Now()
	s.time("snapshot_time", now.Sub(time.Unix(0, 0)))
	if !start.IsZero() {
		s.time("start_time", start.Sub(time.Unix(0, 0)))
		s.time("elapsed_time", now.Sub(start))
	}
	return s
}

func (s *Stats) time(name string, d time.Duration) {
	fmt.Fprintf(&s.b, "%-25s %d.%09d secs.nsecs\n", name, d/time.Second, d%time.Second)
}

// Count adds a counter of events in unit ("reqs", "bytes", "usecs").
func (s *Stats) Count(name string, n uint64, unit string) {
	if n == 0 {
		return
	}
	fmt.Fprintf(&s.b, "%-25s %d samples [%s]\n", name, n, unit)
}

// Sum adds a counter with the least, the greatest and the total sample.
func (s *Stats) Sum(name string, n uint64, unit string, minV, maxV, sum uint64) {
	if n == 0 {
		return
	}
	fmt.Fprintf(&s.b, "%-25s %d samples [%s] %d %d %d\n", name, n, unit, minV, maxV, sum)
}

// String returns the file without its last newline (lctl adds one).
func (s *Stats) String() string { return strings.TrimSuffix(s.b.String(), "\n") }
