package worker

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/loadshed/loadshed/internal/clockx"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// DefaultName is the layer's name unless Config.Name says otherwise.
const DefaultName = "worker"

// Defaults of Config's optional fields.
const (
	DefaultInterval     = 250 * time.Millisecond
	DefaultSmoothing    = 0.5
	DefaultShedAt       = 0.8
	DefaultRecoverBelow = 0.7
	// DefaultRecovery is how long the controller takes to stop shedding one
	// whole priority once pressure is below RecoverBelow: from shedding
	// test-mode, sheddable and default traffic to shedding nothing takes
	// three times as long.
	DefaultRecovery = 3 * time.Second
	// DefaultRiseGain: levels per second the shed level climbs per unit of
	// pressure above RecoverBelow. At pressure 1.0 (a saturated CPU) it
	// climbs 1.2 levels a second; a scheduler latency ten times its target
	// takes it to the top in one sample.
	DefaultRiseGain           = 4.0
	DefaultSchedLatencyTarget = 10 * time.Millisecond
	DefaultQueueDelayTarget   = 5 * time.Millisecond
	DefaultRetryAfter         = time.Second
)

// reason is the rejection's Reason: the process is shedding load.
const reason = "temporary-reduced-capacity"

// Config configures a Layer. Start from DefaultConfig: the in-flight limit
// learnt from the latency of admitted work (whatever the bottleneck: CPU,
// a pool, a slow dependency), requests over it queued by priority, CPU and
// scheduler latency signals sampled every 250ms moving the shed level with
// Stripe's thresholds (shed from 0.8, recover below 0.7), critical traffic
// never shed, rejecting with 503. Interval must be set (DefaultConfig
// does); every other zero field stands for its default.
type Config struct {
	// Name is the layer's name in rejections, metrics and logs (default
	// "worker").
	Name string

	// Enforcement: Hard (default) or Soft mode, dry run, and the action on
	// "over": Reject (503 at once) or Queue (wait for a worker, or for the
	// shed level to fall, in a layerkit.WaitQueue). Soft admits a request of the
	// marginal priority (the one shed only in part) or one over the worker
	// budget by at most Overage, for at most OverageFor per episode. Elastic
	// is refused: it would read this layer's own headroom.
	Enforcement shed.Enforcement

	// Interval is how often the signals are sampled (DefaultInterval,
	// 250ms, in DefaultConfig). Required: a zero Interval is an error, not
	// a default, so that a config built field by field cannot sample at a
	// rate nobody chose.
	Interval time.Duration
	// Smoothing is the weight of a new sample in each signal's moving
	// average, in (0, 1] (default 0.5; 1 means no smoothing).
	Smoothing float64
	// ShedAt is the pressure at which shedding starts (default 0.8).
	ShedAt float64
	// RecoverBelow is the pressure below which shedding eases (default 0.7).
	// Between RecoverBelow and ShedAt the shed level holds still, which is
	// what keeps it from flapping under steady overload.
	RecoverBelow float64
	// Recovery is how long it takes, with pressure below RecoverBelow, to
	// stop shedding one whole priority (default 3s). The level falls
	// linearly; it rises in proportion to the pressure, much faster.
	Recovery time.Duration
	// RiseGain is how fast the level climbs: levels per second per unit of
	// pressure above RecoverBelow (default 4). A level is one priority.
	RiseGain float64
	// ShedCritical lets the layer shed critical requests too, last (default
	// false: critical requests are never shed, by the level or by the
	// worker budget).
	ShedCritical bool

	// CPU configures the CPU signal: this process's CPU use against its
	// budget.
	CPU CPUConfig
	// SchedLatencyTarget is the Go scheduler latency (the p99, over each
	// interval, of how long runnable goroutines waited for a CPU, from
	// runtime/metrics) that counts as saturation, pressure 1.0 (default
	// 10ms). Negative disables the signal.
	SchedLatencyTarget time.Duration
	// QueueDelayTarget is, with the Queue action, the shortest wait in the
	// queue over an interval that counts as saturation (default 5ms): as in
	// CoDel, a queue that never empties below the target is a standing
	// queue, overload even when the CPU reads fine.
	QueueDelayTarget time.Duration
	// Workers is the worker budget: the most request units (Request.Units)
	// in flight in this layer at once (default 0: no budget, the limit is
	// learnt). A budget replaces the learnt limit: set it only when you
	// know the capacity and it never changes. Over it a
	// request is rejected, or queued, at once, without waiting for the
	// sampler. In flight against the budget is reported (utilization
	// "in_flight") and counts in the headroom, but does not move the shed
	// level: the budget already holds it, per request. For handlers that
	// burn CPU, a budget of one worker per CPU (cpuWorkers) keeps admitted
	// work from queueing for the CPU; see CPUBound. Critical requests are
	// counted but never refused unless ShedCritical is set.
	Workers int64
	// BusyWorkers is the worker budget while the layer sheds (its level
	// above zero), at most Workers (default Workers). On a CPU that is
	// saturated, a request running beside another only waits for it:
	// throughput stays, latency grows. A budget above one per CPU lets
	// the bursts of a moderate load through without a 503; BusyWorkers of
	// one per CPU keeps admitted requests from queueing once the load is
	// past what the CPU can take.
	BusyWorkers int64
	// Yield, with a worker budget, makes Acquire yield the processor once
	// after admitting (runtime.Gosched), so that the requests already read
	// and waiting to run get their answer before the admitted one's work
	// starts; while it yields, a request of higher priority that finds the
	// budget spent takes its place, and it is refused instead. Turn it on
	// for handlers that burn CPU without blocking: without it, on a busy
	// CPU, the requests that arrive while one runs are not even read until
	// it finishes, the first one read takes the budget whatever its
	// priority, and critical requests pile up over the budget.
	Yield bool
	// Limit configures the learnt in-flight limit, on unless Workers is set
	// or Limit.Disable: the layer learns how much work the service can have
	// in flight, whatever its bottleneck, admits that much and queues the
	// rest by priority (see LimitConfig).
	Limit LimitConfig

	// Fairness says how the queues share capacity among clients (the
	// request's Key) within each priority: by default max-min fairly,
	// every client weighing the same, so that one client's flood takes no
	// other client's share (see the package documentation, "Fair share").
	// Fairness.Weight gives clients weights (tiers); Fairness.Off serves
	// the waiters of a priority in arrival order, whoever sent them.
	Fairness layerkit.Fairness

	// Signals are extra signals, sampled with the built-in ones.
	Signals []Signal

	// RetryAfter is the Retry-After of a rejection (default 1s).
	RetryAfter time.Duration
	// Clock drives the sampler and the queue (default shed.SystemClock).
	// With a manual clock the sampler runs only as the clock is advanced.
	Clock shed.Clock
}

// CPUConfig configures the CPU signal.
type CPUConfig struct {
	// Disable turns the CPU signal off.
	Disable bool
	// Budget is the CPUs this process may use (default: detected, see
	// DetectBudget).
	Budget float64
	// Full is the share of the budget that counts as saturation, pressure
	// 1.0 (default 1.25 with the learnt limit, so that the level moves on
	// CPU only once every CPU of the budget is busy; 1.0 without it). A
	// service whose in-flight limit (learnt, or a worker budget) already
	// keeps admitted work from queueing may run its CPU hotter than ShedAt
	// of the budget without harm; raising Full lets it.
	Full float64
}

// Signal is a source of pressure: a reading of how close to saturation
// something the process depends on is, 0 idle, 1 saturated, above 1 past
// it. The layer calls Read on its sampler goroutine once per interval; Read
// must be quick and safe to call from another goroutine than the one that
// made it. A reading that is NaN, infinite or negative, or a Read that
// panics, counts as 0.
type Signal struct {
	// Name labels the signal's utilization gauge; a short snake_case word.
	Name string
	// Read returns the pressure now.
	Read func() float64
}

// CPUBound returns a configuration for a service whose handlers burn CPU
// without blocking: a worker budget of four per CPU of the budget
// (cpuWorkers) while the layer sheds nothing and of one per CPU while it
// sheds (BusyWorkers), Yield, and the CPU signal reading ShedAt only when the whole
// budget is busy (CPU.Full 1.25), since the worker budget, not a margin of
// idle CPU, is what keeps admitted work from queueing. The level then moves
// on scheduler latency, and on CPU only at saturation. Change any field
// before New.
func CPUBound() Config {
	c := DefaultConfig()
	c.Workers, c.BusyWorkers, c.Yield, c.CPU.Full = 4*cpuWorkers(), cpuWorkers(), true, 1.25
	return c
}

// DefaultConfig returns the set-up for every kind of service, CPU-bound,
// waiting on a pool or a slow dependency, or both: the learnt in-flight
// limit (LimitConfig) with its priority queue, every signal built in,
// sampled every DefaultInterval, Stripe's thresholds, critical traffic
// never shed, rejecting with 503 what the level sheds. It needs no
// capacity, worker count or latency target. Change any field before New.
func DefaultConfig() Config { return Config{Interval: DefaultInterval} }

// learntSchedLatencyTarget is SchedLatencyTarget's default with the
// learnt limit: the limit keeps the handlers it admits from crowding the
// run queue (each yields once before it starts), so the level need only
// move on a scheduler latency that is a real backlog (a neighbour taking
// the CPU), not on the bursts of a flood's first moments.
const learntSchedLatencyTarget = 40 * time.Millisecond

// learntCPUFull is CPU.Full's default with the learnt limit: the CPU
// signal reads ShedAt (0.8) only with every CPU of the budget busy.
const learntCPUFull = 1.25

// learns reports whether the layer learns its in-flight limit: no worker
// budget, and the learnt limit not disabled.
func (c Config) learns() bool { return c.Workers == 0 && !c.Limit.Disable }

// cpuWorkers is the CPU budget (DetectBudget) rounded to whole CPUs, at
// least 1.
func cpuWorkers() int64 { return int64(math.Max(1, math.Round(DetectBudget().CPUs))) }

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Smoothing == 0 {
		c.Smoothing = DefaultSmoothing
	}
	if c.ShedAt == 0 {
		c.ShedAt = DefaultShedAt
	}
	if c.RecoverBelow == 0 {
		c.RecoverBelow = DefaultRecoverBelow
	}
	if c.Recovery == 0 {
		c.Recovery = DefaultRecovery
	}
	if c.RiseGain == 0 {
		c.RiseGain = DefaultRiseGain
	}
	if c.SchedLatencyTarget == 0 {
		c.SchedLatencyTarget = DefaultSchedLatencyTarget
		if c.learns() {
			c.SchedLatencyTarget = learntSchedLatencyTarget
		}
	}
	if c.QueueDelayTarget == 0 {
		c.QueueDelayTarget = DefaultQueueDelayTarget
	}
	if c.CPU.Full == 0 {
		c.CPU.Full = 1
		if c.learns() {
			// The learnt limit keeps admitted work from queueing for the
			// CPU; the level need only move once the CPU is saturated.
			c.CPU.Full = learntCPUFull
		}
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.BusyWorkers == 0 {
		c.BusyWorkers = c.Workers
	}
	cpus := cpuWorkers()
	if c.Limit.Min == 0 {
		c.Limit.Min = cpus
	}
	if c.Limit.Max == 0 {
		c.Limit.Max = max(DefaultLimitMax, c.Limit.Min)
	}
	if c.Limit.Initial == 0 {
		c.Limit.Initial = max(4, 2*cpus)
	}
	c.Limit.Initial = min(max(c.Limit.Initial, c.Limit.Min), c.Limit.Max)
	if c.Limit.Window == 0 {
		c.Limit.Window = DefaultLimitWindow
	}
	if c.Limit.Tolerance == 0 {
		c.Limit.Tolerance = DefaultLimitTolerance
	}
	c.Clock = clockx.Or(c.Clock)
	return c
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// Validate reports every invalid field, by name (joined with errors.Join).
// Zero values stand for the defaults and are valid, but for Interval's.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("worker: "+format, args...))
	}
	if c.Interval <= 0 {
		bad("Config.Interval must be positive, got %v (DefaultConfig and CPUBound set it to %v)", c.Interval, DefaultInterval)
	}
	if !finite(c.Smoothing) || c.Smoothing < 0 || c.Smoothing > 1 {
		bad("Config.Smoothing must be within (0, 1], got %v", c.Smoothing)
	}
	if !finite(c.ShedAt) || c.ShedAt < 0 || c.ShedAt > 1 {
		bad("Config.ShedAt must be within [0, 1], got %v", c.ShedAt)
	}
	if !finite(c.RecoverBelow) || c.RecoverBelow < 0 || c.RecoverBelow > 1 {
		bad("Config.RecoverBelow must be within [0, 1], got %v", c.RecoverBelow)
	}
	d := c.withDefaults()
	if finite(d.ShedAt) && finite(d.RecoverBelow) && d.RecoverBelow > d.ShedAt {
		bad("Config.RecoverBelow (%v) must not be above Config.ShedAt (%v)", d.RecoverBelow, d.ShedAt)
	}
	if c.Recovery < 0 {
		bad("Config.Recovery must be positive, got %v", c.Recovery)
	}
	if !finite(c.RiseGain) || c.RiseGain < 0 {
		bad("Config.RiseGain must be positive, got %v", c.RiseGain)
	}
	if !finite(c.CPU.Budget) || c.CPU.Budget < 0 {
		bad("Config.CPU.Budget must be a positive number of CPUs, got %v", c.CPU.Budget)
	}
	if !finite(c.CPU.Full) || c.CPU.Full < 0 {
		bad("Config.CPU.Full must be positive, got %v", c.CPU.Full)
	}
	if c.QueueDelayTarget < 0 {
		bad("Config.QueueDelayTarget must be positive, got %v", c.QueueDelayTarget)
	}
	if c.Workers < 0 {
		bad("Config.Workers must not be negative, got %d", c.Workers)
	}
	if c.BusyWorkers < 0 || c.BusyWorkers > c.Workers {
		bad("Config.BusyWorkers must be within [0, Config.Workers (%d)], got %d", c.Workers, c.BusyWorkers)
	}
	if c.Limit.Initial < 0 || c.Limit.Min < 0 || c.Limit.Max < 0 {
		bad("Config.Limit: Initial, Min and Max must not be negative, got %d, %d, %d", c.Limit.Initial, c.Limit.Min, c.Limit.Max)
	}
	if c.Limit.Max > 0 && c.Limit.Min > c.Limit.Max {
		bad("Config.Limit.Min (%d) must not be above Config.Limit.Max (%d)", c.Limit.Min, c.Limit.Max)
	}
	if c.Limit.Window < 0 {
		bad("Config.Limit.Window must be positive, got %v", c.Limit.Window)
	}
	if !finite(c.Limit.Tolerance) || (c.Limit.Tolerance != 0 && c.Limit.Tolerance < 1) {
		bad("Config.Limit.Tolerance must be at least 1, got %v", c.Limit.Tolerance)
	}
	if c.Yield && c.Workers == 0 {
		bad("Config.Yield needs a worker budget (Config.Workers)")
	}
	for i, s := range c.Signals {
		if s.Name == "" {
			bad("Config.Signals[%d].Name is empty", i)
		}
		if s.Read == nil {
			bad("Config.Signals[%d].Read is nil", i)
		}
	}
	if c.RetryAfter < 0 {
		bad("Config.RetryAfter must not be negative, got %v", c.RetryAfter)
	}
	if c.Enforcement.Mode == shed.Elastic {
		bad("Config.Enforcement.Mode elastic is not supported: it would read this layer's own headroom (use hard or soft)")
	}
	if err := c.Enforcement.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("worker: Config.Enforcement: %w", err))
	}
	return errors.Join(errs...)
}
