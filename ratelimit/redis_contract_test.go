package ratelimit

import (
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed/shedtest"
)

// The Redis store runs the same step tables as the in-memory one, with the
// scripts reading the suite's fixed instants instead of the server's TIME,
// in exact mode and without the over-limit cache (whose answers are
// deliberately coarser: see TestRedisOverLimitCache).
func init() {
	contractStores = append(contractStores, contractStore{name: "redis", open: openRedis})
}

func openRedis(t *testing.T, alg Algorithm, limit Limit, start time.Time) (Store, func(time.Time)) {
	t.Helper()
	clk := shedtest.NewClock(start)
	r := fixedRedis(t, testRedisClient(t), clk, alg, limit, RedisConfig{OverLimitKeys: -1})
	return r, clk.Set
}
