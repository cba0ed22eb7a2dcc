package worker

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/internal/cacheline"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
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
	// Initial is the limit before anything is learnt (default two per CPU
	// of the budget, at least 4). Under load the limit grows by half each
	// window (a tenth of a second) until latency says it met the knee, so
	// starting low costs little; starting far above the knee costs probes.
	Initial int64
	// Min is the lowest the limit goes (default: one per CPU of the
	// budget, cpuWorkers), what a CPU-bound service needs in flight to
	// keep its CPUs busy. Capacity is handed over after the goroutines
	// reading the flood have run (handoff.go), so the CPU is busy with
	// them meanwhile, and a second request in flight per CPU would only
	// make every critical request wait behind two.
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

// minCappedSamples is the fewest completions a window closes on while the
// CPU reads saturated. Such a window only shrinks the limit (by
// capShrink), whatever its mean, and each window waited for two dozen
// completions kept a CPU-bound service that a flood met at its initial
// limit running several requests at once for seconds: with 10ms handlers
// on one CPU every window lasted a quarter of a second, and a request
// that arrived meanwhile shared the CPU with all of them.
const minCappedSamples = 6

// limiter learns the in-flight limit from what the layer observes: the
// latency of admitted work from admission to release (queue wait not
// included), against a baseline kept current, and the throughput.
//
// Each window it takes the gradient g = clamp(tolerance × baseline / mean
// latency, 0.5, 1) and moves the limit toward g × limit + allowance
// (Netflix's Gradient2 and Envoy's adaptive concurrency add √limit; a
// tenth of the limit, at least one, queues less). Past the knee (a CPU run
// by more requests than it has cores, a pool with every connection busy)
// latency grows in proportion to the in-flight count, so the limit settles
// at tolerance × knee + allowance. Below it latency is flat and the limit grows,
// only while it binds (requests queued over it in the window). On some
// services latency rises below the knee too (requests that wait on a
// pool, then share a CPU); there throughput still rises with in flight,
// which a queue inside would not let it, and slow start goes on until it
// stops (followed).
//
// The baseline is the no-queue latency. It cannot be re-measured by
// waiting for a quiet moment (under sustained overload in flight is never
// low), nor kept as a minimum that only falls: when the service itself
// gets slower (a downstream at a third of its speed, a neighbour taking
// the CPU) a stale baseline reads the slower service as queueing and
// shrinks the limit below what the service can take. So it follows any
// lower window mean at once; it scales up at once when latency rises more
// than in flight does (no queue of ours grew that much: the service got
// slower); and the limiter probes, as Envoy re-measures its minimum
// latency and as Cinnamon watches how throughput moves with in flight (see
// measureProbe).
type limiter struct {
	// The request path's side.
	limit  atomic.Int64 // the learnt limit, in units
	start  atomic.Int64 // unix ns the window began
	window atomic.Int64 // the window's length, ns
	sum    atomic.Int64 // ns of latency in the window, of the sampled completions
	count  atomic.Int64 // sampled completions in the window
	// done counts the completions in the window, sampled or not: every
	// release writes it, so it has a cache line of its own, away from the
	// fields every admission reads.
	done   cacheline.Int64
	bound  atomic.Bool // a request queued over the limit in the window
	capped atomic.Bool // the CPU or the scheduler is saturated: shrink
	// spare: the CPU reads less than half busy (see update's regrowth).
	spare atomic.Bool
	mean  atomic.Int64 // smoothed latency of admitted work, ns (queue bounds)

	mu        sync.Mutex // held while a window closes; guards the fields below
	est       float64    // the limit, unrounded
	base      float64    // the baseline (no-queue) latency, ns; 0 until learnt
	slowStart bool       // grow by half the limit a window, until the knee is met
	// The probe (see measureProbe): its phase, the windows since the last,
	// the reference it is measured against, the limit it returns to, and
	// how deep the next goes.
	phase      int
	sinceProbe int
	ref        windowStat
	saved      float64
	depth      float64 // the next probe's share of the limit
	// prev is the window before, for the test of a slower service;
	// steady the average of the windows since the last probe.
	prev, steady windowStat
	// kneeAbove is the in-flight count a probe last found throughput
	// falling below: the knee is above it. It fades each window.
	kneeAbove float64
	// capFrom is the limit a run of capped windows began at (the highest
	// of such runs since the last regrowth), while the regrowth after it
	// is owed (0 when none is), and wasCapped whether the window before
	// was capped.
	capFrom   float64
	wasCapped bool
	// rebased: the window before went on through a rise of latency
	// (followed) and took its latency as the baseline.
	rebased   bool
	min, max  float64
	minWindow float64 // ns
	tolerance float64
	// trace, when set (by tests), is told each window's step.
	trace func(event string, w windowStat, base, est float64)
}

// windowStat is one closed window: mean in flight (Little's law: throughput
// × latency), mean latency, throughput, and whether the limit bound.
type windowStat struct {
	inflight, latency, throughput float64
	bound                         bool
}

func newLimiter(c LimitConfig, now time.Time) *limiter {
	l := &limiter{est: float64(c.Initial), slowStart: true, depth: probeDepth, min: float64(c.Min), max: float64(c.Max),
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
	need := int64(minLimitSamples)
	if l.capped.Load() {
		need = minCappedSamples
	}
	if elapsed < w || (n < need && elapsed < 10*w) {
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
	sum, count, done := l.sum.Swap(0), l.count.Swap(0), l.done.Swap(0)
	bound := l.bound.Swap(false)
	if count == 0 {
		return false
	}
	before := l.limit.Load()
	l.update(float64(sum)/float64(count), float64(max(done, count))/float64(elapsed), bound, l.capped.Load())
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
	prev := l.prev
	rebased := l.rebased
	l.rebased = false
	l.prev = windowStat{inflight, latency, throughput, bound}
	switch {
	case l.base == 0 || latency < l.base:
		l.base = latency
	case prev.latency > 0 && latency > slowerBy*prev.latency*math.Max(1, inflight/prev.inflight):
		// Latency rose more than in flight did: no queue of ours grew
		// that much (a queue inside grows only with in flight, latency
		// at most in proportion), so the service itself got slower (a
		// downstream slowing, a neighbour taking the CPU). Scale the
		// baseline with it now, rather than read the slower service as
		// queueing and shrink the limit below what it can take until a
		// probe re-learns it. Nor did the knee move down: hold the limit
		// near the in flight it had.
		l.base *= latency / prev.latency / math.Max(1, inflight/prev.inflight)
		l.kneeAbove = math.Max(l.kneeAbove, 0.9*math.Max(inflight, prev.inflight))
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

	// What a probe learnt of the knee fades: by a tenth in five windows,
	// so that a service whose knee moved down (a pool made smaller) is
	// followed within seconds.
	l.kneeAbove *= kneeFade
	g := math.Max(0.5, math.Min(1, l.tolerance*l.base/latency))
	est := l.est
	if capped && !l.wasCapped {
		// A stall during a regrowth does not lower what is owed.
		l.capFrom = math.Max(l.capFrom, est)
	}
	l.wasCapped = capped
	regrowTo := capShrink * l.capFrom
	if !capped && !l.slowStart && bound && g >= 1 && est < regrowTo && l.spare.Load() {
		// The saturation is over, and the limit binds with the CPU less
		// than half busy: what the capped windows took away was not this
		// service's knee but a moment's stall (stolen time, a pause) read
		// as a backlogged scheduler on a service that needs many in flight
		// (a pool of connections, then a share of the CPU). Regrow by slow
		// start, which stops at the knee as it does on a flood's first
		// windows, and at one step below where the saturation was read,
		// where the shrink would have stopped had it read the saturation
		// at once; from there the limit grows as it would have. Growing by
		// allowances, in windows of two dozen completions each at a limit
		// of one or two, took seconds: on the demonstration's mixed
		// service the limit fell from 13 to 1 in a second and stood at 1-3
		// two seconds later, the CPU a fifth busy and 20 waiting. The cpu
		// signal counts the time the process waited for the CPU too, so a
		// CPU-bound service under a flood never reads half idle, neighbour
		// or not, and a saturated reading that flickers does not regrow it.
		l.slowStart = true
	}
	// A latency over a baseline the window before raised (followed) is a
	// rise, within the tolerance or not.
	overRaised := rebased && latency > l.base
	switch {
	case capped:
		// The CPU is saturated (or the scheduler backlogged): work
		// admitted past what it can run only queues for it, and in a Go
		// server it queues in the runtime's run queue, ahead of the
		// goroutines that read and answer the flood, where the latency of
		// admitted work does not show it. Shrink, down to Min (one per
		// CPU), until the CPU has room.
		//
		// Nor does a knee above (kneeAbove) hold it up: what a probe or a
		// slower service said of the knee was read with the CPU unsaturated,
		// and a saturated one serves no more for more in flight. A flood
		// that met a baseline learnt at light load reads as a slower
		// service (latency 14 times the window before's, in flight 4.6
		// times, on the demonstration's tenant-cpu server at 50x), and the
		// knee that read left held the limit at 2-4 for six seconds, every
		// request admitted meanwhile waiting for the CPU behind the others:
		// the light clients' p99 read 3.1-3.7 times the floor's.
		l.slowStart, l.kneeAbove = false, 0
		est *= capShrink
	case l.slowStart && bound && (g < 1 || overRaised) && followed(prev, inflight, throughput):
		// Latency rose, but throughput rose with in flight: a queue
		// inside would have held it. This service's own latency grows
		// with its load (requests that wait on a pool, then share a
		// CPU), and it is still below its knee, where throughput stops
		// rising: its no-queue latency at this in flight is this one.
		// Ending slow start here left such a service at two thirds of
		// its capacity until a probe, seconds later (the mixed scenario
		// of docs/overload.md).
		l.base, l.rebased = latency, true
		est *= 1.5
	case g < 1 || l.slowStart && bound && overRaised:
		// The knee: slow start ends here, and so does a regrowth owed,
		// which on a service whose knee is below it would otherwise
		// restart each time the gradient brought the limit back under.
		// So is a rise over a raised baseline (overRaised) that
		// throughput did not follow: read as no queue, it let slow start
		// go on past the knee.
		l.slowStart, l.capFrom = false, 0
		est += 0.5 * (est*g + allowance(est) - est)
	case !bound:
		// A limit the traffic did not reach says nothing about whether a
		// larger one would hurt.
	case l.slowStart:
		est *= 1.5
	default:
		est += 0.5 * allowance(est)
	}
	if l.slowStart && regrowTo > 0 && est >= regrowTo {
		est, l.slowStart, l.capFrom = regrowTo, false, 0
	}
	l.setEstimate(est)
	// The probe's reference: in flight and latency averaged over the
	// windows since the last probe ended, steadier than one window's.
	if l.steady.latency == 0 {
		l.steady = windowStat{inflight: inflight, latency: latency}
	} else {
		l.steady.inflight += steadyWeight * (inflight - l.steady.inflight)
		l.steady.latency += steadyWeight * (latency - l.steady.latency)
	}
	if l.trace != nil {
		l.trace("window", l.prev, l.base, l.est)
	}
	l.sinceProbe++
	if g <= 0.6 {
		// Latency 1.8 times the baseline or more: a flood met at a limit far
		// too high, or a service that got slower and a baseline gone
		// stale. Only a probe tells them apart; do not wait for it.
		l.sinceProbe = max(l.sinceProbe, probeEvery-1)
	}
	if bound && l.sinceProbe >= probeEvery {
		l.phase, l.ref, l.saved = probeDrain, l.steady, l.est
		l.sinceProbe = 0
		// Rounded down, since a probe that rounds back to the limit
		// measures nothing; and not below the knee a probe found (it
		// fades): below it throughput falls, which was measured already.
		l.est = math.Max(math.Max(l.min, l.kneeAbove), math.Min(l.depth*l.est, l.est-1))
		l.limit.Store(max(int64(l.est), int64(l.min)))
	}
}

// followed reports whether throughput followed in flight from the window
// before, prev: in flight rose by minProbeSpan or more (nearer, the noise
// of the means is most of it), and throughput by at least followShare of
// that, on a log scale. Past the knee throughput holds whatever in flight
// does; below it, it rises in proportion, or nearly.
func followed(prev windowStat, inflight, throughput float64) bool {
	return prev.inflight > 0 && prev.throughput > 0 && inflight >= minProbeSpan*prev.inflight &&
		math.Log(throughput/prev.throughput) >= followShare*math.Log(inflight/prev.inflight)
}

// allowance is how far past the knee the limit settles: a tenth of it, at
// least one. Work admitted past the knee only queues inside, so the
// allowance is latency paid for nothing but to cover the moment between a
// release and the next admission, and the noise of the means.
func allowance(est float64) float64 { return math.Max(1, 0.1*est) }

// setEstimate sets the limit to est, within [min, max], and not below
// the knee a probe found. mu is held.
func (l *limiter) setEstimate(est float64) {
	l.est = math.Max(math.Max(l.min, l.kneeAbove), math.Min(l.max, est))
	l.limit.Store(int64(math.Round(l.est)))
}

// measureProbe ends a probe: every probeEvery windows under load (sooner
// when latency reads far above the baseline) the limit drops to depth of
// itself for two windows, one to drain and one to measure, and the slope
// of latency against in flight between that window and the windows
// before the probe (ref) says which side of the knee the probe was on.
// mu is held.
func (l *limiter) measureProbe(inflight, latency float64) {
	if dk := math.Log(l.ref.inflight / inflight); dk >= math.Log(minProbeSpan) {
		switch slope := math.Log(l.ref.latency/latency) / dk; {
		case slope <= flatSlope:
			// Latency did not fall with in flight: no queue inside at
			// the probe's level, so its latency is the no-queue one,
			// whatever it was before (a service that got slower). And
			// the knee is above the probe's in flight, since throughput
			// fell with it: the limit stays above that while it fades.
			// The limit regrows fast only if the baseline was stale
			// (staleBase); at the knee it is where it should be already.
			l.slowStart = l.slowStart || latency > staleBase*l.base
			l.base = latency
			l.kneeAbove = math.Max(l.kneeAbove, inflight)
		case slope >= queueSlope:
			// Latency fell with in flight: it queues inside even at the
			// probe's level, so the no-queue latency is lower still (a
			// service that started under load never saw it), and the
			// throughput held: keep the probe's limit and latency, and
			// probe again soon, a step further down.
			l.base = math.Min(l.base, latency)
			l.saved = l.est
			l.sinceProbe = probeEvery - probeSoon
			l.depth = max(l.depth*probeDepth, minProbeDepth) // and deeper, while it keeps holding
			if l.trace != nil {
				l.trace("probe", windowStat{inflight: inflight, latency: latency}, l.base, l.saved)
			}
			l.phase, l.steady = probeNone, windowStat{}
			l.setEstimate(l.saved)
			return
		}
	}
	l.depth = probeDepth
	if l.trace != nil {
		l.trace("probe", windowStat{inflight: inflight, latency: latency}, l.base, l.saved)
	}
	l.phase, l.steady = probeNone, windowStat{}
	l.setEstimate(l.saved)
}

// Thresholds of the log-log slope of latency against in flight between a
// probe and the window before it: at most flatSlope, latency did not follow
// in flight (no queue inside); at least queueSlope, it did.
const (
	flatSlope  = 0.5
	queueSlope = 0.9
	// probeEvery is how many windows pass between probes, while the limit
	// binds; probeDepth is the share of the limit a probe admits.
	probeEvery = 12
	probeDepth = 0.85
	// minProbeDepth bounds how deep probes go in a row while throughput
	// holds at each.
	minProbeDepth = 0.75
	// probeSoon is how many windows the next probe comes after one that
	// found the baseline too high.
	probeSoon = 2
	// staleBase is how much slower than the baseline a probe below the
	// knee must read for the baseline to count as stale, and the limit
	// to regrow by slow start: a service that got slower reads far more
	// (a downstream at a third of its speed, three times). Some services'
	// latency rises with in flight below the knee too (requests that wait
	// on a pool, then share a CPU): on the demonstration's mixed service a
	// probe from 13 in flight to 9 read 15% over a baseline learnt at 7,
	// and slow start from there took the limit from 16 to 36 in two
	// windows (latency 121ms) before the gradient brought it back. At
	// tolerance (1.1) the server's log read the limit at 25-36 a second
	// apart, the critical p99 1.5-2.3 times the floor's; at 1.3 the limit
	// held at 14-21, the critical p99 1.1-1.55 times.
	staleBase = 1.3
	// minProbeSpan is the least ratio of in flight between the probe and
	// the window before it that gives a slope: nearer, the noise of the
	// means is most of it.
	minProbeSpan = 1.15
	kneeFade     = 0.98
	// capShrink is the limit's step down per window while the CPU is
	// saturated. The CPU reads saturated only a tick or two into a flood
	// (the sampler's smoothing), by when slow start may have raised the
	// limit: on the demonstration's tenant-cpu server (10ms handlers, one
	// CPU) it read 6 a tenth of a second into a flood at 50x, and with a
	// step of 0.85 it took until 1.3s to come down to 1, every request
	// admitted meanwhile sharing the CPU with up to five others (the
	// light clients' waited 35-90ms); with 0.7 it was at 1 by 0.45s. A
	// service that needs more in flight than its CPUs regrows from below
	// once the CPU reads saturated no more.
	capShrink = 0.7
	// slowerBy: latency this many times the last window's or more, with
	// in flight held, is a slower service.
	slowerBy = 1.35
	// steadyWeight is a window's weight in the probe's reference.
	steadyWeight = 0.3
	// followShare is the least share of a rise in flight that throughput
	// must follow, log for log, for slow start to go on through a rise
	// of latency (followed). On the demonstration's mixed service the
	// sweep of its knee read 0.97 from 7 to 9 in flight, 0.57 from 9 to
	// 12 and about 0 past 12, its knee.
	followShare = 0.5
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
// service), each for at most five mean latencies (and maxQueueWait);
// never fewer than minQueue waiting nor less than minQueueWait, so that
// the bursts of a moderate load queue rather than shed (at half load a
// Poisson stream seldom runs a dozen ahead of a server); a second before
// any latency is known. The wait's floor is a few of a short handler's latencies: at
// 100ms, on the demonstration's one-CPU server (2ms handlers) at 5x, the
// p99 of what was served was 10x the floor's (non-critical requests
// served just before their wait ran out), at 20ms 4x, with goodput as
// high and still nothing shed at half load.
func (l *limiter) queueBounds() (length int64, wait time.Duration) {
	length = max(l.limit.Load(), minQueue)
	wait = time.Second
	if m := l.mean.Load(); m > 0 {
		wait = min(max(5*time.Duration(m), minQueueWait), maxQueueWait)
	}
	return length, wait
}

// protectedWait is how long a protected request may wait over the limit,
// given how long their queue has stood without emptying (0: it is empty):
// the queue's cap, a second, unless protected demand alone is over
// capacity, which the queue standing for criticalStanding says. A second's
// wait then serves only requests whose clients are about to give up (at
// 10x on a CPU a neighbour took half of, goodput fell to nothing); the
// learnt bound serves what can still be used and refuses the rest in time
// for a retry elsewhere. Not shorter than a tenth of a second, though: a
// waiting protected request is work in hand, and a queue that has some
// keeps the service busy through the lulls of its arrivals (at twenty
// mean latencies, goodput fell to 91%).
func (l *limiter) protectedWait(standing time.Duration) time.Duration {
	if standing <= criticalStanding {
		return limitQueueMaxWait
	}
	_, wait := l.queueBounds()
	return max(wait, criticalStanding)
}

// outlasts reports whether n waiters, served at the learnt limit, would
// take longer than wait to serve.
func (l *limiter) outlasts(n int, wait time.Duration) bool {
	m := l.mean.Load()
	return n > 0 && m > 0 && int64(n)*m >= int64(wait)*l.limit.Load()
}

const (
	minQueue     = 16
	minQueueWait = 20 * time.Millisecond
	// maxQueueWait leaves a slow service (a downstream at 180ms a call)
	// the time to serve a request that waited, within the second clients
	// commonly wait: five of its latencies were 900ms, and what it served
	// after them was answered after its client had given up.
	maxQueueWait = 500 * time.Millisecond
	// criticalStanding is how long the protected queue must stand before
	// its waits are bounded as the others' are: protected requests served
	// first empty it within moments unless their demand alone is over
	// capacity. Facebook's controlled delay uses the same 100ms.
	criticalStanding = 100 * time.Millisecond
)

// Caps of the learnt limit's own queue (when Config.Enforcement.Action is
// not Queue, which would give its own): the bounds in force are
// limiter.queueBounds, far below these.
const (
	limitQueueCap     = 1 << 14
	limitQueueMaxWait = time.Second
)

// timedLease returns a lease for cost units already counted in flight,
// stamped with the time of admission while the window has fewer than
// maxWindowSamples latencies: the learnt limit measures from it. Past
// that, a busy service's requests go unstamped and cost no clock reading;
// their completions are still counted, for the throughput.
func (l *Layer) timedLease(cost int64) shed.Lease {
	ls := l.lease(cost)
	if l.lim != nil && l.lim.count.Load() < maxWindowSamples {
		ls.Acquired = l.now()
	}
	return ls
}

// maxWindowSamples is the most latencies a window needs: beyond a few
// hundred, more only cost clock readings.
const maxWindowSamples = 256

// monoBase anchors now's readings of the system clock.
var monoBase = time.Now()

// monoNanos is the monotonic clock, in ns since monoBase.
func monoNanos() int64 { return int64(time.Since(monoBase)) }

// now reads the layer's clock for the latency of admitted work, twice per
// request. On the system clock it reads only the monotonic clock
// (time.Since reads one clock, time.Now two), which is all a latency
// needs, and halves what the learnt limit adds to the request path where
// reading the clock is slow (a virtual machine without a fast clock
// source: BenchmarkAcquireRelease).
func (l *Layer) now() time.Time {
	if l.clock == shed.SystemClock {
		return monoBase.Add(time.Since(monoBase))
	}
	return l.clock.Now()
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
	q, length, wait := l.queue, int64(0), time.Duration(0)
	// take is made only for a request that will wait: under a flood most
	// are refused at the full queue, and a closure made before that check
	// would be one more allocation for each of them.
	var take func() bool
	now := l.clock.Now()
	if p.Index() >= l.protect {
		// A protected request is never shed for the queue's bounds, only
		// for its own deadline or the queue's cap, and waits first in,
		// first out in a queue of its own, served first.
		q, wait = l.critical, l.lim.protectedWait(l.critical.Standing(now))
		take = func() bool { return !l.awaitingHandoff() && l.takeWithin(cost, l.lim.Limit()) }
	} else {
		length, wait = l.lim.queueBounds()
		// Protected requests are served first: behind more of them than
		// the learnt limit serves within this wait, a request would be
		// refused when its wait ran out, having cost a waiter, a timer
		// and a wake-up (and, displacing another, that one's too) besides
		// the refusal. On the demonstration's CPU-bound server at 10x,
		// where critical demand alone fills it, refusing at once cut the
		// decision's share of the CPU from 1.75-2.0% to 0.5-1.3%.
		if l.lim.outlasts(l.critical.Len(), wait) || int64(q.Len()) >= length && !q.MakeRoom(req) {
			return shed.Lease{}, l.queueRejection(layerkit.ErrQueueFull, 0)
		}
		take = func() bool {
			return !sheds(uint32(l.state.Load()), p) && l.take(cost, p)
		}
	}
	deadline := now.Add(wait)
	if !req.Deadline.IsZero() && req.Deadline.Before(deadline) {
		deadline = req.Deadline
	}
	giveBack := func() {
		l.inflight.Add(-cost)
		l.notify() // the other queue may take it
	}
	l.capacityWaiters.Add(1)
	ticket, waited, err := q.WaitRequest(ctx, req, deadline, take, giveBack)
	l.capacityWaiters.Add(-1)
	l.recordWait(waited)
	if err != nil {
		return shed.Lease{}, l.queueRejection(err, waited)
	}
	l.yieldIfBusy()
	ls := l.timedLease(cost)
	ls.Ref.(*grant).ticket = ticket
	ls.Waited = waited
	return ls, nil
}
