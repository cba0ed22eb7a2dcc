package ratelimit

import (
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// conformance runs the layer suite over one rule per key whose limiter
// newLimiter builds: Capacity requests per hour, so that nothing refills
// while the suite counts. A rate limit's units come back on release only
// as a refund (Unused).
func conformance(t *testing.T, newLimiter func(t testing.TB, clock *shedtest.Clock, alg Algorithm) Store) {
	const capacity = 3
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingLog, SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			layer := func(t testing.TB, clock *shedtest.Clock, enf shed.Enforcement) shed.Layer {
				return newTestLayer(t, Config{Clock: clock, Enforcement: enf, Rules: []Rule{
					{Name: "per-key", Descriptors: []Descriptor{ByClient}, Store: newLimiter(t, clock, alg)},
				}})
			}
			shedtest.RunLayerSuite(t, shedtest.LayerSuite{
				New: func(t testing.TB, clock *shedtest.Clock) shed.Layer { return layer(t, clock, shed.Enforcement{}) },
				NewQueued: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
					return layer(t, clock, shed.Enforcement{Action: shed.Queue,
						Queue: shed.QueueConfig{MaxLength: 4, MaxWait: time.Hour}})
				},
				NewSoft: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
					return layer(t, clock, shed.Enforcement{Mode: shed.Soft, OverageFor: shedtest.SoftOverageFor})
				},
				Capacity: capacity,
				Frees:    func(o shed.Outcome) bool { return o == shed.Unused },
				Status:   shed.StatusTooManyRequests,
			})
		})
	}
}

func TestConformanceMemory(t *testing.T) {
	conformance(t, func(t testing.TB, clock *shedtest.Clock, alg Algorithm) Store {
		m, err := NewMemory(alg, PerHour(3), MemoryConfig{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	})
}
