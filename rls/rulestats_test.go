package rls

import "testing"

func TestRulesListedWithTheirCounts(t *testing.T) {
	s, _ := testServer(t, Config{}, "api.yaml")
	for range 5 { // a limit of 3 a minute: 3 admitted (the third near it), 2 over
		ask(t, s, "api", desc("remote_address=10.0.0.1"))
	}
	ask(t, s, "api", desc("path=/banned"))
	got := map[string]RuleStats{}
	var keys []string
	for _, r := range s.Rules() {
		got[r.Key] = r
		keys = append(keys, r.Key)
	}
	if r := got["api.remote_address"]; r.Limit != "unit=MINUTE requests_per_unit=3" || r.Hits != 5 || r.OverLimit != 2 || r.NearLimit != 1 {
		t.Errorf("api.remote_address = %+v", r)
	}
	if r := got["api.path_/banned"]; r.Hits != 1 || r.OverLimit != 1 {
		t.Errorf("api.path_/banned = %+v", r)
	}
	if r, ok := got["api.path_/healthz"]; !ok || r.Limit != "unlimited" {
		t.Errorf("the unlimited rule: %+v, %v", r, ok)
	}
	for i := 1; i < len(keys); i++ {
		if keys[i-1] > keys[i] && keys[i-1][:4] == keys[i][:4] {
			t.Errorf("rules out of order: %q before %q", keys[i-1], keys[i])
		}
	}
}
