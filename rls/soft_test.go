package rls

import (
	"context"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// A soft limit of the service and a ratelimit Layer of one rule in soft
// mode, over the same limit and clock, decide every request alike: both
// go through the same overage and episodes. Requests are never released,
// as the service holds no lease.
func TestSoftLimitAgreesWithTheLayer(t *testing.T) {
	enf := shed.Enforcement{Mode: shed.Soft, Overage: 3, OverageFor: 10 * time.Second, OverageCooldown: 20 * time.Second}
	for _, alg := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.TokenBucket, ratelimit.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			clock := shedtest.NewClock(start)
			soft := enf
			s, err := New(Config{Clock: clock, Domains: []Domain{{Name: "d", Descriptors: []Descriptor{{Key: "user",
				Limits: []Limit{{RequestsPerUnit: 4, Unit: pb.RateLimitResponse_RateLimit_MINUTE, Period: time.Minute, Algorithm: alg, Soft: &soft}}}}}}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			store, err := ratelimit.NewMemory(alg, ratelimit.PerMinute(4), ratelimit.MemoryConfig{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			layer, err := ratelimit.New(ratelimit.Config{Clock: clock, Enforcement: enf,
				Rules: []ratelimit.Rule{{Name: "user", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: store}}})
			if err != nil {
				t.Fatal(err)
			}
			defer layer.Close()
			var last shed.Event
			s.cfg.Observer = shed.ObserverFunc(func(e shed.Event) { last = e })

			// A request a second per user: through the limit, an episode
			// (shorter than the overage lasts at this rate), the hard limit
			// after it; then the same after a pause long enough to cool down.
			var steps []time.Duration
			for _, pause := range []time.Duration{0, 90 * time.Second, 5 * time.Second} {
				steps = append(steps, pause)
				for range 25 {
					steps = append(steps, time.Second)
				}
			}
			admitted, over := 0, 0
			for i, d := range steps {
				clock.Advance(d)
				for _, user := range []string{"a", "b"} {
					r := ask(t, s, "d", desc("user="+user))
					lease, err := layer.Acquire(context.Background(), shed.Request{Key: user})
					if got, want := r.OverallCode == pb.RateLimitResponse_OK, err == nil; got != want {
						t.Fatalf("step %d, user %s: the service admits %v, the layer %v", i, user, got, want)
					}
					if err == nil {
						if last.Over != lease.Over {
							t.Fatalf("step %d, user %s: over the limit: the service says %v, the layer %v", i, user, last.Over, lease.Over)
						}
						admitted++
						if lease.Over {
							over++
						}
					}
				}
			}
			if over == 0 || admitted == 2*len(steps) {
				t.Fatalf("%d admitted, %d of them over the limit: the sequence never reaches the overage or its end", admitted, over)
			}
		})
	}
}
