package worker

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// A request that arrives between a release and the hand-off of the freed
// capacity competes for it by priority: on a busy P the requests read by
// the poll that runs the hand-off are decided first. Granted at once in
// the releaser (as before), the capacity went to the sheddable request
// already waiting and the critical one waited behind it.
func TestReleaseHandsOffAfterTheRequestsReadMeanwhile(t *testing.T) {
	handoff.once.Do(handoff.start)
	if handoff.wake == nil {
		t.Skip("no pollable pipe here: releases grant at once")
	}
	// One P: the hand-off's goroutine cannot run until this one blocks,
	// as on a one-CPU server busy with admitted work.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	clock := shedtest.NewClock(t0)
	l := signalLayer(t, clock, Config{Limit: LimitConfig{Initial: 1, Min: 1, Max: 1}})
	l.busyCPU.Store(true) // as the sampler sets it on a busy CPU
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	held, err := l.Acquire(ctx, shed.Request{Priority: shed.Default})
	if err != nil {
		t.Fatal(err)
	}
	sheddable := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(ctx, shed.Request{Priority: shed.Sheddable})
		if err == nil {
			ls.Release(shed.Completed)
		}
		sheddable <- err
	}()
	waitUntil(t, "the sheddable request to queue", func() bool { return l.Queued() == 1 })

	held.Release(shed.Completed)
	critical, err := l.Acquire(ctx, shed.Request{Priority: shed.Critical})
	if err != nil {
		t.Fatalf("the critical request that came after the release: %v", err)
	}
	if n := l.Queued(); n != 1 {
		t.Fatalf("%d waiting once the critical request was admitted, want the sheddable one still waiting", n)
	}
	critical.Release(shed.Completed)
	if err := <-sheddable; err != nil {
		t.Fatalf("the sheddable request, once the critical one was done: %v", err)
	}
}

// A release with nobody arriving after it still hands the capacity to the
// waiters, through the poller.
func TestReleaseHandsOffWithNothingElseToRun(t *testing.T) {
	clock := shedtest.NewClock(t0)
	l := signalLayer(t, clock, Config{Limit: LimitConfig{Initial: 1, Min: 1, Max: 1}})
	l.busyCPU.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	held, err := l.Acquire(ctx, shed.Request{Priority: shed.Default})
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 8
	done := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		go func() {
			ls, err := l.Acquire(ctx, shed.Request{Priority: shed.Sheddable})
			if err == nil {
				ls.Release(shed.Completed)
			}
			done <- err
		}()
	}
	waitUntil(t, "the requests to queue", func() bool { return l.Queued() == waiters })
	held.Release(shed.Completed)
	for i := 0; i < waiters; i++ {
		if err := <-done; err != nil {
			t.Fatalf("waiter %d: %v, want each served in turn", i, err)
		}
	}
	if n := l.InFlight(); n != 0 {
		t.Fatalf("%d in flight once every waiter was served and released, want 0", n)
	}
}
