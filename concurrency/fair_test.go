package concurrency

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// The overall limit, queued, goes to the client that has had the least of
// it, not to the one that queued first; a full queue refuses the client
// with the most waiters.
func TestFairQueueServesTheLightClientFirst(t *testing.T) {
	clock := shedtest.NewClock(t0)
	l := mustNew(t, Config{Limit: 2, Clock: clock, Enforcement: shed.Enforcement{Action: shed.Queue,
		Queue: shed.QueueConfig{MaxLength: 5, MaxWait: time.Second}}})
	ctx := context.Background()
	heavy := shed.Request{Key: "heavy", Priority: shed.Default}
	var held []shed.Lease
	for i := 0; i < 2; i++ {
		ls, err := l.Acquire(ctx, heavy)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ls)
	}
	// heavy keeps the queue busy for a while: ten grants from it, one
	// after the other.
	for i := 0; i < 10; i++ {
		w := acquireAsync(ctx, l, heavy)
		queued(t, l, 1)
		clock.Advance(10 * time.Millisecond)
		held[0].Release(shed.Completed)
		r := <-w
		if r.err != nil {
			t.Fatal(r.err)
		}
		held[0] = r.lease
	}
	var waiting []chan result
	for i := 0; i < 5; i++ {
		waiting = append(waiting, acquireAsync(ctx, l, heavy))
		queued(t, l, i+1)
	}
	// One of heavy's waiters is served: heavy has had a slot from the queue.
	clock.Advance(10 * time.Millisecond)
	held[0].Release(shed.Completed)
	first := <-waiting[0]
	if first.err != nil {
		t.Fatal(first.err)
	}
	queued(t, l, 4)
	waiting = waiting[1:]

	// The queue holds 4 of 5: the light client queues; a second light
	// request finds it full and takes the place of heavy's newest.
	light := acquireAsync(ctx, l, shed.Request{Key: "light", Priority: shed.Default})
	queued(t, l, 5)
	light2 := acquireAsync(ctx, l, shed.Request{Key: "light2", Priority: shed.Default})
	got := <-waiting[3]
	if !errors.Is(got.err, nil) {
		if r := shedtest.Rejection(t, got.err); r.Reason != "queue full" {
			t.Fatalf("heavy's newest: %+v, want refused as queue full", r)
		}
	} else {
		t.Fatal("heavy's newest waiter was granted, want displaced by a light client")
	}
	queued(t, l, 5)

	// A light client is served at the next release, though heavy queued
	// first.
	clock.Advance(10 * time.Millisecond)
	held[1].Release(shed.Completed)
	var ls shed.Lease
	const queuedHeavy = 3
	select {
	case r := <-light:
		ls = r.lease
		if r.err != nil {
			t.Fatal(r.err)
		}
	case r := <-light2:
		ls = r.lease
		if r.err != nil {
			t.Fatal(r.err)
		}
	case r := <-waiting[0]:
		t.Fatalf("heavy's waiter granted (%v) before the light clients", r.err)
	}
	top := l.TopClients(3)
	if len(top) == 0 || top[0].Key != "heavy" || top[0].Queued != queuedHeavy {
		t.Fatalf("TopClients: %+v, want heavy first, %d queued", top, queuedHeavy)
	}
	clients := 0.0
	l.ReportGauges(func(g layerkit.Gauge) {
		if g.Name == layerkit.GaugeClientsQueued && g.Priority == shed.Default {
			clients = g.Value
		}
	})
	if clients != 2 {
		t.Fatalf("clients queued %v, want 2 (heavy and the light one left)", clients)
	}
	// Releasing what the queue granted frees the overall limit once.
	ls.Release(shed.Completed)
	ls.Release(shed.Completed)
	first.lease.Release(shed.Completed)
	if n := l.InFlight(); n != 2 {
		t.Fatalf("in flight %d after the releases, want the 2 the queue handed on", n)
	}
}
