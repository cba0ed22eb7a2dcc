package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/worker"
)

// The worker layer's request path reads one atomic value the sampler
// published: the target is at most 5 ns and no allocation for the check,
// whatever the level. Acquire and Release add a lease, and with a worker
// budget an atomic count in flight. The sampler runs as in production
// (every 250ms); its signals read an idle process, so the level stays 0
// except where a benchmark sets it.

func newWorker(b *testing.B, cfg worker.Config) *worker.Layer {
	b.Helper()
	if cfg.Interval == 0 {
		cfg.Interval = worker.DefaultInterval
	}
	l, err := worker.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// shedding returns a layer whose level the sampler holds within sheddable
// traffic, so that the marginal draw runs: a made-up pressure rises past
// ShedAt until the level is above 1, then stays inside the hysteresis band.
func shedding(b *testing.B) *worker.Layer {
	var lp atomic.Pointer[worker.Layer]
	l := newWorker(b, worker.Config{
		CPU: worker.CPUConfig{Disable: true}, SchedLatencyTarget: -1, Smoothing: 1,
		Interval: time.Millisecond,
		Signals: []worker.Signal{{Name: "made_up", Read: func() float64 {
			if l := lp.Load(); l != nil && l.Level() > 1.2 {
				return 0.75
			}
			return 0.9
		}}},
	})
	lp.Store(l)
	for l.Level() <= 1.2 {
		time.Sleep(time.Millisecond)
	}
	if lv := l.Level(); lv >= 2 {
		b.Fatalf("level %v, want within sheddable", lv)
	}
	return l
}

func BenchmarkWorkerCheck(b *testing.B) {
	for _, c := range []struct {
		name  string
		layer func(b *testing.B) *worker.Layer
	}{
		{"level=0", func(b *testing.B) *worker.Layer { return newWorker(b, worker.Config{}) }},
		{"marginal", shedding},
	} {
		l := c.layer(b)
		b.Run(c.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if l.Sheds(shed.Sheddable) {
					n++
				}
			}
			_ = n
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				n := 0
				for pb.Next() {
					if l.Sheds(shed.Sheddable) {
						n++
					}
				}
				_ = n
			})
		})
	}
}

func BenchmarkWorkerAcquireRelease(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, l *worker.Layer, p shed.Priority) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := shed.Request{Priority: p}
			// Reused, as a shed.Grant reuses it: a lease released through
			// its Releaser interface escapes, so a fresh variable per
			// request would be the caller's allocation, not the layer's.
			var ls shed.Lease
			var err error
			for pb.Next() {
				if ls, err = l.Acquire(ctx, req); err == nil {
					ls.Release(shed.Completed)
				}
			}
		})
	}
	b.Run("no-budget", func(b *testing.B) { run(b, newWorker(b, worker.Config{}), shed.Default) })
	b.Run("budget", func(b *testing.B) { run(b, newWorker(b, worker.Config{Workers: 1 << 20}), shed.Default) })
	// CPUBound's path: the budget, and a yield (runtime.Gosched) per
	// admitted request, which is most of its cost.
	b.Run("budget+yield", func(b *testing.B) {
		run(b, newWorker(b, worker.Config{Workers: 1 << 20, Yield: true}), shed.Default)
	})
}
