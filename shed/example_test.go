package shed_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// inFlight is a minimal layer: at most limit requests at once, the rest
// shed with 503. Real layers live in their own packages; this one shows the
// contract: Acquire gives a Lease or a *Rejection, and the lease comes back
// to Release exactly once.
type inFlight struct {
	limit int64
	n     atomic.Int64
}

func (l *inFlight) Name() string { return "in-flight" }

func (l *inFlight) Acquire(_ context.Context, req shed.Request) (shed.Lease, error) {
	if l.n.Add(1) > l.limit {
		l.n.Add(-1)
		return shed.Lease{}, shed.Shed("too many requests in flight", time.Second)
	}
	return shed.NewLease(l), nil
}

func (l *inFlight) Release(_ *shed.Lease, _ shed.Outcome) { l.n.Add(-1) }

func ExampleChain() {
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{&inFlight{limit: 1}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()

	// The first request holds the only slot until it is released.
	var first shed.Grant
	if err := chain.Acquire(ctx, shed.Request{Key: "alice"}, &first); err != nil {
		fmt.Println(err)
		return
	}

	// The second is shed.
	err = chain.Do(ctx, shed.Request{Key: "bob"}, func(context.Context) error { return nil })
	var rej *shed.Rejection
	if errors.As(err, &rej) {
		fmt.Println(rej.Status, rej.Layer, rej.Reason, "retry after", rej.RetryAfterSeconds(), "s")
	}

	first.Release(shed.Completed)
	err = chain.Do(ctx, shed.Request{Key: "bob"}, func(context.Context) error { return nil })
	fmt.Println("after release:", err)
	// Output:
	// 503 in-flight too many requests in flight retry after 1 s
	// after release: <nil>
}

func ExampleChain_Do() {
	ratelimit, concurrency := shedtest.NewLayer("ratelimit"), shedtest.NewLayer("concurrency")
	chain, err := shed.NewChain(shed.Config{
		Layers: []shed.Layer{ratelimit, concurrency},
		Observer: shed.ObserverFunc(func(e shed.Event) {
			if e.Kind == shed.Released {
				fmt.Println(e.Layer, e.Kind, e.Outcome)
			} else {
				fmt.Println(e.Layer, e.Kind, e.Priority)
			}
		}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// A job outside HTTP: the priority travels in the context.
	ctx := shed.WithPriority(context.Background(), shed.Sheddable)
	err = chain.Do(ctx, shed.Request{Route: "nightly-report"}, func(context.Context) error {
		fmt.Println("running the report")
		return errors.New("report failed")
	})
	fmt.Println("Do:", err)
	// Output:
	// ratelimit admitted sheddable
	// concurrency admitted sheddable
	// running the report
	// concurrency released failed
	// ratelimit released failed
	// Do: report failed
}

func ExampleParsePriority() {
	for _, word := range []string{"critical", "Sheddable", "test", "urgent"} {
		p, err := shed.ParsePriority(word)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(word, "→", p)
	}
	// Output:
	// critical → critical
	// Sheddable → sheddable
	// test → test-mode
	// shed: unknown priority "urgent" (valid: critical, default, sheddable, test-mode)
}

func ExampleEnforcement_Decide() {
	verdicts := map[shed.Verdict]string{shed.Admit: "admit", shed.AdmitOver: "admit over the limit",
		shed.AdmitDryRun: "admit (dry run: would reject)", shed.Wait: "queue", shed.Deny: "reject"}

	// Soft: up to 10% over the limit of 100 for at most a minute.
	soft := shed.Enforcement{Mode: shed.Soft, OverageFor: time.Minute}
	limit := int64(100)
	ceiling := soft.Ceiling(limit)
	var episode shed.Episode
	clock := shedtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	decide := func(inUse int64) string {
		v := soft.Decide(clock.Now(), inUse < limit, inUse < ceiling, &episode)
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
	fmt.Println("dry run, over:", verdicts[dry.Decide(clock.Now(), false, false, nil)])
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

func ExampleEnforcement_DecideOver() {
	// Soft: each limit has its own episode of at most 30s; a request over
	// two limits goes over only if both episodes allow it.
	soft := shed.Enforcement{Mode: shed.Soft, OverageFor: 30 * time.Second}
	var perKey, overall shed.Episode
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fmt.Println(soft.DecideOver(start, true, &overall))                              // the overall episode begins
	fmt.Println(soft.DecideOver(start.Add(20*time.Second), true, &overall))          // 20s into it
	fmt.Println(soft.DecideOver(start.Add(40*time.Second), true, &perKey))           // the key's own, fresh
	fmt.Println(soft.DecideOver(start.Add(40*time.Second), true, &perKey, &overall)) // the overall one is spent
	// Output:
	// admit-over
	// admit-over
	// admit-over
	// deny
}

func ExampleWaitQueue() {
	clock := shedtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	q, err := shed.NewWaitQueue(shed.QueueConfig{MaxLength: 10, MaxWait: 2 * time.Second, Clock: clock})
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
			done <- fmt.Sprint(p, ": ", waited, " ", shed.QueueRejection(shed.StatusServiceUnavailable, err, waited))
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
