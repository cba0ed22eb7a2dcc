package concurrency

import (
	"testing"
	"time"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// queueing is the enforcement of the conformance suite's queued layers.
var queueing = shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 4, MaxWait: time.Hour}}

func TestConformanceLocalOverall(t *testing.T) {
	shedtest.RunLayerSuite(t, shedtest.LayerSuite{
		New: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
			return mustNew(t, Config{Limit: 3, Clock: clock})
		},
		NewQueued: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
			return mustNew(t, Config{Limit: 3, Clock: clock, Enforcement: queueing})
		},
		Capacity: 3,
		Status:   shed.StatusServiceUnavailable,
	})
}

func TestConformanceLocalPerKey(t *testing.T) {
	shedtest.RunLayerSuite(t, shedtest.LayerSuite{
		New: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
			return mustNew(t, Config{Limit: 100, PerKey: 2, KeyBy: KeyByClient, Clock: clock})
		},
		// Per-key limits reject rather than queue (see wait): no NewQueued.
		Capacity: 2,
		Status:   shed.StatusTooManyRequests,
	})
}

func TestConformanceLocalAdaptive(t *testing.T) {
	shedtest.RunLayerSuite(t, shedtest.LayerSuite{
		New: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
			// Floor = Ceiling: the limit cannot move while the suite counts.
			return mustNew(t, Config{Adaptive: &Adaptive{Floor: 3, Ceiling: 3}, Clock: clock})
		},
		Capacity: 3,
		Status:   shed.StatusServiceUnavailable,
	})
}

func TestConformanceRedis(t *testing.T) {
	redistest.Client(t) // skips, or fails under scripts/test.sh, without a server
	shedtest.RunLayerSuite(t, shedtest.LayerSuite{
		New: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
			return mustNewRedis(t, newClient(t), RedisConfig{Config: Config{Limit: 10, PerKey: 2, KeyBy: KeyByClient, Clock: clock},
				Prefix: redistest.Prefix(t), Timeout: 5 * time.Second})
		},
		Capacity:   2,
		Status:     shed.StatusTooManyRequests,
		Goroutines: 4, Iterations: 50,
	})
}
