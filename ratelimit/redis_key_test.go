package ratelimit

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loadshed/loadshed/internal/redisx"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// hashTag is the part of a key Redis Cluster hashes: the bytes between the
// first '{' and the first '}' after it, when there are any.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

func TestRedisKeyLayout(t *testing.T) {
	keys := []string{"k", "{k}", "k}", "{", "}", "}{", "a b", "a\nb", "\x00", "user:{42}:x",
		strings.Repeat("{", 300), strings.Repeat("x", 1<<20), "loadshed:rl:tb:{abc}"}
	seen := map[string]string{}
	for _, alg := range allAlgs {
		for _, k := range keys {
			rk := redisKey(DefaultRedisPrefix, algKeyTags[alg], k)
			if !strings.HasPrefix(rk, "{"+DefaultRedisPrefix+algKeyTags[alg]+":") || !strings.HasSuffix(rk, "}") {
				t.Fatalf("key %.20q: redis key %q does not follow {<prefix>:<alg>:<digest>}", k, rk)
			}
			if len(rk) != 1+len(DefaultRedisPrefix)+len(algKeyTags[alg])+1+43+1 {
				t.Fatalf("key %.20q: redis key %q has an unbounded length", k, rk)
			}
			tag := hashTag(rk)
			if tag != rk[1:len(rk)-1] || strings.ContainsAny(tag, "{} \n") {
				t.Fatalf("key %.20q: hash tag %q is not the whole key", k, tag)
			}
			if prev, ok := seen[rk]; ok {
				t.Fatalf("keys %.20q and %.20q share the redis key %q", prev, k, rk)
			}
			seen[rk] = k
		}
	}
}

// Keys crafted to look like other keys, or like the store's own layout,
// keep separate state on the server.
func TestRedisOddKeysAreIsolated(t *testing.T) {
	c := testRedisClient(t)
	clk := shedtest.NewClock(contractStart)
	r := fixedRedis(t, c, clk, FixedWindow, PerMinute(2), RedisConfig{OverLimitKeys: -1})
	keys := []string{"a", "a ", "{a}", "a}", "{a", "a\n", "a\r\nSET x y", strings.Repeat("a", 100_000),
		r.keyOf("a"), "}" + r.keyOf("a")}
	for _, k := range keys {
		if res, err := r.Allow(bg, k, 2); err != nil || !res.Allowed || res.Remaining != 0 {
			t.Fatalf("first Allow(%.30q, 2) = %+v, %v; want a fresh key admitted", k, res, err)
		}
	}
	for _, k := range keys {
		if res, err := r.Allow(bg, k, 1); err != nil || res.Allowed {
			t.Fatalf("second Allow(%.30q) = %+v, %v; want denied", k, res, err)
		}
	}
}

func TestRedisKeysExpire(t *testing.T) {
	c := testRedisClient(t)
	for _, alg := range allAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			clk := shedtest.NewClock(contractStart)
			limit := Limit{Quantity: 5, Period: 10 * time.Second, Burst: 5}
			r := fixedRedis(t, c, clk, alg, limit, RedisConfig{OverLimitKeys: -1})
			r.setTTLSlack(1)
			if _, err := r.Allow(bg, "k", 1); err != nil {
				t.Fatal(err)
			}
			ttl, err := c.PTTL(bg, r.keyOf("k")).Result()
			if err != nil {
				t.Fatal(err)
			}
			// The state lives as long as it matters: 2s of bucket (one unit of
			// a 5-per-10s limit), up to a window (two for the sliding window).
			if ttl <= 0 || ttl > 2*limit.Period+time.Second {
				t.Fatalf("PTTL = %v, want a TTL within (0, %v]", ttl, 2*limit.Period+time.Second)
			}
			// Giving everything back leaves nothing worth keeping.
			if err := r.Refund(bg, "k", 1); err != nil {
				t.Fatal(err)
			}
			n, err := c.Exists(bg, r.keyOf("k")).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 && alg != SlidingLog {
				t.Fatalf("state left after a full refund")
			}
			if alg == SlidingLog {
				if card := c.ZCard(bg, r.keyOf("k")).Val(); card != 0 {
					t.Fatalf("log holds %d entries after a full refund", card)
				}
			}
		})
	}
}

// The log never holds more than Quantity members, however it is driven.
func TestRedisSlidingLogBounded(t *testing.T) {
	c := testRedisClient(t)
	clk := shedtest.NewClock(contractStart)
	limit := PerSecond(20)
	r := fixedRedis(t, c, clk, SlidingLog, limit, RedisConfig{OverLimitKeys: -1})
	admitted := 0
	for i := 0; i < 400; i++ {
		clk.Advance(7 * time.Millisecond)
		res, err := r.Allow(bg, "k", int64(1+i%3))
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			admitted++
		}
		if n := c.ZCard(bg, r.keyOf("k")).Val(); n > limit.Quantity {
			t.Fatalf("after request %d the log holds %d members, limit %d", i, n, limit.Quantity)
		}
	}
	if admitted < 20 {
		t.Fatalf("only %d admitted: the test exercised nothing", admitted)
	}
}

func TestRedisBadInput(t *testing.T) {
	c := testRedisClient(t)
	good := PerSecond(10)
	cases := []struct {
		name   string
		client redis.UniversalClient
		alg    Algorithm
		limit  Limit
		cfg    RedisConfig
		field  string
	}{
		{"nil client", nil, TokenBucket, good, RedisConfig{}, "client is nil"},
		{"typed nil client", (*redis.Client)(nil), TokenBucket, good, RedisConfig{}, "client is nil"},
		{"typed nil cluster client", (*redis.ClusterClient)(nil), TokenBucket, good, RedisConfig{}, "client is nil"},
		{"zero quantity", c, TokenBucket, Limit{Period: time.Second}, RedisConfig{}, "Limit.Quantity"},
		{"negative quantity", c, FixedWindow, Limit{Quantity: -1, Period: time.Second}, RedisConfig{}, "Limit.Quantity"},
		{"zero period", c, SlidingLog, Limit{Quantity: 1}, RedisConfig{}, "Limit.Period"},
		{"negative period", c, SlidingWindow, Limit{Quantity: 1, Period: -time.Second}, RedisConfig{}, "Limit.Period"},
		{"negative burst", c, LeakyBucket, Limit{Quantity: 1, Period: time.Second, Burst: -1}, RedisConfig{}, "Limit.Burst"},
		{"unknown algorithm", c, Algorithm(42), good, RedisConfig{}, "unknown algorithm"},
		{"period too long", c, FixedWindow, Per(1, 60*24*time.Hour), RedisConfig{}, "Limit.Period"},
		{"braces in prefix", c, TokenBucket, good, RedisConfig{Prefix: "a{b}"}, "RedisConfig.Prefix"},
		{"negative timeout", c, TokenBucket, good, RedisConfig{Timeout: -1}, "RedisConfig.Timeout"},
		{"negative probe", c, TokenBucket, good, RedisConfig{ProbeInterval: -1}, "RedisConfig.ProbeInterval"},
		{"negative instances", c, TokenBucket, good, RedisConfig{ExpectedInstances: -1}, "RedisConfig.ExpectedInstances"},
		{"batch fraction", c, TokenBucket, good, RedisConfig{Batch: BatchConfig{Fraction: 1.5}}, "RedisConfig.Batch.Fraction"},
		{"batch age", c, TokenBucket, good, RedisConfig{Batch: BatchConfig{Fraction: .1, MaxAge: -1}}, "RedisConfig.Batch.MaxAge"},
		{"no context timeout", redis.NewClient(redistest.Options(t)), TokenBucket, good, RedisConfig{}, "ContextTimeoutEnabled"},
		{"no context timeout (cluster)", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{closedAddr(t)}}), TokenBucket, good, RedisConfig{}, "ContextTimeoutEnabled"},
		{"no context timeout (ring)", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": closedAddr(t)}}), TokenBucket, good, RedisConfig{}, "ContextTimeoutEnabled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRedis(tc.client, tc.alg, tc.limit, tc.cfg)
			if err == nil || r != nil {
				t.Fatalf("NewRedis = %v, %v; want an error naming %s", r, err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q does not name %s", err, tc.field)
			}
		})
	}

	clk := shedtest.NewClock(contractStart)
	for _, alg := range allAlgs {
		r := fixedRedis(t, c, clk, alg, Limit{Quantity: 4, Period: time.Second, Burst: 2}, RedisConfig{})
		for _, bad := range []struct {
			key  string
			cost int64
			want error
		}{{"", 1, ErrEmptyKey}, {"k", 0, ErrInvalidCost}, {"k", -5, ErrInvalidCost}, {"k", 5, ErrCostAboveBurst}} {
			if _, err := r.Allow(bg, bad.key, bad.cost); !errors.Is(err, bad.want) {
				t.Errorf("%v: Allow(%q, %d) = %v, want %v", alg, bad.key, bad.cost, err, bad.want)
			}
			if err := r.Refund(bg, bad.key, bad.cost); !errors.Is(err, bad.want) {
				t.Errorf("%v: Refund(%q, %d) = %v, want %v", alg, bad.key, bad.cost, err, bad.want)
			}
			if _, fb, err := r.Decide(bg, bad.key, bad.cost); !errors.Is(err, bad.want) || fb {
				t.Errorf("%v: Decide(%q, %d) = %v, %v; want %v from Redis' side", alg, bad.key, bad.cost, fb, err, bad.want)
			}
		}
	}
}

// Without an injected instant the scripts read the server's TIME; the host
// clock (here a year off) plays no part in the decision.
func TestRedisServerTime(t *testing.T) {
	c := testRedisClient(t)
	for _, alg := range allAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			clk := shedtest.NewClock(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))
			r, err := NewRedis(c, alg, PerHour(3), RedisConfig{Prefix: testPrefix(t), Clock: clk, OverLimitKeys: -1, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for i := int64(0); i < 3; i++ {
				res, fb, err := r.Decide(bg, "k", 1)
				if err != nil || fb || !res.Allowed || res.Remaining != 2-i {
					t.Fatalf("request %d: %+v fallback=%v err=%v", i, res, fb, err)
				}
			}
			// The sliding window counter may wait into the next window.
			most := time.Hour
			if alg == SlidingWindow {
				most = 2 * time.Hour
			}
			res, fb, err := r.Decide(bg, "k", 1)
			if err != nil || fb || res.Allowed || res.RetryAfter <= 0 || res.RetryAfter > most {
				t.Fatalf("request 3: %+v fallback=%v err=%v; want denied for at most %v", res, fb, err, most)
			}
		})
	}
}

// A cluster client with ContextTimeoutEnabled is accepted (it is not asked
// anything until the first decision).
func TestRedisAcceptsClusterClient(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{closedAddr(t)}, ContextTimeoutEnabled: true})
	defer c.Close()
	r, err := NewRedis(c, SlidingWindow, PerSecond(10), RedisConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
}

// Whatever the key, the Redis key is the layout with the key's digest in
// its hash tag.
func FuzzRedisKey(f *testing.F) {
	for _, k := range []string{"", "k", "{", "}", "{k}", "a\nb", "\x00{}", strings.Repeat("}", 100)} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		rk := redisKey("p:", "tb", key)
		tag := hashTag(rk)
		digest := strings.TrimPrefix(tag, "p:tb:")
		if rk != "{"+tag+"}" || len(digest) != 43 || strings.Trim(digest, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			t.Fatalf("key %q: redis key %q", key, rk)
		}
		if key != "" && redisKey("p:", "tb", key+"x") == rk {
			t.Fatalf("keys %q and %q share %q", key, key+"x", rk)
		}
	})
}

// A limit lowered while keys hold units taken under the old one: the new
// limiter refuses until the units are gone and never reports a negative
// remainder.
func TestRedisLimitLowered(t *testing.T) {
	c := testRedisClient(t)
	for _, alg := range allAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			clk := shedtest.NewClock(contractStart)
			prefix := testPrefix(t)
			old := fixedRedis(t, c, clk, alg, PerMinute(10), RedisConfig{Prefix: prefix, OverLimitKeys: -1})
			lowered := fixedRedis(t, c, clk, alg, PerMinute(4), RedisConfig{Prefix: prefix, OverLimitKeys: -1})
			if res, err := old.Allow(bg, "k", 8); err != nil || !res.Allowed {
				t.Fatalf("old limit: %+v %v", res, err)
			}
			res, err := lowered.Allow(bg, "k", 1)
			if err != nil || res.Allowed || res.Remaining != 0 || res.RetryAfter <= 0 {
				t.Fatalf("lowered limit: %+v %v; want refused with nothing remaining", res, err)
			}
		})
	}
}

func redisKey(prefix, alg, key string) string { return redisx.NewKeys(prefix).Key(alg, key) }

// The fixed window writes its window's start in one form (whole seconds,
// then nanoseconds below 1e9), so that every call in the window writes it
// alike; a count written by an earlier version, as the writer's second and
// an offset from it, is still read, and one for another window is not.
func TestRedisFixedWindowState(t *testing.T) {
	c := testRedisClient(t)
	for _, tc := range []struct {
		name  string
		limit Limit
		// The clock and the start of its window, from contractStart (a
		// whole hour: aligned on a minute and on 1.5s since the epoch).
		at, start time.Duration
		// The TTL slack in ms: the default 1, or fixedRedis's minute.
		slack int64
	}{
		{"a second", PerSecond(5), 300 * time.Millisecond, 0, 1},
		{"a minute", PerMinute(5), 25*time.Second + 300*time.Millisecond, 0, 60000},
		{"1.5s, not whole seconds", Per(5, 1500*time.Millisecond), 2 * time.Second, 1500 * time.Millisecond, 60000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now, start := contractStart.Add(tc.at), contractStart.Add(tc.start)
			clk := shedtest.NewClock(now)
			r := fixedRedis(t, c, clk, FixedWindow, tc.limit, RedisConfig{OverLimitKeys: -1})
			r.setTTLSlack(tc.slack)
			// The earlier layout: now's second, and the window's start as
			// nanoseconds from it (negative).
			offset := now.Sub(start)
			old := fmt.Sprintf("%d %d 3", now.Unix(), int64(now.Nanosecond())-int64(offset))
			if err := c.Set(bg, r.keyOf("old"), old, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if res, err := r.Allow(bg, "old", 2); err != nil || !res.Allowed || res.Remaining != 0 {
				t.Fatalf("Allow(2) over the earlier layout's count of 3 of 5 = %+v, %v; want admitted, 0 left", res, err)
			}
			if res, err := r.Allow(bg, "old", 1); err != nil || res.Allowed {
				t.Fatalf("Allow(1) with the window full = %+v, %v; want denied", res, err)
			}
			want := fmt.Sprintf("%d %d 5", start.Unix(), start.Nanosecond())
			if got := c.Get(bg, r.keyOf("old")).Val(); got != want {
				t.Fatalf("state %q, want %q", got, want)
			}
			// Kept to the window's end, rounded up to the millisecond,
			// and the slack; the real time since the write has taken a
			// little off.
			px := (start.Add(tc.limit.Period).Sub(now)+time.Millisecond-1)/time.Millisecond*time.Millisecond + time.Duration(tc.slack)*time.Millisecond
			if ttl := c.PTTL(bg, r.keyOf("old")).Val(); ttl > px || ttl < px-500*time.Millisecond {
				t.Fatalf("TTL %v, want %v less the time since", ttl, px)
			}
			// A count of the window before reads as zero.
			prev := start.Add(-tc.limit.Period)
			stale := fmt.Sprintf("%d %d 5", prev.Unix(), prev.Nanosecond())
			if err := c.Set(bg, r.keyOf("stale"), stale, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if res, err := r.Allow(bg, "stale", 5); err != nil || !res.Allowed {
				t.Fatalf("Allow(5) over the last window's count = %+v, %v; want admitted", res, err)
			}
		})
	}
	// An admitted request's answer packs the count left and the reset into
	// one integer only while that is exact: here it would be past 2^53
	// (and odd, so a double would round it), and the answer is an array.
	t.Run("an answer too large to pack", func(t *testing.T) {
		clk := shedtest.NewClock(contractStart.Add(17123456788 * time.Nanosecond))
		r := fixedRedis(t, c, clk, FixedWindow, PerMinute(200000), RedisConfig{OverLimitKeys: -1})
		res, err := r.Allow(bg, "wide", 1)
		if want := time.Minute - 17123456788*time.Nanosecond; err != nil || !res.Allowed || res.Remaining != 199999 || res.ResetAfter != want {
			t.Fatalf("Allow(1) = %+v, %v; want admitted, 199999 left, reset in %v", res, err, want)
		}
	})
	// Counts from 1e14 up are written in full, not in %.14g.
	t.Run("a count past 1e14", func(t *testing.T) {
		clk := shedtest.NewClock(contractStart)
		q := int64(maxRedisNanos - 1)
		r := fixedRedis(t, c, clk, FixedWindow, PerMinute(q), RedisConfig{OverLimitKeys: -1})
		for _, n := range []int64{123456789012345, 3} {
			if res, err := r.Allow(bg, "big", n); err != nil || !res.Allowed {
				t.Fatalf("Allow(%d) = %+v, %v", n, res, err)
			}
		}
		if res, err := r.Allow(bg, "big", 1); err != nil || res.Remaining != q-123456789012349 {
			t.Fatalf("Allow(1) = %+v, %v; want %d left", res, err, q-123456789012349)
		}
		if err := r.Refund(bg, "big", 2); err != nil {
			t.Fatal(err)
		}
		if got, want := c.Get(bg, r.keyOf("big")).Val(), fmt.Sprintf("%d 0 123456789012347", contractStart.Unix()); got != want {
			t.Fatalf("state %q after a refund, want %q", got, want)
		}
	})
}
