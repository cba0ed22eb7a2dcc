package bench

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/shed"
)

// TestRoundTripsCounts checks the hook the Redis rows read: a command is
// one round trip, a pipeline of three is one round trip of three commands.
func TestRoundTripsCounts(t *testing.T) {
	c, rt := redisClient(t)
	ctx := context.Background()
	t0, c0 := rt.Trips(), rt.Commands()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	key := uniquePrefix(t) + "k"
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, 1, time.Minute)
		p.Incr(ctx, key)
		p.Del(ctx, key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if trips, cmds := rt.Trips()-t0, rt.Commands()-c0; trips != 2 || cmds != 4 {
		t.Errorf("PING and a pipeline of 3: %d round trips, %d commands; want 2 and 4", trips, cmds)
	}
}

// TestRedisPeersAdmitExactlyN: on the same server, under a limit of n per
// day, redis_rate and every loadshed mode admit exactly n of n+k on a fresh
// key, and the round trips they take are those the tables claim: one per
// decision for redis_rate and for loadshed without its over-limit cache,
// one per admitted decision for loadshed's exact modes (the cache answers
// the refusals), one per RedisBatchChunk for the batched ones; plus one
// should a script need loading.
func TestRedisPeersAdmitExactlyN(t *testing.T) {
	c, rt := redisClient(t)
	ctx := context.Background()
	const n, extra = 2 * RedisBatchChunk, 200
	for _, p := range RedisPeers() {
		t.Run(p.Name, func(t *testing.T) {
			d, err := p.New(c, n, 24*time.Hour, uniquePrefix(t))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			t0 := rt.Trips()
			allowed := 0
			for range n + extra {
				ok, err := d.Allow(ctx, "alice")
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					allowed++
				}
			}
			trips := rt.Trips() - t0
			if allowed != n {
				t.Errorf("%d of %d admitted under a limit of %d", allowed, n+extra, n)
			}
			if d.Fallbacks() != 0 {
				t.Errorf("%d decisions from the local fallback", d.Fallbacks())
			}
			var lo, hi int64
			switch p.Name {
			case "redis_rate", "loadshed-gcra-nocache":
				lo, hi = n+extra, n+extra+1 // one per decision
			case "loadshed-gcra", "loadshed-token":
				// One per admitted decision; the last one reports nothing
				// left, so the over-limit cache answers the refusals.
				lo, hi = n, n+2
			default: // batched: n/chunk leases, then the over-limit cache
				lo, hi = n/RedisBatchChunk, n/RedisBatchChunk+2
			}
			if trips < lo || trips > hi {
				t.Errorf("%d round trips for %d decisions, want %d to %d", trips, n+extra, lo, hi)
			}
		})
	}
}

func TestRedisConcurrencyHoldsN(t *testing.T) {
	c, _ := redisClient(t)
	ctx := context.Background()
	const n = 3
	l, err := concurrency.NewRedis(c, concurrency.RedisConfig{Config: concurrency.Config{Limit: n},
		Prefix: uniquePrefix(t) + "c", ExpectedInstances: 1, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	leases := make([]shed.Lease, n)
	for i := range leases {
		if leases[i], err = l.Acquire(ctx, shed.Request{Key: "k"}); err != nil || leases[i].Fallback {
			t.Fatalf("acquire %d of %d: %v (fallback %v)", i+1, n, err, leases[i].Fallback)
		}
	}
	if ls, err := l.Acquire(ctx, shed.Request{Key: "k"}); err == nil {
		ls.Release(shed.Completed)
		t.Fatalf("acquire %d admitted over a limit of %d", n+1, n)
	}
	for i := range leases {
		leases[i].Release(shed.Completed)
	}
	ls, err := l.Acquire(ctx, shed.Request{Key: "k"})
	if err != nil {
		t.Fatalf("acquire after the releases: %v", err)
	}
	ls.Release(shed.Completed)
}
