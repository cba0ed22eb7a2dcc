package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redistest"
)

// The Redis Cluster tests, on the 3-master, 3-replica cluster
// scripts/test.sh starts. The full load (500 req/s for 15s, the master
// killed at 5s) is scaled down (redistest.FailoverLoad; LOADSHED_CLUSTER_LOAD=full
// runs the full size) to keep the suite within its time budget.
const (
	// clusterLost is how many decisions a killed master may have
	// acknowledged without its replica having them yet (asynchronous
	// replication: on loopback, well under a millisecond of writes).
	clusterLost = 3
)

var allAlgorithms = []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingLog, SlidingWindow}

// clusterLimit is a limit of q units that does not refill within a test,
// so that what every algorithm admits is a count against q.
func clusterLimit(q int64) Limit { return Limit{Quantity: q, Period: time.Hour} }

// newClusterStore returns a store on c, its connections open and its
// script loaded (a cold client's first calls can take longer than the
// timeout on a loaded machine), and the Redis errors it fell back on.
func newClusterStore(t *testing.T, c redis.UniversalClient, alg Algorithm, limit Limit, prefix string, timeout time.Duration) (*Redis, *fallbackCauses) {
	t.Helper()
	causes := &fallbackCauses{}
	r, err := NewRedis(c, alg, limit, RedisConfig{Prefix: prefix, ExpectedInstances: 1, OverLimitKeys: -1, OnFallback: causes.add,
		Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := r.script.Load(bg, c)
		if err == nil {
			if cc, ok := c.(*redis.ClusterClient); ok {
				err = cc.ForEachShard(bg, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() })
			}
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("warming up: %v", err)
		}
	}
	r.gate.Answered()
	return r, causes
}

// fallbackCauses collects the errors a store fell back on.
type fallbackCauses struct {
	mu     sync.Mutex
	first  error
	last   error
	lastAt time.Time
	n      int
}

func (f *fallbackCauses) add(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first == nil {
		f.first = err
	}
	f.last, f.lastAt = err, time.Now()
	f.n++
}

func (f *fallbackCauses) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		return "no fallback"
	}
	return fmt.Sprintf("%d fallbacks, the first on %v, the last at %v on %v", f.n, f.first, f.lastAt.Format("15:04:05.000"), f.last)
}

// Four hosts of sixteen goroutines on one key admit exactly the limit,
// whatever the algorithm.
func TestClusterExactOnOneKey(t *testing.T) {
	cl := redistest.UseCluster(t)
	const hosts, workers, each, limit = 4, 16, 10, 100
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			prefix := testPrefix(t)
			var admitted, fallbacks atomic.Int64
			var wg sync.WaitGroup
			for h := 0; h < hosts; h++ {
				// Exactness is the point here, not the timeout: 64 goroutines
				// dialling at once under the race detector can miss 50ms.
				r, _ := newClusterStore(t, cl.Client(), alg, clusterLimit(limit), prefix, time.Second)
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < each; i++ {
							res, fb, err := r.Decide(bg, "one-key", 1)
							if err != nil {
								t.Error(err)
								return
							}
							if fb {
								fallbacks.Add(1)
							}
							if res.Allowed {
								admitted.Add(1)
							}
						}
					}()
				}
			}
			wg.Wait()
			if admitted.Load() != limit || fallbacks.Load() != 0 {
				t.Fatalf("%d admitted of %d requests, %d fallbacks; want exactly %d and none",
					admitted.Load(), hosts*workers*each, fallbacks.Load(), limit)
			}
		})
	}
}

// A master killed mid-load: no error reaches a
// caller, no decision waits longer than the timeout (+20ms), the store is
// back on Redis within a second of the cluster's cluster_state:ok (go-redis
// alone reloads its slot map a minute later), and what Redis and the
// fallback admitted together stays within the limit plus what this
// instance last learnt was left (its one share of the outage).
func TestClusterFailover(t *testing.T) {
	cl := redistest.UseCluster(t)
	rate, run, killAt := redistest.FailoverLoad()
	// 60% of what the run offers: the master dies with units left to
	// overspend (600 at the suite's size, 4500 at full size).
	limit := int64(rate) * int64(run/time.Millisecond) * 6 / 10000
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cl.Restore() // after the last subtest's failover
			r, causes := newClusterStore(t, cl.Client(), alg, clusterLimit(limit), testPrefix(t), 0)
			const key = "failover"
			if _, fb, err := r.Decide(bg, key, 1); err != nil || fb {
				t.Fatalf("warm-up: fallback=%v err=%v", fb, err)
			}
			slot := cl.Slot(r.keyOf(key))
			var timings redistest.Timings
			killed := make(chan (<-chan time.Time), 1)
			time.AfterFunc(killAt, func() { killed <- cl.KillMaster(slot) })
			ds := redistest.Drive(rate, run, func() (d redistest.Decision) {
				var res Result
				var err error
				start := time.Now()
				timings.Time(func() { res, d.Fallback, err = r.Decide(bg, key, 1) })
				d.Took, d.Admitted, d.Err = time.Since(start), res.Allowed, err
				return d
			})
			ok := <-<-killed
			s := redistest.Summarize(ds)
			lastRemaining := learntBefore(t, ds, s.FirstFallback, limit)
			bound := int(limit + min(lastRemaining, limit) + 1 + clusterLost) // +1: the warm-up
			t.Logf("%v: %d requests, %d admitted (bound %d: limit %d + remaining %d at the outage), %d fallbacks, %d errors, back on Redis %v after cluster_state:ok, longest decision %v",
				alg, s.Requests, s.Admitted, bound, limit, lastRemaining, s.Fallbacks, s.Errors, s.BackAfter(ok).Round(time.Millisecond), s.MaxTook.Round(time.Millisecond))
			if s.Errors != 0 {
				t.Errorf("%d errors returned to callers, first %v", s.Errors, s.FirstErr)
			}
			if s.Fallbacks == 0 {
				t.Error("no decision fell back: the kill did not reach the key's master")
			}
			if back := s.BackAfter(ok); ok.IsZero() || back > time.Second {
				t.Errorf("back on Redis %v after cluster_state:ok (%s), want within 1s (%v)", back, ok.Format("15:04:05.000"), causes)
			}
			if s.Admitted+1 > bound {
				t.Errorf("admitted %d (+1 warm-up), over the bound %d", s.Admitted, bound)
			}
			timings.Check(t, "decisions during a failover", DefaultRedisTimeout+20*time.Millisecond)
		})
	}
}

// learntBefore returns the units Redis said were left in its last answer
// before the outage began, read back from the decisions: the admissions
// Redis granted before it (each of limit units) are what it had counted.
func learntBefore(t *testing.T, ds []redistest.Decision, outage time.Time, limit int64) int64 {
	t.Helper()
	if outage.IsZero() {
		return limit
	}
	var admittedByRedis int64 = 1 // the warm-up
	for _, d := range ds {
		if !d.At.Before(outage) {
			break
		}
		if d.Admitted && !d.Fallback {
			admittedByRedis++
		}
	}
	return max(limit-admittedByRedis, 0)
}

// A slot migrated mid-load (MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE)
// costs no fallback and no unit: the store follows ASK and MOVED (and
// retries TRYAGAIN) within its timeout, and admits exactly the limit.
func TestClusterReshard(t *testing.T) {
	cl := redistest.UseCluster(t)
	const limit = 100
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			// 250ms: see TestClusterReshardNoFallback in internal/redisx.
			r, causes := newClusterStore(t, cl.Client(), alg, clusterLimit(limit), testPrefix(t), 250*time.Millisecond)
			const key = "reshard"
			slot := cl.Slot(r.keyOf(key))
			moved := make(chan struct{})
			time.AfterFunc(300*time.Millisecond, func() {
				defer close(moved)
				cl.MigrateSlot(slot, 5*time.Millisecond)
			})
			ds := redistest.Drive(200, 1500*time.Millisecond, func() (d redistest.Decision) {
				res, fb, err := r.Decide(bg, key, 1)
				d.Admitted, d.Fallback, d.Err = res.Allowed, fb, err
				return d
			})
			<-moved
			s := redistest.Summarize(ds)
			t.Logf("%v: %d requests, %d admitted (limit %d), %d fallbacks, %d errors", alg, s.Requests, s.Admitted, limit, s.Fallbacks, s.Errors)
			if s.Errors != 0 || s.Fallbacks != 0 || s.Admitted != limit {
				t.Errorf("%d admitted, %d fallbacks (%v), %d errors (first %v); want exactly %d, none, none",
					s.Admitted, s.Fallbacks, causes, s.Errors, s.FirstErr, limit)
			}
		})
	}
}
