package layerkit_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedtest"
)

func ExampleDecide() {
	verdicts := map[layerkit.Verdict]string{layerkit.Admit: "admit", layerkit.AdmitOver: "admit over the limit",
		layerkit.AdmitDryRun: "admit (dry run: would reject)", layerkit.Wait: "queue", layerkit.Deny: "reject"}

	// Soft: up to 10% over the limit of 100 for at most a minute.
	soft := shed.Enforcement{Mode: shed.Soft, OverageFor: time.Minute}
	limit := int64(100)
	ceiling := soft.Ceiling(limit)
	var episode layerkit.Episode
	clock := shedtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	decide := func(inUse int64) string {
		v := layerkit.Decide(&soft, clock.Now(), inUse < limit, inUse < ceiling, &episode)
		return verdicts[v]
	}
	fmt.Println("ceiling:", ceiling)
	fmt.Println("in use 50:", decide(50))
	fmt.Println("in use 105:", decide(105))
	fmt.Println("in use 110:", decide(110))
	clock.Advance(40 * time.Second)
	fmt.Println("in use 105, 40s on:", decide(105))
	clock.Advance(40 * time.Second)
	fmt.Println("in use 105, 80s on:", decide(105))
	// A new episode only after a minute (the cool-down, by default
	// OverageFor) with no request over the limit.
	fmt.Println("in use 50:", decide(50))
	clock.Advance(30 * time.Second)
	fmt.Println("in use 105, 30s after the last:", decide(105))
	clock.Advance(time.Minute)
	fmt.Println("in use 105, a quiet minute later:", decide(105))

	// The same overage in dry run: recorded, never rejected.
	dry := shed.Enforcement{DryRun: true}
	fmt.Println("dry run, over:", verdicts[layerkit.Decide(&dry, clock.Now(), false, false, nil)])
	// Output:
	// ceiling: 110
	// in use 50: admit
	// in use 105: admit over the limit
	// in use 110: reject
	// in use 105, 40s on: admit over the limit
	// in use 105, 80s on: reject
	// in use 50: admit
	// in use 105, 30s after the last: reject
	// in use 105, a quiet minute later: admit over the limit
	// dry run, over: admit (dry run: would reject)
}

func ExampleDecideOver() {
	// Soft: each limit has its own episode of at most 30s; a request over
	// two limits goes over only if both episodes allow it.
	soft := shed.Enforcement{Mode: shed.Soft, OverageFor: 30 * time.Second}
	var perKey, overall layerkit.Episode
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fmt.Println(layerkit.DecideOver(&soft, start, true, &overall))                              // the overall episode begins
	fmt.Println(layerkit.DecideOver(&soft, start.Add(20*time.Second), true, &overall))          // 20s into it
	fmt.Println(layerkit.DecideOver(&soft, start.Add(40*time.Second), true, &perKey))           // the key's own, fresh
	fmt.Println(layerkit.DecideOver(&soft, start.Add(40*time.Second), true, &perKey, &overall)) // the overall one is spent
	// Output:
	// admit-over
	// admit-over
	// admit-over
	// deny
}

func ExampleWaitQueue() {
	clock := shedtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	q, err := layerkit.NewWaitQueue(shed.QueueConfig{MaxLength: 10, MaxWait: 2 * time.Second, Clock: clock})
	if err != nil {
		fmt.Println(err)
		return
	}
	// One slot of capacity, claimed and freed with atomics as a layer would.
	var free atomic.Int64
	free.Store(1)
	take := func() bool { return free.CompareAndSwap(1, 0) }
	giveBack := func() { free.Store(1) }
	release := func() { free.Store(1); q.Notify() }
	ctx := context.Background()

	// The slot is free: the first request goes straight through.
	waited, err := q.Wait(ctx, shed.Default, time.Time{}, take, giveBack)
	fmt.Println("first:", waited, err)

	// The next two wait; the critical one is served first although it came last.
	done := make(chan string)
	for _, p := range []shed.Priority{shed.Sheddable, shed.Critical} {
		n := q.Len()
		go func() {
			waited, err := q.Wait(ctx, p, time.Time{}, take, giveBack)
			done <- fmt.Sprint(p, ": ", waited, " ", layerkit.QueueRejection(shed.StatusServiceUnavailable, err, waited))
		}()
		for q.Len() == n {
			runtime.Gosched()
		}
	}
	clock.Advance(500 * time.Millisecond)
	release()
	fmt.Println(<-done)

	// The sheddable one is still waiting when MaxWait runs out.
	clock.Advance(1500 * time.Millisecond)
	fmt.Println(<-done)
	// Output:
	// first: 0s <nil>
	// critical: 500ms <nil>
	// sheddable: 2s shed: layer rejected a request (503): queue wait timed out
}

// A fair queue in front of one slot: a client that keeps the queue full
// (heavy) has had the slot time after time; a client that asks now and
// then (light) is served next, though heavy's waiters queued first.
func ExampleNewFairQueue() {
	clock := shedtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	q, err := layerkit.NewFairQueue(shed.QueueConfig{MaxLength: 16, MaxWait: time.Minute, Clock: clock}, layerkit.Fairness{})
	if err != nil {
		fmt.Println(err)
		return
	}
	var inUse atomic.Int64
	take := func() bool { return inUse.CompareAndSwap(0, 1) }
	giveBack := func() { inUse.Store(0) }
	type grant struct {
		key    string
		ticket layerkit.Ticket
	}
	granted := make(chan grant, 16)
	wait := func(key string) {
		n := q.Len()
		go func() {
			t, _, err := q.WaitRequest(context.Background(), shed.Request{Key: key}, time.Time{}, take, giveBack)
			if err != nil {
				fmt.Println(key, err)
			}
			granted <- grant{key, t}
		}()
		for q.Len() == n {
			runtime.Gosched() // until it queues
		}
	}
	release := func(t layerkit.Ticket) grant {
		clock.Advance(10 * time.Millisecond) // the slot was held this long
		inUse.Store(0)
		t.Done() // charge the client for it
		q.Notify()
		return <-granted
	}

	first, _, _ := q.WaitRequest(context.Background(), shed.Request{Key: "heavy"}, time.Time{}, take, giveBack)
	for range 14 {
		wait("heavy")
	}
	g := grant{"heavy", first}
	for range 12 {
		g = release(g.ticket) // heavy's waiters, one after the other
	}
	fmt.Println(g.key, q.Len(), "waiting")
	wait("light") // queued last, served next: it has had nothing
	g = release(g.ticket)
	fmt.Println(g.key)
	g = release(g.ticket)
	fmt.Println(g.key)
	// Output:
	// heavy 2 waiting
	// light
	// heavy
}
