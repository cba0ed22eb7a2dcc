package shedprom_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/loadshed/loadshed/shed"

	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/shedprom"
)

// reporter reports whatever its readings are at the time of the call.
type reporter struct {
	*shedtest.Layer
	readings []layerkit.Gauge
}

func (r *reporter) ReportGauges(emit func(layerkit.Gauge)) {
	for _, g := range r.readings {
		emit(g)
	}
}

func TestGaugesAreReadAtScrape(t *testing.T) {
	r := &reporter{Layer: shedtest.NewLayer("pool"), readings: []layerkit.Gauge{
		{Layer: "pool", Name: layerkit.GaugeInFlight, Value: 1},
		{Layer: "pool", Name: "warm_connections", Value: 2}, // not standard, reported at New: exported
	}}
	reg := prometheus.NewRegistry()
	if _, err := shedprom.New(shedprom.Config{Registerer: reg, Layers: []shed.Layer{r, shedtest.NewLayer("silent")}}); err != nil {
		t.Fatal(err)
	}
	// Later readings: a changed value, a duplicate (the last counts), a
	// name first seen now (dropped: it was not described), a bad name.
	r.readings = []layerkit.Gauge{
		{Layer: "pool", Name: layerkit.GaugeInFlight, Value: 5},
		{Layer: "pool", Name: layerkit.GaugeInFlight, Value: 7},
		{Layer: "pool", Name: "warm_connections", Priority: shed.Critical, Value: 3},
		{Layer: "pool", Name: "late_reading", Value: 1},
		{Layer: "pool", Name: "Bad-Name", Value: 1},
		{Layer: "pool", Name: layerkit.GaugeStoreErrors, Value: 4},
	}
	const want = `
# HELP loadshed_in_flight Requests holding a lease at the layer now, as the layer counts them.
# TYPE loadshed_in_flight gauge
loadshed_in_flight{layer="pool"} 7
# HELP loadshed_store_errors_total Calls to the layer's shared store (Redis) that failed.
# TYPE loadshed_store_errors_total counter
loadshed_store_errors_total{layer="pool"} 4
# HELP loadshed_warm_connections A reading the layer reports as "warm_connections".
# TYPE loadshed_warm_connections gauge
loadshed_warm_connections{layer="pool",priority="critical",signal=""} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "loadshed_late_reading"); err != nil || n != 0 {
		t.Errorf("a name first reported after New: %d series (err %v), want 0", n, err)
	}
}
