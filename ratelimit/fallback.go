package ratelimit

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
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
	lim Store
}

// fallbackStore returns the limiter deciding while Redis does not
// answer: the caller's RedisConfig.Fallback, or the share of the limit
// among the instances now counted.
func (r *Redis) fallbackStore() Store {
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
	next := &shareFallback{n: n, lim: r.newShareStore(n)}
	if !r.shared.CompareAndSwap(cur, next) {
		closeStore(next.lim)
		return r.shared.Load().lim
	}
	if cur != nil {
		// Decisions in progress on it still get answers: Close only stops
		// its sweeper.
		closeStore(cur.lim)
	}
	return next.lim
}

// newShareStore builds the in-memory limiter of limit's share among n
// (redisx.Share: rounded down, so the fleet never admits more than the
// limit); a share of nothing refuses every request.
func (r *Redis) newShareStore(n int) Store {
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

func closeStore(l Store) {
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
	fb := r.seededFallback(ctx, key)
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

// seededFallback returns the store that decides while Redis does not
// answer, with key seeded in the share this instance builds itself.
func (r *Redis) seededFallback(ctx context.Context, key string) Store {
	fb := r.fallbackStore()
	if r.userFall == nil {
		r.seed(ctx, fb, key)
	}
	return fb
}

// seed starts key's fallback from what Redis last told this instance of
// it, once per outage: the first local decision of an outage takes from
// the share what Redis no longer had (share − remaining, when the learnt
// state has not reset yet), so that admissions through Redis and then
// through the fallback stay within the limit plus at most
// min(remaining, share) per instance and outage (docs/redis.md gives the
// bound per algorithm). A key this instance never asked Redis about, or
// whose state has reset since, starts from the whole share.
func (r *Redis) seed(ctx context.Context, fb Store, key string) {
	rem, ok := r.learnt.take(key, r.gate.Outages(), r.clock.Now().UnixNano())
	if !ok {
		return
	}
	share := fb.Limit().BurstOrQuantity()
	if used := share - min(max(rem, 0), share); used > 0 {
		_, _ = fb.Allow(ctx, key, used)
	}
}

// learntSlots is how many keys learntStates remembers: a key whose slot
// another key took since starts its fallback from the whole share.
const learntSlots = 1024

// learntStates remembers, in a fixed table indexed by a hash of the key (no
// allocation, a short lock per stripe), what Redis last answered for each
// key: the units remaining and when the state resets.
type learntStates struct {
	seed    maphash.Seed
	once    sync.Once
	stripes [16]sync.Mutex
	slots   [learntSlots]learntState
}

type learntState struct {
	hash      uint64
	remaining int64
	resetAt   int64 // Unix ns, local clock
	seeded    int64 // the outage (Gate.Outages) that last seeded from it, + 1
}

func (l *learntStates) hash(key string) uint64 {
	l.once.Do(func() { l.seed = maphash.MakeSeed() })
	return maphash.String(l.seed, key)
}

// note records Redis's answer for key.
func (l *learntStates) note(key string, remaining, resetAt int64) {
	h := l.hash(key)
	i := h % learntSlots
	mu := &l.stripes[i%uint64(len(l.stripes))]
	mu.Lock()
	l.slots[i] = learntState{hash: h, remaining: remaining, resetAt: resetAt}
	mu.Unlock()
}

// take returns what was learnt of key, unless it has reset by now or has
// seeded a fallback in this outage already.
func (l *learntStates) take(key string, outage, now int64) (int64, bool) {
	h := l.hash(key)
	i := h % learntSlots
	mu := &l.stripes[i%uint64(len(l.stripes))]
	mu.Lock()
	defer mu.Unlock()
	s := &l.slots[i]
	if s.hash != h || s.resetAt <= now || s.seeded == outage+1 {
		return 0, false
	}
	s.seeded = outage + 1
	return s.remaining, true
}
