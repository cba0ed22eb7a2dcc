package ratelimit

import (
	"context"
	"testing"

	"github.com/loadshed/loadshed/shed"
)

// BenchmarkLayerSoftOver measures a request over its limit and past its
// overage in soft mode: the layer asks the overage and the key's episode,
// and denies. One rule, then two, each over on its own key.
func BenchmarkLayerSoftOver(b *testing.B) {
	ctx := context.WithValue(context.Background(), ipKey{}, "10.1.2.3")
	for _, two := range []bool{false, true} {
		name := "one-rule"
		rules := []Rule{{Name: "per-key", Descriptors: []Descriptor{ByClient}, Store: benchMemory(b, FixedWindow, benchDeny)}}
		if two {
			name = "two-rules"
			rules = append(rules, Rule{Name: "per-ip", Descriptors: []Descriptor{byIP}, Store: benchMemory(b, FixedWindow, benchDeny)})
		}
		l, err := New(Config{Rules: rules, Enforcement: shed.Enforcement{Mode: shed.Soft}})
		if err != nil {
			b.Fatal(err)
		}
		req := shed.Request{Key: "k", Cost: 1}
		for range 3 { // the limit's unit, then the overage's
			if lease, err := l.Acquire(ctx, req); err == nil {
				lease.Release(shed.Completed)
			}
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Acquire(ctx, req); err == nil {
					b.Fatal("admitted past the overage")
				}
			}
		})
		l.Close()
	}
}
