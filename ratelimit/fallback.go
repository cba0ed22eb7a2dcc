package ratelimit

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// errRedisDown stands for the failure that put the store in fallback, for
// the decisions taken locally until the next probe.
var errRedisDown = errors.New("ratelimit: redis failed recently; deciding locally until the next probe")

// redisUsable reports whether this request may go to Redis. After a
// failure, Redis is left alone until downUntil, and then exactly one request
// (probe) tries it while the others keep deciding locally.
func (r *Redis) redisUsable(now int64) (ok, probe bool) {
	du := r.downUntil.Load()
	if du == 0 {
		return true, false
	}
	if now < du || !r.probing.CompareAndSwap(false, true) {
		return false, false
	}
	return true, true
}

// settle records how a round trip went: an answer (even an error reply)
// ends the fallback, an outage starts (or extends) it for one probe
// interval. A round trip cut short by the caller's own context says nothing
// about Redis.
func (r *Redis) settle(ctx context.Context, probe bool, now int64, err error) {
	if probe {
		defer r.probing.Store(false)
	}
	switch {
	case ctx.Err() != nil:
	case err != nil && isOutage(err):
		r.downUntil.Store(now + r.probe)
	default: // it answered, if only with an error for this key
		if r.downUntil.Load() != 0 {
			r.downUntil.Store(0)
		}
	}
}

// isOutage tells a Redis that is gone, slow or unable to serve (network
// errors, timeouts, a loading, busy or read-only server, a cluster that is
// down) from one that answered with an error for this request alone (say
// WRONGTYPE), which is no reason to stop asking it.
func isOutage(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true
	}
	msg := rerr.Error()
	for _, p := range [...]string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "TRYAGAIN", "NOREPLICAS", "OOM"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

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
		res = Result{Limit: r.fallback.Limit().Quantity, RetryAfter: time.Duration(r.probe)}
	}
	if r.onFall != nil {
		r.onFall(cause)
	}
	return res, true, nil
}
