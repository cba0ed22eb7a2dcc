package config

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/shedhttp"
)

// A rule in shadow_mode is enforced on nobody: with legacy_headers on, no
// response field tells clients of it, admitted or rejected; Options.HTTP's
// ShowDryRun (for testing) shows it.
func TestShadowRulesAreNotShownToClients(t *testing.T) {
	const src = `
http:
  key: {from: header, header: X-API-Key}
  legacy_headers: true
layers:
  - ratelimit:
      descriptors:
        - key: key
          name: per-key
          rate_limit: {unit: minute, requests_per_unit: 3, algorithm: fixed-window}
        - key: key
          name: new-tighter
          rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed-window}
          shadow_mode: true
`
	serve := func(show bool) http.Handler {
		clock := shedtest.NewClock(time.Unix(1_699_999_980, 0)) // a minute's start
		opts := Options{Clock: clock, HTTP: shedhttp.Config{ShowDryRun: show, Clock: clock}}
		mw := mustBuild(t, src, opts).Middleware()
		return mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	}
	h := serve(false)
	for i := 1; i <= 4; i++ {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-API-Key", "k")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if want := map[bool]int{true: 429, false: 200}[i == 4]; rec.Code != want {
			t.Fatalf("request %d: status %d, want %d", i, rec.Code, want)
		}
		for f, v := range rec.Header() {
			if s := strings.Join(v, ", "); strings.Contains(s, "new-tighter") {
				t.Errorf("request %d: %s: %q tells of the shadow rule", i, f, s)
			}
		}
		if strings.Contains(rec.Body.String(), "new-tighter") {
			t.Errorf("request %d: problem document %s tells of the shadow rule", i, rec.Body)
		}
		if got := rec.Header().Get(shedhttp.HeaderXRateLimitLimit); got != "3" {
			t.Errorf("request %d: X-RateLimit-Limit = %q, want the enforced 3", i, got)
		}
		if got, want := rec.Header().Get(shedhttp.HeaderXRateLimitRemaining), max(0, 3-i); got != string(rune('0'+want)) {
			t.Errorf("request %d: X-RateLimit-Remaining = %q, want %d", i, got, want)
		}
		if i == 4 && rec.Header().Get(shedhttp.HeaderRetryAfter) != "60" {
			t.Errorf("request 4: Retry-After = %q, want the enforced rule's 60", rec.Header().Get(shedhttp.HeaderRetryAfter))
		}
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-API-Key", "k")
	rec := httptest.NewRecorder()
	serve(true).ServeHTTP(rec, req)
	if got := rec.Header().Get(shedhttp.HeaderRateLimitPolicy); !strings.Contains(got, "new-tighter") {
		t.Errorf("with ShowDryRun: RateLimit-Policy = %q, want the shadow rule in it", got)
	}
}
