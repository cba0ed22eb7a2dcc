package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// A stalled Redis costs a caller with a cancellable context (as an HTTP
// request's is) no more than the timeout: the decision comes from the
// fallback.
func TestRedisTimeoutBoundsCancellableCaller(t *testing.T) {
	proxy := newStallProxy(t, redistest.Addr(t))
	redistest.Client(t)
	c := redis.NewClient(&redis.Options{Addr: proxy.addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	const timeout = 60 * time.Millisecond
	r, err := NewRedis(c, TokenBucket, PerHour(10), RedisConfig{Prefix: testPrefix(t),
		Clock: shedtest.NewClock(contractStart), Timeout: timeout, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	if _, fb, err := r.Decide(ctx, "k", 1); err != nil || fb {
		t.Fatalf("healthy: fallback=%v err=%v", fb, err)
	}
	proxy.stall()
	start := time.Now()
	_, fb, err := r.Decide(ctx, "k", 1)
	withinTimeout(t, time.Since(start), timeout)
	if err != nil || !fb {
		t.Fatalf("stalled: fallback=%v err=%v; want the fallback", fb, err)
	}
}
