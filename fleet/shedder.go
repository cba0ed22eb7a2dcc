package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/shed"
)

// Shedder is the fleet-usage load shedder: a shed.Layer that keeps the
// units in flight across every instance sharing its Redis keys within a
// ceiling per priority, reserving the rest of the fleet's capacity for more
// important work. See the package documentation for how it counts, the
// overshoot bound and what it does when Redis is gone.
//
// Acquire and Release touch only this instance's atomics: no lock, no
// allocation, no Redis. A background tick, every Config.Interval, publishes
// this instance's counts and reads the fleet's totals back. Close stops it.
// A Shedder is safe for concurrent use.
type Shedder struct {
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
	queue      *shed.WaitQueue // nil unless Enforcement.Action is Queue

	local  counts
	view   atomic.Pointer[view]
	ep     [shed.NumPriorities]shed.Episode
	grants sync.Pool

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
	_ shed.Layer         = (*Shedder)(nil)
	_ shed.Releaser      = (*Shedder)(nil)
	_ shed.GaugeReporter = (*Shedder)(nil)
)

// counts are this instance's units in flight by Priority.Index, on a cache
// line of their own: every request writes one of them.
type counts struct {
	_ [64]byte
	n [shed.NumPriorities]atomic.Int64
	_ [64 - 8*shed.NumPriorities]byte
}

func (c *counts) load() (out [shed.NumPriorities]int64) {
	for i := range c.n {
		out[i] = c.n[i].Load()
	}
	return out
}

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

// grant is what a lease points at (Lease.Ref), so that a copy of a
// released lease cannot release again: the release that moves gen on from
// the lease's ID wins, any other finds it moved.
type grant struct {
	owner *Shedder // set once, at creation
	gen   atomic.Uint64
	idx   int
	cost  int64
}

// New checks cfg, reads the fleet's totals once (bounded by Config.Timeout;
// when Redis does not answer the layer starts in fallback) and starts the
// background tick.
func New(cfg Config) (*Shedder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var b [8]byte
	_, _ = rand.Read(b[:])
	return newShedder(cfg, newRedisStore(cfg.Client, cfg.Prefix, cfg.Instance, hex.EncodeToString(b[:])))
}

func newShedder(cfg Config, st store) (*Shedder, error) {
	s := &Shedder{
		name:       cfg.Name,
		enf:        cfg.Enforcement,
		clock:      shed.ClockOr(cfg.Clock),
		retryAfter: cfg.RetryAfter,
		interval:   cfg.Interval,
		ttl:        cfg.TTL,
		timeout:    cfg.Timeout,
		capacity:   cfg.Capacity,
		perInst:    cfg.PerInstance,
		ceil:       cfg.ceilings(),
		st:         st,
	}
	s.grants.New = func() any { return &grant{owner: s} }
	if s.enf.Action == shed.Queue {
		qc := s.enf.Queue
		if qc.Clock == nil {
			qc.Clock = s.clock
		}
		q, err := shed.NewWaitQueue(qc)
		if err != nil {
			return nil, fmt.Errorf("fleet: Config.Enforcement.Queue: %w", err)
		}
		s.queue = q
	}
	s.lastLive.Store(int64(cfg.ExpectedInstances))
	s.view.Store(s.fallbackView())
	s.tick()
	return s, nil
}

// Name returns the layer's name (Config.Name, default "fleet").
func (s *Shedder) Name() string { return s.name }

// Acquire admits req when the units in flight at its priority and every
// priority below it, fleet-wide, stay within that priority's ceiling, and
// the same for every priority above it up to critical, counting req's own
// cost. Otherwise it rejects with 503 (Retry-After: about one interval), or
// queues when Config.Enforcement.Action is shed.Queue. It never calls Redis.
func (s *Shedder) Acquire(ctx context.Context, req shed.Request) (ls shed.Lease, err error) {
	cost := req.Units()
	i := req.Priority.Index()
	v := s.view.Load()
	s.local.n[i].Add(cost)
	if s.check(i, &v.allow) {
		if s.enf.Mode == shed.Soft {
			s.ep[i].End()
		}
		s.lease(&ls, v, i, cost)
		return ls, nil
	}
	return s.overLimit(ctx, req, v, i, cost)
}

// check reports whether this instance's counts, with the units just added
// at priority i, stay within every allowance from i upwards.
func (s *Shedder) check(i int, allow *[shed.NumPriorities]int64) bool {
	var sum int64
	for q := 0; q < i; q++ {
		sum += s.local.n[q].Load()
	}
	for r := i; r < shed.NumPriorities; r++ {
		sum += s.local.n[r].Load()
		if sum > allow[r] {
			return false
		}
	}
	return true
}

func (s *Shedder) lease(ls *shed.Lease, v *view, i int, cost int64) {
	g := s.grants.Get().(*grant)
	g.idx, g.cost = i, cost
	*ls = shed.NewLease(s)
	ls.Ref = g
	ls.ID = g.gen.Load()
	ls.Cost = cost
	ls.Fallback = v.fallback
}

// overLimit decides a request whose units, already added, broke a ceiling.
func (s *Shedder) overLimit(ctx context.Context, req shed.Request, v *view, i int, cost int64) (ls shed.Lease, err error) {
	var now time.Time
	within := false
	if s.enf.Mode != shed.Hard {
		now = s.clock.Now()
		within = s.check(i, &v.allowOver)
	}
	switch verdict := s.enf.Decide(now, false, within, &s.ep[i]); verdict {
	case shed.AdmitOver, shed.AdmitDryRun:
		s.lease(&ls, v, i, cost)
		ls.Over = verdict == shed.AdmitOver
		ls.DryRun = verdict == shed.AdmitDryRun
		return ls, nil
	case shed.Wait:
		s.local.n[i].Add(-cost)
		s.notify()
		return s.wait(ctx, req, i, cost)
	}
	s.local.n[i].Add(-cost)
	s.notify()
	return shed.Lease{}, s.rejection(req, v.fallback)
}

// wait queues a request over its ceiling until a release or a tick makes
// room (Enforcement.Action Queue).
func (s *Shedder) wait(ctx context.Context, req shed.Request, i int, cost int64) (shed.Lease, error) {
	var got *view
	// take runs under the queue's lock, so got is written before Wait
	// returns and read only after.
	take := func() bool {
		v := s.view.Load()
		s.local.n[i].Add(cost)
		if s.check(i, &v.allow) {
			got = v
			return true
		}
		s.local.n[i].Add(-cost)
		return false
	}
	giveBack := func() { s.local.n[i].Add(-cost) }
	waited, err := s.queue.Wait(ctx, req.Priority, req.Deadline, take, giveBack)
	if err != nil {
		err = shed.QueueRejection(s.name, req, shedStatus, err, waited)
		if r, ok := err.(*shed.Rejection); ok {
			r.RetryAfter = s.retryAfter
			r.Fallback = s.view.Load().fallback
		}
		return shed.Lease{}, err
	}
	var ls shed.Lease
	s.lease(&ls, got, i, cost)
	ls.Waited = waited
	return ls, nil
}

// shedStatus is the status of every rejection of this layer: the fleet,
// not the client, is over its limit.
const shedStatus = 503

// rejection builds the layer's one kind of "no". It is the only place that
// calls shed.Shed, so that a change of its signature is a one-line change.
// The fleet's capacity is not disclosed to the client: no quota goes with
// it.
func (s *Shedder) rejection(req shed.Request, fallback bool) *shed.Rejection {
	r := shed.Shed(s.name, req, "fleet at its ceiling for this priority", s.retryAfter)
	r.Fallback = fallback
	return r
}

// Release gives back the units lease holds. Only the first release of a
// lease, or of any copy of it, counts; a lease this shedder did not grant
// is ignored. Callers use lease.Release, which calls this.
func (s *Shedder) Release(lease *shed.Lease, _ shed.Outcome) {
	g, ok := lease.Ref.(*grant)
	if !ok || g.owner != s || !g.gen.CompareAndSwap(lease.ID, lease.ID+1) {
		return
	}
	s.local.n[g.idx].Add(-g.cost)
	s.grants.Put(g)
	s.notify()
}

func (s *Shedder) notify() {
	if s.queue != nil {
		s.queue.Notify()
	}
}

// tick publishes this instance's counts and reads the fleet's totals back,
// then sets the next tick.
func (s *Shedder) tick() {
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
func (s *Shedder) apply(published [shed.NumPriorities]int64, rd reading) {
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
	s.view.Store(v)
}

// allowance is how many units an instance that published mine, in a fleet
// whose entries sum to fleet, may hold under a ceiling of c shared by n
// live instances: mine plus an n-th of the room left (negative when the
// fleet is over: every instance then gives back its n-th of the excess).
// If every instance computed it from the same entries, the allowances
// would sum to exactly c, so the fleet overshoots only by what changed
// between the instances' ticks (see the package documentation).
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
func (s *Shedder) fail(err error) {
	s.failures.Add(1)
	err = fmt.Errorf("fleet: sync with redis: %w", err)
	s.lastErr.Store(&err)
	if !s.view.Load().fallback {
		s.view.Store(s.fallbackView())
	}
}

// fallbackView is this instance's share: capacity ÷ the last known number
// of live instances, rounded down, so that the fleet as a whole never
// exceeds its capacity while no instance can see the others; with
// PerInstance, the share is PerInstance.
func (s *Shedder) fallbackView() *view {
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

func (s *Shedder) setCeilings(v *view) {
	for r, c := range s.ceil {
		// The epsilon keeps 0.7 × 100 at 70, not 69.99…
		v.ceiling[r] = int64(math.Floor(float64(v.cap)*c + 1e-9))
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
// Close; the layer keeps deciding, in fallback, if used after it.
func (s *Shedder) Close() error {
	if !s.halt() {
		return nil
	}
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if _, err := s.st.sync(ctx, [shed.NumPriorities]int64{}, 0); err != nil {
		return fmt.Errorf("fleet: leave the fleet: %w", err)
	}
	return nil
}

// halt stops the tick, as a crash would, and reports whether it was
// running.
func (s *Shedder) halt() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	return true
}
