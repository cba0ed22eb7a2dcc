package rls

import (
	"context"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// BenchmarkShouldRateLimit is one request of one descriptor of two entries
// against an in-memory fixed window that never fills.
func BenchmarkShouldRateLimit(b *testing.B) {
	d, errs := ParseEnvoyConfig("b.yaml", []byte("domain: b\ndescriptors:\n  - key: route\n    value: /x\n    descriptors:\n      - key: user\n        rate_limit: {unit: second, requests_per_unit: 4000000000}\n"))
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	s, err := New(Config{Domains: []Domain{d}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	req := &pb.RateLimitRequest{Domain: "b", Descriptors: wrap(desc("route=/x", "user=u1"))}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if r, err := s.ShouldRateLimit(ctx, req); err != nil || r.OverallCode != pb.RateLimitResponse_OK {
			b.Fatal(r, err)
		}
	}
}
