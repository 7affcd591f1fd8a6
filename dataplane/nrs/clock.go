package nrs

import "time"

// Clock is the head's only source of time: TBF token arithmetic reads Now,
// and a Get that must wait for a token arms a Timer. Production code passes
// nil in Config for the real clock; tests inject a fake clock they advance by
// hand, so no TBF test depends on wall time. Implementations must be safe for
// concurrent use, and must not call back into the Head (the head calls them
// with its mutex held).
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer whose channel receives one value once d has
	// passed on this clock (at once if d <= 0).
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by Clock.NewTimer, like *time.Timer.
type Timer interface {
	// C returns the channel the timer sends on when it fires. The channel
	// should be buffered so that a timer nobody reads from never blocks the
	// clock.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it stopped
	// the timer (false if the timer had already fired or been stopped).
	Stop() bool
}

// realClock is the Clock used when Config.Clock is nil.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// realTimer adapts *time.Timer to Timer.
type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }
