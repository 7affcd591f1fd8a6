package osc

// SpoilPageSums makes the checksums that o's unsent dirty pages keep
// wrong, as a page whose bytes changed without its sum would have them,
// and returns how many it spoiled.
func SpoilPageSums(o *Object) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, i := range o.mu.dirtyIdx {
		if p := o.mu.pages.get(i); p != nil && !p.sumOf.empty() {
			p.sum ^= 0x5a5a
			n++
		}
	}
	return n
}

// HoldWriteSlots takes every write RPC slot of c that is free, so that
// nothing writes back until the returned func gives them back.
func HoldWriteSlots(c *Client) (release func()) {
	n := 0
	for c.wslots.TryAcquire() {
		n++
	}
	return func() {
		for range n {
			c.wslots.Release()
		}
	}
}

// OnTruncating sets fn to run when a truncate has dropped the pages past
// the new size and is about to punch (punched false), and when the punch
// is done (true); nil: nothing.
func OnTruncating(fn func(o *Object, punched bool)) { testHookTruncating = fn }

// ReadAheadNow reads [off, off+n) of l's object ahead, as the read-ahead
// of a reader under l does, and waits for its RPCs to end.
func ReadAheadNow(l *Lock, off, n uint64) {
	o := l.obj
	o.readAhead(l.l, []extent{{off, off + n}})
	for {
		o.mu.Lock()
		busy, ch := o.mu.busy, o.mu.changed
		o.mu.Unlock()
		if busy == 0 {
			return
		}
		<-ch
	}
}
