package rls

import (
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// wildRules: each rule's requests_per_unit tells which one matched.
const wildRules = `
domain: w
descriptors:
  - key: mid
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 11}
  - key: multi
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 12}
  - key: order
    value: a*
    rate_limit: {unit: minute, requests_per_unit: 13}
  - key: order
    value: ab*
    rate_limit: {unit: minute, requests_per_unit: 14}
  - key: order
    value: abc
    rate_limit: {unit: minute, requests_per_unit: 15}
  - key: empty
    rate_limit: {unit: minute, requests_per_unit: 16}
  - key: empty
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 17}
  - key: fo*
    rate_limit: {unit: minute, requests_per_unit: 18}
  - key: lead
    value: "*.json"
    rate_limit: {unit: minute, requests_per_unit: 19}
`

func TestWildcardsMatchAsEnvoy(t *testing.T) {
	s, _ := testServer(t, Config{Domains: parseRules(t, "w.yaml", wildRules)})
	for _, c := range []struct {
		kv    string
		limit uint32 // 0: no rule
	}{
		{"mid=barxyzb", 11},
		{"mid=barb", 11}, // '*' matches nothing too
		{"mid=bar", 0},
		{"mid=xbarb", 0},
		{"multi=fooXbarYbaz", 12},
		{"multi=foobarbaz", 12},
		{"multi=foobazbar", 0},
		{"multi=foobarbazX", 0},
		{"order=abc", 15}, // the value itself first
		{"order=abd", 13}, // then the first pattern of the file
		{"order=zzz", 0},
		{"empty=", 17}, // an empty value is matched by "*" before the key alone
		{"empty=x", 17},
		{"foo=x", 18}, // a '*' in the key matches key_value as a whole
		{"fo=", 18},
		{"lead=a/b.json", 19},
		{"lead=a/b.yaml", 0},
	} {
		st := ask(t, s, "w", desc(c.kv)).Statuses[0]
		got := uint32(0)
		if st.CurrentLimit != nil {
			got = st.CurrentLimit.RequestsPerUnit
		}
		if got != c.limit || st.Code != pb.RateLimitResponse_OK {
			t.Errorf("%s: limit %d (%v), want %d", c.kv, got, st.Code, c.limit)
		}
	}
}

// BenchmarkWildcardMatch matches a value against the tree's patterns,
// the last of which matches.
func BenchmarkWildcardMatch(b *testing.B) {
	root := benchServer(b, wildRules).table.Load().domains["w"]
	es := desc("lead=some/long/path/to/a/file.json").Entries
	b.ReportAllocs()
	for b.Loop() {
		if root.match(es) == nil {
			b.Fatal("no match")
		}
	}
}
