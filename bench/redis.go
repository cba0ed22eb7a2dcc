package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisAddrEnv names the variable holding the redis-server address
// (host:port) that scripts/test.sh and scripts/bench.sh start. Without it
// the Redis tests and benchmarks are skipped.
const RedisAddrEnv = "LOADSHED_REDIS_ADDR"

// RoundTrips is a go-redis hook that counts what a client sends: one round
// trip per command processed on its own, one per pipeline (or transaction),
// and every command inside. The handshake go-redis sends on each new
// connection (HELLO, CLIENT SETINFO, AUTH, SELECT) is not counted: it is a
// cost of opening connections, not of decisions.
type RoundTrips struct {
	trips    atomic.Int64
	commands atomic.Int64
}

// Trips returns the round trips counted so far.
func (c *RoundTrips) Trips() int64 { return c.trips.Load() }

// Commands returns the commands counted so far.
func (c *RoundTrips) Commands() int64 { return c.commands.Load() }

// DialHook passes dials through uncounted.
func (c *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one round trip and one command.
func (c *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			c.trips.Add(1)
			c.commands.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts one round trip and each command of the
// pipeline.
func (c *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := int64(0)
		for _, cmd := range cmds {
			if !handshake(cmd) {
				n++
			}
		}
		if n > 0 {
			c.trips.Add(1)
			c.commands.Add(n)
		}
		return next(ctx, cmds)
	}
}

// handshake reports whether cmd is one go-redis sends when it opens a
// connection.
func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

// NewRedisClient returns a client of the server at LOADSHED_REDIS_ADDR with
// a RoundTrips hook, or ok false when the variable is empty. The client has
// ContextTimeoutEnabled, as loadshed's Redis stores require, and a pool of
// poolSize connections (0: go-redis's default, 10 per GOMAXPROCS). It fails
// when the server does not answer a PING within two seconds.
func NewRedisClient(poolSize int) (c *redis.Client, rt *RoundTrips, ok bool, err error) {
	addr := os.Getenv(RedisAddrEnv)
	if addr == "" {
		return nil, nil, false, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, nil, false, fmt.Errorf("bench: %s=%q: %w", RedisAddrEnv, addr, err)
	}
	c = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: poolSize, DialTimeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, nil, false, fmt.Errorf("bench: redis at %s does not answer: %w", addr, err)
	}
	rt = &RoundTrips{}
	c.AddHook(rt)
	return c, rt, true, nil
}
