package concurrency

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/shed"
)

// redisLease is what a lease held in Redis points at (Lease.Ref).
type redisLease struct {
	owner    *RedisLimiter
	seq      uint64 // Lease.ID
	member   string
	keys     []string
	cost     int64
	expires  atomic.Int64 // unix nanos, local clock: after it the lease is gone from Redis anyway
	released atomic.Bool
	// recheck is set for an acquire that ended without an answer: its
	// script may still be on its way to Redis, behind the first clean-up, so
	// it is removed twice (promptly, and again at the renewer's next tick).
	// Guarded by RedisLimiter.mu while pending.
	recheck bool
}

// which says which limit the set at index i of keys counts (per key first).
func (r *RedisLimiter) which(keys []string, i int) which {
	if keys[i] == r.allKey {
		return allLimit
	}
	return keyLimit
}

// Acquire admits req if the fleet's leases leave room for its units. When
// Redis errs or is slower than RedisConfig.Timeout, it decides from this
// instance's share instead and marks the lease (or rejection) Fallback. If
// ctx ends while the script runs, Acquire returns ctx's error, and a lease
// the script may have added is removed by the renewer.
func (r *RedisLimiter) Acquire(ctx context.Context, req shed.Request) (shed.Lease, error) {
	if err := ctx.Err(); err != nil {
		return shed.Lease{}, fmt.Errorf("concurrency: request gone before acquiring: %w", err)
	}
	if !r.gate.Try(r.clock.Now().UnixNano()) {
		return r.acquireLocal(ctx, req)
	}
	cost := req.Units()
	if over := r.neverFits(cost); over != none {
		// It can never fit, and its members would only burden Redis. Dry
		// run admits it with nothing held.
		if r.enf.DryRun {
			ls := shed.NewLease(r)
			ls.Cost, ls.DryRun = cost, true
			return ls, nil
		}
		return shed.Lease{}, r.rejection(req, over, 0)
	}
	keys := make([]string, 0, 2)
	bounds := make([]int64, 0, 2)
	if k := r.KeyFor(req); k != "" {
		keys, bounds = append(keys, k), append(bounds, r.perKey)
	}
	if r.allKey != "" {
		keys, bounds = append(keys, r.allKey), append(bounds, r.limit)
	}
	seq := r.seq.Add(1)
	e := &redisLease{owner: r, seq: seq, member: r.instance + ":" + strconv.FormatUint(seq, 36), keys: keys, cost: cost}

	res, err := r.run(ctx, e, bounds)
	if err != nil {
		return r.failed(ctx, req, e, err)
	}
	if res[0] == 1 {
		if r.enf.Mode == shed.Soft {
			r.epAll.End()
			if ep := r.keyEpisode(req); ep != nil {
				ep.End()
			}
		}
		return r.lease(e, res), nil
	}
	// Over a limit: let the mode decide, and ask Redis again with the bound
	// it allows.
	over := r.which(keys, int(res[1])-1)
	n := res[2]
	limit, ep := r.limit, &r.epAll
	if over == keyLimit {
		limit, ep = r.perKey, r.keyEpisode(req)
	}
	now := r.clock.Now()
	v := r.enf.Decide(now, false, n <= r.enf.Ceiling(limit)-cost, ep)
	if v == shed.AdmitOver || v == shed.AdmitDryRun {
		for i := range bounds {
			if v == shed.AdmitOver {
				bounds[i] = r.enf.Ceiling(bounds[i])
			} else {
				bounds[i] = 1 << 50
			}
		}
		res, err = r.run(ctx, e, bounds)
		if err != nil {
			return r.failed(ctx, req, e, err)
		}
		if res[0] == 1 {
			ls := r.lease(e, res)
			ls.Over, ls.DryRun = v == shed.AdmitOver, v == shed.AdmitDryRun
			return ls, nil
		}
		over, n = r.which(keys, int(res[1])-1), res[2]
		if v = r.enf.Decide(now, false, false, nil); v == shed.AdmitDryRun {
			// Over a ceiling in dry run: still never reject.
			for i := range bounds {
				bounds[i] = 1 << 50
			}
			if res, err = r.run(ctx, e, bounds); err != nil {
				return r.failed(ctx, req, e, err)
			}
			ls := r.lease(e, res)
			ls.DryRun = true
			return ls, nil
		}
	}
	return shed.Lease{}, r.rejection(req, over, n)
}

// neverFits says which limit a request of this cost exceeds even at its
// ceiling, if any.
func (r *RedisLimiter) neverFits(cost int64) which {
	switch {
	case r.perKey > 0 && cost > r.enf.Ceiling(r.perKey):
		return keyLimit
	case r.limit > 0 && cost > r.enf.Ceiling(r.limit):
		return allLimit
	}
	return none
}

func (r *RedisLimiter) rejection(req shed.Request, over which, n int64) *shed.Rejection {
	if over == keyLimit {
		q := shed.Quota{Policy: r.keyPolicy, Limit: r.perKey, Remaining: max(0, r.perKey-n)}
		if r.keyBy == ByKey {
			return shed.Throttled(r.name, req, "too many requests in flight for this client", r.retryAfter, q)
		}
		return shed.Shed(r.name, req, "too many requests in flight for this route", r.retryAfter, q)
	}
	q := shed.Quota{Policy: PolicyOverall, Limit: r.limit, Remaining: max(0, r.limit-n)}
	return shed.Shed(r.name, req, "too many requests in flight", r.retryAfter, q)
}

// run runs the acquire script within the timeout. Redis answering at all
// ends a fallback.
func (r *RedisLimiter) run(ctx context.Context, e *redisLease, bounds []int64) ([]int64, error) {
	args := make([]any, 0, 3+len(bounds))
	args = append(args, e.member, e.cost, r.ttl.Milliseconds())
	for _, b := range bounds {
		args = append(args, b)
	}
	e.expires.Store(r.clock.Now().Add(r.ttl).UnixNano())
	res, err := acquireScript.Run(r.deadlines.Bound(ctx), r.client, e.keys, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(res) < 2 || (res[0] == 0 && (len(res) < 3 || res[1] < 1 || res[1] > int64(len(e.keys)))) {
		return nil, fmt.Errorf("concurrency: unexpected reply from the acquire script: %v", res)
	}
	r.gate.Answered()
	return res, nil
}

// failed handles an acquire whose script did not answer: the caller went
// away (its error is returned), or Redis erred or was slow (the local share
// decides). Either way the script may have added the lease, so it is queued
// for removal.
func (r *RedisLimiter) failed(ctx context.Context, req shed.Request, e *redisLease, err error) (shed.Lease, error) {
	r.forget(e)
	if ctx.Err() != nil {
		return shed.Lease{}, fmt.Errorf("concurrency: request gone while acquiring: %w", ctx.Err())
	}
	if redisx.IsOutage(err) {
		r.gate.Failed(r.clock.Now().UnixNano())
	}
	// Redis is down, slow, or refused this one request (an error reply):
	// either way the local share decides it.
	return r.acquireLocal(ctx, req)
}

func (r *RedisLimiter) lease(e *redisLease, counts []int64) shed.Lease {
	r.mu.Lock()
	r.held[e] = struct{}{}
	r.mu.Unlock()
	ls := shed.NewLease(r)
	ls.Ref, ls.ID, ls.Cost = e, e.seq, e.cost
	// Remaining from the tightest set (counts[i+1] is set i after adding).
	ls.Quota = shed.Quota{Policy: PolicyOverall, Limit: r.limit, Remaining: -1}
	for i, k := range e.keys {
		if i+1 >= len(counts) {
			break
		}
		q := shed.Quota{Policy: PolicyOverall, Limit: r.limit, Remaining: max(0, r.limit-counts[i+1])}
		if k != r.allKey {
			q = shed.Quota{Policy: r.keyPolicy, Limit: r.perKey, Remaining: max(0, r.perKey-counts[i+1])}
		}
		if ls.Quota.Remaining < 0 || q.Remaining < ls.Quota.Remaining {
			ls.Quota = q
		}
	}
	return ls
}
