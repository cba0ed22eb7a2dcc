package fleet

import (
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// Stats is a snapshot of the layer's state, for tests, logs and health
// pages. Metrics adapters read ReportGauges instead.
type Stats struct {
	// InFlight is this instance's units in flight, by Priority.Index.
	InFlight [shed.NumPriorities]int64
	// Fleet is the fleet's units in flight by Priority.Index, as of the last
	// tick Redis answered, this instance's included.
	Fleet [shed.NumPriorities]int64
	// Ceilings is each priority's ceiling in units, by Priority.Index: the
	// most that priority and every one below it may hold together (while in
	// fallback, this instance's share of it).
	Ceilings [shed.NumPriorities]int64
	// Capacity is the fleet's capacity in units (this instance's share
	// while in fallback).
	Capacity int64
	// Instances is the live instances counted at the last tick Redis
	// answered (Config.ExpectedInstances before the first).
	Instances int
	// Fallback is set while the layer decides from this instance's share
	// because the last tick failed.
	Fallback bool
	// Ticks counts the ticks Redis answered; Failures those it did not.
	Ticks, Failures int64
	// Collisions counts the ticks that found this instance's entry written
	// by another process under the same Config.Instance. One after a
	// restart is the previous run's entry being replaced; a count that keeps
	// growing means two running instances share an id.
	Collisions int64
	// LastError is the last tick's failure, or nil.
	LastError error
}

// Stats returns the layer's state now.
func (s *Layer) Stats() Stats {
	v := s.view.Load()
	st := Stats{
		InFlight:   s.local.load(),
		Fleet:      v.fleet,
		Ceilings:   v.ceiling,
		Capacity:   v.cap,
		Instances:  int(s.lastLive.Load()),
		Fallback:   v.fallback,
		Ticks:      s.ticks.Load(),
		Failures:   s.failures.Load(),
		Collisions: s.collisions.Load(),
	}
	if e := s.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	return st
}

// ReportGauges implements layerkit.GaugeReporter: for each priority its usage
// (units in flight at that priority fleet-wide: the other instances' as of
// the last tick plus this instance's now) and its ceiling in units; the live
// instances; fallback (1 while deciding from this instance's share); this
// instance's units in flight; the fleet's capacity; and the queue's length
// when the layer queues.
func (s *Layer) ReportGauges(emit func(layerkit.Gauge)) {
	v := s.view.Load()
	local := s.local.load()
	var inFlight int64
	for i, p := range shed.Priorities() {
		inFlight += local[i]
		emit(layerkit.Gauge{Layer: s.name, Name: layerkit.GaugeUsage, Priority: p, Value: float64(v.others[i] + local[i])})
		emit(layerkit.Gauge{Layer: s.name, Name: layerkit.GaugeCeiling, Priority: p, Value: float64(v.ceiling[i])})
	}
	fb := 0.0
	if v.fallback {
		fb = 1
	}
	emit(layerkit.Gauge{Layer: s.name, Name: layerkit.GaugeInstances, Value: float64(v.live)})
	emit(layerkit.Gauge{Layer: s.name, Name: layerkit.GaugeFallback, Value: fb})
	emit(layerkit.Gauge{Layer: s.name, Name: layerkit.GaugeInFlight, Value: float64(inFlight)})
	emit(layerkit.Gauge{Layer: s.name, Name: layerkit.GaugeLimit, Value: float64(v.cap)})
	if s.queue != nil {
		emit(layerkit.Gauge{Layer: s.name, Name: layerkit.GaugeQueued, Value: float64(s.queue.Len())})
	}
}
