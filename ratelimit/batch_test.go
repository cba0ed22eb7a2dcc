package ratelimit

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed/shedtest"
)

// One host draining a key in batched mode needs about one round trip per
// chunk, and still admits exactly the limit.
func TestBatchRoundTrips(t *testing.T) {
	c, cmds := countedClient(t)
	clk := shedtest.NewClock(contractStart)
	limit := PerSecond(100)
	r := fixedRedis(t, c, clk, FixedWindow, limit, RedisConfig{Batch: BatchConfig{Fraction: 0.1}})
	admitted := 0
	var first int64 // the connection's set-up and the script's first load
	for i := 0; i < 150; i++ {
		if i == 1 {
			first = cmds.n.Load()
		}
		res, fb, err := r.Decide(bg, "k", 1)
		if err != nil || fb {
			t.Fatalf("request %d: fallback=%v err=%v", i, fb, err)
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted != 100 {
		t.Fatalf("admitted %d, want exactly the limit (100)", admitted)
	}
	// 9 more chunks of 10; the last one leaves Redis empty, so the
	// over-limit cache answers the rest.
	if n := cmds.n.Load() - first; n != 9 {
		t.Fatalf("%d round trips for the 149 decisions after the first, want 9", n)
	}
}

// Several hosts leasing from one key overshoot the limit by at most
// hosts × (chunk − 1) within any period, as BatchConfig documents; the test
// measures how far they actually go under the load that shows it: one
// request per host as a window ends, which leaves each holding most of a
// fresh lease, then a flood as the next window begins; and light traffic
// (one request per host per step) in between.
func TestBatchOvershoot(t *testing.T) {
	const hosts, workers, flood = 4, 4, 40
	limit := PerSecond(100)
	cases := []Algorithm{FixedWindow, SlidingLog, TokenBucket}
	for _, alg := range cases {
		t.Run(alg.String(), func(t *testing.T) {
			clk := shedtest.NewClock(contractStart)
			prefix := testPrefix(t)
			var ls []*Redis
			var cmds []*commandCounter
			for i := 0; i < hosts; i++ {
				c, n := countedClient(t)
				cmds = append(cmds, n)
				ls = append(ls, fixedRedis(t, c, clk, alg, limit, RedisConfig{Prefix: prefix,
					Batch: BatchConfig{Fraction: 0.1}, Timeout: 2 * time.Second}))
			}
			chunk := batchChunk(alg, limit, 0.1)
			bound := int64(hosts) * (chunk - 1)
			type grant struct{ at, n int64 }
			var grants []grant
			step := int64(limit.Period / 20)
			decisions := 0
			for i := int64(0); i < 200; i++ {
				clk.Set(contractStart.Add(time.Duration(i * step)))
				w, per := 1, 1
				switch i % 40 {
				case 20:
					w, per = workers, flood
				case 19:
				default:
					if i%3 != 0 {
						continue
					}
				}
				var n atomic.Int64
				var wg sync.WaitGroup
				for _, l := range ls {
					for range w {
						wg.Add(1)
						decisions += per
						go func() {
							defer wg.Done()
							for k := 0; k < per; k++ {
								res, fb, err := l.Decide(bg, "hot", 1)
								if err != nil || fb {
									t.Errorf("fallback=%v err=%v", fb, err)
									return
								}
								if res.Allowed {
									n.Add(1)
								}
							}
						}()
					}
				}
				wg.Wait()
				grants = append(grants, grant{i * step, n.Load()})
			}
			p := int64(limit.Period)
			worst := int64(0)
			for i := range grants {
				sum := int64(0)
				for j := i; j < len(grants); j++ {
					span := grants[j].at - grants[i].at
					if span >= p {
						break
					}
					sum += grants[j].n
					var lim int64
					switch alg {
					case FixedWindow:
						if floorTo(grants[j].at, p) != floorTo(grants[i].at, p) {
							continue
						}
						lim = limit.Quantity
					case SlidingLog:
						lim = limit.Quantity
					default:
						lim = limit.Burst + span/int64(limit.Interval())
					}
					worst = max(worst, sum-lim)
				}
			}
			trips := int64(0)
			for _, c := range cmds {
				trips += c.n.Load()
			}
			t.Logf("%v, %d hosts, chunk %d: worst overshoot %d units over the limit in one period (bound %d); %d round trips for %d decisions (%.3f per decision)",
				alg, hosts, chunk, worst, bound, trips, decisions, float64(trips)/float64(decisions))
			if worst > bound {
				t.Fatalf("overshoot %d exceeds the documented bound %d", worst, bound)
			}
			if alg == FixedWindow && worst == 0 {
				t.Fatal("no overshoot measured: the load does not exercise what the bound is about")
			}
		})
	}
}

// A refund in batched mode goes back into the lease, and to Redis when it
// would not fit under the chunk.
func TestBatchRefund(t *testing.T) {
	c, cmds := countedClient(t)
	clk := shedtest.NewClock(contractStart)
	r := fixedRedis(t, c, clk, FixedWindow, PerSecond(10), RedisConfig{Batch: BatchConfig{Fraction: 0.5}})
	if res, _ := r.Allow(bg, "k", 1); !res.Allowed { // leases 5, holds 4
		t.Fatal(res)
	}
	before := cmds.n.Load()
	// 4 + 1 > chunk − 1: the unit goes back to Redis.
	if err := r.Refund(bg, "k", 1); err != nil || cmds.n.Load() != before+1 {
		t.Fatalf("refund beyond the chunk: err=%v, %d commands, want 1", err, cmds.n.Load()-before)
	}
	if res, _ := r.Allow(bg, "k", 1); !res.Allowed { // from the lease: 3 left
		t.Fatal(res)
	}
	before = cmds.n.Load()
	if err := r.Refund(bg, "k", 1); err != nil || cmds.n.Load() != before {
		t.Fatalf("refund into the lease: err=%v, %d commands", err, cmds.n.Load()-before)
	}
	admitted := 0
	for i := 0; i < 20; i++ {
		if res, _ := r.Allow(bg, "k", 1); res.Allowed {
			admitted++
		}
	}
	// Both units taken were given back (one to Redis, one to the lease):
	// the whole window's 10 are still to take, 4 from the lease.
	if admitted != 10 {
		t.Fatalf("admitted %d more, want 10", admitted)
	}
}

// A lease too small for a request pays part of it: no unit is lost.
func TestBatchLeftoverPaysPart(t *testing.T) {
	c := testRedisClient(t)
	clk := shedtest.NewClock(contractStart)
	r := fixedRedis(t, c, clk, FixedWindow, PerSecond(10), RedisConfig{Batch: BatchConfig{Fraction: 0.3}})
	// Leases 3, holds 2; then cost 3 takes the 2 and 1 more from Redis
	// (leasing up to 3); then the last units.
	admitted := int64(0)
	for _, cost := range []int64{1, 3, 3, 3, 3, 1, 1} {
		if res, _ := r.Allow(bg, "k", cost); res.Allowed {
			admitted += cost
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d units, want all 10 of the window", admitted)
	}
}
