package layerkit

import "github.com/loadshed/loadshed/shed"

// Gauge is one reading of a shed.Layer's state, for metrics: how many requests are
// in flight or queued, the current limit, the fleet's usage by priority, the
// worker's utilisation and shed level. Readings carry no key, so label sets
// stay bounded.
type Gauge struct {
	// Layer is the reporting layer's Name.
	Layer string
	// Name says what is measured; see the Gauge* constants. Adapters turn it
	// into a metric name, so keep to the constants or to snake_case words.
	Name string
	// Priority is meaningful only for the per-priority readings (usage,
	// ceiling, shed_fraction) and zero otherwise.
	Priority shed.Priority
	// Signal names the input of a multi-signal reading ("cpu",
	// "sched_latency", "queue_delay"); empty otherwise.
	Signal string
	// Value is the reading.
	Value float64
}

// Names of the gauges the layers in this module report.
const (
	GaugeInFlight     = "in_flight"     // requests holding a lease now
	GaugeQueued       = "queued"        // requests waiting in a queue now
	GaugeLimit        = "limit"         // the limit in force (adaptive limits move)
	GaugeFallback     = "fallback"      // 1 while deciding from a local estimate, else 0
	GaugeUsage        = "usage"         // fleet: requests in flight, by priority, fleet-wide
	GaugeCeiling      = "ceiling"       // fleet: a priority's ceiling, in requests
	GaugeInstances    = "instances"     // fleet: live instances counted
	GaugeUtilization  = "utilization"   // worker: a signal's utilisation, 0..1+ (by Signal)
	GaugeShedLevel    = "shed_level"    // worker: how much is shed, 0 (nothing) upwards
	GaugeShedFraction = "shed_fraction" // worker: fraction shed of a priority, 0..1 (by Priority)
	GaugeHeadroom     = "headroom"      // worker: spare capacity, 0..1
	// GaugeClientsQueued: clients (flows of a fair queue) waiting now, by
	// Priority; GaugeFairShare: the part of the capacity left to a
	// priority that one client of weight 1 gets while every waiting client
	// asks for more, 0..1, by Priority (WaitQueue.FlowStats).
	GaugeClientsQueued = "clients_queued"
	GaugeFairShare     = "fair_share"
)

// GaugeReporter is implemented by layers whose state metrics show. An
// adapter calls ReportGauges when it is scraped or collects, never on the
// request path; emit must not be kept after the call returns.
type GaugeReporter interface {
	ReportGauges(emit func(Gauge))
}

// GaugeStoreErrors is a cumulative reading a Redis-backed layer reports
// through GaugeReporter: calls to its shared store that failed since it
// started. Adapters export a Gauge whose name ends in "_total" as a counter.
const GaugeStoreErrors = "store_errors_total"
