package shed_test

import (
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"

	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedtest"
)

func TestModeAndActionWords(t *testing.T) {
	for _, m := range []shed.Mode{shed.Hard, shed.Soft, shed.Elastic} {
		got, err := shed.ParseMode(" " + strings.ToUpper(m.String()) + " ")
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := shed.ParseMode("firm"); err == nil || !strings.Contains(err.Error(), "hard, soft, elastic") {
		t.Errorf("ParseMode(firm) error %v does not name the valid modes", err)
	}
	if s := shed.Mode(9).String(); s != "mode(9)" {
		t.Errorf("Mode(9).String() = %q", s)
	}
	if shed.Reject.String() != "reject" || shed.Queue.String() != "queue" || shed.Action(4).String() != "action(4)" {
		t.Errorf("Action words: %v %v %v", shed.Reject, shed.Queue, shed.Action(4))
	}
	for o, w := range map[shed.Outcome]string{shed.Completed: "completed", shed.Failed: "failed",
		shed.Dropped: "dropped", shed.Unused: "unused", shed.Outcome(9): "outcome(?)"} {
		if o.String() != w {
			t.Errorf("Outcome %d = %q, want %q", o, o.String(), w)
		}
	}
}

func TestEnforcementValidate(t *testing.T) {
	room := shed.HeadroomFunc(func() float64 { return 1 })
	if err := (shed.Enforcement{}).Validate(); err != nil {
		t.Fatalf("zero Enforcement: %v", err)
	}
	good := []shed.Enforcement{
		{Mode: shed.Soft, Overage: 0.5, OverageFor: time.Minute},
		{Mode: shed.Elastic, Headroom: room, MinHeadroom: new(1.0)},
		{Mode: shed.Elastic, Headroom: room, MinHeadroom: new(0.0)},
		{Mode: shed.Soft, Overage: shed.MaxOverage, OverageCooldown: time.Hour},
		{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 1, MaxWait: time.Millisecond}},
		{DryRun: true, Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 1, MaxWait: time.Millisecond}},
	}
	for _, e := range good {
		if err := e.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", e, err)
		}
	}
	bad := []struct {
		e     shed.Enforcement
		names []string
	}{
		{shed.Enforcement{Mode: 3}, []string{"Enforcement.Mode"}},
		{shed.Enforcement{Action: 2}, []string{"Enforcement.Action"}},
		{shed.Enforcement{Overage: -0.1}, []string{"Enforcement.Overage"}},
		{shed.Enforcement{Overage: math.NaN()}, []string{"Enforcement.Overage"}},
		{shed.Enforcement{Overage: math.Inf(1)}, []string{"Enforcement.Overage"}},
		{shed.Enforcement{OverageFor: -time.Second}, []string{"Enforcement.OverageFor"}},
		{shed.Enforcement{Overage: 1e30}, []string{"Enforcement.Overage"}},
		{shed.Enforcement{Overage: shed.MaxOverage + 0.001}, []string{"Enforcement.Overage"}},
		{shed.Enforcement{OverageCooldown: -time.Second}, []string{"Enforcement.OverageCooldown"}},
		{shed.Enforcement{MinHeadroom: new(-0.1)}, []string{"Enforcement.MinHeadroom"}},
		{shed.Enforcement{MinHeadroom: new(1.5)}, []string{"Enforcement.MinHeadroom"}},
		{shed.Enforcement{MinHeadroom: new(math.NaN())}, []string{"Enforcement.MinHeadroom"}},
		{shed.Enforcement{Mode: shed.Elastic}, []string{"Enforcement.Headroom"}},
		{shed.Enforcement{Action: shed.Queue}, []string{"QueueConfig.MaxLength", "QueueConfig.MaxWait"}},
		{shed.Enforcement{Mode: shed.Elastic, Overage: -1, Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 1}},
			[]string{"Enforcement.Headroom", "Enforcement.Overage", "QueueConfig.MaxWait"}},
	}
	for _, tc := range bad {
		err := tc.e.Validate()
		if err == nil {
			t.Errorf("Validate(%+v) = nil; want an error", tc.e)
			continue
		}
		for _, n := range tc.names {
			if !strings.Contains(err.Error(), n) {
				t.Errorf("Validate(%+v) = %q; does not name %s", tc.e, err, n)
			}
		}
	}
}

func TestEnforcementCeiling(t *testing.T) {
	for _, tc := range []struct {
		e     shed.Enforcement
		limit int64
		want  int64
	}{
		{shed.Enforcement{}, 100, 100},
		{shed.Enforcement{Overage: 5}, 100, 100}, // hard ignores the overage
		{shed.Enforcement{Mode: shed.Soft}, 100, 110},
		{shed.Enforcement{Mode: shed.Elastic}, 100, 110},
		{shed.Enforcement{Mode: shed.Soft}, 101, 112}, // 10.1 rounds up
		{shed.Enforcement{Mode: shed.Soft}, 5, 6},     // at least one unit
		{shed.Enforcement{Mode: shed.Soft}, 1, 2},
		{shed.Enforcement{Mode: shed.Soft, Overage: 0.5}, 10, 15},
		{shed.Enforcement{Mode: shed.Elastic, Overage: 2}, 10, 30},
		{shed.Enforcement{Mode: shed.Soft}, math.MaxInt64, math.MaxInt64},
		{shed.Enforcement{Mode: shed.Soft}, math.MaxInt64 - 1, math.MaxInt64},
		{shed.Enforcement{Mode: shed.Soft, Overage: shed.MaxOverage}, math.MaxInt64 / 2, math.MaxInt64},
		{shed.Enforcement{Mode: shed.Soft, Overage: 1e30}, 100, math.MaxInt64}, // invalid, yet no wrap-around
	} {
		if got := tc.e.Ceiling(tc.limit); got != tc.want {
			t.Errorf("%v overage %v: Ceiling(%d) = %d, want %d", tc.e.Mode, tc.e.Overage, tc.limit, got, tc.want)
		}
	}
}

// TestEnforcementDecide walks every mode × dry run × action × position
// against the limit. The expected verdict is spelled out per position
// rather than computed from the rule under test.
func TestEnforcementDecide(t *testing.T) {
	now := t0
	type pos struct {
		name                       string
		withinLimit, withinCeiling bool
	}
	positions := []pos{{"within", true, true}, {"over-within-ceiling", false, true}, {"over-ceiling", false, false}}
	for _, mode := range []shed.Mode{shed.Hard, shed.Soft, shed.Elastic} {
		for _, roomy := range []bool{true, false} {
			for _, dry := range []bool{false, true} {
				for _, action := range []shed.Action{shed.Reject, shed.Queue} {
					for _, p := range positions {
						headroom := 0.1
						if roomy {
							headroom = 0.9
						}
						e := shed.Enforcement{Mode: mode, DryRun: dry, Action: action,
							Headroom: shed.HeadroomFunc(func() float64 { return headroom })}
						var ep layerkit.Episode
						got := layerkit.Decide(&e, now, p.withinLimit, p.withinCeiling, &ep)

						// What happens when the allowance does not apply.
						refuse := layerkit.Deny
						switch {
						case dry:
							refuse = layerkit.AdmitDryRun
						case action == shed.Queue:
							refuse = layerkit.Wait
						}
						var want layerkit.Verdict
						switch p.name {
						case "within":
							want = layerkit.Admit
						case "over-ceiling":
							want = refuse
						case "over-within-ceiling":
							switch mode {
							case shed.Hard:
								want = refuse
							case shed.Soft: // a fresh episode allows the overage
								want = layerkit.AdmitOver
							case shed.Elastic:
								want = refuse
								if roomy {
									want = layerkit.AdmitOver
								}
							}
						}
						if got != want {
							t.Errorf("%v dry=%v %v headroom=%v %s: Decide = %d, want %d",
								mode, dry, action, headroom, p.name, got, want)
						}
					}
				}
			}
		}
	}
}

func TestDecideSoftWithoutEpisodeRefuses(t *testing.T) {
	e := shed.Enforcement{Mode: shed.Soft}
	if v := layerkit.Decide(&e, t0, false, true, nil); v != layerkit.Deny {
		t.Fatalf("soft with no episode tracker: %d, want Deny", v)
	}
	if v := layerkit.Decide(&e, t0, true, true, nil); v != layerkit.Admit {
		t.Fatalf("within the limit with no tracker: %d, want Admit", v)
	}
}

func TestDecideElasticHeadroomThreshold(t *testing.T) {
	var h float64
	e := shed.Enforcement{Mode: shed.Elastic, Headroom: shed.HeadroomFunc(func() float64 { return h })}
	for _, tc := range []struct {
		min  *float64
		h    float64
		want layerkit.Verdict
	}{
		{nil, 0.2, layerkit.AdmitOver}, // default MinHeadroom 0.2, inclusive
		{nil, 0.19, layerkit.Deny},
		{new(0.5), 0.5, layerkit.AdmitOver},
		{new(0.5), 0.49, layerkit.Deny},
		{new(1.0), 1, layerkit.AdmitOver},
		{new(0.0), 0, layerkit.AdmitOver}, // 0 can be set: the overage whatever the signal
	} {
		e.MinHeadroom, h = tc.min, tc.h
		if got := layerkit.Decide(&e, t0, false, true, nil); got != tc.want {
			t.Errorf("MinHeadroom %v, headroom %v: %d, want %d", tc.min, tc.h, got, tc.want)
		}
	}
	// Snaps back as soon as the signal drops, with no memory.
	e.MinHeadroom = nil
	h = 0.9
	if layerkit.Decide(&e, t0, false, true, nil) != layerkit.AdmitOver {
		t.Fatal("no overage with headroom")
	}
	h = 0
	if layerkit.Decide(&e, t0, false, true, nil) != layerkit.Deny {
		t.Fatal("overage without headroom")
	}
}

// TestElasticHasNoTimeLimit: unlike Soft, Elastic allows the overage for as
// long as the signal says there is room, however long that is.
func TestElasticHasNoTimeLimit(t *testing.T) {
	e := shed.Enforcement{Mode: shed.Elastic, OverageFor: time.Second,
		Headroom: shed.HeadroomFunc(func() float64 { return 1 })}
	for d := time.Duration(0); d <= 24*time.Hour; d += time.Minute {
		if v := layerkit.Decide(&e, t0.Add(d), false, true, nil); v != layerkit.AdmitOver {
			t.Fatalf("elastic with headroom, %v into the overage: %d, want AdmitOver", d, v)
		}
	}
}

func TestEpisodeCutsOffSoftOverage(t *testing.T) {
	clock := shedtest.NewClock(t0)
	e := shed.Enforcement{Mode: shed.Soft, OverageFor: 10 * time.Second}
	var ep layerkit.Episode
	over := func() layerkit.Verdict { return layerkit.Decide(&e, clock.Now(), false, true, &ep) }

	if v := over(); v != layerkit.AdmitOver {
		t.Fatalf("start of overage: %d, want AdmitOver", v)
	}
	clock.Advance(5 * time.Second)
	if v := over(); v != layerkit.AdmitOver {
		t.Fatalf("in the overage: %d, want AdmitOver", v)
	}
	clock.Advance(5 * time.Second)
	if v := over(); v != layerkit.AdmitOver {
		t.Fatalf("at OverageFor: %d, want AdmitOver", v)
	}
	clock.Advance(time.Nanosecond)
	if v := over(); v != layerkit.Deny {
		t.Fatalf("past OverageFor: %d, want Deny", v)
	}
	// Within the limit does not end the episode: only a cool-down
	// (default OverageFor) with no request over the limit does.
	if v := layerkit.Decide(&e, clock.Now(), true, true, &ep); v != layerkit.Admit {
		t.Fatalf("within the limit: %d, want Admit", v)
	}
	clock.Advance(10*time.Second - 1)
	if v := over(); v != layerkit.Deny {
		t.Fatalf("a new episode before the cool-down: %d, want Deny", v)
	}
	clock.Advance(10 * time.Second)
	if v := over(); v != layerkit.AdmitOver {
		t.Fatalf("new episode after the cool-down: %d, want AdmitOver", v)
	}
	clock.Advance(5 * time.Second)
	over()
	clock.Advance(5*time.Second + 1)
	if v := over(); v != layerkit.Deny {
		t.Fatalf("new episode past OverageFor: %d, want Deny", v)
	}
	// End forgets it all.
	ep.End()
	if v := over(); v != layerkit.AdmitOver {
		t.Fatalf("after End: %d, want AdmitOver", v)
	}
}

// TestSoftSustainedOverloadIsBoundedInTime offers a soft limit twice what
// it allows for two minutes: every 100ms one request finds the layer under
// its limit and one finds it over. The overage is allowed for one episode
// (OverageFor from the first request over the limit), then never again
// while the overload lasts; after a quiet cool-down a new episode begins.
func TestSoftSustainedOverloadIsBoundedInTime(t *testing.T) {
	for _, cool := range []time.Duration{0, 5 * time.Second, time.Minute} {
		e := shed.Enforcement{Mode: shed.Soft, OverageFor: 30 * time.Second, OverageCooldown: cool}
		var ep layerkit.Episode
		at := t0
		lastOver := time.Duration(-1)
		for d := time.Duration(0); d < 2*time.Minute; d += 100 * time.Millisecond {
			at = t0.Add(d)
			if v := layerkit.Decide(&e, at, true, true, &ep); v != layerkit.Admit {
				t.Fatalf("cool-down %v, +%v within the limit: %d", cool, d, v)
			}
			if v := layerkit.Decide(&e, at, false, true, &ep); v == layerkit.AdmitOver {
				lastOver = d
			}
		}
		if lastOver != 30*time.Second {
			t.Errorf("cool-down %v: last overage at +%v under sustained overload, want +30s and never after", cool, lastOver)
		}
		wait := cool
		if wait == 0 {
			wait = 30 * time.Second // the default: OverageFor
		}
		if v := layerkit.Decide(&e, at.Add(wait-time.Millisecond), false, true, &ep); v != layerkit.Deny {
			t.Errorf("cool-down %v: a new episode %v after the overload: %d, want Deny", cool, wait-time.Millisecond, v)
		}
		if v := layerkit.Decide(&e, at.Add(2*wait), false, true, &ep); v != layerkit.AdmitOver {
			t.Errorf("cool-down %v: no new episode after a quiet cool-down: %d", cool, v)
		}
	}
}

// TestDecideOverEveryEpisode: a request over two limits gets the overage
// only if both limits' episodes allow it, and both record it.
func TestDecideOverEveryEpisode(t *testing.T) {
	e := shed.Enforcement{Mode: shed.Soft, OverageFor: 10 * time.Second}
	var key, all layerkit.Episode
	for d := time.Duration(0); d <= 10*time.Second; d += time.Second {
		if v := layerkit.DecideOver(&e, t0.Add(d), true, &all); v != layerkit.AdmitOver { // the overall limit's episode
			t.Fatalf("+%v: %d", d, v)
		}
	}
	at := t0.Add(11 * time.Second)
	if v := layerkit.DecideOver(&e, at, true, &key); v != layerkit.AdmitOver {
		t.Fatalf("the key's own episode: %d", v)
	}
	if v := layerkit.DecideOver(&e, at, true, &key, &all); v != layerkit.Deny {
		t.Fatalf("over both limits, the overall episode spent: %d, want Deny", v)
	}
	if v := layerkit.DecideOver(&e, at, false, &key); v != layerkit.Deny {
		t.Fatalf("over the ceiling: %d, want Deny", v)
	}
	if v := layerkit.DecideOver(&e, at, true); v != layerkit.Deny {
		t.Fatalf("soft with no episode: %d, want Deny", v)
	}
	// key recorded the refused request at +11s: still in its own episode,
	// which began at +11s; all recorded it too, so its cool-down restarted.
	if v := layerkit.DecideOver(&e, t0.Add(20*time.Second), true, &all); v != layerkit.Deny {
		t.Fatalf("overall limit within its cool-down: %d, want Deny", v)
	}
	if v := layerkit.DecideOver(&e, t0.Add(20*time.Second), true, &key); v != layerkit.AdmitOver {
		t.Fatalf("key within its episode: %d, want AdmitOver", v)
	}
}

func TestEpisodeDefaultOverageFor(t *testing.T) {
	clock := shedtest.NewClock(t0)
	e := shed.Enforcement{Mode: shed.Soft, Action: shed.Queue}
	var ep layerkit.Episode
	if v := layerkit.Decide(&e, clock.Now(), false, true, &ep); v != layerkit.AdmitOver {
		t.Fatalf("%d", v)
	}
	clock.Advance(shed.DefaultOverageFor / 2)
	if v := layerkit.Decide(&e, clock.Now(), false, true, &ep); v != layerkit.AdmitOver {
		t.Fatalf("within the default OverageFor: %d, want AdmitOver", v)
	}
	clock.Advance(shed.DefaultOverageFor / 2)
	if v := layerkit.Decide(&e, clock.Now(), false, true, &ep); v != layerkit.AdmitOver {
		t.Fatalf("at the default OverageFor: %d, want AdmitOver", v)
	}
	clock.Advance(time.Millisecond)
	if v := layerkit.Decide(&e, clock.Now(), false, true, &ep); v != layerkit.Wait {
		t.Fatalf("past the default OverageFor with Queue: %d, want Wait", v)
	}
}

// TestEpisodeConcurrent checks the tracker under -race: many goroutines
// deciding at once agree on one episode start.
func TestEpisodeConcurrent(t *testing.T) {
	e := shed.Enforcement{Mode: shed.Soft, OverageFor: time.Second}
	var ep layerkit.Episode
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				at := t0.Add(time.Duration(j) * time.Millisecond)
				if v := layerkit.Decide(&e, at, false, true, &ep); v != layerkit.AdmitOver {
					t.Errorf("goroutine %d at +%dms: %d, want AdmitOver", i, j, v)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	if v := layerkit.Decide(&e, t0.Add(1001*time.Millisecond), false, true, &ep); v != layerkit.Deny {
		t.Fatalf("after the shared episode ran out: %d, want Deny", v)
	}
}

func TestDecideAllocatesNothing(t *testing.T) {
	e := shed.Enforcement{Mode: shed.Elastic, Headroom: shed.HeadroomFunc(func() float64 { return 1 })}
	soft := shed.Enforcement{Mode: shed.Soft}
	var ep layerkit.Episode
	allocs := testing.AllocsPerRun(1000, func() {
		layerkit.Decide(&e, t0, false, true, nil)
		layerkit.Decide(&soft, t0, false, true, &ep)
		layerkit.Decide(&soft, t0, true, true, &ep)
		layerkit.DecideOver(&soft, t0, true, &ep, &ep)
	})
	if allocs != 0 {
		t.Fatalf("Decide allocates %v times", allocs)
	}
}

// TestEpisodeBudget: sparse requests over the limit get at most OverageFor
// of overage in any OverageFor + OverageCooldown; Hold keeps a limit that
// is still exceeded from cooling down.
func TestEpisodeBudget(t *testing.T) {
	const length, cool = 10 * time.Second, 20 * time.Second
	var ep layerkit.Episode
	over := func(d time.Duration) bool { return ep.Over(t0.Add(d), length, cool) }
	if !over(0) {
		t.Fatal("first overage refused")
	}
	if over(25 * time.Second) { // quiet for the cool-down, but within 30s of the last start
		t.Fatal("a new episode 25s after the last began (budget: 10s in 30s)")
	}
	if !over(50 * time.Second) { // 25s after the last request over the limit, 50s after the start
		t.Fatal("no new episode after a quiet cool-down and a full period")
	}
	ep.Hold(t0.Add(90 * time.Second)) // still exceeded at +90s
	if over(100 * time.Second) {
		t.Fatal("a new episode 10s after the limit was last exceeded")
	}
	var fresh layerkit.Episode
	fresh.Hold(t0)
	if !fresh.Over(t0.Add(time.Second), length, cool) {
		t.Fatal("Hold before any Over must not block the first episode")
	}
}
