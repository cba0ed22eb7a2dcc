package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed/shedstatus"
)

// syncBuffer is a bytes.Buffer the server's goroutines may write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe runs loadshed serve on ephemeral ports until the test ends.
func startServe(t *testing.T, args ...string) (grpcAddr, httpAddr string, logs *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs = &syncBuffer{}
	addrs := make(chan [2]string, 1)
	done := make(chan int, 1)
	args = append([]string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, args...)
	go func() {
		done <- serveContext(ctx, args, logs, func(g, h net.Addr) { addrs <- [2]string{g.String(), h.String()} })
	}()
	select {
	case a := <-addrs:
		t.Cleanup(func() {
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("serve exited %d:\n%s", code, logs)
			}
		})
		return a[0], a[1], logs
	case code := <-done:
		cancel()
		t.Fatalf("serve exited %d:\n%s", code, logs)
	}
	return
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestServeExample(t *testing.T) {
	g, h, _ := startServe(t, "-config", "../../examples/loadshed.yaml")
	conn := dial(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health: %v %v", hc, err)
	}
	client := pb.NewRateLimitServiceClient(conn)
	req := &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "route", Value: "POST /v1/charges"}, {Key: "key", Value: "alice"}}}}}
	var codes []pb.RateLimitResponse_Code
	for range 11 {
		r, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, r.OverallCode)
	}
	// 10 a second, leaky bucket: the eleventh within the second is over.
	if codes[0] != pb.RateLimitResponse_OK || codes[10] != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("codes %v", codes)
	}
	if _, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "api"}); status.Code(err) != 3 {
		t.Fatalf("no descriptors: %v, want INVALID_ARGUMENT", err)
	}
	r, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "other", Descriptors: req.Descriptors})
	if err != nil || r.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("unknown domain: %v %v", r, err)
	}

	resp, err := http.Post("http://"+h+"/json", "application/json", strings.NewReader(`{"domain":"api","descriptors":[{"entries":[{"key":"route","value":"POST /v1/charges"},{"key":"key","value":"alice"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"overallCode":"OVER_LIMIT"`) {
		t.Fatalf("POST /json: %d %s", resp.StatusCode, body)
	}
	if b := get(t, "http://"+h+"/healthz"); b != "OK\n" {
		t.Fatalf("/healthz: %q", b)
	}
	// The status page lists the rules with their counts, and the domain's
	// decisions; / leads to it.
	page := get(t, "http://"+h+"/")
	for _, want := range []string{`data-layer="rls:api"`, `<code>api.route_POST /v1/charges.key</code>`, "loaded at start; no reload since"} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page lacks %s\n%s", want, page)
		}
	}
	var snap shedstatus.Snapshot
	if err := json.Unmarshal([]byte(get(t, "http://"+h+"/debug/loadshed?format=json")), &snap); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range snap.Rules {
		if r.Key == "api.route_POST /v1/charges.key" {
			found = true
			if r.Hits != 12 || r.OverLimit != 2 || r.Limit != "unit=SECOND requests_per_unit=10" {
				t.Errorf("rule %+v, want 12 hits, 2 over", r)
			}
		}
	}
	if !found || len(snap.Layers) != 1 || snap.Layers[0].Name != "rls:api" || snap.Reload == nil || snap.RejectionsTotal != 2 {
		t.Errorf("snapshot: %+v", snap)
	}

	m := get(t, "http://"+h+"/metrics")
	for _, want := range []string{
		`loadshed_rls_responses_total{code="over_limit",domain="api"} 2`,
		`loadshed_rls_responses_total{code="ok",domain="_unknown"} 1`,
		`loadshed_requests_total{fallback="false",layer="rls:api",over="false",policy="route_POST /v1/charges.key",priority="unset",result="rejected",status="429"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s\n%s", want, m)
		}
	}
}

func TestServeMessageLimit(t *testing.T) {
	g, h, _ := startServe(t, "-config", "../../rls/testdata/api.yaml", "-max-msg-bytes", "4096")
	client := pb.NewRateLimitServiceClient(dial(t, g))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	big := &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: strings.Repeat("x", 5000)}}}}}
	if _, err := client.ShouldRateLimit(ctx, big); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("5000-byte message: %v, want RESOURCE_EXHAUSTED", err)
	}
	resp, err := http.Post("http://"+h+"/json", "application/json", strings.NewReader(strings.Repeat(" ", 5000)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("5000-byte body: %d", resp.StatusCode)
	}
}

func TestServeReloadsAndRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	g, _, logs := startServe(t, "-config", dir)
	client := pb.NewRateLimitServiceClient(dial(t, g))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	limitOf := func() uint32 {
		r, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	waitFor := func(what string, ok func() bool) {
		for !ok() {
			if ctx.Err() != nil {
				t.Fatalf("%s: never happened; logs:\n%s", what, logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if l := limitOf(); l != 1 {
		t.Fatalf("limit %d, want 1", l)
	}
	write("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 7}\n")
	waitFor("the new limit", func() bool { return limitOf() == 7 })
	write("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 9}\n")
	waitFor("the bad file refused", func() bool { return strings.Contains(logs.String(), "configuration refused") })
	if !strings.Contains(logs.String(), "api.yaml:4:24") {
		t.Errorf("the refusal does not place the error:\n%s", logs)
	}
	if l := limitOf(); l != 7 {
		t.Fatalf("after a bad file, limit %d, want 7 (the running rules)", l)
	}
}

func TestCheckEnvoyFiles(t *testing.T) {
	code, out, _ := runCmd("check", "../../rls/testdata/api.yaml")
	if code != 0 || !strings.Contains(out, "ok (envoyproxy/ratelimit domains: api)") {
		t.Errorf("check of an envoyproxy/ratelimit file: exit %d, %q", code, out)
	}
	code, _, errOut := runCmd("check", "../../rls/testdata/bad.yaml")
	if code != 1 || !strings.Contains(errOut, "bad.yaml:5:13: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'") || !strings.Contains(errOut, "bad.yaml: 3 errors") {
		t.Errorf("check of a bad file: exit %d\n%s", code, errOut)
	}
}

func TestServeUsage(t *testing.T) {
	if code, _, _ := runCmd("serve"); code != 2 {
		t.Errorf("serve without -config: exit %d, want 2", code)
	}
	if code, _, errOut := runCmd("serve", "-config", "../../rls/testdata/bad.yaml"); code != 1 || !strings.Contains(errOut, "bad.yaml:5:13") {
		t.Errorf("serve of a bad file: exit %d\n%s", code, errOut)
	}
}

func TestServeOnRedis(t *testing.T) {
	redistest.Client(t) // skips, or fails under scripts/test.sh, without a server
	g, h, _ := startServe(t, "-config", "../../rls/testdata/loadshed-extras.yaml", "-redis", redistest.Addr(t))
	client := pb.NewRateLimitServiceClient(dial(t, g))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A value of this run's own: the server keeps other runs' counts.
	req := &pb.RateLimitRequest{Domain: "extras", Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "client", Value: redistest.Prefix(t)}}}}}
	var got []pb.RateLimitResponse_Code
	for range 3 {
		r, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.OverallCode)
	}
	// 2 a second: the third within the second is over (or, when a second
	// turned between the calls, OK again: never over before the third).
	if got[0] != pb.RateLimitResponse_OK || got[1] != pb.RateLimitResponse_OK && got[2] == pb.RateLimitResponse_OK {
		t.Fatalf("codes %v", got)
	}
	if m := get(t, "http://"+h+"/metrics"); strings.Contains(m, `fallback="true"`) {
		t.Errorf("decisions from the fallback with Redis up:\n%s", m)
	}
}

// rawCodec sends bytes as they are, so that a test can send what no
// protobuf library would encode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *(v.(*[]byte)) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

func TestServeInvalidUTF8OnTheWire(t *testing.T) {
	g, _, _ := startServe(t, "-config", "../../rls/testdata/api.yaml")
	conn := dial(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// RateLimitRequest{domain: "\xff\xfe"}: field 1, length 2.
	var out []byte
	err := conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", []byte{0x0a, 0x02, 0xff, 0xfe}, &out, grpc.ForceCodec(rawCodec{}))
	// gRPC's decoder refuses it, as INTERNAL, before the service sees it.
	if c := status.Code(err); c != codes.Internal || !strings.Contains(err.Error(), "invalid UTF-8") {
		t.Fatalf("invalid UTF-8: %v, want INTERNAL from the decoder", err)
	}
	// The server is still there.
	r, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "path", Value: "/healthz"}}}}})
	if err != nil || r.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("after invalid UTF-8: %v %v", r, err)
	}
}

// TestServeGRPCWorkers: with fewer kept workers than calls in flight, and
// with none, every call is answered (a call finding no idle worker gets a
// goroutine of its own).
func TestServeGRPCWorkers(t *testing.T) {
	for _, workers := range []string{"0", "2"} {
		t.Run(workers, func(t *testing.T) {
			g, _, _ := startServe(t, "-config", "../../examples/loadshed.yaml", "-grpc-workers", workers)
			client := pb.NewRateLimitServiceClient(dial(t, g))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			errs := make(chan error, 32)
			for i := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "route", Value: "POST /v1/charges"}, {Key: "key", Value: "k" + string(rune('a'+i))}}}}}
					r, err := client.ShouldRateLimit(ctx, req)
					if err == nil && r.OverallCode != pb.RateLimitResponse_OK {
						err = status.Errorf(codes.Internal, "key %d: %v", i, r.OverallCode)
					}
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}
