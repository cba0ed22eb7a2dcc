package shedgrpc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/shedgrpc"
)

const (
	unaryMethod  = "/grpc.testing.TestService/UnaryCall"
	emptyMethod  = "/grpc.testing.TestService/EmptyCall"
	duplexMethod = "/grpc.testing.TestService/FullDuplexCall"
)

// service answers unary calls at once and echoes a duplex stream until the
// client closes it; seen records the priority each handler's context had.
type service struct {
	testpb.UnimplementedTestServiceServer
	mu   sync.Mutex
	seen []shed.Priority
}

func (s *service) record(ctx context.Context) {
	p, _ := shed.PriorityFrom(ctx)
	s.mu.Lock()
	s.seen = append(s.seen, p)
	s.mu.Unlock()
}

func (s *service) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.record(ctx)
	return &testpb.SimpleResponse{}, nil
}

func (s *service) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	s.record(ctx)
	return nil, status.Error(codes.Internal, "broken")
}

func (s *service) FullDuplexCall(st testpb.TestService_FullDuplexCallServer) error {
	s.record(st.Context())
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := st.Send(&testpb.StreamingOutputCallResponse{Payload: m.GetPayload()}); err != nil {
			return err
		}
	}
}

type rig struct {
	layer *shedtest.Layer
	svc   *service
	in    *shedgrpc.Interceptors
	conn  *grpc.ClientConn
	mu    sync.Mutex
	reqs  []shed.Request
}

func (r *rig) client() testpb.TestServiceClient { return testpb.NewTestServiceClient(r.conn) }

func (r *rig) last(t *testing.T) shed.Request {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reqs) == 0 {
		t.Fatal("the layer saw no request")
	}
	return r.reqs[len(r.reqs)-1]
}

// serve starts a real gRPC server on 127.0.0.1 with opts and the services
// register adds, and returns a connection to it; both end with the test.
func serve(t *testing.T, opts []grpc.ServerOption, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	srv := grpc.NewServer(opts...)
	register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// newRig starts a real gRPC server on 127.0.0.1 protected by a chain of one
// test layer, with a health service beside the test service.
func newRig(t *testing.T, cfg shedgrpc.Config) *rig {
	t.Helper()
	r := &rig{layer: shedtest.NewLayer("test"), svc: &service{}}
	r.layer.OnAcquire = func(_ context.Context, req shed.Request) {
		r.mu.Lock()
		r.reqs = append(r.reqs, req)
		r.mu.Unlock()
	}
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{r.layer}})
	if err != nil {
		t.Fatal(err)
	}
	r.in, err = shedgrpc.New(chain, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.conn = serve(t, r.in.ServerOptions(), func(srv *grpc.Server) {
		testpb.RegisterTestServiceServer(srv, r.svc)
		healthpb.RegisterHealthServer(srv, health.NewServer())
	})
	return r
}

func TestUnaryAdmitted(t *testing.T) {
	r := newRig(t, shedgrpc.Config{Priorities: shedgrpc.MethodPriorities{
		unaryMethod:                   shed.Critical,
		"/grpc.testing.TestService/*": shed.Sheddable,
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.client().UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	req := r.last(t)
	if req.Key != "127.0.0.1" || req.Route != unaryMethod || req.Priority != shed.Critical || req.Cost != 1 {
		t.Fatalf("layer saw %+v", req)
	}
	if d, _ := ctx.Deadline(); req.Deadline.IsZero() || req.Deadline.After(d.Add(50*time.Millisecond)) {
		t.Fatalf("deadline %v, call's %v", req.Deadline, d)
	}
	if got := r.layer.Released(shed.Completed); got != 1 {
		t.Fatalf("released completed %d, want 1", got)
	}
	// The service-wide pattern covers the other methods; an Internal error
	// is the server failing.
	if _, err := r.client().EmptyCall(ctx, &testpb.Empty{}); status.Code(err) != codes.Internal {
		t.Fatalf("EmptyCall: %v", err)
	}
	if req := r.last(t); req.Priority != shed.Sheddable || req.Route != emptyMethod {
		t.Fatalf("layer saw %+v", req)
	}
	if got := r.layer.Released(shed.Failed); got != 1 {
		t.Fatalf("released failed %d, want 1", got)
	}
}

func TestRejectionCodesAndTrailers(t *testing.T) {
	r := newRig(t, shedgrpc.Config{})
	ctx := context.Background()
	q := shed.Quota{Policy: "per-key", Limit: 10, Window: time.Minute, Reset: 40 * time.Second}
	for _, tc := range []struct {
		rej      *shed.Rejection
		code     codes.Code
		pushback string
		policy   string
		limit    string
	}{
		{shed.Throttled("rate limit exceeded", 1500*time.Millisecond, q), codes.ResourceExhausted, "1500",
			`"per-key";q=10;w=60`, `"per-key";r=0;t=2`},
		{shed.Shed("overloaded", 250*time.Millisecond, shed.Quota{Policy: "cpu", Limit: 4, Service: true}), codes.Unavailable, "250", "", ""},
	} {
		r.layer.Reject(tc.rej)
		var trailer metadata.MD
		_, err := r.client().UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Trailer(&trailer))
		if st, _ := status.FromError(err); st.Code() != tc.code || st.Message() != tc.rej.Reason {
			t.Fatalf("%v: got %v", tc.rej, err)
		}
		if got := trailer.Get(shedgrpc.RetryPushbackKey); len(got) != 1 || got[0] != tc.pushback {
			t.Fatalf("%v: pushback %q, want %q", tc.rej, got, tc.pushback)
		}
		if got := trailer.Get(shedgrpc.RateLimitPolicyKey); tc.policy == "" && len(got) != 0 || tc.policy != "" && (len(got) != 1 || got[0] != tc.policy) {
			t.Fatalf("%v: policy %q, want %q", tc.rej, got, tc.policy)
		}
		if got := trailer.Get(shedgrpc.RateLimitKey); tc.limit != "" && (len(got) != 1 || got[0] != tc.limit) {
			t.Fatalf("%v: ratelimit %q, want %q", tc.rej, got, tc.limit)
		}
	}
	// A stream is rejected the same way, before its handler runs.
	r.layer.Reject(shed.Shed("overloaded", time.Second))
	st, err := r.client().FullDuplexCall(ctx)
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("stream: %v", err)
	}
	if got := st.Trailer().Get(shedgrpc.RetryPushbackKey); len(got) != 1 || got[0] != "1000" {
		t.Fatalf("stream pushback %q", got)
	}
	if n := len(r.svc.seen); n != 0 {
		t.Fatalf("%d handlers ran for rejected calls", n)
	}
}

func TestHealthIsNeverShed(t *testing.T) {
	r := newRig(t, shedgrpc.Config{})
	r.layer.Reject(shed.Shed("overloaded", time.Second))
	resp, err := healthpb.NewHealthClient(r.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check: %v %v", resp, err)
	}
	if r.layer.Acquired()+r.layer.Rejected() != 0 {
		t.Fatal("the chain ran for a health check")
	}
}

func TestStreamHoldsLeasesForItsLife(t *testing.T) {
	r := newRig(t, shedgrpc.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(ctx context.Context) testpb.TestService_FullDuplexCallClient {
		st, err := r.client().FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := st.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
		}
		return st
	}
	st := open(ctx)
	if held := r.layer.Held(); held != 1 {
		t.Fatalf("held %d leases mid-stream, want 1", held)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
	waitFor(t, func() bool { return r.layer.Released(shed.Completed) == 1 })

	cctx, ccancel := context.WithCancel(ctx)
	open(cctx)
	ccancel() // the client goes away mid-stream
	waitFor(t, func() bool { return r.layer.Released(shed.Dropped) == 1 })
	if held := r.layer.Held(); held != 0 {
		t.Fatalf("held %d leases after both streams ended", held)
	}
}

// waitFor polls cond: the server releases a stream's leases after the
// client has seen its end, on a goroutine of its own.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestKeyMetadataAndProxies(t *testing.T) {
	r := newRig(t, shedgrpc.Config{
		Key:      shedgrpc.KeyMetadata("X-API-Key"),
		ClientIP: shedgrpc.ClientIPConfig{TrustedProxies: []string{"127.0.0.1"}},
	})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k1")
	if _, err := r.client().UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if k := r.last(t).Key; k != "h:x-api-key:k1" {
		t.Fatalf("key %q", k)
	}
	// Without a key, the caller's address: through the trusted proxy
	// (this peer), the rightmost untrusted hop of x-forwarded-for.
	ctx = metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", "6.6.6.6, 203.0.113.9")
	if _, err := r.client().UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if k := r.last(t).Key; k != "203.0.113.9" {
		t.Fatalf("key %q", k)
	}
}

func TestPropagatedPriority(t *testing.T) {
	lowered := func(caller string, p shed.Priority) shed.Priority {
		if caller == "h:x-api-key:batch" {
			return shed.Sheddable
		}
		return shed.Critical + 1 // invalid: keeps p
	}
	for _, tc := range []struct {
		name    string
		prop    propagation.Config
		md      []string
		want    shed.Priority
		ignored int64
	}{
		{"trusted peer", propagation.Config{TrustedPeers: []string{"127.0.0.0/8"}},
			[]string{"loadshed-priority", "critical"}, shed.Critical, 0},
		{"untrusted peer", propagation.Config{TrustedPeers: []string{"10.0.0.0/8"}},
			[]string{"loadshed-priority", "critical"}, shed.Default, 1},
		{"shared token", propagation.Config{TrustedPeers: []string{"10.0.0.0/8"}, Token: "s3cret"},
			[]string{"loadshed-priority", "critical", "loadshed-token", "s3cret"}, shed.Critical, 0},
		{"wrong token", propagation.Config{Token: "s3cret"},
			[]string{"loadshed-priority", "critical", "loadshed-token", "guess"}, shed.Default, 1},
		{"hook lowers", propagation.Config{TrustedPeers: []string{"127.0.0.1"}, Lower: lowered},
			[]string{"loadshed-priority", "critical", "x-api-key", "batch"}, shed.Sheddable, 0},
		{"hook cannot raise", propagation.Config{TrustedPeers: []string{"127.0.0.1"}, Lower: lowered},
			[]string{"loadshed-priority", "sheddable"}, shed.Sheddable, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prop := tc.prop
			r := newRig(t, shedgrpc.Config{Key: shedgrpc.KeyMetadata("x-api-key"), Propagation: &prop})
			ctx := metadata.AppendToOutgoingContext(context.Background(), tc.md...)
			if _, err := r.client().UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
				t.Fatal(err)
			}
			if p := r.last(t).Priority; p != tc.want {
				t.Fatalf("priority %v, want %v", p, tc.want)
			}
			if n := r.in.IgnoredPriorities(); n != tc.ignored {
				t.Fatalf("ignored %d, want %d", n, tc.ignored)
			}
			// The handler's context carries the priority on, for the
			// calls it makes.
			if got := r.svc.seen[len(r.svc.seen)-1]; got != tc.want {
				t.Fatalf("handler's context has %v, want %v", got, tc.want)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	chain, _ := shed.NewChain(shed.Config{Layers: []shed.Layer{shedtest.NewLayer("l")}})
	for _, cfg := range []shedgrpc.Config{
		{Priorities: shedgrpc.MethodPriorities{"payments.Charges/Create": shed.Critical}},
		{Priorities: shedgrpc.MethodPriorities{"/payments.*/Create": shed.Critical}},
		{ClientIP: shedgrpc.ClientIPConfig{TrustedProxies: []string{"proxy.internal"}}},
		{Propagation: &propagation.Config{}},
	} {
		if _, err := shedgrpc.New(chain, cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
	if _, err := shedgrpc.New(nil, shedgrpc.Config{}); err == nil {
		t.Error("nil chain: no error")
	}
	if _, err := shedgrpc.ParseMethodPriorities(map[string]string{"/a.B/*": "urgent"}); err == nil {
		t.Error("unknown word: no error")
	}
}

func TestCanceledWhileQueuedIsNoRejection(t *testing.T) {
	// A layer that returns the context's error (the caller left while
	// queued) gets the context's code, not a rejection's.
	r := newRig(t, shedgrpc.Config{})
	r.layer.Reject(context.Canceled)
	_, err := r.client().UnaryCall(context.Background(), &testpb.SimpleRequest{})
	if status.Code(err) != codes.Unavailable || errors.Is(err, shed.ErrRejected) {
		t.Fatalf("got %v", err)
	}
}

func TestObserverSeesCallsAsHTTPRequests(t *testing.T) {
	var mu sync.Mutex
	var events []shed.Event
	layer := shedtest.NewLayer("test")
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{layer}, Observer: shed.ObserverFunc(func(e shed.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, shedgrpc.MustServerOptions(chain, shedgrpc.Config{}), func(srv *grpc.Server) {
		testpb.RegisterTestServiceServer(srv, &service{})
	})
	client := testpb.NewTestServiceClient(conn)
	if _, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	layer.Reject(shed.Throttled("rate limit exceeded", time.Second))
	_, _ = client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
	mu.Lock()
	defer mu.Unlock()
	want := []struct {
		kind    shed.EventKind
		outcome shed.Outcome
		status  int
	}{{shed.Admitted, 0, 0}, {shed.Released, shed.Completed, 0}, {shed.Rejected, 0, 429}}
	if len(events) != len(want) {
		t.Fatalf("events %+v", events)
	}
	for i, w := range want {
		e := events[i]
		if e.Kind != w.kind || e.Outcome != w.outcome || e.Status != w.status || e.Route != unaryMethod || e.Layer != "test" {
			t.Errorf("event %d: %+v, want %+v", i, e, w)
		}
	}
}

func TestAdmittedCallCarriesRateLimitHeader(t *testing.T) {
	r := newRig(t, shedgrpc.Config{})
	r.layer.Quota = shed.Quota{Policy: "per-key", Limit: 100, Window: time.Minute, Remaining: 99, Reset: 30 * time.Second}
	var header metadata.MD
	if _, err := r.client().UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	if got := header.Get(shedgrpc.RateLimitKey); len(got) != 1 || got[0] != `"per-key";r=99;t=30` {
		t.Fatalf("ratelimit %q", got)
	}
	if got := header.Get(shedgrpc.RateLimitPolicyKey); len(got) != 1 || got[0] != `"per-key";q=100;w=60` {
		t.Fatalf("ratelimit-policy %q", got)
	}
}

func TestDryRunQuotasAreNotShown(t *testing.T) {
	r := newRig(t, shedgrpc.Config{})
	r.layer.Quota = shed.Quota{Policy: "new-limit", Limit: 10, Window: time.Minute, Remaining: 0, Reset: 30 * time.Second, DryRun: true}
	var header metadata.MD
	if _, err := r.client().UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	if got := header.Get(shedgrpc.RateLimitKey); len(got) != 0 {
		t.Fatalf("a limit in dry run is shown: %q", got)
	}
}
