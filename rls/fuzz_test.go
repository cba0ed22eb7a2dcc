package rls

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/loadshed/loadshed/config"
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
	addHostileSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		d, errs := ParseEnvoyConfig("f.yaml", data)
		if len(errs) > 0 {
			for _, e := range errs {
				if e.Line == 0 || e.Column == 0 {
					t.Fatalf("an error without a position: %v", e)
				}
			}
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

// addHostileSeeds adds the files a refusal must cost little (but those of
// close to a megabyte, which the fuzzer would only cut down).
func addHostileSeeds(f *testing.F) {
	for _, c := range hostileEnvoyFiles {
		if len(c.data) < 300<<10 {
			f.Add([]byte(c.data))
		}
	}
	crash, err := os.ReadFile("testdata/hostile/crash.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(crash)
}

// FuzzLoad: whatever the file, Load (either format) returns rules or
// config.Errors whose every error has a position, never a panic.
func FuzzLoad(f *testing.F) {
	for _, name := range []string{"testdata/api.yaml", "testdata/loadshed-extras.yaml", "../examples/loadshed.yaml"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	addHostileSeeds(f)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "f.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ds, err := Load(path)
		if err == nil {
			if s, err := New(Config{Domains: ds}); err == nil {
				s.Close()
			}
			return
		}
		var es config.Errors
		if !errors.As(err, &es) {
			return // a file with no ratelimit layer, or one that could not be read
		}
		for _, e := range es {
			if e.Line == 0 || e.Column == 0 {
				t.Fatalf("an error without a position: %v", e)
			}
		}
	})
}
