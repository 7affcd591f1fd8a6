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
