package main

import (
	"context"
	"testing"
	"time"
)

// TestTwoServices is the bounded version of the demonstration: three runs
// of 1.5s at 5x B's capacity. It asserts orderings, not the full run's
// figures (go run ./examples/twoservices), since the machine running the
// suite is shared: with propagation A's critical calls succeed far more
// often than without, and more often than its sheddable ones; with the
// cooperating client B rejects at most half as many requests per second,
// for about the same goodput.
func TestTwoServices(t *testing.T) {
	if testing.Short() {
		t.Skip("a load run")
	}
	base := Setup{Work: 5 * time.Millisecond, Load: 5, Critical: 0.05, Duration: 1500 * time.Millisecond, Timeout: time.Second}
	run := func(propagate, cooperate bool) Result {
		s := base
		s.Propagate, s.Cooperate = propagate, cooperate
		r, err := Run(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		t.Log(r)
		return r
	}
	blind, prop, coop := run(false, false), run(true, false), run(true, true)

	if prop.CriticalSuccess() <= blind.CriticalSuccess() || prop.CriticalSuccess() <= prop.SheddableSuccess() {
		t.Errorf("propagation: critical success %.3f, without it %.3f, sheddable %.3f",
			prop.CriticalSuccess(), blind.CriticalSuccess(), prop.SheddableSuccess())
	}
	if coop.CriticalSuccess() <= coop.SheddableSuccess() {
		t.Errorf("cooperating client: critical success %.3f, sheddable %.3f", coop.CriticalSuccess(), coop.SheddableSuccess())
	}
	if coop.RejectionsPerSecond() > prop.RejectionsPerSecond()/2 {
		t.Errorf("cooperating client: B rejects %.1f/s, with a plain client %.1f/s", coop.RejectionsPerSecond(), prop.RejectionsPerSecond())
	}
	// Goodput within noise of the plain client's: the suite's machine is
	// shared, so the full run, not this one, checks "not lower".
	if coop.Goodput() < 0.8*prop.Goodput() {
		t.Errorf("cooperating client: goodput %.2f, with a plain client %.2f", coop.Goodput(), prop.Goodput())
	}
}
