package concurrency

import (
	"container/heap"
	"context"
	"math"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// server simulates a service whose latency is flat up to a knee and grows
// in proportion to the concurrency past it (a saturated server queues: its
// throughput stays at knee/base and each request waits for those ahead).
// It is deterministic and runs on the manual clock: nothing sleeps.
type server struct {
	knee    int64
	base    time.Duration
	demand  int           // requests the clients keep trying to have in flight
	slower  float64       // multiplies base: a service that got slower
	step    time.Duration // simulation step
	clock   *shedtest.Clock
	l       *Layer
	pending leaseHeap
	outcome shed.Outcome
}

type timedLease struct {
	done  time.Time
	lease shed.Lease
}

type leaseHeap []timedLease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].done.Before(h[j].done) }
func (h leaseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *leaseHeap) Push(x any)        { *h = append(*h, x.(timedLease)) }
func (h *leaseHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (s *server) latency(inFlight int64) time.Duration {
	f := math.Max(1, float64(inFlight)/float64(s.knee))
	if s.slower > 0 {
		f *= s.slower
	}
	return time.Duration(float64(s.base) * f)
}

// run simulates d and returns the limit at the end of each window.
func (s *server) run(d, window time.Duration) []int64 {
	var limits []int64
	end := s.clock.Now().Add(d)
	nextWindow := s.clock.Now().Add(window)
	for s.clock.Now().Before(end) {
		now := s.clock.Now()
		for s.pending.Len() > 0 && !s.pending[0].done.After(now) {
			tl := heap.Pop(&s.pending).(timedLease)
			tl.lease.Release(s.outcome)
		}
		for s.pending.Len() < s.demand {
			ls, err := s.l.Acquire(context.Background(), shed.Request{})
			if err != nil {
				break
			}
			heap.Push(&s.pending, timedLease{now.Add(s.latency(s.l.InFlight())), ls})
		}
		if !now.Before(nextWindow) {
			limits = append(limits, s.l.Limit())
			nextWindow = nextWindow.Add(window)
		}
		s.clock.Advance(s.step)
	}
	return limits
}

func newSim(t *testing.T, a Adaptive, knee int64, demand int) *server {
	clock := shedtest.NewClock(t0)
	l := mustNew(t, Config{Adaptive: &a, Clock: clock})
	return &server{knee: knee, base: 10 * time.Millisecond, demand: demand, step: time.Millisecond, clock: clock, l: l}
}

// The band the adaptive limit is documented to settle in, for a knee K and
// the default tolerance 1: the fixed point L = K + √L, within
// [K, K + √K + 2], and moving within 2 over the last 100 windows.
func TestAdaptiveConvergesNearTheKnee(t *testing.T) {
	for _, knee := range []int64{20, 50, 200} {
		t.Run("knee="+itoa(int(knee)), func(t *testing.T) {
			sim := newSim(t, Adaptive{Floor: 5, Ceiling: 1000, Window: 100 * time.Millisecond}, knee, 4*int(knee)+100)
			limits := sim.run(30*time.Second, 100*time.Millisecond)
			last := limits[len(limits)-100:]
			lo, hi := last[0], last[0]
			for _, v := range last {
				lo, hi = min(lo, v), max(hi, v)
			}
			fixed := float64(knee) + math.Sqrt(float64(knee)+math.Sqrt(float64(knee)))
			t.Logf("knee %d: limit over the last 100 windows in [%d, %d]; fixed point %.1f; first windows %v", knee, lo, hi, fixed, limits[:8])
			if top := float64(knee) + math.Sqrt(float64(knee)) + 2; lo < knee || float64(hi) > top {
				t.Fatalf("limit left the band [%d, %.1f]: [%d, %d]", knee, top, lo, hi)
			}
			if hi-lo > 2 {
				t.Fatalf("limit oscillates over the last 100 windows: [%d, %d]", lo, hi)
			}
			if math.Abs(float64(last[len(last)-1])-fixed) > 2 {
				t.Fatalf("settled at %d, fixed point %.1f", last[len(last)-1], fixed)
			}
		})
	}
}

func TestAdaptiveIgnoresDroppedAndUnused(t *testing.T) {
	for _, o := range []shed.Outcome{shed.Dropped, shed.Unused} {
		sim := newSim(t, Adaptive{Floor: 5, Ceiling: 1000, Window: 100 * time.Millisecond}, 50, 300)
		sim.outcome = o
		limits := sim.run(5*time.Second, 100*time.Millisecond)
		for _, v := range limits {
			if v != 5 {
				t.Fatalf("%v outcomes moved the limit to %d", o, v)
			}
		}
	}
	// Failed work is a real outcome: it does move the limit.
	sim := newSim(t, Adaptive{Floor: 5, Ceiling: 1000, Window: 100 * time.Millisecond}, 50, 300)
	sim.outcome = shed.Failed
	if limits := sim.run(5*time.Second, 100*time.Millisecond); limits[len(limits)-1] <= 5 {
		t.Fatal("Failed outcomes did not move the limit")
	}
}

func TestAdaptiveDoesNotGrowWhenUnused(t *testing.T) {
	sim := newSim(t, Adaptive{Floor: 5, Ceiling: 1000, Window: 100 * time.Millisecond}, 500, 10)
	limits := sim.run(10*time.Second, 100*time.Millisecond)
	if v := limits[len(limits)-1]; v > 2*10+5 {
		t.Fatalf("limit grew to %d with only 10 requests ever in flight", v)
	}
}

func TestAdaptiveStaysWithinFloorAndCeiling(t *testing.T) {
	sim := newSim(t, Adaptive{Floor: 5, Ceiling: 30, Window: 100 * time.Millisecond}, 100, 400)
	for _, v := range sim.run(10*time.Second, 100*time.Millisecond) {
		if v < 5 || v > 30 {
			t.Fatalf("limit %d outside [5, 30]", v)
		}
	}
	if sim.l.Limit() != 30 {
		t.Fatalf("below the knee the limit should reach its ceiling, got %d", sim.l.Limit())
	}
}

// TestAdaptiveRecoversFromAFasterAndASlowerService: the no-load latency
// moves both ways, and the limit follows.
func TestAdaptiveFollowsTheService(t *testing.T) {
	sim := newSim(t, Adaptive{Floor: 5, Ceiling: 1000, Window: 100 * time.Millisecond}, 50, 300)
	sim.run(20*time.Second, 100*time.Millisecond)
	settled := sim.l.Limit()
	// The service halves its capacity (the knee falls to 25): the limit
	// falls with it.
	sim.knee = 25
	limits := sim.run(20*time.Second, 100*time.Millisecond)
	if v := limits[len(limits)-1]; v < 25 || v > 35 {
		t.Fatalf("after the knee fell from 50 to 25 the limit went from %d to %d", settled, v)
	}
	// And back.
	sim.knee = 50
	limits = sim.run(20*time.Second, 100*time.Millisecond)
	if v := limits[len(limits)-1]; v < 50 || v > 62 {
		t.Fatalf("after the knee rose back to 50 the limit is %d", v)
	}
}

// TestAdaptiveRebasesWhenTheServiceGetsSlowerForGood: every request gets
// ten times slower, so even the floor's latency is over tolerance. After
// three such windows the no-load latency is re-measured, and the limit
// climbs back to the knee.
func TestAdaptiveRebasesWhenTheServiceGetsSlowerForGood(t *testing.T) {
	sim := newSim(t, Adaptive{Floor: 10, Ceiling: 1000, Window: 100 * time.Millisecond}, 50, 300)
	sim.run(20*time.Second, 100*time.Millisecond)
	sim.slower = 10
	limits := sim.run(60*time.Second, 100*time.Millisecond)
	sawFloor := false
	for _, v := range limits {
		sawFloor = sawFloor || v == 10
	}
	if v := limits[len(limits)-1]; !sawFloor || v < 50 || v > 62 {
		t.Fatalf("after a tenfold slowdown: reached the floor %v, limit now %d (want back near the knee, 50)", sawFloor, v)
	}
}
