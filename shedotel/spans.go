package shedotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/loadshed/loadshed/internal/telemetry"
	"github.com/loadshed/loadshed/shed"
)

// DecisionEvent is the name of the span event each decision adds.
const DecisionEvent = "loadshed.decision"

// SpanEvents adds each layer's decision as an event ("loadshed.decision") on
// the request's current span, the one in the context Chain.Do, Chain.Acquire
// or the HTTP middleware was given. It starts no span of its own, and costs
// nothing when the span is not recording. Its zero value is ready to use;
// give it to the chain beside Metrics with shed.Observers.
//
// The event's attributes: loadshed.layer, loadshed.policy (when the layer
// named one), loadshed.priority, loadshed.result (admitted, rejected,
// would_reject, canceled), loadshed.wait (seconds spent queued, when it
// waited), loadshed.status (a rejection's HTTP status), loadshed.fallback and
// loadshed.over (when set).
type SpanEvents struct{}

// Observe does nothing: a release has no request context, and a decision
// without one has no span to go on.
func (SpanEvents) Observe(shed.Event) {}

// ObserveContext adds e to ctx's span when it is recording.
func (SpanEvents) ObserveContext(ctx context.Context, e shed.Event) {
	if e.Kind == shed.Released {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent(DecisionEvent, trace.WithAttributes(decisionAttributes(e)...))
}

// LayerSpans records each layer's decision as a span of its own, a child of
// the request's span, from when the layer began deciding to its answer
// (queue waits included), with the attributes SpanEvents gives its events.
// Ask for it when a trace should show where a request waited; SpanEvents is
// the cheaper default. It records nothing for a request without a span.
type LayerSpans struct {
	tracer trace.Tracer
}

// NewLayerSpans returns LayerSpans on tp's tracer (nil: the global
// TracerProvider), under the instrumentation scope ScopeName.
func NewLayerSpans(tp trace.TracerProvider) LayerSpans {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return LayerSpans{tracer: tp.Tracer(ScopeName)}
}

// Observe does nothing: see SpanEvents.Observe.
func (LayerSpans) Observe(shed.Event) {}

// ObserveContext starts and ends a span for e under ctx's span.
func (s LayerSpans) ObserveContext(ctx context.Context, e shed.Event) {
	if e.Kind == shed.Released || s.tracer == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	end := time.Now()
	_, span := s.tracer.Start(ctx, "loadshed "+e.Layer, trace.WithTimestamp(end.Add(-e.Latency)),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(decisionAttributes(e)...))
	span.End(trace.WithTimestamp(end))
}

func decisionAttributes(e shed.Event) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs,
		attribute.String("loadshed.layer", e.Layer),
		attribute.String("loadshed.priority", e.Priority.String()),
		attribute.String("loadshed.result", telemetry.ResultOf(e).String()))
	if e.Policy != "" {
		attrs = append(attrs, attribute.String("loadshed.policy", e.Policy))
	}
	if e.Queued {
		attrs = append(attrs, attribute.Float64("loadshed.wait", e.Wait.Seconds()))
	}
	if e.Status != 0 {
		attrs = append(attrs, attribute.Int("loadshed.status", e.Status))
	}
	if e.Fallback {
		attrs = append(attrs, attribute.Bool("loadshed.fallback", true))
	}
	if e.Over {
		attrs = append(attrs, attribute.Bool("loadshed.over", true))
	}
	return attrs
}
