package config_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedgrpc"
)

func TestGRPCSection(t *testing.T) {
	file := []byte(`
grpc:
  key_metadata: x-api-key
  default_priority: sheddable
  priorities:
    "/grpc.testing.TestService/UnaryCall": critical
layers:
  - concurrency:
      limit: 1
`)
	f, err := config.Parse("loadshed.yaml", file, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := config.Build(f, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := b.GRPCConfig(shedgrpc.Config{})
	if cfg.DefaultPriority != shed.Sheddable || cfg.Priorities["/grpc.testing.TestService/UnaryCall"] != shed.Critical || cfg.Key == nil {
		t.Fatalf("config %+v", cfg)
	}
	opts, err := b.GRPCServerOptions(shedgrpc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// The file's chain guards a real server: the one slot is free, so a
	// call goes through.
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, testpb.UnimplementedTestServiceServer{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := testpb.NewTestServiceClient(conn).UnaryCall(context.Background(), &testpb.SimpleRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("call: %v", err)
	}
}

func TestGRPCSectionErrors(t *testing.T) {
	file := []byte(`
grpc:
  key_metadata: "x api key"
  priorities:
    "payments.Charges/Create": critical
layers:
  - concurrency:
      limit: 1
`)
	_, err := config.Parse("loadshed.yaml", file, config.Options{})
	var errs config.Errors
	if !errors.As(err, &errs) || len(errs) != 2 {
		t.Fatalf("errors: %v", err)
	}
	if !strings.Contains(errs[0].Error(), "grpc.key_metadata") || !strings.Contains(errs[1].Error(), `grpc.priorities["payments.Charges/Create"]`) {
		t.Fatalf("errors: %v", err)
	}
}
