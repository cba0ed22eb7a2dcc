package concurrency

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// redisLease is what a lease held in Redis points at (Lease.Ref).
type redisLease struct {
	owner    *RedisLayer
	seq      uint64 // Lease.ID
	member   string
	keys     []string
	cost     int64
	expires  atomic.Int64 // unix nanos, local clock: after it the lease is gone from Redis anyway
	released atomic.Bool
	// recheck is set for an acquire that ended without an answer: its
	// script may still be on its way to Redis, behind the first clean-up, so
	// it is removed twice (promptly, and again at the renewer's next tick).
	// Guarded by RedisLayer.mu while pending.
	recheck bool
}

// which says which limit the set at index i of keys counts (per key first).
func (r *RedisLayer) which(keys []string, i int) which {
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
func (r *RedisLayer) Acquire(ctx context.Context, req shed.Request) (shed.Lease, error) {
	if err := ctx.Err(); err != nil {
		return shed.Lease{}, fmt.Errorf("concurrency: request gone before acquiring: %w", err)
	}
	keys := make([]string, 0, 2)
	bounds := make([]int64, 0, 2)
	if k := r.keyFor(req); k != "" {
		keys, bounds = append(keys, k), append(bounds, r.perKey)
	}
	if r.allKey != "" {
		keys, bounds = append(keys, r.allKey), append(bounds, r.limit)
	}
	// The sets share one slot: on a Cluster, the gate of its node decides.
	if len(keys) == 0 || !r.gate.TryKey(r.clock.Now().UnixNano(), keys[0]) {
		return r.acquireLocal(ctx, req)
	}
	cost := req.Units()
	if over := r.neverFits(cost); over != none {
		// It can never fit, and its members would only burden Redis. Dry
		// run admits it with nothing held.
		if r.enf.DryRun {
			return r.dryRunLease(cost), nil
		}
		return shed.Lease{}, r.rejection(req, over, 0)
	}
	r.deductLocal(req, keys, bounds)
	seq := r.seq.Add(1)
	e := &redisLease{owner: r, seq: seq, member: r.instance + ":" + strconv.FormatUint(seq, 36), keys: keys, cost: cost}

	// One budget for the whole acquire, the removals sent first included.
	budget := r.deadlines.Bound(ctx)
	res, err := r.run(budget, e, bounds)
	if err == nil && res[0] == 0 && r.flushFirst(budget) {
		// Refused while this instance owed Redis removals (leases released
		// during an outage, which the promoted replica still holds): they
		// are sent first, within this request's budget, and the request
		// asks again, rather than being refused by slots held for requests
		// that ended.
		res, err = r.run(budget, e, bounds)
	}
	if err != nil {
		return r.failed(ctx, req, e, err)
	}
	if res[0] == 1 {
		// Admissions within the limit leave the soft episodes alone (see
		// layerkit.Episode), so that soft mode stays bounded in time under
		// sustained overload.
		return r.lease(e, res), nil
	}
	// Over a limit: let the mode decide, and ask Redis again with the bound
	// it allows.
	over := r.which(keys, int(res[1])-1)
	n := res[2]
	limit, ep := r.limitOf(req, over)
	now := r.clock.Now()
	v := layerkit.Decide(&r.enf, now, false, n <= r.enf.Ceiling(limit)-cost, ep)
	if v == layerkit.AdmitDryRun {
		// A dry-run admission over the limit takes no slot, as a rejection
		// would not: the lease holds nothing in Redis.
		return r.dryRunLease(cost), nil
	}
	if v == layerkit.AdmitOver {
		for i := range bounds {
			bounds[i] = r.enf.Ceiling(bounds[i])
		}
		res, err = r.run(budget, e, bounds)
		if err != nil {
			return r.failed(ctx, req, e, err)
		}
		if res[0] == 1 {
			// The script found the first limit the request is over; if it
			// is over the other one too, that limit's episode must allow
			// the overage as well (an episode that ended holds its limit
			// hard whichever limit was found first).
			if other, count, otherEp := r.alsoOver(req, keys, res, over); other != none &&
				layerkit.DecideOver(&r.enf, now, true, ep, otherEp) != layerkit.AdmitOver {
				r.forget(e) // the script added the lease: queue its removal
				return shed.Lease{}, r.rejection(req, other, count)
			}
			ls := r.lease(e, res)
			ls.Over = true
			return ls, nil
		}
		over, n = r.which(keys, int(res[1])-1), res[2]
	}
	return shed.Lease{}, r.rejection(req, over, n)
}

// neverFits says which limit a request of this cost exceeds even at its
// ceiling, if any.
func (r *RedisLayer) neverFits(cost int64) which {
	switch {
	case r.perKey > 0 && cost > r.enf.Ceiling(r.perKey):
		return keyLimit
	case r.limit > 0 && cost > r.enf.Ceiling(r.limit):
		return allLimit
	}
	return none
}

func (r *RedisLayer) rejection(req shed.Request, over which, n int64) *shed.Rejection {
	q := shed.Quota{Policy: PolicyOverall, Limit: r.limit, Remaining: max(0, r.limit-n), Service: true}
	if over == keyLimit {
		q = shed.Quota{Policy: r.keyPolicy, Limit: r.perKey, Remaining: max(0, r.perKey-n), Service: r.keyBy == KeyByRoute}
	}
	return refusal(r.name, r.keyBy, over == keyLimit, r.retryAfter, q)
}

// run runs the acquire script within the timeout. Redis answering at all
// ends a fallback.
func (r *RedisLayer) run(ctx context.Context, e *redisLease, bounds []int64) ([]int64, error) {
	args := make([]any, 0, 3+len(bounds))
	args = append(args, e.member, e.cost, r.ttl.Milliseconds())
	for _, b := range bounds {
		args = append(args, b)
	}
	now := r.clock.Now()
	e.expires.Store(now.Add(r.ttl).UnixNano())
	// A reply saying the script did not run (a slot migrating, a failover
	// in progress) is retried here, within the timeout, with a backoff
	// shorter than go-redis's (RunOnce: go-redis's own retries of TRYAGAIN
	// start at 8ms and end a 50ms budget with a bare deadline error, which
	// would look like an outage). A retry that the budget's end cuts short
	// reports the reply before it (redisx.Retry): the node answered, its
	// slot is moving, which is no outage.
	bound := r.deadlines.Bound(ctx)
	var res []int64
	err := redisx.Retry(bound, func() error {
		var err error
		res, err = acquireScript.RunOnce(bound, r.client, e.keys, args...).Int64Slice()
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(res) < 2 || (res[0] == 0 && (len(res) < 3 || res[1] < 1 || res[1] > int64(len(e.keys)))) {
		return nil, fmt.Errorf("concurrency: unexpected reply from the acquire script: %v", res)
	}
	r.gate.AnsweredKey(now.UnixNano(), e.keys[0])
	return res, nil
}

// failed handles an acquire whose script did not answer: the caller went
// away (its error is returned), or Redis erred or was slow (the local share
// decides). Either way the script may have added the lease, so it is queued
// for removal.
func (r *RedisLayer) failed(ctx context.Context, req shed.Request, e *redisLease, err error) (shed.Lease, error) {
	r.forget(e)
	if redisx.CallerGone(ctx) {
		cause := ctx.Err()
		if cause == nil {
			cause = context.DeadlineExceeded
		}
		return shed.Lease{}, fmt.Errorf("concurrency: request gone while acquiring: %w", cause)
	}
	if redisx.IsOutage(err) {
		r.gate.FailedKey(r.clock.Now().UnixNano(), e.keys[0])
	}
	// Redis is down, slow, or refused this one request (an error reply):
	// either way the local share decides it.
	return r.acquireLocal(ctx, req)
}

func (r *RedisLayer) lease(e *redisLease, counts []int64) shed.Lease {
	r.mu.Lock()
	r.held[e] = struct{}{}
	r.mu.Unlock()
	ls := shed.NewLease(r)
	ls.Ref, ls.ID, ls.Cost = e, e.seq, e.cost
	// Remaining from the tightest set (counts[i+1] is set i after adding).
	ls.Quota = shed.Quota{Policy: PolicyOverall, Limit: r.limit, Remaining: -1, Service: true}
	for i, k := range e.keys {
		if i+1 >= len(counts) {
			break
		}
		q := shed.Quota{Policy: PolicyOverall, Limit: r.limit, Remaining: max(0, r.limit-counts[i+1]), Service: true}
		if k != r.allKey {
			q = shed.Quota{Policy: r.keyPolicy, Limit: r.perKey, Remaining: max(0, r.perKey-counts[i+1]), Service: r.keyBy == KeyByRoute}
		}
		if ls.Quota.Remaining < 0 || q.Remaining < ls.Quota.Remaining {
			ls.Quota = q
		}
	}
	ls.Quota.DryRun = r.enf.DryRun
	return ls
}

// dryRunLease admits a request in dry run with nothing held.
func (r *RedisLayer) dryRunLease(cost int64) shed.Lease {
	ls := shed.NewLease(r)
	ls.Cost, ls.DryRun = cost, true
	return ls
}

// alsoOver reports the limit other than first that an admission over first
// went over too (counts as the acquire script returns them after adding),
// with its count and its soft episode; none when there is no such limit.
func (r *RedisLayer) alsoOver(req shed.Request, keys []string, counts []int64, first which) (which, int64, *layerkit.Episode) {
	for i := range keys {
		if i+1 >= len(counts) {
			break
		}
		w := r.which(keys, i)
		if w == first {
			continue
		}
		if bound, ep := r.limitOf(req, w); counts[i+1] > bound {
			return w, counts[i+1], ep
		}
	}
	return none, 0, nil
}

// limitOf returns the bound of limit w and its soft episode for req.
func (r *RedisLayer) limitOf(req shed.Request, w which) (int64, *layerkit.Episode) {
	if w == keyLimit {
		return r.perKey, r.keyEpisode(req)
	}
	return r.limit, &r.epAll
}

// deductLocal lowers the bounds Redis is asked to enforce by the units the
// local share still holds for requests it admitted during an outage:
// Redis does not know of them, and without this an instance back on Redis
// would admit a whole limit beside the fallback's leases still running. An
// instance alone thus never holds more than its limit across an outage.
func (r *RedisLayer) deductLocal(req shed.Request, keys []string, bounds []int64) {
	s := r.local.Load()
	if s == nil || s.lim == nil {
		return
	}
	all := s.lim.InFlight()
	if all == 0 {
		return
	}
	for i, k := range keys {
		if k == r.allKey {
			bounds[i] = max(bounds[i]-all, 0)
			continue
		}
		key := req.Key
		if r.keyBy == KeyByRoute {
			key = req.Route
		}
		bounds[i] = max(bounds[i]-s.lim.InFlightKey(key), 0)
	}
}

// flushFirst sends the pending removals now, within the request's
// budget (ctx), and reports whether there were any, or a flush was under
// way (its removals may be what Redis still counts).
func (r *RedisLayer) flushFirst(ctx context.Context) bool {
	r.mu.Lock()
	n := len(r.pending)
	r.mu.Unlock()
	if n == 0 && len(r.flushing) == 0 {
		return false
	}
	return r.flush(ctx) == nil
}
