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
	"slices"
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

// Params returns the node's timeouts as parameters; register them with
// params.Registry.Share.
func Params() []params.Param {
	secs := func(d time.Duration) int64 { return int64(d / time.Second) }
	// param is one field of ptlrpc's Timeouts; a value that would leave
	// them invalid (at_min above at_max) is refused before Set.
	param := func(name, help string, lo int64, get func(ptlrpc.Timeouts) time.Duration, set func(*ptlrpc.Timeouts, time.Duration)) params.Param {
		check := func(n int64) error {
			t := ptlrpc.NodeTimeouts()
			set(&t, time.Duration(n)*time.Second)
			if err := t.Validate(); err != nil {
				return &params.Error{Kind: params.ErrBadValue, Reason: err.Error()}
			}
			return nil
		}
		return params.Int(name, help, func() int64 { return secs(get(ptlrpc.NodeTimeouts())) },
			func(n int64) error {
				return ptlrpc.UpdateNodeTimeouts(func(t *ptlrpc.Timeouts) { set(t, time.Duration(n)*time.Second) })
			}, lo, maxSeconds, check)
	}
	return []params.Param{
		param("timeout", "obd_timeout, seconds: idle connections ping every quarter of it, servers evict clients silent for one and a half times it, and requests wait that long with adaptive timeouts off", 1,
			func(t ptlrpc.Timeouts) time.Duration { return t.Obd }, func(t *ptlrpc.Timeouts, d time.Duration) { t.Obd = d }),
		param("at_min", "adaptive timeout floor, seconds: the least service time a request timeout or an early reply assumes", 0,
			func(t ptlrpc.Timeouts) time.Duration { return t.ATMin }, func(t *ptlrpc.Timeouts, d time.Duration) { t.ATMin = d }),
		param("at_max", "adaptive timeout ceiling, seconds: caps request timeouts and early reply extensions; 0 turns adaptive timeouts off", 0,
			func(t ptlrpc.Timeouts) time.Duration { return t.ATMax }, func(t *ptlrpc.Timeouts, d time.Duration) { t.ATMax = d }),
		param("at_history", "adaptive timeout history, seconds: how long a peak service time is remembered", 1,
			func(t ptlrpc.Timeouts) time.Duration { return t.ATHistory }, func(t *ptlrpc.Timeouts, d time.Duration) { t.ATHistory = d }),
		params.Int("ldlm_timeout", "lock callback timeout, seconds: how long a client has to give a lock back before it is evicted",
			func() int64 { return secs(ldlm.NodeCallbackTimeout()) },
			func(n int64) error { return ldlm.SetNodeCallbackTimeout(time.Duration(n) * time.Second) }, 1, maxSeconds, nil),
	}
}
