package worker

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// Defaults of LimitConfig's fields.
const (
	// DefaultLimitWindow is the shortest window over which the learnt limit
	// measures latency and throughput; a window also lasts at least two
	// latencies and minLimitSamples completions.
	DefaultLimitWindow = 100 * time.Millisecond
	// DefaultLimitMax is the highest the learnt limit goes.
	DefaultLimitMax = 10000
	// DefaultLimitTolerance is how much slower than the baseline admitted
	// work may run before the limit shrinks: 1.1 is 10%.
	DefaultLimitTolerance = 1.1
)

// LimitConfig configures the learnt in-flight limit, which DefaultConfig
// turns on: the layer learns how much work the service can have in flight
// before it queues inside (for a CPU, for a connection of a pool, for a
// slow dependency), admits up to that, and queues the rest in priority
// order. Every zero field stands for its default. A worker budget
// (Config.Workers) replaces the learnt limit.
type LimitConfig struct {
	// Disable turns the learnt limit off: the layer sheds by its level
	// alone (and by Workers, when set).
	Disable bool
	// Initial is the limit before anything is learnt (default 16, or four
	// per CPU of the budget if more). The limit leaves it within a few
	// windows of traffic.
	Initial int64
	// Min is the lowest the limit goes (default: one per CPU of the budget,
	// CPUWorkers). A service that is CPU-bound needs that many in flight to
	// keep its CPUs busy.
	Min int64
	// Max is the highest the limit goes (default DefaultLimitMax).
	Max int64
	// Window is the shortest measuring window (default
	// DefaultLimitWindow). Tests shorten or lengthen it; services need not.
	Window time.Duration
	// Tolerance is how much slower than its baseline admitted work may run
	// before the limit shrinks (default DefaultLimitTolerance, 1.1).
	Tolerance float64
}

// minLimitSamples is the fewest completions a window closes on (unless it
// has run ten times its length): fewer make the mean too noisy to steer by.
const minLimitSamples = 24

// limiter learns the in-flight limit from what the layer observes: the
// latency of admitted work from admission to release (queue wait not
// included), against a baseline kept current, and the throughput.
//
// Each window it takes the gradient g = clamp(tolerance × baseline / mean
// latency, 0.5, 1) and moves the limit toward g × limit + √limit (Netflix's
// Gradient2, Envoy's adaptive concurrency). Past the knee (a CPU run by
// more requests than it has cores, a pool with every connection busy)
// latency grows in proportion to the in-flight count, so the limit settles
// at tolerance × knee + √knee. Below it latency is flat and the limit grows,
// only while it binds (requests queued over it in the window).
//
// The baseline is the no-queue latency. It follows any lower window mean at
// once. It cannot be re-measured by waiting for a quiet moment (under
// sustained overload in-flight is never low), nor by a min that only falls:
// when the service itself gets slower (a downstream at a third of its
// speed, a neighbour taking the CPU) a stale baseline reads the slower
// service as queueing and shrinks the limit below what it can do. So the
// limiter tests its own steps, as Cinnamon's covariance of in-flight and
// throughput does: when the mean in-flight count fell by a fifth or more
// against a recent window while latency fell by less than 8%, the latency
// is not queueing (queueing would have drained with the in-flight count):
// the service is slower, and the baseline is that latency.
type limiter struct {
	// The request path's side.
	limit  atomic.Int64 // the learnt limit, in units
	start  atomic.Int64 // unix ns the window began
	window atomic.Int64 // the window's length, ns
	sum    atomic.Int64 // ns of latency in the window
	count  atomic.Int64 // completions in the window
	bound  atomic.Bool  // a request queued over the limit in the window
	capped atomic.Bool  // the CPU or the scheduler is saturated: do not grow
	mean   atomic.Int64 // smoothed latency of admitted work, ns (queue bounds)

	mu        sync.Mutex // held while a window closes; guards the fields below
	est       float64    // the limit, unrounded
	base      float64    // the baseline (no-queue) latency, ns; 0 until learnt
	slowStart bool       // grow by half the limit a window, until the knee is met
	// The probe: every probeEvery windows the limit drops to probeDepth of
	// itself for two windows (one to drain, one to measure), and the slope
	// of latency against in flight between the second and the window
	// before (ref) says whether the baseline is current; the limit then
	// goes back to saved.
	phase      int
	sinceProbe int
	ref        windowStat
	saved      float64
	min, max   float64
	minWindow  float64 // ns
	tolerance  float64
}

// windowStat is one closed window: mean in flight (Little's law: throughput
// × latency) and mean latency.
type windowStat struct{ inflight, latency float64 }

func newLimiter(c LimitConfig, now time.Time) *limiter {
	l := &limiter{est: float64(c.Initial), slowStart: true, min: float64(c.Min), max: float64(c.Max),
		minWindow: float64(c.Window), tolerance: c.Tolerance}
	l.limit.Store(c.Initial)
	l.start.Store(now.UnixNano())
	l.window.Store(int64(c.Window))
	return l
}

// observe records the latency of one admitted request that completed at
// now, and closes the window when it is due. It reports whether the limit
// changed (the caller then wakes the queue).
func (l *limiter) observe(now time.Time, latency time.Duration) bool {
	if latency <= 0 {
		latency = 1
	}
	l.sum.Add(int64(latency))
	n := l.count.Add(1)
	t := now.UnixNano()
	elapsed := t - l.start.Load()
	w := l.window.Load()
	if elapsed < w || (n < minLimitSamples && elapsed < 10*w) {
		return false
	}
	if !l.mu.TryLock() {
		return false // another release is closing it
	}
	defer l.mu.Unlock()
	elapsed = t - l.start.Load()
	if elapsed < l.window.Load() {
		return false // closed by another release meanwhile
	}
	l.start.Store(t)
	sum, count := l.sum.Swap(0), l.count.Swap(0)
	bound := l.bound.Swap(false)
	if count == 0 {
		return false
	}
	before := l.limit.Load()
	l.update(float64(sum)/float64(count), float64(count)/float64(elapsed), bound, l.capped.Load())
	return l.limit.Load() != before
}

// update is one window's step, given its mean latency (ns), throughput
// (completions per ns), whether the limit bound, and whether the CPU is
// saturated. mu is held.
func (l *limiter) update(latency, throughput float64, bound, capped bool) {
	inflight := throughput * latency
	if m := float64(l.mean.Load()); m == 0 {
		l.mean.Store(int64(latency))
	} else {
		l.mean.Store(int64(m + 0.25*(latency-m)))
	}
	l.window.Store(int64(math.Max(l.minWindow, 2*latency)))
	if l.base == 0 || latency < l.base {
		l.base = latency
	}
	switch l.phase {
	case probeDrain:
		// The requests admitted over the probe's limit finish in this
		// window; the next one measures the probe.
		l.phase = probeMeasure
		return
	case probeMeasure:
		l.measureProbe(inflight, latency)
		return
	}

	g := math.Max(0.5, math.Min(1, l.tolerance*l.base/latency))
	est := l.est
	switch {
	case g < 1:
		l.slowStart = false
		est += 0.5 * (est*g + math.Sqrt(est) - est)
	case !bound || capped:
		// A limit the traffic did not reach says nothing about whether a
		// larger one would hurt; nor does one the CPU cannot serve more of.
	case l.slowStart:
		est *= 1.5
	default:
		est += 0.5 * math.Sqrt(est)
	}
	l.setEstimate(est)
	l.sinceProbe++
	if bound && l.sinceProbe >= probeEvery {
		l.phase, l.ref, l.saved = probeDrain, windowStat{inflight, latency}, l.est
		l.sinceProbe = 0
		l.setEstimate(probeDepth * l.est)
	}
}

// setEstimate sets the limit to est, within [min, max]. mu is held.
func (l *limiter) setEstimate(est float64) {
	l.est = math.Max(l.min, math.Min(l.max, est))
	l.limit.Store(int64(math.Round(l.est)))
}

// measureProbe ends a probe: the window at probeDepth of the limit against
// the one before it. mu is held.
func (l *limiter) measureProbe(inflight, latency float64) {
	if dk := math.Log(l.ref.inflight / inflight); dk >= math.Log(minProbeSpan) {
		switch slope := math.Log(l.ref.latency/latency) / dk; {
		case slope <= flatSlope:
			// Latency did not fall with in flight: no queue inside at
			// the probe's level, so its latency is the no-queue one,
			// whatever it was before (a service that got slower).
			// The limit may be below the knee: find it again fast.
			l.base, l.slowStart = latency, true
		case slope >= queueSlope:
			// Latency fell with in flight: it queues inside even at the
			// probe's level, so the no-queue latency is lower still (a
			// service that started under load never saw it). Extrapolate
			// one more step down, and probe again soon.
			l.base = math.Min(l.base, latency*inflight/l.ref.inflight)
			l.sinceProbe = probeEvery - probeSoon
		}
	}
	l.phase = probeNone
	l.setEstimate(l.saved)
}

// Thresholds of the log-log slope of latency against in flight between a
// probe and the window before it: at most flatSlope, latency did not follow
// in flight (no queue inside); at least queueSlope, it did.
const (
	flatSlope  = 0.3
	queueSlope = 0.7
	// probeEvery is how many windows pass between probes, while the limit
	// binds; probeDepth is the share of the limit a probe admits.
	probeEvery = 5
	probeDepth = 0.75
	// probeSoon is how many windows the next probe comes after one that
	// found the baseline too high.
	probeSoon = 2
	// minProbeSpan is the least ratio of in flight between the probe and
	// the window before it that gives a slope: nearer, the noise of the
	// means is most of it.
	minProbeSpan = 1.15
)

const (
	probeNone = iota
	probeDrain
	probeMeasure
)

// Limit returns the learnt limit now.
func (l *limiter) Limit() int64 { return l.limit.Load() }

// queueBounds are the queue's bounds derived from what the limiter
// learnt: at most one limit's worth of requests waiting (a round of
// service), each for at most four mean latencies, a second before any
// latency is known.
func (l *limiter) queueBounds() (length int64, wait time.Duration) {
	length = max(l.limit.Load(), 4)
	wait = time.Second
	if m := l.mean.Load(); m > 0 {
		wait = 4 * time.Duration(m)
	}
	return length, wait
}

// Caps of the learnt limit's own queue (when Config.Enforcement.Action is
// not Queue, which would give its own): the bounds in force are
// limiter.queueBounds, far below these.
const (
	limitQueueCap     = 1 << 14
	limitQueueMaxWait = 10 * time.Second
)

// timedLease returns a lease for cost units already counted in flight,
// stamped with the time of admission: the learnt limit measures from it.
func (l *Layer) timedLease(cost int64) shed.Lease {
	ls := l.lease(cost)
	if l.lim != nil {
		ls.Acquired = l.clock.Now()
	}
	return ls
}

// overLimit decides for a request the learnt limit has no room for now: it
// waits in the priority queue, within the bounds the limit derives from
// what it learnt. Over the length bound the lowest-priority request waiting
// is evicted for it, or it is refused if none is below it; a protected
// (critical) request always queues. In dry run it is admitted and marked.
func (l *Layer) overLimit(ctx context.Context, req shed.Request, cost int64) (shed.Lease, error) {
	if !l.lim.bound.Load() {
		l.lim.bound.Store(true)
	}
	if l.enf.DryRun {
		return l.dryRun(cost), nil
	}
	p := req.Priority
	protected := p.Index() >= l.protect
	length, wait := l.lim.queueBounds()
	if int64(l.queue.Len()) >= length && !l.queue.Evict(p) && !protected {
		return shed.Lease{}, l.queueRejection(shed.ErrQueueFull, 0)
	}
	if protected {
		wait *= 4
	}
	deadline := l.clock.Now().Add(wait)
	if !req.Deadline.IsZero() && req.Deadline.Before(deadline) {
		deadline = req.Deadline
	}
	take := func() bool {
		return !sheds(uint32(l.state.Load()), p) && l.takeWithin(cost, l.lim.Limit())
	}
	giveBack := func() { l.inflight.Add(-cost) }
	l.capacityWaiters.Add(1)
	waited, err := l.queue.Wait(ctx, p, deadline, take, giveBack)
	l.capacityWaiters.Add(-1)
	l.recordWait(waited)
	if err != nil {
		return shed.Lease{}, l.queueRejection(err, waited)
	}
	ls := l.timedLease(cost)
	ls.Waited = waited
	return ls, nil
}
