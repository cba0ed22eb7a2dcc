package overage

import (
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedtest"
)

func TestEpisodesKeepsOneEpisodePerKey(t *testing.T) {
	var e Episodes
	e.Init(4, &shed.Enforcement{Mode: shed.Soft})
	a, b := e.Get("a", 1), e.Get("b", 1)
	if a == b {
		t.Fatal("two keys share an episode")
	}
	if e.Get("a", 2) != a {
		t.Fatal("a key's episode changed between calls")
	}
}

func TestEpisodesEvictsThosePastForgettingFirst(t *testing.T) {
	var e Episodes
	e.Init(2, &shed.Enforcement{Mode: shed.Soft, OverageFor: time.Second, OverageCooldown: time.Second})
	old := e.Get("old", 0)
	recent := e.Get("recent", int64(2500*time.Millisecond))
	// At 3 s, "old" was last over 3 s ago, past OverageFor + OverageCooldown.
	now := int64(3 * time.Second)
	e.Get("new", now)
	if e.Len() != 2 {
		t.Fatalf("%d episodes, want 2", e.Len())
	}
	if e.Get("recent", now) != recent {
		t.Fatal("the recent key lost its episode")
	}
	if e.Get("old", now) == old {
		t.Fatal("the key past forgetting kept its episode")
	}
}

func TestEpisodesEvictsTheLeastRecentWhenNoneIsPastForgetting(t *testing.T) {
	var e Episodes
	e.Init(2, &shed.Enforcement{Mode: shed.Soft, OverageFor: time.Minute})
	first := e.Get("first", 1)
	second := e.Get("second", 2)
	e.Get("third", 3)
	if e.Len() != 2 {
		t.Fatalf("%d episodes, want 2", e.Len())
	}
	if e.Get("second", 4) != second {
		t.Fatal("the more recent key lost its episode")
	}
	if e.Get("first", 5) == first {
		t.Fatal("the least recent key kept its episode")
	}
}

// In Soft mode a request over several limits is let past only when every
// key's episode allows it, and each key's episode records it either way.
func TestVerdictSoftNeedsEveryEpisode(t *testing.T) {
	enf := &shed.Enforcement{Mode: shed.Soft, OverageFor: 10 * time.Second, OverageCooldown: 20 * time.Second}
	clk := shedtest.NewClock(time.Unix(1000, 0))
	var e Episodes
	e.Init(16, enf)
	if v := e.Verdict(enf, clk, true, "a"); v != layerkit.AdmitOver {
		t.Fatalf("a's first overage: %v, want AdmitOver", v)
	}
	clk.Advance(11 * time.Second) // a's episode is over; b has none yet
	if v := e.Verdict(enf, clk, true, "a", "b"); v != layerkit.Deny {
		t.Fatalf("a past its episode, b in a fresh one: %v, want Deny", v)
	}
	if e.Len() != 2 {
		t.Fatalf("%d episodes, want a's and b's", e.Len())
	}
	if v := e.Verdict(enf, clk, true, "b"); v != layerkit.AdmitOver {
		t.Fatalf("b alone, within its episode: %v, want AdmitOver", v)
	}
	if v := e.Verdict(enf, clk, false, "b"); v != layerkit.Deny {
		t.Fatalf("b with no room in its overage: %v, want Deny", v)
	}
}

// Outside Soft mode no episode is kept: Elastic reads the headroom, Hard
// refuses, and a refusal follows the action and dry run.
func TestVerdictOtherModes(t *testing.T) {
	clk := shedtest.NewClock(time.Unix(1000, 0))
	room := 0.5
	cases := []struct {
		name   string
		enf    shed.Enforcement
		within bool
		want   layerkit.Verdict
	}{
		{"elastic with headroom", shed.Enforcement{Mode: shed.Elastic, Headroom: shed.HeadroomFunc(func() float64 { return room })}, true, layerkit.AdmitOver},
		{"elastic past its ceiling", shed.Enforcement{Mode: shed.Elastic, Headroom: shed.HeadroomFunc(func() float64 { return room })}, false, layerkit.Deny},
		{"elastic without headroom", shed.Enforcement{Mode: shed.Elastic, Headroom: shed.HeadroomFunc(func() float64 { return 0 })}, true, layerkit.Deny},
		{"hard", shed.Enforcement{}, false, layerkit.Deny},
		{"hard, dry run", shed.Enforcement{DryRun: true}, false, layerkit.AdmitDryRun},
		{"hard, queueing", shed.Enforcement{Action: shed.Queue}, false, layerkit.Wait},
	}
	for _, c := range cases {
		var e Episodes
		e.Init(16, &c.enf)
		if v := e.Verdict(&c.enf, clk, c.within, "a"); v != c.want {
			t.Errorf("%s: %v, want %v", c.name, v, c.want)
		}
		if e.Len() != 0 {
			t.Errorf("%s: %d episodes kept, want none", c.name, e.Len())
		}
	}
}
