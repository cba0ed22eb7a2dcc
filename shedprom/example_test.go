package shedprom_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedprom"
)

func Example() {
	reg := prometheus.NewRegistry()
	inFlight, err := concurrency.New(concurrency.Config{Limit: 1})
	if err != nil {
		panic(err)
	}
	// Layers lets the adapter read their state (layerkit.GaugeReporter) at each scrape.
	metrics, err := shedprom.New(shedprom.Config{Registerer: reg, Layers: []shed.Layer{inFlight}})
	if err != nil {
		panic(err)
	}
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{inFlight}, Observer: metrics})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	_ = chain.Do(ctx, shed.Request{Priority: shed.Critical}, func(ctx context.Context) error {
		// The only slot is taken: a second request is shed.
		return chain.Do(ctx, shed.Request{Priority: shed.Sheddable}, func(context.Context) error { return nil })
	})

	// Serve the registry, outside the chain's middleware:
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))

	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "loadshed_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			fmt.Printf("%s %s %s %s: %v\n", labels["layer"], labels["priority"], labels["result"], labels["status"], m.GetCounter().GetValue())
		}
	}
	// Output:
	// concurrency critical admitted : 1
	// concurrency sheddable rejected 503: 1
}
