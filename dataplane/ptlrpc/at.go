package ptlrpc

import (
	"sync"
	"time"
)

// atBins is the number of history bins of an adaptive timeout, as Lustre's
// AT_BINS.
const atBins = 4

// estimator is one adaptive timeout (Lustre's struct adaptive_timeout): the
// worst value measured over a sliding history window, kept in atBins bins so
// that old peaks age out. Safe for concurrent use.
type estimator struct {
	mu       sync.Mutex
	history  time.Duration // 0: the node's at_history, as it is now
	binStart time.Time
	bins     [atBins]time.Duration
	cur      time.Duration // max of bins, never below initial until measured
	worst    time.Duration
	measured bool
	initial  time.Duration
}

// newEstimator returns an estimator starting at initial whose peaks are
// remembered for history; 0 means the node's at_history, followed as it
// changes.
func newEstimator(initial, history time.Duration) *estimator {
	return &estimator{history: max(history, 0), cur: initial, initial: initial}
}

// binWidth is how long one bin of the history covers now.
func (e *estimator) binWidth() time.Duration {
	h := e.history
	if h == 0 {
		h = NodeTimeouts().ATHistory
	}
	return max(h/atBins, time.Nanosecond)
}

// add records one measurement taken at now.
func (e *estimator) add(now time.Time, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d < 0 {
		d = 0
	}
	if !e.measured {
		e.measured = true
		e.binStart = now
		e.bins = [atBins]time.Duration{d}
	} else if w := e.binWidth(); now.Sub(e.binStart) >= w {
		shift := int(min(now.Sub(e.binStart)/w, atBins))
		// Age the history: move the bins along by shift, dropping the
		// oldest ones.
		if shift >= atBins {
			e.bins = [atBins]time.Duration{}
		} else {
			copy(e.bins[shift:], e.bins[:atBins-shift])
			for i := range shift {
				e.bins[i] = 0
			}
		}
		e.binStart = e.binStart.Add(time.Duration(shift) * w)
		if shift >= atBins {
			e.binStart = now
		}
	}
	e.bins[0] = max(e.bins[0], d)
	e.cur = 0
	for _, b := range e.bins {
		e.cur = max(e.cur, b)
	}
	e.worst = max(e.worst, d)
}

// current returns the estimate: the worst value in the window, or the
// initial value before any measurement.
func (e *estimator) current() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cur
}
