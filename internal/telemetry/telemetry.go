// Package telemetry is what the metrics adapters (shedprom, shedotel) share so
// that they export the same series: the catalog of metrics with their names in
// both conventions, units, labels and buckets; the label values an event or a
// gauge reading maps to; and a copy-on-write cache that turns an event into
// its backend's series handles without allocating.
package telemetry

import (
	"strconv"
	"strings"

	"github.com/loadshed/loadshed/shed"

	"github.com/loadshed/loadshed/shed/layerkit"
)

// Label names. The OpenTelemetry adapter uses them as attribute keys, so
// that OTel's Prometheus translation gives the same label names.
const (
	LabelLayer    = "layer"
	LabelPolicy   = "policy"
	LabelPriority = "priority"
	LabelResult   = "result"
	LabelStatus   = "status"
	LabelFallback = "fallback"
	LabelOver     = "over"
	LabelOutcome  = "outcome"
	LabelSignal   = "signal"
)

// Kind is the instrument a metric is recorded with.
type Kind uint8

const (
	Counter    Kind = iota // monotonic, recorded on events
	Histogram              // recorded on events
	UpDown                 // recorded on events, goes up and down
	Gauge                  // read from GaugeReporters at collection
	Cumulative             // read from GaugeReporters at collection, monotonic
)

// Metric describes one metric in both conventions.
type Metric struct {
	OTel   string // OpenTelemetry instrument name: "loadshed.requests"
	Prom   string // Prometheus name, as OTel's Prometheus translation builds it: "loadshed_requests_total"
	Unit   string // UCUM, as OpenTelemetry wants it: "s", "1", "{request}"
	Help   string
	Kind   Kind
	Labels []string
	// Gauge is the layerkit.Gauge name a Gauge or Cumulative metric is read from.
	Gauge string
}

// Buckets are the histograms' bucket bounds, in seconds: from a millisecond
// (a queue wait barely felt) to ten seconds (past any sensible deadline).
var Buckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// The metrics recorded from events.
var (
	Requests = Metric{
		OTel: "loadshed.requests", Prom: "loadshed_requests_total", Unit: "{request}", Kind: Counter,
		Help:   "Decisions by layer, policy, priority and result (admitted, rejected, would_reject in dry run, canceled while waiting).",
		Labels: []string{LabelLayer, LabelPolicy, LabelPriority, LabelResult, LabelStatus, LabelFallback, LabelOver},
	}
	TimeInQueue = Metric{
		OTel: "loadshed.request.time_in_queue", Prom: "loadshed_request_time_in_queue_seconds", Unit: "s", Kind: Histogram,
		Help:   "How long requests waited in a layer's queue, by the decision that ended the wait.",
		Labels: []string{LabelLayer, LabelPriority, LabelResult},
	}
	LeaseDuration = Metric{
		OTel: "loadshed.request_lease.duration", Prom: "loadshed_request_lease_duration_seconds", Unit: "s", Kind: Histogram,
		Help:   "How long admitted requests held their leases, by how the work ended (completed, failed, dropped, unused).",
		Labels: []string{LabelLayer, LabelPriority, LabelOutcome},
	}
	ActiveLeases = Metric{
		OTel: "loadshed.active_request_leases", Prom: "loadshed_active_request_leases", Unit: "{request}", Kind: UpDown,
		Help:   "Leases granted through the chain and not yet released, by layer and priority.",
		Labels: []string{LabelLayer, LabelPriority},
	}
)

// Events lists the metrics recorded from events.
var Events = []Metric{Requests, TimeInQueue, LeaseDuration, ActiveLeases}

var (
	byLayer         = []string{LabelLayer}
	byLayerPriority = []string{LabelLayer, LabelPriority}
	byLayerSignal   = []string{LabelLayer, LabelSignal}
	byAll           = []string{LabelLayer, LabelPriority, LabelSignal}
)

// Gauges lists the metrics of the standard gauge names, in shed's order.
var Gauges = []Metric{
	gauge(layerkit.GaugeInFlight, "{request}", byLayer, "Requests holding a lease at the layer now, as the layer counts them."),
	gauge(layerkit.GaugeQueued, "{request}", byLayer, "Requests waiting in the layer's queue now."),
	gauge(layerkit.GaugeLimit, "{request}", byLayer, "The limit in force at the layer (an adaptive limit moves)."),
	gauge(layerkit.GaugeFallback, "", byLayer, "1 while the layer decides from a local estimate because its shared store does not answer, else 0."),
	gauge(layerkit.GaugeUsage, "{request}", byLayerPriority, "Requests in flight across the fleet, by priority."),
	gauge(layerkit.GaugeCeiling, "{request}", byLayerPriority, "The most requests a priority may have in flight across the fleet."),
	gauge(layerkit.GaugeInstances, "{instance}", byLayer, "Live instances the layer counts in the fleet."),
	gauge(layerkit.GaugeUtilization, "1", byLayerSignal, "Utilisation of the worker by signal (cpu, cpu_wait, sched_latency, queue_delay, in_flight); 1 is the signal's target."),
	gauge(layerkit.GaugeShedLevel, "", byLayer, "How much the worker layer sheds: 0 nothing, higher levels shed higher priorities."),
	gauge(layerkit.GaugeShedFraction, "1", byLayerPriority, "Fraction of a priority's requests the worker layer sheds, 0 to 1."),
	gauge(layerkit.GaugeHeadroom, "1", byLayer, "Spare capacity the worker layer sees, 0 to 1."),
	gauge(layerkit.GaugeClientsQueued, "{client}", byLayerPriority, "Clients (flows of the layer's fair queue) with requests waiting now, by priority."),
	gauge(layerkit.GaugeFairShare, "1", byLayerPriority, "Part of the capacity left to a priority that one client of weight 1 gets while every waiting client asks for more, 0 to 1."),
	gauge(layerkit.GaugeStoreErrors, "{error}", byLayer, "Calls to the layer's shared store (Redis) that failed."),
}

var gaugeIndex = func() map[string]int {
	m := make(map[string]int, len(Gauges))
	for i, g := range Gauges {
		m[g.Gauge] = i
	}
	return m
}()

// ValidGaugeName accepts the snake_case words layerkit.Gauge asks for, which
// are valid in both conventions.
func ValidGaugeName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// GaugeMetric returns the metric of a gauge name: the catalog's entry for a
// standard name; for any other, a gauge (a counter when the name ends in
// "_total") labelled by layer, priority and signal, with no unit.
func GaugeMetric(name string) Metric {
	if i, ok := gaugeIndex[name]; ok {
		return Gauges[i]
	}
	return gauge(name, "", byAll, "A reading the layer reports as "+strconv.Quote(name)+".")
}

func gauge(name, unit string, labels []string, help string) Metric {
	m := Metric{OTel: "loadshed." + name, Prom: "loadshed_" + name, Unit: unit, Kind: Gauge, Labels: labels, Help: help, Gauge: name}
	if base, ok := strings.CutSuffix(name, "_total"); ok {
		m.Kind, m.OTel = Cumulative, "loadshed."+base
	} else if unit == "1" {
		m.Prom += "_ratio" // as OTel's Prometheus translation names a gauge of unit "1"
	}
	return m
}

// LabelValues returns g's label values, in m.Labels' order.
func (m Metric) LabelValues(g layerkit.Gauge) []string {
	vs := make([]string, len(m.Labels))
	for i, l := range m.Labels {
		switch l {
		case LabelLayer:
			vs[i] = g.Layer
		case LabelPriority:
			if g.Priority.Valid() {
				vs[i] = g.Priority.String()
			}
		case LabelSignal:
			vs[i] = g.Signal
		}
	}
	return vs
}

// Result is a decision's result label.
type Result uint8

const (
	Admitted Result = iota
	Rejected
	WouldReject
	Canceled
)

var resultWords = [...]string{"admitted", "rejected", "would_reject", "canceled"}

func (r Result) String() string { return resultWords[r] }

// ResultOf classifies a decision event. A rejection without a status is a
// caller that went away while it waited (a context error), not a refusal.
func ResultOf(e shed.Event) Result {
	switch e.Kind {
	case shed.WouldReject:
		return WouldReject
	case shed.Rejected:
		if e.Status == 0 {
			return Canceled
		}
		return Rejected
	}
	return Admitted
}

// Decision is the label values of a decision: the key of its series.
type Decision struct {
	Layer, Policy  string
	Priority       shed.Priority
	Result         Result
	Status         int
	Fallback, Over bool
}

// DecisionOf returns the labels of a decision event (Kind other than Released).
func DecisionOf(e shed.Event) Decision {
	return Decision{Layer: e.Layer, Policy: e.Policy, Priority: e.Priority, Result: ResultOf(e),
		Status: e.Status, Fallback: e.Fallback, Over: e.Over}
}

// StatusLabel is the status label's value: the rejection's HTTP status, or
// empty when there is none.
func (d Decision) StatusLabel() string {
	if d.Status == 0 {
		return ""
	}
	return strconv.Itoa(d.Status)
}

// RequestLabels returns d's values for Requests.Labels.
func (d Decision) RequestLabels() []string {
	return []string{d.Layer, d.Policy, d.Priority.String(), d.Result.String(), d.StatusLabel(),
		strconv.FormatBool(d.Fallback), strconv.FormatBool(d.Over)}
}

// Release is the label values of a release.
type Release struct {
	Layer    string
	Priority shed.Priority
	Outcome  shed.Outcome
}

// ReleaseOf returns the labels of a Released event.
func ReleaseOf(e shed.Event) Release {
	return Release{Layer: e.Layer, Priority: e.Priority, Outcome: e.Outcome}
}
