package fleet

import (
	"testing"
	"time"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// flat gives every priority the whole capacity: the suite counts one
// capacity whatever the priority (it fills the layer with default work,
// then sends critical), so the ceilings must not differ here; the other
// tests check them.
var flat = map[shed.Priority]float64{shed.TestMode: 1, shed.Sheddable: 1, shed.Default: 1, shed.Critical: 1}

// The layer conformance suite, on the fake store with the suite's manual
// clock (one instance), and on a real Redis.
func TestConformance(t *testing.T) {
	build := func(t testing.TB, clock *shedtest.Clock, enf shed.Enforcement) shed.Layer {
		cfg := Config{Capacity: 10, Ceilings: flat, Interval: 100 * time.Millisecond, Clock: clock, Enforcement: enf}.withDefaults()
		s, err := newLayer(cfg, fakeStore{f: newFakeFleet(clock), id: "a"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.halt() })
		return s
	}
	shedtest.RunLayerSuite(t, shedtest.LayerSuite{
		New: func(t testing.TB, clock *shedtest.Clock) shed.Layer { return build(t, clock, shed.Enforcement{}) },
		NewQueued: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
			return build(t, clock, shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 4, MaxWait: time.Hour}})
		},
		NewSoft: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
			return build(t, clock, shed.Enforcement{Mode: shed.Soft, OverageFor: shedtest.SoftOverageFor})
		},
		Capacity: 10,
		Status:   shed.StatusServiceUnavailable,
	})
}

func TestConformanceRedis(t *testing.T) {
	opts := redistest.Options(t)
	redistest.Client(t)
	shedtest.RunLayerSuite(t, shedtest.LayerSuite{
		New: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
			// A long interval: the suite counts admissions, and a tick
			// between them would change nothing here (one instance) but
			// time.
			return newRedisLayer(t, opts, Config{Prefix: redistest.Prefix(t), Instance: "suite",
				Capacity: 10, Ceilings: flat, Interval: time.Minute, Clock: clock})
		},
		Capacity:   10,
		Status:     shed.StatusServiceUnavailable,
		Goroutines: 4, Iterations: 50,
	})
}
