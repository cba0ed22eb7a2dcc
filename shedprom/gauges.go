package shedprom

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loadshed/loadshed/internal/telemetry"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// gauges reads the layers' layerkit.Gauge readings at each scrape.
type gauges struct {
	reporters []layerkit.GaugeReporter
	byName    map[string]gaugeDesc
}

type gaugeDesc struct {
	metric telemetry.Metric
	desc   *prometheus.Desc
	kind   prometheus.ValueType
}

// newGauges returns nil when no layer reports gauges.
func newGauges(layers []shed.Layer) *gauges {
	g := &gauges{byName: map[string]gaugeDesc{}}
	for _, l := range layers {
		if r, ok := l.(layerkit.GaugeReporter); ok {
			g.reporters = append(g.reporters, r)
		}
	}
	if len(g.reporters) == 0 {
		return nil
	}
	add := func(name string) {
		if _, ok := g.byName[name]; ok {
			return
		}
		m := telemetry.GaugeMetric(name)
		kind := prometheus.GaugeValue
		if m.Kind == telemetry.Cumulative {
			kind = prometheus.CounterValue
		}
		g.byName[name] = gaugeDesc{metric: m, desc: prometheus.NewDesc(m.Prom, m.Help, m.Labels, nil), kind: kind}
	}
	for _, m := range telemetry.Gauges {
		add(m.Gauge)
	}
	for _, r := range g.reporters {
		r.ReportGauges(func(x layerkit.Gauge) {
			if telemetry.ValidGaugeName(x.Name) {
				add(x.Name)
			}
		})
	}
	return g
}

func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range g.byName {
		ch <- d.desc
	}
}

// Collect reads every layer. A reading of a name not known at New is
// dropped (a registry checks what it gathers against what was described);
// of two readings with the same labels, the last one counts.
func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	type series struct {
		name   string
		labels string
	}
	seen := map[series]prometheus.Metric{}
	var order []series
	for _, r := range g.reporters {
		r.ReportGauges(func(x layerkit.Gauge) {
			d, ok := g.byName[x.Name]
			if !ok {
				return
			}
			lvs := d.metric.LabelValues(x)
			m, err := prometheus.NewConstMetric(d.desc, d.kind, x.Value, lvs...)
			if err != nil {
				return
			}
			k := series{x.Name, strings.Join(lvs, "\xff")}
			if _, dup := seen[k]; !dup {
				order = append(order, k)
			}
			seen[k] = m
		})
	}
	for _, k := range order {
		ch <- seen[k]
	}
}
