package rls

import (
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

const quotaRules = `
domain: q
descriptors:
  - key: east
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: west
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1}
`

func statusCodes(r *pb.RateLimitResponse) []pb.RateLimitResponse_Code {
	out := []pb.RateLimitResponse_Code{r.OverallCode}
	for _, st := range r.Statuses {
		out = append(out, st.Code)
	}
	return out
}

func TestQuotaModeIsOverOnlyWhenEveryQuotaIs(t *testing.T) {
	const ok, over = pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT
	s, _ := testServer(t, Config{Domains: parseRules(t, "q.yaml", quotaRules)})
	steps := []struct {
		kvs  []string
		want []pb.RateLimitResponse_Code // overall, then each status
	}{
		{[]string{"east=a"}, []pb.RateLimitResponse_Code{ok, ok}},
		// east is spent, west has room: the request passes, east still says over.
		{[]string{"east=a", "west=a"}, []pb.RateLimitResponse_Code{ok, over, ok}},
		// Both spent.
		{[]string{"east=a", "west=a"}, []pb.RateLimitResponse_Code{over, over, over}},
		// A lone quota that is over is every quota of the request.
		{[]string{"east=a"}, []pb.RateLimitResponse_Code{over, over}},
		// An ordinary limit over is over, whatever the quotas say.
		{[]string{"plain=a"}, []pb.RateLimitResponse_Code{ok, ok}},
		{[]string{"east=b", "plain=a"}, []pb.RateLimitResponse_Code{over, ok, over}},
		// An unmatched descriptor is neither quota nor over.
		{[]string{"east=a", "nothing=x"}, []pb.RateLimitResponse_Code{over, over, ok}},
	}
	for i, st := range steps {
		var ds = wrap()
		for _, kv := range st.kvs {
			ds = append(ds, desc(kv))
		}
		if got := statusCodes(ask(t, s, "q", ds...)); !sameCodes(got, st.want) {
			t.Fatalf("step %d %v: %v, want %v", i, st.kvs, got, st.want)
		}
	}

	// Config.QuotaMode: every descriptor is a quota, unmatched ones too.
	g, _ := testServer(t, Config{QuotaMode: true, Domains: parseRules(t, "q.yaml", quotaRules)})
	ask(t, g, "q", desc("plain=a"))
	if got := statusCodes(ask(t, g, "q", desc("plain=a"), desc("nothing=x"))); !sameCodes(got, []pb.RateLimitResponse_Code{ok, over, ok}) {
		t.Fatalf("global quota mode: %v", got)
	}
	if got := statusCodes(ask(t, g, "q", desc("plain=a"))); !sameCodes(got, []pb.RateLimitResponse_Code{over, over}) {
		t.Fatalf("global quota mode, alone: %v", got)
	}
}

func TestResponseDynamicMetadata(t *testing.T) {
	const rules = `
domain: md
descriptors:
  - key: a
    metadata:
      team: search
      tier: {level: 1, tags: [x, y]}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    metadata:
      team: ads
      tier: {zone: eu}
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: free
    metadata: {never: sent}
    rate_limit: {unlimited: true}
`
	s, _ := testServer(t, Config{ResponseDynamicMetadata: true, Domains: parseRules(t, "md.yaml", rules)})
	req := &pb.RateLimitRequest{Domain: "md", HitsAddend: 1, Descriptors: wrap(desc("a=1"), desc("b=2"), desc("free=3"))}
	r1, err := s.ShouldRateLimit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"descriptors":[{"entries":["a=1"]},{"entries":["b=2"]},{"entries":["free=3"]}],"domain":"md","hitsAddend":1,` +
		`"metadata":{"team":"search","tier":{"level":1,"tags":["x","y"],"zone":"eu"}}}`
	if got := canonical(t, r1.DynamicMetadata); got != want {
		t.Fatalf("dynamic metadata\n%s, want\n%s", got, want)
	}
	// a is over now: only b's metadata.
	r2, err := s.ShouldRateLimit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := canonical(t, r2.DynamicMetadata.Fields["metadata"].GetStructValue()); got != `{"team":"ads","tier":{"zone":"eu"}}` {
		t.Fatalf("metadata of the passed rules: %s", got)
	}
	// The rules' own metadata is not changed by the merging.
	if got := canonical(t, r1.DynamicMetadata.Fields["metadata"].GetStructValue()); got != `{"team":"search","tier":{"level":1,"tags":["x","y"],"zone":"eu"}}` {
		t.Fatalf("first response changed: %s", got)
	}
	r3 := ask(t, s, "md", desc("a=9"))
	if got := canonical(t, r3.DynamicMetadata.Fields["metadata"].GetStructValue()); got != `{"team":"search","tier":{"level":1,"tags":["x","y"]}}` {
		t.Fatalf("rule's metadata changed by an earlier merge: %s", got)
	}
	// Off by default.
	d, _ := testServer(t, Config{Domains: parseRules(t, "md.yaml", rules)})
	if r := ask(t, d, "md", desc("a=1")); r.DynamicMetadata != nil {
		t.Fatalf("dynamic metadata without ResponseDynamicMetadata: %v", r.DynamicMetadata)
	}
}

// canonical is a Struct's JSON with sorted names and no spaces.
func canonical(t *testing.T, s *structpb.Struct) string {
	t.Helper()
	b, err := protojson.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := jsonUnmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out, err := jsonMarshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
