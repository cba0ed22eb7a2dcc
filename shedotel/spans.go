package shedotel

import (
	"context"

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
	span.AddEvent(DecisionEvent, trace.WithAttributes(attrs...))
}
