//go:build race

package layout

// raceEnabled shortens the pure-computation property tests under the race
// detector, which slows byte loops tenfold and finds nothing in them.
const raceEnabled = true
