package overage

import (
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
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
