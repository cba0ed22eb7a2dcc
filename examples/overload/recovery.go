package main

import (
	"time"

	"github.com/loadshed/loadshed/examples/server/api"
	"github.com/loadshed/loadshed/shed"
)

// The recovery targets: after a capacity change, in either direction,
// goodput back to at least recoverGoodput of what the floor answers in the
// same window (on the same arrivals, with the new capacity), less what the
// window's refusals cost the server (as the steady goodput target's bound:
// the floor refuses for nothing), and critical success back to
// targetCriticalSuccess, within recoverWithin, for a second at least.
const (
	window         = 500 * time.Millisecond
	recoverGoodput = 0.90
	recoverWithin  = 2 * time.Second
)

// recovery is what followed one capacity change.
type recovery struct {
	at       time.Duration // when it was made, since the flood began
	capacity float64       // the capacity after it, per second
	// back is how long after the change goodput and critical success were
	// back on target, for a second at least (or to the next change or the
	// end of the flood, if sooner); -1: never.
	back time.Duration
	// Per window from two windows before the change: goodput (answers
	// ending in the window, per second), the floor's, the floor's less
	// what the window's refusals cost (bound), critical success of the
	// requests sent in the window (-1: none sent).
	from                            time.Duration
	goodput, floor, bound, critical []float64
}

// criticalFits reports whether critical demand alone, at rate, fits a
// capacity measured in the run, so that critical success is judged while
// it is in force: at most criticalFitShare of it. The steady targets judge
// critical success where critical demand is a half of capacity or less,
// never where it is all of it (10x); a capacity with a change is
// measured, not known, and at 5x critical demand read 0.998 of the noisy
// neighbour's half of the CPU in one run and all of it in another: a coin
// toss on whether success is judged where even a perfect scheduler's
// queue grows without bound.
func criticalFits(rate, capacity float64) bool { return rate <= criticalFitShare*capacity }

const criticalFitShare = 0.9

// refusalPrice is what refusing costs the server while a change lasts:
// cost, the CPU time of one refusal, measured in the run; cpuShare, the
// part of the server's CPU left to it (a neighbour that burns half of it
// leaves 0.5, and a refusal then costs twice as large a part of the
// capacity; a slower downstream leaves the CPU whole: 1).
type refusalPrice struct {
	cost     time.Duration
	cpuShare float64
}

// left is the part of the capacity refusals at perSecond leave.
func (p refusalPrice) left(perSecond float64) float64 {
	if p.cpuShare <= 0 {
		return 1
	}
	return max(0, 1-perSecond*p.cost.Seconds()/p.cpuShare)
}

// recoveryAfter measures the windows around a change made at at, up to
// horizon (the next change, or the end of the flood). critical says whether
// critical success is judged (critical demand alone fits the new capacity).
// floorLat is the floor's latencies of arr; price what a refusal costs
// after the change.
func recoveryAfter(samples []sample, arr []arrival, floorLat []time.Duration, at, horizon time.Duration, capacity float64, critical bool, price refusalPrice) recovery {
	r := recovery{at: at, capacity: capacity, from: max(0, at-2*window)}
	// Whole windows only; a change made a few milliseconds late does not
	// cost the last one.
	n := int((horizon - r.from + window/20) / window)
	if n <= 0 {
		r.back = -1
		return r
	}
	r.goodput, r.floor, r.bound, r.critical = make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	critSent, critOK, refused := make([]int, n), make([]int, n), make([]int, n)
	index := func(t time.Duration) int {
		if t < r.from {
			return -1
		}
		i := int((t - r.from) / window)
		if i >= n {
			return -1
		}
		return i
	}
	for _, s := range samples {
		if s.res == resOK {
			if i := index(s.at + s.latency); i >= 0 {
				r.goodput[i]++
			}
		}
		if s.res == resThrottle || s.res == resShed {
			// Refused at once, where it was sent.
			if i := index(s.at); i >= 0 {
				refused[i]++
			}
		}
		if s.prio == shed.Critical {
			if i := index(s.at); i >= 0 {
				critSent[i]++
				if s.res == resOK {
					critOK[i]++
				}
			}
		}
	}
	for j, a := range arr {
		if floorLat[j] >= 0 {
			if i := index(a.at + floorLat[j]); i >= 0 {
				r.floor[i]++
			}
		}
	}
	// Back at the first window that starts a second on target (all of the
	// phase, if it is shorter): critical success in each window, goodput
	// over the second, against the floor's less the refusals' cost over
	// the same second. Over the second, not by window: with the downstream
	// slowed down, answers come four at a time every 90ms, five or six
	// batches to a window, and the floor's batches fall elsewhere than the
	// server's. A dip later on is the steady targets' business, not the
	// change's.
	const streak = int(time.Second / window)
	first := -1
	critOKs := make([]bool, n)
	for i := range n {
		r.goodput[i] /= window.Seconds()
		r.floor[i] /= window.Seconds()
		r.bound[i] = r.floor[i]
		r.critical[i] = -1
		if critSent[i] > 0 {
			r.critical[i] = float64(critOK[i]) / float64(critSent[i])
		}
		if start := r.from + time.Duration(i)*window; start >= at {
			r.bound[i] *= price.left(float64(refused[i]) / window.Seconds())
			if first < 0 {
				first = i
			}
		}
		critOKs[i] = !(critical && r.critical[i] >= 0 && r.critical[i] < targetCriticalSuccess)
	}
	r.back = -1
	need := streak
	if first >= 0 {
		need = min(streak, n-first) // a phase shorter than the streak
	}
	for i := max(first, 0); first >= 0 && i+need <= n; i++ {
		good, served, bound := true, 0.0, 0.0
		for j := i; j < i+need; j++ {
			good = good && critOKs[j]
			served += r.goodput[j]
			bound += r.bound[j]
		}
		if good && served >= recoverGoodput*bound {
			r.back = r.from + time.Duration(i)*window - at
			break
		}
	}
	return r
}

// steady is the samples a step's whole-step targets judge: in a scenario
// with a capacity change, not those sent within recoverWithin of a change
// (the recovery target judges those), and, with whole (for critical
// success when critical demand alone does not fit the reduced capacity,
// for the half-load target, whose load is not half while the change
// lasts), none sent while it lasted.
func steady(samples []sample, changes []*change, whole bool) []sample {
	if len(changes) < 2 {
		return samples
	}
	t1, t2 := changes[0].applied, changes[1].applied
	var out []sample
	for _, s := range samples {
		switch {
		case s.at >= t1 && s.at < t1+recoverWithin:
		case s.at >= t2 && s.at < t2+recoverWithin:
		case whole && s.at >= t1 && s.at < t2:
		default:
			out = append(out, s)
		}
	}
	return out
}

// isLoadshed is whether a set-up is one of loadshed's, whose targets are
// checked.
func isLoadshed(p api.Protection) bool {
	return p == api.Loadshed || p == api.LoadshedCPUBound || p == api.LoadshedFIFO
}
