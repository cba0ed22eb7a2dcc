package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/internal/clockx"
	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// Layer is the fleet-usage load shedder: a shed.Layer that keeps the
// units in flight across every instance sharing its Redis keys within a
// ceiling per priority, reserving the rest of the fleet's capacity for more
// important work. See the package documentation for how it counts, the
// overshoot bound and what it does when Redis is gone.
//
// Acquire and Release touch only this instance's atomics, mostly on a
// cache line of their own core (see the package documentation): no
// allocation, no Redis, and a lock only when a stripe's credit runs out. A background tick, every Config.Interval, publishes
// this instance's counts and reads the fleet's totals back. Close stops it.
// A Layer is safe for concurrent use.
type Layer struct {
	name       string
	enf        shed.Enforcement
	clock      shed.Clock
	retryAfter time.Duration
	interval   time.Duration
	ttl        time.Duration
	timeout    time.Duration
	capacity   int64 // fleet-wide; 0 when perInstance is set
	perInst    int64
	ceil       [shed.NumPriorities]float64
	st         store
	queue      *layerkit.WaitQueue // nil unless Enforcement.Action is Queue

	local  *tally
	view   atomic.Pointer[view]
	ep     [shed.NumPriorities]layerkit.Episode
	grants layerkit.GuardPool[grant]

	lastLive   atomic.Int64 // live instances at the last good tick (ExpectedInstances before one)
	ticks      atomic.Int64
	failures   atomic.Int64
	collisions atomic.Int64
	lastErr    atomic.Pointer[error]

	tickMu sync.Mutex // one tick at a time; Close waits for the running one
	mu     sync.Mutex // guards timer and closed
	timer  shed.Timer
	closed bool
}

var (
	_ shed.Layer             = (*Layer)(nil)
	_ shed.Releaser          = (*Layer)(nil)
	_ layerkit.GaugeReporter = (*Layer)(nil)
)

// view is what one tick (or a failure of one) decided the request path
// judges against. It is immutable once published.
type view struct {
	// allow[r] is the most units this instance may hold at priorities ≤ r
	// until the next tick: its count at the tick plus its share of the
	// room left under ceiling r fleet-wide (see allowance).
	allow [shed.NumPriorities]int64
	// allowOver is allow computed against the soft/elastic ceilings.
	allowOver [shed.NumPriorities]int64
	ceiling   [shed.NumPriorities]int64 // ceiling r fleet-wide, in units
	others    [shed.NumPriorities]int64 // the other instances' units by priority, at the tick
	fleet     [shed.NumPriorities]int64 // the fleet's totals at the tick, by priority
	cap       int64
	live      int
	// fallback: Redis did not answer; the others are unknown and the
	// allowances are this instance's share of each ceiling.
	fallback bool
}

// grant is what a lease holds, kept in its guard (layerkit.GuardPool) so that
// releasing a copy of a released lease changes nothing.
type grant struct {
	idx    int     // Priority.Index
	stripe *stripe // the tally's stripe that holds the units
	cost   int64
}

// New checks cfg, reads the fleet's totals once (bounded by Config.Timeout;
// when Redis does not answer the layer starts in fallback) and starts the
// background tick.
func New(cfg Config) (*Layer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var b [8]byte
	_, _ = rand.Read(b[:])
	return newLayer(cfg, newRedisStore(cfg.Client, cfg.Prefix, cfg.Instance, hex.EncodeToString(b[:])))
}

func newLayer(cfg Config, st store) (*Layer, error) {
	s := &Layer{
		name:       cfg.Name,
		enf:        cfg.Enforcement,
		clock:      clockx.Or(cfg.Clock),
		retryAfter: cfg.RetryAfter,
		interval:   cfg.Interval,
		ttl:        cfg.TTL,
		timeout:    cfg.Timeout,
		capacity:   cfg.Capacity,
		perInst:    cfg.PerInstance,
		ceil:       cfg.ceilings(),
		st:         st,
		local:      newTally(stripesFor(runtime.GOMAXPROCS(0))),
	}
	if s.enf.Action == shed.Queue {
		qc := s.enf.Queue
		if qc.Clock == nil {
			qc.Clock = s.clock
		}
		q, err := layerkit.NewWaitQueue(qc)
		if err != nil {
			return nil, fmt.Errorf("fleet: Config.Enforcement.Queue: %w", err)
		}
		s.queue = q
	}
	s.lastLive.Store(int64(cfg.ExpectedInstances))
	s.setView(s.fallbackView())
	s.tick()
	return s, nil
}

// Name returns the layer's name (Config.Name, default "fleet").
func (s *Layer) Name() string { return s.name }

// ReadsRoute reports false: the layer counts by priority, never by route
// (shed.RouteReader).
func (s *Layer) ReadsRoute() bool { return false }

// Queued returns how many requests wait for room now (Enforcement.Action
// Queue); 0 without a queue.
func (s *Layer) Queued() int {
	if s.queue == nil {
		return 0
	}
	return s.queue.Len()
}

// Acquire admits req when the units in flight at its priority and every
// priority below it, fleet-wide, stay within that priority's ceiling, and
// the same for every priority above it up to critical, counting req's own
// cost. Otherwise it rejects with 503 (Retry-After: about one interval), or
// queues when Config.Enforcement.Action is shed.Queue. It never calls Redis.
func (s *Layer) Acquire(ctx context.Context, req shed.Request) (ls shed.Lease, err error) {
	cost := req.Units()
	i := req.Priority.Index()
	v := s.view.Load()
	k, ok := s.local.take(i, cost)
	if ok {
		// Admissions within the ceiling leave the soft episode alone (see
		// layerkit.Episode), so that soft mode stays bounded in time under
		// sustained overload.
		s.lease(&ls, v, i, k, cost)
		return ls, nil
	}
	return s.overLimit(ctx, req, v, i, k, cost)
}

func (s *Layer) lease(ls *shed.Lease, v *view, i int, k *stripe, cost int64) {
	*ls = shed.NewLease(s)
	s.grants.Issue(ls, grant{idx: i, stripe: k, cost: cost})
	ls.Cost = cost
	ls.Fallback = v.fallback
	ls.Quota = s.quota(i, v)
}

// overLimit decides a request whose units, already added on stripe k,
// broke a ceiling.
func (s *Layer) overLimit(ctx context.Context, req shed.Request, v *view, i int, k *stripe, cost int64) (ls shed.Lease, err error) {
	var now time.Time
	within := false
	if s.enf.Mode != shed.Hard {
		now = s.clock.Now()
		within = s.local.within(i, &v.allowOver)
	}
	switch verdict := layerkit.Decide(&s.enf, now, false, within, &s.ep[i]); verdict {
	case layerkit.AdmitOver:
		s.lease(&ls, v, i, k, cost)
		ls.Over = true
		return ls, nil
	case layerkit.AdmitDryRun:
		// A dry-run admission over the ceiling counts nothing in flight,
		// as a rejection would not: its lease holds nothing.
		k.put(i, cost)
		s.notify()
		ls = shed.NewLease(s)
		ls.Cost, ls.DryRun, ls.Fallback = cost, true, v.fallback
		ls.Quota = s.quota(i, v)
		return ls, nil
	case layerkit.Wait:
		k.put(i, cost)
		s.notify()
		return s.wait(ctx, req, i, cost)
	}
	k.put(i, cost)
	s.notify()
	return shed.Lease{}, s.rejection(req, v)
}

// wait queues a request over its ceiling until a release or a tick makes
// room (Enforcement.Action Queue).
func (s *Layer) wait(ctx context.Context, req shed.Request, i int, cost int64) (shed.Lease, error) {
	var got *view
	var gotK *stripe
	// take runs under the queue's lock, so got and gotK are written before
	// Wait returns and read only after.
	take := func() bool {
		v := s.view.Load()
		k, ok := s.local.take(i, cost)
		if ok {
			got, gotK = v, k
			return true
		}
		k.put(i, cost)
		return false
	}
	giveBack := func() { gotK.put(i, cost) }
	waited, err := s.queue.Wait(ctx, req.Priority, req.Deadline, take, giveBack)
	if err != nil {
		err = layerkit.QueueRejection(shed.StatusServiceUnavailable, err, waited)
		if r, ok := err.(*shed.Rejection); ok {
			v := s.view.Load()
			r.Layer, r.RetryAfter = s.name, s.retryAfter
			r.Fallback = v.fallback
			r.Policies = []shed.Quota{s.quota(req.Priority.Index(), v)}
		}
		return shed.Lease{}, err
	}
	var ls shed.Lease
	s.lease(&ls, got, i, gotK, cost)
	ls.Waited = waited
	return ls, nil
}

// rejection builds the layer's one kind of "no". It is the only place that
// calls shed.Shed, so that a change of its signature is a one-line change.
// Its policy is the ceiling of the request's priority, in units (while in
// fallback, this instance's share of it): what metrics label the rejection
// by, and what the HTTP side may or may not disclose.
func (s *Layer) rejection(req shed.Request, v *view) *shed.Rejection {
	r := shed.Shed("fleet at its ceiling for this priority", s.retryAfter, s.quota(req.Priority.Index(), v))
	r.Layer, r.Fallback = s.name, v.fallback
	return r
}

// quota describes the ceiling of priority index i: its policy name, and
// its limit in units (this instance's share of it in fallback). Remaining
// is left at zero: what is left fleet-wide is only known at the next tick.
// It is the service's own capacity (Service), which HTTP front ends do not
// disclose to clients unless told to.
func (s *Layer) quota(i int, v *view) shed.Quota {
	return shed.Quota{Policy: PolicyName, Limit: v.ceiling[i], Service: true, DryRun: s.enf.DryRun}
}

// Release gives back the units lease holds. Only the first release of a
// lease, or of any copy of it, counts; a lease this shedder did not grant
// is ignored. Callers use lease.Release, which calls this.
func (s *Layer) Release(lease *shed.Lease, _ shed.Outcome) {
	g, ok := s.grants.Claim(lease)
	if !ok {
		return
	}
	g.stripe.put(g.idx, g.cost)
	s.notify()
}

func (s *Layer) notify() {
	if s.queue != nil {
		s.queue.Notify()
	}
}

// tick publishes this instance's counts and reads the fleet's totals back,
// then sets the next tick.
func (s *Layer) tick() {
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return
	}
	start := s.clock.Now()
	published := s.local.load()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	rd, err := s.st.sync(ctx, published, s.ttl)
	cancel()
	if err != nil {
		s.fail(err)
	} else {
		s.apply(published, rd)
	}
	s.notify()

	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		d := s.interval - s.clock.Now().Sub(start)
		s.timer = s.clock.AfterFunc(max(d, 0), s.tick)
	}
}

// apply publishes the view of a tick Redis answered.
func (s *Layer) apply(published [shed.NumPriorities]int64, rd reading) {
	s.ticks.Add(1)
	if rd.collided {
		s.collisions.Add(1)
	}
	live := max(rd.live, 1)
	v := &view{live: live, fleet: rd.totals}
	v.cap = s.capacity
	if s.perInst > 0 {
		v.cap = mulCap(s.perInst, int64(live))
	}
	s.setCeilings(v)
	var fleet, mine int64
	for r := range v.allow {
		v.others[r] = max(0, rd.totals[r]-published[r])
		fleet += rd.totals[r]
		mine += published[r]
		v.allow[r] = allowance(mine, fleet, v.ceiling[r], int64(live))
		v.allowOver[r] = allowance(mine, fleet, s.enf.Ceiling(v.ceiling[r]), int64(live))
	}
	s.lastLive.Store(int64(live))
	s.setView(v)
}

// setView makes v the view requests are judged against.
func (s *Layer) setView(v *view) {
	s.local.setBudget(&v.allow)
	s.view.Store(v)
}

// allowance is how many units an instance that published mine, in a fleet
// whose entries sum to fleet, may hold under a ceiling of c shared by n
// live instances: mine plus an n-th of the room left (negative when the
// fleet is over: every instance then gives back its n-th of the excess).
// If every instance computed it from the same entries, the allowances
// would sum to at most c (c less the remainder of the division), so the
// fleet overshoots only by what changed between the instances' ticks (see
// the package documentation).
//
// While the fleet is full (less room than one unit per instance), an
// instance above its fair share (c ÷ n,
// rounded up) also gives back half of its excess, so that capacity does
// not stay with whoever took it first: an instance that joins a saturated
// fleet gets its share within a few ticks.
func allowance(mine, fleet, c, n int64) int64 {
	a := mine + floorDiv(c-fleet, n)
	if c-fleet < n { // full: less room than one unit per instance
		if fair := (c + n - 1) / n; mine > fair {
			a = min(a, mine-(mine-fair+1)/2)
		}
	}
	return a
}

// floorDiv is a ÷ b rounded towards minus infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// fail records a tick Redis did not answer: the layer decides from this
// instance's share until a tick succeeds.
func (s *Layer) fail(err error) {
	s.failures.Add(1)
	err = fmt.Errorf("fleet: sync with redis: %w", err)
	s.lastErr.Store(&err)
	if prev := s.view.Load(); !prev.fallback {
		v := s.fallbackView()
		// Start from what the last tick learnt: an instance whose allowance
		// was below its share (the fleet was full) keeps it, so that the
		// fleet overshoots its capacity by no more than what changed since
		// its ticks.
		for r := range v.allow {
			v.allow[r] = min(v.allow[r], max(prev.allow[r], 0))
			v.allowOver[r] = min(v.allowOver[r], max(prev.allowOver[r], 0))
		}
		s.setView(v)
	}
}

// fallbackView is this instance's share: capacity ÷ the last known number
// of live instances, rounded down, so that the fleet as a whole never
// exceeds its capacity while no instance can see the others; with
// PerInstance, the share is PerInstance.
func (s *Layer) fallbackView() *view {
	live := max(s.lastLive.Load(), 1)
	v := &view{live: int(live), fallback: true, cap: s.perInst}
	if s.perInst == 0 {
		v.cap = redisx.Share(s.capacity, int(live))
	}
	s.setCeilings(v)
	for r, c := range v.ceiling {
		v.allow[r] = c
		v.allowOver[r] = s.enf.Ceiling(c)
	}
	return v
}

func (s *Layer) setCeilings(v *view) {
	for r, c := range s.ceil {
		// The epsilon keeps 0.7 × 100 at 70, not 69.99…
		x := math.Floor(float64(v.cap)*c + 1e-9)
		if x >= math.MaxInt64 { // a float64 this large does not convert
			v.ceiling[r] = math.MaxInt64
			continue
		}
		v.ceiling[r] = int64(x)
	}
}

func mulCap(a, b int64) int64 {
	if b != 0 && a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// Close stops the background tick and removes this instance's entry from
// Redis, so that the fleet's totals drop its counts at once rather than
// when the entry expires. Requests still in flight may be released after
// Close; a layer used after it decides from its fallback share, since the
// others no longer count it.
func (s *Layer) Close() error {
	if !s.halt() {
		return nil
	}
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	// A tick that was running when halt stopped the others may have
	// published a fleet view since: the fleet no longer counts this
	// instance.
	s.setView(s.fallbackView())
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if _, err := s.st.sync(ctx, [shed.NumPriorities]int64{}, 0); err != nil {
		return fmt.Errorf("fleet: leave the fleet: %w", err)
	}
	return nil
}

// halt stops the tick, as a crash would, and reports whether it was
// running.
func (s *Layer) halt() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.setView(s.fallbackView())
	return true
}
