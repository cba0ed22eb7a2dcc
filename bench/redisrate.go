package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/ratelimit"
)

// RedisBatchChunk is the units loadshed's batched rows lease per round trip.
// It is set through BatchConfig.Fraction (see RedisBatchFraction), so that
// the round trips per decision the rows report read directly against it.
const RedisBatchChunk = 1000

// RedisBatchFraction returns the BatchConfig.Fraction that makes the chunk
// of a limit of n units RedisBatchChunk (the whole limit when n is
// smaller).
func RedisBatchFraction(n int64) float64 { return min(float64(RedisBatchChunk)/float64(n), 1) }

// RedisDecider is one Redis-backed rate limiter's decision for one unit.
type RedisDecider interface {
	// Allow reports whether one unit may be taken for key now.
	Allow(ctx context.Context, key string) (bool, error)
	// Fallbacks returns how many decisions were taken locally because Redis
	// did not answer (always 0 for limiters without a fallback).
	Fallbacks() int64
	// Close releases what the limiter built (not the client).
	Close() error
}

// RedisPeer builds one Redis-backed limiter for the comparison.
type RedisPeer struct {
	// Name identifies the limiter in benchmark names.
	Name string
	// New returns a limiter of n units per period per key, burst n, whose
	// keys start with prefix.
	New func(c redis.UniversalClient, n int64, period time.Duration, prefix string) (RedisDecider, error)
}

// RedisPeers returns go-redis/redis_rate and loadshed's Redis store, exact
// and batched, for GCRA and the token bucket. loadshedNoCache is loadshed's
// exact GCRA with its local over-limit cache off, for the deny rows.
func RedisPeers() []RedisPeer {
	ls := func(alg ratelimit.Algorithm, batch, overCache bool) func(redis.UniversalClient, int64, time.Duration, string) (RedisDecider, error) {
		return func(c redis.UniversalClient, n int64, period time.Duration, prefix string) (RedisDecider, error) {
			// One instance: no presence refresh among the round trips counted.
			cfg := ratelimit.RedisConfig{Prefix: prefix, Timeout: time.Second, ExpectedInstances: 1}
			if batch {
				cfg.Batch.Fraction = RedisBatchFraction(n)
			}
			if !overCache {
				cfg.OverLimitKeys = -1
			}
			return NewLoadshedRedis(c, alg, n, period, cfg)
		}
	}
	return []RedisPeer{
		{Name: "redis_rate", New: func(c redis.UniversalClient, n int64, period time.Duration, prefix string) (RedisDecider, error) {
			return NewRedisRate(c, n, period, prefix), nil
		}},
		{Name: "loadshed-gcra", New: ls(ratelimit.LeakyBucket, false, true)},
		{Name: "loadshed-gcra-nocache", New: ls(ratelimit.LeakyBucket, false, false)},
		{Name: "loadshed-token", New: ls(ratelimit.TokenBucket, false, true)},
		{Name: "loadshed-gcra-batch", New: ls(ratelimit.LeakyBucket, true, true)},
		{Name: "loadshed-token-batch", New: ls(ratelimit.TokenBucket, true, true)},
	}
}

// RedisRate is go-redis/redis_rate: GCRA in one Lua script per decision.
type RedisRate struct {
	l      *redis_rate.Limiter
	limit  redis_rate.Limit
	prefix string
}

// NewRedisRate returns a redis_rate limiter of n per period, burst n.
// redis_rate puts its own "rate:" before every key; prefix keeps rows apart.
func NewRedisRate(c redis.UniversalClient, n int64, period time.Duration, prefix string) *RedisRate {
	return &RedisRate{l: redis_rate.NewLimiter(c), limit: redis_rate.Limit{Rate: int(n), Burst: int(n), Period: period}, prefix: prefix}
}

// Allow takes one unit for key.
func (r *RedisRate) Allow(ctx context.Context, key string) (bool, error) {
	res, err := r.l.Allow(ctx, r.prefix+key, r.limit)
	if err != nil {
		return false, fmt.Errorf("bench: redis_rate: %w", err)
	}
	return res.Allowed > 0, nil
}

// Fallbacks is always 0: redis_rate has no fallback.
func (r *RedisRate) Fallbacks() int64 { return 0 }

// Close does nothing.
func (r *RedisRate) Close() error { return nil }

// LoadshedRedis is loadshed's Redis store, one unit per decision, counting
// the decisions its local fallback took.
type LoadshedRedis struct {
	r         *ratelimit.Redis
	fallbacks atomic.Int64
}

// NewLoadshedRedis returns a ratelimit.Redis of n per period (burst n)
// under alg. cfg.OnFallback is replaced by the counter.
func NewLoadshedRedis(c redis.UniversalClient, alg ratelimit.Algorithm, n int64, period time.Duration, cfg ratelimit.RedisConfig) (*LoadshedRedis, error) {
	l := &LoadshedRedis{}
	cfg.OnFallback = func(error) { l.fallbacks.Add(1) }
	r, err := ratelimit.NewRedis(c, alg, ratelimit.Per(n, period), cfg)
	if err != nil {
		return nil, err
	}
	l.r = r
	return l, nil
}

// Allow takes one unit for key.
func (l *LoadshedRedis) Allow(ctx context.Context, key string) (bool, error) {
	res, err := l.r.Allow(ctx, key, 1)
	return res.Allowed, err
}

// Fallbacks returns the decisions taken by the local fallback.
func (l *LoadshedRedis) Fallbacks() int64 { return l.fallbacks.Load() }

// Close releases the store's fallback limiter.
func (l *LoadshedRedis) Close() error { return l.r.Close() }
