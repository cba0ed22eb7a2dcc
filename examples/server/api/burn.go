package api

import (
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
)

// BurnRateEnv, when set in the environment to a positive number, is the
// loop iterations per microsecond every request's work is counted in,
// instead of a rate this process measures at start. The overload
// demonstration measures it once and gives it to every server it starts:
// servers that each measured their own were given different work per
// request (a rate measured while the CPU was taken away is low, and the
// work counted in it short), and a capacity measured on one server did
// not hold for the next (542/s against the 480/s of the server then
// flooded, on the same CPU).
const BurnRateEnv = "LOADSHED_API_BURN_RATE"

// A burner spends a given amount of CPU time. It counts loop iterations
// rather than watching the clock: a request that loses the CPU to others
// half-way still has all its work left to do, as real work has, so an
// overloaded process really is short of CPU.
type burner struct {
	perMicro float64 // iterations per microsecond on this CPU, measured at start
	// cpu is the CPU time the burns took, in ns of their thread's CPU
	// clock, and counted how many were timed (none where that clock
	// cannot be read): the overload demonstration compares a step's
	// burns with the calibration's to see whether the CPU ran slower.
	cpu, counted atomic.Int64
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

// newBurner counts work in the rate BurnRateEnv gives, or else in one it
// measures (MeasureBurnRate): the fastest of several short trials, since
// a trial can only be slowed by others, never sped up.
func newBurner() *burner {
	if r, err := strconv.ParseFloat(os.Getenv(BurnRateEnv), 64); err == nil && r > 0 {
		return &burner{perMicro: r}
	}
	return &burner{perMicro: MeasureBurnRate()}
}

// MeasureBurnRate returns how many iterations of the work loop this CPU
// runs a microsecond (see BurnRateEnv).
func MeasureBurnRate() float64 {
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
	return float64(n) * float64(time.Microsecond) / float64(best)
}

// burn spends about d of CPU time.
func (b *burner) burn(d time.Duration) {
	if d <= 0 {
		return
	}
	n := int64(b.perMicro * float64(d.Microseconds()))
	// The thread's CPU clock, not the wall clock: time the goroutine
	// spent waiting for the CPU is not the CPU's speed. Locked to its
	// thread, the burn is all on the clock it reads.
	runtime.LockOSThread()
	start, ok := threadCPU()
	burnSink.Store(spin(n))
	end, ok2 := threadCPU()
	runtime.UnlockOSThread()
	if ok && ok2 && end >= start {
		b.cpu.Add(end - start)
		b.counted.Add(1)
	}
}

// WorkCPU returns the CPU time the requests' work has taken so far and how
// many requests' work was timed (none where a thread's CPU clock cannot be
// read).
func (s *Service) WorkCPU() (time.Duration, int64) {
	return time.Duration(s.burner.cpu.Load()), s.burner.counted.Load()
}
