package rls_test

import (
	"context"
	"fmt"
	"log"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/rls"
)

// An envoyproxy/ratelimit file, read as it is, answers ShouldRateLimit in
// memory. Register the server on a grpc.Server with
// pb.RegisterRateLimitServiceServer to serve Envoy.
func Example() {
	domain, errs := rls.ParseEnvoyConfig("api.yaml", []byte(`
domain: api
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 2
`))
	if len(errs) > 0 {
		log.Fatal(errs)
	}
	srv, err := rls.New(rls.Config{Domains: []rls.Domain{domain}})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	req := &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{
		{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}},
	}}
	for range 3 {
		resp, err := srv.ShouldRateLimit(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		st := resp.Statuses[0]
		fmt.Println(resp.OverallCode, st.LimitRemaining, "of", st.CurrentLimit.RequestsPerUnit, "a", st.CurrentLimit.Unit)
	}
	// Output:
	// OK 1 of 2 a MINUTE
	// OK 0 of 2 a MINUTE
	// OVER_LIMIT 0 of 2 a MINUTE
}

// LoadLimited reads rules within limits other than the defaults: here
// fewer descriptors than the file has, so it is refused.
func ExampleLoadLimited() {
	_, err := rls.LoadLimited("testdata/api.yaml", config.Limits{MaxRules: 2})
	fmt.Println(err)
	// Output:
	// testdata/api.yaml:17:12: descriptors[1].descriptors[0]: the file defines more than 2 descriptors, aliases expanded (raise the limit to read it)
}
