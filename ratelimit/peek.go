package ratelimit

import "context"

// peeker is a Store that reads a key's limit without counting: the Redis
// store. A Store of another package with the same method is asked too.
type peeker interface {
	Peek(ctx context.Context, key string) (r Result, fallback bool, err error)
}

// Peek reports what one more unit for key would meet now, counting
// nothing: whether it would be allowed, the units Remaining before it, when
// the limit is whole again (ResetAfter) and, if it would not be allowed,
// RetryAfter. fallback says that a Redis store answered from its local
// fallback. It is the check of Envoy's rate limit service (hits_addend 0).
//
// The Redis store answers in one round trip that writes nothing (Redis.Peek).
// Any other Store is asked to Allow one unit, which is then refunded: in
// memory the unit is held for the time of two calls, and a concurrent
// request at the limit's last unit may be refused meanwhile.
func Peek(ctx context.Context, st Store, key string) (r Result, fallback bool, err error) {
	if p, ok := st.(peeker); ok {
		return p.Peek(ctx, key)
	}
	if fd, ok := st.(FallbackDecider); ok {
		r, fallback, err = fd.Decide(ctx, key, 1)
	} else {
		r, err = st.Allow(ctx, key, 1)
	}
	if err != nil || !r.Allowed {
		return r, fallback, err
	}
	// The refund's error is not the peek's: the answer stands, and a unit
	// not given back is one the limit counts until it resets.
	_ = st.Refund(ctx, key, 1)
	r.Remaining++
	return r, fallback, nil
}

// Peek is Allow of one unit that takes nothing (see the package's Peek):
// one round trip, whose script answers as an admission would and writes
// nothing, so that no concurrent request sees the unit taken and no failed
// refund keeps it. A Redis that does not answer within the timeout is
// replaced by the local fallback, peeked by taking a unit and refunding it,
// and fallback is true. With Batch, units this instance holds from Redis
// and has not used count as taken.
func (r *Redis) Peek(ctx context.Context, key string) (res Result, fallback bool, err error) {
	if err := checkRequest(r.limit, r.alg, key, 1); err != nil {
		return Result{Limit: r.limit.Quantity}, false, err
	}
	now := r.clock.Now()
	if r.over != nil {
		if res, ok := r.over.check(key, now, r.limit.Quantity); ok {
			return res, false, nil
		}
	}
	rep, err := r.roundTrip(ctx, opPeek, key, 1, 1, now)
	if err != nil {
		fb := r.seededFallback(ctx, key)
		if r.onFall != nil {
			r.onFall(err)
		}
		res, _, err := Peek(ctx, fb, key)
		return res, true, err
	}
	res = rep.result(r.limit.Quantity)
	if res.Allowed {
		res.Remaining++
	}
	return res, false, nil
}
