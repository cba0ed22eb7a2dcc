package shedclientgrpc_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/shedclient"
	"github.com/loadshed/loadshed/shedclient/internal/instantclock"
	"github.com/loadshed/loadshed/shedclient/shedclientgrpc"
	"github.com/loadshed/loadshed/shedgrpc"
)

type unary struct {
	testpb.UnimplementedTestServiceServer
}

func (unary) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

// grpcRig is a shedgrpc server on 127.0.0.1 with one test layer, and a
// connection through the cooperating client's interceptors.
func grpcRig(t *testing.T, client *shedclient.Client) (*shedtest.Layer, *atomic.Value, testpb.TestServiceClient) {
	t.Helper()
	layer := shedtest.NewLayer("test")
	var seen atomic.Value
	layer.OnAcquire = func(_ context.Context, req shed.Request) { seen.Store(req) }
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{layer}})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(shedgrpc.MustServerOptions(chain, shedgrpc.Config{
		Propagation: &propagation.Config{TrustedPeers: []string{"127.0.0.1"}},
	})...)
	testpb.RegisterTestServiceServer(srv, unary{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(shedclientgrpc.UnaryInterceptor(client)), grpc.WithChainStreamInterceptor(shedclientgrpc.StreamInterceptor(client)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return layer, &seen, testpb.NewTestServiceClient(conn)
}

func TestGRPCPropagationAndQuota(t *testing.T) {
	clock := instantclock.New()
	layer, seen, client := grpcRig(t, shedclient.New(shedclient.Config{Clock: clock, NoWait: true, K: -1}))
	ctx, cancel := context.WithTimeout(shed.WithPriority(context.Background(), shed.Critical), 5*time.Second)
	defer cancel()
	if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if req := seen.Load().(shed.Request); req.Priority != shed.Critical || req.Deadline.IsZero() {
		t.Fatalf("server saw %+v", req)
	}

	q := shed.Quota{Policy: "per-key", Limit: 5, Window: time.Minute, Reset: 20 * time.Second}
	layer.Reject(shed.Throttled("rate limit exceeded", 20*time.Second, q))
	if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("rejected call: %v", err)
	}
	layer.Admit()
	before := layer.Acquired() + layer.Rejected()
	_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
	var qe *shedclient.QuotaError
	if !errors.As(err, &qe) || status.Code(err) != codes.ResourceExhausted || qe.Policy != "per-key" {
		t.Fatalf("call under a spent quota: %v", err)
	}
	if n := layer.Acquired() + layer.Rejected() - before; n != 0 {
		t.Fatalf("%d calls reached the server under a spent quota", n)
	}
	clock.Advance(21 * time.Second)
	if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatalf("after the reset: %v", err)
	}
}

func TestGRPCRetriesWithPushback(t *testing.T) {
	clock := instantclock.New()
	c := shedclient.New(shedclient.Config{Clock: clock, K: -1, RetryBudget: 1,
		Idempotent: func(m string) bool { return m == "/grpc.testing.TestService/UnaryCall" }})
	layer, _, client := grpcRig(t, c)
	var calls atomic.Int64
	layer.OnAcquire = func(context.Context, shed.Request) {
		if calls.Add(1) == 1 {
			layer.Reject(shed.Shed("overloaded", 700*time.Millisecond))
		} else {
			layer.Admit()
		}
	}
	layer.Reject(shed.Shed("overloaded", 700*time.Millisecond))
	if _, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
		t.Fatalf("retried call: %v", err)
	}
	if w := clock.Waits(); len(w) != 1 || w[0] < 700*time.Millisecond {
		t.Fatalf("waited %v before the retry, want >= 700ms (the pushback)", w)
	}
}

func TestGRPCSpentQuotaFromAnAdmittedCallHoldsOnlyItsMethod(t *testing.T) {
	clock := instantclock.New()
	layer, _, client := grpcRig(t, shedclient.New(shedclient.Config{Clock: clock, NoWait: true, K: -1}))
	// The call is admitted with the last unit of its quota: r=0, back in 10s.
	layer.Quota = shed.Quota{Policy: "per-key", Limit: 5, Window: time.Minute, Remaining: 0, Reset: 10 * time.Second}
	if _, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{}); !errors.Is(err, shedclient.ErrThrottled) {
		t.Fatalf("the next call under the spent quota: %v", err)
	}
	// Another method was never said to be under that quota.
	if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("another method: %v", err)
	}
}

func TestGRPCStreamRejectionIsLearnt(t *testing.T) {
	clock := instantclock.New()
	layer, _, client := grpcRig(t, shedclient.New(shedclient.Config{Clock: clock, NoWait: true, K: -1}))
	q := shed.Quota{Policy: "streams", Limit: 2, Window: time.Minute, Reset: 15 * time.Second}
	layer.Reject(shed.Throttled("too many streams", 15*time.Second, q))
	st, err := client.FullDuplexCall(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("first stream: %v", err)
	}
	before := layer.Rejected()
	if _, err := client.FullDuplexCall(context.Background()); !errors.Is(err, shedclient.ErrThrottled) {
		t.Fatalf("a stream under the spent quota: %v", err)
	}
	if layer.Rejected() != before {
		t.Fatal("the second stream reached the server")
	}
}
