package ratelimit_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/ratelimit"
)

// A limit shared by every instance of a service through Redis. The example
// needs a Redis on localhost:6379, so it is compiled but not run.
func ExampleNewRedis() {
	client := redis.NewClient(&redis.Options{
		Addr: "localhost:6379",
		// Required: without it go-redis ignores the store's timeout and a
		// slow Redis would stall requests for its ReadTimeout.
		ContextTimeoutEnabled: true,
	})
	defer client.Close()

	limiter, err := ratelimit.NewRedis(client, ratelimit.LeakyBucket, ratelimit.PerMinute(100),
		ratelimit.RedisConfig{
			Prefix:            "myapi:rl:",
			Timeout:           30 * time.Millisecond,
			ExpectedInstances: 4, // while Redis is down, each enforces 25/min
		})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	res, fallback, err := limiter.Decide(context.Background(), "api-key-123", 1)
	if err != nil {
		log.Fatal(err) // bad arguments only: Redis trouble is never an error
	}
	if fallback {
		log.Print("Redis did not answer; decided from this instance's share")
	}
	if !res.Allowed {
		fmt.Printf("429, retry after %v\n", res.RetryAfter)
		return
	}
	fmt.Printf("allowed, %d left\n", res.Remaining)
}

// The batched mode takes capacity from Redis a tenth of the limit at a
// time, so that most decisions need no round trip, at the price of a
// bounded overshoot (see ratelimit.BatchConfig).
func ExampleNewRedis_batched() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer client.Close()

	limiter, err := ratelimit.NewRedis(client, ratelimit.FixedWindow, ratelimit.PerSecond(1000),
		ratelimit.RedisConfig{Batch: ratelimit.BatchConfig{Fraction: 0.1}})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	// Chunks of ceil(0.1 × 1000) = 100 units: with 4 instances, at most
	// 1000 + 4 × (100 − 1) = 1396 per window.
	res, err := limiter.Allow(context.Background(), "client-42", 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Allowed)
}

// When Redis does not answer, decisions come from this instance's share of
// the limit, and Decide says so. (Nothing listens on port 1 here, so this
// example runs without Redis.)
func ExampleRedis_Decide_fallback() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer client.Close()

	limiter, err := ratelimit.NewRedis(client, ratelimit.TokenBucket, ratelimit.PerMinute(6),
		ratelimit.RedisConfig{ExpectedInstances: 3}) // a share of 2 per minute, burst 2
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	for i := 0; i < 3; i++ {
		res, fallback, err := limiter.Decide(context.Background(), "client-7", 1)
		fmt.Println(res.Allowed, res.Remaining, fallback, err)
	}
	// Output:
	// true 1 true <nil>
	// true 0 true <nil>
	// false 0 true <nil>
}
