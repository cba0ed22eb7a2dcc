package concurrency

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// queued spins (without sleeping) until n requests wait in l's queue.
func queued(t *testing.T, l *Layer, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for l.Queued() != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue length %d, want %d", l.Queued(), n)
		}
		runtime.Gosched()
	}
}

type result struct {
	lease shed.Lease
	err   error
}

func acquireAsync(ctx context.Context, l *Layer, req shed.Request) chan result {
	ch := make(chan result, 1)
	go func() {
		ls, err := l.Acquire(ctx, req)
		ch <- result{ls, err}
	}()
	return ch
}

func TestQueueWaitsForARelease(t *testing.T) {
	clock := shedtest.NewClock(t0)
	l := mustNew(t, Config{Limit: 1, PerKey: 1, Clock: clock, Enforcement: shed.Enforcement{Action: shed.Queue,
		Queue: shed.QueueConfig{MaxLength: 4, MaxWait: time.Second}}})
	ctx := context.Background()
	first, err := l.Acquire(ctx, shed.Request{Key: "a"})
	if err != nil {
		t.Fatal(err)
	}
	// Over the client's own limit: no queueing, 429 at once.
	_, err = l.Acquire(ctx, shed.Request{Key: "a"})
	if r := shedtest.Rejection(t, err); r.Status != http.StatusTooManyRequests || r.Waited != 0 {
		t.Fatalf("per-key: %+v", r)
	}

	waiting := acquireAsync(ctx, l, shed.Request{Key: "b"})
	queued(t, l, 1)
	clock.Advance(10 * time.Millisecond)
	first.Release(shed.Completed)
	got := <-waiting
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.lease.Waited != 10*time.Millisecond || l.InFlight() != 1 || l.InFlightKey("b") != 1 {
		t.Fatalf("waited %v, in flight %d", got.lease.Waited, l.InFlight())
	}

	// MaxWait passes: 503, with how long it waited.
	timedOut := acquireAsync(ctx, l, shed.Request{Key: "c"})
	queued(t, l, 1)
	clock.Advance(time.Second)
	res := <-timedOut
	r := shedtest.Rejection(t, res.err)
	if r.Status != http.StatusServiceUnavailable || r.Waited != time.Second || len(r.Policies) != 1 || r.Policies[0].Policy != PolicyOverall {
		t.Fatalf("timed out: %+v", r)
	}

	// The caller goes away: its error, and nothing held.
	cctx, cancel := context.WithCancel(ctx)
	gone := acquireAsync(cctx, l, shed.Request{Key: "d"})
	queued(t, l, 1)
	cancel()
	if res := <-gone; !errors.Is(res.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", res.err)
	}
	if l.InFlight() != 1 || l.InFlightKey("d") != 0 || l.queue.Len() != 0 {
		t.Fatalf("after a cancelled wait: in flight %d, d %d, queue %d", l.InFlight(), l.InFlightKey("d"), l.queue.Len())
	}
	got.lease.Release(shed.Completed)
	if l.InFlight() != 0 {
		t.Fatal("not back to zero")
	}
}

func TestQueueServesHigherPriorityFirst(t *testing.T) {
	clock := shedtest.NewClock(t0)
	l := mustNew(t, Config{Limit: 1, Clock: clock, Enforcement: shed.Enforcement{Action: shed.Queue,
		Queue: shed.QueueConfig{MaxLength: 4, MaxWait: time.Second}}})
	ctx := context.Background()
	first, _ := l.Acquire(ctx, shed.Request{})
	low := acquireAsync(ctx, l, shed.Request{Priority: shed.Sheddable})
	queued(t, l, 1)
	high := acquireAsync(ctx, l, shed.Request{Priority: shed.Critical})
	queued(t, l, 2)
	first.Release(shed.Completed)
	h := <-high
	if h.err != nil {
		t.Fatal(h.err)
	}
	h.lease.Release(shed.Completed)
	lo := <-low
	if lo.err != nil {
		t.Fatal(lo.err)
	}
	lo.lease.Release(shed.Completed)
	if l.InFlight() != 0 {
		t.Fatal("not back to zero")
	}
}
