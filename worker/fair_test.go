package worker

import (
	"context"
	"math"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// A service of pool connections behind the layer, on a manual clock: each
// admitted request holds a connection for its client's service time, and
// waits for one, in order, when all are busy. Clients send at a steady
// rate, in steps of 1ms; the layer's answers are collected before the
// clock moves, so that every run is the same.

type poolClient struct {
	key     string
	prio    shed.Priority
	rate    float64
	service time.Duration

	acc                      float64
	offered, served, refused int
	counting                 bool
	errs                     map[string]int
}

type poolSim struct {
	t     *testing.T
	l     *Layer
	clock *shedtest.Clock
	conns int

	clients           []*poolClient
	spawned, received int
	results           chan poolResult
	busy, waiting     []poolHold
}

type poolResult struct {
	c     *poolClient
	lease shed.Lease
	err   error
}

type poolHold struct {
	c     *poolClient
	lease shed.Lease
	until time.Time
}

func newPoolSim(t *testing.T, cfg Config, conns int, clients ...*poolClient) *poolSim {
	t.Helper()
	clock := shedtest.NewClock(t0)
	l := signalLayer(t, clock, cfg)
	return &poolSim{t: t, l: l, clock: clock, conns: conns, clients: clients, results: make(chan poolResult, 1<<16)}
}

func (s *poolSim) settle() {
	for s.spawned != s.l.Queued()+s.received {
		select {
		case r := <-s.results:
			s.received++
			if r.err != nil {
				if r.c.counting {
					r.c.refused++
					if r.c.errs == nil {
						r.c.errs = map[string]int{}
					}
					r.c.errs[r.err.Error()]++
				}
				continue
			}
			if r.c.counting {
				r.c.served++
			}
			s.waiting = append(s.waiting, poolHold{c: r.c, lease: r.lease})
			s.startWaiting()
		default:
			runtime.Gosched()
		}
	}
}

func (s *poolSim) startWaiting() {
	for len(s.busy) < s.conns && len(s.waiting) > 0 {
		h := s.waiting[0]
		s.waiting = s.waiting[1:]
		h.until = s.clock.Now().Add(h.c.service)
		s.busy = append(s.busy, h)
	}
}

func (s *poolSim) run(d time.Duration, counting bool) {
	const step = time.Millisecond
	ctx := context.Background()
	for el := time.Duration(0); el < d; el += step {
		for _, c := range s.clients {
			c.counting = counting
			c.acc += c.rate * step.Seconds()
			for ; c.acc >= 1; c.acc-- {
				if counting {
					c.offered++
				}
				req := shed.Request{Key: c.key, Priority: c.prio, Deadline: s.clock.Now().Add(time.Second)}
				s.spawned++
				c := c
				go func() {
					ls, err := s.l.Acquire(ctx, req)
					s.results <- poolResult{c: c, lease: ls, err: err}
				}()
				s.settle()
			}
		}
		s.clock.Advance(step)
		now := s.clock.Now()
		kept := s.busy[:0]
		var done []poolHold
		for _, h := range s.busy {
			if now.Before(h.until) {
				kept = append(kept, h)
			} else {
				done = append(done, h)
			}
		}
		s.busy = kept
		s.startWaiting()
		for _, h := range done {
			h.lease.Release(shed.Completed)
		}
		s.settle()
	}
}

func perSecond(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

// The default set-up, a service of 8 connections x 20ms (400/s): one
// client floods at 5x, 10x and 50x, fifty light ones ask 0.1x between
// them. The light clients are served as they ask; the flood takes the
// rest.
func TestFairWorkerFloodLeavesLightClientsTheirShare(t *testing.T) {
	for _, x := range []float64{5, 10, 50} {
		t.Run("", func(t *testing.T) {
			heavy := &poolClient{key: "heavy", prio: shed.Default, rate: x * 400, service: 20 * time.Millisecond}
			clients := []*poolClient{heavy}
			for i := 0; i < 50; i++ {
				clients = append(clients, &poolClient{key: string(rune('A' + i)), prio: shed.Default, rate: 0.8, service: 20 * time.Millisecond, acc: float64(i) / 50})
			}
			s := newPoolSim(t, DefaultConfig(), 8, clients...)
			s.run(3*time.Second, false)
			const window = 4 * time.Second
			s.run(window, true)
			var lo, ls int
			for _, c := range clients[1:] {
				lo += c.offered
				ls += c.served
			}
			good := perSecond(heavy.served+ls, window)
			lerrs := map[string]int{}
			for _, c := range clients[1:] {
				for k, v := range c.errs {
					lerrs[k] += v
				}
			}
			t.Logf("light refusals: %v; heavy: %v", lerrs, heavy.errs)
			t.Logf("heavy at %vx: light clients served %d of %d; heavy %.0f/s; all %.0f/s of 400/s (limit %d)", x, ls, lo, perSecond(heavy.served, window), good, s.l.Limit())
			if ls < lo*999/1000 {
				t.Fatalf("light clients served %d of %d, want 99.9%%", ls, lo)
			}
			if good < 0.95*400 {
				t.Fatalf("served %.0f/s of 400/s: the flood does not take what the light clients leave", good)
			}
		})
	}
}

// Without fairness the same flood takes the light clients' share: the
// test above measures something.
func TestFairWorkerOffLetsTheFloodIn(t *testing.T) {
	heavy := &poolClient{key: "heavy", prio: shed.Default, rate: 10 * 400, service: 20 * time.Millisecond}
	clients := []*poolClient{heavy}
	for i := 0; i < 50; i++ {
		clients = append(clients, &poolClient{key: string(rune('A' + i)), prio: shed.Default, rate: 0.8, service: 20 * time.Millisecond, acc: float64(i) / 50})
	}
	cfg := DefaultConfig()
	cfg.Fairness.Off = true
	s := newPoolSim(t, cfg, 8, clients...)
	s.run(3*time.Second, false)
	s.run(4*time.Second, true)
	var lo, ls int
	for _, c := range clients[1:] {
		lo += c.offered
		ls += c.served
	}
	t.Logf("without fairness: light clients served %d of %d", ls, lo)
	if ls > lo*9/10 {
		t.Fatalf("light clients served %d of %d without fairness: the flood does not overload", ls, lo)
	}
}

// A critical flood from one client and a light critical client: fairness
// holds within the critical priority too, and the default client is
// served what critical leaves.
func TestFairWorkerWithinCritical(t *testing.T) {
	heavy := &poolClient{key: "heavy", prio: shed.Critical, rate: 2000, service: 20 * time.Millisecond}
	light := &poolClient{key: "light", prio: shed.Critical, rate: 20, service: 20 * time.Millisecond}
	s := newPoolSim(t, DefaultConfig(), 8, heavy, light)
	s.run(3*time.Second, false)
	s.run(4*time.Second, true)
	t.Logf("critical: light served %d of %d, heavy %d of %d", light.served, light.offered, heavy.served, heavy.offered)
	if light.served < light.offered*999/1000 {
		t.Fatalf("light critical client served %d of %d", light.served, light.offered)
	}
	top := s.l.TopClients(5)
	if len(top) != 2 || top[0].Key != "heavy" || top[0].Priority != shed.Critical || top[0].Share < 0.9 {
		t.Fatalf("TopClients: %+v, want heavy first with most of the share, then light", top)
	}
	gauges := map[string]float64{}
	s.l.ReportGauges(func(g layerkit.Gauge) {
		if g.Priority == shed.Critical {
			gauges[g.Name] = g.Value
		}
	})
	if gauges[layerkit.GaugeClientsQueued] < 1 || gauges[layerkit.GaugeFairShare] <= 0 || gauges[layerkit.GaugeFairShare] > 1 {
		t.Fatalf("critical gauges %v: want the heavy client queued and a share in (0, 1]", gauges)
	}
}

// With one client the layer behaves as before: everything it can serve
// is served.
func TestFairWorkerOneClient(t *testing.T) {
	for _, off := range []bool{false, true} {
		one := &poolClient{key: "one", prio: shed.Default, rate: 2000, service: 20 * time.Millisecond}
		cfg := DefaultConfig()
		cfg.Fairness.Off = off
		s := newPoolSim(t, cfg, 8, one)
		s.run(3*time.Second, false)
		s.run(4*time.Second, true)
		t.Logf("fairness off %v: served %.0f/s, refused %d", off, perSecond(one.served, 4*time.Second), one.refused)
		if perSecond(one.served, 4*time.Second) < 0.95*400 {
			t.Fatalf("fairness off %v: one client served %.0f/s of 400/s", off, perSecond(one.served, 4*time.Second))
		}
	}
}

// The shed level's refusals within the marginal priority fall on the
// client that sends the most: at level 2.5 (half of default shed), a
// client sending 2,000 requests an interval loses them, 50 clients
// sending 10 each lose none, and the level still refuses half.
func TestFairLevelShedsTheHeaviestFirst(t *testing.T) {
	for _, off := range []bool{false, true} {
		cfg := Config{Workers: 1 << 20}
		cfg.Fairness.Off = off
		l, _, _ := pressureLayer(t, cfg)
		setLevel(l, 2.5)
		ctx := context.Background()
		var heavy, light, heavyOK, lightOK int
		send := func(count bool) {
			for i := 0; i < 2000; i++ {
				ls, err := l.Acquire(ctx, shed.Request{Key: "heavy", Priority: shed.Default})
				if count {
					heavy++
				}
				if err == nil {
					ls.Release(shed.Completed)
					if count {
						heavyOK++
					}
				}
				if i%4 != 0 {
					continue
				}
				ls, err = l.Acquire(ctx, shed.Request{Key: string(rune('A' + i/4%50)), Priority: shed.Default})
				if count {
					light++
				}
				if err == nil {
					ls.Release(shed.Completed)
					if count {
						lightOK++
					}
				}
			}
		}
		send(false)
		if l.marg != nil {
			l.marg.roll(0.5) // as the sampler does at the interval's end
		}
		send(true)
		all := float64(heavyOK+lightOK) / float64(heavy+light)
		t.Logf("fairness off %v: heavy admitted %d of %d, light %d of %d, all %.3f", off, heavyOK, heavy, lightOK, light, all)
		if all < 0.45 || all > 0.55 {
			t.Fatalf("fairness off %v: admitted %.3f of the default priority at level 2.5, want half", off, all)
		}
		if !off && lightOK < light*999/1000 {
			t.Fatalf("light clients admitted %d of %d at level 2.5, want all: the heavy one sends most", lightOK, light)
		}
		if off && lightOK > light*7/10 {
			t.Fatalf("fairness off: light clients admitted %d of %d, want about half (a random draw)", lightOK, light)
		}
	}
}

func TestWaterLevel(t *testing.T) {
	for _, c := range []struct {
		counts []uint32
		target float64
		want   float64
	}{
		{[]uint32{10, 10, 1000}, 520, 500},
		{[]uint32{10, 10, 10}, 15, 5},
		{[]uint32{0, 0, 5}, 5, 5},
		{[]uint32{1, 2, 3}, 0, 0},
	} {
		if got := waterLevel(slices.Clone(c.counts), c.target); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("waterLevel(%v, %v) = %v, want %v", c.counts, c.target, got, c.want)
		}
	}
}
