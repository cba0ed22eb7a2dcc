package configgrpc_test

import (
	"context"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/config/configgrpc"
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
	cfg := configgrpc.Config(b, shedgrpc.Config{})
	if cfg.DefaultPriority != shed.Sheddable || cfg.Priorities["/grpc.testing.TestService/UnaryCall"] != shed.Critical || cfg.Key == nil {
		t.Fatalf("config %+v", cfg)
	}
	opts, err := configgrpc.ServerOptions(b, shedgrpc.Config{})
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

func TestConfigWithoutAFile(t *testing.T) {
	base := shedgrpc.Config{DefaultPriority: shed.Critical}
	if got := configgrpc.Config(&config.Built{}, base); got.DefaultPriority != shed.Critical || got.Key != nil || got.Priorities != nil {
		t.Fatalf("with no file: %+v, want base", got)
	}
}

// exampleFile is a configuration file with a grpc section.
var exampleFile = []byte(`
grpc:
  default_priority: sheddable
  priorities:
    "/grpc.testing.TestService/*": critical
layers:
  - concurrency:
      limit: 100
`)

// A gRPC server guarded by the chain of a configuration file.
func ExampleServerOptions() {
	f, err := config.Parse("loadshed.yaml", exampleFile, config.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	built, err := config.Build(f, config.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer built.Close()
	opts, err := configgrpc.ServerOptions(built, shedgrpc.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, testpb.UnimplementedTestServiceServer{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	_, err = testpb.NewTestServiceClient(conn).UnaryCall(context.Background(), &testpb.SimpleRequest{})
	fmt.Println("admitted by the chain, answered by the service:", status.Code(err))
	// Output:
	// admitted by the chain, answered by the service: Unimplemented
}

// The interceptors' configuration the file's grpc section makes, for
// callers who build them with shedgrpc.New.
func ExampleConfig() {
	f, err := config.Parse("loadshed.yaml", exampleFile, config.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	built, err := config.Build(f, config.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer built.Close()
	cfg := configgrpc.Config(built, shedgrpc.Config{})
	fmt.Println("default:", cfg.DefaultPriority)
	fmt.Println("/grpc.testing.TestService/*:", cfg.Priorities["/grpc.testing.TestService/*"])
	// Output:
	// default: sheddable
	// /grpc.testing.TestService/*: critical
}
