package shedstatus_test

import (
	"testing"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedstatus"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// BenchmarkObserve is what the Recorder adds to each decision of a chain of
// four layers: the four admissions and four releases of one request, on
// every CPU at once.
func BenchmarkObserve(b *testing.B) {
	names := []string{"ratelimit", "concurrency", "fleet", "worker"}
	var layers []shed.Layer
	for _, n := range names {
		layers = append(layers, shedtest.NewLayer(n))
	}
	rec, err := shedstatus.New(shedstatus.Config{Layers: layers})
	if err != nil {
		b.Fatal(err)
	}
	defer rec.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			for _, n := range names {
				rec.Observe(shed.Event{Layer: n, Priority: shed.Default, Kind: shed.Admitted})
			}
			for _, n := range names {
				rec.Observe(shed.Event{Layer: n, Priority: shed.Default, Kind: shed.Released})
			}
		}
	})
}
