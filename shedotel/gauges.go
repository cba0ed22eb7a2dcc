package shedotel

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/loadshed/loadshed/internal/telemetry"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// gaugeInstrument is one observable instrument and the catalog entry it
// records.
type gaugeInstrument struct {
	metric  telemetry.Metric
	gauge   metric.Float64ObservableGauge
	counter metric.Float64ObservableCounter
}

// registerGauges creates an observable instrument per gauge name (shed's
// standard names and any other the layers report now) and one callback that
// reads every layer. It returns nil when no layer reports gauges.
func registerGauges(meter metric.Meter, layers []shed.Layer) (metric.Registration, error) {
	var reporters []layerkit.GaugeReporter
	for _, l := range layers {
		if r, ok := l.(layerkit.GaugeReporter); ok {
			reporters = append(reporters, r)
		}
	}
	if len(reporters) == 0 {
		return nil, nil
	}
	byName := map[string]*gaugeInstrument{}
	var observables []metric.Observable
	var err error
	add := func(name string) {
		if _, ok := byName[name]; ok || err != nil {
			return
		}
		g := &gaugeInstrument{metric: telemetry.GaugeMetric(name)}
		m := g.metric
		if m.Kind == telemetry.Cumulative {
			g.counter, err = meter.Float64ObservableCounter(m.OTel, metric.WithUnit(m.Unit), metric.WithDescription(m.Help))
			observables = append(observables, g.counter)
		} else {
			g.gauge, err = meter.Float64ObservableGauge(m.OTel, metric.WithUnit(m.Unit), metric.WithDescription(m.Help))
			observables = append(observables, g.gauge)
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", m.OTel, err)
		}
		byName[name] = g
	}
	for _, m := range telemetry.Gauges {
		add(m.Gauge)
	}
	for _, r := range reporters {
		r.ReportGauges(func(x layerkit.Gauge) {
			if telemetry.ValidGaugeName(x.Name) {
				add(x.Name)
			}
		})
	}
	if err != nil {
		return nil, err
	}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, r := range reporters {
			r.ReportGauges(func(x layerkit.Gauge) {
				g, ok := byName[x.Name]
				if !ok {
					return
				}
				attrs := metric.WithAttributeSet(attributesOf(g.metric, x))
				if g.counter != nil {
					o.ObserveFloat64(g.counter, x.Value, attrs)
				} else {
					o.ObserveFloat64(g.gauge, x.Value, attrs)
				}
			})
		}
		return nil
	}, observables...)
}

func attributesOf(m telemetry.Metric, g layerkit.Gauge) attribute.Set {
	vs := m.LabelValues(g)
	kvs := make([]attribute.KeyValue, len(vs))
	for i, v := range vs {
		kvs[i] = attribute.String(m.Labels[i], v)
	}
	return attribute.NewSet(kvs...)
}
