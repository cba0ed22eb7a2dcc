package rls

import (
	"context"
	"os"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// FuzzParseEnvoyConfig: any bytes are a domain or errors, never a panic,
// and what parses compiles or is refused with an error.
func FuzzParseEnvoyConfig(f *testing.F) {
	for _, name := range []string{"api.yaml", "loadshed-extras.yaml", "bad.yaml", "badkey.yaml"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("domain: x\ndescriptors: [{key: a, rate_limit: {unit: second, requests_per_unit: 0}}]"))
	f.Add([]byte("domain: x\ndescriptors: [{key: a, value: '**', rate_limit: {period: 1ns, requests_per_unit: 4294967295, algorithm: token-bucket}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, errs := ParseEnvoyConfig("f.yaml", data)
		if len(errs) > 0 {
			return
		}
		if s, err := New(Config{Domains: []Domain{d}}); err == nil {
			s.Close()
		}
	})
}

// FuzzShouldRateLimit: any request, decoded from any bytes, gets an answer
// or INVALID_ARGUMENT, never a panic.
func FuzzShouldRateLimit(f *testing.F) {
	ds, err := Load("testdata/api.yaml")
	if err != nil {
		f.Fatal(err)
	}
	s, err := New(Config{Domains: ds})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	seed, _ := proto.Marshal(&pb.RateLimitRequest{Domain: "api", HitsAddend: 3, Descriptors: []*rlpb.RateLimitDescriptor{desc("path=/v1/charges", "user=a"), desc("path=/v1/reports/x"), desc("plan=gold")}})
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.RateLimitRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		r, err := s.ShouldRateLimit(context.Background(), &req)
		if err == nil && len(r.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(r.Statuses), len(req.Descriptors))
		}
	})
}
