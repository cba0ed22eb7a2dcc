package worker

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"

	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// signalLayer returns a layer on clock whose signals are cfg's and
// extra's only (the CPU and scheduler latency off), sampled every
// DefaultInterval unless cfg says otherwise, closed when the test ends.
func signalLayer(t testing.TB, clock *shedtest.Clock, cfg Config, extra ...Signal) *Layer {
	t.Helper()
	cfg.Clock = clock
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	cfg.CPU.Disable = true
	cfg.SchedLatencyTarget = -1
	cfg.Signals = append(cfg.Signals, extra...)
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// pressureLayer returns a layer whose only signal is the pressure the test
// sets, on a manual clock.
func pressureLayer(t *testing.T, cfg Config) (*Layer, *atomic.Uint64, *shedtest.Clock) {
	t.Helper()
	var pr atomic.Uint64
	clock := shedtest.NewClock(t0)
	l := signalLayer(t, clock, cfg, Signal{Name: "test", Read: func() float64 { return math.Float64frombits(pr.Load()) }})
	return l, &pr, clock
}

// setLevel publishes a level directly, as the sampler would.
func setLevel(l *Layer, level float64) { l.publish(level, 1, make([]float64, len(l.signals))) }

func TestShedsBelowTheLevelAndNeverCritical(t *testing.T) {
	l, _, _ := pressureLayer(t, Config{})
	setLevel(l, 2)
	ctx := context.Background()
	for _, p := range []shed.Priority{shed.TestMode, shed.Sheddable} {
		_, err := l.Acquire(ctx, shed.Request{Priority: p})
		r := shedtest.Rejection(t, err)
		if r.Status != shed.StatusServiceUnavailable || r.Reason != reason || r.RetryAfter != DefaultRetryAfter || len(r.Policies) != 0 {
			t.Fatalf("%v: rejection %+v", p, r)
		}
	}
	for _, p := range []shed.Priority{shed.Default, shed.Critical} {
		ls, err := l.Acquire(ctx, shed.Request{Priority: p})
		if err != nil {
			t.Fatalf("%v at level 2: %v", p, err)
		}
		ls.Release(shed.Completed)
	}
	setLevel(l, 4) // above what the controller would reach without ShedCritical
	if _, err := l.Acquire(ctx, shed.Request{Priority: shed.Critical}); err != nil {
		t.Fatalf("critical at level 4: %v", err)
	}
}

func TestMarginalPriorityShedInItsFraction(t *testing.T) {
	l, _, _ := pressureLayer(t, Config{})
	setLevel(l, 1.25) // all test-mode, a quarter of sheddable
	shedN := 0
	const n = 20000
	for i := 0; i < n; i++ {
		if l.Sheds(shed.Sheddable) {
			shedN++
		}
		if !l.Sheds(shed.TestMode) || l.Sheds(shed.Default) {
			t.Fatal("test-mode admitted or default shed at level 1.25")
		}
	}
	if f := float64(shedN) / n; f < 0.22 || f > 0.28 {
		t.Fatalf("sheddable shed %.3f of the time at level 1.25, want about 0.25", f)
	}
}

func TestShedCriticalLastWhenConfigured(t *testing.T) {
	l, pr, clock := pressureLayer(t, Config{ShedCritical: true})
	pr.Store(math.Float64bits(10))
	for i := 0; i < 8; i++ {
		clock.Advance(DefaultInterval)
	}
	if l.Level() != 4 {
		t.Fatalf("level %v under pressure 10 with ShedCritical, want 4", l.Level())
	}
	if _, err := l.Acquire(context.Background(), shed.Request{Priority: shed.Critical}); err == nil {
		t.Fatal("critical admitted at level 4 with ShedCritical")
	}
}

func TestWorkerBudget(t *testing.T) {
	l, _, _ := pressureLayer(t, Config{Workers: 2})
	ctx := context.Background()
	a, err := l.Acquire(ctx, shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := l.Acquire(ctx, shed.Request{})
	_, err = l.Acquire(ctx, shed.Request{Priority: shed.Default})
	if r := shedtest.Rejection(t, err); len(r.Policies) != 1 || r.Policies[0].Policy != policyWorkers || r.Policies[0].Limit != 2 {
		t.Fatalf("third request with a budget of 2: %+v, want a rejection naming the %q policy", r, policyWorkers)
	}
	c, err := l.Acquire(ctx, shed.Request{Priority: shed.Critical})
	if err != nil {
		t.Fatalf("critical refused by the budget: %v", err)
	}
	if l.InFlight() != 3 {
		t.Fatalf("in flight %d, want 3 (critical counts)", l.InFlight())
	}
	copyOfA := a
	a.Release(shed.Completed)
	copyOfA.Release(shed.Completed) // a copy released after the original: harmless
	if l.InFlight() != 2 {
		t.Fatalf("in flight %d after releasing a and its copy, want 2", l.InFlight())
	}
	b.Release(shed.Completed)
	c.Release(shed.Failed)
	if l.InFlight() != 0 {
		t.Fatalf("in flight %d, want 0", l.InFlight())
	}
	// A request costing more than the budget never fits.
	if _, err := l.Acquire(ctx, shed.Request{Cost: 3}); err == nil {
		t.Fatal("cost 3 admitted with a budget of 2")
	}
}

func TestDryRunAdmitsAndMarks(t *testing.T) {
	l, _, _ := pressureLayer(t, Config{Workers: 1, Enforcement: shed.Enforcement{DryRun: true}})
	setLevel(l, 3)
	ctx := context.Background()
	a, err := l.Acquire(ctx, shed.Request{Priority: shed.TestMode})
	if err != nil || !a.DryRun {
		t.Fatalf("dry run: %v, DryRun %v", err, a.DryRun)
	}
	setLevel(l, 0)
	b, err := l.Acquire(ctx, shed.Request{}) // over the budget of 1
	if err != nil || !b.DryRun || l.InFlight() != 2 {
		t.Fatalf("dry run over budget: %v, DryRun %v, in flight %d", err, b.DryRun, l.InFlight())
	}
	a.Release(shed.Completed)
	b.Release(shed.Completed)
	if l.InFlight() != 0 {
		t.Fatalf("in flight %d, want 0", l.InFlight())
	}
}

func TestSoftAdmitsTheMarginalShareForABoundedTime(t *testing.T) {
	l, _, clock := pressureLayer(t, Config{Enforcement: shed.Enforcement{Mode: shed.Soft, OverageFor: time.Second}})
	l.Close() // the test publishes levels itself
	setLevel(l, 1.999)
	ctx := context.Background()
	if _, err := l.Acquire(ctx, shed.Request{Priority: shed.TestMode}); err == nil {
		t.Fatal("test-mode, shed outright, admitted in soft mode")
	}
	ls, err := l.Acquire(ctx, shed.Request{Priority: shed.Sheddable})
	if err != nil || !ls.Over {
		t.Fatalf("marginal sheddable in soft mode: %v, Over %v", err, ls.Over)
	}
	clock.Advance(2 * time.Second)
	// Requests admitted within the level meanwhile do not end the episode:
	// the layer is still shedding.
	if _, err := l.Acquire(ctx, shed.Request{Priority: shed.Default}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if _, err := l.Acquire(ctx, shed.Request{Priority: shed.Sheddable}); err != nil {
			return // the episode ran out
		}
	}
	t.Fatal("soft overage went on past OverageFor")
}

func TestQueueWaitsForTheLevelToFall(t *testing.T) {
	l, pr, clock := pressureLayer(t, Config{Enforcement: shed.Enforcement{Action: shed.Queue,
		Queue: shed.QueueConfig{MaxLength: 4, MaxWait: 10 * time.Second}}})
	pr.Store(math.Float64bits(2))
	clock.Advance(DefaultInterval)
	if !l.Sheds(shed.TestMode) {
		t.Fatalf("level %v: test-mode not shed", l.Level())
	}
	done := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(context.Background(), shed.Request{Priority: shed.TestMode})
		if err == nil && ls.Waited <= 0 {
			err = errors.New("admitted without waiting")
		}
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for l.queue.Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("request never queued")
		}
		time.Sleep(time.Millisecond)
	}
	pr.Store(0)
	for i := 0; i < 40 && l.Level() > 0; i++ {
		clock.Advance(DefaultInterval)
	}
	if err := <-done; err != nil {
		t.Fatalf("queued request: %v", err)
	}
	var queueSignal bool
	l.ReportGauges(func(g layerkit.Gauge) { queueSignal = queueSignal || g.Signal == SignalQueueDelay })
	if !queueSignal {
		t.Fatal("no queue_delay utilization gauge with the Queue action")
	}
}

func TestHeadroomAndGauges(t *testing.T) {
	l, pr, clock := pressureLayer(t, Config{Workers: 4})
	pr.Store(math.Float64bits(0.25))
	clock.Advance(DefaultInterval)
	if h := l.Headroom(); math.Abs(h-0.75) > 0.01 {
		t.Fatalf("headroom %v at pressure 0.25, want 0.75", h)
	}
	pr.Store(math.Float64bits(0.9))
	for i := 0; i < 4; i++ {
		clock.Advance(DefaultInterval)
	}
	if l.Headroom() != 0 || l.Level() == 0 {
		t.Fatalf("pressure 0.9: headroom %v level %v, want 0 and shedding", l.Headroom(), l.Level())
	}
	got := map[string]float64{}
	l.ReportGauges(func(g layerkit.Gauge) {
		if g.Layer != DefaultName {
			t.Fatalf("gauge %+v: layer %q", g, g.Layer)
		}
		k := g.Name
		if g.Signal != "" {
			k += "/" + g.Signal
		}
		if g.Name == layerkit.GaugeShedFraction {
			k += "/" + g.Priority.String()
		}
		got[k] = g.Value
	})
	for _, k := range []string{"utilization/test", "utilization/in_flight", "shed_level", "headroom", "in_flight", "limit",
		"shed_fraction/test-mode", "shed_fraction/sheddable", "shed_fraction/default", "shed_fraction/critical"} {
		if _, ok := got[k]; !ok {
			t.Fatalf("no gauge %s in %v", k, got)
		}
	}
	if got["shed_fraction/test-mode"] == 0 || got["shed_fraction/critical"] != 0 || got["limit"] != 4 || got["utilization/test"] < 0.8 {
		t.Fatalf("gauges %v", got)
	}
}

func TestPanickingSignalCountsAsNoPressure(t *testing.T) {
	l, pr, clock := pressureLayer(t, Config{Signals: []Signal{{Name: "broken", Read: func() float64 { panic("gauge gone") }}}})
	pr.Store(math.Float64bits(0.5))
	clock.Advance(DefaultInterval)
	clock.Advance(DefaultInterval) // the sampler is still running
	if l.Level() != 0 || math.Abs(l.Headroom()-0.5) > 0.01 {
		t.Fatalf("level %v headroom %v, want 0 and 0.5 from the working signal", l.Level(), l.Headroom())
	}
}

func TestBrokenSignalCountsAsNoPressure(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), -3} {
		l, pr, clock := pressureLayer(t, Config{})
		pr.Store(math.Float64bits(v))
		clock.Advance(DefaultInterval)
		if l.Level() != 0 || l.Headroom() != 1 {
			t.Fatalf("signal %v: level %v headroom %v", v, l.Level(), l.Headroom())
		}
	}
}

func TestCloseStopsTheSampler(t *testing.T) {
	l, _, clock := pressureLayer(t, Config{})
	l.Close()
	clock.Advance(time.Second)
	if n := clock.Pending(); n != 0 {
		t.Fatalf("%d timers pending after Close", n)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	nop := func() float64 { return 0 }
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Interval: -time.Second}, "Config.Interval"},
		{Config{}, "Config.Interval must be positive, got 0s"},
		{Config{ShedAt: 1.5}, "Config.ShedAt"},
		{Config{ShedAt: -0.1}, "Config.ShedAt"},
		{Config{RecoverBelow: math.NaN()}, "Config.RecoverBelow"},
		{Config{ShedAt: 0.6, RecoverBelow: 0.65}, "Config.RecoverBelow (0.65) must not be above Config.ShedAt"},
		{Config{RecoverBelow: 0.9}, "must not be above Config.ShedAt (0.8)"},
		{Config{Smoothing: 2}, "Config.Smoothing"},
		{Config{Recovery: -1}, "Config.Recovery"},
		{Config{RiseGain: -1}, "Config.RiseGain"},
		{Config{CPU: CPUConfig{Budget: -2}}, "Config.CPU.Budget"},
		{Config{CPU: CPUConfig{Full: math.Inf(1)}}, "Config.CPU.Full"},
		{Config{Workers: -1}, "Config.Workers"},
		{Config{Yield: true}, "Config.Yield"},
		{Config{Signals: []Signal{{Read: nop}}}, "Config.Signals[0].Name"},
		{Config{Signals: []Signal{{Name: "x"}}}, "Config.Signals[0].Read"},
		{Config{RetryAfter: -time.Second}, "Config.RetryAfter"},
		{Config{QueueDelayTarget: -time.Second}, "Config.QueueDelayTarget"},
		{Config{Enforcement: shed.Enforcement{Mode: shed.Elastic, Headroom: shed.HeadroomFunc(nop)}}, "Config.Enforcement.Mode"},
		{Config{Enforcement: shed.Enforcement{Action: shed.Queue}}, "Config.Enforcement"},
	}
	for _, c := range cases {
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "worker: ") {
			t.Errorf("%+v: error %v, want one naming %q", c.cfg, err, c.want)
		}
	}
}

// The queue-delay signal is CoDel's test: the shortest wait over the
// interval against the target, so one long wait among short ones is no
// standing queue; with no wait ended in the interval, how full the queue is.
func TestQueuePressure(t *testing.T) {
	l, _, _ := pressureLayer(t, Config{Enforcement: shed.Enforcement{Action: shed.Queue,
		Queue: shed.QueueConfig{MaxLength: 4, MaxWait: time.Second}}})
	target := float64(10 * time.Millisecond)
	if p := l.queuePressure(target, 4); p != 0 {
		t.Fatalf("idle queue: pressure %v", p)
	}
	l.recordWait(50 * time.Millisecond)
	l.recordWait(2 * time.Millisecond)
	l.recordWait(30 * time.Millisecond)
	if p := l.queuePressure(target, 4); math.Abs(p-0.2) > 1e-9 {
		t.Fatalf("shortest wait 2ms against 10ms: pressure %v, want 0.2", p)
	}
	l.recordWait(25 * time.Millisecond)
	if p := l.queuePressure(target, 4); math.Abs(p-2.5) > 1e-9 {
		t.Fatalf("every wait 25ms or more: pressure %v, want 2.5 (a standing queue)", p)
	}
	if p := l.queuePressure(target, 4); p != 0 {
		t.Fatalf("next interval, nothing waited: pressure %v", p)
	}
}

// While the level sheds, the budget is BusyWorkers: the bursts of a
// moderate load pass within Workers, a flood runs BusyWorkers at a time.
func TestBusyWorkersWhileShedding(t *testing.T) {
	l, pr, clock := pressureLayer(t, Config{Workers: 3, BusyWorkers: 1})
	ctx := context.Background()
	req := shed.Request{Priority: shed.Default}
	var held []shed.Lease
	for i := 0; i < 3; i++ {
		ls, err := l.Acquire(ctx, req)
		if err != nil {
			t.Fatalf("acquire %d of a budget of 3, shedding nothing: %v", i, err)
		}
		held = append(held, ls)
	}
	if _, err := l.Acquire(ctx, req); err == nil {
		t.Fatal("a fourth request passed a budget of 3")
	}
	for i := range held {
		held[i].Release(shed.Completed)
	}
	pr.Store(math.Float64bits(0.95))
	for i := 0; i < 4 && l.Level() == 0; i++ {
		clock.Advance(DefaultInterval)
	}
	if l.Level() == 0 {
		t.Fatal("the level did not rise at pressure 0.95")
	}
	limit := -1.0
	l.ReportGauges(func(g layerkit.Gauge) {
		if g.Name == layerkit.GaugeLimit {
			limit = g.Value
		}
	})
	if limit != 1 {
		t.Errorf("limit gauge while shedding = %v, want BusyWorkers (1)", limit)
	}
	first, err := l.Acquire(ctx, shed.Request{Priority: shed.Critical})
	if err != nil {
		t.Fatalf("first request while shedding: %v", err)
	}
	defer first.Release(shed.Completed)
	_, err = l.Acquire(ctx, req)
	var rej *shed.Rejection
	if !errors.As(err, &rej) || len(rej.Policies) != 1 || rej.Policies[0].Policy != policyWorkers || rej.Policies[0].Limit != 1 {
		t.Fatalf("second request while shedding with BusyWorkers 1 = %v, want a rejection by the worker budget", err)
	}
}

func TestBusyWorkersAboveWorkersIsAnError(t *testing.T) {
	_, err := New(Config{Interval: DefaultInterval, Workers: 2, BusyWorkers: 3})
	if err == nil || !strings.Contains(err.Error(), "Config.BusyWorkers") {
		t.Fatalf("New = %v, want an error naming Config.BusyWorkers", err)
	}
}
