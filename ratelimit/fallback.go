package ratelimit

import (
	"context"
	"errors"
	"time"

	"github.com/loadshed/loadshed/internal/redisx"
)

// errRedisDown stands for the failure that put the store in fallback, for
// the decisions taken locally until the next probe.
var errRedisDown = errors.New("ratelimit: redis failed recently; deciding locally until the next probe")

// shareFallback is the in-memory limiter of this instance's share of the
// limit among n instances, rebuilt when n changes (the live instances
// counted in Redis moved), which is rare and never during an outage.
type shareFallback struct {
	n   int
	lim Limiter
}

// fallbackLimiter returns the limiter deciding while Redis does not
// answer: the caller's RedisConfig.Fallback, or the share of the limit
// among the instances now counted.
func (r *Redis) fallbackLimiter() Limiter {
	if r.userFall != nil {
		return r.userFall
	}
	counted := 0
	if r.presence != nil {
		counted = r.presence.Count()
	}
	n := redisx.Instances(r.expected, counted)
	cur := r.shared.Load()
	if cur != nil && cur.n == n {
		return cur.lim
	}
	next := &shareFallback{n: n, lim: r.newShareLimiter(n)}
	if !r.shared.CompareAndSwap(cur, next) {
		closeLimiter(next.lim)
		return r.shared.Load().lim
	}
	if cur != nil {
		// Decisions in progress on it still get answers: Close only stops
		// its sweeper.
		closeLimiter(cur.lim)
	}
	return next.lim
}

// newShareLimiter builds the in-memory limiter of limit's share among n
// (redisx.Share: rounded down, so the fleet never admits more than the
// limit); a share of nothing refuses every request.
func (r *Redis) newShareLimiter(n int) Limiter {
	s := r.limit
	s.Quantity = redisx.Share(r.limit.Quantity, n)
	if r.limit.Burst > 0 {
		s.Burst = redisx.Share(r.limit.Burst, n)
	}
	if s.Quantity == 0 || (r.limit.Burst > 0 && s.Burst == 0) {
		return refuseAll{alg: r.alg, limit: s, retry: r.gate.Interval()}
	}
	m, err := NewMemory(r.alg, s, MemoryConfig{Clock: r.clock})
	if err != nil {
		// A share of a valid limit is valid, but never fail open.
		return refuseAll{alg: r.alg, limit: s, retry: r.gate.Interval()}
	}
	return m
}

func closeLimiter(l Limiter) {
	if c, ok := l.(interface{ Close() error }); ok {
		_ = c.Close()
	}
}

// refuseAll is the fallback when this instance's share rounds to nothing:
// it refuses everything until Redis answers.
type refuseAll struct {
	alg   Algorithm
	limit Limit
	retry time.Duration
}

func (f refuseAll) Allow(context.Context, string, int64) (Result, error) {
	return Result{Limit: f.limit.Quantity, RetryAfter: f.retry}, nil
}
func (refuseAll) Refund(context.Context, string, int64) error { return nil }
func (f refuseAll) Limit() Limit                              { return f.limit }
func (f refuseAll) Algorithm() Algorithm                      { return f.alg }

// decideLocally answers from the fallback limiter, which enforces this
// instance's share of the limit. A cost above the share's burst, which the
// whole limit would admit, is refused as over the limit rather than as an
// error: the request is valid, only the estimate is smaller.
func (r *Redis) decideLocally(ctx context.Context, key string, cost int64, cause error) (Result, bool, error) {
	fb := r.fallbackLimiter()
	res, err := fb.Allow(ctx, key, cost)
	if err != nil {
		if !errors.Is(err, ErrCostAboveBurst) {
			return res, true, err
		}
		res = Result{Limit: fb.Limit().Quantity, RetryAfter: r.gate.Interval()}
	}
	if r.onFall != nil {
		r.onFall(cause)
	}
	return res, true, nil
}
