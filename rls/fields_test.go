package rls

import (
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
)

// shareRules: every value under files/* shares one limit of 3, each value
// under own/* has its own.
const shareRules = `
domain: st
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: own
    value: own/*
    rate_limit:
      unit: minute
      requests_per_unit: 3
`

func parseRules(t *testing.T, name, rules string) []Domain {
	t.Helper()
	d, errs := ParseEnvoyConfig(name, []byte(rules))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return []Domain{d}
}

// codes asks one descriptor of key=value per request, and returns the codes.
func overallCodes(t *testing.T, s *Server, domain string, kvs ...string) []pb.RateLimitResponse_Code {
	t.Helper()
	var out []pb.RateLimitResponse_Code
	for _, kv := range kvs {
		out = append(out, ask(t, s, domain, desc(kv)).OverallCode)
	}
	return out
}

func sameCodes(a, b []pb.RateLimitResponse_Code) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestShareThresholdSharesOneCount(t *testing.T) {
	const ok, over = pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT
	run := func(t *testing.T, s *Server) {
		got := overallCodes(t, s, "st", "files=files/a", "files=files/a", "files=files/b", "files=files/b")
		if want := []pb.RateLimitResponse_Code{ok, ok, ok, over}; !sameCodes(got, want) {
			t.Fatalf("shared: %v, want %v", got, want)
		}
		got = overallCodes(t, s, "st", "own=own/a", "own=own/a", "own=own/b", "own=own/b")
		if want := []pb.RateLimitResponse_Code{ok, ok, ok, ok}; !sameCodes(got, want) {
			t.Fatalf("not shared: %v, want %v", got, want)
		}
	}
	t.Run("memory", func(t *testing.T) {
		s, _ := testServer(t, Config{Domains: parseRules(t, "st.yaml", shareRules)})
		run(t, s)
	})
	for _, mode := range []struct {
		name  string
		batch ratelimit.BatchConfig
	}{{"redis-exact", ratelimit.BatchConfig{}}, {"redis-batched", ratelimit.BatchConfig{Fraction: 0.1}}} {
		t.Run(mode.name, func(t *testing.T) {
			// A generous timeout: a round trip slowed by a loaded machine
			// must be waited for, not decided from the local share.
			redistest.Client(t)
			c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			prefix := strings.NewReplacer("{", "(", "}", ")").Replace(redistest.Prefix(t))
			s, err := New(Config{Domains: parseRules(t, "st.yaml", shareRules), Redis: c,
				RedisStore: ratelimit.RedisConfig{Prefix: prefix, ExpectedInstances: 1, Batch: mode.batch, Timeout: 5 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			run(t, s)
		})
	}
}

// events records the policies of the events a server sends.
type events struct{ policies []string }

func (e *events) Observe(ev shed.Event) { e.policies = append(e.policies, ev.Policy) }

func TestShareThresholdMetricNames(t *testing.T) {
	const rules = `
domain: m
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        value_to_metric: true
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: docs
    value: docs/*
    share_threshold: true
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: route
    value_to_metric: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: wild
    value: a*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	ev := &events{}
	s, _ := testServer(t, Config{Domains: parseRules(t, "m.yaml", rules), Observer: ev})
	ask(t, s, "m", desc("files=files/a", "method=GET"))
	ask(t, s, "m", desc("docs=docs/x"))
	ask(t, s, "m", desc("route=draw", "user=u1"))
	ask(t, s, "m", desc("wild=abc"))
	want := []string{"files_files/*.method_GET", "docs_docs/*.docs_docs/*", "route_draw.user", "wild_abc"}
	if strings.Join(ev.policies, " ") != strings.Join(want, " ") {
		t.Fatalf("policies %q, want %q", ev.policies, want)
	}
}

// A hits_addend above the limit is over, and resets with the window, as
// any over request does.
func TestCostAboveLimitResetsWithTheWindow(t *testing.T) {
	s, _ := testServer(t, Config{Domains: parseRules(t, "c.yaml", "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")})
	r, err := s.ShouldRateLimit(t.Context(), &pb.RateLimitRequest{Domain: "c", HitsAddend: 3, Descriptors: wrap(desc("k=v"))})
	if err != nil {
		t.Fatal(err)
	}
	check(t, r.Statuses[0], want{pb.RateLimitResponse_OVER_LIMIT, 2, 50 * time.Second, 2})
}
