package concurrency

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"

	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedtest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustNew(t testing.TB, cfg Config) *Layer {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestOverallLimit(t *testing.T) {
	l := mustNew(t, Config{Limit: 3})
	ctx := context.Background()
	var leases []shed.Lease
	for i := 0; i < 3; i++ {
		ls, err := l.Acquire(ctx, shed.Request{Key: "a"})
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if ls.Quota.Policy != PolicyOverall || ls.Quota.Limit != 3 || ls.Quota.Remaining != int64(2-i) {
			t.Fatalf("acquire %d: quota %+v", i, ls.Quota)
		}
		leases = append(leases, ls)
	}
	_, err := l.Acquire(ctx, shed.Request{Key: "b", Priority: shed.Critical})
	r := shedtest.Rejection(t, err)
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("rejection %+v", r)
	}
	if len(r.Policies) != 1 || r.Policies[0].Policy != PolicyOverall || r.Policies[0].Remaining != 0 || r.RetryAfter != DefaultRetryAfter {
		t.Fatalf("rejection policies %+v", r)
	}
	if !errors.Is(err, shed.ErrRejected) {
		t.Fatal("errors.Is(err, shed.ErrRejected) is false")
	}
	if got := l.InFlight(); got != 3 {
		t.Fatalf("InFlight = %d, want 3", got)
	}
	leases[1].Release(shed.Completed)
	if _, err := l.Acquire(ctx, shed.Request{}); err != nil {
		t.Fatalf("after a release: %v", err)
	}
}

func TestPerKeyIsTheClientsOwnLimit(t *testing.T) {
	l := mustNew(t, Config{PerKey: 2, Limit: 10})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := l.Acquire(ctx, shed.Request{Key: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := l.Acquire(ctx, shed.Request{Key: "alice"})
	r := shedtest.Rejection(t, err)
	if r.Status != http.StatusTooManyRequests || r.Policies[0].Policy != PolicyPerKey || r.Policies[0].Limit != 2 {
		t.Fatalf("rejection %+v", r)
	}
	ls, err := l.Acquire(ctx, shed.Request{Key: "bob"})
	if err != nil {
		t.Fatalf("another key must not be limited by alice: %v", err)
	}
	if ls.Quota.Policy != PolicyPerKey || ls.Quota.Remaining != 1 {
		t.Fatalf("quota should be the tighter per-key one: %+v", ls.Quota)
	}
	if l.InFlightKey("alice") != 2 || l.InFlightKey("bob") != 1 || l.InFlight() != 3 {
		t.Fatalf("counts: alice %d bob %d all %d", l.InFlightKey("alice"), l.InFlightKey("bob"), l.InFlight())
	}
	ls.Release(shed.Completed)
	if l.InFlightKey("bob") != 0 || l.InFlight() != 2 {
		t.Fatal("release did not give back both counts")
	}
}

func TestPerRouteIsTheServicesLimit(t *testing.T) {
	l := mustNew(t, Config{PerKey: 1, KeyBy: KeyByRoute})
	ctx := context.Background()
	if _, err := l.Acquire(ctx, shed.Request{Key: "a", Route: "GET /x"}); err != nil {
		t.Fatal(err)
	}
	_, err := l.Acquire(ctx, shed.Request{Key: "b", Route: "GET /x"})
	r := shedtest.Rejection(t, err)
	if r.Status != http.StatusServiceUnavailable || r.Policies[0].Policy != PolicyPerRoute {
		t.Fatalf("rejection %+v", r)
	}
	if _, err := l.Acquire(ctx, shed.Request{Key: "a", Route: "GET /y"}); err != nil {
		t.Fatal(err)
	}
	if l.InFlight() != 2 {
		t.Fatalf("InFlight = %d, want 2 (summed over routes)", l.InFlight())
	}
}

func TestCost(t *testing.T) {
	l := mustNew(t, Config{Limit: 5})
	ctx := context.Background()
	big, err := l.Acquire(ctx, shed.Request{Cost: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, shed.Request{Cost: 2}); err == nil {
		t.Fatal("4+2 > 5 was admitted")
	}
	if _, err := l.Acquire(ctx, shed.Request{Cost: 1}); err != nil {
		t.Fatal(err)
	}
	big.Release(shed.Completed)
	if l.InFlight() != 1 {
		t.Fatalf("InFlight = %d, want 1", l.InFlight())
	}
}

func TestReleaseTwiceAndUnknownLeasesAreHarmless(t *testing.T) {
	l := mustNew(t, Config{Limit: 2, PerKey: 2})
	other := mustNew(t, Config{Limit: 2, PerKey: 2})
	ctx := context.Background()
	a, _ := l.Acquire(ctx, shed.Request{Key: "k"})
	b, _ := l.Acquire(ctx, shed.Request{Key: "k"})
	aCopy := a
	a.Release(shed.Completed)
	a.Release(shed.Completed)
	// A copy released after the original (this counted twice before
	// leases carried a guard: in flight read 0 while b was held).
	aCopy.Release(shed.Completed)
	if l.InFlight() != 1 || l.InFlightKey("k") != 1 {
		t.Fatalf("double and copy release: in flight %d, key %d; want 1, 1", l.InFlight(), l.InFlightKey("k"))
	}
	// Leases the limiter never granted, handed to its Release directly.
	foreign, _ := other.Acquire(ctx, shed.Request{Key: "k"})
	l.Release(&foreign, shed.Completed)
	l.Release(&shed.Lease{}, shed.Completed)
	l.Release(&shed.Lease{Ref: "junk", Cost: 5}, shed.Completed)
	var zero shed.Lease
	zero.Release(shed.Completed)
	if l.InFlight() != 1 || l.InFlightKey("k") != 1 || other.InFlight() != 1 {
		t.Fatalf("unknown leases changed counts: %d %d %d", l.InFlight(), l.InFlightKey("k"), other.InFlight())
	}
	b.Release(shed.Failed)
	if l.InFlight() != 0 {
		t.Fatal("not back to zero")
	}
}

func TestBadConfig(t *testing.T) {
	hr := shed.HeadroomFunc(func() float64 { return 1 })
	cases := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"no limit", Config{}, "Config.Limit"},
		{"negative limit", Config{Limit: -1}, "Config.Limit"},
		{"negative per key", Config{PerKey: -3, Limit: 1}, "Config.PerKey"},
		{"unknown keyby", Config{Limit: 1, KeyBy: 9}, "Config.KeyBy"},
		{"negative retry", Config{Limit: 1, RetryAfter: -time.Second}, "Config.RetryAfter"},
		{"zero floor", Config{Adaptive: &Adaptive{Floor: 0, Ceiling: 10}}, "Adaptive.Floor"},
		{"floor above ceiling", Config{Adaptive: &Adaptive{Floor: 20, Ceiling: 10}}, "Adaptive.Floor"},
		{"zero ceiling", Config{Adaptive: &Adaptive{Floor: 1}}, "Adaptive.Ceiling"},
		{"tolerance", Config{Adaptive: &Adaptive{Floor: 1, Ceiling: 2, Tolerance: 0.5}}, "Adaptive.Tolerance"},
		{"smoothing", Config{Adaptive: &Adaptive{Floor: 1, Ceiling: 2, Smoothing: 2}}, "Adaptive.Smoothing"},
		{"limit outside band", Config{Limit: 50, Adaptive: &Adaptive{Floor: 1, Ceiling: 10}}, "Config.Limit"},
		{"elastic without headroom", Config{Limit: 1, Enforcement: shed.Enforcement{Mode: shed.Elastic}}, "Enforcement.Headroom"},
		{"bad overage", Config{Limit: 1, Enforcement: shed.Enforcement{Mode: shed.Elastic, Headroom: hr, Overage: -1}}, "Enforcement.Overage"},
		{"queue without overall", Config{PerKey: 1, Enforcement: shed.Enforcement{Action: shed.Queue,
			Queue: shed.QueueConfig{MaxLength: 1, MaxWait: time.Second}}}, "Config.Enforcement.Action"},
		{"queue bounds", Config{Limit: 1, Enforcement: shed.Enforcement{Action: shed.Queue}}, "QueueConfig.MaxLength"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := New(c.cfg)
			if err == nil || l != nil {
				t.Fatalf("New accepted %+v", c.cfg)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Fatalf("error %q does not name %s", err, c.field)
			}
		})
	}
}

func TestSoftMode(t *testing.T) {
	clock := shedtest.NewClock(t0)
	l := mustNew(t, Config{Limit: 10, Clock: clock, Enforcement: shed.Enforcement{Mode: shed.Soft, Overage: 0.2, OverageFor: time.Minute}})
	ctx := context.Background()
	var held []shed.Lease
	for i := 0; i < 10; i++ {
		ls, err := l.Acquire(ctx, shed.Request{})
		if err != nil || ls.Over {
			t.Fatalf("within limit: %v over=%v", err, ls.Over)
		}
		held = append(held, ls)
	}
	for i := 0; i < 2; i++ {
		ls, err := l.Acquire(ctx, shed.Request{})
		if err != nil || !ls.Over {
			t.Fatalf("overage %d: err %v over %v", i, err, ls.Over)
		}
		held = append(held, ls)
	}
	if _, err := l.Acquire(ctx, shed.Request{}); err == nil {
		t.Fatal("admitted above the ceiling (12)")
	}
	// The episode lasts OverageFor: then the hard limit holds again.
	held[11].Release(shed.Completed)
	clock.Advance(2 * time.Minute)
	if _, err := l.Acquire(ctx, shed.Request{}); err == nil {
		t.Fatal("overage episode did not end after OverageFor")
	}
	// Back under the limit, a new episode begins only after a cool-down
	// (default OverageFor) within it.
	for _, ls := range held[9:11] {
		ls.Release(shed.Completed)
	}
	if ls, err := l.Acquire(ctx, shed.Request{}); err != nil || ls.Over {
		t.Fatalf("back under the limit: %v over=%v", err, ls.Over)
	}
	if _, err := l.Acquire(ctx, shed.Request{}); err == nil {
		t.Fatal("a new episode at once after the last one")
	}
	clock.Advance(time.Minute)
	if ls, err := l.Acquire(ctx, shed.Request{}); err != nil || !ls.Over {
		t.Fatalf("new episode: %v over=%v", err, ls.Over)
	}
}

// TestSoftModeHoldsEveryLimitToItsEpisode: a request over both the per-key
// and the overall limit gets the overage only if both episodes allow it.
func TestSoftModeHoldsEveryLimitToItsEpisode(t *testing.T) {
	clock := shedtest.NewClock(t0)
	l := mustNew(t, Config{Limit: 10, PerKey: 5, KeyBy: KeyByClient, Clock: clock,
		Enforcement: shed.Enforcement{Mode: shed.Soft, OverageFor: 30 * time.Second}})
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if _, err := l.Acquire(ctx, shed.Request{Key: []string{"a", "b"}[i%2]}); err != nil {
			t.Fatal(err)
		}
	}
	// The overall limit's episode begins; it ends 30s later.
	extra, err := l.Acquire(ctx, shed.Request{Key: "c"})
	if err != nil || !extra.Over {
		t.Fatalf("overall overage: %v over=%v", err, extra.Over)
	}
	extra.Release(shed.Completed)
	clock.Advance(31 * time.Second)
	if _, err := l.Acquire(ctx, shed.Request{Key: "d"}); err == nil {
		t.Fatal("a fresh key admitted over the overall limit 31s into its episode")
	}
	// Key a is at its own limit (5) and the layer at its overall one: a's
	// own episode is fresh, the overall one is spent.
	if ls, err := l.Acquire(ctx, shed.Request{Key: "a"}); err == nil {
		t.Fatalf("admitted over the overall limit past its episode (over=%v), in flight %d", ls.Over, l.InFlight())
	}
	if n := l.InFlight(); n != 10 {
		t.Fatalf("in flight %d, want 10", n)
	}
}

// TestSoftModeSustainedOverload offers twice the capacity for two minutes
// (requests of 1s at 20/s against a limit of 10) and counts the requests
// admitted over the limit in each 30s block: one episode (OverageFor 30s)
// at the start, then the hard limit while the overload lasts. Before the
// cool-down, every block had an episode: 320 of its 330 requests over.
func TestSoftModeSustainedOverload(t *testing.T) {
	clock := shedtest.NewClock(t0)
	l := mustNew(t, Config{Limit: 10, Clock: clock,
		Enforcement: shed.Enforcement{Mode: shed.Soft, OverageFor: 30 * time.Second}})
	ctx := context.Background()
	type running struct {
		ls  shed.Lease
		end time.Time
	}
	var live []running
	var over [4]int
	first, last := time.Duration(-1), time.Duration(0)
	for d := time.Duration(0); d < 2*time.Minute; d += 50 * time.Millisecond {
		clock.Set(t0.Add(d))
		kept := live[:0]
		for _, r := range live {
			if clock.Now().Before(r.end) {
				kept = append(kept, r)
			} else {
				r.ls.Release(shed.Completed)
			}
		}
		live = kept
		ls, err := l.Acquire(ctx, shed.Request{})
		if err != nil {
			continue
		}
		if ls.Over {
			over[d/(30*time.Second)]++
			if first < 0 {
				first = d
			}
			last = d
		}
		live = append(live, running{ls, clock.Now().Add(time.Second)})
	}
	if first < 0 || last-first > 30*time.Second || over[2]+over[3] != 0 {
		t.Fatalf("requests admitted over the limit per 30s block: %v, from +%v to +%v; want one episode of at most 30s", over, first, last)
	}
}

func TestElasticMode(t *testing.T) {
	var headroom atomic.Value
	headroom.Store(0.9)
	hr := shed.HeadroomFunc(func() float64 { return headroom.Load().(float64) })
	l := mustNew(t, Config{Limit: 10, Enforcement: shed.Enforcement{Mode: shed.Elastic, Headroom: hr, Overage: 0.5}})
	ctx := context.Background()
	for i := 0; i < 15; i++ {
		ls, err := l.Acquire(ctx, shed.Request{})
		if err != nil {
			t.Fatalf("acquire %d with headroom: %v", i, err)
		}
		if ls.Over != (i >= 10) {
			t.Fatalf("acquire %d: Over = %v", i, ls.Over)
		}
	}
	if _, err := l.Acquire(ctx, shed.Request{}); err == nil {
		t.Fatal("admitted above Enforcement.Ceiling")
	}
	headroom.Store(0.05)
	l2 := mustNew(t, Config{Limit: 1, Enforcement: shed.Enforcement{Mode: shed.Elastic, Headroom: hr}})
	l2.Acquire(ctx, shed.Request{})
	if _, err := l2.Acquire(ctx, shed.Request{}); err == nil {
		t.Fatal("elastic overage without headroom")
	}
}

func TestDryRunNeverRejects(t *testing.T) {
	l := mustNew(t, Config{Limit: 2, PerKey: 1, Enforcement: shed.Enforcement{DryRun: true}})
	ctx := context.Background()
	var held []shed.Lease
	for i := 0; i < 5; i++ {
		ls, err := l.Acquire(ctx, shed.Request{Key: "k"})
		if err != nil {
			t.Fatalf("dry run rejected: %v", err)
		}
		if ls.DryRun != (i >= 1) {
			t.Fatalf("acquire %d: DryRun = %v", i, ls.DryRun)
		}
		held = append(held, ls)
	}
	// Admitted over the limit in dry run, a request takes nothing, as a
	// rejection would not: the limiter decides as it would if it enforced.
	if l.InFlight() != 1 || l.InFlightKey("k") != 1 {
		t.Fatalf("in flight %d (key %d); want 1: dry-run admissions take nothing", l.InFlight(), l.InFlightKey("k"))
	}
	for i := range held {
		held[i].Release(shed.Completed)
	}
	if l.InFlight() != 0 || l.InFlightKey("k") != 0 {
		t.Fatal("not back to zero")
	}
}

// TestSweepNeverRacesAnAcquire hammers a few keys with a per-key limit of
// one while sweeps run continuously: if a sweep ever removed a slot an
// acquire was about to use, two slots would exist for one key and two
// requests of that key would be in flight at once.
func TestSweepNeverRacesAnAcquire(t *testing.T) {
	l := mustNew(t, Config{PerKey: 1})
	keys := []string{"a", "b", "c", "d"}
	var inside [4]atomic.Int32
	var violations, admitted atomic.Int64
	stop := make(chan struct{})
	var sweeps sync.WaitGroup
	sweeps.Add(1)
	go func() {
		defer sweeps.Done()
		for {
			select {
			case <-stop:
				return
			default:
				l.Sweep()
			}
		}
	}()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 3000; i++ {
				k := (g + i) % len(keys)
				ls, err := l.Acquire(context.Background(), shed.Request{Key: keys[k]})
				if err != nil {
					continue
				}
				admitted.Add(1)
				if inside[k].Add(1) > 1 {
					violations.Add(1)
				}
				inside[k].Add(-1)
				ls.Release(shed.Completed)
			}
		}(g)
	}
	wg.Wait()
	close(stop)
	sweeps.Wait()
	if v := violations.Load(); v > 0 {
		t.Fatalf("%d times two requests of one key were in flight under a per-key limit of 1", v)
	}
	if admitted.Load() == 0 {
		t.Fatal("nothing admitted")
	}
	if l.InFlight() != 0 {
		t.Fatalf("InFlight = %d at the end", l.InFlight())
	}
	l.Sweep()
	if n := l.Keys(); n != 0 {
		t.Fatalf("%d idle keys survive a sweep", n)
	}
}

func TestIdleKeysAreSweptAsKeysArrive(t *testing.T) {
	l := mustNew(t, Config{PerKey: 1})
	ctx := context.Background()
	held, _ := l.Acquire(ctx, shed.Request{Key: "held"})
	for i := 0; i < 20000; i++ {
		ls, err := l.Acquire(ctx, shed.Request{Key: "k" + itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		ls.Release(shed.Completed)
	}
	// Each shard sweeps when it doubles past its live keys: the map stays
	// bounded by about 2 × minSweepAt per shard, not by the keys ever seen.
	if n := l.Keys(); n > 2*minSweepAt*numShards {
		t.Fatalf("%d keys held after 20000 one-off keys", n)
	}
	if l.InFlightKey("held") != 1 {
		t.Fatal("a key in flight was swept")
	}
	held.Release(shed.Completed)
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}

func TestLocalReportsGauges(t *testing.T) {
	l, err := New(Config{Name: "in-flight", Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := l.Acquire(context.Background(), shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(shed.Completed)
	got := map[string]float64{}
	l.ReportGauges(func(g layerkit.Gauge) {
		if g.Layer != "in-flight" {
			t.Errorf("gauge %s from layer %q", g.Name, g.Layer)
		}
		got[g.Name] = g.Value
	})
	want := map[string]float64{layerkit.GaugeInFlight: 1, layerkit.GaugeLimit: 3, layerkit.GaugeQueued: 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
