package main

import (
	"context"

	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
)

// limitLayer is a minimal shed.Layer over a ratelimit.Limiter, for the
// demo: one limit per key, optionally only for one priority. (The ratelimit
// package's own Layer, with rules, modes and queueing, replaces it once it
// lands.)
type limitLayer struct {
	name    string
	limiter ratelimit.Limiter
	only    *shed.Priority // nil: every request
}

// taken is what a lease holds, so that an unused lease can be refunded.
type taken struct {
	key  string
	cost int64
}

func (l *limitLayer) Name() string { return l.name }

func (l *limitLayer) Acquire(ctx context.Context, req shed.Request) (shed.Lease, error) {
	if l.only != nil && req.Priority != *l.only {
		return shed.NewLease(l), nil
	}
	res, err := l.limiter.Allow(ctx, req.Key, req.Units())
	if err != nil {
		// A limiter that cannot decide does not take the service down.
		lease := shed.NewLease(l)
		lease.Fallback = true
		return lease, nil
	}
	q := shed.Quota{Policy: l.name, Limit: res.Limit, Window: l.limiter.Limit().Period,
		Remaining: res.Remaining, Reset: res.ResetAfter}
	if !res.Allowed {
		return shed.Lease{}, shed.Throttled(l.name, req, "rate limit exceeded", res.RetryAfter, q)
	}
	lease := shed.NewLease(l)
	lease.Ref = &taken{key: req.Key, cost: req.Units()}
	lease.Cost = req.Units()
	lease.Quota = q
	return lease, nil
}

// Release refunds the units of a request that never ran (a later layer
// rejected it); any other outcome keeps them spent.
func (l *limitLayer) Release(lease *shed.Lease, o shed.Outcome) {
	if t, ok := lease.Ref.(*taken); ok && o == shed.Unused {
		_ = l.limiter.Refund(context.Background(), t.key, t.cost)
	}
}
