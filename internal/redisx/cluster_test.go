package redisx_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
)

// clusterLayers returns a concurrency layer with an overall and a
// per-key limit, and a rate limiter whose key rlKey lives on another
// master of the same client, both warm (connections open, scripts loaded),
// and the concurrency layer's overall set (its slot is the one to move).
func clusterLayers(t *testing.T, cl *redistest.Cluster, timeout time.Duration) (cc *concurrency.RedisLayer, rl *ratelimit.Redis, rlKey, ccKey string) {
	t.Helper()
	c := cl.Client()
	prefix := redistest.Prefix(t)
	cc, err := concurrency.NewRedis(c, concurrency.RedisConfig{Config: concurrency.Config{Limit: 40, PerKey: 10},
		Prefix: prefix + "cc:", ExpectedInstances: 1, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	rl, err = ratelimit.NewRedis(c, ratelimit.FixedWindow, ratelimit.PerHour(rlLimit),
		ratelimit.RedisConfig{Prefix: prefix + "rl:", ExpectedInstances: 1, OverLimitKeys: -1, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })
	ccKey = redisx.NewKeys(prefix + "cc:").Fixed("leases")
	ccMaster := cl.MasterOf(cl.Slot(ccKey)).Addr
	for i := 0; rlKey == ""; i++ {
		if k := string(rune('a' + i)); cl.MasterOf(cl.Slot(redisx.NewKeys(prefix+"rl:").Key("fw", k))).Addr != ccMaster {
			rlKey = k
		}
	}
	ctx := context.Background()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, fb, err := rl.Decide(ctx, rlKey, 1)
		ls, aerr := cc.Acquire(ctx, shed.Request{Key: "warm"})
		if aerr == nil {
			ls.Release(shed.Completed)
		}
		if err == nil && !fb && aerr == nil && !ls.Fallback {
			return cc, rl, rlKey, ccKey
		}
		if time.Now().After(deadline) {
			t.Fatalf("warming up: %v %v", err, aerr)
		}
	}
}

const rlLimit = 200

// TRYAGAIN is no outage: while a slot migrates with a two-key script's
// keys split, the concurrency layer retries within its timeout and then
// decides that one request locally, and the gate its client shares stays
// open, so that a rate limiter on another master never falls back (the
// shared gate once sent every key of the client to the fallback). The
// layers have a 250ms timeout, as in TestClusterReshardNoFallback: on the
// shared two-core machine running the suite under the race detector a
// round trip to the other master can take more than the default 50ms,
// which is a slow Redis (an outage by the layers' definition), not the
// TRYAGAIN this test is about.
func TestClusterTryAgainIsNoOutage(t *testing.T) {
	cl := redistest.UseCluster(t)
	const timeout = 250 * time.Millisecond
	cc, rl, rlKey, ccKey := clusterLayers(t, cl, timeout)
	ctx := context.Background()
	held, err := cc.Acquire(ctx, shed.Request{Key: "held"}) // the overall set exists in the source
	if err != nil || held.Fallback {
		t.Fatalf("acquire: %v fallback=%v", err, held.Fallback)
	}
	_, finish := cl.BeginMigration(cl.Slot(ccKey))
	var timings redistest.Timings
	for i := 0; i < 5; i++ {
		var ls shed.Lease
		var err error
		// A key with no set yet: its script's keys are split (TRYAGAIN).
		timings.Time(func() { ls, err = cc.Acquire(ctx, shed.Request{Key: "new"}) })
		if err == nil {
			ls.Release(shed.Completed)
		}
		if cc.Fallback() {
			t.Fatalf("TRYAGAIN sent the client's gate into fallback (request %d)", i)
		}
		if _, fb, err := rl.Decide(ctx, rlKey, 1); err != nil || fb {
			t.Fatalf("the rate limiter on another master fell back during the migration: %v", err)
		}
	}
	timings.Check(t, "acquires meeting TRYAGAIN", timeout+20*time.Millisecond)
	finish(0)
	ls, err := cc.Acquire(ctx, shed.Request{Key: "new"})
	if err != nil || ls.Fallback {
		t.Fatalf("after the migration: %v fallback=%v", err, ls.Fallback)
	}
	ls.Release(shed.Completed)
	held.Release(shed.Completed)
}

// A slot migrated mid-load (redis-cli's way: MIGRATING/IMPORTING, MIGRATE,
// SETSLOT NODE) under a concurrency layer with an overall and a per-key
// limit, and a rate limiter on another master of the same client: no
// decision falls back, the rate limiter admits exactly its limit, and the
// concurrency layer never holds more than its limit. The layers have a
// 250ms timeout here: on the shared two-core machine running the suite
// under the race detector a MIGRATE can stall a node past 50ms, which is a
// slow Redis (an outage by the layers' definition), not the redirections
// this test is about.
func TestClusterReshardNoFallback(t *testing.T) {
	cl := redistest.UseCluster(t)
	cc, rl, rlKey, ccKey := clusterLayers(t, cl, 250*time.Millisecond)
	slot := cl.Slot(ccKey)
	ctx := context.Background()
	var inFlight, maxInFlight, ccFallbacks atomic.Int64
	moved := make(chan struct{})
	time.AfterFunc(300*time.Millisecond, func() {
		defer close(moved)
		cl.MigrateSlot(slot, 5*time.Millisecond)
	})
	var n atomic.Int64
	ds := redistest.Drive(200, 1500*time.Millisecond, func() (d redistest.Decision) {
		res, fb, err := rl.Decide(ctx, rlKey, 1)
		d.Admitted, d.Fallback, d.Err = res.Allowed, fb, err
		key := string(rune('0' + n.Add(1)%8))
		ls, err := cc.Acquire(ctx, shed.Request{Key: key})
		var rej *shed.Rejection
		switch {
		case errors.As(err, &rej):
			if rej.Fallback {
				ccFallbacks.Add(1)
			}
		case err != nil:
			d.Err = err
		default:
			if ls.Fallback {
				ccFallbacks.Add(1)
			}
			now := inFlight.Add(ls.Cost)
			for m := maxInFlight.Load(); now > m && !maxInFlight.CompareAndSwap(m, now); m = maxInFlight.Load() {
			}
			time.Sleep(20 * time.Millisecond)
			inFlight.Add(-ls.Cost)
			ls.Release(shed.Completed)
		}
		return d
	})
	<-moved
	s := redistest.Summarize(ds)
	t.Logf("reshard of the concurrency layer's slot %d: rate limiter %d admitted of %d (limit %d, less 1 for the warm-up), %d fallbacks; concurrency %d fallbacks, at most %d in flight (limit 40); %d errors",
		slot, s.Admitted, s.Requests, rlLimit, s.Fallbacks, ccFallbacks.Load(), maxInFlight.Load(), s.Errors)
	if s.Errors != 0 {
		t.Errorf("%d errors, first %v", s.Errors, s.FirstErr)
	}
	if s.Fallbacks != 0 || ccFallbacks.Load() != 0 {
		t.Errorf("%d rate-limit and %d concurrency decisions fell back while every node was up", s.Fallbacks, ccFallbacks.Load())
	}
	if want := min(s.Requests, rlLimit-1); s.Admitted != want {
		t.Errorf("rate limiter admitted %d, want exactly %d", s.Admitted, want)
	}
	if maxInFlight.Load() > 40 {
		t.Errorf("%d in flight, over the limit of 40", maxInFlight.Load())
	}
}

// A pipeline to a node whose slot migrates, with a first script whose keys
// are split (TRYAGAIN) and a second whose one key is gone (ASK): the
// second runs on the target, the first comes back as not run, and no
// command is sent twice at once (go-redis re-sends a batch whose first
// reply is TRYAGAIN whole, beside its ASK-redirected commands, unless they
// are NoRetry: the race detector sees one command read by two goroutines).
func TestClusterRunAllTryAgainBesideAsk(t *testing.T) {
	cl := redistest.UseCluster(t)
	c := cl.Client()
	tag := "{" + redistest.Prefix(t) + "runall}"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Set(ctx, tag+"present", 1, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	s := redisx.NewScript("local n = 0 for _, k in ipairs(KEYS) do n = n + redis.call('EXISTS', k) end return n")
	if err := s.Load(ctx, c); err != nil {
		t.Fatal(err)
	}
	_, finish := cl.BeginMigration(cl.Slot(tag + "present"))
	defer finish(0)
	for i := 0; i < 3; i++ {
		runCtx, cancelRun := context.WithTimeout(ctx, 100*time.Millisecond)
		cmds := s.RunAll(runCtx, c, []redisx.Call{
			{Keys: []string{tag + "present", tag + "absent"}},
			{Keys: []string{tag + "gone"}},
		})
		cancelRun()
		if err := cmds[0].Err(); !redisx.NotRun(err) {
			t.Errorf("split keys: %v, want a reply saying the script did not run", err)
		}
		if n, err := cmds[1].Int64(); err != nil || n != 0 {
			t.Errorf("key gone: %d, %v; want 0 from the target", n, err)
		}
	}
}
