// Package timeouts serves a node's RPC and lock timeouts as live
// parameters, named as Lustre names them (lctl get_param / set_param):
//
//	timeout       obd_timeout, seconds (ptlrpc.Timeouts.Obd)
//	at_min        adaptive timeout floor, seconds
//	at_max        adaptive timeout ceiling, seconds; 0 turns them off
//	at_history    adaptive timeout history, seconds
//	ldlm_timeout  lock callback timeout, seconds
//
// They are the process's (one node's), whatever mounts and targets it
// runs: clients and servers register them alike, shared.
package timeouts

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/mgs"
)

// Names are the parameters' names, as persistent sys.* parameters name
// them too (FS.sys.at_max).
var Names = []string{"timeout", "at_min", "at_max", "at_history", "ldlm_timeout"}

// Persistent reports whether the MGS's persistent parameter pn is one of
// the node's timeouts (FS.sys.at_max), which apply under their own name
// and are checked against each other (at_min at most at_max) as each is
// set.
func Persistent(pn mgs.ParamName) bool {
	return pn.Spec.Scope == mgs.ScopeSys && slices.Contains(Names, pn.Param)
}

// maxSeconds bounds every value, as the MGS's catalog does.
const maxSeconds = 3600

// fields are the node's Timeouts that are parameters, by name.
var fields = map[string]func(*ptlrpc.Timeouts) *time.Duration{
	"timeout":    func(t *ptlrpc.Timeouts) *time.Duration { return &t.Obd },
	"at_min":     func(t *ptlrpc.Timeouts) *time.Duration { return &t.ATMin },
	"at_max":     func(t *ptlrpc.Timeouts) *time.Duration { return &t.ATMax },
	"at_history": func(t *ptlrpc.Timeouts) *time.Duration { return &t.ATHistory },
}

// apply sets the values given by name (seconds, each checked by its
// parameter already) in t.
func apply(t *ptlrpc.Timeouts, values map[string]string) error {
	for name, v := range values {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64)
		if err != nil {
			return &params.Error{Kind: params.ErrBadValue, Reason: "want an integer"}
		}
		*fields[name](t) = time.Duration(n) * time.Second
	}
	return nil
}

// group checks and sets the timeouts assigned in one set_param together
// (at_min=100 at_max=200 on a node at at_max 60), refusing a result that
// is not valid as a whole (at_min above at_max), naming both.
var group = &params.Group{
	Validate: func(values map[string]string) error {
		t := ptlrpc.NodeTimeouts()
		if err := apply(&t, values); err != nil {
			return err
		}
		if t.ATMax > 0 && t.ATMin > t.ATMax {
			return &params.Error{Kind: params.ErrBadValue,
				Reason: fmt.Sprintf("at_min %d would be above at_max %d (seconds)", t.ATMin/time.Second, t.ATMax/time.Second)}
		}
		if err := t.Validate(); err != nil {
			return &params.Error{Kind: params.ErrBadValue, Reason: err.Error()}
		}
		return nil
	},
	Set: func(values map[string]string) error {
		var bad error
		err := ptlrpc.UpdateNodeTimeouts(func(t *ptlrpc.Timeouts) { bad = apply(t, values) })
		return cmp.Or(bad, err)
	},
}

// Params returns the node's timeouts as parameters; register them with
// params.Registry.Share. timeout, at_min, at_max and at_history are one
// params.Group: those given in one set_param are checked together.
func Params() []params.Param {
	secs := func(d time.Duration) int64 { return int64(d / time.Second) }
	// param is one field of ptlrpc's Timeouts, checked alone for its
	// range and with the others by the group.
	param := func(name, help string, lo int64) params.Param {
		field := fields[name]
		p := params.Int(name, help, func() int64 { t := ptlrpc.NodeTimeouts(); return secs(*field(&t)) },
			func(n int64) error {
				return ptlrpc.UpdateNodeTimeouts(func(t *ptlrpc.Timeouts) { *field(t) = time.Duration(n) * time.Second })
			}, lo, maxSeconds, nil)
		p.Group = group
		return p
	}
	return []params.Param{
		param("timeout", "obd_timeout, seconds: idle connections ping every quarter of it, servers evict clients silent for one and a half times it, and requests wait that long with adaptive timeouts off", 1),
		param("at_min", "adaptive timeout floor, seconds: the least service time a request timeout or an early reply assumes", 0),
		param("at_max", "adaptive timeout ceiling, seconds: caps request timeouts and early reply extensions; 0 turns adaptive timeouts off", 0),
		param("at_history", "adaptive timeout history, seconds: how long a peak service time is remembered", 1),
		params.Int("ldlm_timeout", "lock callback timeout, seconds: how long a client has to give a lock back before it is evicted",
			func() int64 { return secs(ldlm.NodeCallbackTimeout()) },
			func(n int64) error { return ldlm.SetNodeCallbackTimeout(time.Duration(n) * time.Second) }, 1, maxSeconds, nil),
	}
}
