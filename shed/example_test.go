package shed_test

import (
	"context"
	"errors"
	"fmt"
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
