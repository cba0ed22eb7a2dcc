package shed_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"

	"github.com/loadshed/loadshed/shed/layerkit"
)

// nopLayer admits everything and releases nothing, so the benchmarks
// measure the chain alone. It is a pointer, as real layers are: a Layer
// held in an interface costs no allocation to call.
type nopLayer struct{ name string }

func (l *nopLayer) Name() string { return l.name }

func (l *nopLayer) Acquire(context.Context, shed.Request) (shed.Lease, error) {
	lease := shed.NewLease(l)
	lease.Cost = 1
	return lease, nil
}

func (l *nopLayer) Release(*shed.Lease, shed.Outcome) {}

func benchChain(b *testing.B, obs shed.Observer) *shed.Chain {
	b.Helper()
	c, err := shed.NewChain(shed.Config{Layers: []shed.Layer{
		&nopLayer{"ratelimit"}, &nopLayer{"concurrency"}, &nopLayer{"fleet"}, &nopLayer{"worker"},
	}, Observer: obs})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

var benchReq = shed.Request{Key: "k", Route: "GET /v1/things", Priority: shed.Default}

func nothing(context.Context) error { return nil }

// BenchmarkChainDo admits a request through four no-op layers and runs a
// trivial function.
func BenchmarkChainDo(b *testing.B) {
	c := benchChain(b, nil)
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := c.Do(ctx, benchReq, nothing); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := c.Do(ctx, benchReq, nothing); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkChainDoObserved adds an observer, which also reads the clock
// once per layer boundary.
func BenchmarkChainDoObserved(b *testing.B) {
	var n int
	c := benchChain(b, shed.ObserverFunc(func(shed.Event) { n++ }))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(ctx, benchReq, nothing); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWaitQueue measures what a queueing layer pays on its fast path
// (nobody waiting, capacity free: one lock, one take, no allocation) and
// under contention, where requests do queue (a waiter, a channel and a
// timer each).
func BenchmarkWaitQueue(b *testing.B) {
	ctx := context.Background()
	newPool := func(n int64) (take func() bool, put func()) {
		var free atomic.Int64
		free.Store(n)
		take = func() bool {
			for {
				f := free.Load()
				if f <= 0 {
					return false
				}
				if free.CompareAndSwap(f, f-1) {
					return true
				}
			}
		}
		return take, func() { free.Add(1) }
	}
	b.Run("fast-path", func(b *testing.B) {
		q, _ := layerkit.NewWaitQueue(shed.QueueConfig{MaxLength: 64, MaxWait: time.Second})
		take, put := newPool(1)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := q.Wait(ctx, shed.Default, time.Time{}, take, put); err != nil {
				b.Fatal(err)
			}
			put()
			q.Notify()
		}
	})
	b.Run("contended", func(b *testing.B) {
		q, _ := layerkit.NewWaitQueue(shed.QueueConfig{MaxLength: 1 << 16, MaxWait: time.Minute})
		take, put := newPool(2)
		b.ReportAllocs()
		b.SetParallelism(8) // more callers than slots: some queue
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := q.Wait(ctx, shed.Default, time.Time{}, take, put); err != nil {
					b.Error(err)
					return
				}
				put()
				q.Notify()
			}
		})
	})
}

// BenchmarkClockNow is the price of one reading of the system clock, which
// an observed chain pays twice per layer.
func BenchmarkClockNow(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = shed.SystemClock.Now()
	}
}
