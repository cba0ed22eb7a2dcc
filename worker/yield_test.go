package worker

import (
	"context"
	"runtime"
	"testing"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// starting puts a request of priority p in the layer as if it had been
// admitted and were yielding before it starts.
func starting(l *Layer, p shed.Priority, cost int64) *grant {
	l.inflight.Add(cost)
	g := &grant{owner: l, prio: p.Index(), cost: cost}
	g.state.Store(grantStarting)
	l.startMu.Lock()
	l.starting = append(l.starting, g)
	l.startMu.Unlock()
	return g
}

func TestHigherPriorityDisplacesAStartingRequest(t *testing.T) {
	l, _, _ := pressureLayer(t, Config{Workers: 1, Yield: true})
	ctx := context.Background()
	victim := starting(l, shed.Sheddable, 1)
	if _, err := l.Acquire(ctx, shed.Request{Priority: shed.Sheddable}); err == nil {
		t.Fatal("a request of the same priority displaced a starting one")
	}
	ls, err := l.Acquire(ctx, shed.Request{Priority: shed.Default})
	if err != nil {
		t.Fatalf("default did not displace a starting sheddable request: %v", err)
	}
	if victim.state.Load() != grantDisplaced || l.InFlight() != 1 {
		t.Fatalf("victim state %d, in flight %d: want displaced, 1", victim.state.Load(), l.InFlight())
	}
	// Nothing is starting now: default is refused, critical goes over.
	if _, err := l.Acquire(ctx, shed.Request{Priority: shed.Default}); err == nil {
		t.Fatal("default admitted over a spent budget")
	}
	c, err := l.Acquire(ctx, shed.Request{Priority: shed.Critical})
	if err != nil || l.InFlight() != 2 {
		t.Fatalf("critical: %v, in flight %d", err, l.InFlight())
	}
	ls.Release(shed.Completed)
	c.Release(shed.Completed)
	if l.InFlight() != 0 {
		t.Fatalf("in flight %d after releases, want 0", l.InFlight())
	}
	// A costlier victim gives back what the displacer does not need.
	starting(l, shed.TestMode, 3)
	c, err = l.Acquire(ctx, shed.Request{Priority: shed.Critical})
	if err != nil || l.InFlight() != 1 {
		t.Fatalf("critical displacing a cost-3 test-mode request: %v, in flight %d, want 1", err, l.InFlight())
	}
	c.Release(shed.Completed)
}

// On one P, a request admitted while another of higher priority is waiting
// to run yields to it, is displaced, and is refused; the other gets the
// budget.
func TestYieldLetsTheWaitingRequestDisplace(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	l, _, _ := pressureLayer(t, Config{Workers: 1, Yield: true})
	ctx := context.Background()
	type got struct {
		ls  shed.Lease
		err error
	}
	critical := make(chan got, 1)
	go func() { // runnable, but does not run until this goroutine yields
		ls, err := l.Acquire(ctx, shed.Request{Priority: shed.Critical})
		critical <- got{ls, err}
	}()
	_, err := l.Acquire(ctx, shed.Request{Priority: shed.Sheddable})
	c := <-critical
	if c.err != nil {
		t.Fatalf("critical: %v", c.err)
	}
	if err == nil {
		t.Skip("the scheduler ran the sheddable request to the end first; nothing to check")
	}
	if r := shedtest.Rejection(t, err); r.Reason != reason || l.InFlight() != 1 {
		t.Fatalf("displaced request: %+v, in flight %d", r, l.InFlight())
	}
	c.ls.Release(shed.Completed)
}
