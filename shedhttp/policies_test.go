package shedhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedhttp"
)

// A rate-limit layer with two rules names both in RateLimit-Policy, and
// gives both their remaining units in RateLimit, on every response: not
// only the rule nearest to running out (draft-ietf-httpapi-ratelimit-headers:
// every policy that applies).
func TestEveryRulePolicyIsListed(t *testing.T) {
	perKey, err := ratelimit.NewMemory(ratelimit.FixedWindow, ratelimit.Per(3, time.Minute), ratelimit.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer perKey.Close()
	perRoute, err := ratelimit.NewMemory(ratelimit.FixedWindow, ratelimit.Per(100, time.Minute), ratelimit.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer perRoute.Close()
	layer, err := ratelimit.New(ratelimit.Config{Rules: []ratelimit.Rule{
		{Name: "per-route", Descriptors: []ratelimit.Descriptor{ratelimit.ByRoute}, Store: perRoute},
		{Name: "per-key", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: perKey},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{layer}})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(shedhttp.MustNew(chain, shedhttp.Config{Key: shedhttp.KeyHeader("X-API-Key")}))
	r.Get("/things", func(http.ResponseWriter, *http.Request) {})
	wantPolicy := `"per-route";q=100;w=60, "per-key";q=3;w=60`
	for i, wantLimit := range []string{`"per-route";r=99;t=`, `"per-route";r=98;t=`} {
		req := httptest.NewRequest(http.MethodGet, "/things", nil)
		req.Header.Set("X-API-Key", "k")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		if got := w.Header().Get(shedhttp.HeaderRateLimitPolicy); got != wantPolicy {
			t.Errorf("response %d: RateLimit-Policy %q, want %q", i, got, wantPolicy)
		}
		got := w.Header().Get(shedhttp.HeaderRateLimit)
		if !strings.HasPrefix(got, wantLimit) || !strings.Contains(got, `, "per-key";r=`+string(rune('2'-i))+`;t=`) {
			t.Errorf("response %d: RateLimit %q, want both rules' remaining units", i, got)
		}
	}
}
