package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// BenchmarkAcquireRelease is the request path without Redis (a fake store;
// the path is the same: it never calls the store). bench/ has the same
// rows on a real Redis, beside the other layers.
func BenchmarkAcquireRelease(b *testing.B) {
	clk := shedtest.NewClock(t0)
	cfg := Config{Capacity: 1 << 40, Interval: 100 * time.Millisecond, Clock: clk}.withDefaults()
	s, err := newLayer(cfg, fakeStore{f: newFakeFleet(clk), id: "a"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.halt()
	ctx := context.Background()
	req := shed.Request{Priority: shed.Default}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		var ls shed.Lease
		for b.Loop() {
			ls, err = s.Acquire(ctx, req)
			ls.Release(shed.Completed)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var ls shed.Lease
			for pb.Next() {
				ls, _ = s.Acquire(ctx, req)
				ls.Release(shed.Completed)
			}
		})
	})
}
