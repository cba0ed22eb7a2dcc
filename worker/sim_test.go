package worker

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// mix is the offered traffic's share by priority index (test-mode,
// sheddable, default, critical).
var mix = [shed.NumPriorities]float64{0.1, 0.2, 0.6, 0.1}

// plant is a simulated service: its pressure is the load the layer admits
// against capacity, with a little deterministic noise. The test sets the
// offered load (in units of capacity); the layer's injected signal reads it.
type plant struct {
	offered atomic.Uint64 // float64 bits
	layer   *Layer
	noise   *rand.Rand
}

func (p *plant) setOffered(f float64) { p.offered.Store(math.Float64bits(f)) }

func (p *plant) admittedShare() float64 {
	v := uint32(p.layer.state.Load())
	a := 0.0
	for i, s := range mix {
		a += s * (1 - shedFraction(v, i))
	}
	return a
}

func (p *plant) read() float64 {
	r := math.Float64frombits(p.offered.Load()) * p.admittedShare()
	return r * (1 + 0.03*(2*p.noise.Float64()-1))
}

// simLayer returns a layer driven only by the plant, on a manual clock.
func simLayer(t *testing.T, cfg Config) (*Layer, *plant, *shedtest.Clock) {
	t.Helper()
	clock := shedtest.NewClock(t0)
	p := &plant{noise: rand.New(rand.NewPCG(1, 2))}
	l := signalLayer(t, clock, cfg, Signal{Name: "sim", Read: p.read})
	p.layer = l
	return l, p, clock
}

func fractions(l *Layer) [shed.NumPriorities]float64 {
	var f [shed.NumPriorities]float64
	v := uint32(l.state.Load())
	for i := range f {
		f[i] = shedFraction(v, i)
	}
	return f
}

func TestSimStepOverloadShedsInOrder(t *testing.T) {
	l, p, clock := simLayer(t, Config{})
	p.setOffered(0.5)
	for i := 0; i < 20; i++ {
		clock.Advance(DefaultInterval)
	}
	if l.Level() != 0 {
		t.Fatalf("at half load: level %v, want 0", l.Level())
	}
	p.setOffered(5)
	firstFull := [shed.NumPriorities]time.Duration{-1, -1, -1, -1}
	var settled time.Duration = -1
	for i := 1; i <= 80; i++ {
		clock.Advance(DefaultInterval)
		f := fractions(l)
		// Lower priorities are always shed at least as much as higher ones.
		for j := 1; j < shed.NumPriorities; j++ {
			if f[j] > f[j-1] {
				t.Fatalf("tick %d: priority %d shed %v, more than priority %d (%v)", i, j, f[j], j-1, f[j-1])
			}
		}
		if f[shed.Critical.Index()] != 0 {
			t.Fatalf("tick %d: critical shed %v without ShedCritical", i, f[3])
		}
		for j, x := range f {
			if x == 1 && firstFull[j] < 0 {
				firstFull[j] = time.Duration(i) * DefaultInterval
			}
		}
		if pr := l.snap.Load().utilization; settled < 0 && pr < DefaultShedAt {
			settled = time.Duration(i) * DefaultInterval
		}
	}
	if firstFull[0] < 0 || firstFull[1] < 0 || firstFull[0] > firstFull[1] {
		t.Fatalf("test-mode fully shed at %v, sheddable at %v: want test-mode first, both", firstFull[0], firstFull[1])
	}
	// 5x offered with 10% critical: everything but critical and a sliver
	// of default must go.
	f := fractions(l)
	if f[2] < 0.8 || f[2] == 1 {
		t.Fatalf("default shed %v, want most but not all of it", f[2])
	}
	if settled < 0 || settled > 3*time.Second {
		t.Fatalf("pressure below ShedAt after %v, want within 3s of the step", settled)
	}
	t.Logf("test-mode fully shed after %v, sheddable after %v; pressure below %.1f after %v; level %.3f",
		firstFull[0], firstFull[1], DefaultShedAt, settled, l.Level())
}

func TestSimNoFlappingUnderSteadyOverload(t *testing.T) {
	l, p, clock := simLayer(t, Config{})
	p.setOffered(5)
	for i := 0; i < 40; i++ { // 10s to settle
		clock.Advance(DefaultInterval)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	reversals, lastDir, prev := 0, 0, l.Level()
	for i := 0; i < 240; i++ { // a minute of steady overload
		clock.Advance(DefaultInterval)
		lv := l.Level()
		lo, hi = math.Min(lo, lv), math.Max(hi, lv)
		dir := 0
		if lv > prev {
			dir = 1
		} else if lv < prev {
			dir = -1
		}
		if dir != 0 && lastDir != 0 && dir != lastDir {
			reversals++
		}
		if dir != 0 {
			lastDir = dir
		}
		prev = lv
		if pr := l.snap.Load().utilization; pr > 0.9 {
			t.Fatalf("tick %d: pressure %.3f, want it held near the band", i, pr)
		}
	}
	if hi-lo > 0.05 || reversals > 2 {
		t.Fatalf("level moved within [%.4f, %.4f] with %d reversals over a minute of steady overload: flapping", lo, hi, reversals)
	}
	t.Logf("steady 5x: level within [%.4f, %.4f], %d reversals", lo, hi, reversals)
}

func TestSimMarginalFractionConverges(t *testing.T) {
	l, p, clock := simLayer(t, Config{})
	// 2x offered: test-mode and sheddable go, and about half of default.
	p.setOffered(2)
	var last []float64
	for i := 0; i < 120; i++ {
		clock.Advance(DefaultInterval)
		if i >= 80 {
			last = append(last, fractions(l)[2])
		}
	}
	lo, hi := last[0], last[0]
	for _, f := range last {
		lo, hi = math.Min(lo, f), math.Max(hi, f)
	}
	f := fractions(l)
	if f[0] != 1 || f[1] != 1 {
		t.Fatalf("fractions %v: want test-mode and sheddable fully shed", f)
	}
	// Admitted load within the band means default's fraction is between
	// these (0.1 + 0.6(1-x) critical and default admitted, times 2).
	want := func(pressure float64) float64 { return 1 - (pressure/2-0.1)/0.6 }
	if hi-lo > 0.03 || lo < want(0.82) || hi > want(0.68) {
		t.Fatalf("default's shed fraction in [%.3f, %.3f] over the last 10s, want it settled within [%.3f, %.3f]",
			lo, hi, want(0.82), want(0.68))
	}
	t.Logf("2x: default's shed fraction settled in [%.3f, %.3f]", lo, hi)
}

func TestSimRecovery(t *testing.T) {
	l, p, clock := simLayer(t, Config{})
	p.setOffered(5)
	for i := 0; i < 40; i++ {
		clock.Advance(DefaultInterval)
	}
	top := l.Level()
	p.setOffered(0.3)
	var took time.Duration
	for i := 1; i <= 200; i++ {
		clock.Advance(DefaultInterval)
		if l.Level() == 0 {
			took = time.Duration(i) * DefaultInterval
			break
		}
	}
	// One level per Recovery, plus a sample or two for the average.
	bound := time.Duration(top*float64(DefaultRecovery)) + 2*DefaultInterval
	if took == 0 || took > bound {
		t.Fatalf("from level %.2f, shedding stopped after %v, want within %v", top, took, bound)
	}
	if l.Headroom() < 0.5 {
		t.Fatalf("headroom %v after recovery at 0.3 load, want about 0.7", l.Headroom())
	}
	t.Logf("recovered from level %.2f (5x) to shedding nothing in %v after load fell to 0.3x", top, took)
}
