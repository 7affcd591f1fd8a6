package ldlm

import (
	"fmt"
	"sync/atomic"
	"time"
)

// nodeCallbackTimeout is the node's ldlm_timeout, in nanoseconds: Lustre
// keeps it per node (`lctl set_param ldlm_timeout=`, persistently
// FS.sys.ldlm_timeout), Nacre per process.
var nodeCallbackTimeout atomic.Int64

func init() { nodeCallbackTimeout.Store(int64(DefaultCallbackTimeout)) }

// NodeCallbackTimeout returns the node's ldlm_timeout: how long a lock
// server whose configuration sets no CallbackTimeout waits for a lock to
// come back after a blocking AST.
func NodeCallbackTimeout() time.Duration { return time.Duration(nodeCallbackTimeout.Load()) }

// SetNodeCallbackTimeout sets the node's ldlm_timeout (at least a
// second); callbacks sent from then on wait that long.
func SetNodeCallbackTimeout(d time.Duration) error {
	if d < time.Second {
		return fmt.Errorf("ldlm: ldlm_timeout %v: want at least 1s", d)
	}
	nodeCallbackTimeout.Store(int64(d))
	return nil
}

// callbackTimeout is how long a callback may take now.
func (s *Server) callbackTimeout() time.Duration {
	if d := s.cfg.CallbackTimeout; d > 0 {
		return d
	}
	return NodeCallbackTimeout()
}
