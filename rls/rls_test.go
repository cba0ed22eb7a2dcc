package rls

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// start is 10 s into a minute, so that windows of a second and a minute
// do not turn over in a test that does not advance the clock.
var start = time.Date(2026, 1, 1, 12, 0, 10, 0, time.UTC)

func testServer(t *testing.T, cfg Config, files ...string) (*Server, *shedtest.Clock) {
	t.Helper()
	clock := shedtest.NewClock(start)
	cfg.Clock = clock
	for _, f := range files {
		ds, err := Load("testdata/" + f)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Domains = append(cfg.Domains, ds...)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, clock
}

// desc builds a descriptor from "key=value" pairs ("key" alone: no value).
func desc(kvs ...string) *rlpb.RateLimitDescriptor {
	d := &rlpb.RateLimitDescriptor{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func ask(t *testing.T, s *Server, domain string, ds ...*rlpb.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	r, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

type want struct {
	code      pb.RateLimitResponse_Code
	remaining uint32
	reset     time.Duration
	limit     uint32 // requests_per_unit; 0: no current_limit
}

func check(t *testing.T, st *pb.RateLimitResponse_DescriptorStatus, w want) {
	t.Helper()
	got := want{code: st.Code, remaining: st.LimitRemaining, reset: st.DurationUntilReset.AsDuration()}
	if st.CurrentLimit != nil {
		got.limit = st.CurrentLimit.RequestsPerUnit
	}
	if got != w {
		t.Fatalf("status %+v, want %+v", got, w)
	}
}

func TestFixedWindowAsEnvoy(t *testing.T) {
	s, clock := testServer(t, Config{}, "api.yaml")
	for i, rem := range []uint32{2, 1, 0} {
		r := ask(t, s, "api", desc("remote_address=10.0.0.1"))
		if r.OverallCode != pb.RateLimitResponse_OK {
			t.Fatalf("request %d: %v", i, r.OverallCode)
		}
		check(t, r.Statuses[0], want{pb.RateLimitResponse_OK, rem, 50 * time.Second, 3})
	}
	r := ask(t, s, "api", desc("remote_address=10.0.0.1"))
	if r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("4th request: %v", r.OverallCode)
	}
	check(t, r.Statuses[0], want{pb.RateLimitResponse_OVER_LIMIT, 0, 50 * time.Second, 3})
	// A value-less key counts each value apart.
	check(t, ask(t, s, "api", desc("remote_address=10.0.0.2")).Statuses[0], want{pb.RateLimitResponse_OK, 2, 50 * time.Second, 3})
	// The window turns over on the minute, as envoyproxy/ratelimit's does.
	clock.Advance(50 * time.Second)
	check(t, ask(t, s, "api", desc("remote_address=10.0.0.1")).Statuses[0], want{pb.RateLimitResponse_OK, 2, 60 * time.Second, 3})
}

func TestMatching(t *testing.T) {
	s, _ := testServer(t, Config{}, "api.yaml")
	cases := []struct {
		name string
		d    *rlpb.RateLimitDescriptor
		w    want
	}{
		{"value match", desc("path=/v1/charges"), want{pb.RateLimitResponse_OK, 1, time.Second, 2}},
		{"nested, value-less", desc("path=/v1/charges", "user=ann"), want{pb.RateLimitResponse_OK, 4, 50 * time.Second, 5}},
		{"deeper than any rule", desc("path=/v1/charges", "user=ann", "x=y"), want{code: pb.RateLimitResponse_OK}},
		{"no rule for the value", desc("path=/v2"), want{code: pb.RateLimitResponse_OK}},
		{"unknown key", desc("nope=1"), want{code: pb.RateLimitResponse_OK}},
		{"wildcard", desc("path=/v1/reports/7"), want{pb.RateLimitResponse_OK, 0, 50 * time.Second, 1}},
		{"wildcard, each value apart", desc("path=/v1/reports/8"), want{pb.RateLimitResponse_OK, 0, 50 * time.Second, 1}},
		{"wildcard, same value again", desc("path=/v1/reports/7"), want{pb.RateLimitResponse_OVER_LIMIT, 0, 50 * time.Second, 1}},
		{"unlimited", desc("path=/healthz"), want{code: pb.RateLimitResponse_OK, remaining: math.MaxUint32}},
		{"requests_per_unit 0", desc("path=/banned"), want{pb.RateLimitResponse_OVER_LIMIT, 0, time.Second, 0}},
		{"no entries", desc(), want{code: pb.RateLimitResponse_OK}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { check(t, ask(t, s, "api", c.d).Statuses[0], c.w) })
	}
}

func TestOverallAndStatuses(t *testing.T) {
	s, _ := testServer(t, Config{}, "api.yaml")
	ask(t, s, "api", desc("path=/v1/reports/1"))
	r := ask(t, s, "api", desc("remote_address=a"), desc("path=/v1/reports/1"), desc("nope"))
	if r.OverallCode != pb.RateLimitResponse_OVER_LIMIT || len(r.Statuses) != 3 {
		t.Fatalf("overall %v with %d statuses", r.OverallCode, len(r.Statuses))
	}
	check(t, r.Statuses[0], want{pb.RateLimitResponse_OK, 2, 50 * time.Second, 3})
	check(t, r.Statuses[1], want{pb.RateLimitResponse_OVER_LIMIT, 0, 50 * time.Second, 1})
	check(t, r.Statuses[2], want{code: pb.RateLimitResponse_OK})
}

func TestUnknownDomainIsOK(t *testing.T) {
	var domains []string
	s, _ := testServer(t, Config{OnResponse: func(d string, _ pb.RateLimitResponse_Code) { domains = append(domains, d) }}, "api.yaml")
	r := ask(t, s, "nobody", desc("remote_address=a"), desc("x"))
	if r.OverallCode != pb.RateLimitResponse_OK || len(r.Statuses) != 2 || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unknown domain: %v", r)
	}
	if len(domains) != 1 || domains[0] != UnknownDomain {
		t.Fatalf("domain label %q, want %q", domains, UnknownDomain)
	}
}

func TestHitsAddend(t *testing.T) {
	s, _ := testServer(t, Config{}, "api.yaml")
	ctx := context.Background()
	ask := func(req *pb.RateLimitRequest) *pb.RateLimitResponse_DescriptorStatus {
		t.Helper()
		req.Domain = "api"
		r, err := s.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return r.Statuses[0]
	}
	d := desc("path=/v1/charges", "user=bo") // 5 a minute
	check(t, ask(&pb.RateLimitRequest{HitsAddend: 3, Descriptors: []*rlpb.RateLimitDescriptor{d}}), want{pb.RateLimitResponse_OK, 2, 50 * time.Second, 5})
	// Per-descriptor 0: checks without counting.
	d0 := desc("path=/v1/charges", "user=bo")
	d0.HitsAddend = wrapperspb.UInt64(0)
	for range 3 {
		check(t, ask(&pb.RateLimitRequest{HitsAddend: 4, Descriptors: []*rlpb.RateLimitDescriptor{d0}}), want{pb.RateLimitResponse_OK, 2, 50 * time.Second, 5})
	}
	// The descriptor's own overrides the request's.
	d2 := desc("path=/v1/charges", "user=bo")
	d2.HitsAddend = wrapperspb.UInt64(2)
	check(t, ask(&pb.RateLimitRequest{HitsAddend: 4, Descriptors: []*rlpb.RateLimitDescriptor{d2}}), want{pb.RateLimitResponse_OK, 0, 50 * time.Second, 5})
	// Nothing left: a check says over.
	check(t, ask(&pb.RateLimitRequest{Descriptors: []*rlpb.RateLimitDescriptor{d0}}), want{pb.RateLimitResponse_OVER_LIMIT, 0, 50 * time.Second, 5})
	// A huge hits_addend is over, never an error, and resets with the
	// window; what remains is still there.
	huge := desc("path=/v1/charges", "user=cy")
	huge.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	check(t, ask(&pb.RateLimitRequest{Descriptors: []*rlpb.RateLimitDescriptor{huge}}), want{pb.RateLimitResponse_OVER_LIMIT, 5, 50 * time.Second, 5})
	check(t, ask(&pb.RateLimitRequest{HitsAddend: math.MaxUint32, Descriptors: []*rlpb.RateLimitDescriptor{desc("path=/v1/charges", "user=cy")}}), want{pb.RateLimitResponse_OVER_LIMIT, 5, 50 * time.Second, 5})
	// and took nothing.
	check(t, ask(&pb.RateLimitRequest{Descriptors: []*rlpb.RateLimitDescriptor{desc("path=/v1/charges", "user=cy")}}), want{pb.RateLimitResponse_OK, 4, 50 * time.Second, 5})
	// is_negative_hits gives units back.
	neg := desc("path=/v1/charges", "user=bo")
	neg.HitsAddend, neg.IsNegativeHits = wrapperspb.UInt64(3), true
	check(t, ask(&pb.RateLimitRequest{Descriptors: []*rlpb.RateLimitDescriptor{neg}}), want{pb.RateLimitResponse_OK, 3, 50 * time.Second, 5})
}

func TestShadowModeCountsAndAnswersOK(t *testing.T) {
	var events []shed.Event
	s, _ := testServer(t, Config{Observer: shed.ObserverFunc(func(e shed.Event) { events = append(events, e) })}, "api.yaml")
	check(t, ask(t, s, "api", desc("beta=x")).Statuses[0], want{pb.RateLimitResponse_OK, 0, 50 * time.Second, 1})
	r := ask(t, s, "api", desc("beta=x"))
	if r.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("shadow mode: %v", r.OverallCode)
	}
	check(t, r.Statuses[0], want{pb.RateLimitResponse_OK, 0, 50 * time.Second, 1})
	last := events[len(events)-1]
	if last.Kind != shed.WouldReject || last.Layer != "rls:api" || last.Policy != "beta.beta_x" {
		t.Fatalf("shadow event %+v: want admitted, over, detailed policy", last)
	}
	// detailed_metric names stay bounded.
	for i := range 2 * MaxDetailedValues {
		ask(t, s, "api", desc("beta="+strings.Repeat("v", i+1)))
	}
	if p := events[len(events)-1].Policy; p != "beta.other" {
		t.Fatalf("policy past %d values: %q", MaxDetailedValues, p)
	}
}

func TestReplaces(t *testing.T) {
	s, _ := testServer(t, Config{}, "api.yaml")
	r := ask(t, s, "api", desc("plan=free"), desc("plan=gold"))
	check(t, r.Statuses[0], want{code: pb.RateLimitResponse_OK})
	check(t, r.Statuses[1], want{pb.RateLimitResponse_OK, 999, 3590 * time.Second, 1000})
	// Alone, free counts.
	check(t, ask(t, s, "api", desc("plan=free")).Statuses[0], want{pb.RateLimitResponse_OK, 99, 3590 * time.Second, 100})
}

func TestLoadshedAdditions(t *testing.T) {
	s, clock := testServer(t, Config{}, "loadshed-extras.yaml")
	// A ten-second window aligned on the epoch: 12:00:10 starts one.
	for i := range 5 {
		check(t, ask(t, s, "extras", desc("tenant=t")).Statuses[0], want{pb.RateLimitResponse_OK, uint32(4 - i), 10 * time.Second, 5})
	}
	check(t, ask(t, s, "extras", desc("tenant=t")).Statuses[0], want{pb.RateLimitResponse_OVER_LIMIT, 0, 10 * time.Second, 5})
	// Token bucket, burst 2, one back every 500ms.
	check(t, ask(t, s, "extras", desc("bucket=b")).Statuses[0], want{pb.RateLimitResponse_OK, 1, time.Second, 4})
	check(t, ask(t, s, "extras", desc("bucket=b")).Statuses[0], want{pb.RateLimitResponse_OK, 0, time.Second, 4})
	check(t, ask(t, s, "extras", desc("bucket=b")).Statuses[0], want{pb.RateLimitResponse_OVER_LIMIT, 0, time.Second, 4})
	clock.Advance(500 * time.Millisecond)
	check(t, ask(t, s, "extras", desc("bucket=b")).Statuses[0], want{pb.RateLimitResponse_OK, 0, time.Second, 4})
	// Two limits: the tightest reports; the minute's third is the last.
	check(t, ask(t, s, "extras", desc("client=c")).Statuses[0], want{pb.RateLimitResponse_OK, 1, time.Second, 2})
	check(t, ask(t, s, "extras", desc("client=c")).Statuses[0], want{pb.RateLimitResponse_OK, 0, time.Second, 2})
	check(t, ask(t, s, "extras", desc("client=c")).Statuses[0], want{pb.RateLimitResponse_OVER_LIMIT, 0, time.Second, 2})
	clock.Advance(time.Second)
	check(t, ask(t, s, "extras", desc("client=c")).Statuses[0], want{pb.RateLimitResponse_OK, 0, time.Minute, 3})
	// The minute's limit rejects: the second's unit is given back.
	clock.Advance(time.Second)
	r := ask(t, s, "extras", desc("client=c"))
	check(t, r.Statuses[0], want{pb.RateLimitResponse_OVER_LIMIT, 0, 59 * time.Second, 3})
	if r.Statuses[0].CurrentLimit.Name != "per-minute" {
		t.Fatalf("status names %q, want per-minute", r.Statuses[0].CurrentLimit.Name)
	}
}

func TestResponseHeaders(t *testing.T) {
	s, _ := testServer(t, Config{RateLimitHeaders: true, LegacyHeaders: true}, "api.yaml")
	r := ask(t, s, "api", desc("remote_address=a"), desc("path=/v1/charges"))
	got := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	w := map[string]string{
		"RateLimit-Policy": `"charges";q=2;w=1`, "RateLimit": `"charges";r=1;t=1`,
		"x-ratelimit-limit": "2", "x-ratelimit-remaining": "1", "x-ratelimit-reset": "1",
	}
	for k, v := range w {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	s2, _ := testServer(t, Config{}, "api.yaml")
	if r := ask(t, s2, "api", desc("remote_address=a")); len(r.ResponseHeadersToAdd) != 0 {
		t.Fatalf("headers when not enabled: %v", r.ResponseHeadersToAdd)
	}
}

func TestBadInput(t *testing.T) {
	s, _ := testServer(t, Config{MaxDescriptors: 1000, MaxEntries: 8, MaxEntryBytes: 64}, "api.yaml")
	many := make([]*rlpb.RateLimitDescriptor, 1001)
	for i := range many {
		many[i] = desc("remote_address=x")
	}
	cases := []struct {
		name string
		req  *pb.RateLimitRequest
	}{
		{"empty domain", &pb.RateLimitRequest{Descriptors: []*rlpb.RateLimitDescriptor{desc("a")}}},
		{"no descriptors", &pb.RateLimitRequest{Domain: "api"}},
		{"too many descriptors", &pb.RateLimitRequest{Domain: "api", Descriptors: many}},
		{"too many entries", &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{desc("a", "b", "c", "d", "e", "f", "g", "h", "i")}}},
		{"oversized value", &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{desc("remote_address=" + strings.Repeat("x", 65))}}},
		{"invalid UTF-8", &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{desc("remote_address=\xff\xfe")}}},
		{"null descriptor", &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{nil}}},
		{"null entry", &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{nil}}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.ShouldRateLimit(context.Background(), c.req)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("err %v, want INVALID_ARGUMENT", err)
			}
		})
	}
	// A thousand descriptors within the bound are answered, each.
	r, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "api", Descriptors: many[:1000]})
	if err != nil || len(r.Statuses) != 1000 || r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("1000 descriptors: %v, %v", err, r.GetOverallCode())
	}
}

func TestEnvoyConfigErrorsHavePositions(t *testing.T) {
	_, err := LoadEnvoyConfig("testdata/bad.yaml")
	var es config.Errors
	if !errors.As(err, &es) {
		t.Fatalf("err %v, want config.Errors", err)
	}
	want := []string{
		"testdata/bad.yaml:5:13: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'",
		"testdata/bad.yaml:7:8: descriptors[1]: duplicate descriptor composite key \"a\"",
		"testdata/bad.yaml:11:13: descriptors[2].rate_limit.unit: should not specify rate limit unit when unlimited",
	}
	if len(es) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(es), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(es[i].Error(), w) {
			t.Errorf("error %d:\n got %s\nwant %s", i, es[i], w)
		}
	}
	_, err = LoadEnvoyConfig("testdata/badkey.yaml")
	if !errors.As(err, &es) || len(es) != 1 || es[0].Line != 4 || !strings.Contains(es[0].Msg, "ratelimit") {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestLoadDirectoryAndLoadshedFile(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"api.yaml", "loadshed-extras.yaml"} {
		copyFile(t, "testdata/"+f, dir+"/"+f)
	}
	ds, err := Load(dir)
	if err != nil || len(ds) != 2 || ds[0].Name != "api" || ds[1].Name != "extras" {
		t.Fatalf("directory: %v %v", ds, err)
	}
	copyFile(t, "testdata/api.yaml", dir+"/again.yml")
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `domain "api" is already defined`) {
		t.Fatalf("duplicate domain: %v", err)
	}
	// loadshed's own file: its ratelimit sections.
	ds, err = Load("../examples/loadshed.yaml")
	if err != nil || len(ds) != 1 || ds[0].Name != "api" {
		t.Fatalf("examples/loadshed.yaml: %v %v", ds, err)
	}
	s, err := New(Config{Domains: ds})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := ask(t, s, "api", desc("route=POST /v1/charges", "key=k"))
	check(t, r.Statuses[0], want{pb.RateLimitResponse_OK, 9, time.Second, 10})
	// shadow_mode of the reports rule: never over.
	for range 40 {
		if r := ask(t, s, "api", desc("route=GET /v1/reports")); r.OverallCode != pb.RateLimitResponse_OK {
			t.Fatal("shadow rule rejected")
		}
	}
}

func TestRequestLimitOverride(t *testing.T) {
	s, _ := testServer(t, Config{}, "api.yaml")
	d := desc("remote_address=10.0.0.9")
	d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 2} // a minute
	check(t, ask(t, s, "api", d).Statuses[0], want{pb.RateLimitResponse_OK, 0, 50 * time.Second, 1})
	check(t, ask(t, s, "api", d).Statuses[0], want{pb.RateLimitResponse_OVER_LIMIT, 0, 50 * time.Second, 1})
	// Applies to descriptors no rule matches, in known domains only.
	other := desc("nothing=here")
	other.Limit = d.Limit
	check(t, ask(t, s, "api", other).Statuses[0], want{pb.RateLimitResponse_OK, 0, 50 * time.Second, 1})
	check(t, ask(t, s, "nobody", other).Statuses[0], want{code: pb.RateLimitResponse_OK})
	// Unknown unit: ignored, the rules apply.
	bad := desc("remote_address=10.0.0.9")
	bad.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 99}
	check(t, ask(t, s, "api", bad).Statuses[0], want{pb.RateLimitResponse_OK, 2, 50 * time.Second, 3})
}

func TestSoftMode(t *testing.T) {
	var events []shed.Event
	s, clock := testServer(t, Config{Observer: shed.ObserverFunc(func(e shed.Event) { events = append(events, e) })}, "loadshed-extras.yaml")
	code := func(v string) pb.RateLimitResponse_Code {
		t.Helper()
		return ask(t, s, "extras", desc("soft="+v)).OverallCode
	}
	ok, over := pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT
	// Two within the limit, one within the overage (marked).
	for i, w := range []pb.RateLimitResponse_Code{ok, ok, ok} {
		if c := code("a"); c != w {
			t.Fatalf("request %d: %v, want %v", i, c, w)
		}
		if i == 2 && !events[len(events)-1].Over {
			t.Fatal("the overage's admission is not marked Over")
		}
	}
	// 11 s on, same window: the overage has a unit left, but the episode
	// has ended and the cool-down (20 s without a request over the limit)
	// has not passed: the hard limit holds.
	clock.Advance(11 * time.Second)
	if c := code("a"); c != over {
		t.Fatalf("after the episode: %v, want OVER_LIMIT", c)
	}
	// A minute later, cooled down: a new window and a new episode.
	clock.Advance(time.Minute)
	for i, w := range []pb.RateLimitResponse_Code{ok, ok, ok, ok, over} {
		if c := code("a"); c != w {
			t.Fatalf("a minute later, request %d: %v, want %v", i, c, w)
		}
	}
	// Another key has its own episode.
	for i, w := range []pb.RateLimitResponse_Code{ok, ok, ok, ok, over} {
		if c := code("b"); c != w {
			t.Fatalf("key b, request %d: %v, want %v", i, c, w)
		}
	}
}

func TestSoftModeErrors(t *testing.T) {
	_, errs := ParseEnvoyConfig("s.yaml", []byte("domain: s\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2, mode: gentle}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2, overage: 0.5}\n  - key: c\n    rate_limit: {unit: second, requests_per_unit: 2, mode: soft, overage: 20}\n"))
	if len(errs) != 3 {
		t.Fatalf("%d errors, want 3: %v", len(errs), errs)
	}
	for i, want := range []string{`unknown mode "gentle"`, "need mode: soft", "Overage must be"} {
		if !strings.Contains(errs[i].Msg, want) {
			t.Errorf("error %d: %q, want %q", i, errs[i].Msg, want)
		}
	}
}

// A limit in shadow mode is never the one the RateLimit fields name, even
// when it is the tightest or over: a
// client honouring the fields would slow down to a limit nobody enforces.
func TestResponseHeadersLeaveOutShadowLimits(t *testing.T) {
	s, _ := testServer(t, Config{RateLimitHeaders: true, LegacyHeaders: true}, "api.yaml")
	for i, wantRemaining := range []string{"2", "1"} {
		r := ask(t, s, "api", desc("beta=x"), desc("remote_address=a"))
		if r.OverallCode != pb.RateLimitResponse_OK {
			t.Fatalf("request %d: %v, want OK (beta is in shadow mode)", i, r.OverallCode)
		}
		got := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			got[h.Key] = h.Value
		}
		if got["x-ratelimit-limit"] != "3" || got["x-ratelimit-remaining"] != wantRemaining {
			t.Fatalf("request %d: legacy fields %v, want remote_address's limit 3, remaining %s", i, got, wantRemaining)
		}
		for _, k := range []string{"RateLimit", "RateLimit-Policy"} {
			if strings.Contains(got[k], "beta") || strings.Contains(got[k], "q=1") || strings.Contains(got[k], "r=0") {
				t.Fatalf("request %d: %s = %q names the shadow limit", i, k, got[k])
			}
		}
	}
	// Only shadow limits: no fields at all.
	if r := ask(t, s, "api", desc("beta=y")); len(r.ResponseHeadersToAdd) != 0 {
		t.Fatalf("fields from a shadow limit alone: %v", r.ResponseHeadersToAdd)
	}
}
