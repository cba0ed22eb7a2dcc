package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/internal/clockx"
	"github.com/loadshed/loadshed/internal/overage"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// DefaultName is a layer's name when Config.Name is empty.
const DefaultName = "ratelimit"

// MaxRules is the most rules one layer holds.
const MaxRules = 8

// Config configures a Layer.
type Config struct {
	// Name is the layer's name in rejections, events and metrics (default
	// DefaultName), so that two rate-limit layers are told apart.
	Name string
	// Rules are the limits, checked in order. Required, 1 to MaxRules.
	Rules []Rule
	// Enforcement is the mode (hard, soft, elastic), dry run and action
	// (reject with 429, or queue) for every rule. The zero value is hard,
	// rejecting.
	Enforcement shed.Enforcement
	// Clock reads time for soft episodes and arms the wake-ups of queued
	// requests (default shed.SystemClock). Enforcement.Queue.Clock, when
	// nil, gets it too.
	Clock shed.Clock
	// OnError, when set, is told of every Store error other than a cost
	// that can never be admitted (a Redis store that did not answer, say).
	// The request is admitted all the same, with Lease.Fallback set. It is
	// called on the request's goroutine and must be quick.
	OnError func(rule string, err error)
	// MaxKeys bounds the per-key state the layer keeps itself: soft-mode
	// overage episodes and per-key wait queues (default 65536). Past it, the
	// oldest episodes are forgotten and new keys cannot queue.
	MaxKeys int
}

// Layer is the request-rate layer: a shed.Layer that checks every rule that
// applies to a request and admits it only if all of them do.
//
// A request denied by one rule is not charged by the others: the units
// already taken are refunded before the layer answers. Nor is a request let
// through in dry run charged by any rule. A lease released
// with shed.Unused (a later layer rejected the request, so it never ran)
// refunds its units too; any other outcome keeps them.
//
// When a Store fails (a Redis store that is down and has no fallback),
// the layer does not turn it into an error: the rule is skipped, the
// request is admitted with Lease.Fallback set (so the chain's observer
// records a fallback event) and Config.OnError is told. A Store that
// is a FallbackDecider (the Redis store) and decided from its local
// fallback sets Lease.Fallback (or Rejection.Fallback) too.
//
// With the queue action, a request over its limit waits in a queue of its
// own key (the first rule key it was denied on), highest priority first,
// and is woken when its RetryAfter has passed or units are refunded. With
// a LeakyBucket this shapes a key's traffic to the limit's constant rate
// once the burst is spent (set Burst to 1 for strict spacing). A waiter is
// granted by calling its rules' limiters under its queue's lock, so with a
// Redis limiter the waiters of one key are served one round trip at a time.
// Enforcement.Queue.MaxLength bounds the waiters of the whole layer; when
// it is reached, a newcomer evicts the lowest-priority waiter below its own
// priority, whatever its key (as one full layerkit.WaitQueue does), or is
// rejected with "queue full".
//
// In Soft mode each rule key has its own overage episode (layerkit.Episode),
// and a request over several rules is admitted over only if every one of
// their episodes allows it. Rules whose keys are equal strings share
// queues and soft episodes.
type Layer struct {
	name  string
	rules []*compiledRule
	enf   shed.Enforcement
	clock shed.Clock
	onErr func(string, error)

	episodes overage.Episodes
	queues   *queues
	tickets  sync.Pool
}

var _ shed.Layer = (*Layer)(nil)
var _ shed.Releaser = (*Layer)(nil)

// New checks cfg and builds the layer.
func New(cfg Config) (*Layer, error) {
	var errs []error
	if n := len(cfg.Rules); n == 0 || n > MaxRules {
		errs = append(errs, fmt.Errorf("ratelimit: Config.Rules must have 1 to %d rules, got %d", MaxRules, n))
	}
	if err := cfg.Enforcement.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("ratelimit: Config.Enforcement: %w", err))
	}
	if cfg.MaxKeys < 0 {
		errs = append(errs, fmt.Errorf("ratelimit: Config.MaxKeys must not be negative, got %d", cfg.MaxKeys))
	}
	l := &Layer{name: cfg.Name, enf: cfg.Enforcement, clock: clockx.Or(cfg.Clock), onErr: cfg.OnError}
	if l.name == "" {
		l.name = DefaultName
	}
	maxKeys := cfg.MaxKeys
	if maxKeys == 0 {
		maxKeys = 1 << 16
	}
	names := map[string]bool{}
	for i, r := range cfg.Rules {
		c, err := compileRule(i, r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if names[r.Name] {
			errs = append(errs, fmt.Errorf("ratelimit: Config.Rules[%d].Name %q is used twice", i, r.Name))
		}
		names[r.Name] = true
		l.rules = append(l.rules, c)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, c := range l.rules {
		c.bare = len(c.Descriptors) == 1 && l.owns(c)
		if c.Overage == nil && l.enf.Mode != shed.Hard {
			o, err := overageFor(c, &l.enf, l.clock)
			if err != nil {
				return nil, fmt.Errorf("ratelimit: rule %q: building its overage limiter: %w", c.Name, err)
			}
			c.Overage, c.ownOverage = o, o
		}
	}
	l.episodes.Init(maxKeys, &l.enf)
	if l.enf.Action == shed.Queue {
		qc := l.enf.Queue
		if qc.Clock == nil {
			qc.Clock = l.clock
		}
		l.queues = &queues{cfg: qc, maxKeys: maxKeys, m: map[string]*keyQueue{}}
	}
	l.tickets.New = func() any { return new(ticket) }
	return l, nil
}

// owns reports whether c is the only rule of the layer using its limiter.
// Limiters of types that cannot be compared count as shared.
func (l *Layer) owns(c *compiledRule) bool {
	if !reflect.TypeOf(c.Store).Comparable() {
		return false
	}
	for _, o := range l.rules {
		if o != c && reflect.TypeOf(o.Store) == reflect.TypeOf(c.Store) && o.Store == c.Store {
			return false
		}
	}
	return true
}

// overageFor builds the in-memory limiter of c's overage: Ceiling − limit
// units per Period, the burst scaled alike.
func overageFor(c *compiledRule, e *shed.Enforcement, clock shed.Clock) (*Memory, error) {
	return NewMemory(c.Store.Algorithm(), c.limit.Overage(e), MemoryConfig{Clock: clock})
}

// Overage is the room a soft limit has above l under e: what e's ceiling
// adds to the quantity, and to the burst where l has one, over the same
// period. A soft limit keeps it in a store of its own, so that the overage
// is bounded as the limit is: a Rule's Overage, when the layer is not to
// build it in memory, is a store of this limit.
func (l Limit) Overage(e *shed.Enforcement) Limit {
	extra := func(n int64) int64 { return e.Ceiling(n) - n }
	o := Limit{Quantity: extra(l.Quantity), Period: l.Period}
	if l.Burst > 0 {
		o.Burst = extra(l.Burst)
	}
	return o
}

// Name returns the layer's name (Config.Name, default "ratelimit").
func (l *Layer) Name() string { return l.name }

// ReadsRoute reports whether a rule's key reads Request.Route: a "route"
// descriptor, or one with its own From function, which may
// (shed.RouteReader).
func (l *Layer) ReadsRoute() bool {
	for _, c := range l.rules {
		for _, s := range c.sources {
			if s == fromRoute || s == fromFunc {
				return true
			}
		}
	}
	return false
}

// Close stops the sweepers of the overage limiters the layer built. The
// rules' own limiters are the caller's to close.
func (l *Layer) Close() error {
	for _, c := range l.rules {
		if c.ownOverage != nil {
			c.ownOverage.Close()
		}
		if c.ownStore != nil {
			c.ownStore.Close()
		}
	}
	return nil
}

// taken is what one rule took for a request.
type taken struct {
	rule    int8
	overage bool // from the rule's Overage, not its Store
	key     string
}

// ticket is what a lease holds: the units to refund if it is released
// Unused. Tickets are pooled; gen guards a pooled ticket against a second
// release through a copy of its lease.
type ticket struct {
	gen   atomic.Uint64
	cost  int64
	n     int
	taken [MaxRules]taken
	// quotas[i] is the quota of taken[i]'s rule as it admitted the
	// request, for the RateLimit fields (shed.QuotaLister).
	quotas [MaxRules]shed.Quota
}

// attempt is one pass over the rules for a request.
type attempt struct {
	t         *ticket
	cost      int64
	overLimit bool // some rule admitted it only from its overage
	overCeil  bool // some rule denied it outright
	never     bool // its cost can never be admitted
	fallback  bool
	tight     shed.Quota // the admitting rule closest to exhaustion
	denied    shed.Quota // the rule that denied it
	retry     time.Duration
	overKey   string // the first rule key over its limit (queues)
	nOver     int
	overKeys  [MaxRules]string // every rule key over its limit (soft episodes)
}

// try runs every rule that applies to req, taking cost units from each
// until one denies. It takes from a rule's Overage only when overage may be
// used (Soft or Elastic).
func (l *Layer) try(ctx context.Context, req *shed.Request, a *attempt) {
	t := a.t
	t.n = 0
	t.cost = a.cost
	a.overLimit, a.overCeil, a.never, a.fallback = false, false, false, false
	a.tight, a.denied, a.retry, a.overKey, a.nOver = shed.Quota{}, shed.Quota{}, 0, "", 0
	for i, c := range l.rules {
		key, ok := c.key(ctx, req)
		if !ok {
			continue
		}
		var r Result
		var err error
		if c.decider != nil {
			var fb bool
			r, fb, err = c.decider.Decide(ctx, key, a.cost)
			a.fallback = a.fallback || fb
		} else {
			r, err = c.Store.Allow(ctx, key, a.cost)
		}
		if err != nil {
			if errors.Is(err, ErrCostAboveBurst) {
				a.never, a.overCeil = true, true
				a.denied = l.quotaOf(c, Result{Limit: c.limit.Quantity})
				return
			}
			a.fallback = true
			if l.onErr != nil {
				l.onErr(c.Name, err)
			}
			continue
		}
		if r.Allowed {
			q := l.quotaOf(c, r)
			t.taken[t.n] = taken{rule: int8(i), key: key}
			t.quotas[t.n] = q
			t.n++
			if a.tight.IsZero() || q.Remaining < a.tight.Remaining {
				a.tight = q
			}
			continue
		}
		if a.overKey == "" {
			a.overKey, a.retry = key, r.RetryAfter
		}
		a.overKeys[a.nOver] = key
		a.nOver++
		if c.Overage != nil && l.enf.Mode != shed.Hard {
			o, err := c.Overage.Allow(ctx, key, a.cost)
			if err == nil && o.Allowed {
				q := l.quotaOf(c, r)
				t.taken[t.n] = taken{rule: int8(i), overage: true, key: key}
				t.quotas[t.n] = q
				t.n++
				a.overLimit = true
				if a.tight.IsZero() || q.Remaining < a.tight.Remaining {
					a.tight = q
				}
				continue
			}
		}
		a.overCeil, a.denied, a.retry = true, l.quotaOf(c, r), r.RetryAfter
		return
	}
}

// quotaOf is the quota of rule c as r leaves it, marked DryRun when the
// layer is in dry run.
func (l *Layer) quotaOf(c *compiledRule, r Result) shed.Quota {
	return shed.Quota{Policy: c.Name, Limit: r.Limit, Window: c.limit.Period, Remaining: r.Remaining, Reset: nextUnit(c.alg, c.limit, r), DryRun: l.enf.DryRun}
}

// refund gives back everything t holds. notify wakes the keys' waiters:
// only for units a request held (a lease released Unused); units of an
// attempt that failed were free before it and free nobody.
func (l *Layer) refund(t *ticket, notify bool) {
	for i := 0; i < t.n; i++ {
		tk := &t.taken[i]
		c := l.rules[tk.rule]
		lim := c.Store
		if tk.overage {
			lim = c.Overage
		}
		if err := lim.Refund(context.Background(), tk.key, t.cost); err != nil && l.onErr != nil {
			l.onErr(c.Name, err)
		}
		if notify && l.queues != nil {
			l.queues.notify(tk.key)
		}
	}
	t.n = 0
}

// verdict applies the enforcement to an attempt. In Soft mode, every rule
// key the request is over holds it to its own episode.
func (l *Layer) verdict(a *attempt) layerkit.Verdict {
	if a.never {
		if l.enf.DryRun {
			return layerkit.AdmitDryRun
		}
		return layerkit.Deny
	}
	if !a.overLimit && !a.overCeil {
		return layerkit.Admit
	}
	return l.episodes.Verdict(&l.enf, l.clock, !a.overCeil, a.overKeys[:a.nOver]...)
}

// Acquire checks req against every rule that applies to it.
func (l *Layer) Acquire(ctx context.Context, req shed.Request) (shed.Lease, error) {
	t := l.tickets.Get().(*ticket)
	a := attempt{t: t, cost: req.Units()}
	l.try(ctx, &req, &a)
	v := l.verdict(&a)
	var waited time.Duration
	switch v {
	case layerkit.Deny:
		l.refund(t, false)
		l.recycle(t)
		return shed.Lease{}, l.rejection(&req, &a, "rate limit exceeded")
	case layerkit.Wait:
		l.refund(t, false)
		var err error
		a, v, waited, err = l.wait(ctx, req, a)
		if err != nil {
			l.recycle(t)
			return shed.Lease{}, err
		}
	case layerkit.AdmitDryRun:
		// Admitted, but charged by no rule: the rules that admitted it give
		// their units back, as they would had the request been rejected,
		// so the layer goes on deciding as if it enforced.
		l.refund(t, false)
		a.tight = a.denied
	}
	lease := shed.NewLease(l)
	lease.Ref = t
	lease.ID = t.gen.Load()
	lease.Cost = a.cost
	lease.Quota = a.tight
	lease.Waited = waited
	lease.Over = v == layerkit.AdmitOver
	lease.DryRun = v == layerkit.AdmitDryRun
	lease.Fallback = a.fallback
	lease.MoreQuotas = t.n > 1
	return lease, nil
}

// Quotas appends the quota of every rule that admitted the lease's
// request, in rule order (shed.QuotaLister): the RateLimit-Policy field
// then names each of them on every response, not only the nearest to
// running out.
func (l *Layer) Quotas(lease *shed.Lease, dst []shed.Quota) []shed.Quota {
	t, ok := lease.Ref.(*ticket)
	if !ok || t.gen.Load() != lease.ID {
		if !lease.Quota.IsZero() {
			dst = append(dst, lease.Quota)
		}
		return dst
	}
	return append(dst, t.quotas[:t.n]...)
}

func (l *Layer) rejection(req *shed.Request, a *attempt, reason string) *shed.Rejection {
	if a.never {
		reason = "request cost exceeds the rate limit"
	}
	rj := shed.Throttled(reason, a.retry, a.denied)
	rj.Layer, rj.Fallback = l.name, a.fallback
	return rj
}

// recycle pools t once nothing refers to its units any more.
func (l *Layer) recycle(t *ticket) {
	for i := range t.taken[:t.n] {
		t.taken[i].key = "" // let the keys go
		t.quotas[i] = shed.Quota{}
	}
	t.n = 0
	l.tickets.Put(t)
}

// Release refunds the lease's units when the request never ran (Unused).
func (l *Layer) Release(lease *shed.Lease, o shed.Outcome) {
	t, ok := lease.Ref.(*ticket)
	if !ok || !t.gen.CompareAndSwap(lease.ID, lease.ID+1) {
		return // not ours, or released already through a copy
	}
	if o == shed.Unused {
		l.refund(t, true)
	}
	l.recycle(t)
}
