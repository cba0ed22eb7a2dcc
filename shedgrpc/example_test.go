package shedgrpc_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedgrpc"
)

// oneCall is a toy layer for the example: it admits one call, then
// throttles. Real limits come from the ratelimit, concurrency, fleet and
// worker packages.
type oneCall struct{ n atomic.Int64 }

func (*oneCall) Name() string { return "one-call" }

func (l *oneCall) Acquire(_ context.Context, req shed.Request) (shed.Lease, error) {
	fmt.Printf("  %s %s\n", req.Route, req.Priority)
	q := shed.Quota{Policy: "per-key", Limit: 1, Window: time.Minute, Reset: 30 * time.Second}
	if l.n.Add(1) > 1 {
		return shed.Lease{}, shed.Throttled("rate limit exceeded", 2*time.Second, q)
	}
	return shed.NewLease(l), nil
}

func (*oneCall) Release(*shed.Lease, shed.Outcome) {}

type echo struct {
	testpb.UnimplementedTestServiceServer
}

func (echo) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

func ExampleServerOptions() {
	chain, _ := shed.NewChain(shed.Config{Layers: []shed.Layer{&oneCall{}}})

	// The protected server: one line more than an unprotected one.
	srv := grpc.NewServer(shedgrpc.MustServerOptions(chain, shedgrpc.Config{
		Priorities: shedgrpc.MethodPriorities{"/grpc.testing.TestService/*": shed.Critical},
	})...)
	testpb.RegisterTestServiceServer(srv, echo{})

	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()
	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)

	for range 2 {
		var trailer metadata.MD
		_, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpc.Trailer(&trailer))
		fmt.Println(status.Code(err), trailer.Get("grpc-retry-pushback-ms"), trailer.Get("ratelimit"))
	}
	// Output:
	//   /grpc.testing.TestService/UnaryCall critical
	// OK [] []
	//   /grpc.testing.TestService/UnaryCall critical
	// ResourceExhausted [2000] ["per-key";r=0;t=2]
}
