package config

import (
	"context"
	"testing"
)

const benchFile = `
layers:
  - ratelimit:
      descriptors:
        - key: key
          rate_limit: {unit: second, requests_per_unit: 1000000000}
  - concurrency: {limit: 1000000}
`

// BenchmarkChainDo and BenchmarkLiveDo compare a built chain's Do with the
// same chain served through a Live, whose only extra work is counting the
// request in and out of its configuration.
func BenchmarkChainDo(b *testing.B) {
	built := mustBuild(b, benchFile, Options{})
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := benchRequest()
		for pb.Next() {
			built.Chain.Do(ctx, req, ok)
		}
	})
}

func BenchmarkLiveDo(b *testing.B) {
	l, _ := open(b, benchFile, Options{})
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := benchRequest()
		for pb.Next() {
			l.Do(ctx, req, ok)
		}
	})
}
