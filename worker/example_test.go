package worker_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/worker"
)

// pressure is a made-up signal, so that the examples print the same thing
// on every machine; a real service keeps the built-in CPU and scheduler
// latency signals.
type pressure struct{ bits atomic.Uint64 }

func (p *pressure) Set(v float64) { p.bits.Store(math.Float64bits(v)) }
func (p *pressure) Read() float64 { return math.Float64frombits(p.bits.Load()) }

func ExampleNew() {
	// In a service: worker.New(worker.DefaultConfig()) samples CPU and
	// scheduler latency every 250ms. Here a manual clock drives the sampler.
	clock := shedtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var load pressure
	layer, err := worker.New(worker.Config{
		Interval:           worker.DefaultInterval,
		Clock:              clock,
		CPU:                worker.CPUConfig{Disable: true},
		SchedLatencyTarget: -1,
		Signals:            []worker.Signal{{Name: "load", Read: load.Read}},
	})
	if err != nil {
		panic(err)
	}
	defer layer.Close()

	load.Set(2.7) // far past saturation: the level climbs two priorities in one sample
	clock.Advance(250 * time.Millisecond)
	fmt.Printf("level %.1f\n", layer.Level())

	ctx := context.Background()
	for _, p := range []shed.Priority{shed.TestMode, shed.Sheddable, shed.Critical} {
		lease, err := layer.Acquire(ctx, shed.Request{Priority: p})
		var r *shed.Rejection
		if errors.As(err, &r) {
			fmt.Printf("%s: %d %s, retry after %ds\n", p, r.Status, r.Reason, r.RetryAfterSeconds())
			continue
		}
		fmt.Printf("%s: admitted\n", p)
		lease.Release(shed.Completed)
	}

	load.Set(0.3)             // the load went away: shedding eases, one priority per 3s
	for i := 0; i < 40; i++ { // 10s
		clock.Advance(250 * time.Millisecond)
	}
	fmt.Printf("level %.1f, headroom %.1f\n", layer.Level(), layer.Headroom())
	// Output:
	// level 2.0
	// test-mode: 503 temporary-reduced-capacity, retry after 1s
	// sheddable: 503 temporary-reduced-capacity, retry after 1s
	// critical: admitted
	// level 0.0, headroom 0.7
}

// A rate limit in elastic mode goes above its limit while the worker layer
// says the process has headroom, and snaps back when it has not.
func ExampleLayer_Headroom() {
	clock := shedtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var load pressure
	work, _ := worker.New(worker.Config{
		Interval:           worker.DefaultInterval,
		Clock:              clock,
		CPU:                worker.CPUConfig{Disable: true},
		SchedLatencyTarget: -1,
		Signals:            []worker.Signal{{Name: "load", Read: load.Read}},
	})
	defer work.Close()

	perKey, _ := ratelimit.NewMemory(ratelimit.FixedWindow, ratelimit.PerMinute(2), ratelimit.MemoryConfig{Clock: clock})
	defer perKey.Close()
	rate, err := ratelimit.New(ratelimit.Config{
		Clock: clock,
		// Up to 50% over the limit while the worker layer reports at
		// least 20% headroom (shed.DefaultMinHeadroom).
		Enforcement: shed.Enforcement{Mode: shed.Elastic, Overage: 0.5, Headroom: work},
		Rules:       []ratelimit.Rule{{Name: "per-key", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: perKey}},
	})
	if err != nil {
		panic(err)
	}
	defer rate.Close()
	chain, _ := shed.NewChain(shed.Config{Layers: []shed.Layer{rate, work}, Clock: clock})

	try := func() string {
		err := chain.Do(context.Background(), shed.Request{Key: "alice"}, func(context.Context) error { return nil })
		if err != nil {
			return "rejected"
		}
		return "ok"
	}
	load.Set(0.3)
	clock.Advance(250 * time.Millisecond)
	fmt.Printf("headroom %.1f: %s %s %s\n", work.Headroom(), try(), try(), try())

	load.Set(0.95) // busy: the layer sheds, no headroom, the limit snaps back
	for i := 0; i < 4; i++ {
		clock.Advance(250 * time.Millisecond)
	}
	clock.Advance(time.Minute) // a new window
	fmt.Printf("headroom %.1f: %s %s %s\n", work.Headroom(), try(), try(), try())
	// Output:
	// headroom 0.7: ok ok ok
	// headroom 0.0: ok ok rejected
}

// The default learns the in-flight limit of whatever the service waits on.
// Here the service waits on a downstream of 4 connections taking 20ms a
// call, flooded: each round admits as many requests as the limit lets
// through, and the calls take longer once more than 4 are in flight. A
// manual clock stands in for time; a real service just calls
// worker.New(worker.DefaultConfig()).
func ExampleDefaultConfig() {
	clock := shedtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := worker.DefaultConfig()
	cfg.Clock = clock
	cfg.CPU.Disable, cfg.SchedLatencyTarget = true, -1 // this example's CPU is not the service's
	cfg.Limit.Min = 1                                  // the default, one per CPU, would differ between machines
	layer, err := worker.New(cfg)
	if err != nil {
		panic(err)
	}
	defer layer.Close()

	ctx := context.Background()
	sum := 0.0
	for round := 0; round < 400; round++ {
		var leases []shed.Lease
		for {
			// A request that would queue gives up at once here, so that
			// the round sees only what the limit admitted.
			ctx, cancel := context.WithCancel(ctx)
			cancel()
			lease, err := layer.Acquire(ctx, shed.Request{Priority: shed.Default})
			if err != nil {
				break
			}
			leases = append(leases, lease)
		}
		// Past 4 in flight the calls share the connections: each takes
		// longer in proportion.
		const connections, call = 4, 20 * time.Millisecond
		clock.Advance(call * time.Duration(max(len(leases), connections)) / connections)
		for i := range leases {
			leases[i].Release(shed.Completed)
		}
		if round >= 200 {
			sum += float64(layer.Limit())
		}
	}
	// The limit moves around its mean: it probes below itself now and then
	// to keep its baseline current.
	fmt.Printf("learnt limit: %.0f in flight on average (4 connections, and one to cover the gap between a release and the next admission)\n", sum/200)
	// Output:
	// learnt limit: 5 in flight on average (4 connections, and one to cover the gap between a release and the next admission)
}
