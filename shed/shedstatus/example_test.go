package shedstatus_test

import (
	"context"
	"fmt"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedstatus"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// A Recorder is the chain's observer; a snapshot says what each layer
// admitted and shed, and why.
func ExampleRecorder_Snapshot() {
	clock := shedtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	busy := shedtest.NewLayer("worker")
	layers := []shed.Layer{busy}
	rec, err := shedstatus.New(shedstatus.Config{Layers: layers, Clock: clock})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rec.Close()
	chain, err := shed.NewChain(shed.Config{Layers: layers, Observer: rec})
	if err != nil {
		fmt.Println(err)
		return
	}

	ok := func(context.Context) error { return nil }
	_ = chain.Do(context.Background(), shed.Request{Priority: shed.Critical}, ok)
	busy.Reject(shed.Shed("shedding sheddable work", time.Second))
	_ = chain.Do(context.Background(), shed.Request{Priority: shed.Sheddable, Route: "GET /v1/reports"}, ok)
	clock.Advance(time.Second) // a sample: the rates of the last second

	s := rec.Snapshot(time.Time{})
	for _, p := range s.Layers[0].Priorities {
		if p.AdmittedTotal+p.ShedTotal > 0 {
			fmt.Printf("%s: %.0f/s admitted, %.0f/s shed\n", p.Priority, p.Admitted, p.Shed)
		}
	}
	r := s.Rejections[0]
	fmt.Println(r.Layer, r.Priority, r.Status, r.Reason, r.Route)
	// Output:
	// sheddable: 0/s admitted, 1/s shed
	// critical: 1/s admitted, 0/s shed
	// worker sheddable 503 shedding sheddable work GET /v1/reports
}
