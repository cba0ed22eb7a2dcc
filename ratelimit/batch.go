package ratelimit

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// DefaultBatchKeys bounds the leases a batched Redis store holds.
const DefaultBatchKeys = 10000

// BatchConfig turns on the Redis store's batched mode: instead of one round
// trip per decision, an instance leases a chunk of units from Redis (taken
// from the shared limit by the same atomic script) and serves decisions from
// it locally until it is used up or MaxAge has passed. With the default
// fraction of 0.1 a busy key needs about one round trip per ten units.
//
// Overshoot: Redis never grants more than the limit, but a unit leased in
// one window may be spent in the next. Each instance holds at most one lease
// per key, of at most Chunk-1 unspent units (the request that fetched it
// takes its own cost at once), so with N instances
//
//	admitted in any window ≤ limit + N × (Chunk − 1)
//
// where Chunk = ceil(Fraction × MaxCost), MaxCost being Burst for the
// buckets and Quantity for the windows. Units refunded into a lease were
// admitted before and do not raise the bound. The opposite error is a lease
// that ages out unspent: its units are lost to everyone until Redis restores
// them, so a key may be refused up to N × (Chunk − 1) units early.
type BatchConfig struct {
	// Fraction of the limit leased per round trip, in (0, 1]; zero keeps
	// the exact mode. 0.1 is a good start.
	Fraction float64
	// MaxAge is how long a lease may be served after it was fetched
	// (default Period). Shorter hands idle units back to the other
	// instances sooner, by wasting them: an aged-out lease's units are
	// dropped, not returned. The overshoot bound does not depend on it.
	MaxAge time.Duration
	// MaxKeys bounds the leases held (default DefaultBatchKeys); a new key
	// arriving when it is full drops a lease, whose units are then lost.
	MaxKeys int
}

func (c BatchConfig) validate() error {
	if c.Fraction < 0 || c.Fraction > 1 || math.IsNaN(c.Fraction) {
		return fmt.Errorf("ratelimit: RedisConfig.Batch.Fraction must be within [0, 1], got %v", c.Fraction)
	}
	if c.MaxAge < 0 {
		return fmt.Errorf("ratelimit: RedisConfig.Batch.MaxAge must not be negative, got %v", c.MaxAge)
	}
	if c.MaxKeys < 0 {
		return fmt.Errorf("ratelimit: RedisConfig.Batch.MaxKeys must not be negative, got %d", c.MaxKeys)
	}
	return nil
}

// batchChunk is the number of units a batched store leases per round trip
// for limit under alg with fraction f: ceil(f × MaxCost), at least 1.
func batchChunk(alg Algorithm, limit Limit, f float64) int64 {
	m := limit.MaxCost(alg)
	c := int64(math.Ceil(f * float64(m)))
	return min(max(c, 1), m)
}

type batcher struct {
	chunk   int64
	maxAge  int64
	maxKeys int

	mu     sync.RWMutex
	leases map[string]*lease
}

// lease is the units one instance holds for one key. Its lock is held
// across the round trip that refills it, so that concurrent requests for a
// key wait for one fetch (bounded by the store's timeout) instead of each
// fetching their own.
type lease struct {
	mu      sync.Mutex
	units   int64
	expires int64 // local clock, Unix ns
	remote  int64 // units Redis had left after the fetch
	reset   int64 // local clock, Unix ns: the limit whole again, as of the fetch
}

func newBatcher(c BatchConfig, alg Algorithm, limit Limit) *batcher {
	b := &batcher{chunk: batchChunk(alg, limit, c.Fraction), maxAge: int64(c.MaxAge), maxKeys: c.MaxKeys,
		leases: make(map[string]*lease)}
	if b.maxAge == 0 {
		b.maxAge = int64(limit.Period)
	}
	if b.maxKeys == 0 {
		b.maxKeys = DefaultBatchKeys
	}
	return b
}

func (b *batcher) get(key string) *lease {
	b.mu.RLock()
	l := b.leases[key]
	b.mu.RUnlock()
	if l != nil {
		return l
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if l = b.leases[key]; l != nil {
		return l
	}
	if len(b.leases) >= b.maxKeys {
		for k := range b.leases { // random order: drop any one
			delete(b.leases, k)
			break
		}
	}
	l = &lease{}
	b.leases[key] = l
	return l
}

func (b *batcher) decide(ctx context.Context, r *Redis, key string, cost int64, now time.Time) (Result, bool, error) {
	t := now.UnixNano()
	l := b.get(key)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.units >= cost && t < l.expires {
		l.units -= cost
		return Result{Allowed: true, Limit: r.limit.Quantity, Remaining: l.units + l.remote,
			ResetAfter: time.Duration(max(l.reset-t, 0))}, false, nil
	}
	// Redis having nothing left says nothing of this lease: ask the
	// over-limit cache only when the lease cannot serve.
	var epoch uint64
	if r.over != nil {
		if res, ok := r.over.check(key, now, r.limit.Quantity); ok {
			return res, false, nil
		}
		epoch = r.over.epoch.Load()
	}
	// Units left in an aged-out lease are dropped (they were counted by
	// Redis when leased: a lost unit errs towards refusing). A fresh lease
	// too small for this cost pays part of it, so the fetch asks only for
	// the rest, and the lease stays within Chunk − 1 units.
	if t >= l.expires {
		l.units = 0
	}
	want := cost - l.units
	rep, err := r.roundTrip(ctx, opAllow, key, want, max(b.chunk, want), now)
	if err != nil {
		return r.decideLocally(ctx, key, cost, err)
	}
	l.remote = rep.remaining
	l.reset = t + rep.reset
	if rep.allowed {
		l.units += rep.taken - cost
		l.expires = t + b.maxAge
	}
	r.noteOver(key, now, rep, epoch)
	res := rep.result(r.limit.Quantity)
	res.Remaining += l.units
	return res, false, nil
}

// refund puts units back into key's lease while it is in force and they
// fit under Chunk-1 (which keeps the overshoot bound); false when Redis
// should be refunded instead.
func (b *batcher) refund(key string, cost int64, now time.Time) bool {
	b.mu.RLock()
	l := b.leases[key]
	b.mu.RUnlock()
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.UnixNano() >= l.expires || l.units+cost > b.chunk-1 {
		return false
	}
	l.units += cost
	return true
}
