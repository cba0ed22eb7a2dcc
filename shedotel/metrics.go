// Package shedotel records loadshed's decisions with OpenTelemetry: metrics
// on a MeterProvider the caller passes (the global one by default), and each
// decision as an event on the request's current span.
//
// Metrics is a shed.Observer; SpanEvents is a shed.ContextObserver. Give the
// chain both with shed.Observers{metrics, shedotel.SpanEvents{}}.
//
// The instruments, under the instrumentation scope
// "github.com/loadshed/loadshed", are named so that OpenTelemetry's
// Prometheus translation gives the series the shedprom package exports, and
// dashboards work with either:
//
//	loadshed.requests                 counter         {request}  -> loadshed_requests_total
//	loadshed.request.time_in_queue    histogram       s          -> loadshed_request_time_in_queue_seconds
//	loadshed.request_lease.duration   histogram       s          -> loadshed_request_lease_duration_seconds
//	loadshed.active_request_leases    updowncounter   {request}  -> loadshed_active_request_leases
//	loadshed.in_flight, .queued, .limit, .fallback, .usage, .ceiling, .instances, .shed_level   gauges
//	loadshed.utilization, .shed_fraction, .headroom   gauges of unit 1 -> loadshed_..._ratio
//	loadshed.store_errors, loadshed.fallbacks         counters         -> loadshed_..._total
//
// Attributes are drawn from bounded sets only: layer, policy, priority,
// result (admitted, rejected, would_reject, canceled), status, fallback, over,
// outcome, signal. The gauges are read from layers implementing
// shed.GaugeReporter when the MeterProvider collects, never on the request
// path.
package shedotel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/loadshed/loadshed/internal/telemetry"
	"github.com/loadshed/loadshed/shed"
)

// ScopeName is the instrumentation scope of the meter and of span events.
const ScopeName = telemetry.InstrumentationScope

// Config configures Metrics.
type Config struct {
	// MeterProvider creates the meter (default otel.GetMeterProvider()).
	MeterProvider metric.MeterProvider
	// Layers are read at each collection when they implement
	// shed.GaugeReporter (others are skipped). Gauge names outside shed's
	// standard set are recorded when a layer reports them here, at NewMetrics.
	Layers []shed.Layer
}

// Metrics records events as OpenTelemetry metrics. It implements
// shed.ContextObserver (the context reaches the SDK, for exemplars) and is
// safe for concurrent use.
type Metrics struct {
	requests metric.Int64Counter
	queue    metric.Float64Histogram
	leases   metric.Float64Histogram
	active   metric.Int64UpDownCounter
	reg      metric.Registration

	decisions *telemetry.Cache[telemetry.Decision, decisionSeries]
	releases  *telemetry.Cache[telemetry.Release, releaseSeries]
}

// The options are made once per series: building them per event would
// allocate.
type decisionSeries struct {
	requests []metric.AddOption
	queue    []metric.RecordOption
	active   []metric.AddOption
}

type releaseSeries struct {
	duration []metric.RecordOption
	active   []metric.AddOption
}

// NewMetrics creates the instruments on cfg.MeterProvider's meter and
// registers the callback that reads the layers' gauges.
func NewMetrics(cfg Config) (*Metrics, error) {
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(ScopeName)
	m := &Metrics{}
	var errs []error
	try := func(err error) { errs = append(errs, err) }
	var err error
	r := telemetry.Requests
	m.requests, err = meter.Int64Counter(r.OTel, metric.WithUnit(r.Unit), metric.WithDescription(r.Help))
	try(err)
	q := telemetry.TimeInQueue
	m.queue, err = meter.Float64Histogram(q.OTel, metric.WithUnit(q.Unit), metric.WithDescription(q.Help),
		metric.WithExplicitBucketBoundaries(telemetry.Buckets...))
	try(err)
	d := telemetry.LeaseDuration
	m.leases, err = meter.Float64Histogram(d.OTel, metric.WithUnit(d.Unit), metric.WithDescription(d.Help),
		metric.WithExplicitBucketBoundaries(telemetry.Buckets...))
	try(err)
	a := telemetry.ActiveLeases
	m.active, err = meter.Int64UpDownCounter(a.OTel, metric.WithUnit(a.Unit), metric.WithDescription(a.Help))
	try(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("shedotel: creating instruments: %w", err)
	}
	m.decisions = telemetry.NewCache(decisionSeriesOf)
	m.releases = telemetry.NewCache(releaseSeriesOf)
	if m.reg, err = registerGauges(meter, cfg.Layers); err != nil {
		return nil, fmt.Errorf("shedotel: registering gauges: %w", err)
	}
	return m, nil
}

// Close stops reading the layers' gauges. Instruments stay with the meter.
func (m *Metrics) Close() error {
	if m.reg == nil {
		return nil
	}
	return m.reg.Unregister()
}

// Observe records e.
func (m *Metrics) Observe(e shed.Event) { m.ObserveContext(context.Background(), e) }

// ObserveContext records e, passing ctx to the instruments.
func (m *Metrics) ObserveContext(ctx context.Context, e shed.Event) {
	if e.Kind == shed.Released {
		s := m.releases.Get(telemetry.ReleaseOf(e))
		m.leases.Record(ctx, e.Latency.Seconds(), s.duration...)
		m.active.Add(ctx, -1, s.active...)
		return
	}
	s := m.decisions.Get(telemetry.DecisionOf(e))
	m.requests.Add(ctx, 1, s.requests...)
	if e.Queued {
		m.queue.Record(ctx, e.Wait.Seconds(), s.queue...)
	}
	if e.Kind != shed.Rejected {
		m.active.Add(ctx, 1, s.active...)
	}
}

func decisionSeriesOf(d telemetry.Decision) decisionSeries {
	p := d.Priority.String()
	all := attribute.NewSet(
		attribute.String(telemetry.LabelLayer, d.Layer),
		attribute.String(telemetry.LabelPolicy, d.Policy),
		attribute.String(telemetry.LabelPriority, p),
		attribute.String(telemetry.LabelResult, d.Result.String()),
		attribute.String(telemetry.LabelStatus, d.StatusLabel()),
		attribute.Bool(telemetry.LabelFallback, d.Fallback),
		attribute.Bool(telemetry.LabelOver, d.Over),
	)
	queue := attribute.NewSet(
		attribute.String(telemetry.LabelLayer, d.Layer),
		attribute.String(telemetry.LabelPriority, p),
		attribute.String(telemetry.LabelResult, d.Result.String()),
	)
	return decisionSeries{
		requests: []metric.AddOption{metric.WithAttributeSet(all)},
		queue:    []metric.RecordOption{metric.WithAttributeSet(queue)},
		active:   []metric.AddOption{metric.WithAttributeSet(layerPriority(d.Layer, p))},
	}
}

func releaseSeriesOf(r telemetry.Release) releaseSeries {
	p := r.Priority.String()
	duration := attribute.NewSet(
		attribute.String(telemetry.LabelLayer, r.Layer),
		attribute.String(telemetry.LabelPriority, p),
		attribute.String(telemetry.LabelOutcome, r.Outcome.String()),
	)
	return releaseSeries{
		duration: []metric.RecordOption{metric.WithAttributeSet(duration)},
		active:   []metric.AddOption{metric.WithAttributeSet(layerPriority(r.Layer, p))},
	}
}

func layerPriority(layer, priority string) attribute.Set {
	return attribute.NewSet(attribute.String(telemetry.LabelLayer, layer), attribute.String(telemetry.LabelPriority, priority))
}
