package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/internal/cacheline"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// Layer is the worker-utilization load shedder. It implements shed.Layer,
// shed.Releaser, shed.Headroom and layerkit.GaugeReporter, and is safe for
// concurrent use. Close stops its sampler.
type Layer struct {
	// state is what the request path reads, published by the sampler as one
	// value: the shed level in the low 32 bits (fixed point, levelScale per
	// priority) and the headroom in the high 32 (fixed point, headroomScale).
	state atomic.Uint64

	name       string
	enf        shed.Enforcement
	clock      shed.Clock
	retryAfter time.Duration
	workers    int64
	busy       int64 // the budget while the level sheds (Config.BusyWorkers)
	// lim is the learnt in-flight limit (nil with a worker budget, or with
	// Config.Limit.Disable); counted is whether in flight is counted at all
	// (a budget or a learnt limit).
	lim     *limiter
	counted bool
	// busyCPU is set by the sampler while the CPU or the scheduler reads
	// half its saturation or more: admissions then yield once. handoffOn is
	// set while the CPU or the scheduler reads saturated and the scheduler
	// is not backlogged: releases then hand capacity over through the
	// network poller (handoff.go).
	busyCPU   atomic.Bool
	handoffOn atomic.Bool
	// critical is, with the learnt limit, the queue of the protected
	// priorities over it: first in, first out, served before queue, so
	// that the newest-first order queue takes under sustained overload
	// (adaptive LIFO, short waits for the lower priorities it serves)
	// never lengthens the tail of critical requests.
	critical *layerkit.WaitQueue
	yield    bool
	protect  int // priorities with this Index or above are never refused
	// marg shares the marginal priority's refusals among clients, heaviest
	// first (marginal.go); nil with Config.Fairness.Off.
	marg   *marginal
	queue  *layerkit.WaitQueue
	ep     layerkit.Episode
	budget Budget
	grants sync.Pool // *grant

	inflight cacheline.Int64
	// starting holds the admitted requests yielding before they start
	// (Config.Yield), which a request of higher priority may displace.
	startMu  sync.Mutex
	starting []*grant
	// queueMin is the shortest queue wait (ns) seen since the last sample,
	// math.MaxInt64 when none.
	queueMin atomic.Int64
	// capacityWaiters counts the requests waiting in the queue for the
	// worker budget (not for the level to fall): the queue-delay signal's
	// length.
	capacityWaiters atomic.Int64

	// The sampler's own state: only the sampler touches it, one tick at a
	// time (each tick schedules the next).
	interval  time.Duration
	smoothing float64
	signals   []signal
	ctrl      controller
	last      time.Time
	// spareTicks counts the ticks in a row the CPU read less than half
	// busy (see the learnt limit's regrowth).
	spareTicks int
	snap       atomic.Pointer[snapshot]

	mu     sync.Mutex // guards timer and closed
	timer  shed.Timer
	closed bool

	// handoffPending is set while a hand-off of released capacity to the
	// queues is on its way (handoff.go), since handoffPosted (monotonic
	// ns); for handoffGrace the queues leave the capacity to it.
	handoffPending atomic.Bool
	handoffPosted  atomic.Int64
	handoffGrace   time.Duration
}

type signal struct {
	name string
	read func() float64
	avg  float64
	seen bool
	// reportOnly signals are gauges and headroom, not shedding: the worker
	// budget enforces in flight per request, faster than the level could.
	// With the learnt limit the CPU and scheduler latency signals are too:
	// they shrink the limit (limiter.capped) instead. Driving the level,
	// they were fed by the shedding they caused: the yields of admitted
	// work (which wait in the run queue by design) kept the scheduler
	// latency at its target after a flood's first moments took the level
	// to 3, and the level, falling one step per Recovery, shed all but
	// critical traffic with the CPU half idle.
	reportOnly bool
}

// busyAbove is the CPU or scheduler reading from which the learnt limit's
// admissions yield once (Layer.busyCPU); from cpuSaturated of the CPU
// (with the learnt limit's CPU.Full of 1.25: 7/8 of the budget busy), or a
// scheduler latency at its target with the CPU at least schedBusyCPU (3/4
// of the budget busy), or at handoffBacklog times its target whatever the
// CPU reads, the limit shrinks (limiter.capped).
const (
	busyAbove    = 0.5
	schedBusyCPU = 0.6
	cpuSaturated = 0.7
)

// sample reads the signal; a panic in it counts as no pressure, as a
// broken reading does, rather than ending the process from the sampler.
func (s *signal) sample() (r float64) {
	defer func() {
		if recover() != nil {
			r = 0
		}
	}()
	return s.read()
}

// snapshot is the sampler's last reading, for gauges.
type snapshot struct {
	utilization float64
	signals     []float64 // smoothed, in the order of Layer.signals
	level       float64
}

const headroomScale = 1 << 30

var (
	_ shed.Layer             = (*Layer)(nil)
	_ shed.Releaser          = (*Layer)(nil)
	_ shed.Headroom          = (*Layer)(nil)
	_ layerkit.GaugeReporter = (*Layer)(nil)
)

// New checks cfg, detects the CPU budget (unless cfg.CPU says it), and
// starts the sampler. Call Close when done with the layer.
func New(cfg Config) (*Layer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	l := &Layer{
		name:       c.Name,
		enf:        c.Enforcement,
		clock:      c.Clock,
		retryAfter: c.RetryAfter,
		workers:    c.Workers,
		busy:       c.BusyWorkers,
		yield:      c.Yield,
		protect:    shed.Critical.Index(),
		interval:   c.Interval,
		smoothing:  c.Smoothing,

		handoffGrace: handoffGrace,
	}
	if c.ShedCritical {
		l.protect = shed.NumPriorities
	}
	if !c.Fairness.Off {
		l.marg = newMarginal()
	}
	if c.learns() {
		l.lim = newLimiter(c.Limit, c.Clock.Now())
	}
	l.counted = l.workers > 0 || l.lim != nil
	l.grants.New = func() any { return &grant{owner: l} }
	l.queueMin.Store(math.MaxInt64)
	l.ctrl = newController(c, l.protect)
	if c.CPU.Budget > 0 {
		l.budget = Budget{CPUs: c.CPU.Budget, Source: "config"}
	} else {
		l.budget = DetectBudget()
	}
	if !c.CPU.Disable {
		s, err := newCPUSignal(l.budget.CPUs, c.CPU.Full)
		if err != nil {
			return nil, fmt.Errorf("worker: Config.CPU: reading this process's CPU time: %w", err)
		}
		l.signals = append(l.signals, signal{name: SignalCPU, read: s.Read, reportOnly: l.lim != nil},
			// Read after cpu, whose reading it is part of.
			signal{name: SignalCPUWait, read: s.Waited, reportOnly: true})
	}
	if c.SchedLatencyTarget > 0 {
		s := newSchedSignal(c.SchedLatencyTarget)
		l.signals = append(l.signals, signal{name: SignalSchedLatency, read: s.Read, reportOnly: l.lim != nil})
	}
	if l.enf.Action == shed.Queue || l.lim != nil {
		qc := l.enf.Queue
		if qc.Clock == nil {
			qc.Clock = l.clock
		}
		if l.enf.Action != shed.Queue {
			// The learnt limit's own queue: its bounds follow what the
			// limit learns (limiter.queueBounds); these are only caps.
			// Under sustained overload the oldest waiters are those
			// likeliest to time out before they are served: serve the
			// newest first once the queue has stood for half a second.
			qc.MaxLength, qc.MaxWait, qc.AdaptiveLIFO = limitQueueCap, limitQueueMaxWait, true
		}
		q, err := layerkit.NewFairQueue(qc, c.Fairness)
		if err != nil {
			return nil, fmt.Errorf("worker: Config.Enforcement.Queue: %w", err)
		}
		l.queue = q
		if l.lim != nil {
			l.critical, _ = layerkit.NewFairQueue(shed.QueueConfig{MaxLength: limitQueueCap, MaxWait: limitQueueMaxWait, Clock: qc.Clock}, c.Fairness)
		}
		target := float64(c.QueueDelayTarget)
		maxLen := float64(qc.MaxLength)
		// With a learnt limit the queue stands under any overload, by
		// design, and the limit and the queue's bounds already hold it:
		// the signal is reported, not shed on.
		l.signals = append(l.signals, signal{name: SignalQueueDelay, reportOnly: l.lim != nil, read: func() float64 {
			return l.queuePressure(target, maxLen)
		}})
	}
	switch {
	case l.workers > 0:
		w := float64(l.workers)
		l.signals = append(l.signals, signal{name: SignalInFlight, reportOnly: true, read: func() float64 {
			return float64(l.inflight.Load()) / w
		}})
	case l.lim != nil:
		l.signals = append(l.signals, signal{name: SignalInFlight, reportOnly: true, read: func() float64 {
			return float64(l.inflight.Load()) / float64(max(l.lim.Limit(), 1))
		}})
	}
	for _, s := range c.Signals {
		l.signals = append(l.signals, signal{name: s.Name, read: s.Read})
	}
	l.publish(0, 0, make([]float64, len(l.signals)))
	l.last = l.clock.Now()
	l.mu.Lock()
	l.timer = l.clock.AfterFunc(l.interval, l.tick)
	l.mu.Unlock()
	return l, nil
}

// Name returns the layer's name (Config.Name, default "worker").
func (l *Layer) Name() string { return l.name }

// ReadsRoute reports false: the layer sheds by priority, never by route
// (shed.RouteReader).
func (l *Layer) ReadsRoute() bool { return false }

// Budget returns the CPU budget the CPU signal measures against, and where
// it came from (with the reason, when the cgroup files could not be read).
func (l *Layer) Budget() Budget { return l.budget }

// Close stops the sampler. The layer keeps deciding on its last reading.
// It returns nil: its error is io.Closer's, as every layer's Close.
func (l *Layer) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
	return nil
}

// tick samples every signal, steps the controller and publishes the result,
// then schedules the next tick.
func (l *Layer) tick() {
	now := l.clock.Now()
	// A late sample (a stalled process, a manual clock moved far) moves the
	// level no more than two regular ones would.
	dt := min(now.Sub(l.last), 2*l.interval)
	l.last = now
	pressure, utilization, busy, saturated, backlogged := 0.0, 0.0, false, false, false
	// The CPU's reading, and whether the scheduler latency is at its
	// target: the two decide saturation together (below).
	cpuSeen, cpuAvg, schedFull := false, 0.0, false
	readings := make([]float64, len(l.signals))
	for i := range l.signals {
		s := &l.signals[i]
		r := s.sample()
		if !finite(r) || r < 0 {
			r = 0 // a broken signal must not take the service down
		}
		if !s.seen {
			s.avg, s.seen = r, true
		} else {
			s.avg += l.smoothing * (r - s.avg)
		}
		readings[i] = s.avg
		utilization = math.Max(utilization, s.avg)
		if !s.reportOnly {
			pressure = math.Max(pressure, s.avg)
		}
		switch s.name {
		case SignalCPU:
			cpuSeen, cpuAvg = true, math.Max(cpuAvg, s.avg)
			saturated = saturated || s.avg >= cpuSaturated
			busy = busy || s.avg >= busyAbove
		case SignalSchedLatency:
			schedFull = schedFull || s.avg >= 1
			busy = busy || s.avg >= busyAbove
			backlogged = backlogged || s.avg >= handoffBacklog
		}
	}
	spareCPU := cpuAvg < busyAbove
	// A scheduler latency at its target is saturation only with the CPU at
	// least schedBusyCPU (or unread). With less the CPU has room, and what
	// the p99 of run-queue waits saw is bursts: on a service whose
	// requests wait on a pool, then burn CPU, calls that end together
	// queue for the CPU together (the demonstration's mixed service read
	// 0.84-1.02 of its 40ms target with the CPU 0.42-0.59 busy, from 2x
	// to 10x its capacity). Counted, those bursts capped the limit, which
	// fell from 16-20 to 8-13 in a few windows and stayed below the knee.
	// The line was half busy once, a little under what that service
	// reads at its capacity: in six runs of mixed at 2x, goodput fell to
	// 83.8-90.5% of the bound in three; at 0.6, alternated with them,
	// 97.5-100% in six. A CPU-bound service under a flood reads its CPU
	// busy (cpuSaturated) whatever its scheduler does.
	//
	// A backlogged scheduler (handoffBacklog times its target, 80ms at
	// the default) is saturation whatever the CPU reads: no burst of a
	// half-busy CPU makes goroutines wait that long, and the CPU's average
	// lags a flood's first second, which a fresh process meets with its
	// idle time still in it. On the demonstration's tenant-cpu server (one
	// CPU, 10ms handlers) at 5x, the first second read the scheduler at 20
	// times its target and the CPU at 0.22, so the limit stood at its
	// initial 4 and every request waited for the CPU behind the others.
	if schedFull && (!cpuSeen || cpuAvg >= schedBusyCPU) || backlogged {
		saturated = true
	}
	level := l.ctrl.step(pressure, dt)
	l.busyCPU.Store(busy)
	// A hand-off is for a CPU kept saturated, whose P never runs dry to
	// poll. On one half busy the P polls when a burst of work ends, and a
	// hand-off waits the burst out with the capacity idle (handoff.go,
	// "Only while saturated").
	l.handoffOn.Store(saturated && !backlogged)
	if l.lim != nil {
		// A saturated CPU (or a backlogged scheduler) cannot serve more
		// in flight: the learnt limit shrinks until it is not.
		l.lim.capped.Store(saturated)
		// Two readings in a row: a CPU-bound service's CPU can read half
		// idle for a moment on a busy host (0.48 for one tick of a flood
		// on the demonstration's one-CPU server, on a host that ran its
		// work a fifth slower than usual), and one such reading must not
		// regrow its limit.
		if spareCPU {
			l.spareTicks++
		} else {
			l.spareTicks = 0
		}
		l.lim.spare.Store(l.spareTicks >= 2)
	}
	l.publish(level, utilization, readings)
	if l.marg != nil {
		v := uint32(l.state.Load())
		l.marg.roll(float64(v%levelScale) / levelScale)
	}
	l.notify() // the level may have fallen
	l.mu.Lock()
	if !l.closed {
		l.timer = l.clock.AfterFunc(l.interval, l.tick)
	}
	l.mu.Unlock()
}

// publish stores a reading: the level the controller chose, and the
// highest utilisation of any signal, for the headroom.
func (l *Layer) publish(level, utilization float64, readings []float64) {
	level = math.Min(level, float64(l.protect)) // never a protected priority
	headroom := 0.0
	if level == 0 {
		headroom = math.Min(math.Max(1-utilization, 0), 1)
	}
	l.snap.Store(&snapshot{utilization: utilization, signals: readings, level: level})
	l.state.Store(uint64(encodeLevel(level)) | uint64(headroom*headroomScale)<<32)
}

// queuePressure is the queue-delay signal: the shortest wait seen since the
// last sample against the target (CoDel's standing-queue test), or, when no
// waiter left the queue in the interval, how full it is.
//
// Only requests that queued for capacity (the worker budget, or the learnt
// limit) count: a request the level sheds waits for the level to fall, and
// counting it would keep the level up by the very shedding it causes.
func (l *Layer) queuePressure(target, maxLen float64) float64 {
	min := l.queueMin.Swap(math.MaxInt64)
	p := float64(l.capacityWaiters.Load()) / maxLen
	if min != math.MaxInt64 {
		p = math.Max(p, float64(min)/target)
	}
	return p
}

func (l *Layer) recordWait(d time.Duration) {
	n := int64(d)
	for {
		m := l.queueMin.Load()
		if n >= m || l.queueMin.CompareAndSwap(m, n) {
			return
		}
	}
}

// Headroom is the share of this process's capacity that is spare, 0 to 1:
// one minus the pressure, and 0 while the layer sheds anything. Elastic
// limits of the other layers read it (shed.Enforcement.Headroom).
func (l *Layer) Headroom() float64 {
	return float64(l.state.Load()>>32) / headroomScale
}

// Level returns the shed level now: how many priorities are shed, lowest
// first, with the fraction of the marginal one (1.25: all test-mode traffic
// and a quarter of sheddable traffic).
func (l *Layer) Level() float64 { return float64(uint32(l.state.Load())) / levelScale }

// Sheds reports whether the layer would shed a request of priority p now
// because of its shed level (the worker budget aside). Within the marginal
// priority the answer is drawn at random, in the shed fraction. This is the
// request path's check: one atomic load and a comparison, plus a random
// draw within the marginal priority.
func (l *Layer) Sheds(p shed.Priority) bool {
	v := uint32(l.state.Load())
	return v != 0 && sheds(v, p) // inlined: no call while nothing is shed
}

// shedsArrival decides for a request arriving at shed level v: shed
// outright below the marginal priority, by the client's part of the
// marginal priority's requests within it (marginal.go).
func (l *Layer) shedsArrival(v uint32, p shed.Priority, key string) (why, bool) {
	lo := uint32(p.Index()) * levelScale
	switch {
	case v <= lo:
		return 0, false
	case v >= lo+levelScale:
		return overLevel, true
	case l.marg == nil:
		return overMargin, rand.Uint32()%levelScale < v-lo
	}
	return overMargin, l.marg.refuses(key, v-lo)
}

func sheds(v uint32, p shed.Priority) bool {
	if v == 0 {
		return false
	}
	lo := uint32(p.Index()) * levelScale
	if v <= lo {
		return false
	}
	if v >= lo+levelScale {
		return true
	}
	return rand.Uint32()%levelScale < v-lo
}

// grant is one admission counted against the worker budget. A lease holds
// it with the generation it was granted at, and Release claims that
// generation once, so that releasing a copy of a lease already released
// does nothing.
type grant struct {
	gen   atomic.Uint64
	owner *Layer

	// With Config.Yield: whether the admitted request has started, or was
	// displaced before it did, and what it holds.
	state atomic.Uint32
	prio  int
	cost  int64

	// ticket is the fair queue's record of a grant from a queue, told
	// when the lease is released how long the slot was held; zero for a
	// request admitted without waiting.
	ticket layerkit.Ticket
}

// why says what a request was over.
type why uint8

const (
	overLevel  why = iota // shed by level, outright
	overMargin            // shed by level, within the marginal priority's fraction
	overBudget            // over the worker budget
)

// Acquire admits req unless the layer sheds its priority now, or the worker
// budget is spent; then it rejects with 503 (Reason
// "temporary-reduced-capacity", Retry-After), or, with the Queue action,
// waits in the queue.
func (l *Layer) Acquire(ctx context.Context, req shed.Request) (shed.Lease, error) {
	v := uint32(l.state.Load())
	if v != 0 {
		if w, out := l.shedsArrival(v, req.Priority, req.Key); out {
			return l.over(ctx, req, w)
		}
	}
	if l.lim != nil {
		// Within the learnt limit, with nobody queued ahead: admitted.
		cost := req.Units()
		if l.queue.Len() == 0 && l.critical.Len() == 0 && l.takeWithin(cost, l.lim.Limit()) {
			l.yieldIfBusy()
			return l.timedLease(cost), nil
		}
		return l.overLimit(ctx, req, cost)
	}
	if l.workers == 0 {
		return shed.NewLease(l), nil
	}
	// Admissions within the limit leave the soft episode alone (see
	// layerkit.Episode): under sustained overload there is one episode, then
	// the hard limit until the load abates.
	cost := req.Units()
	if !l.takeWithin(cost, l.workerBudget(v)) {
		switch {
		case l.yield && !l.enf.DryRun && l.displace(cost, req.Priority.Index()):
			// The units of a lower-priority request not yet started are ours.
		case req.Priority.Index() >= l.protect:
			l.inflight.Add(cost)
		default:
			return l.over(ctx, req, overBudget)
		}
	}
	if l.yield {
		return l.yieldThenStart(req, cost)
	}
	return l.lease(cost), nil
}

// yieldIfBusy yields the processor once while the CPU or the scheduler
// reads busy, before an admitted request's work starts, as Config.Yield
// does: the goroutines already runnable (the requests read meanwhile, to
// be answered or queued) run first. A request handed capacity by a release
// yields too: the runtime runs the goroutine a release wakes next, in the
// releaser's time slice, so admissions from the queue would otherwise
// follow one another while the requests read by the network poller wait
// in the global run queue, which one P checks only every 61st schedule
// (on the demonstration's one-CPU server at 2x, a scheduler latency p99
// of 100-150ms and critical p99 11x the floor's; with the yield 4x).
func (l *Layer) yieldIfBusy() {
	if l.busyCPU.Load() {
		runtime.Gosched()
	}
}

// take counts cost units in flight for a queued request if they fit within
// the worker budget (or the priority is protected), unless the capacity is
// left to a hand-off on its way (awaitingHandoff).
func (l *Layer) take(cost int64, p shed.Priority) bool {
	if l.awaitingHandoff() {
		return false
	}
	if l.lim != nil {
		// Critical requests waiting go first.
		return l.critical.Len() == 0 && l.takeWithin(cost, l.lim.Limit())
	}
	if p.Index() >= l.protect {
		l.inflight.Add(cost)
		return true
	}
	return l.takeWithin(cost, l.workerBudget(uint32(l.state.Load())))
}

// workerBudget is the worker budget at shed level v: Config.BusyWorkers while
// the layer sheds, Workers otherwise.
func (l *Layer) workerBudget(v uint32) int64 {
	if l.lim != nil {
		return l.lim.Limit()
	}
	if v != 0 {
		return l.busy
	}
	return l.workers
}

func (l *Layer) takeWithin(cost, limit int64) bool {
	for {
		n := l.inflight.Load()
		if n > limit-cost {
			return false
		}
		if l.inflight.CompareAndSwap(n, n+cost) {
			return true
		}
	}
}

// lease returns a lease for cost units already counted in flight.
func (l *Layer) lease(cost int64) shed.Lease {
	g := l.grants.Get().(*grant)
	ls := shed.NewLease(l)
	ls.Ref = g
	ls.ID = g.gen.Load()
	ls.Cost = cost
	return ls
}

// over decides for a request the level or the budget refused: admitted over
// the limit (soft), admitted in dry run, queued, or rejected.
func (l *Layer) over(ctx context.Context, req shed.Request, w why) (shed.Lease, error) {
	var now time.Time
	if l.enf.Mode == shed.Soft {
		now = l.clock.Now()
	}
	cost := req.Units()
	within := w == overMargin
	if w == overBudget {
		within = l.inflight.Load() <= l.enf.Ceiling(l.workerBudget(0))-cost
	}
	switch layerkit.Decide(&l.enf, now, false, within, &l.ep) {
	case layerkit.AdmitOver:
		if !l.counted {
			ls := shed.NewLease(l)
			ls.Over = true
			return ls, nil
		}
		if l.takeWithin(cost, l.enf.Ceiling(l.workerBudget(0))) {
			ls := l.timedLease(cost)
			ls.Over = true
			return ls, nil
		}
		if l.enf.DryRun {
			return l.dryRun(cost), nil
		}
	case layerkit.AdmitDryRun:
		return l.dryRun(cost), nil
	case layerkit.Wait:
		return l.wait(ctx, req, cost, w == overBudget)
	}
	return shed.Lease{}, l.rejection(w == overBudget)
}

func (l *Layer) dryRun(cost int64) shed.Lease {
	var ls shed.Lease
	if !l.counted {
		ls = shed.NewLease(l)
	} else {
		l.inflight.Add(cost)
		ls = l.lease(cost)
	}
	ls.DryRun = true
	return ls
}

// policyWorkers names the worker budget in a rejection's policies (and so
// in the event's Policy), to tell a request refused by the budget from one
// shed by the level, which names no policy.
const policyWorkers = "workers"

// rejection is the one place the layer builds its "no".
func (l *Layer) rejection(budget bool) *shed.Rejection {
	if budget {
		rj := shed.Shed(reason, l.retryAfter, shed.Quota{Policy: policyWorkers, Limit: l.workerBudget(uint32(l.state.Load())), Service: true})
		rj.Layer = l.name
		return rj
	}
	rj := shed.Shed(reason, l.retryAfter)
	rj.Layer = l.name
	return rj
}

// queueRejection turns an error of the queue into what Acquire returns: a
// 503 with the layer's Retry-After, or a context error as it is.
func (l *Layer) queueRejection(err error, waited time.Duration) error {
	err = layerkit.QueueRejection(shed.StatusServiceUnavailable, err, waited)
	var r *shed.Rejection
	if errors.As(err, &r) {
		r.RetryAfter = l.retryAfter
	}
	return err
}

// wait queues req until the level admits its priority and, with a budget,
// a worker is free; highest priority first. forCapacity says it queued
// because the budget was spent, not because the level sheds it: only such
// waits feed the queue-delay signal.
func (l *Layer) wait(ctx context.Context, req shed.Request, cost int64, forCapacity bool) (shed.Lease, error) {
	if l.queue == nil {
		return shed.Lease{}, l.rejection(false)
	}
	p := req.Priority
	take := func() bool {
		if sheds(uint32(l.state.Load()), p) {
			return false
		}
		return !l.counted || l.take(cost, p)
	}
	giveBack := func() {
		if l.counted {
			l.inflight.Add(-cost)
		}
	}
	if forCapacity {
		l.capacityWaiters.Add(1)
	}
	ticket, waited, err := l.queue.WaitRequest(ctx, req, req.Deadline, take, giveBack)
	if forCapacity {
		l.capacityWaiters.Add(-1)
		l.recordWait(waited)
	}
	if err != nil {
		return shed.Lease{}, l.queueRejection(err, waited)
	}
	var ls shed.Lease
	if !l.counted {
		ls = shed.NewLease(l)
		ticket.Done() // nothing is counted: the lease is not released here
	} else {
		ls = l.timedLease(cost)
		ls.Ref.(*grant).ticket = ticket
	}
	ls.Waited = waited
	return ls, nil
}

// Release gives back the worker-budget units lease holds. A lease this layer
// did not grant, or one already released (a copy), is ignored. Callers use
// lease.Release, which calls this.
func (l *Layer) Release(lease *shed.Lease, o shed.Outcome) {
	g, ok := lease.Ref.(*grant)
	if !ok || g.owner != l || !g.gen.CompareAndSwap(lease.ID, lease.ID+1) {
		return
	}
	l.inflight.Add(-lease.Cost)
	g.ticket.Done()
	l.grants.Put(g)
	defer l.handOff()
	// Only work that ran to its end says how long work takes: a dropped
	// caller's or an unused lease's time says nothing about the service.
	if l.lim != nil && (o == shed.Completed || o == shed.Failed) {
		l.lim.done.Add(1)
		if !lease.Acquired.IsZero() {
			now := l.now()
			l.lim.observe(now, now.Sub(lease.Acquired))
		}
	}
}

// handOff grants the queues the capacity a release freed: through the
// network poller when anybody waits and the CPU reads saturated (see
// handoff.go), else at once. With the CPU idle the poll is not late, and
// a hand-off would only add a goroutine's wake-up to every queued
// request's wait; with it half busy the poll comes late, when a burst of
// work ends. Nor while the scheduler is backlogged (its latency
// handoffBacklog times its target): a hand-off then waits for the P to
// run all that is runnable, and the capacity idles meanwhile. A flood's
// first moment on a fresh server (thousands of connections opening at
// 10x) jammed it so: with hand-offs the server served 1.3-48% of
// capacity in 5 of 21 quick runs, against none of 6 granting at once,
// and none of 8 with this guard (the listen queues were not watched
// then: some of these may have been the connection storms the code before
// the hand-off meets too: docs/overload.md, "Connection storms").
func (l *Layer) handOff() {
	if l.Queued() > 0 && !(l.handoffOn.Load() && handoff.post(l)) {
		l.notify()
	}
}

// awaitingHandoff reports whether the queues must leave released capacity
// to a hand-off on its way: a waiter timing out dispatches its queue from
// its timer's goroutine, which runs before the poll, and would hand the
// capacity out before the requests the poll returns are decided. Only
// for handoffGrace, though: a hand-off the runtime is slow to run (a P
// jammed by a flood's first moment, thousands of connections opening)
// must not keep capacity idle meanwhile.
func (l *Layer) awaitingHandoff() bool {
	return l.handoffPending.Load() && !l.handoffOverdue(monoNanos())
}

// handoffOverdue reports whether the hand-off posted last has had its
// grace by now (monotonic ns).
func (l *Layer) handoffOverdue(now int64) bool {
	return now-l.handoffPosted.Load() >= int64(l.handoffGrace)
}

// notify says capacity may have freed: the critical queue first, then the
// rest. On empty queues it costs an atomic load each.
func (l *Layer) notify() {
	if l.critical != nil {
		l.critical.Notify()
	}
	if l.queue != nil {
		l.queue.Notify()
	}
}

// Queued returns how many requests wait in the layer's queue (0 without the
// Queue action).
func (l *Layer) Queued() int {
	n := 0
	if l.queue != nil {
		n += l.queue.Len()
	}
	if l.critical != nil {
		n += l.critical.Len()
	}
	return n
}

// Limit returns the most request units the layer admits in flight now:
// the learnt limit, or the worker budget (Config.Workers, or BusyWorkers
// while the level sheds); 0 when neither bounds in flight.
func (l *Layer) Limit() int64 {
	if !l.counted {
		return 0
	}
	return l.workerBudget(uint32(l.state.Load()))
}

// InFlight returns the request units in flight counted against the worker
// budget or the learnt limit (0 without either).
func (l *Layer) InFlight() int64 { return l.inflight.Load() }

// ReportGauges reports the layer's state: each signal's smoothed
// utilisation (by Signal), the shed level, the shed fraction of each
// priority, the headroom, and, when they are in use, requests in flight and
// the worker budget, and requests queued.
func (l *Layer) ReportGauges(emit func(layerkit.Gauge)) {
	s := l.snap.Load()
	for i := range l.signals {
		emit(layerkit.Gauge{Layer: l.name, Name: layerkit.GaugeUtilization, Signal: l.signals[i].name, Value: s.signals[i]})
	}
	v := uint32(l.state.Load())
	emit(layerkit.Gauge{Layer: l.name, Name: layerkit.GaugeShedLevel, Value: float64(v) / levelScale})
	for _, p := range shed.Priorities() {
		emit(layerkit.Gauge{Layer: l.name, Name: layerkit.GaugeShedFraction, Priority: p, Value: shedFraction(v, p.Index())})
	}
	emit(layerkit.Gauge{Layer: l.name, Name: layerkit.GaugeHeadroom, Value: l.Headroom()})
	if l.counted {
		emit(layerkit.Gauge{Layer: l.name, Name: layerkit.GaugeInFlight, Value: float64(l.inflight.Load())})
		emit(layerkit.Gauge{Layer: l.name, Name: layerkit.GaugeLimit, Value: float64(l.workerBudget(uint32(l.state.Load())))})
	}
	if l.queue != nil {
		emit(layerkit.Gauge{Layer: l.name, Name: layerkit.GaugeQueued, Value: float64(l.Queued())})
	}
	l.reportFairness(emit)
}
