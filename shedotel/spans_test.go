package shedotel_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/shedotel"
)

func TestSpans(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	first, second := shedtest.NewLayer("first"), shedtest.NewLayer("second")
	second.Reject(&shed.Rejection{Status: 503, Reason: "busy", RetryAfter: time.Second})
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{first, second},
		Observer: shed.Observers{shedotel.SpanEvents{}, shedotel.NewLayerSpans(tp)}})
	if err != nil {
		t.Fatal(err)
	}

	// Without a span: nothing recorded, nothing broken.
	if err := chain.Do(context.Background(), shed.Request{}, func(context.Context) error { return nil }); err == nil {
		t.Fatal("want the second layer's rejection")
	}
	if n := len(spans.Ended()); n != 0 {
		t.Fatalf("%d spans recorded for a request without a span", n)
	}

	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	_ = chain.Do(ctx, shed.Request{Priority: shed.Sheddable}, func(context.Context) error { return nil })
	span.End()
	ended := spans.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans, want one per layer and the request's", len(ended))
	}
	request := ended[2]
	for i, want := range []struct{ layer, result string }{{"first", "admitted"}, {"second", "rejected"}} {
		child := ended[i]
		if child.Name() != "loadshed "+want.layer || child.Parent().SpanID() != request.SpanContext().SpanID() {
			t.Errorf("span %d: %q under %v, want %q under the request's span", i, child.Name(), child.Parent().SpanID(), "loadshed "+want.layer)
		}
		ev := request.Events()[i]
		got := map[string]string{}
		for _, a := range ev.Attributes {
			got[string(a.Key)] = a.Value.String()
		}
		if ev.Name != shedotel.DecisionEvent || got["loadshed.layer"] != want.layer || got["loadshed.result"] != want.result ||
			got["loadshed.priority"] != "sheddable" {
			t.Errorf("event %d: %s %v, want %s of %s, result %s", i, ev.Name, got, shedotel.DecisionEvent, want.layer, want.result)
		}
	}
	if got := request.Events()[1].Attributes; len(got) < 4 {
		t.Errorf("the rejection's event lacks its status: %v", got)
	}
}
