package shedotel_test

import (
	"context"
	"fmt"
	"sort"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedotel"
)

func Example() {
	// A real service passes its MeterProvider (or none: the global one).
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	inFlight, err := concurrency.New(concurrency.Config{Limit: 1})
	if err != nil {
		panic(err)
	}
	metrics, err := shedotel.NewMetrics(shedotel.Config{MeterProvider: mp, Layers: []shed.Layer{inFlight}})
	if err != nil {
		panic(err)
	}
	defer metrics.Close()
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{inFlight},
		Observer: shed.Observers{metrics, shedotel.SpanEvents{}}})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	_ = chain.Do(ctx, shed.Request{Priority: shed.Critical}, func(ctx context.Context) error {
		return chain.Do(ctx, shed.Request{Priority: shed.Sheddable}, func(context.Context) error { return nil })
	})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "loadshed.requests" {
				var lines []string
				for _, dp := range sum.DataPoints {
					p, _ := dp.Attributes.Value("priority")
					r, _ := dp.Attributes.Value("result")
					lines = append(lines, fmt.Sprintf("%s %s %s: %d", sm.Scope.Name, p.AsString(), r.AsString(), dp.Value))
				}
				sort.Strings(lines)
				for _, l := range lines {
					fmt.Println(l)
				}
			}
		}
	}
	// Output:
	// github.com/loadshed/loadshed critical admitted: 1
	// github.com/loadshed/loadshed sheddable rejected: 1
}

// Each layer's decision becomes an event on the request's span.
func ExampleSpanEvents() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	inFlight, err := concurrency.New(concurrency.Config{Limit: 10})
	if err != nil {
		panic(err)
	}
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{inFlight}, Observer: shedotel.SpanEvents{}})
	if err != nil {
		panic(err)
	}

	ctx, span := tp.Tracer("example").Start(context.Background(), "GET /v1/balance")
	_ = chain.Do(ctx, shed.Request{Priority: shed.Default}, func(context.Context) error { return nil })
	span.End()

	for _, e := range spans.Ended()[0].Events() {
		fmt.Print(e.Name)
		for _, a := range e.Attributes {
			switch a.Key {
			case "loadshed.layer", "loadshed.priority", "loadshed.result":
				fmt.Printf(" %s=%s", a.Key, a.Value.String())
			}
		}
		fmt.Println()
	}
	// Output:
	// loadshed.decision loadshed.layer=concurrency loadshed.priority=default loadshed.result=admitted
}

// Wiring go-redis's redisotel: the Redis round trips of the Redis-backed
// layers become spans (children of the request's span) and metrics on the
// same providers as loadshed's own.
func Example_redisotel() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(otel.GetTracerProvider())); err != nil {
		panic(err)
	}
	if err := redisotel.InstrumentMetrics(rdb, redisotel.WithMeterProvider(otel.GetMeterProvider())); err != nil {
		panic(err)
	}

	store, err := ratelimit.NewRedis(rdb, ratelimit.TokenBucket, ratelimit.PerMinute(100), ratelimit.RedisConfig{})
	if err != nil {
		panic(err)
	}
	limits, err := ratelimit.New(ratelimit.Config{Rules: []ratelimit.Rule{
		{Name: "per-key", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: store},
	}})
	if err != nil {
		panic(err)
	}
	defer limits.Close()
	metrics, err := shedotel.NewMetrics(shedotel.Config{Layers: []shed.Layer{limits}}) // the global MeterProvider
	if err != nil {
		panic(err)
	}
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{limits},
		Observer: shed.Observers{metrics, shedotel.SpanEvents{}}})
	if err != nil {
		panic(err)
	}
	_ = chain // chain.Do(ctx, ...) or the HTTP middleware, with ctx carrying the request's span
}
