package layerkit

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// Decisions of a fair queue at overload: 16 goroutines per CPU contend for
// 2 slots, each request with the next key of a pool of 1,000 or 1,000,000
// distinct keys, and give the slot back after yielding once, so that
// nearly every request queues. It reports the heap the
// queue kept (heap-MB, after a collection, against before the run) and
// its decisions per second (ns/op). Memory and time per decision do not
// grow with the number of keys.
func BenchmarkFairQueueKeys(b *testing.B) {
	for _, n := range []int{1_000, 1_000_000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "key-" + strconv.Itoa(i)
		}
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			q, err := NewFairQueue(shed.QueueConfig{MaxLength: 256, MaxWait: time.Second}, Fairness{})
			if err != nil {
				b.Fatal(err)
			}
			var inUse atomic.Int64
			take := func() bool {
				for {
					v := inUse.Load()
					if v >= 2 {
						return false
					}
					if inUse.CompareAndSwap(v, v+1) {
						return true
					}
				}
			}
			giveBack := func() { inUse.Add(-1) }
			var next atomic.Uint64
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			b.ReportAllocs()
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					i := next.Add(1)
					req := shed.Request{Key: keys[i%uint64(n)], Priority: shed.Priorities()[i%3+1]}
					t, _, err := q.WaitRequest(ctx, req, time.Time{}, take, giveBack)
					if err != nil {
						continue
					}
					runtime.Gosched() // hold the slot while the others arrive
					inUse.Add(-1)
					t.Done()
					q.Notify()
				}
			})
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20), "heap-MB")
			runtime.KeepAlive(q)
		})
	}
}
