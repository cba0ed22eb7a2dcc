package ratelimit

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/shed/shedtest"
)

// TestPeekCountsNothing: a store asked to Peek before every request answers
// those requests exactly as a twin never asked does, and each Peek says
// what a request of one unit after it meets: Allow's Result, with the unit
// not yet counted in Remaining.
func TestPeekCountsNothing(t *testing.T) {
	limit := Limit{Quantity: 10, Period: time.Second, Burst: 5}
	ctx := context.Background()
	for _, st := range contractStores {
		for _, alg := range allAlgs {
			t.Run(st.name+"/"+alg.String(), func(t *testing.T) {
				peeked, set := st.open(t, alg, limit, contractStart)
				twin, setTwin := st.open(t, alg, limit, contractStart)
				next := seeded(7)
				now, refused, foretold := int64(0), 0, 0
				for i := 0; i < 400; i++ {
					now += next(uint64(limit.Period / 12))
					set(contractStart.Add(time.Duration(now)))
					setTwin(contractStart.Add(time.Duration(now)))
					p, fb, err := Peek(ctx, peeked, "k")
					if err != nil || fb {
						t.Fatalf("request %d: Peek: %v (fallback %v)", i, err, fb)
					}
					if _, _, err := Peek(ctx, peeked, "k"); err != nil { // twice: still nothing
						t.Fatal(err)
					}
					cost := 1 + next(3)
					got, err := peeked.Allow(ctx, "k", cost)
					if err != nil {
						t.Fatal(err)
					}
					want, err := twin.Allow(ctx, "k", cost)
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Fatalf("request %d (cost %d) after a peek:\n got %+v\nwant %+v (never peeked)", i, cost, got, want)
					}
					if !got.Allowed {
						refused++
					}
					if cost != 1 {
						continue
					}
					foretold++
					if p.Allowed {
						p.Remaining--
					}
					if p != got {
						t.Fatalf("request %d: Peek said %+v, then Allow of one unit %+v", i, p, got)
					}
				}
				if refused < 40 || foretold < 40 {
					t.Fatalf("%d requests refused and %d foretold of 400: the test exercises too little", refused, foretold)
				}
			})
		}
	}
}

// TestRedisPeekIsOneRoundTripThatWritesNothing: a check costs one round
// trip, and leaves the key's state in Redis as it found it.
func TestRedisPeekIsOneRoundTripThatWritesNothing(t *testing.T) {
	for _, alg := range allAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			c, calls := countedClient(t)
			r := fixedRedis(t, c, shedtest.NewClock(contractStart), alg, Limit{Quantity: 3, Period: time.Minute}, RedisConfig{})
			if _, err := r.Allow(bg, "k", 2); err != nil {
				t.Fatal(err)
			}
			state := func() string {
				v, err := c.Dump(bg, r.keyOf("k")).Result()
				if err != nil {
					t.Fatalf("DUMP of the key: %v", err)
				}
				return v
			}
			before := state()
			n := calls.n.Load()
			res, fb, err := r.Peek(bg, "k")
			if err != nil || fb || !res.Allowed || res.Remaining != 1 {
				t.Fatalf("Peek with 1 of 3 left: %+v, fallback %v, %v", res, fb, err)
			}
			if n := calls.n.Load() - n; n != 1 {
				t.Fatalf("Peek sent %d commands, want 1", n)
			}
			if state() != before {
				t.Fatal("Peek changed the key's state in Redis")
			}
			if _, err := r.Allow(bg, "k", 1); err != nil {
				t.Fatal(err)
			}
			res, _, err = r.Peek(bg, "k")
			if err != nil || res.Allowed || res.Remaining != 0 || res.RetryAfter <= 0 {
				t.Fatalf("Peek with nothing left: %+v, %v", res, err)
			}
		})
	}
}

// TestRedisPeekFallsBack: with Redis unreachable a peek reads this
// instance's share in the local fallback, counting nothing there either.
func TestRedisPeekFallsBack(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: closedAddr(t), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	for _, alg := range allAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			var falls atomic.Int64
			r, err := NewRedis(c, alg, Limit{Quantity: 8, Period: time.Minute}, RedisConfig{ExpectedInstances: 4,
				Clock: shedtest.NewClock(contractStart), OnFallback: func(error) { falls.Add(1) }})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			// This instance's share: 8 / 4 = 2 units.
			for i, want := range []struct {
				allowed   bool
				remaining int64
			}{{true, 2}, {true, 2}, {true, 1}, {false, 0}} {
				if i >= 2 {
					if _, fb, err := r.Decide(bg, "k", 1); err != nil || !fb {
						t.Fatalf("step %d: Decide: fallback %v, %v", i, fb, err)
					}
				}
				res, fb, err := r.Peek(bg, "k")
				if err != nil || !fb || res.Allowed != want.allowed || res.Remaining != want.remaining {
					t.Fatalf("step %d: Peek %+v, fallback %v, %v; want allowed %v with %d remaining, from the fallback",
						i, res, fb, err, want.allowed, want.remaining)
				}
			}
			if n := falls.Load(); n != 6 {
				t.Fatalf("OnFallback told %d times, want 6 (four peeks, two decisions)", n)
			}
		})
	}
}
