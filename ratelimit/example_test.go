package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

func ExampleNewMemory() {
	// A manual clock makes the figures exact; leave Clock nil in production.
	clock := shedtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewMemory(ratelimit.TokenBucket, ratelimit.PerMinute(3),
		ratelimit.MemoryConfig{Clock: clock})
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	ctx := context.Background()
	fmt.Println(limiter.Limit())
	for i := 0; i < 4; i++ {
		r, _ := limiter.Allow(ctx, "client-1", 1)
		fmt.Printf("allowed=%v remaining=%d retry-after=%v reset-after=%v\n", r.Allowed, r.Remaining, r.RetryAfter, r.ResetAfter)
	}
	clock.Advance(20 * time.Second) // one token back
	r, _ := limiter.Allow(ctx, "client-1", 1)
	fmt.Println("after 20s: allowed =", r.Allowed)

	_, err = limiter.Allow(ctx, "client-1", 4)
	fmt.Println(errors.Is(err, ratelimit.ErrCostAboveBurst))
	// Output:
	// 3 req/1m0s burst 3
	// allowed=true remaining=2 retry-after=0s reset-after=20s
	// allowed=true remaining=1 retry-after=0s reset-after=40s
	// allowed=true remaining=0 retry-after=0s reset-after=1m0s
	// allowed=false remaining=0 retry-after=20s reset-after=1m0s
	// after 20s: allowed = true
	// true
}

func ExamplePeek() {
	clock := shedtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewMemory(ratelimit.FixedWindow, ratelimit.PerMinute(2),
		ratelimit.MemoryConfig{Clock: clock})
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	ctx := context.Background()
	for i := 0; i < 3; i++ {
		// A check counts nothing: what would one more request meet?
		r, _, _ := ratelimit.Peek(ctx, limiter, "client-1")
		fmt.Printf("would be allowed=%v remaining=%d\n", r.Allowed, r.Remaining)
		limiter.Allow(ctx, "client-1", 1)
	}
	// Output:
	// would be allowed=true remaining=2
	// would be allowed=true remaining=1
	// would be allowed=false remaining=0
}

func ExampleNew() {
	clock := shedtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	perKey, _ := ratelimit.NewMemory(ratelimit.SlidingWindow, ratelimit.PerMinute(2), ratelimit.MemoryConfig{Clock: clock})
	perRoute, _ := ratelimit.NewMemory(ratelimit.FixedWindow, ratelimit.PerSecond(100), ratelimit.MemoryConfig{Clock: clock})
	defer perKey.Close()
	defer perRoute.Close()

	layer, err := ratelimit.New(ratelimit.Config{
		Clock: clock,
		Rules: []ratelimit.Rule{
			{Name: "per-key", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: perKey},
			{Name: "charges", Domain: "api", Store: perRoute,
				Descriptors: []ratelimit.Descriptor{ratelimit.RouteIs("POST /v1/charges")}},
		},
	})
	if err != nil {
		panic(err)
	}
	defer layer.Close()
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{layer}, Clock: clock})
	if err != nil {
		panic(err)
	}

	req := shed.Request{Key: "sk_live_42", Route: "POST /v1/charges"}
	for i := 0; i < 3; i++ {
		err := chain.Do(context.Background(), req, func(context.Context) error { return nil })
		var rj *shed.Rejection
		switch {
		case errors.As(err, &rj):
			fmt.Printf("%d %s (policy %s), retry after %ds\n", rj.Status, rj.Reason, rj.Policies[0].Policy, rj.RetryAfterSeconds())
		case err != nil:
			fmt.Println("error:", err)
		default:
			fmt.Println("ok")
		}
	}
	// Output:
	// ok
	// ok
	// 429 rate limit exceeded (policy per-key), retry after 90s
}

type clientIPKey struct{}

// Two limits at once: per client IP (which a middleware put in the
// context) and per user (the request's key). A request the per-user rule
// rejects is not charged to its IP.
func ExampleRule_perIPAndPerUser() {
	clock := shedtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	perIP, _ := ratelimit.NewMemory(ratelimit.TokenBucket, ratelimit.PerMinute(100), ratelimit.MemoryConfig{Clock: clock})
	perUser, _ := ratelimit.NewMemory(ratelimit.TokenBucket, ratelimit.PerMinute(1), ratelimit.MemoryConfig{Clock: clock})
	defer perIP.Close()
	defer perUser.Close()

	byIP := ratelimit.By("ip", func(ctx context.Context, _ shed.Request) string {
		ip, _ := ctx.Value(clientIPKey{}).(string)
		return ip
	})
	layer, err := ratelimit.New(ratelimit.Config{Clock: clock, Rules: []ratelimit.Rule{
		{Name: "per-ip", Descriptors: []ratelimit.Descriptor{byIP}, Store: perIP},
		{Name: "per-user", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: perUser},
	}})
	if err != nil {
		panic(err)
	}
	defer layer.Close()

	ctx := context.WithValue(context.Background(), clientIPKey{}, "203.0.113.7")
	for _, user := range []string{"alice", "alice", "bob"} {
		lease, err := layer.Acquire(ctx, shed.Request{Key: user, Cost: 1})
		var rj *shed.Rejection
		if errors.As(err, &rj) {
			fmt.Println(user, "rejected:", rj.Policies[0].Policy)
			continue
		}
		fmt.Println(user, "admitted; tightest:", lease.Quota.Policy, "remaining", lease.Quota.Remaining)
		lease.Release(shed.Completed)
	}
	r, _ := perIP.Allow(context.Background(), "203.0.113.7", 1)
	fmt.Println("per-ip remaining:", r.Remaining)
	// Output:
	// alice admitted; tightest: per-user remaining 0
	// alice rejected: per-user
	// bob admitted; tightest: per-user remaining 0
	// per-ip remaining: 97
}
