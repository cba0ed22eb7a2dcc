package fleet

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/shed"

	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// One instance alone: each priority and those below it stay within its
// ceiling (defaults 10/60/80/100 of 100), exactly.
func TestNestedCeilingsOneInstance(t *testing.T) {
	clk := shedtest.NewClock(t0)
	s := newFake(t, newFakeFleet(clk), "a", fakeConfig(clk))
	tm := admit(t, s, shed.TestMode, 10)
	refused(t, s, shed.TestMode)
	sh := admit(t, s, shed.Sheddable, 50) // 10 + 50 = 60
	refused(t, s, shed.Sheddable)
	refused(t, s, shed.TestMode)
	df := admit(t, s, shed.Default, 20) // 80
	refused(t, s, shed.Default)
	cr := admit(t, s, shed.Critical, 20) // 100
	refused(t, s, shed.Critical)
	if got := s.Stats().InFlight; got != [4]int64{10, 50, 20, 20} {
		t.Fatalf("in flight %v", got)
	}
	// Freeing test-mode work makes room for sheddable, not beyond.
	releaseAll(tm[:5])
	admit(t, s, shed.Sheddable, 5)
	refused(t, s, shed.Sheddable)
	releaseAll(sh)
	releaseAll(df)
	releaseAll(cr)
}

// Lower priorities never eat a higher one's reservation: with default work
// at its 80% ceiling, sheddable work is refused although sheddable itself
// holds nothing, and critical work still gets the last 20%.
func TestLowerCannotEatReservation(t *testing.T) {
	clk := shedtest.NewClock(t0)
	s := newFake(t, newFakeFleet(clk), "a", fakeConfig(clk))
	admit(t, s, shed.Default, 80)
	refused(t, s, shed.Sheddable)
	refused(t, s, shed.TestMode)
	refused(t, s, shed.Default)
	admit(t, s, shed.Critical, 20)
	refused(t, s, shed.Critical)
}

// Cost counts in units.
func TestCostCountsUnits(t *testing.T) {
	clk := shedtest.NewClock(t0)
	s := newFake(t, newFakeFleet(clk), "a", fakeConfig(clk))
	ls, err := s.Acquire(context.Background(), shed.Request{Priority: shed.Sheddable, Cost: 55})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(context.Background(), shed.Request{Priority: shed.Sheddable, Cost: 6}); err == nil {
		t.Fatal("55 + 6 units admitted under a ceiling of 60")
	}
	admit(t, s, shed.Sheddable, 5)
	ls.Release(shed.Completed)
	if got := s.Stats().InFlight[shed.Sheddable.Index()]; got != 5 {
		t.Fatalf("in flight %d after release, want 5", got)
	}
}

// Instances see each other's counts at the next tick, and each may add its
// share of the room left: when they all read the same entries, the fleet
// ends exactly at the ceiling.
func TestInstancesShareCapacity(t *testing.T) {
	clk := shedtest.NewClock(t0)
	f := newFakeFleet(clk)
	a := newFake(t, f, "a", fakeConfig(clk))
	b := newFake(t, f, "b", fakeConfig(clk))
	admit(t, a, shed.Sheddable, 40) // a's first tick saw one instance
	settle(clk)
	if st := b.Stats(); st.Fleet[shed.Sheddable.Index()] != 40 || st.Instances != 2 || st.Fallback {
		t.Fatalf("b's stats %+v", st)
	}
	admit(t, b, shed.Sheddable, 10) // half of the 20 left
	refused(t, b, shed.Sheddable)
	admit(t, a, shed.Sheddable, 10)
	refused(t, a, shed.Sheddable)
	admit(t, b, shed.Critical, 20) // half of the 60 left under critical's ceiling, less b's 10
	refused(t, b, shed.Critical)
	admit(t, a, shed.Critical, 20)
	refused(t, a, shed.Critical)
	settle(clk)
	if st := a.Stats(); st.Fleet != [4]int64{0, 60, 0, 40} {
		t.Fatalf("a's stats %+v", st)
	}
	refused(t, a, shed.Critical)
	refused(t, b, shed.Critical)
}

// When every instance read the same entries, their allowances sum to the
// ceiling. The worst case is a start: an instance admits against the
// instances it has seen so far (here 60 + 30 + 20 against 60, under one
// ceiling more), and after the next ticks every instance holds back until
// the fleet is under again.
func TestOvershootOnlyFromStaleEntries(t *testing.T) {
	clk := shedtest.NewClock(t0)
	f := newFakeFleet(clk)
	var ss []*Layer
	for _, id := range []string{"a", "b", "c"} {
		ss = append(ss, newFake(t, f, id, fakeConfig(clk)))
	}
	var held [3][]shed.Lease
	for i, n := range []int{60, 30, 20} {
		held[i] = admit(t, ss[i], shed.Sheddable, n)
		refused(t, ss[i], shed.Sheddable)
	}
	settle(clk)
	for _, s := range ss {
		if st := s.Stats(); st.Fleet[shed.Sheddable.Index()] != 110 {
			t.Fatalf("stats %+v", st)
		}
		refused(t, s, shed.Sheddable)
		refused(t, s, shed.Default)
	}
	for i := range held {
		releaseAll(held[i])
	}
	settle(clk)
	for _, s := range ss {
		admit(t, s, shed.Sheddable, 20)
		refused(t, s, shed.Sheddable)
	}
	settle(clk)
	if st := ss[0].Stats(); st.Fleet[shed.Sheddable.Index()] != 60 {
		t.Fatalf("stats %+v", st)
	}
}

// Capacity does not stay with whoever took it first: an instance joining
// a fleet that another fills gets close to its fair share within a few
// dozen ticks, as the first gives back half its excess whenever the fleet
// is full.
func TestNewcomerGetsItsShare(t *testing.T) {
	clk := shedtest.NewClock(t0)
	f := newFakeFleet(clk)
	a := newFake(t, f, "a", fakeConfig(clk))
	held := map[*Layer][]shed.Lease{a: admit(t, a, shed.Sheddable, 60)}
	b := newFake(t, f, "b", fakeConfig(clk))
	// Both want more than the ceiling: every interval each finishes a
	// third of its work and tries to fill up again.
	for i := 0; i < 40; i++ {
		for _, s := range []*Layer{a, b} {
			ls := held[s]
			n := (len(ls) + 2) / 3
			releaseAll(ls[:n])
			ls = ls[n:]
			for {
				l, err := s.Acquire(context.Background(), shed.Request{Priority: shed.Sheddable})
				if err != nil {
					break
				}
				ls = append(ls, l)
			}
			held[s] = ls
		}
		clk.Advance(100 * time.Millisecond)
	}
	na, nb := len(held[a]), len(held[b])
	t.Logf("after 40 ticks: a holds %d, b %d", na, nb)
	if nb < 24 || na+nb > 60 {
		t.Fatalf("after 40 ticks a holds %d, b %d: want b near its share of 30, the fleet within 60", na, nb)
	}
}

// With PerInstance, capacity follows the live instances.
func TestPerInstanceCapacityFollowsLiveInstances(t *testing.T) {
	clk := shedtest.NewClock(t0)
	f := newFakeFleet(clk)
	cfg := fakeConfig(clk)
	cfg.Capacity, cfg.PerInstance = 0, 10
	a := newFake(t, f, "a", cfg)
	b := newFake(t, f, "b", cfg)
	clk.Advance(100 * time.Millisecond)
	if st := a.Stats(); st.Capacity != 20 || st.Ceilings != [4]int64{2, 12, 16, 20} {
		t.Fatalf("stats %+v", st)
	}
	b.halt() // crashed: its entry expires
	clk.Advance(100 * time.Millisecond)
	clk.Advance(100 * time.Millisecond)
	if st := a.Stats(); st.Capacity != 10 || st.Instances != 1 {
		t.Fatalf("stats after b stopped %+v", st)
	}
}

// A stopped instance's counts leave the totals within 3 intervals (TTL 2
// intervals, seen at the next tick).
func TestStoppedInstanceVanishesWithinThreeIntervals(t *testing.T) {
	clk := shedtest.NewClock(t0)
	f := newFakeFleet(clk)
	a := newFake(t, f, "a", fakeConfig(clk))
	b := newFake(t, f, "b", fakeConfig(clk))
	admit(t, b, shed.Default, 30)
	settle(clk)
	if got := a.Stats().Fleet[shed.Default.Index()]; got != 30 {
		t.Fatalf("a sees %d", got)
	}
	clk.Advance(99 * time.Millisecond) // just before b's next tick
	b.halt()
	gone := time.Duration(0)
	for step := time.Duration(0); step <= 4*100*time.Millisecond; step += 10 * time.Millisecond {
		if a.Stats().Fleet[shed.Default.Index()] == 0 {
			gone = step
			break
		}
		clk.Advance(10 * time.Millisecond)
	}
	if gone == 0 || gone > 300*time.Millisecond {
		t.Fatalf("b's counts left a's totals after %v (0: never), want within 3 intervals", gone)
	}
	if st := a.Stats(); st.Instances != 1 {
		t.Fatalf("instances %d", st.Instances)
	}
}

// Redis gone: decide from this instance's share (capacity ÷ last known
// live instances, rounded down), marked fallback; back on totals at the
// first tick Redis answers.
func TestFallbackShareAndReturn(t *testing.T) {
	clk := shedtest.NewClock(t0)
	f := newFakeFleet(clk)
	a := newFake(t, f, "a", fakeConfig(clk))
	newFake(t, f, "b", fakeConfig(clk))
	newFake(t, f, "c", fakeConfig(clk))
	clk.Advance(100 * time.Millisecond)
	f.setDown(true)
	clk.Advance(100 * time.Millisecond)
	st := a.Stats()
	if !st.Fallback || st.Capacity != 33 || st.Ceilings != [4]int64{3, 19, 26, 33} || !errors.Is(st.LastError, errFakeDown) {
		t.Fatalf("stats in fallback %+v", st)
	}
	ls := admit(t, a, shed.Sheddable, 19)
	if !ls[0].Fallback {
		t.Fatal("lease not marked fallback")
	}
	if r := refused(t, a, shed.Sheddable); !r.Fallback {
		t.Fatal("rejection not marked fallback")
	}
	clk.Advance(300 * time.Millisecond) // still down: still fallback, still trying
	calls := f.calls
	clk.Advance(100 * time.Millisecond)
	if f.calls == calls {
		t.Fatal("no tick tried Redis while it was down")
	}
	f.setDown(false)
	clk.Advance(100 * time.Millisecond)
	if st := a.Stats(); st.Fallback || st.Capacity != 100 {
		t.Fatalf("stats after Redis came back %+v", st)
	}
	admit(t, a, shed.Sheddable, 41) // 19 + 41 = 60 fleet-wide
	refused(t, a, shed.Sheddable)
}

// Before Redis ever answers, the share comes from ExpectedInstances.
func TestStartsInFallbackWithExpectedInstances(t *testing.T) {
	clk := shedtest.NewClock(t0)
	f := newFakeFleet(clk)
	f.setDown(true)
	cfg := fakeConfig(clk)
	cfg.ExpectedInstances = 4
	a := newFake(t, f, "a", cfg)
	if st := a.Stats(); !st.Fallback || st.Capacity != 25 || st.Ticks != 0 || st.Failures != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Releasing a copy of a released lease does nothing, even after the
// record behind it was reused by another grant.
func TestCopyReleaseIsHarmless(t *testing.T) {
	clk := shedtest.NewClock(t0)
	s := newFake(t, newFakeFleet(clk), "a", fakeConfig(clk))
	ls, err := s.Acquire(context.Background(), shed.Request{Priority: shed.Default})
	if err != nil {
		t.Fatal(err)
	}
	cp := ls
	ls.Release(shed.Completed)
	other := admit(t, s, shed.Default, 1)
	cp.Release(shed.Completed)
	cp2 := ls
	cp2.Release(shed.Completed)
	if got := s.Stats().InFlight[shed.Default.Index()]; got != 1 {
		t.Fatalf("in flight %d, want 1 (the other lease)", got)
	}
	releaseAll(other)
	if got := s.Stats().InFlight; got != [4]int64{} {
		t.Fatalf("in flight %v", got)
	}
}

func TestModes(t *testing.T) {
	clk := shedtest.NewClock(t0)
	t.Run("dry-run", func(t *testing.T) {
		cfg := fakeConfig(clk)
		cfg.Enforcement.DryRun = true
		s := newFake(t, newFakeFleet(clk), "a", cfg)
		admit(t, s, shed.Sheddable, 60)
		ls := admit(t, s, shed.Sheddable, 1)
		if !ls[0].DryRun {
			t.Fatal("over the ceiling but not marked dry run")
		}
		// As every layer's dry run: an admission over the ceiling takes
		// nothing, as a rejection would not.
		if got := s.Stats().InFlight[shed.Sheddable.Index()]; got != 60 {
			t.Fatalf("in flight %d, want 60: a dry-run admission over the ceiling counts nothing", got)
		}
		releaseAll(ls)
		if got := s.Stats().InFlight[shed.Sheddable.Index()]; got != 60 {
			t.Fatalf("in flight %d after releasing the dry-run lease, want 60", got)
		}
	})
	t.Run("soft", func(t *testing.T) {
		cfg := fakeConfig(clk)
		cfg.Enforcement = shed.Enforcement{Mode: shed.Soft, Overage: 0.1, OverageFor: time.Second}
		s := newFake(t, newFakeFleet(clk), "a", cfg)
		admit(t, s, shed.Sheddable, 60)
		ls := admit(t, s, shed.Sheddable, 6) // 60 + 10%
		if !ls[0].Over {
			t.Fatal("over the ceiling but not marked")
		}
		refused(t, s, shed.Sheddable)
		releaseAll(ls)
		clk.Advance(2 * time.Second) // the episode runs out
		refused(t, s, shed.Sheddable)
	})
	t.Run("elastic", func(t *testing.T) {
		room := 1.0
		cfg := fakeConfig(clk)
		cfg.Enforcement = shed.Enforcement{Mode: shed.Elastic, Headroom: shed.HeadroomFunc(func() float64 { return room })}
		s := newFake(t, newFakeFleet(clk), "a", cfg)
		admit(t, s, shed.Sheddable, 66)
		refused(t, s, shed.Sheddable)
		room = 0
		s2 := newFake(t, newFakeFleet(clk), "b", cfg)
		admit(t, s2, shed.Sheddable, 60)
		refused(t, s2, shed.Sheddable)
	})
}

// Queue: a request over its ceiling waits; a release hands it the room,
// higher priority first.
func TestQueue(t *testing.T) {
	clk := shedtest.NewClock(t0)
	cfg := fakeConfig(clk)
	cfg.Enforcement = shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 4, MaxWait: time.Second}}
	s := newFake(t, newFakeFleet(clk), "a", cfg)
	held := admit(t, s, shed.Default, 80)
	type res struct {
		p   shed.Priority
		err error
	}
	done := make(chan res, 2)
	for _, p := range []shed.Priority{shed.Sheddable, shed.Default} {
		go func() {
			ls, err := s.Acquire(context.Background(), shed.Request{Priority: p})
			if err == nil && ls.Waited <= 0 && clk.Now().Equal(t0) {
				err = errors.New("lease does not say it waited")
			}
			done <- res{p, err}
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.queue.Len() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("requests did not queue")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Advance(10 * time.Millisecond)
	held[0].Release(shed.Completed)
	if r := <-done; r.p != shed.Default || r.err != nil {
		t.Fatalf("first served %v, %v; want default", r.p, r.err)
	}
	clk.Advance(time.Second) // sheddable times out: 81 ≥ 60 still
	r := <-done
	if rej := shedtest.Rejection(t, r.err); rej.Status != 503 || !strings.Contains(rej.Reason, "timed out") {
		t.Fatalf("rejection %+v", rej)
	}
}

func TestGauges(t *testing.T) {
	clk := shedtest.NewClock(t0)
	f := newFakeFleet(clk)
	a := newFake(t, f, "a", fakeConfig(clk))
	b := newFake(t, f, "b", fakeConfig(clk))
	admit(t, a, shed.Sheddable, 5)
	admit(t, b, shed.Sheddable, 7)
	admit(t, b, shed.Critical, 1)
	settle(clk)
	admit(t, a, shed.Sheddable, 1)
	got := map[string]float64{}
	a.ReportGauges(func(g layerkit.Gauge) {
		if g.Layer != "fleet" {
			t.Fatalf("gauge of layer %q", g.Layer)
		}
		k := g.Name
		if g.Name == layerkit.GaugeUsage || g.Name == layerkit.GaugeCeiling {
			k += "/" + g.Priority.String()
		}
		got[k] = g.Value
	})
	want := map[string]float64{
		"usage/test-mode": 0, "usage/sheddable": 13, "usage/default": 0, "usage/critical": 1,
		"ceiling/test-mode": 10, "ceiling/sheddable": 60, "ceiling/default": 80, "ceiling/critical": 100,
		"instances": 2, "fallback": 0, "in_flight": 6, "limit": 100,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("gauge %s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("gauges %v", got)
	}
}

func TestCloseLeavesTheFleet(t *testing.T) {
	clk := shedtest.NewClock(t0)
	f := newFakeFleet(clk)
	a := newFake(t, f, "a", fakeConfig(clk))
	b := newFake(t, f, "b", fakeConfig(clk))
	admit(t, b, shed.Default, 3)
	clk.Advance(100 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	clk.Advance(100 * time.Millisecond)
	if st := a.Stats(); st.Instances != 1 || st.Fleet != [4]int64{} {
		t.Fatalf("after b closed: %+v", st)
	}
	if clk.Pending() != 1 {
		t.Fatalf("%d timers pending, want a's tick only", clk.Pending())
	}
	if st := b.Stats(); !st.Fallback || st.Capacity != 50 {
		t.Fatalf("b after Close: %+v", st)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer c.Close()
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Capacity: 10}, "Config.Client"},
		{Config{Client: c}, "Config.Capacity and Config.PerInstance are both unset"},
		{Config{Client: c, Capacity: -1}, "Config.Capacity must be positive"},
		{Config{Client: c, PerInstance: -3}, "Config.PerInstance must be positive"},
		{Config{Client: c, Capacity: 1, PerInstance: 1}, "both set"},
		{Config{Client: c, Capacity: 1, Ceilings: map[shed.Priority]float64{shed.Sheddable: 1.5}}, "Config.Ceilings[sheddable] must be within [0, 1]"},
		{Config{Client: c, Capacity: 1, Ceilings: map[shed.Priority]float64{shed.TestMode: -0.1}}, "Config.Ceilings[test-mode] must be within [0, 1]"},
		{Config{Client: c, Capacity: 1, Ceilings: map[shed.Priority]float64{shed.Default: 0.5}}, "Config.Ceilings[default] (0.5) must not be below Config.Ceilings[sheddable] (0.6)"},
		{Config{Client: c, Capacity: 1, Ceilings: map[shed.Priority]float64{shed.Critical: 0.7}}, "Config.Ceilings[critical] (0.7) must not be below Config.Ceilings[default]"},
		{Config{Client: c, Capacity: 1, Ceilings: map[shed.Priority]float64{7: 0.7}}, "Config.Ceilings has an unknown priority"},
		{Config{Client: c, Capacity: 1, Interval: 5 * time.Millisecond}, "Config.Interval must be at least 10ms"},
		{Config{Client: c, Capacity: 1, Interval: -time.Second}, "Config.Interval must be at least"},
		{Config{Client: c, Capacity: 1}, "Config.Interval must be at least 10ms, got 0s"},
		{Config{Client: c, Capacity: 1, Interval: time.Second, TTL: 500 * time.Millisecond}, "Config.Interval (1s) must be below Config.TTL (500ms)"},
		{Config{Client: c, Capacity: 1, Interval: time.Second, TTL: time.Second}, "must be below Config.TTL"},
		{Config{Client: c, Capacity: 1, TTL: -1}, "Config.TTL must be positive"},
		{Config{Client: c, Capacity: 1, Interval: DefaultInterval, Timeout: time.Second}, "Config.Timeout (1s) must not exceed Config.Interval"},
		{Config{Client: c, Capacity: 1, Prefix: "a{b}"}, "Config.Prefix must not contain braces"},
		{Config{Client: c, Capacity: 1, Instance: "a b"}, "Config.Instance must be printable"},
		{Config{Client: c, Capacity: 1, Instance: "a\x00b"}, "Config.Instance must be printable"},
		{Config{Client: c, Capacity: 1, Instance: strings.Repeat("x", 201)}, "Config.Instance must be at most 200 bytes"},
		{Config{Client: c, Capacity: 1, ExpectedInstances: -1}, "Config.ExpectedInstances"},
		{Config{Client: c, Capacity: 1, RetryAfter: -1}, "Config.RetryAfter"},
		{Config{Client: c, Capacity: 1, Enforcement: shed.Enforcement{Mode: shed.Elastic}}, "Config.Enforcement"},
		{Config{Client: c, Capacity: 1, Enforcement: shed.Enforcement{Action: shed.Queue}}, "Config.Enforcement"},
		{Config{Client: redis.NewClient(&redis.Options{}), Capacity: 1}, "ContextTimeoutEnabled"},
	}
	for _, tc := range cases {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "fleet: ") {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	ok := []Config{
		{Client: c, Capacity: 1, Interval: DefaultInterval, Ceilings: map[shed.Priority]float64{shed.TestMode: 0, shed.Sheddable: 0, shed.Default: 0, shed.Critical: 0}},
		{Client: c, PerInstance: 5, Interval: 10 * time.Millisecond},
		{Client: c, Capacity: 1, Interval: DefaultInterval, Instance: "pod-7:main/ü"},
	}
	for _, cfg := range ok {
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", cfg, err)
		}
	}
}

// A capacity too large for a float64 to convert back keeps every ceiling
// at its largest, not at a negative number.
func TestHugeCapacity(t *testing.T) {
	clk := shedtest.NewClock(t0)
	cfg := fakeConfig(clk)
	cfg.Capacity = math.MaxInt64
	s := newFake(t, newFakeFleet(clk), "a", cfg)
	if st := s.Stats(); st.Ceilings[3] != math.MaxInt64 || st.Ceilings[0] <= 0 {
		t.Fatalf("stats %+v", st)
	}
	admit(t, s, shed.TestMode, 3)
}

func TestDefaultInstance(t *testing.T) {
	id := DefaultInstance()
	if id == "" || strings.ContainsAny(id, " \t\n") || len(id) > maxInstanceLen {
		t.Fatalf("DefaultInstance() = %q", id)
	}
	if err := (Config{Client: redis.NewClient(&redis.Options{ContextTimeoutEnabled: true}), Capacity: 1, Interval: DefaultInterval, Instance: id}).Validate(); err != nil {
		t.Fatalf("the default instance id is refused: %v", err)
	}
}

// A waiter is woken by a tick, not only by a release of its own instance:
// room freed on another instance reaches it at the next tick.
func TestQueueWokenByTick(t *testing.T) {
	clk := shedtest.NewClock(t0)
	f := newFakeFleet(clk)
	cfg := fakeConfig(clk)
	cfg.Enforcement = shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 4, MaxWait: time.Hour}}
	a := newFake(t, f, "a", cfg)
	b := newFake(t, f, "b", fakeConfig(clk))
	settle(clk)
	held := admit(t, b, shed.Critical, 50) // b's half of the room
	settle(clk)
	admit(t, a, shed.Critical, 25) // half of the 50 left
	done := make(chan error, 1)
	go func() {
		_, err := a.Acquire(context.Background(), shed.Request{Priority: shed.Critical})
		done <- err
	}()
	if waitFor(5*time.Second, func() bool { return a.Queued() == 1 }) < 0 {
		t.Fatal("the request did not queue")
	}
	releaseAll(held[:10]) // on b: a cannot know until the ticks
	select {
	case err := <-done:
		t.Fatalf("woken before any tick: %v", err)
	default:
	}
	settle(clk)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("still waiting after the ticks: %+v", a.Stats())
	}
}
