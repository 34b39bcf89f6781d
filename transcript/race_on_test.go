//go:build race

package transcript

// raceEnabled: the race detector slows the agreement tests' many cases
// (and their quadratic deep-nesting ones) down tenfold; they run fewer.
const raceEnabled = true
