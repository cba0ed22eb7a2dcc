package shed_test

import (
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
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
		{Mode: shed.Elastic, Headroom: room, MinHeadroom: 1},
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
		{shed.Enforcement{MinHeadroom: -0.1}, []string{"Enforcement.MinHeadroom"}},
		{shed.Enforcement{MinHeadroom: 1.5}, []string{"Enforcement.MinHeadroom"}},
		{shed.Enforcement{MinHeadroom: math.NaN()}, []string{"Enforcement.MinHeadroom"}},
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
						var ep shed.Episode
						got := e.Decide(now, p.withinLimit, p.withinCeiling, &ep)

						// What happens when the allowance does not apply.
						refuse := shed.Deny
						switch {
						case dry:
							refuse = shed.AdmitDryRun
						case action == shed.Queue:
							refuse = shed.Wait
						}
						var want shed.Verdict
						switch p.name {
						case "within":
							want = shed.Admit
						case "over-ceiling":
							want = refuse
						case "over-within-ceiling":
							switch mode {
							case shed.Hard:
								want = refuse
							case shed.Soft: // a fresh episode allows the overage
								want = shed.AdmitOver
							case shed.Elastic:
								want = refuse
								if roomy {
									want = shed.AdmitOver
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
	if v := e.Decide(t0, false, true, nil); v != shed.Deny {
		t.Fatalf("soft with no episode tracker: %d, want Deny", v)
	}
	if v := e.Decide(t0, true, true, nil); v != shed.Admit {
		t.Fatalf("within the limit with no tracker: %d, want Admit", v)
	}
}

func TestDecideElasticHeadroomThreshold(t *testing.T) {
	var h float64
	e := shed.Enforcement{Mode: shed.Elastic, Headroom: shed.HeadroomFunc(func() float64 { return h })}
	for _, tc := range []struct {
		min, h float64
		want   shed.Verdict
	}{
		{0, 0.2, shed.AdmitOver}, // default MinHeadroom 0.2, inclusive
		{0, 0.19, shed.Deny},
		{0.5, 0.5, shed.AdmitOver},
		{0.5, 0.49, shed.Deny},
		{1, 1, shed.AdmitOver},
	} {
		e.MinHeadroom, h = tc.min, tc.h
		if got := e.Decide(t0, false, true, nil); got != tc.want {
			t.Errorf("MinHeadroom %v, headroom %v: %d, want %d", tc.min, tc.h, got, tc.want)
		}
	}
	// Snaps back as soon as the signal drops, with no memory.
	e.MinHeadroom = 0
	h = 0.9
	if e.Decide(t0, false, true, nil) != shed.AdmitOver {
		t.Fatal("no overage with headroom")
	}
	h = 0
	if e.Decide(t0, false, true, nil) != shed.Deny {
		t.Fatal("overage without headroom")
	}
}

func TestEpisodeCutsOffSoftOverage(t *testing.T) {
	clock := shedtest.NewClock(t0)
	e := shed.Enforcement{Mode: shed.Soft, OverageFor: 10 * time.Second}
	var ep shed.Episode
	over := func() shed.Verdict { return e.Decide(clock.Now(), false, true, &ep) }

	if v := over(); v != shed.AdmitOver {
		t.Fatalf("start of overage: %d, want AdmitOver", v)
	}
	clock.Advance(10 * time.Second)
	if v := over(); v != shed.AdmitOver {
		t.Fatalf("at OverageFor: %d, want AdmitOver", v)
	}
	clock.Advance(time.Nanosecond)
	if v := over(); v != shed.Deny {
		t.Fatalf("past OverageFor: %d, want Deny", v)
	}
	clock.Advance(time.Hour)
	if v := over(); v != shed.Deny {
		t.Fatalf("a spent episode allowed the overage again: %d", v)
	}
	// Back under the limit ends the episode; the next overage starts afresh.
	if v := e.Decide(clock.Now(), true, true, &ep); v != shed.Admit {
		t.Fatalf("within the limit: %d, want Admit", v)
	}
	if v := over(); v != shed.AdmitOver {
		t.Fatalf("new episode: %d, want AdmitOver", v)
	}
	clock.Advance(10*time.Second + 1)
	if v := over(); v != shed.Deny {
		t.Fatalf("new episode past OverageFor: %d, want Deny", v)
	}
}

func TestEpisodeDefaultOverageFor(t *testing.T) {
	clock := shedtest.NewClock(t0)
	e := shed.Enforcement{Mode: shed.Soft, Action: shed.Queue}
	var ep shed.Episode
	if v := e.Decide(clock.Now(), false, true, &ep); v != shed.AdmitOver {
		t.Fatalf("%d", v)
	}
	clock.Advance(shed.DefaultOverageFor)
	if v := e.Decide(clock.Now(), false, true, &ep); v != shed.AdmitOver {
		t.Fatalf("at the default OverageFor: %d, want AdmitOver", v)
	}
	clock.Advance(time.Millisecond)
	if v := e.Decide(clock.Now(), false, true, &ep); v != shed.Wait {
		t.Fatalf("past the default OverageFor with Queue: %d, want Wait", v)
	}
}

// TestEpisodeConcurrent checks the tracker under -race: many goroutines
// deciding at once agree on one episode start.
func TestEpisodeConcurrent(t *testing.T) {
	e := shed.Enforcement{Mode: shed.Soft, OverageFor: time.Second}
	var ep shed.Episode
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				at := t0.Add(time.Duration(j) * time.Millisecond)
				if v := e.Decide(at, false, true, &ep); v != shed.AdmitOver {
					t.Errorf("goroutine %d at +%dms: %d, want AdmitOver", i, j, v)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	if v := e.Decide(t0.Add(1001*time.Millisecond), false, true, &ep); v != shed.Deny {
		t.Fatalf("after the shared episode ran out: %d, want Deny", v)
	}
}

func TestDecideAllocatesNothing(t *testing.T) {
	e := shed.Enforcement{Mode: shed.Elastic, Headroom: shed.HeadroomFunc(func() float64 { return 1 })}
	soft := shed.Enforcement{Mode: shed.Soft}
	var ep shed.Episode
	allocs := testing.AllocsPerRun(1000, func() {
		e.Decide(t0, false, true, nil)
		soft.Decide(t0, false, true, &ep)
		soft.Decide(t0, true, true, &ep)
	})
	if allocs != 0 {
		t.Fatalf("Decide allocates %v times", allocs)
	}
}
