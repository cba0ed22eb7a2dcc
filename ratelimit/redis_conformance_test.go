package ratelimit

import (
	"testing"

	"github.com/loadshed/loadshed/shed/shedtest"
)

func TestConformanceRedis(t *testing.T) {
	c := testRedisClient(t) // skips, or fails under scripts/test.sh, without a server
	conformance(t, func(t testing.TB, clock *shedtest.Clock, alg Algorithm) Store {
		// The over-limit cache is on: a refund racing a denial no longer
		// leaves the key noted over (the cache's epoch).
		return fixedRedis(t, c, clock, alg, PerHour(3), RedisConfig{})
	})
}
