package ratelimit

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// The benchmarks run on the system clock, as in production. Allow: a limit
// no benchmark exhausts. Deny: a limit exhausted before the timer starts.
var (
	benchAllow = Limit{Quantity: 1 << 40, Period: time.Hour * 24 * 365, Burst: 1 << 40}
	benchDeny  = Limit{Quantity: 1, Period: time.Hour * 24 * 365, Burst: 1}
)

func benchMemory(b *testing.B, alg Algorithm, l Limit) *Memory {
	b.Helper()
	if alg == SlidingLog && l.Quantity > MaxSlidingLogQuantity {
		// The log keeps an entry per instant; a long run on one key would
		// fill it, so it gets the largest limit it supports, over a short
		// period, which still keeps it from denying within the run.
		l = Limit{Quantity: MaxSlidingLogQuantity, Period: time.Millisecond}
	}
	m, err := NewMemory(alg, l, MemoryConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%09d", i)
	}
	return keys
}

func BenchmarkMemory(b *testing.B) {
	ctx := context.Background()
	keys := benchKeys(100_000)
	for _, alg := range allAlgs {
		for _, path := range []struct {
			name  string
			limit Limit
			want  bool
		}{{"allow", benchAllow, true}, {"deny", benchDeny, false}} {
			prefix := alg.String() + "/" + path.name
			b.Run(prefix+"/hot-key/serial", func(b *testing.B) {
				m := benchMemory(b, alg, path.limit)
				m.Allow(ctx, "hot", 1)
				b.ReportAllocs()
				for b.Loop() {
					m.Allow(ctx, "hot", 1)
				}
				if r, _ := m.Allow(ctx, "hot", 1); r.Allowed != path.want {
					b.Fatalf("measured the wrong path: %+v", r)
				}
			})
			b.Run(prefix+"/hot-key/parallel", func(b *testing.B) {
				m := benchMemory(b, alg, path.limit)
				m.Allow(ctx, "hot", 1)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						m.Allow(ctx, "hot", 1)
					}
				})
			})
			b.Run(prefix+"/100k-keys/parallel", func(b *testing.B) {
				m := benchMemory(b, alg, path.limit)
				for _, k := range keys {
					m.Allow(ctx, k, 1)
				}
				var seq atomic.Uint32
				b.ReportAllocs()
				runtime.GC() // the set-up's garbage is not the decisions' cost
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					// each goroutine walks the keys from its own offset, with
					// a stride, so that goroutines rarely meet on one key
					i := int(seq.Add(1)) * 7919
					for pb.Next() {
						i += 31
						if i >= len(keys) {
							i -= len(keys)
						}
						m.Allow(ctx, keys[i], 1)
					}
				})
			})
		}
	}
}

// BenchmarkLayer measures one request through the layer: one rule per key
// (the common case), and two rules (per IP and per user) at once.
func BenchmarkLayer(b *testing.B) {
	ctx := context.WithValue(context.Background(), ipKey{}, "10.1.2.3")
	keys := benchKeys(10_000)
	for _, two := range []bool{false, true} {
		name := "one-rule"
		rules := []Rule{{Name: "per-key", Descriptors: []Descriptor{ByClient}, Store: benchMemory(b, TokenBucket, benchAllow)}}
		if two {
			name = "two-rules"
			rules = append(rules, Rule{Name: "per-ip", Descriptors: []Descriptor{byIP}, Store: benchMemory(b, TokenBucket, benchAllow)})
		}
		l, err := New(Config{Rules: rules})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name+"/parallel", func(b *testing.B) {
			var seq atomic.Uint32
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1)) * 7919
				// Release goes through an interface, so a lease escapes:
				// one per goroutine, as a chain's Grant holds them.
				lease := new(shed.Lease)
				for pb.Next() {
					i = (i + 31) % len(keys)
					var err error
					*lease, err = l.Acquire(ctx, shed.Request{Key: keys[i], Cost: 1})
					if err != nil {
						b.Error(err)
						return
					}
					lease.Release(shed.Completed)
				}
			})
		})
	}
}

// BenchmarkMemoryBytesPerKey reports the heap one key costs.
func BenchmarkMemoryBytesPerKey(b *testing.B) {
	for _, alg := range allAlgs {
		b.Run(alg.String(), func(b *testing.B) {
			var perKey float64
			for b.Loop() {
				perKey = bytesPerKey(b, alg, 100_000)
			}
			b.ReportMetric(perKey, "bytes/key")
		})
	}
}
