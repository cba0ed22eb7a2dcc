package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/shed"
)

func ExampleNew() {
	l, err := concurrency.New(concurrency.Config{Limit: 2})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	a, _ := l.Acquire(ctx, shed.Request{})
	b, _ := l.Acquire(ctx, shed.Request{})
	fmt.Println("in flight:", l.InFlight(), "remaining:", b.Quota.Remaining)

	_, err = l.Acquire(ctx, shed.Request{})
	var r *shed.Rejection
	if errors.As(err, &r) {
		fmt.Println("third:", r.Status, r.Reason, r.Policies[0].Policy)
	}

	a.Release(shed.Completed)
	b.Release(shed.Completed)
	fmt.Println("in flight:", l.InFlight())
	// Output:
	// in flight: 2 remaining: 0
	// third: 503 too many requests in flight in-flight
	// in flight: 0
}

func ExampleConfig_perKey() {
	// Each client may have 1 request in flight, and the service 100.
	l, _ := concurrency.New(concurrency.Config{Limit: 100, PerKey: 1, KeyBy: concurrency.KeyByClient})
	ctx := context.Background()
	alice, _ := l.Acquire(ctx, shed.Request{Key: "alice"})
	defer alice.Release(shed.Completed)

	_, err := l.Acquire(ctx, shed.Request{Key: "alice"})
	var r *shed.Rejection
	errors.As(err, &r)
	fmt.Println("alice again:", r.Status, r.Policies[0].Policy)

	bob, err := l.Acquire(ctx, shed.Request{Key: "bob"})
	fmt.Println("bob:", err, bob.Quota.Policy, bob.Quota.Remaining)
	bob.Release(shed.Completed)
	// Output:
	// alice again: 429 in-flight-per-key
	// bob: <nil> in-flight-per-key 0
}

func ExampleLayer_chain() {
	l, _ := concurrency.New(concurrency.Config{Limit: 10})
	chain, _ := shed.NewChain(shed.Config{Layers: []shed.Layer{l}})
	err := chain.Do(context.Background(), shed.Request{Key: "alice"}, func(context.Context) error {
		fmt.Println("running, in flight:", l.InFlight())
		return nil
	})
	fmt.Println("done:", err, "in flight:", l.InFlight())
	// Output:
	// running, in flight: 1
	// done: <nil> in flight: 0
}

func ExampleConfig_dryRun() {
	// A new limit ships in dry run: it decides and records, never rejects.
	l, _ := concurrency.New(concurrency.Config{Limit: 1, Enforcement: shed.Enforcement{DryRun: true}})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		ls, err := l.Acquire(ctx, shed.Request{})
		fmt.Println(i, err, "would reject:", ls.DryRun)
	}
	// Output:
	// 0 <nil> would reject: false
	// 1 <nil> would reject: true
	// 2 <nil> would reject: true
}

func ExampleConfig_queue() {
	// Over the limit, wait up to 100ms for a slot instead of failing.
	l, _ := concurrency.New(concurrency.Config{Limit: 1, Enforcement: shed.Enforcement{
		Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 10, MaxWait: 100 * time.Millisecond}}})
	ctx := context.Background()
	first, _ := l.Acquire(ctx, shed.Request{})
	done := make(chan error)
	go func() {
		second, err := l.Acquire(ctx, shed.Request{})
		second.Release(shed.Completed)
		done <- err
	}()
	for l.Queued() == 0 {
		runtime.Gosched() // until the second request waits
	}
	fmt.Println("waiting:", l.Queued())
	first.Release(shed.Completed) // hands the slot to the waiter
	fmt.Println("second:", <-done)
	// Output:
	// waiting: 1
	// second: <nil>
}

func ExampleConfig_adaptive() {
	// The overall limit starts at 10 and follows latency between 10 and 500.
	l, err := concurrency.New(concurrency.Config{Adaptive: &concurrency.Adaptive{Floor: 10, Ceiling: 500}})
	fmt.Println(err, l.Limit())

	_, err = concurrency.New(concurrency.Config{Adaptive: &concurrency.Adaptive{Floor: 50, Ceiling: 10}})
	fmt.Println(err)
	// Output:
	// <nil> 10
	// concurrency: Adaptive.Floor (50) must not be above Adaptive.Ceiling (10)
}

func ExampleNewRedis() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // required: Timeout is enforced through the context
	})
	defer client.Close()
	l, err := concurrency.NewRedis(client, concurrency.RedisConfig{
		Config:            concurrency.Config{Limit: 500, PerKey: 20},
		ExpectedInstances: 10,              // while Redis is down, each admits 50 overall, 2 per key
		TTL:               5 * time.Second, // a crashed host's requests stop counting after 5s
		Timeout:           20 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	chain, _ := shed.NewChain(shed.Config{Layers: []shed.Layer{l}})
	_ = chain.Do(context.Background(), shed.Request{Key: "alice"}, func(context.Context) error { return nil })
}
