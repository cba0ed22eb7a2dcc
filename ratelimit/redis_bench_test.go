package ratelimit

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/internal/redisx"
)

// Benchmarks of the Redis store against the real server (skipped without
// one), in parallel, with the round trips per decision counted by a
// go-redis hook (trips/op). Run with:
//
//	./scripts/test.sh ./ratelimit/ -run '^$' -bench Redis -benchtime 2s

func benchRedis(b *testing.B, alg Algorithm, limit Limit, cfg RedisConfig, keys int) {
	c, cmds := countedClient(b)
	benchRedisOn(b, c, cmds, alg, limit, cfg, keys)
}

func benchRedisOn(b *testing.B, c *redis.Client, cmds *commandCounter, alg Algorithm, limit Limit, cfg RedisConfig, keys int) {
	cfg.Prefix = testPrefix(b)
	cfg.Timeout = time.Second
	r, err := NewRedis(c, alg, limit, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	names := make([]string, keys)
	for i := range names {
		names[i] = "key" + strconv.Itoa(i)
	}
	if _, err := r.Allow(bg, names[0], 1); err != nil { // load the script
		b.Fatal(err)
	}
	var allowed, fallbacks, seq atomic.Int64
	start := cmds.n.Load()
	b.ReportAllocs()
	// Many decisions in flight, as many requests of a server would be: with
	// GOMAXPROCS of them only, the benchmark would measure latency.
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 7919
		for pb.Next() {
			i++
			res, fb, err := r.Decide(bg, names[i%keys], 1)
			if err != nil {
				b.Error(err)
				return
			}
			if fb {
				fallbacks.Add(1)
			}
			if res.Allowed {
				allowed.Add(1)
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(cmds.n.Load()-start)/float64(b.N), "trips/op")
	b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
	if fallbacks.Load() > 0 {
		b.Fatalf("%d decisions fell back", fallbacks.Load())
	}
}

// Exact mode: one EVALSHA per decision. The limit is never reached, so
// every decision is a full allow path.
func BenchmarkRedisExact(b *testing.B) {
	for _, alg := range allAlgs {
		var l Limit
		switch alg {
		case TokenBucket, LeakyBucket:
			l = PerSecond(1_000_000) // T = 1µs, τ = 1s: never empty at these rates
		case SlidingLog:
			l = PerMinute(MaxSlidingLogQuantity) // a member per unit
		default:
			l = PerSecond(1 << 40)
		}
		b.Run(alg.String()+"/1key", func(b *testing.B) { benchRedis(b, alg, l, RedisConfig{OverLimitKeys: -1}, 1) })
		b.Run(alg.String()+"/1000keys", func(b *testing.B) { benchRedis(b, alg, l, RedisConfig{OverLimitKeys: -1}, 1000) })
	}
}

// Batched mode: leases of 100 units (Fraction × Quantity) per round trip.
func BenchmarkRedisBatched(b *testing.B) {
	limit := PerSecond(10_000_000)
	cfg := RedisConfig{Batch: BatchConfig{Fraction: 1e-5}}
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow} {
		b.Run(alg.String()+"/1key", func(b *testing.B) { benchRedis(b, alg, limit, cfg, 1) })
		b.Run(alg.String()+"/1000keys", func(b *testing.B) { benchRedis(b, alg, limit, cfg, 1000) })
	}
}

// The deny path of a key over its limit: the over-limit cache answers
// without a round trip, against one EVALSHA per decision without it.
func BenchmarkRedisDenied(b *testing.B) {
	limit := PerHour(1)
	b.Run("cache", func(b *testing.B) { benchRedis(b, TokenBucket, limit, RedisConfig{}, 1) })
	b.Run("nocache", func(b *testing.B) { benchRedis(b, TokenBucket, limit, RedisConfig{OverLimitKeys: -1}, 1) })
}

// Exact mode with and without redisx.Pipeline on the client (its scripts
// sent in batches by two flushers), 16 decisions in flight over 1000 keys;
// compare with benchstat -col /pipeline. With the hook, trips/op counts
// each script twice (as sent, and in its batch), so read ns/op.
func BenchmarkRedisPipelineHook(b *testing.B) {
	for _, alg := range []Algorithm{FixedWindow, TokenBucket} {
		l := PerSecond(1 << 40)
		if alg == TokenBucket {
			l = PerSecond(1_000_000)
		}
		for _, pipelined := range []bool{false, true} {
			name := alg.String() + "/pipeline=off"
			if pipelined {
				name = alg.String() + "/pipeline=on"
			}
			b.Run(name, func(b *testing.B) {
				redistest.Client(b) // skips without a server
				opt := redistest.Options(b)
				opt.ContextTimeoutEnabled, opt.MaxRetries = true, -1
				c := redis.NewClient(opt)
				b.Cleanup(func() { c.Close() })
				cmds := &commandCounter{}
				c.AddHook(cmds)
				if pipelined {
					b.Cleanup(redisx.Pipeline(c, 2))
				}
				benchRedisOn(b, c, cmds, alg, l, RedisConfig{OverLimitKeys: -1}, 1000)
			})
		}
	}
}
