package ratelimit

import (
	"context"
	"errors"
)

// errRedisDown stands for the failure that put the store in fallback, for
// the decisions taken locally until the next probe.
var errRedisDown = errors.New("ratelimit: redis failed recently; deciding locally until the next probe")

// decideLocally answers from the fallback limiter, which enforces this
// instance's share of the limit. A cost above the share's burst, which the
// whole limit would admit, is refused as over the limit rather than as an
// error: the request is valid, only the estimate is smaller.
func (r *Redis) decideLocally(ctx context.Context, key string, cost int64, cause error) (Result, bool, error) {
	res, err := r.fallback.Allow(ctx, key, cost)
	if err != nil {
		if !errors.Is(err, ErrCostAboveBurst) {
			return res, true, err
		}
		res = Result{Limit: r.fallback.Limit().Quantity, RetryAfter: r.gate.Interval()}
	}
	if r.onFall != nil {
		r.onFall(cause)
	}
	return res, true, nil
}
