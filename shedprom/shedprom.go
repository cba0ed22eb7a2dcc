// Package shedprom exports loadshed's decisions and layer state as Prometheus
// metrics, with client_golang, on a Registerer the caller passes.
//
//	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
//	metrics, err := shedprom.New(shedprom.Config{Registerer: reg, Layers: layers})
//	chain, err := shed.NewChain(shed.Config{Layers: layers, Observer: metrics})
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// A Metrics is a shed.Observer: give it to the chain (shed.Config.Observer)
// and every decision and release is counted, with labels drawn from bounded
// sets only (layer, policy, priority, result, status, outcome: never a key or
// a raw path). Layers that implement layerkit.GaugeReporter are read when the
// registry is scraped, never on the request path.
//
// The series are those OpenTelemetry's Prometheus translation gives for the
// shedotel package's instruments, so dashboards work with either:
//
//	loadshed_requests_total{layer,policy,priority,result,status,fallback,over}
//	loadshed_request_time_in_queue_seconds{layer,priority,result}   histogram
//	loadshed_request_lease_duration_seconds{layer,priority,outcome} histogram
//	loadshed_active_request_leases{layer,priority}
//	loadshed_in_flight, loadshed_queued, loadshed_limit, loadshed_fallback{layer}
//	loadshed_usage, loadshed_ceiling{layer,priority}; loadshed_instances{layer}
//	loadshed_utilization_ratio{layer,signal}; loadshed_shed_level{layer}
//	loadshed_shed_fraction_ratio{layer,priority}; loadshed_headroom_ratio{layer}
//	loadshed_store_errors_total{layer}
//
// result is admitted, rejected, would_reject (dry run: admitted, but the
// layer would have said no) or canceled (the caller went away while it
// waited); status is the rejection's HTTP status, empty otherwise.
//
// Recording a decision costs one map lookup and one atomic add or histogram
// observation per metric, and allocates nothing once a series exists (past
// 4096 series of a metric, which bounded labels never reach, each event
// looks its series up through client_golang instead, and allocates).
package shedprom

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loadshed/loadshed/internal/telemetry"
	"github.com/loadshed/loadshed/shed"
)

// Config configures Metrics.
type Config struct {
	// Registerer receives the collectors. Required: pass
	// prometheus.DefaultRegisterer to use the global registry.
	Registerer prometheus.Registerer
	// Layers are read at each scrape when they implement layerkit.GaugeReporter
	// (others are skipped). Gauge names outside shed's standard set are
	// exported when a layer reports them here, at New.
	Layers []shed.Layer
}

// Metrics records events as Prometheus metrics. It implements shed.Observer
// and is safe for concurrent use.
type Metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector

	requests *prometheus.CounterVec
	queue    *prometheus.HistogramVec
	leases   *prometheus.HistogramVec
	active   *prometheus.GaugeVec

	decisions *telemetry.Cache[telemetry.Decision, decisionSeries]
	queues    *telemetry.Cache[queueKey, prometheus.Observer]
	releases  *telemetry.Cache[telemetry.Release, releaseSeries]
}

// Series are made when first recorded, as OpenTelemetry makes them, so that
// both adapters export the same set: a decision that never queued has no
// queue series, a rejection no active-lease series.
type decisionSeries struct {
	requests prometheus.Counter
	active   prometheus.Gauge // nil for rejections
}

type queueKey struct {
	layer    string
	priority shed.Priority
	result   telemetry.Result
}

type releaseSeries struct {
	duration prometheus.Observer
	active   prometheus.Gauge
}

// New registers the metrics on cfg.Registerer. It fails when the Registerer
// is nil or already holds metrics of these names (a second Metrics on one
// registry), and then registers nothing.
func New(cfg Config) (*Metrics, error) {
	if cfg.Registerer == nil {
		return nil, errors.New("shedprom: Config.Registerer is nil: pass a registry (prometheus.NewRegistry(), or prometheus.DefaultRegisterer for the global one)")
	}
	m := &Metrics{
		reg:      cfg.Registerer,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts(opts(telemetry.Requests)), telemetry.Requests.Labels),
		queue:    histogram(telemetry.TimeInQueue),
		leases:   histogram(telemetry.LeaseDuration),
		active:   prometheus.NewGaugeVec(prometheus.GaugeOpts(opts(telemetry.ActiveLeases)), telemetry.ActiveLeases.Labels),
	}
	m.decisions = telemetry.NewCache(m.decisionSeries)
	m.queues = telemetry.NewCache(func(k queueKey) prometheus.Observer {
		return m.queue.WithLabelValues(k.layer, k.priority.String(), k.result.String())
	})
	m.releases = telemetry.NewCache(m.releaseSeries)
	collectors := []prometheus.Collector{m.requests, m.queue, m.leases, m.active}
	if g := newGauges(cfg.Layers); g != nil {
		collectors = append(collectors, g)
	}
	for _, c := range collectors {
		if err := cfg.Registerer.Register(c); err != nil {
			m.Unregister()
			return nil, fmt.Errorf("shedprom: registering metrics: %w", err)
		}
		m.collectors = append(m.collectors, c)
	}
	return m, nil
}

// Unregister removes the metrics from the Registerer, for a service that
// rebuilds its chain (say, on a configuration reload) and registers anew.
func (m *Metrics) Unregister() {
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
	m.collectors = nil
}

// Observe records e.
func (m *Metrics) Observe(e shed.Event) {
	if e.Kind == shed.Released {
		s := m.releases.Get(telemetry.ReleaseOf(e))
		s.duration.Observe(e.Latency.Seconds())
		s.active.Dec()
		return
	}
	d := telemetry.DecisionOf(e)
	s := m.decisions.Get(d)
	s.requests.Inc()
	if e.Queued {
		m.queues.Get(queueKey{d.Layer, d.Priority, d.Result}).Observe(e.Wait.Seconds())
	}
	if s.active != nil {
		s.active.Inc()
	}
}

func (m *Metrics) decisionSeries(d telemetry.Decision) decisionSeries {
	s := decisionSeries{requests: m.requests.WithLabelValues(d.RequestLabels()...)}
	if d.Result == telemetry.Admitted || d.Result == telemetry.WouldReject {
		s.active = m.active.WithLabelValues(d.Layer, d.Priority.String())
	}
	return s
}

func (m *Metrics) releaseSeries(r telemetry.Release) releaseSeries {
	p := r.Priority.String()
	return releaseSeries{
		duration: m.leases.WithLabelValues(r.Layer, p, r.Outcome.String()),
		active:   m.active.WithLabelValues(r.Layer, p),
	}
}

func opts(m telemetry.Metric) prometheus.Opts {
	return prometheus.Opts{Name: m.Prom, Help: m.Help}
}

func histogram(m telemetry.Metric) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.Prom, Help: m.Help, Buckets: telemetry.Buckets}, m.Labels)
}
