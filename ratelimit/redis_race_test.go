package ratelimit

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed/shedtest"
)

// Several hosts (each its own client and connection pool) × many goroutines
// on one key, against the real server.

const (
	raceHosts   = 4
	raceWorkers = 8 // goroutines per host
	racePerStep = 6 // requests per goroutine per instant
)

// hammer runs raceHosts×raceWorkers goroutines, each sending racePerStep
// requests of cost 1 through its host's limiter, all at once, and returns
// how many were admitted.
func hammer(t *testing.T, hosts []*Redis, key string) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, len(hosts)*raceWorkers)
	for _, h := range hosts {
		for w := 0; w < raceWorkers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < racePerStep; i++ {
					res, fb, err := h.Decide(bg, key, 1)
					if err != nil || fb {
						errs <- err
						return
					}
					if res.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a decision failed or fell back: %v", err)
	}
	return admitted.Load()
}

// At fixed instants (one shared manual clock read by every host's scripts),
// stepping a quarter period at a time over three periods, the exact
// algorithms never admit more than their bound over any span, and at the
// first instant admit exactly the limit: no update is lost either.
func TestRedisDistributedRace(t *testing.T) {
	limit := Limit{Quantity: 40, Period: time.Second, Burst: 40}
	for _, alg := range allAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			clk := shedtest.NewClock(contractStart)
			prefix := testPrefix(t)
			var hosts []*Redis
			for i := 0; i < raceHosts; i++ {
				hosts = append(hosts, fixedRedis(t, testRedisClient(t), clk, alg, limit,
					RedisConfig{Prefix: prefix, OverLimitKeys: -1, Timeout: 2 * time.Second}))
			}
			type grant struct{ at, n int64 }
			var grants []grant
			// Starting three quarters into a window puts a burst at a
			// window's end, the sliding window counter's worst case.
			step := int64(limit.Period / 4)
			for i := int64(3); i < 15; i++ {
				clk.Set(contractStart.Add(time.Duration(i * step)))
				n := hammer(t, hosts, "hot")
				grants = append(grants, grant{i * step, n})
				if i == 3 && n != limit.Quantity {
					t.Fatalf("first instant: %d of %d requests admitted, want exactly %d",
						n, raceHosts*raceWorkers*racePerStep, limit.Quantity)
				}
			}
			p := int64(limit.Period)
			worst := 0.0
			for i := range grants {
				sum := int64(0)
				for j := i; j < len(grants); j++ {
					sum += grants[j].n
					span := grants[j].at - grants[i].at
					if span >= p {
						break
					}
					var bound int64
					switch alg {
					case TokenBucket, LeakyBucket:
						bound = limit.Burst + span/int64(limit.Interval())
					case FixedWindow:
						if floorTo(grants[j].at, p) != floorTo(grants[i].at, p) {
							continue
						}
						bound = limit.Quantity
					default: // any span shorter than the period
						bound = limit.Quantity
					}
					if alg == SlidingWindow {
						worst = max(worst, float64(sum)/float64(limit.Quantity))
						continue
					}
					if sum > bound {
						t.Fatalf("admitted %d from +%v to +%v, bound %d", sum, time.Duration(grants[i].at), time.Duration(grants[j].at), bound)
					}
				}
			}
			if alg == SlidingWindow {
				// The counter assumes the previous window's units were spread
				// evenly; a burst at its end lets more through in the period
				// that straddles the edge.
				t.Logf("sliding-window counter: at most %.2f× the limit admitted within one period (%d hosts × %d goroutines, a burst at the end of a window, then steps of P/4)",
					worst, raceHosts, raceWorkers)
				if worst > 2 {
					t.Fatalf("sliding-window counter admitted %.2f× the limit within one period; it is bounded by 2×", worst)
				}
			}
		})
	}
}

// The same race on the server's own clock: a per-hour limit, so that
// nothing refills during the test, admits exactly the limit (or one more for
// the buckets if a refill instant falls within the run).
func TestRedisDistributedRaceServerTime(t *testing.T) {
	limit := PerHour(50)
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			prefix := testPrefix(t)
			var hosts []*Redis
			for i := 0; i < raceHosts; i++ {
				r, err := NewRedis(testRedisClient(t), alg, limit, RedisConfig{Prefix: prefix, OverLimitKeys: -1, Timeout: 2 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Close() })
				hosts = append(hosts, r)
			}
			n := hammer(t, hosts, "hot")
			if n < limit.Quantity || n > limit.Quantity+1 {
				t.Fatalf("%d hosts × %d goroutines admitted %d, want %d", raceHosts, raceWorkers, n, limit.Quantity)
			}
		})
	}
}
