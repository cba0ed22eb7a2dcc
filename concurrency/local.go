package concurrency

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/internal/cacheline"
	"github.com/loadshed/loadshed/internal/clockx"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// Layer limits requests in flight in this process: overall, per key, or
// both. It implements shed.Layer and shed.Releaser; acquire and release take
// no global lock and allocate nothing. It is safe for concurrent use.
type Layer struct {
	name       string
	keyBy      KeyBy
	keyPolicy  string
	perKey     int64
	hasAll     bool
	enf        shed.Enforcement
	clock      shed.Clock
	retryAfter time.Duration
	keys       *keyMap // nil without a per-key limit
	adaptive   *adaptive
	queue      *layerkit.WaitQueue // nil unless Enforcement.Action is Queue

	// guards makes each grant count once, whichever copy of its lease is
	// released; a guard holds the grant's per-key slot (nil without one).
	// A grant from the queue is guarded by queued instead, which also
	// holds the fair queue's ticket.
	guards layerkit.GuardPool[*slot]
	queued layerkit.GuardPool[queuedGrant]

	limit    cacheline.Int64 // the overall limit; moves when adaptive
	inflight cacheline.Int64 // units in flight overall, when hasAll
	ep       layerkit.Episode
}

var (
	_ shed.Layer    = (*Layer)(nil)
	_ shed.Releaser = (*Layer)(nil)
	_ shed.Layer    = (*RedisLayer)(nil)
	_ shed.Releaser = (*RedisLayer)(nil)
)

// New checks cfg and returns a limiter.
func New(cfg Config) (*Layer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Layer{
		name:       cfg.Name,
		keyBy:      cfg.KeyBy,
		perKey:     cfg.PerKey,
		hasAll:     cfg.Limit > 0 || cfg.Adaptive != nil,
		enf:        cfg.Enforcement,
		clock:      clockx.Or(cfg.Clock),
		retryAfter: cfg.RetryAfter,
	}
	if l.name == "" {
		l.name = DefaultName
	}
	if l.retryAfter == 0 {
		l.retryAfter = DefaultRetryAfter
	}
	l.keyPolicy = PolicyPerKey
	if cfg.KeyBy == KeyByRoute {
		l.keyPolicy = PolicyPerRoute
	}
	if cfg.PerKey > 0 {
		l.keys = newKeyMap(l)
	}
	l.limit.Store(cfg.Limit)
	if cfg.Adaptive != nil {
		a := cfg.Adaptive.withDefaults()
		if cfg.Limit == 0 {
			l.limit.Store(a.Floor)
		}
		l.adaptive = newAdaptive(a, l.limit.Load(), l.clock.Now())
	}
	if l.enf.Action == shed.Queue {
		qc := l.enf.Queue
		if qc.Clock == nil {
			qc.Clock = l.clock
		}
		q, err := layerkit.NewFairQueue(qc, cfg.Fairness)
		if err != nil {
			return nil, fmt.Errorf("concurrency: Config.Enforcement.Queue: %w", err)
		}
		l.queue = q
	}
	return l, nil
}

// Name returns the layer's name (Config.Name, default "concurrency").
func (l *Layer) Name() string { return l.name }

// ReadsRoute reports whether the layer reads Request.Route: with KeyByRoute
// (shed.RouteReader).
func (l *Layer) ReadsRoute() bool { return l.keyBy == KeyByRoute }

// Limit returns the overall limit now (it moves when adaptive); 0 when there
// is none.
func (l *Layer) Limit() int64 { return l.limit.Load() }

// InFlight returns the units in flight now, overall.
func (l *Layer) InFlight() int64 {
	if l.hasAll {
		return l.inflight.Load()
	}
	if l.keys != nil {
		return l.keys.total()
	}
	return 0
}

// InFlightKey returns the units in flight for one key (a Request.Key or
// Request.Route, as Config.KeyBy says); 0 without a per-key limit.
func (l *Layer) InFlightKey(key string) int64 {
	if l.keys == nil {
		return 0
	}
	if s := l.keys.lookup(key); s != nil {
		if n := s.n.Load(); n > 0 {
			return n
		}
	}
	return 0
}

// Queued returns how many requests wait for capacity now (Enforcement.Action
// Queue); 0 without a queue.
func (l *Layer) Queued() int {
	if l.queue == nil {
		return 0
	}
	return l.queue.Len()
}

// ReportGauges reports the units in flight, the overall limit (0 without
// one; it moves when adaptive) and the requests queued, for metrics
// adapters (layerkit.GaugeReporter).
func (l *Layer) ReportGauges(emit func(layerkit.Gauge)) {
	emit(layerkit.Gauge{Layer: l.name, Name: layerkit.GaugeInFlight, Value: float64(l.InFlight())})
	emit(layerkit.Gauge{Layer: l.name, Name: layerkit.GaugeLimit, Value: float64(l.Limit())})
	emit(layerkit.Gauge{Layer: l.name, Name: layerkit.GaugeQueued, Value: float64(l.Queued())})
	l.reportFairness(emit)
}

// Keys returns how many per-key counters are held, idle ones not yet swept
// included.
func (l *Layer) Keys() int {
	if l.keys == nil {
		return 0
	}
	return l.keys.len()
}

// Sweep removes the per-key counters of keys with nothing in flight and
// reports how many it removed. The limiter also sweeps on its own, as keys
// are added, so calling Sweep is never required.
func (l *Layer) Sweep() int {
	if l.keys == nil {
		return 0
	}
	return l.keys.sweep()
}

func (l *Layer) key(req *shed.Request) string {
	if l.keyBy == KeyByRoute {
		return req.Route
	}
	return req.Key
}

// which says which limit a request ran into.
type which uint8

const (
	none which = iota
	keyLimit
	allLimit
)

// taken is the outcome of one attempt to add a request's units.
type taken struct {
	s        *slot
	keyAfter int64 // the key's count, after the take when ok, before when not
	allAfter int64
	over     which // the limit that refused, when !ok
	ok       bool
}

// take adds cost to the key's slot (when there is a per-key limit) and to
// the overall count (when there is an overall limit), each only if it stays
// within its bound. If either refuses, nothing is left taken.
func (l *Layer) take(key string, cost, keyMax, allMax int64) taken {
	var t taken
	if l.keys != nil {
		for {
			s := l.keys.get(key)
			n, ok := add(&s.n, cost, keyMax)
			if n < 0 {
				continue // swept under us: look the key up again
			}
			t.s = s
			if !ok {
				t.keyAfter, t.over = n, keyLimit
				return t
			}
			t.keyAfter = n + cost
			break
		}
	}
	if l.hasAll {
		n, ok := add(&l.inflight.Int64, cost, allMax)
		if !ok {
			if t.s != nil {
				t.s.n.Add(-cost)
			}
			t.allAfter, t.over = n, allLimit
			return t
		}
		t.allAfter = n + cost
	}
	t.ok = true
	return t
}

// add adds cost to c if the sum stays within max, and returns the count it
// found. A negative count is a dead slot: nothing is added.
func add(c *atomic.Int64, cost, max int64) (int64, bool) {
	for {
		n := c.Load()
		if n < 0 || n > max-cost {
			return n, false
		}
		if c.CompareAndSwap(n, n+cost) {
			return n, true
		}
	}
}

// attempt decides without waiting when the request is over a limit (t says
// which): a lease admitted over the limit or in dry run, or the verdict
// (Wait or Deny).
func (l *Layer) attempt(req *shed.Request, cost, limit int64, t taken) (shed.Lease, layerkit.Verdict, taken) {
	var now time.Time
	if l.enf.Mode != shed.Hard || l.enf.DryRun {
		now = l.clock.Now() // Decide reads it only for the soft and elastic allowances
	}
	v := layerkit.Deny
	if l.enf.Mode == shed.Hard {
		v = layerkit.DecideOver(&l.enf, now, false)
	} else {
		// Take again within the ceilings. The overage stands only if every
		// limit the request goes over allows it, each by its own episode.
		t2 := l.take(l.key(req), cost, l.enf.Ceiling(l.perKey), l.enf.Ceiling(limit))
		var eps [2]*layerkit.Episode
		n, over := l.overLimits(&eps, t2, cost, limit, now)
		if t2.ok && !over { // capacity freed in between
			return l.lease(&t2, cost, limit, now), layerkit.Admit, t2
		}
		if v = layerkit.DecideOver(&l.enf, now, t2.ok, eps[:n]...); v == layerkit.AdmitOver {
			ls := l.lease(&t2, cost, limit, now)
			ls.Over = true
			return ls, v, t2
		}
		l.untake(t2, cost)
		if !t2.ok {
			t = t2
		}
	}
	if v == layerkit.AdmitDryRun {
		// Admitted without taking anything, as a rejection would not have:
		// the limiter goes on deciding as if it enforced. Its release is a
		// no-op (no Ref).
		ls := shed.NewLease(l)
		ls.Cost = cost
		ls.Quota = l.refused(t)
		ls.DryRun = true
		return ls, v, t
	}
	return shed.Lease{}, v, t
}

// overLimits lists in eps, in Soft mode, the episodes of the limits t goes
// over (or, when !t.ok, the one that refused it), and reports whether it
// goes over any. A limit already exceeded before this request (overage
// still in flight) is held at now: its episode goes on rather than a new
// one beginning.
func (l *Layer) overLimits(eps *[2]*layerkit.Episode, t taken, cost, limit int64, now time.Time) (n int, over bool) {
	soft := l.enf.Mode == shed.Soft
	if t.s != nil && (t.over == keyLimit || t.keyAfter > l.perKey) {
		over = true
		if soft {
			before := t.keyAfter
			if t.over != keyLimit {
				before -= cost // keyAfter counts this request
			}
			if before > l.perKey {
				t.s.ep.Hold(now)
			}
			eps[n] = &t.s.ep
			n++
		}
	}
	if l.hasAll && (t.over == allLimit || t.ok && t.allAfter > limit) {
		over = true
		if soft {
			before := t.allAfter
			if t.ok {
				before -= cost
			}
			if before > limit {
				l.ep.Hold(now)
			}
			eps[n] = &l.ep
			n++
		}
	}
	return n, over
}

func (l *Layer) lease(t *taken, cost, limit int64, now time.Time) shed.Lease {
	ls := shed.NewLease(l)
	ls.Cost = cost
	l.guards.Issue(&ls, t.s)
	if t.s != nil && l.showKeyQuota(t, limit) {
		ls.Quota = shed.Quota{Policy: l.keyPolicy, Limit: l.perKey, Remaining: max(0, l.perKey-t.keyAfter), Service: l.keyBy == KeyByRoute, DryRun: l.enf.DryRun}
	} else {
		ls.Quota = shed.Quota{Policy: PolicyOverall, Limit: limit, Remaining: max(0, limit-t.allAfter), Service: true, DryRun: l.enf.DryRun}
	}
	if l.adaptive != nil {
		if now.IsZero() {
			now = l.clock.Now()
		}
		ls.Acquired = now
	}
	return ls
}

// Acquire admits req if its units fit within the limits, and otherwise
// rejects it, or queues it when Config.Enforcement.Action is shed.Queue
// (until capacity frees, the queue's bounds or the request's deadline, or
// ctx ends). A rejection over the per-key limit is a 429 with KeyByClient, every
// other rejection a 503.
func (l *Layer) Acquire(ctx context.Context, req shed.Request) (ls shed.Lease, err error) {
	cost := req.Units()
	limit := l.limit.Load()
	t := l.take(l.key(&req), cost, l.perKey, limit)
	if !t.ok {
		return l.over(ctx, req, cost, limit, t)
	}
	// Built here, in the named result, rather than by l.lease: a Lease is
	// 144 bytes, and each function it is returned through copies it again.
	ls = shed.NewLease(l)
	ls.Cost = cost
	l.guards.Issue(&ls, t.s)
	if t.s != nil {
		if l.showKeyQuota(&t, limit) {
			ls.Quota = shed.Quota{Policy: l.keyPolicy, Limit: l.perKey, Remaining: max(0, l.perKey-t.keyAfter), Service: l.keyBy == KeyByRoute, DryRun: l.enf.DryRun}
		} else {
			ls.Quota = shed.Quota{Policy: PolicyOverall, Limit: limit, Remaining: max(0, limit-t.allAfter), Service: true, DryRun: l.enf.DryRun}
		}
	} else {
		ls.Quota = shed.Quota{Policy: PolicyOverall, Limit: limit, Remaining: max(0, limit-t.allAfter), Service: true, DryRun: l.enf.DryRun}
	}
	if l.adaptive != nil {
		ls.Acquired = l.clock.Now()
	}
	return ls, nil
}

// over handles a request refused by a limit at its first attempt.
func (l *Layer) over(ctx context.Context, req shed.Request, cost, limit int64, t taken) (shed.Lease, error) {
	ls, v, t := l.attempt(&req, cost, limit, t)
	switch v {
	case layerkit.Admit, layerkit.AdmitOver, layerkit.AdmitDryRun:
		return ls, nil
	case layerkit.Wait:
		return l.wait(ctx, req, cost, t)
	}
	return shed.Lease{}, l.rejection(req, t)
}

func (l *Layer) rejection(req shed.Request, t taken) *shed.Rejection {
	return refusal(l.name, l.keyBy, t.over == keyLimit, l.retryAfter, l.refused(t))
}

// refusal is the rejection of a request over the limit q of the layer
// called name, local or on Redis: a 429 over a client's own limit, a 503
// over a route's or the overall one.
func refusal(name string, keyBy KeyBy, overKey bool, retryAfter time.Duration, q shed.Quota) *shed.Rejection {
	var rj *shed.Rejection
	switch {
	case overKey && keyBy == KeyByClient:
		rj = shed.Throttled("too many requests in flight for this client", retryAfter, q)
	case overKey:
		rj = shed.Shed("too many requests in flight for this route", retryAfter, q)
	default:
		rj = shed.Shed("too many requests in flight", retryAfter, q)
	}
	rj.Layer = name
	return rj
}

// refused is the quota of the limit that refused t.
func (l *Layer) refused(t taken) shed.Quota {
	if t.over == keyLimit {
		return shed.Quota{Policy: l.keyPolicy, Limit: l.perKey, Remaining: max(0, l.perKey-t.keyAfter), Service: l.keyBy == KeyByRoute, DryRun: l.enf.DryRun}
	}
	limit := l.limit.Load()
	return shed.Quota{Policy: PolicyOverall, Limit: limit, Remaining: max(0, limit-t.allAfter), Service: true, DryRun: l.enf.DryRun}
}

// Release gives back the units lease holds and, with an adaptive limit,
// learns from the outcome (only Completed and Failed: Dropped and Unused say
// nothing about the service). A lease this limiter did not grant is ignored.
// Callers use lease.Release, which calls this once.
func (l *Layer) Release(lease *shed.Lease, o shed.Outcome) {
	s, ok := l.guards.Claim(lease)
	if !ok {
		g, ok := l.queued.Claim(lease)
		if !ok {
			return // not this limiter's, or released already through a copy
		}
		s = g.s
		// The slot was held until now: the queue charges its client.
		defer g.ticket.Done()
	}
	var now time.Time // read once, and only when a soft limit is back within bounds
	if s != nil {
		after := s.n.Add(-lease.Cost)
		if l.enf.Mode == shed.Soft && after+lease.Cost > l.perKey && after <= l.perKey {
			now = l.clock.Now()
			s.ep.Hold(now) // its overage left: the cool-down starts now
		}
	}
	var before int64
	if l.hasAll {
		before = l.inflight.Add(-lease.Cost) + lease.Cost
		if lim := l.limit.Load(); l.enf.Mode == shed.Soft && before > lim && before-lease.Cost <= lim {
			if now.IsZero() {
				now = l.clock.Now()
			}
			l.ep.Hold(now)
		}
	}
	if l.adaptive != nil && (o == shed.Completed || o == shed.Failed) && !lease.Acquired.IsZero() {
		now := l.clock.Now()
		if lim, ok := l.adaptive.observe(now, now.Sub(lease.Acquired), before); ok {
			l.limit.Store(lim)
		}
	}
	if l.queue != nil {
		l.queue.Notify()
	}
}

// showKeyQuota says which quota a lease carries, for the RateLimit fields:
// the client's own per-key limit whenever there is one, so that every
// response of a route names the same policy (the overall limit is the
// service's, which clients are not told by default); otherwise the limit
// with the least room left.
func (l *Layer) showKeyQuota(t *taken, limit int64) bool {
	return !l.hasAll || l.keyBy == KeyByClient || l.perKey-t.keyAfter < limit-t.allAfter
}
