package lnet

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Globals are LNet's node-wide settings that may change while it runs
// (Lustre's lnetctl global show and lnetctl set).
type Globals struct {
	// Discovery: the first send to a peer pings it to learn its other
	// NIDs (Config.DisableDiscovery is its opposite).
	Discovery bool
	// RetryCount is how many times a send that failed on the connection
	// is tried again within the transaction timeout (Config.RetryCount).
	RetryCount int
	// TransactionTimeout bounds a whole operation (Config.TransactionTimeout).
	TransactionTimeout time.Duration
	// HealthSensitivity is how much one failed send lowers the health of
	// the NI or peer NI at fault, out of 1000; 0 turns health off.
	HealthSensitivity int
	// RecoveryInterval is how often NIs and peer NIs below full health are
	// pinged and the NIs' links checked (Config.RecoveryInterval).
	RecoveryInterval time.Duration
}

// MaxRetryCount bounds Globals.RetryCount.
const MaxRetryCount = 100

// globals holds the Globals that the data path reads without a lock.
type globals struct {
	noDiscovery      atomic.Bool
	retryCount       atomic.Int64
	health           atomic.Int64 // 0: off
	recoveryInterval atomic.Int64 // ns
}

func (g *globals) init(c Config) {
	g.noDiscovery.Store(c.DisableDiscovery)
	g.retryCount.Store(int64(c.RetryCount))
	g.health.Store(int64(max(c.HealthSensitivity, 0)))
	g.recoveryInterval.Store(int64(c.RecoveryInterval))
}

func (ln *LNet) discoveryOn() bool      { return !ln.glob.noDiscovery.Load() }
func (ln *LNet) retries() int           { return int(ln.glob.retryCount.Load()) }
func (ln *LNet) healthSensitivity() int { return int(ln.glob.health.Load()) }
func (ln *LNet) recoveryInterval() time.Duration {
	return time.Duration(ln.glob.recoveryInterval.Load())
}

// Globals returns the node's current global settings.
func (ln *LNet) Globals() Globals {
	return Globals{
		Discovery:          ln.discoveryOn(),
		RetryCount:         ln.retries(),
		TransactionTimeout: ln.TransactionTimeout(),
		HealthSensitivity:  ln.healthSensitivity(),
		RecoveryInterval:   ln.recoveryInterval(),
	}
}

// SetGlobals makes g the node's global settings, for the operations that
// start from now on, after checking all of them (ErrInvalid, nothing
// changed). Health values already lowered stay where they are when health
// is turned off, as in Lustre, and recover once it is on again.
func (ln *LNet) SetGlobals(g Globals) error {
	switch {
	case g.RetryCount < 0 || g.RetryCount > MaxRetryCount:
		return fmt.Errorf("%w: retry_count %d: want 0 to %d", ErrInvalid, g.RetryCount, MaxRetryCount)
	case g.TransactionTimeout < time.Millisecond:
		return fmt.Errorf("%w: transaction_timeout %v: want 1ms or more", ErrInvalid, g.TransactionTimeout)
	case g.HealthSensitivity < 0 || g.HealthSensitivity > healthMax:
		return fmt.Errorf("%w: health_sensitivity %d: want 0 to %d", ErrInvalid, g.HealthSensitivity, healthMax)
	case g.RecoveryInterval < 10*time.Millisecond:
		return fmt.Errorf("%w: recovery_interval %v: want 10ms or more", ErrInvalid, g.RecoveryInterval)
	}
	old := ln.Globals()
	ln.glob.noDiscovery.Store(!g.Discovery)
	ln.glob.retryCount.Store(int64(g.RetryCount))
	ln.SetTransactionTimeout(g.TransactionTimeout)
	ln.glob.health.Store(int64(g.HealthSensitivity))
	ln.glob.recoveryInterval.Store(int64(g.RecoveryInterval))
	if g != old {
		ln.log.Info("globals changed", "discovery", g.Discovery, "retry_count", g.RetryCount,
			"transaction_timeout", g.TransactionTimeout, "health_sensitivity", g.HealthSensitivity,
			"recovery_interval", g.RecoveryInterval)
	}
	return nil
}
