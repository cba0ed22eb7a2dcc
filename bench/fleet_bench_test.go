package bench

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/loadshed/loadshed/fleet"
	"github.com/loadshed/loadshed/shed"
)

// newFleet returns a fleet layer on the bench's Redis, under a prefix of
// its own, closed when the benchmark or test ends.
func newFleet(tb testing.TB, cfg fleet.Config) (*fleet.Layer, *RoundTrips) {
	tb.Helper()
	c, rt := redisClient(tb)
	cfg.Client = c
	if cfg.Prefix == "" {
		cfg.Prefix = uniquePrefix(tb)
	}
	s, err := fleet.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, rt
}

// BenchmarkFleetDecision measures the fleet layer's request path: one
// Acquire and its Release, admitted, which touch only this instance's
// atomics (the background tick talks to Redis, not the request). The
// lease lives in a reused variable, as in the chain's reused Grant. The
// rows report the Redis round trips per decision, which should be ~0.
func BenchmarkFleetDecision(b *testing.B) {
	ctx := context.Background()
	s, rt := newFleet(b, fleet.Config{Capacity: 1 << 40, Instance: "bench", Interval: fleet.DefaultInterval})
	for _, p := range []shed.Priority{shed.Sheddable, shed.Critical} {
		req := shed.Request{Priority: p}
		b.Run(p.String()+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			trips := rt.Trips()
			var ls shed.Lease
			var err error
			for b.Loop() {
				if ls, err = s.Acquire(ctx, req); err != nil {
					b.Fatal(err)
				}
				ls.Release(shed.Completed)
			}
			b.ReportMetric(float64(rt.Trips()-trips)/float64(b.N), "rt/op")
		})
		b.Run(p.String()+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			trips := rt.Trips()
			b.RunParallel(func(pb *testing.PB) {
				var ls shed.Lease
				var err error
				for pb.Next() {
					if ls, err = s.Acquire(ctx, req); err != nil {
						b.Error(err)
						return
					}
					ls.Release(shed.Completed)
				}
			})
			b.ReportMetric(float64(rt.Trips()-trips)/float64(b.N), "rt/op")
		})
	}
	// A refusal allocates its *shed.Rejection, as every layer's does.
	full, _ := newFleet(b, fleet.Config{Capacity: 10, Instance: "bench-full", Interval: fleet.DefaultInterval})
	hold, err := full.Acquire(ctx, shed.Request{Priority: shed.Sheddable, Cost: 6})
	if err != nil {
		b.Fatal(err)
	}
	defer hold.Release(shed.Completed)
	b.Run("refused/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := full.Acquire(ctx, shed.Request{Priority: shed.Sheddable}); err == nil {
					b.Error("admitted over the ceiling")
					return
				}
			}
		})
	})
}

// fleetTrips runs instances fleet layers with the given interval for d,
// with workers goroutines each acquiring and releasing as fast as they can
// (0: no requests at all), and returns the Redis round trips per second
// and the decisions per second.
func fleetTrips(tb testing.TB, instances, workers int, interval, d time.Duration) (tripsPerSec, decisionsPerSec float64) {
	prefix := uniquePrefix(tb)
	var ss []*fleet.Layer
	var rts []*RoundTrips
	for i := 0; i < instances; i++ {
		s, rt := newFleet(tb, fleet.Config{Capacity: 1 << 40, Prefix: prefix, Instance: "i" + strconv.Itoa(i), Interval: interval})
		ss, rts = append(ss, s), append(rts, rt)
	}
	trips := func() (n int64) {
		for _, rt := range rts {
			n += rt.Trips()
		}
		return n
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	counts := make([]int64, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := ss[w%len(ss)]
			req := shed.Request{Priority: shed.Default}
			var ls shed.Lease
			var err error
			for n := int64(0); ; n++ {
				if n%1024 == 0 {
					select {
					case <-stop:
						counts[w] = n
						return
					default:
					}
				}
				if ls, err = s.Acquire(context.Background(), req); err != nil {
					tb.Error(err)
					counts[w] = n
					return
				}
				ls.Release(shed.Completed)
			}
		}()
	}
	t0, start := trips(), time.Now()
	time.Sleep(d)
	t1, el := trips(), time.Since(start)
	close(stop)
	wg.Wait()
	var decisions int64
	for _, n := range counts {
		decisions += n
	}
	return float64(t1-t0) / el.Seconds(), float64(decisions) / el.Seconds()
}

// BenchmarkRedisFleetTrips shows that the fleet layer's Redis load does
// not follow the request rate: 4 instances at a 100ms interval make about
// 40 round trips a second (instances ÷ interval), idle or flat out. Each
// iteration is one second of wall time.
func BenchmarkRedisFleetTrips(b *testing.B) {
	for _, workers := range []int{0, 8} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) {
			var rt, dec float64
			for i := 0; i < b.N; i++ {
				r, d := fleetTrips(b, 4, workers, 100*time.Millisecond, time.Second)
				rt, dec = rt+r, dec+d
			}
			b.ReportMetric(rt/float64(b.N), "rt/s")
			b.ReportMetric(dec/float64(b.N), "decisions/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// The Redis round trips per second do not follow the request rate: idle or
// flat out, at most one script per instance per interval. (Busy, they may
// be fewer: on a saturated CPU the ticks themselves run late.)
func TestFleetTripsIndependentOfRequestRate(t *testing.T) {
	const instances, interval = 2, 20 * time.Millisecond
	perTick := instances / interval.Seconds()
	idle, _ := fleetTrips(t, instances, 0, interval, 400*time.Millisecond)
	busy, dec := fleetTrips(t, instances, 4, interval, 400*time.Millisecond)
	t.Logf("round trips/s: idle %.0f, busy %.0f (%.0f decisions/s); instances ÷ interval = %.0f", idle, busy, dec, perTick)
	if dec < 100*busy {
		t.Fatalf("only %.0f decisions/s against %.0f round trips/s: the load did not run", dec, busy)
	}
	for _, rt := range []float64{idle, busy} {
		if rt > 1.25*perTick+5 {
			t.Fatalf("%.0f round trips/s, above instances ÷ interval (%.0f): requests reached Redis", rt, perTick)
		}
	}
	if idle == 0 {
		t.Fatal("no round trips at all: the ticks did not run")
	}
}
