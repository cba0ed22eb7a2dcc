package api

import (
	"sync/atomic"
	"time"
)

// A burner spends a given amount of CPU time. It counts loop iterations
// rather than watching the clock: a request that loses the CPU to others
// half-way still has all its work left to do, as real work has, so an
// overloaded process really is short of CPU.
type burner struct {
	perMicro float64 // iterations per microsecond on this CPU, measured at start
}

// burnSink keeps the compiler from removing the loop.
var burnSink atomic.Uint64

func spin(n int64) uint64 {
	x := uint64(n)
	for i := int64(0); i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

// newBurner measures how fast this CPU runs the loop: the fastest of
// several short trials, since a trial can only be slowed by others, never
// sped up.
func newBurner() burner {
	const n = 200_000
	best := time.Duration(1<<63 - 1)
	// Trials spread over about 50ms: a virtual machine's CPU can be taken
	// away for a few milliseconds at a time, which would slow every trial
	// of a tight series and make each request burn too little.
	for range 15 {
		start := time.Now()
		burnSink.Store(spin(n))
		if d := time.Since(start); d > 0 && d < best {
			best = d
		}
		time.Sleep(3 * time.Millisecond)
	}
	return burner{perMicro: float64(n) * float64(time.Microsecond) / float64(best)}
}

// burn spends about d of CPU time.
func (b burner) burn(d time.Duration) {
	if d <= 0 {
		return
	}
	burnSink.Store(spin(int64(b.perMicro * float64(d.Microseconds()))))
}
