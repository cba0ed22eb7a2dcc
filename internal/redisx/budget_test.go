package redisx_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
)

// A request passing two Redis-backed layers on one client waits for a
// black-holed Redis once, not once per layer (two layers with 50ms timeouts
// once took 105-112ms).
func TestOneRedisBudgetPerRequest(t *testing.T) {
	const timeout, probe = 50 * time.Millisecond, 10 * time.Millisecond
	c, px := redistest.ProxiedClient(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	rl, err := ratelimit.NewRedis(c, ratelimit.FixedWindow, ratelimit.PerHour(100),
		ratelimit.RedisConfig{Prefix: prefix + "rl:", Timeout: timeout, ProbeInterval: probe, ExpectedInstances: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	cc, err := concurrency.NewRedis(c, concurrency.RedisConfig{Config: concurrency.Config{Limit: 100},
		Prefix: prefix + "cc:", Timeout: timeout, ProbeInterval: probe, ExpectedInstances: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := context.Background()
	request := func() (fellBack int) {
		if _, fb, err := rl.Decide(ctx, "k", 1); err != nil {
			t.Fatal(err)
		} else if fb {
			fellBack++
		}
		ls, err := cc.Acquire(ctx, shed.Request{})
		var rej *shed.Rejection
		if err != nil && !errors.As(err, &rej) {
			t.Fatal(err)
		}
		if err == nil {
			if ls.Fallback {
				fellBack++
			}
			ls.Release(shed.Completed)
		}
		return fellBack
	}
	// Healthy: both on Redis (a loaded machine may miss the timeout on
	// the first calls, which dial and load the scripts).
	for deadline := time.Now().Add(5 * time.Second); request() != 0; time.Sleep(2 * probe) {
		if time.Now().After(deadline) {
			t.Fatal("healthy: the layers still fall back")
		}
	}
	px.BlackHole()
	// Each request comes after a probe interval, so that each meets the
	// black hole afresh.
	var timings redistest.Timings
	for i := 0; i < 5; i++ {
		var fb int
		timings.Time(func() { fb = request() })
		if fb != 2 {
			t.Fatalf("black hole: %d layers fell back, want 2", fb)
		}
		time.Sleep(2 * probe)
	}
	timings.Check(t, "two layers, one request", timeout+20*time.Millisecond)
	if d, _ := timings.Max(); d < timeout*15/16 {
		t.Fatalf("the request took %v: it never met the black hole", d)
	}
}
