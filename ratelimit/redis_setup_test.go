package ratelimit

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// testRedisClient returns a client of the test server with
// ContextTimeoutEnabled on, as NewRedis requires: a separate pool, as a
// separate host would have.
func testRedisClient(t testing.TB) *redis.Client {
	t.Helper()
	redistest.Client(t) // skips (or fails) when there is no server
	opt := redistest.Options(t)
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// testPrefix is redistest.Prefix without the braces a test name may hold.
func testPrefix(t testing.TB) string {
	return strings.NewReplacer("{", "(", "}", ")").Replace(redistest.Prefix(t))
}

// fixedRedis returns a Redis store reading time from clk instead of the
// server's TIME, so step tables run at fixed instants. Unless cfg says
// otherwise, a decision taken by the fallback fails the test. Keys are padded with
// a minute of TTL, so that real time passing while the test runs never
// expires state the fixed clock still needs.
func fixedRedis(t testing.TB, c redis.UniversalClient, clk *shedtest.Clock, alg Algorithm, limit Limit, cfg RedisConfig) *Redis {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = testPrefix(t)
	}
	// A loaded, race-instrumented machine can miss the 50ms default, and a
	// fallback decision would then pass for Redis' own.
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.OnFallback == nil {
		cfg.OnFallback = func(err error) { t.Errorf("Redis did not decide: %v", err) }
	}
	cfg.Clock = clk
	r, err := NewRedis(c, alg, limit, cfg)
	if err != nil {
		t.Fatalf("NewRedis(%v, %v): %v", alg, limit, err)
	}
	r.now = clk.Now
	r.setTTLSlack(int64(time.Minute / time.Millisecond))
	t.Cleanup(func() { r.Close() })
	return r
}

var bg = context.Background()

// commandCounter is a go-redis hook counting the commands a client sends
// for decisions, each one round trip (a pipeline counts its commands). The
// background refresh of the instance's presence is not counted.
type commandCounter struct{ n atomic.Int64 }

func isPresence(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 4 {
		return false
	}
	k, _ := a[3].(string)
	return strings.HasSuffix(k, "instances}")
}

func (h *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isPresence(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// countedClient is testRedisClient with a command counter.
func countedClient(t testing.TB) (*redis.Client, *commandCounter) {
	c := testRedisClient(t)
	h := &commandCounter{}
	c.AddHook(h)
	return c, h
}
