package worker

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// With a worker budget and the Queue action, the shed level once
// climbed to 3 and stayed there after the overload ended, because the
// queue-delay signal read a queue kept full by the requests waiting for the
// level to fall. A signal must not be fed by the shedding it causes: once
// the pressure that raised the level is gone, the level falls (one priority
// per Recovery) and the waiters are served.
func TestQueueOfShedRequestsDoesNotHoldTheLevel(t *testing.T) {
	const queued = 8
	l, pr, clock := pressureLayer(t, Config{Workers: 2, Enforcement: shed.Enforcement{Action: shed.Queue,
		Queue: shed.QueueConfig{MaxLength: queued, MaxWait: time.Hour}}})
	pr.Store(math.Float64bits(3)) // the flood
	for i := 0; i < 8; i++ {
		clock.Advance(DefaultInterval)
	}
	if l.Level() != 3 {
		t.Fatalf("level %v under pressure 3, want 3", l.Level())
	}

	// Requests keep coming while the level sheds them: they fill the queue,
	// waiting for the level to fall. Each releases its lease at once when
	// admitted.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	served := make(chan struct{}, queued)
	for i := 0; i < queued; i++ {
		p := []shed.Priority{shed.TestMode, shed.Sheddable, shed.Default}[i%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls, err := l.Acquire(ctx, shed.Request{Priority: p})
			if err == nil {
				ls.Release(shed.Completed)
				served <- struct{}{}
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	waitUntil(t, "the queue to fill", func() bool { return l.queue.Len() == queued })

	pr.Store(math.Float64bits(0.1)) // the flood is over
	var calm time.Duration
	for i := 1; i <= 60 && calm == 0; i++ { // 15s
		clock.Advance(DefaultInterval)
		if l.Level() == 0 {
			calm = time.Duration(i) * DefaultInterval
		}
	}
	if calm == 0 {
		t.Fatalf("15s after the pressure fell to 0.1, level %v with %d requests queued: the queue of shed requests holds the level up",
			l.Level(), l.queue.Len())
	}
	// From level 3 at one level per Recovery (3s), plus the samples the
	// moving average takes to fall below RecoverBelow.
	if bound := 3*DefaultRecovery + time.Second; calm > bound {
		t.Fatalf("level back to 0 after %v, want within %v", calm, bound)
	}
	for i := 0; i < queued; i++ {
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d queued requests served once the level was 0", i, queued)
		}
	}
}

// waitUntil polls cond until it holds: for goroutines to reach a state the
// test cannot be told of (queued), never to let time pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
