package concurrency

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// staleWindows is how many windows in a row the limit may sit at its floor
// with latency still above tolerance before the no-load latency is taken to
// be stale (the service got slower for good) and re-measured.
const staleWindows = 3

// adaptive moves the overall limit with observed latency (see the package
// documentation). Samples are added with atomics; the window is closed, and
// the limit recomputed, by whichever release first sees it due and wins
// TryLock, so releases never wait on each other.
type adaptive struct {
	cfg Adaptive

	start atomic.Int64 // unix nanos the current window began
	sum   atomic.Int64 // nanoseconds of latency in the window
	count atomic.Int64 // samples in the window
	peak  atomic.Int64 // most units in flight seen at a release in the window

	mu       sync.Mutex // held while closing a window; guards the fields below
	estimate float64    // the limit, unrounded
	baseline float64    // the no-load latency: least window mean seen, in ns
	stale    int        // windows in a row at the floor and over tolerance
}

func newAdaptive(cfg Adaptive, initial int64, now time.Time) *adaptive {
	a := &adaptive{cfg: cfg, estimate: float64(initial)}
	a.start.Store(now.UnixNano())
	return a
}

// observe records one latency sample, taken when inflight units were in
// flight, and returns the new limit when it closed a window.
func (a *adaptive) observe(now time.Time, rtt time.Duration, inflight int64) (int64, bool) {
	if rtt <= 0 {
		rtt = 1
	}
	a.sum.Add(int64(rtt))
	c := a.count.Add(1)
	for {
		p := a.peak.Load()
		if inflight <= p || a.peak.CompareAndSwap(p, inflight) {
			break
		}
	}
	t := now.UnixNano()
	if c < a.cfg.MinSamples || t-a.start.Load() < int64(a.cfg.Window) {
		return 0, false
	}
	if !a.mu.TryLock() {
		return 0, false
	}
	defer a.mu.Unlock()
	if t-a.start.Load() < int64(a.cfg.Window) {
		return 0, false // another release closed it first
	}
	a.start.Store(t)
	sum, n, peak := a.sum.Swap(0), a.count.Swap(0), a.peak.Swap(0)
	if n == 0 {
		return 0, false
	}
	return a.update(float64(sum)/float64(n), peak), true
}

// update is one window's step of the gradient, given the window's mean
// latency and its peak in-flight count. mu is held.
func (a *adaptive) update(mean float64, peak int64) int64 {
	if a.baseline == 0 || mean < a.baseline {
		a.baseline = mean
	}
	limit := a.estimate
	gradient := math.Max(0.5, math.Min(1, a.cfg.Tolerance*a.baseline/mean))
	// A limit the traffic never came near says nothing about whether a
	// larger one would hurt: only grow when the limit was half used.
	if gradient == 1 && float64(peak) < limit/2 {
		return a.rounded()
	}
	target := limit*gradient + math.Sqrt(limit)
	next := limit*(1-a.cfg.Smoothing) + target*a.cfg.Smoothing
	next = math.Max(float64(a.cfg.Floor), math.Min(float64(a.cfg.Ceiling), next))
	if gradient < 1 && next <= float64(a.cfg.Floor) {
		a.stale++
		if a.stale >= staleWindows {
			a.baseline, a.stale = mean, 0
		}
	} else {
		a.stale = 0
	}
	a.estimate = next
	return a.rounded()
}

func (a *adaptive) rounded() int64 {
	return max(a.cfg.Floor, min(a.cfg.Ceiling, int64(a.estimate)))
}
