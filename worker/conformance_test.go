package worker

import (
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// The suite counts admissions against the worker budget: the sampler's
// signals are off (the level stays 0), so a fresh layer admits exactly
// Workers requests and refuses the next. The suite sends critical requests
// too, which the budget refuses only with ShedCritical.
func conformanceLayer(t testing.TB, clock *shedtest.Clock, cfg Config) shed.Layer {
	cfg.ShedCritical = true
	return signalLayer(t, clock, cfg)
}

var queueing = shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 4, MaxWait: time.Hour}}

func TestConformanceBudget(t *testing.T) {
	shedtest.RunLayerSuite(t, shedtest.LayerSuite{
		New: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
			return conformanceLayer(t, clock, Config{Workers: 3})
		},
		NewQueued: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
			return conformanceLayer(t, clock, Config{Workers: 3, Enforcement: queueing})
		},
		NewSoft: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
			return conformanceLayer(t, clock, Config{Workers: 3,
				Enforcement: shed.Enforcement{Mode: shed.Soft, OverageFor: shedtest.SoftOverageFor}})
		},
		Capacity: 3,
		Status:   shed.StatusServiceUnavailable,
	})
}

func TestConformanceBudgetYield(t *testing.T) {
	shedtest.RunLayerSuite(t, shedtest.LayerSuite{
		New: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
			return conformanceLayer(t, clock, Config{Workers: 2, Yield: true})
		},
		Capacity: 2,
		Status:   shed.StatusServiceUnavailable,
	})
}
