package rls

import (
	"context"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// benchServer serves the envoyproxy/ratelimit file src, in memory.
func benchServer(b *testing.B, src string) *Server {
	b.Helper()
	d, errs := ParseEnvoyConfig("b.yaml", []byte(src))
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	s, err := New(Config{Domains: []Domain{d}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// benchDecide runs one request of one descriptor of two entries against
// the rule file src (domain b, rule route=/x → user), after warm requests,
// and checks each answer's overall code.
func benchDecide(b *testing.B, src string, warm int, code pb.RateLimitResponse_Code) {
	s := benchServer(b, src)
	req := &pb.RateLimitRequest{Domain: "b", Descriptors: wrap(desc("route=/x", "user=u1"))}
	ctx := context.Background()
	for range warm {
		if _, err := s.ShouldRateLimit(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if r, err := s.ShouldRateLimit(ctx, req); err != nil || r.OverallCode != code {
			b.Fatal(r, err)
		}
	}
}

const benchRule = "domain: b\ndescriptors:\n  - key: route\n    value: /x\n    descriptors:\n      - key: user\n"

// BenchmarkShouldRateLimit is one request of one descriptor of two entries
// against an in-memory fixed window that never fills.
func BenchmarkShouldRateLimit(b *testing.B) {
	benchDecide(b, benchRule+"        rate_limit: {unit: second, requests_per_unit: 4000000000}\n", 0, pb.RateLimitResponse_OK)
}

// Two limits that both admit: each takes its units.
func BenchmarkShouldRateLimitTwoLimits(b *testing.B) {
	benchDecide(b, benchRule+"        rate_limits:\n          - {unit: second, requests_per_unit: 4000000000}\n          - {unit: hour, requests_per_unit: 4000000000}\n", 0, pb.RateLimitResponse_OK)
}

// Two limits, the second refusing: the first's units are given back.
func BenchmarkShouldRateLimitRefund(b *testing.B) {
	benchDecide(b, benchRule+"        rate_limits:\n          - {unit: second, requests_per_unit: 4000000000}\n          - {unit: hour, requests_per_unit: 1}\n", 1, pb.RateLimitResponse_OVER_LIMIT)
}

// A soft limit the key is over, past its overage (one unit, taken by the
// second warm request): every request asks the overage and the key's
// episode.
func BenchmarkShouldRateLimitSoftOver(b *testing.B) {
	benchDecide(b, benchRule+"        rate_limit: {unit: hour, requests_per_unit: 1, mode: soft, overage: 1.0, overage_for: 1h}\n", 2, pb.RateLimitResponse_OVER_LIMIT)
}
