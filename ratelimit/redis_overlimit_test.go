package ratelimit

import (
	"strconv"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed/shedtest"
)

// A key Redis found over its limit is answered locally, without a round
// trip, until a unit is back; then Redis decides again.
func TestRedisOverLimitCache(t *testing.T) {
	c, cmds := countedClient(t)
	clk := shedtest.NewClock(contractStart.Add(200 * ms))
	r := fixedRedis(t, c, clk, FixedWindow, PerSecond(2), RedisConfig{})
	for i := 0; i < 2; i++ {
		if res, _ := r.Allow(bg, "k", 1); !res.Allowed {
			t.Fatalf("request %d denied", i)
		}
	}
	if res, _ := r.Allow(bg, "k", 1); res.Allowed || res.RetryAfter != 800*ms {
		t.Fatalf("third request: %+v, want denied by Redis until the window ends", res)
	}
	before := cmds.n.Load()
	clk.Advance(300 * ms)
	res, fb, err := r.Decide(bg, "k", 1)
	if err != nil || fb || res.Allowed || res.Remaining != 0 || res.RetryAfter != 500*ms || res.ResetAfter != 500*ms {
		t.Fatalf("cached: %+v fallback=%v err=%v; want denied for 500ms more", res, fb, err)
	}
	if n := cmds.n.Load() - before; n != 0 {
		t.Fatalf("%d commands for a key known to be over its limit, want 0", n)
	}
	// Other keys are not affected.
	if res, _ := r.Allow(bg, "other", 1); !res.Allowed {
		t.Fatal("another key denied")
	}
	// Once the unit is back, Redis decides again.
	clk.Advance(500 * ms)
	before = cmds.n.Load()
	if res, _ := r.Allow(bg, "k", 1); !res.Allowed {
		t.Fatalf("after the window: %+v", res)
	}
	if cmds.n.Load() == before {
		t.Fatal("no round trip once the cached entry ended")
	}
}

// Only a key with no unit left is cached: one denied for a large cost may
// still admit a smaller one.
func TestRedisOverLimitCacheOnlyWhenEmpty(t *testing.T) {
	c := testRedisClient(t)
	clk := shedtest.NewClock(contractStart)
	r := fixedRedis(t, c, clk, TokenBucket, PerSecond(4), RedisConfig{})
	if res, _ := r.Allow(bg, "k", 3); !res.Allowed {
		t.Fatal(res)
	}
	if res, _ := r.Allow(bg, "k", 2); res.Allowed || res.Remaining != 1 {
		t.Fatalf("cost 2: %+v", res)
	}
	if res, _ := r.Allow(bg, "k", 1); !res.Allowed {
		t.Fatalf("cost 1 after a denied cost 2: %+v, want admitted", res)
	}
	// A refund forgets the entry: the unit given back is usable at once.
	if res, _ := r.Allow(bg, "k", 1); res.Allowed {
		t.Fatalf("empty bucket admitted: %+v", res)
	}
	if err := r.Refund(bg, "k", 1); err != nil {
		t.Fatal(err)
	}
	if res, _ := r.Allow(bg, "k", 1); !res.Allowed {
		t.Fatalf("after a refund: %+v, want admitted", res)
	}
}

func TestRedisOverLimitCacheBounded(t *testing.T) {
	c := newOverLimitCache(3)
	now := contractStart
	for i := 0; i < 100; i++ {
		c.add("k"+strconv.Itoa(i), now, time.Second, time.Second, c.epoch.Load())
		if c.len() > 3 {
			t.Fatalf("%d entries, bound 3", c.len())
		}
	}
	if _, ok := c.check("k99", now, 1); !ok {
		t.Fatal("the newest entry was evicted")
	}
	if _, ok := c.check("k99", now.Add(time.Second), 1); ok {
		t.Fatal("an entry outlived its end")
	}
}

// A denial Redis gave before a refund is not cached after it: the key would
// stay refused though Redis has units again.
func TestOverLimitCacheIgnoresAnswersOlderThanARefund(t *testing.T) {
	c := newOverLimitCache(10)
	now := contractStart
	epoch := c.epoch.Load() // read before the round trip
	c.forget("k")           // a refund lands meanwhile
	c.add("k", now, time.Second, time.Second, epoch)
	if _, ok := c.check("k", now, 3); ok {
		t.Fatal("a denial older than the refund was cached")
	}
	c.add("k", now, time.Second, time.Second, c.epoch.Load())
	if _, ok := c.check("k", now, 3); !ok {
		t.Fatal("a denial after the refund was not cached")
	}
}
