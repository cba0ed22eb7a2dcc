// Package shedotel records loadshed's decisions with OpenTelemetry: metrics
// on a MeterProvider the caller passes (the global one by default), and each
// decision as an event on the request's current span.
//
//	metrics, err := shedotel.NewMetrics(shedotel.Config{MeterProvider: mp, Layers: layers}) // mp nil: the global one
//	chain, err := shed.NewChain(shed.Config{Layers: layers,
//		Observer: shed.Observers{metrics, shedotel.SpanEvents{}}})
//
// Metrics is a shed.Observer; SpanEvents is a shed.ContextObserver. Give the
// chain both with shed.Observers{metrics, shedotel.SpanEvents{}}. Where a
// trace should show each layer as a span of its own (where a request
// waited, say), add LayerSpans.
//
// The instruments, under the instrumentation scope
// "github.com/loadshed/loadshed", are named so that OpenTelemetry's
// Prometheus translation (go.opentelemetry.io/otel/exporters/prometheus,
// by default or with otlptranslator.UnderscoreEscapingWithSuffixes) gives
// the series the shedprom package exports, plus the exporter's otel_scope_*
// labels, and dashboards work with either:
//
//	loadshed.requests                 counter         {request}  -> loadshed_requests_total
//	loadshed.request.time_in_queue    histogram       s          -> loadshed_request_time_in_queue_seconds
//	loadshed.request_lease.duration   histogram       s          -> loadshed_request_lease_duration_seconds
//	loadshed.active_request_leases    updowncounter   {request}  -> loadshed_active_request_leases
//	loadshed.in_flight, .queued, .limit, .fallback, .usage, .ceiling, .instances, .shed_level   gauges
//	loadshed.utilization, .shed_fraction, .headroom   gauges of unit 1 -> loadshed_..._ratio
//	loadshed.store_errors                             counter          -> loadshed_store_errors_total
//
// Attributes are drawn from bounded sets only: layer, policy, priority,
// result (admitted, rejected, would_reject, canceled), status, fallback, over,
// outcome, signal. The gauges are read from layers implementing
// layerkit.GaugeReporter when the MeterProvider collects, never on the request
// path.
package shedotel

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/loadshed/loadshed/internal/telemetry"
	"github.com/loadshed/loadshed/shed"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/loadshed/loadshed"

// Config configures Metrics.
type Config struct {
	// MeterProvider creates the meter (default otel.GetMeterProvider()).
	MeterProvider metric.MeterProvider
	// Layers are read at each collection when they implement
	// layerkit.GaugeReporter (others are skipped). Gauge names outside shed's
	// standard set are recorded when a layer reports them here, at NewMetrics.
	Layers []shed.Layer
}

// Metrics records events as OpenTelemetry metrics. It implements
// shed.ContextObserver and is safe for concurrent use.
//
// The counters (loadshed.requests, loadshed.active_request_leases) are
// kept in atomic counters of its own and reported to the SDK by an
// asynchronous callback at each collection, since the SDK's synchronous
// Add costs hundreds of ns per call; the histograms are recorded as events
// come (the context reaches the SDK, for exemplars). Label sets are bounded,
// so a service keeps far fewer series than the 4096 per metric it tracks;
// decisions of series past that are not counted.
type Metrics struct {
	queue  metric.Float64Histogram
	leases metric.Float64Histogram
	regs   []metric.Registration

	decisions *telemetry.Cache[telemetry.Decision, *decisionSeries]
	active    *telemetry.Cache[activeKey, *counter]
	releases  *telemetry.Cache[telemetry.Release, *releaseSeries]
}

// counter is one series of an asynchronous counter.
type counter struct {
	n     atomic.Int64
	attrs []metric.ObserveOption
}

type activeKey struct {
	layer    string
	priority shed.Priority
}

// The options are made once per series: building them per event would
// allocate.
type decisionSeries struct {
	requests counter
	queue    []metric.RecordOption
	active   *counter // nil for rejections
}

type releaseSeries struct {
	duration []metric.RecordOption
	active   *counter
}

// NewMetrics creates the instruments on cfg.MeterProvider's meter and
// registers the callbacks that report the counters and read the layers'
// gauges.
func NewMetrics(cfg Config) (*Metrics, error) {
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(ScopeName)
	m := &Metrics{}
	var errs []error
	try := func(err error) { errs = append(errs, err) }
	r := telemetry.Requests
	requests, err := meter.Int64ObservableCounter(r.OTel, metric.WithUnit(r.Unit), metric.WithDescription(r.Help))
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
	active, err := meter.Int64ObservableUpDownCounter(a.OTel, metric.WithUnit(a.Unit), metric.WithDescription(a.Help))
	try(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("shedotel: creating instruments: %w", err)
	}
	m.active = telemetry.NewCache(func(k activeKey) *counter {
		return &counter{attrs: []metric.ObserveOption{metric.WithAttributeSet(layerPriority(k.layer, k.priority.String()))}}
	})
	m.decisions = telemetry.NewCache(m.decisionSeries)
	m.releases = telemetry.NewCache(m.releaseSeries)
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.decisions.Range(func(_ telemetry.Decision, s *decisionSeries) bool {
			o.ObserveInt64(requests, s.requests.n.Load(), s.requests.attrs...)
			return true
		})
		m.active.Range(func(_ activeKey, c *counter) bool {
			o.ObserveInt64(active, c.n.Load(), c.attrs...)
			return true
		})
		return nil
	}, requests, active)
	if err != nil {
		return nil, fmt.Errorf("shedotel: registering counters: %w", err)
	}
	m.regs = append(m.regs, reg)
	if reg, err = registerGauges(meter, cfg.Layers); err != nil {
		m.Close()
		return nil, fmt.Errorf("shedotel: registering gauges: %w", err)
	}
	if reg != nil {
		m.regs = append(m.regs, reg)
	}
	return m, nil
}

// Close stops reporting the counters and reading the layers' gauges.
func (m *Metrics) Close() error {
	var errs []error
	for _, r := range m.regs {
		errs = append(errs, r.Unregister())
	}
	m.regs = nil
	return errors.Join(errs...)
}

// Observe records e.
func (m *Metrics) Observe(e shed.Event) { m.ObserveContext(context.Background(), e) }

// ObserveContext records e, passing ctx to the histograms.
func (m *Metrics) ObserveContext(ctx context.Context, e shed.Event) {
	if e.Kind == shed.Released {
		s := m.releases.Get(telemetry.ReleaseOf(e))
		m.leases.Record(ctx, e.Latency.Seconds(), s.duration...)
		s.active.n.Add(-1)
		return
	}
	s := m.decisions.Get(telemetry.DecisionOf(e))
	s.requests.n.Add(1)
	if e.Queued {
		m.queue.Record(ctx, e.Wait.Seconds(), s.queue...)
	}
	if s.active != nil {
		s.active.n.Add(1)
	}
}

func (m *Metrics) decisionSeries(d telemetry.Decision) *decisionSeries {
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
	s := &decisionSeries{queue: []metric.RecordOption{metric.WithAttributeSet(queue)}}
	s.requests.attrs = []metric.ObserveOption{metric.WithAttributeSet(all)}
	if d.Result == telemetry.Admitted || d.Result == telemetry.WouldReject {
		s.active = m.active.Get(activeKey{d.Layer, d.Priority})
	}
	return s
}

func (m *Metrics) releaseSeries(r telemetry.Release) *releaseSeries {
	duration := attribute.NewSet(
		attribute.String(telemetry.LabelLayer, r.Layer),
		attribute.String(telemetry.LabelPriority, r.Priority.String()),
		attribute.String(telemetry.LabelOutcome, r.Outcome.String()),
	)
	return &releaseSeries{
		duration: []metric.RecordOption{metric.WithAttributeSet(duration)},
		active:   m.active.Get(activeKey{r.Layer, r.Priority}),
	}
}

func layerPriority(layer, priority string) attribute.Set {
	return attribute.NewSet(attribute.String(telemetry.LabelLayer, layer), attribute.String(telemetry.LabelPriority, priority))
}
