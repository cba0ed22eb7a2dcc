package telemetry_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/loadshed/loadshed/internal/telemetry"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/shedotel"
	"github.com/loadshed/loadshed/shedprom"
)

// reportingLayer is a test layer that reports every standard gauge, as the
// layers of this module do between them.
type reportingLayer struct{ *shedtest.Layer }

func (l reportingLayer) ReportGauges(emit func(layerkit.Gauge)) {
	n := l.Name()
	emit(layerkit.Gauge{Layer: n, Name: layerkit.GaugeInFlight, Value: 3})
	emit(layerkit.Gauge{Layer: n, Name: layerkit.GaugeQueued, Value: 1})
	emit(layerkit.Gauge{Layer: n, Name: layerkit.GaugeLimit, Value: 10})
	emit(layerkit.Gauge{Layer: n, Name: layerkit.GaugeFallback, Value: 0})
	for _, p := range shed.Priorities() {
		emit(layerkit.Gauge{Layer: n, Name: layerkit.GaugeUsage, Priority: p, Value: 5})
		emit(layerkit.Gauge{Layer: n, Name: layerkit.GaugeCeiling, Priority: p, Value: 50})
		emit(layerkit.Gauge{Layer: n, Name: layerkit.GaugeShedFraction, Priority: p, Value: 0.5})
		emit(layerkit.Gauge{Layer: n, Name: layerkit.GaugeClientsQueued, Priority: p, Value: 4})
		emit(layerkit.Gauge{Layer: n, Name: layerkit.GaugeFairShare, Priority: p, Value: 0.25})
	}
	emit(layerkit.Gauge{Layer: n, Name: layerkit.GaugeInstances, Value: 2})
	for _, s := range []string{"cpu", "sched_latency", "queue_delay"} {
		emit(layerkit.Gauge{Layer: n, Name: layerkit.GaugeUtilization, Signal: s, Value: 0.7})
	}
	emit(layerkit.Gauge{Layer: n, Name: layerkit.GaugeShedLevel, Value: 1})
	emit(layerkit.Gauge{Layer: n, Name: layerkit.GaugeHeadroom, Value: 0.3})
	emit(layerkit.Gauge{Layer: n, Name: layerkit.GaugeStoreErrors, Value: 7})
	emit(layerkit.Gauge{Layer: n, Name: "custom_reading", Signal: "x", Value: 1})
}

// drive sends every kind of event through obs.
func drive(t *testing.T, obs shed.Observer) {
	t.Helper()
	obs.Observe(shed.Event{Layer: "rate", Policy: "per-key", Priority: shed.Critical, Kind: shed.Admitted,
		Queued: true, Wait: 20 * time.Millisecond})
	obs.Observe(shed.Event{Layer: "rate", Policy: "per-key", Priority: shed.Sheddable, Kind: shed.Rejected, Status: 429})
	obs.Observe(shed.Event{Layer: "rate", Priority: shed.Default, Kind: shed.Rejected, Queued: true, Wait: time.Second})
	obs.Observe(shed.Event{Layer: "rate", Priority: shed.Default, Kind: shed.WouldReject, Fallback: true, Over: true})
	obs.Observe(shed.Event{Layer: "rate", Priority: shed.Critical, Kind: shed.Released, Outcome: shed.Completed,
		Latency: 30 * time.Millisecond})
}

func layers() []shed.Layer { return []shed.Layer{reportingLayer{shedtest.NewLayer("gauges")}} }

// otelRegistry returns a registry that OTel's Prometheus exporter fills
// from a shedotel.Metrics, and the Metrics.
func otelRegistry(t testing.TB) (*prometheus.Registry, *shedotel.Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo(),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := shedotel.NewMetrics(shedotel.Config{MeterProvider: mp, Layers: layers()})
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
}

// series returns "name{label,label,...}" for every family and label set
// gathered, sorted.
func series(t *testing.T, g prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var names []string
			for _, lp := range m.GetLabel() {
				names = append(names, lp.GetName())
			}
			sort.Strings(names)
			set[mf.GetName()+"{"+strings.Join(names, ",")+"} "+mf.GetType().String()] = true
		}
	}
	var out []string
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Both adapters, fed the same events and gauges, give the same metric names,
// label names and types: OTel's through its Prometheus exporter.
func TestAdaptersExportTheSameSeries(t *testing.T) {
	promReg := prometheus.NewRegistry()
	pm, err := shedprom.New(shedprom.Config{Registerer: promReg, Layers: layers()})
	if err != nil {
		t.Fatal(err)
	}
	otelReg, om := otelRegistry(t)
	drive(t, pm)
	drive(t, om)

	native, translated := series(t, promReg), series(t, otelReg)
	if strings.Join(native, "\n") != strings.Join(translated, "\n") {
		t.Errorf("series differ\nshedprom:\n  %s\nshedotel through the Prometheus exporter:\n  %s",
			strings.Join(native, "\n  "), strings.Join(translated, "\n  "))
	}
	// Every catalog entry is exported, under its Prometheus name.
	names := map[string]bool{}
	for _, s := range native {
		names[s[:strings.IndexByte(s, '{')]] = true
	}
	for _, m := range append(append([]telemetry.Metric{}, telemetry.Events...), telemetry.Gauges...) {
		if !names[m.Prom] {
			t.Errorf("%s is not exported", m.Prom)
		}
	}
	if !names["loadshed_custom_reading"] {
		t.Error("a gauge name outside the standard set, reported at New, is not exported")
	}
	for _, reg := range []*prometheus.Registry{promReg, otelReg} {
		problems, err := testutil.GatherAndLint(reg)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}

func TestBothAdaptersCountTheSame(t *testing.T) {
	promReg := prometheus.NewRegistry()
	pm, err := shedprom.New(shedprom.Config{Registerer: promReg})
	if err != nil {
		t.Fatal(err)
	}
	otelReg, om := otelRegistry(t)
	drive(t, pm)
	drive(t, om)
	const want = `
# HELP loadshed_requests_total Decisions by layer, policy, priority and result (admitted, rejected, would_reject in dry run, canceled while waiting).
# TYPE loadshed_requests_total counter
loadshed_requests_total{fallback="false",layer="rate",over="false",policy="",priority="default",result="canceled",status=""} 1
loadshed_requests_total{fallback="false",layer="rate",over="false",policy="per-key",priority="critical",result="admitted",status=""} 1
loadshed_requests_total{fallback="false",layer="rate",over="false",policy="per-key",priority="sheddable",result="rejected",status="429"} 1
loadshed_requests_total{fallback="true",layer="rate",over="true",policy="",priority="default",result="would_reject",status=""} 1
# HELP loadshed_active_request_leases Leases granted through the chain and not yet released, by layer and priority.
# TYPE loadshed_active_request_leases gauge
loadshed_active_request_leases{layer="rate",priority="critical"} 0
loadshed_active_request_leases{layer="rate",priority="default"} 1
`
	for name, reg := range map[string]*prometheus.Registry{"shedprom": promReg, "shedotel": otelReg} {
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "loadshed_requests_total", "loadshed_active_request_leases"); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			var count uint64
			for _, m := range mf.GetMetric() {
				count += m.GetHistogram().GetSampleCount()
			}
			switch mf.GetName() {
			case telemetry.TimeInQueue.Prom:
				if count != 2 {
					t.Errorf("%s: %d queue waits recorded, want 2", name, count)
				}
			case telemetry.LeaseDuration.Prom:
				if count != 1 {
					t.Errorf("%s: %d lease durations recorded, want 1", name, count)
				}
			}
		}
	}
}

// The chain admitting through two layers, with no observer, with one that
// does nothing (the chain's own cost: clock reads, events) and with each
// adapter, in one run: an adapter's cost per request (two decisions and two
// releases) is its row minus noop's.
func BenchmarkChainObserver(b *testing.B) {
	promReg := prometheus.NewRegistry()
	pm, err := shedprom.New(shedprom.Config{Registerer: promReg})
	if err != nil {
		b.Fatal(err)
	}
	_, om := otelRegistry(b)
	for _, bc := range []struct {
		name string
		obs  shed.Observer
	}{
		{"none", nil},
		// The chain's own cost of observing: clock reads and events.
		{"noop", shed.ObserverFunc(func(shed.Event) {})},
		{"shedprom", pm},
		{"shedotel", om},
		{"shedotel+spans", shed.Observers{om, shedotel.SpanEvents{}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := shed.NewChain(shed.Config{Layers: []shed.Layer{shedtest.NewLayer("rate"), shedtest.NewLayer("concurrency")},
				Observer: bc.obs})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			req := shed.Request{Key: "k", Priority: shed.Critical}
			work := func(context.Context) error { return nil }
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Do(ctx, req, work); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestPrometheusConfigErrors(t *testing.T) {
	if _, err := shedprom.New(shedprom.Config{}); err == nil || !strings.Contains(err.Error(), "Config.Registerer") {
		t.Errorf("nil Registerer: err = %v, want one naming Config.Registerer", err)
	}
	reg := prometheus.NewRegistry()
	if _, err := shedprom.New(shedprom.Config{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	_, err := shedprom.New(shedprom.Config{Registerer: reg})
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Errorf("second Metrics on one registry: err = %v, want an AlreadyRegisteredError", err)
	}
}

// One event recorded by each adapter, without the chain: the adapter's own
// cost per decision and per release.
func BenchmarkObserve(b *testing.B) {
	pm, err := shedprom.New(shedprom.Config{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	_, om := otelRegistry(b)
	decision := shed.Event{Layer: "rate", Policy: "per-key", Priority: shed.Critical, Kind: shed.Admitted}
	release := shed.Event{Layer: "rate", Priority: shed.Critical, Kind: shed.Released, Outcome: shed.Completed,
		Latency: 3 * time.Millisecond}
	for _, a := range []struct {
		name string
		obs  shed.Observer
	}{{"shedprom", pm}, {"shedotel", om}} {
		for _, e := range []struct {
			name string
			ev   shed.Event
		}{{"decision", decision}, {"release", release}} {
			b.Run(a.name+"/"+e.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					a.obs.Observe(e.ev)
				}
			})
		}
	}
}
