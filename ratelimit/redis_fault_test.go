package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/internal/faultproxy"
	"github.com/loadshed/loadshed/internal/redistest"
)

// The fault tests for the rate-limit store: see
// concurrency/redis_fault_test.go for the list.

const faultTimeout = 50 * time.Millisecond

// A decision whose reply is lost is not run again by go-redis: it charged
// once, and the caller learns that it fell back (a retried
// decision must not charge twice without the caller knowing).
func TestRedisFaultLostReplyChargesOnce(t *testing.T) {
	c, px := redistest.ProxiedClient(t, redistest.Addr(t))
	r, err := NewRedis(c, FixedWindow, PerHour(10), RedisConfig{Prefix: testPrefix(t), Timeout: time.Second, ExpectedInstances: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, fb, err := r.Decide(bg, "warm", 1); err != nil || fb { // a connection open and idle
		t.Fatalf("warming up: fallback=%v err=%v", fb, err)
	}
	px.CutOnce(false) // the decision's reply; a retry on a new connection would charge again
	if _, fb, err := r.Decide(bg, "k", 1); err != nil || !fb {
		t.Fatalf("lost reply: fallback=%v err=%v, want the fallback", fb, err)
	}
	px.Heal()
	r.gate.Answered() // skip the probe interval
	res, fb, err := r.Decide(bg, "k", 1)
	if err != nil || fb {
		t.Fatalf("healed: fallback=%v err=%v", fb, err)
	}
	if res.Remaining != 8 {
		t.Fatalf("remaining %d after the lost decision and this one, want 8: the lost one ran %d times",
			res.Remaining, 10-1-res.Remaining)
	}
}

// load runs workers goroutines deciding n times each on key, failing the
// test on any error, and returns the admissions.
func load(t *testing.T, l Store, timings *redistest.Timings, workers, n int, key string) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				var res Result
				var err error
				timings.Time(func() { res, err = l.Allow(context.Background(), key, 1) })
				if err != nil {
					t.Errorf("an error (a 5xx): %v", err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return admitted.Load()
}

// Cut replies, latency past the timeout, a black hole, refused
// connections: no error, every decision within the timeout + 20ms, and the
// limit still holds.
func TestRedisFaultDecisions(t *testing.T) {
	faults := map[string]func(*faultproxy.Proxy){
		"fin cuts":   func(p *faultproxy.Proxy) { p.CutReplies(10, false) },
		"rst cuts":   func(p *faultproxy.Proxy) { p.CutReplies(10, true) },
		"latency":    func(p *faultproxy.Proxy) { p.SetLatency(2 * faultTimeout) },
		"black hole": func(p *faultproxy.Proxy) { p.BlackHole() },
		"refused":    func(p *faultproxy.Proxy) { p.Refuse() },
	}
	for name, fault := range faults {
		t.Run(name, func(t *testing.T) {
			c, px := redistest.ProxiedClient(t, redistest.Addr(t))
			r, err := NewRedis(c, FixedWindow, PerHour(50), RedisConfig{Prefix: testPrefix(t), Timeout: faultTimeout,
				ProbeInterval: 10 * time.Millisecond, ExpectedInstances: 1, OverLimitKeys: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			fault(px)
			var timings redistest.Timings
			start := time.Now()
			admitted := load(t, r, &timings, 4, 30, "k")
			timings.Check(t, name, faultTimeout+20*time.Millisecond)
			if err := px.Heal(); err != nil {
				t.Fatal(err)
			}
			// Redis and the fallback each admit at most the limit, in each
			// hourly window the run touched (the windows start on the hour,
			// by Redis's clock or this one: a second either side of it).
			windows := int64(1)
			if start.Add(-time.Second).Truncate(time.Hour) != time.Now().Add(time.Second).Truncate(time.Hour) {
				windows = 2
			}
			if admitted > windows*2*50 {
				t.Fatalf("%d admitted for a limit of 50 in %d window(s)", admitted, windows)
			}
		})
	}
}

// Redis killed: two instances that counted each other admit at most the
// limit together; restarted, they are back on Redis within one probe
// interval of its answering.
func TestRedisFaultOutageShareAndReturn(t *testing.T) {
	srv := redistest.StartServer(t)
	const probe = 100 * time.Millisecond
	var limiters []*Redis
	prefix := testPrefix(t)
	for i := 0; i < 2; i++ {
		c, _ := redistest.ProxiedClient(t, srv.Addr())
		r, err := NewRedis(c, SlidingWindow, PerHour(10), RedisConfig{Prefix: prefix, Timeout: faultTimeout, ProbeInterval: probe})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		limiters = append(limiters, r)
	}
	deadline := time.Now().Add(5 * time.Second)
	for limiters[0].Instances() != 2 || limiters[1].Instances() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("instances counted: %d and %d, want 2", limiters[0].Instances(), limiters[1].Instances())
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.Kill()
	var timings redistest.Timings
	admitted := map[string]int{}
	for i := 0; i < 30; i++ {
		for _, r := range limiters {
			key := fmt.Sprintf("k%d", i%2)
			var res Result
			var fb bool
			var err error
			timings.Time(func() { res, fb, err = r.Decide(bg, key, 1) })
			if err != nil || !fb {
				t.Fatalf("during the outage: fallback=%v err=%v", fb, err)
			}
			if res.Allowed {
				admitted[key]++
			}
		}
	}
	timings.Check(t, "outage", faultTimeout+20*time.Millisecond)
	for k, n := range admitted {
		if n > 10 {
			t.Fatalf("key %s: %d admitted by both instances during the outage, limit 10", k, n)
		}
	}
	t.Logf("admitted during the outage per key: %v (limit 10)", admitted)

	srv.Restart()
	answered := time.Now()
	for {
		if _, fb, err := limiters[0].Decide(bg, "back", 1); err != nil {
			t.Fatal(err)
		} else if !fb {
			break
		}
		if time.Since(answered) > probe+faultTimeout+100*time.Millisecond {
			t.Fatalf("still falling back %v after Redis answered (probe interval %v)", time.Since(answered), probe)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("back on Redis %v after it answered (probe interval %v)", time.Since(answered).Round(time.Millisecond), probe)
}

// Entering the fallback starts from what Redis last said of the key
// (a fresh fallback once let a per-hour limit of 1,600 admit 1,595
// through Redis and then 806 more). An instance alone (its
// share is the whole limit) thus admits no more than the limit across an
// outage, whatever the algorithm.
func TestRedisFallbackStartsFromLearntState(t *testing.T) {
	const limit, before = 100, 95
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			c, px := redistest.ProxiedClient(t, redistest.Addr(t))
			r, err := NewRedis(c, alg, Limit{Quantity: limit, Period: time.Hour},
				RedisConfig{Prefix: testPrefix(t), Timeout: faultTimeout, ProbeInterval: time.Hour, ExpectedInstances: 1, OverLimitKeys: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			admitted := 0
			for i := 0; i < before; i++ {
				res, fb, err := r.Decide(bg, "k", 1)
				if err != nil || fb {
					t.Fatalf("through Redis, decision %d: fallback=%v err=%v", i, fb, err)
				}
				if res.Allowed {
					admitted++
				}
			}
			px.BlackHole()
			fallbacks := 0
			for i := 0; i < 2*limit; i++ {
				res, fb, err := r.Decide(bg, "k", 1)
				if err != nil {
					t.Fatal(err)
				}
				if fb {
					fallbacks++
				}
				if res.Allowed {
					admitted++
				}
			}
			if fallbacks != 2*limit {
				t.Fatalf("%d of %d decisions fell back while Redis was a black hole", fallbacks, 2*limit)
			}
			if admitted != limit {
				t.Fatalf("%d admitted through Redis and then the fallback, want exactly the limit %d", admitted, limit)
			}
		})
	}
}
