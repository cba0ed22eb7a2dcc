//go:build !race

package redistest

// RaceSlack is added to the timing bounds of fault tests under the race
// detector, which slows every goroutine several times over.
const RaceSlack = 0
