package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/internal/faultproxy"
	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed"
)

// The fault tests put a fault proxy (or a redis-server of their own, to
// kill) between the limiter and Redis, and check what is asked of
// every Redis-backed layer: no error but rejections (no 5xx), decisions
// within the timeout + 20ms, no lease left in Redis once the fault clears,
// admissions during an outage within the share, and back on Redis within
// one probe interval of Redis answering.

const faultTimeout = 50 * time.Millisecond

// load runs workers goroutines, each acquiring and releasing n times on
// key, holding each lease for hold; it fails the test on any error that is
// not a rejection, and returns the admissions.
func load(t *testing.T, l shed.Layer, timings *redistest.Timings, workers, n int, key string, hold time.Duration) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				var ls shed.Lease
				var err error
				timings.Time(func() { ls, err = l.Acquire(context.Background(), shed.Request{Key: key}) })
				if err != nil {
					var rej *shed.Rejection
					if !errors.As(err, &rej) {
						errs <- err
						return
					}
					continue
				}
				admitted.Add(1)
				time.Sleep(hold)
				ls.Release(shed.Completed)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("an error that is not a rejection (a 5xx): %v", err)
	}
	return admitted.Load()
}

// cleared waits until the limiter holds and owes nothing and its sets in
// Redis are empty.
func cleared(t *testing.T, r *RedisLayer, keys ...string) {
	t.Helper()
	c := newClient(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_ = r.renewNow(context.Background()) // retries what is pending now, not at the next tick
		left := int64(0)
		for _, k := range keys {
			left += zcard(t, c, k)
		}
		if r.Held() == 0 && r.Pending() == 0 && left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the fault: held %d, pending %d, %d members left in Redis", r.Held(), r.Pending(), left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Cut replies (Redis ran the script, the client never got the answer):
// go-redis re-sends the acquire, and no lease may be left behind (2-4 of
// 6 slots once leaked in every run).
func TestRedisFaultCutRepliesLeaveNoLease(t *testing.T) {
	for _, rst := range []bool{false, true} {
		t.Run(fmt.Sprintf("rst=%v", rst), func(t *testing.T) {
			c, px := redistest.ProxiedClient(t, redistest.Addr(t))
			r := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 20, PerKey: 6, KeyBy: KeyByClient},
				Prefix: redistest.Prefix(t), ExpectedInstances: 1, Timeout: time.Second})
			px.CutReplies(10, rst)
			var timings redistest.Timings
			admitted := load(t, r, &timings, 8, 40, "k", time.Millisecond)
			px.Heal()
			t.Logf("%d admitted, %d replies cut", admitted, px.Cuts())
			if px.Cuts() == 0 || admitted == 0 {
				t.Fatalf("the test cut %d replies and admitted %d", px.Cuts(), admitted)
			}
			cleared(t, r, r.keyFor(shed.Request{Key: "k"}), r.overallKey())
		})
	}
}

// A Redis slower than the timeout, black-holed, or refusing: every
// decision within the timeout + 20ms, none an error, and nothing left once
// it heals.
func TestRedisFaultDecisionTime(t *testing.T) {
	faults := map[string]func(*faultproxy.Proxy){
		"latency":    func(p *faultproxy.Proxy) { p.SetLatency(2 * faultTimeout) },
		"black hole": func(p *faultproxy.Proxy) { p.BlackHole() },
		"refused":    func(p *faultproxy.Proxy) { p.Refuse() },
	}
	for name, fault := range faults {
		t.Run(name, func(t *testing.T) {
			c, px := redistest.ProxiedClient(t, redistest.Addr(t))
			// A short probe interval, so that many decisions meet the fault
			// rather than the gate.
			r := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 8}, Prefix: redistest.Prefix(t),
				ExpectedInstances: 1, Timeout: faultTimeout, ProbeInterval: 10 * time.Millisecond})
			if ls, err := r.Acquire(context.Background(), shed.Request{}); err != nil {
				t.Fatal(err)
			} else {
				ls.Release(shed.Completed)
			}
			fault(px)
			var timings redistest.Timings
			load(t, r, &timings, 4, 25, "", 2*time.Millisecond)
			timings.Check(t, name, faultTimeout+20*time.Millisecond)
			if r.Fallbacks() == 0 {
				t.Fatal("the fault never made the limiter fall back")
			}
			if err := px.Heal(); err != nil {
				t.Fatal(err)
			}
			if n := r.localLimiter().InFlight(); n != 0 {
				t.Fatalf("%d in flight in the local share after the load", n)
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
	cfg := RedisConfig{Config: Config{Limit: 10, PerKey: 4, KeyBy: KeyByClient}, Prefix: redistest.Prefix(t),
		Timeout: faultTimeout, ProbeInterval: probe}
	ca, _ := redistest.ProxiedClient(t, srv.Addr())
	cb, _ := redistest.ProxiedClient(t, srv.Addr())
	a, b := mustNewRedis(t, ca, cfg), mustNewRedis(t, cb, cfg)
	deadline := time.Now().Add(5 * time.Second)
	for a.Instances() != 2 || b.Instances() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("instances counted: %d and %d, want 2", a.Instances(), b.Instances())
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.Kill()
	ctx := context.Background()
	var held []shed.Lease
	perKey := map[string]int{}
	var timings redistest.Timings
	for i := 0; i < 40; i++ {
		for _, l := range []*RedisLayer{a, b} {
			key := fmt.Sprintf("k%d", i%3)
			var ls shed.Lease
			var err error
			timings.Time(func() { ls, err = l.Acquire(ctx, shed.Request{Key: key}) })
			if err != nil {
				var rej *shed.Rejection
				if !errors.As(err, &rej) || !rej.Fallback {
					t.Fatalf("during the outage: %v", err)
				}
				continue
			}
			if !ls.Fallback {
				t.Fatal("admitted by a dead Redis")
			}
			held = append(held, ls)
			perKey[key]++
		}
	}
	timings.Check(t, "outage", faultTimeout+20*time.Millisecond)
	// Each instance's share: 10/2 = 5 overall, 4/2 = 2 per key.
	if len(held) > 10 {
		t.Fatalf("%d admitted together during the outage, limit 10", len(held))
	}
	for k, n := range perKey {
		if n > 4 {
			t.Fatalf("key %s: %d admitted together during the outage, limit 4", k, n)
		}
	}
	t.Logf("admitted during the outage: %d (limit 10), per key %v (limit 4)", len(held), perKey)
	for _, ls := range held {
		ls.Release(shed.Completed)
	}

	srv.Restart()
	answered := time.Now()
	for {
		ls, err := a.Acquire(ctx, shed.Request{Key: "back"})
		if err == nil && !ls.Fallback {
			ls.Release(shed.Completed)
			break
		}
		if err == nil {
			ls.Release(shed.Completed)
		}
		if time.Since(answered) > probe+faultTimeout+100*time.Millisecond {
			t.Fatalf("still falling back %v after Redis answered (probe interval %v)", time.Since(answered), probe)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("back on Redis %v after it answered (probe interval %v)", time.Since(answered).Round(time.Millisecond), probe)
	cleared(t, a)
}

// Leases released while Redis did not answer are removed as soon as it
// answers again, not at the renewer's next tick (once, with limit 4 and
// TTL 30s, all four released during a failover, 195 of 195 acquires were
// refused over the next 4s with nothing in flight).
func TestRedisReleasesDuringOutageSentOnRecovery(t *testing.T) {
	const probe = 50 * time.Millisecond
	c, px := redistest.ProxiedClient(t, redistest.Addr(t))
	direct := newClient(t)
	r := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 4}, Prefix: redistest.Prefix(t), ExpectedInstances: 1,
		Timeout: faultTimeout, ProbeInterval: probe, TTL: 30 * time.Second})
	ctx := context.Background()
	var held []shed.Lease
	for i := 0; i < 4; i++ {
		ls, err := r.Acquire(ctx, shed.Request{})
		if err != nil || ls.Fallback {
			t.Fatalf("acquire %d: fallback=%v err=%v", i, ls.Fallback, err)
		}
		held = append(held, ls)
	}
	px.BlackHole()
	for _, ls := range held {
		ls.Release(shed.Completed)
	}
	time.Sleep(3 * probe) // the releases fail meanwhile
	if zcard(t, direct, r.overallKey()) != 4 {
		t.Fatal("the releases reached Redis through a black hole")
	}
	if err := px.Heal(); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	for zcard(t, direct, r.overallKey()) != 0 {
		if time.Since(healed) > 10*probe+time.Second {
			t.Fatalf("%d leases still held %v after Redis answered again (pending %d)",
				zcard(t, direct, r.overallKey()), time.Since(healed), r.Pending())
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("released in Redis %v after it answered again", time.Since(healed).Round(time.Millisecond))
	if r.Pending() != 0 {
		t.Fatalf("%d removals still pending", r.Pending())
	}
}
